//! ICMPv4: the view on arbitrary bytes, the echo repr, emit → parse.
#![no_main]

use std::hint::black_box;

use libfuzzer_sys::fuzz_target;
use wire::{Icmpv4Packet, Icmpv4Repr};

fuzz_target!(|data: &[u8]| {
    check(data);
    // Random bytes almost never carry a valid checksum; repair it on a copy so the echo
    // parse and round trip are reached too.
    if data.len() >= Icmpv4Packet::<&[u8]>::HEADER_LEN {
        let mut fixed = data.to_vec();
        Icmpv4Packet::new_unchecked(&mut fixed[..]).fill_checksum();
        check(&fixed);
    }
});

fn check(data: &[u8]) {
    let Ok(packet) = Icmpv4Packet::new_checked(data) else {
        return;
    };
    black_box((
        packet.msg_type(),
        packet.msg_code(),
        packet.checksum(),
        packet.echo_ident(),
        packet.echo_seq_no(),
        packet.data(),
        packet.verify_checksum(),
    ));
    let Ok(repr) = Icmpv4Repr::parse(&packet) else {
        return;
    };
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Icmpv4Packet::new_unchecked(&mut buf[..]));
    let again = Icmpv4Packet::new_checked(&buf[..]).expect("emitted message is valid");
    assert_eq!(Icmpv4Repr::parse(&again), Ok(repr));
    // Identical up to the checksum, which has two encodings of zero.
    assert_eq!(buf.len(), data.len());
    assert_eq!(&buf[4..], &data[4..]);
    assert_eq!(&buf[..2], &data[..2]);
}
