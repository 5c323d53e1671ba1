//! Ethernet/IPv4/UDP frames carrying Hare messages, for hosts that talk to the switch
//! through in-memory or tunnelled ports.

use wire::hare::{Packet, Repr};
use wire::{EtherType, EthernetAddress, EthernetFrame, EthernetRepr, IpProtocol, Ipv4Address, Ipv4Packet, Ipv4Repr, UdpPacket, UdpRepr};

/// One end of a conversation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub mac: EthernetAddress,
    pub ip: Ipv4Address,
    pub port: u16,
}

/// A frame from `src` to `dst` carrying `msg` (UDP checksum filled).
pub fn frame(src: &Endpoint, dst: &Endpoint, msg: &Repr) -> Result<Vec<u8>, wire::Error> {
    let body = msg.to_bytes()?;
    let eth = EthernetRepr { src_addr: src.mac, dst_addr: dst.mac, ethertype: EtherType::Ipv4 };
    let udp = UdpRepr { src_port: src.port, dst_port: dst.port };
    let ip = Ipv4Repr {
        src_addr: src.ip,
        dst_addr: dst.ip,
        next_header: IpProtocol::Udp,
        payload_len: udp.buffer_len() + body.len(),
        hop_limit: 64,
        tos: 0,
    };
    let mut buf = vec![0u8; eth.buffer_len() + ip.buffer_len() + ip.payload_len];
    let mut f = EthernetFrame::new_unchecked(&mut buf[..]);
    eth.emit(&mut f);
    let mut p = Ipv4Packet::new_unchecked(f.payload_mut());
    ip.emit(&mut p);
    let mut d = UdpPacket::new_unchecked(p.payload_mut());
    udp.emit(&mut d, src.ip, dst.ip, body.len(), |b| b.copy_from_slice(&body));
    Ok(buf)
}

/// The Hare message of a frame, with the sender's IPv4 address and UDP port.
pub fn parse(frame: &[u8]) -> Result<(Repr, Ipv4Address, u16), wire::Error> {
    let f = EthernetFrame::new_checked(frame)?;
    if f.ethertype() != EtherType::Ipv4 {
        return Err(wire::Error::Unsupported);
    }
    let ip = Ipv4Packet::new_checked(f.payload())?;
    let udp = UdpPacket::new_checked(ip.payload())?;
    let msg = Repr::parse(&Packet::new_checked(udp.payload())?)?;
    Ok((msg, ip.src_addr(), udp.src_port()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::hare::Op;

    #[test]
    fn frame_roundtrip() {
        let a = Endpoint { mac: EthernetAddress([2, 0, 0, 0, 0, 1]), ip: Ipv4Address::new(10, 0, 0, 1), port: 7371 };
        let b = Endpoint { mac: EthernetAddress([2, 0, 0, 0, 0, 2]), ip: Ipv4Address::new(10, 0, 0, 2), port: 7370 };
        let m =
            Repr { op: Op::Put, flags: 0, seq: 3, hit_index: 0, aux: 0, status: 0, key: b"k".to_vec(), key_field: 8, value: vec![1; 16] };
        let f = frame(&a, &b, &m).unwrap();
        let (r, ip, port) = parse(&f).unwrap();
        assert_eq!((r, ip, port), (m, a.ip, 7371));
        assert!(parse(&f[..30]).is_err());
    }
}
