//! A minimal IPv4 host: ARP, ICMP echo and UDP, sans-IO.
//!
//! It lets a process be a host on the switch without a kernel interface (the rack's
//! UDP-tunnel mode, where no network namespaces can be made): frames in, frames out,
//! events for the application, and the time passed in by the caller. Datagrams to an
//! address not yet resolved wait for the ARP reply (retried, then dropped and counted).

use std::collections::{HashMap, HashSet, VecDeque};

use wire::arp::{ArpOperation, ArpPacket, ArpRepr};
use wire::ethernet::{EtherType, EthernetAddress, EthernetFrame, EthernetRepr};
use wire::icmpv4::{Icmpv4Packet, Icmpv4Repr};
use wire::ipv4::{Ipv4Address, Ipv4Packet, Ipv4Repr, Protocol};
use wire::udp::{UdpPacket, UdpRepr};

/// ARP entries live this long.
pub const ARP_TTL_NS: u64 = 60_000_000_000;
/// Resend an unanswered ARP request after this long...
pub const ARP_RETRY_NS: u64 = 200_000_000;
/// ...this many times, then drop what waits for it.
pub const ARP_TRIES: u32 = 5;
/// Datagrams held per unresolved address.
pub const PENDING_PER_ADDR: usize = 256;

/// Something for the application.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A UDP datagram to a bound port.
    Udp { src: Ipv4Address, src_port: u16, dst_port: u16, payload: Vec<u8> },
    /// An ICMP echo reply.
    EchoReply { src: Ipv4Address, ident: u16, seq: u16, at_ns: u64 },
}

/// Frames the stack dropped, by reason.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StackStats {
    pub rx_frames: u64,
    pub tx_frames: u64,
    pub rx_malformed: u64,
    pub rx_not_for_us: u64,
    pub rx_unbound_port: u64,
    pub rx_unsupported: u64,
    pub arp_unresolved_drops: u64,
}

#[derive(Debug)]
struct Pending {
    frames: Vec<(Protocol, Vec<u8>)>,
    next_try_ns: u64,
    tries: u32,
}

/// The host.
pub struct HostStack {
    mac: EthernetAddress,
    ip: Ipv4Address,
    prefix_len: u8,
    gateway: Option<Ipv4Address>,
    arp: HashMap<Ipv4Address, (EthernetAddress, u64)>,
    pending: HashMap<Ipv4Address, Pending>,
    bound: HashSet<u16>,
    tx: VecDeque<Vec<u8>>,
    events: VecDeque<Event>,
    stats: StackStats,
}

/// Why a send was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum SendError {
    /// More bytes than fit in one unfragmented datagram on a 1500-byte MTU.
    TooLarge,
    /// Too many datagrams already wait for this address's ARP reply.
    QueueFull,
}

/// Largest UDP payload on a 1500-byte MTU without fragmentation.
pub const MAX_UDP_PAYLOAD: usize = 1500 - 20 - 8;

impl HostStack {
    pub fn new(mac: EthernetAddress, ip: Ipv4Address, prefix_len: u8) -> Self {
        HostStack {
            mac,
            ip,
            prefix_len: prefix_len.min(32),
            gateway: None,
            arp: HashMap::new(),
            pending: HashMap::new(),
            bound: HashSet::new(),
            tx: VecDeque::new(),
            events: VecDeque::new(),
            stats: StackStats::default(),
        }
    }

    /// Off-subnet destinations are sent to this router.
    pub fn set_gateway(&mut self, gw: Option<Ipv4Address>) {
        self.gateway = gw;
    }
    /// A permanent neighbour entry (as `ip neigh ... nud permanent`): `ip` is at `mac`,
    /// never asked for by ARP, never expiring and never replaced by what ARP says. A fabric's
    /// host knows its gateway this way: the switch answers no ARP.
    pub fn set_static_neighbor(&mut self, ip: Ipv4Address, mac: EthernetAddress) {
        self.arp.insert(ip, (mac, u64::MAX));
        if let Some(p) = self.pending.remove(&ip) {
            for (_, packet) in p.frames {
                self.push_frame(mac, EtherType::Ipv4, packet.len(), |b| b.copy_from_slice(&packet));
            }
        }
    }
    pub fn mac(&self) -> EthernetAddress {
        self.mac
    }
    pub fn ip(&self) -> Ipv4Address {
        self.ip
    }
    pub fn stats(&self) -> &StackStats {
        &self.stats
    }
    /// Accept datagrams to `port`.
    pub fn bind_udp(&mut self, port: u16) {
        self.bound.insert(port);
    }
    pub fn unbind_udp(&mut self, port: u16) {
        self.bound.remove(&port);
    }

    fn on_link(&self, a: Ipv4Address) -> bool {
        let mask = if self.prefix_len == 0 { 0 } else { u32::MAX << (32 - self.prefix_len) };
        a.to_u32() & mask == self.ip.to_u32() & mask
    }

    fn next_hop(&self, dst: Ipv4Address) -> Ipv4Address {
        match self.gateway {
            Some(gw) if !self.on_link(dst) && !dst.is_broadcast() => gw,
            _ => dst,
        }
    }

    fn push_frame(&mut self, dst: EthernetAddress, et: EtherType, payload_len: usize, fill: impl FnOnce(&mut [u8])) {
        let mut f = vec![0u8; EthernetFrame::<&[u8]>::HEADER_LEN + payload_len];
        let mut frame = EthernetFrame::new_unchecked(&mut f[..]);
        EthernetRepr { src_addr: self.mac, dst_addr: dst, ethertype: et }.emit(&mut frame);
        fill(frame.payload_mut());
        self.stats.tx_frames += 1;
        self.tx.push_back(f);
    }

    fn send_arp(&mut self, op: ArpOperation, target_mac: EthernetAddress, target_ip: Ipv4Address, dst: EthernetAddress) {
        let repr = ArpRepr::EthernetIpv4 {
            operation: op,
            source_hardware_addr: self.mac,
            source_protocol_addr: self.ip,
            target_hardware_addr: target_mac,
            target_protocol_addr: target_ip,
        };
        self.push_frame(dst, EtherType::Arp, repr.buffer_len(), |b| repr.emit(&mut ArpPacket::new_unchecked(b)));
    }

    /// An IPv4 packet (header built here) carrying `l4`, to `dst`.
    fn ip_frame(&self, dst: Ipv4Address, proto: Protocol, l4: &[u8]) -> Vec<u8> {
        let ip = Ipv4Repr { src_addr: self.ip, dst_addr: dst, next_header: proto, payload_len: l4.len(), hop_limit: 64, tos: 0 };
        let mut v = vec![0u8; ip.buffer_len() + l4.len()];
        ip.emit(&mut Ipv4Packet::new_unchecked(&mut v[..]));
        v[ip.buffer_len()..].copy_from_slice(l4);
        v
    }

    /// Send an IPv4 packet now if the next hop is known, else queue it behind an ARP request.
    fn send_ip(&mut self, dst: Ipv4Address, proto: Protocol, l4: Vec<u8>, now: u64) -> Result<(), SendError> {
        let packet = self.ip_frame(dst, proto, &l4);
        if dst.is_broadcast() {
            self.push_frame(EthernetAddress::BROADCAST, EtherType::Ipv4, packet.len(), |b| b.copy_from_slice(&packet));
            return Ok(());
        }
        let hop = self.next_hop(dst);
        match self.arp.get(&hop) {
            Some((mac, exp)) if *exp > now => {
                let mac = *mac;
                self.push_frame(mac, EtherType::Ipv4, packet.len(), |b| b.copy_from_slice(&packet));
                Ok(())
            }
            _ => {
                let p = self.pending.entry(hop).or_insert(Pending { frames: Vec::new(), next_try_ns: 0, tries: 0 });
                if p.frames.len() >= PENDING_PER_ADDR {
                    return Err(SendError::QueueFull);
                }
                p.frames.push((proto, packet));
                if p.tries == 0 {
                    p.tries = 1;
                    p.next_try_ns = now + ARP_RETRY_NS;
                    self.send_arp(ArpOperation::Request, EthernetAddress([0; 6]), hop, EthernetAddress::BROADCAST);
                }
                Ok(())
            }
        }
    }

    /// Send a UDP datagram.
    pub fn send_udp(&mut self, dst: Ipv4Address, src_port: u16, dst_port: u16, payload: &[u8], now: u64) -> Result<(), SendError> {
        if payload.len() > MAX_UDP_PAYLOAD {
            return Err(SendError::TooLarge);
        }
        let repr = UdpRepr { src_port, dst_port };
        let mut l4 = vec![0u8; repr.buffer_len() + payload.len()];
        repr.emit(&mut UdpPacket::new_unchecked(&mut l4[..]), self.ip, dst, payload.len(), |b| b.copy_from_slice(payload));
        self.send_ip(dst, Protocol::Udp, l4, now)
    }

    /// Send an ICMP echo request.
    pub fn send_ping(&mut self, dst: Ipv4Address, ident: u16, seq: u16, data: &[u8], now: u64) -> Result<(), SendError> {
        let repr = Icmpv4Repr::EchoRequest { ident, seq_no: seq, data };
        let mut l4 = vec![0u8; repr.buffer_len()];
        repr.emit(&mut Icmpv4Packet::new_unchecked(&mut l4[..]));
        self.send_ip(dst, Protocol::Icmp, l4, now)
    }

    /// A frame from the wire.
    pub fn handle(&mut self, now: u64, frame: &[u8]) {
        self.stats.rx_frames += 1;
        let Ok(eth) = EthernetFrame::new_checked(frame) else {
            self.stats.rx_malformed += 1;
            return;
        };
        let dst = eth.dst_addr();
        if dst != self.mac && !dst.is_broadcast() {
            self.stats.rx_not_for_us += 1;
            return;
        }
        match eth.ethertype() {
            EtherType::Arp => self.handle_arp(eth.payload(), now),
            EtherType::Ipv4 => self.handle_ipv4(eth.src_addr(), eth.payload(), now),
            _ => self.stats.rx_unsupported += 1,
        }
    }

    fn learn(&mut self, ip: Ipv4Address, mac: EthernetAddress, now: u64) {
        if self.arp.get(&ip).is_some_and(|(_, exp)| *exp == u64::MAX) {
            return; // a permanent entry
        }
        self.arp.insert(ip, (mac, now + ARP_TTL_NS));
        if let Some(p) = self.pending.remove(&ip) {
            for (_, packet) in p.frames {
                self.push_frame(mac, EtherType::Ipv4, packet.len(), |b| b.copy_from_slice(&packet));
            }
        }
    }

    fn handle_arp(&mut self, payload: &[u8], now: u64) {
        let Ok(pkt) = ArpPacket::new_checked(payload) else {
            self.stats.rx_malformed += 1;
            return;
        };
        let Ok(ArpRepr::EthernetIpv4 { operation, source_hardware_addr, source_protocol_addr, target_protocol_addr, .. }) =
            ArpRepr::parse(&pkt)
        else {
            self.stats.rx_unsupported += 1;
            return;
        };
        if target_protocol_addr != self.ip {
            self.stats.rx_not_for_us += 1;
            return;
        }
        self.learn(source_protocol_addr, source_hardware_addr, now);
        if operation == ArpOperation::Request {
            self.send_arp(ArpOperation::Reply, source_hardware_addr, source_protocol_addr, source_hardware_addr);
        }
    }

    fn handle_ipv4(&mut self, src_mac: EthernetAddress, payload: &[u8], now: u64) {
        let Ok(pkt) = Ipv4Packet::new_checked(payload) else {
            self.stats.rx_malformed += 1;
            return;
        };
        let Ok(ip) = Ipv4Repr::parse(&pkt) else {
            self.stats.rx_malformed += 1;
            return;
        };
        if ip.dst_addr != self.ip && !ip.dst_addr.is_broadcast() {
            self.stats.rx_not_for_us += 1;
            return;
        }
        // Replies go back the way the request came (as hosts do for on-link senders).
        if self.on_link(ip.src_addr) && !self.arp.contains_key(&ip.src_addr) {
            self.arp.insert(ip.src_addr, (src_mac, now + ARP_TTL_NS));
        }
        match ip.next_header {
            Protocol::Udp => {
                let Ok(udp) = UdpPacket::new_checked(pkt.payload()) else {
                    self.stats.rx_malformed += 1;
                    return;
                };
                if UdpRepr::parse(&udp, ip.src_addr, ip.dst_addr, true).is_err() {
                    self.stats.rx_malformed += 1;
                    return;
                }
                if !self.bound.contains(&udp.dst_port()) {
                    self.stats.rx_unbound_port += 1;
                    return;
                }
                self.events.push_back(Event::Udp {
                    src: ip.src_addr,
                    src_port: udp.src_port(),
                    dst_port: udp.dst_port(),
                    payload: udp.payload().to_vec(),
                });
            }
            Protocol::Icmp => {
                let Ok(icmp) = Icmpv4Packet::new_checked(pkt.payload()) else {
                    self.stats.rx_malformed += 1;
                    return;
                };
                match Icmpv4Repr::parse(&icmp) {
                    Ok(Icmpv4Repr::EchoRequest { ident, seq_no, data }) => {
                        let reply = Icmpv4Repr::EchoReply { ident, seq_no, data };
                        let mut l4 = vec![0u8; reply.buffer_len()];
                        reply.emit(&mut Icmpv4Packet::new_unchecked(&mut l4[..]));
                        let _ = self.send_ip(ip.src_addr, Protocol::Icmp, l4, now);
                    }
                    Ok(Icmpv4Repr::EchoReply { ident, seq_no, .. }) => {
                        self.events.push_back(Event::EchoReply { src: ip.src_addr, ident, seq: seq_no, at_ns: now })
                    }
                    Err(_) => self.stats.rx_unsupported += 1,
                }
            }
            _ => self.stats.rx_unsupported += 1,
        }
    }

    /// The next frame to transmit.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.tx.pop_front()
    }

    /// The next event for the application.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) wants to run next.
    pub fn poll_timeout(&self) -> Option<u64> {
        self.pending.values().map(|p| p.next_try_ns).min()
    }

    /// Retry or give up on unanswered ARP requests.
    pub fn handle_timeout(&mut self, now: u64) {
        let due: Vec<Ipv4Address> = self.pending.iter().filter(|(_, p)| p.next_try_ns <= now).map(|(a, _)| *a).collect();
        for a in due {
            let give_up = {
                let p = self.pending.get_mut(&a).expect("due entry exists");
                if p.tries >= ARP_TRIES {
                    true
                } else {
                    p.tries += 1;
                    p.next_try_ns = now + ARP_RETRY_NS;
                    false
                }
            };
            if give_up {
                let p = self.pending.remove(&a).expect("due entry exists");
                self.stats.arp_unresolved_drops += p.frames.len() as u64;
            } else {
                self.send_arp(ArpOperation::Request, EthernetAddress([0; 6]), a, EthernetAddress::BROADCAST);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_neighbor_is_used_without_arp_and_never_replaced() {
        let mut h = HostStack::new(EthernetAddress([2, 0, 0, 0, 0, 1]), Ipv4Address::new(10, 0, 1, 1), 24);
        let gw = Ipv4Address::new(10, 0, 1, 254);
        let router = EthernetAddress([2, 0xfa, 0, 0, 0, 1]);
        h.set_gateway(Some(gw));
        h.set_static_neighbor(gw, router);
        h.send_udp(Ipv4Address::new(10, 0, 2, 1), 5, 6, b"x", 0).unwrap();
        let f = h.poll_transmit().expect("sent at once, no ARP request");
        let eth = EthernetFrame::new_checked(&f[..]).unwrap();
        assert_eq!((eth.dst_addr(), eth.ethertype()), (router, EtherType::Ipv4));
        assert!(h.poll_transmit().is_none());
        // An ARP reply claiming the gateway's address does not move the entry.
        h.learn(gw, EthernetAddress([2, 0, 0, 0, 0, 9]), 1);
        h.send_udp(Ipv4Address::new(10, 0, 2, 1), 5, 6, b"x", u64::MAX - 1).unwrap();
        let f = h.poll_transmit().unwrap();
        assert_eq!(EthernetFrame::new_checked(&f[..]).unwrap().dst_addr(), router);
    }

    fn host(i: u8) -> HostStack {
        HostStack::new(EthernetAddress([2, 0, 0, 0, 0, i]), Ipv4Address::new(10, 0, 0, i), 24)
    }

    /// Deliver every frame each host transmits to the other (a two-port wire).
    fn exchange(a: &mut HostStack, b: &mut HostStack, now: u64) -> usize {
        let mut n = 0;
        loop {
            let mut moved = false;
            while let Some(f) = a.poll_transmit() {
                b.handle(now, &f);
                moved = true;
                n += 1;
            }
            while let Some(f) = b.poll_transmit() {
                a.handle(now, &f);
                moved = true;
                n += 1;
            }
            if !moved {
                return n;
            }
        }
    }

    #[test]
    fn udp_after_arp_resolution() {
        let (mut a, mut b) = (host(1), host(2));
        b.bind_udp(9000);
        a.send_udp(b.ip(), 5000, 9000, b"hello", 0).unwrap();
        a.send_udp(b.ip(), 5000, 9000, b"again", 0).unwrap();
        // ARP request, ARP reply, then the two datagrams.
        assert_eq!(exchange(&mut a, &mut b, 1), 4);
        assert_eq!(b.poll_event(), Some(Event::Udp { src: a.ip(), src_port: 5000, dst_port: 9000, payload: b"hello".to_vec() }));
        assert_eq!(b.poll_event(), Some(Event::Udp { src: a.ip(), src_port: 5000, dst_port: 9000, payload: b"again".to_vec() }));
        // b learnt a from the request: its reply needs no ARP.
        b.bind_udp(1);
        b.send_udp(a.ip(), 9000, 5000, b"back", 2).unwrap();
        a.bind_udp(5000);
        assert_eq!(exchange(&mut a, &mut b, 2), 1);
        assert!(matches!(a.poll_event(), Some(Event::Udp { payload, .. }) if payload == b"back"));
    }

    #[test]
    fn ping_is_answered() {
        let (mut a, mut b) = (host(1), host(2));
        a.send_ping(b.ip(), 7, 1, b"xyz", 0).unwrap();
        exchange(&mut a, &mut b, 5);
        assert_eq!(a.poll_event(), Some(Event::EchoReply { src: b.ip(), ident: 7, seq: 1, at_ns: 5 }));
    }

    #[test]
    fn unresolved_address_is_retried_then_dropped() {
        let mut a = host(1);
        a.send_udp(Ipv4Address::new(10, 0, 0, 99), 1, 2, b"x", 0).unwrap();
        let mut requests = 0;
        while a.poll_transmit().is_some() {
            requests += 1;
        }
        let mut t = 0;
        while let Some(d) = a.poll_timeout() {
            t = d;
            a.handle_timeout(t);
            while a.poll_transmit().is_some() {
                requests += 1;
            }
        }
        assert_eq!(requests, ARP_TRIES);
        assert_eq!(a.stats().arp_unresolved_drops, 1);
        assert!(t >= (ARP_TRIES as u64) * ARP_RETRY_NS);
    }

    #[test]
    fn garbage_and_foreign_frames_are_counted_not_fatal() {
        let mut a = host(1);
        a.handle(0, &[1, 2, 3]);
        let mut f = vec![0u8; 60];
        f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 9]);
        a.handle(0, &f);
        assert_eq!(a.stats().rx_malformed, 1);
        assert_eq!(a.stats().rx_not_for_us, 1);
    }

    #[test]
    fn oversize_datagram_is_refused() {
        let mut a = host(1);
        assert_eq!(a.send_udp(Ipv4Address::new(10, 0, 0, 2), 1, 2, &vec![0; MAX_UDP_PAYLOAD + 1], 0), Err(SendError::TooLarge));
    }
}
