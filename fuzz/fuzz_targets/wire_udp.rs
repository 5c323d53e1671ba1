//! UDP, twice per input: the bytes as a raw datagram (fixed addresses), and the bytes as
//! an IPv4 packet whose payload is the datagram (addresses from the IPv4 header). Each:
//! view, getters, repr with and without verification, emit → parse.
#![no_main]

use std::hint::black_box;

use libfuzzer_sys::fuzz_target;
use wire::{Ipv4Address, Ipv4Packet, UdpPacket, UdpRepr};

fn check(data: &[u8], src: Ipv4Address, dst: Ipv4Address) {
    let Ok(packet) = UdpPacket::new_checked(data) else {
        return;
    };
    black_box((packet.src_port(), packet.dst_port(), packet.checksum()));
    assert_eq!(packet.payload().len(), usize::from(packet.len()) - 8);
    let valid = packet.verify_checksum(src, dst);

    let verified = UdpRepr::parse(&packet, src, dst, true);
    let repr = UdpRepr::parse(&packet, src, dst, false).expect("a checked datagram parses");
    assert_eq!(verified.is_ok(), valid);

    let payload = packet.payload();
    let mut buf = vec![0u8; repr.buffer_len() + payload.len()];
    repr.emit(
        &mut UdpPacket::new_unchecked(&mut buf[..]),
        src,
        dst,
        payload.len(),
        |p| p.copy_from_slice(payload),
    );
    let again = UdpPacket::new_checked(&buf[..]).expect("emitted datagram is valid");
    assert_ne!(again.checksum(), 0);
    assert_eq!(UdpRepr::parse(&again, src, dst, true), Ok(repr));
    assert_eq!(again.payload(), payload);
}

fuzz_target!(|data: &[u8]| {
    check(
        data,
        Ipv4Address::new(10, 0, 0, 1),
        Ipv4Address::new(10, 0, 0, 2),
    );
    if let Ok(ip) = Ipv4Packet::new_checked(data) {
        let (src, dst) = (ip.src_addr(), ip.dst_addr());
        check(ip.payload(), src, dst);
        // Repair the UDP checksum on a copy so the verifying parse succeeds too.
        let mut fixed = ip.payload().to_vec();
        if let Ok(mut udp) = UdpPacket::new_checked(&mut fixed[..]) {
            udp.fill_checksum(src, dst);
            assert!(udp.verify_checksum(src, dst));
            check(&fixed, src, dst);
        }
    }
});
