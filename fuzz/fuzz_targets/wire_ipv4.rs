//! IPv4: the view on arbitrary bytes, the repr with and without checksum verification,
//! emit → parse, and the incremental TTL update on a copy.
#![no_main]

use std::hint::black_box;

use libfuzzer_sys::fuzz_target;
use wire::{Error, Ipv4Packet, Ipv4Repr};

fuzz_target!(|data: &[u8]| {
    check(data);
    // Repair the header checksum on a copy so the verifying parse succeeds sometimes.
    let mut fixed = data.to_vec();
    if let Ok(mut packet) = Ipv4Packet::new_checked(&mut fixed[..]) {
        packet.fill_checksum();
        assert!(packet.verify_checksum());
        check(&fixed);
    }
});

fn check(data: &[u8]) {
    let Ok(packet) = Ipv4Packet::new_checked(data) else {
        return;
    };
    black_box((
        packet.version(),
        packet.tos(),
        packet.dscp(),
        packet.ecn(),
        packet.ident(),
        packet.dont_frag(),
        packet.more_frags(),
        packet.frag_offset(),
        packet.is_fragment(),
        packet.hop_limit(),
        packet.next_header(),
        packet.checksum(),
        packet.src_addr(),
        packet.dst_addr(),
    ));
    let header_len = usize::from(packet.header_len());
    assert_eq!(packet.options().len(), header_len - 20);
    assert_eq!(
        packet.payload().len(),
        usize::from(packet.total_len()) - header_len
    );
    let valid_checksum = packet.verify_checksum();

    let checked = Ipv4Repr::parse(&packet);
    let unchecked = Ipv4Repr::parse_unchecked_checksum(&packet);
    if valid_checksum || unchecked == Err(Error::Malformed) {
        // Same answer: the checksum is fine, or the version check failed before it.
        assert_eq!(checked, unchecked);
    } else {
        assert_eq!(checked, Err(Error::Checksum));
    }

    // Forwarding fast path on a copy: a valid checksum stays valid.
    let mut copy = data.to_vec();
    let mut view = Ipv4Packet::new_unchecked(&mut copy[..]);
    if view.decrement_hop_limit().is_some() && valid_checksum && packet.version() == 4 {
        assert!(view.verify_checksum());
    }

    let Ok(repr) = unchecked else {
        return;
    };
    let mut buf = vec![0u8; repr.buffer_len() + repr.payload_len];
    let mut out = Ipv4Packet::new_unchecked(&mut buf[..]);
    repr.emit(&mut out);
    out.payload_mut().copy_from_slice(packet.payload());
    let again = Ipv4Packet::new_checked(&buf[..]).expect("emitted packet is valid");
    assert!(again.verify_checksum());
    assert_eq!(Ipv4Repr::parse(&again), Ok(repr));
    assert_eq!(again.payload(), packet.payload());
}
