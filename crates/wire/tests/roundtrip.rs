//! Property tests: every repr survives emit → parse; no byte string makes a view or a
//! parser panic; incremental checksum updates agree with recomputation.

use proptest::prelude::*;
use wire::checksum;
use wire::ipv4::Protocol;
use wire::{
    ArpOperation, ArpPacket, ArpRepr, EtherType, EthernetAddress, EthernetFrame, EthernetRepr, Icmpv4Packet, Icmpv4Repr, Ipv4Address,
    Ipv4Cidr, Ipv4Packet, Ipv4Repr, UdpPacket, UdpRepr,
};

fn mac() -> impl Strategy<Value = EthernetAddress> {
    any::<[u8; 6]>().prop_map(EthernetAddress)
}

fn ip() -> impl Strategy<Value = Ipv4Address> {
    any::<[u8; 4]>().prop_map(Ipv4Address)
}

fn ethernet_repr() -> impl Strategy<Value = EthernetRepr> {
    (mac(), mac(), any::<u16>()).prop_map(|(src_addr, dst_addr, ethertype)| EthernetRepr {
        src_addr,
        dst_addr,
        ethertype: EtherType::from(ethertype),
    })
}

fn arp_repr() -> impl Strategy<Value = ArpRepr> {
    (any::<u16>(), mac(), ip(), mac(), ip()).prop_map(|(op, sha, spa, tha, tpa)| ArpRepr::EthernetIpv4 {
        operation: ArpOperation::from(op),
        source_hardware_addr: sha,
        source_protocol_addr: spa,
        target_hardware_addr: tha,
        target_protocol_addr: tpa,
    })
}

fn ipv4_repr() -> impl Strategy<Value = Ipv4Repr> {
    let payload_len = prop_oneof![0usize..=1500, Just(65515usize), 1500usize..=65515];
    (ip(), ip(), any::<u8>(), payload_len, any::<u8>(), any::<u8>()).prop_map(|(src_addr, dst_addr, proto, payload_len, hop_limit, tos)| {
        Ipv4Repr { src_addr, dst_addr, next_header: Protocol::from(proto), payload_len, hop_limit, tos }
    })
}

/// Arbitrary bytes, up to 200 long, for the never-panic properties.
fn junk() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..200)
}

/// Junk that starts like an IPv4 header with a consistent length, so the deeper parsing
/// paths are reached more often than by pure chance.
fn ipv4_like() -> impl Strategy<Value = Vec<u8>> {
    (junk(), 5u8..=15, any::<bool>()).prop_map(|(mut bytes, ihl, fix_checksum)| {
        if bytes.len() >= 20 {
            bytes[0] = 0x40 | ihl;
            let total = bytes.len() as u16;
            bytes[2..4].copy_from_slice(&total.to_be_bytes());
            let header_len = usize::from(ihl) * 4;
            if fix_checksum && header_len <= bytes.len() {
                let mut p = Ipv4Packet::new_unchecked(&mut bytes[..]);
                p.fill_checksum();
            }
        }
        bytes
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    // ---------------------------------------------------------------- emit → parse

    #[test]
    fn ethernet_roundtrip(repr in ethernet_repr(), payload in junk()) {
        let mut buf = vec![0u8; repr.buffer_len() + payload.len()];
        let mut frame = EthernetFrame::new_unchecked(&mut buf[..]);
        repr.emit(&mut frame);
        frame.payload_mut().copy_from_slice(&payload);
        let frame = EthernetFrame::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(EthernetRepr::parse(&frame), Ok(repr));
        prop_assert_eq!(frame.payload(), &payload[..]);
    }

    #[test]
    fn arp_roundtrip(repr in arp_repr(), padding in 0usize..20) {
        let mut buf = vec![0u8; repr.buffer_len() + padding];
        repr.emit(&mut ArpPacket::new_unchecked(&mut buf[..]));
        let packet = ArpPacket::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(ArpRepr::parse(&packet), Ok(repr));
    }

    #[test]
    fn ipv4_roundtrip(repr in ipv4_repr()) {
        let mut buf = vec![0u8; repr.buffer_len() + repr.payload_len];
        repr.emit(&mut Ipv4Packet::new_unchecked(&mut buf[..]));
        let packet = Ipv4Packet::new_checked(&buf[..]).unwrap();
        prop_assert!(packet.verify_checksum());
        prop_assert_eq!(packet.payload().len(), repr.payload_len);
        prop_assert_eq!(Ipv4Repr::parse(&packet), Ok(repr));
    }

    #[test]
    fn udp_roundtrip(
        src_port in any::<u16>(),
        dst_port in any::<u16>(),
        src in ip(),
        dst in ip(),
        payload in junk(),
    ) {
        let repr = UdpRepr { src_port, dst_port };
        let mut buf = vec![0u8; repr.buffer_len() + payload.len()];
        repr.emit(
            &mut UdpPacket::new_unchecked(&mut buf[..]),
            src,
            dst,
            payload.len(),
            |p| p.copy_from_slice(&payload),
        );
        let packet = UdpPacket::new_checked(&buf[..]).unwrap();
        prop_assert_ne!(packet.checksum(), 0);
        prop_assert!(packet.verify_checksum(src, dst));
        prop_assert_eq!(UdpRepr::parse(&packet, src, dst, true), Ok(repr));
        prop_assert_eq!(packet.payload(), &payload[..]);
    }

    #[test]
    fn udp_in_ipv4_roundtrip(
        src_port in any::<u16>(),
        dst_port in any::<u16>(),
        src in ip(),
        dst in ip(),
        tos in any::<u8>(),
        payload in junk(),
    ) {
        let udp = UdpRepr { src_port, dst_port };
        let ip_repr = Ipv4Repr {
            src_addr: src,
            dst_addr: dst,
            next_header: Protocol::Udp,
            payload_len: udp.buffer_len() + payload.len(),
            hop_limit: 64,
            tos,
        };
        let eth = EthernetRepr {
            src_addr: EthernetAddress([2, 0, 0, 0, 0, 1]),
            dst_addr: EthernetAddress([2, 0, 0, 0, 0, 2]),
            ethertype: EtherType::Ipv4,
        };
        let mut buf = vec![0u8; eth.buffer_len() + ip_repr.buffer_len() + ip_repr.payload_len];
        let mut frame = EthernetFrame::new_unchecked(&mut buf[..]);
        eth.emit(&mut frame);
        let mut ip_packet = Ipv4Packet::new_unchecked(frame.payload_mut());
        ip_repr.emit(&mut ip_packet);
        udp.emit(
            &mut UdpPacket::new_unchecked(ip_packet.payload_mut()),
            src,
            dst,
            payload.len(),
            |p| p.copy_from_slice(&payload),
        );

        let frame = EthernetFrame::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(EthernetRepr::parse(&frame), Ok(eth));
        let ip_packet = Ipv4Packet::new_checked(frame.payload()).unwrap();
        prop_assert_eq!(Ipv4Repr::parse(&ip_packet), Ok(ip_repr));
        let udp_packet = UdpPacket::new_checked(ip_packet.payload()).unwrap();
        prop_assert_eq!(UdpRepr::parse(&udp_packet, src, dst, true), Ok(udp));
        prop_assert_eq!(udp_packet.payload(), &payload[..]);
    }

    #[test]
    fn icmpv4_roundtrip(
        reply in any::<bool>(),
        ident in any::<u16>(),
        seq_no in any::<u16>(),
        data in junk(),
    ) {
        let repr = if reply {
            Icmpv4Repr::EchoReply { ident, seq_no, data: &data }
        } else {
            Icmpv4Repr::EchoRequest { ident, seq_no, data: &data }
        };
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut Icmpv4Packet::new_unchecked(&mut buf[..]));
        let packet = Icmpv4Packet::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(Icmpv4Repr::parse(&packet), Ok(repr));
    }

    #[test]
    fn address_text_roundtrip(m in mac(), a in ip(), len in 0u8..=32) {
        prop_assert_eq!(m.to_string().parse::<EthernetAddress>(), Ok(m));
        prop_assert_eq!(EthernetAddress::from_u64(m.to_u64()), m);
        prop_assert_eq!(a.to_string().parse::<Ipv4Address>(), Ok(a));
        prop_assert_eq!(Ipv4Address::from_u32(a.to_u32()), a);
        let cidr = Ipv4Cidr::new(a, len).unwrap();
        prop_assert_eq!(cidr.to_string().parse::<Ipv4Cidr>(), Ok(cidr));
        prop_assert!(cidr.contains(a));
        prop_assert!(cidr.network().contains(a));
    }

    // ---------------------------------------------------------------- never panic

    #[test]
    fn ethernet_never_panics(bytes in junk()) {
        if let Ok(frame) = EthernetFrame::new_checked(&bytes[..]) {
            let _ = (frame.dst_addr(), frame.src_addr(), frame.ethertype(), frame.payload());
            prop_assert!(EthernetRepr::parse(&frame).is_ok());
        }
    }

    #[test]
    fn arp_never_panics(bytes in junk()) {
        if let Ok(p) = ArpPacket::new_checked(&bytes[..]) {
            let _ = (p.hardware_type(), p.protocol_type(), p.operation(), p.packet_len());
            prop_assert_eq!(p.source_hardware_addr().len(), usize::from(p.hardware_len()));
            prop_assert_eq!(p.source_protocol_addr().len(), usize::from(p.protocol_len()));
            prop_assert_eq!(p.target_hardware_addr().len(), usize::from(p.hardware_len()));
            prop_assert_eq!(p.target_protocol_addr().len(), usize::from(p.protocol_len()));
            let _ = ArpRepr::parse(&p);
        }
    }

    #[test]
    fn ipv4_never_panics(bytes in prop_oneof![junk(), ipv4_like()]) {
        if let Ok(p) = Ipv4Packet::new_checked(&bytes[..]) {
            let _ = (p.version(), p.tos(), p.dscp(), p.ecn(), p.ident(), p.dont_frag());
            let _ = (p.more_frags(), p.frag_offset(), p.is_fragment(), p.ttl(), p.protocol());
            let _ = (p.checksum(), p.src_addr(), p.dst_addr(), p.verify_checksum());
            let header_len = usize::from(p.header_len());
            prop_assert_eq!(p.options().len(), header_len - 20);
            prop_assert_eq!(p.payload().len(), usize::from(p.total_len()) - header_len);
            let _ = Ipv4Repr::parse(&p);
            let _ = Ipv4Repr::parse_unchecked_checksum(&p);
        }
    }

    #[test]
    fn udp_never_panics(bytes in junk(), src in ip(), dst in ip(), verify in any::<bool>()) {
        if let Ok(p) = UdpPacket::new_checked(&bytes[..]) {
            let _ = (p.src_port(), p.dst_port(), p.checksum(), p.verify_checksum(src, dst));
            prop_assert_eq!(p.payload().len(), usize::from(p.len()) - 8);
            let _ = UdpRepr::parse(&p, src, dst, verify);
        }
    }

    #[test]
    fn icmpv4_never_panics(bytes in junk()) {
        if let Ok(p) = Icmpv4Packet::new_checked(&bytes[..]) {
            let _ = (p.msg_type(), p.msg_code(), p.checksum(), p.echo_ident());
            let _ = (p.echo_seq_no(), p.data(), p.verify_checksum());
            let _ = Icmpv4Repr::parse(&p);
        }
    }

    #[test]
    fn ipv4_setters_never_panic_after_check(
        bytes in ipv4_like(),
        header_len in any::<u8>(),
        total_len in any::<u16>(),
    ) {
        let mut bytes = bytes;
        if let Ok(mut p) = Ipv4Packet::new_checked(&mut bytes[..]) {
            // Lengths rewritten past the buffer: accessors clamp instead of panicking.
            p.set_header_len(header_len);
            p.set_total_len(total_len);
            let _ = (p.options().len(), p.payload().len(), p.verify_checksum());
            let _ = (p.options_mut().len(), p.payload_mut().len());
            p.fill_checksum();
            let _ = p.decrement_hop_limit();
        }
    }

    // ---------------------------------------------------------------- incremental checksum

    #[test]
    fn incremental_u16_matches_recompute(
        data in proptest::collection::vec(any::<u8>(), 2..120),
        at in any::<prop::sample::Index>(),
        new in any::<u16>(),
    ) {
        let mut data = data;
        let at = at.index(data.len() / 2) * 2;
        prop_assume!(data.iter().any(|&b| b != 0));
        let before = checksum::checksum(&data);
        let old = u16::from_be_bytes([data[at], data[at + 1]]);
        data[at..at + 2].copy_from_slice(&new.to_be_bytes());
        // All-zero data has two valid checksum representations; skip that corner.
        prop_assume!(data.iter().any(|&b| b != 0));
        prop_assert_eq!(checksum::update_u16(before, old, new), checksum::checksum(&data));
    }

    #[test]
    fn incremental_u32_matches_recompute(
        data in proptest::collection::vec(any::<u8>(), 4..120),
        at in any::<prop::sample::Index>(),
        new in any::<u32>(),
    ) {
        let mut data = data;
        let at = at.index((data.len() - 2) / 2) * 2;
        prop_assume!(data.iter().any(|&b| b != 0));
        let before = checksum::checksum(&data);
        let old = u32::from_be_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]]);
        data[at..at + 4].copy_from_slice(&new.to_be_bytes());
        prop_assume!(data.iter().any(|&b| b != 0));
        prop_assert_eq!(checksum::update_u32(before, old, new), checksum::checksum(&data));
    }

    #[test]
    fn ipv4_header_rewrites_match_recompute(
        header in any::<[u8; 20]>(),
        field in 1usize..9,
        new16 in any::<u16>(),
        new32 in any::<u32>(),
        tos in any::<u8>(),
        addr in ip(),
    ) {
        let mut header = header;
        header[0] = 0x45;
        header[2..4].copy_from_slice(&20u16.to_be_bytes());
        let mut p = Ipv4Packet::new_unchecked(&mut header[..]);
        p.fill_checksum();

        // A 16-bit word other than version/IHL (which moves the header end; the generic
        // byte-slice properties above cover it) and the checksum itself (offset 10).
        let at = if field >= 5 { (field + 1) * 2 } else { field * 2 };
        let mut bytes = p.into_inner().to_vec();
        let csum = u16::from_be_bytes([bytes[10], bytes[11]]);
        let old = u16::from_be_bytes([bytes[at], bytes[at + 1]]);
        bytes[at..at + 2].copy_from_slice(&new16.to_be_bytes());
        let incremental = checksum::update_u16(csum, old, new16);
        let mut p = Ipv4Packet::new_unchecked(&mut bytes[..]);
        p.fill_checksum();
        prop_assert_eq!(incremental, p.checksum());

        // 32-bit rewrites of each address.
        let csum = p.checksum();
        let old = p.src_addr().to_u32();
        p.set_src_addr(Ipv4Address::from_u32(new32));
        let incremental = checksum::update_u32(csum, old, new32);
        p.fill_checksum();
        prop_assert_eq!(incremental, p.checksum());

        // The view's own incremental helpers.
        p.set_tos_update_checksum(tos);
        prop_assert!(p.verify_checksum());
        p.set_dst_addr_update_checksum(addr);
        prop_assert!(p.verify_checksum());
        p.set_src_addr_update_checksum(addr);
        prop_assert!(p.verify_checksum());
        let _ = p.decrement_hop_limit();
        prop_assert!(p.verify_checksum());
        let incremental = p.checksum();
        p.fill_checksum();
        prop_assert_eq!(incremental, p.checksum());
    }
}
