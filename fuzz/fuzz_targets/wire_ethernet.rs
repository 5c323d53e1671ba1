//! Ethernet: the view and the repr on arbitrary bytes; emit → parse round trip.
#![no_main]

use std::hint::black_box;

use libfuzzer_sys::fuzz_target;
use wire::{EthernetFrame, EthernetRepr};

fuzz_target!(|data: &[u8]| {
    let Ok(frame) = EthernetFrame::new_checked(data) else {
        return;
    };
    black_box((
        frame.dst_addr(),
        frame.src_addr(),
        frame.ethertype(),
        frame.payload(),
    ));
    let repr = EthernetRepr::parse(&frame).expect("a checked frame always parses");

    let mut buf = vec![0u8; repr.buffer_len() + frame.payload().len()];
    let mut out = EthernetFrame::new_unchecked(&mut buf[..]);
    repr.emit(&mut out);
    out.payload_mut().copy_from_slice(frame.payload());
    let again = EthernetFrame::new_checked(&buf[..]).expect("emitted frame is valid");
    assert_eq!(EthernetRepr::parse(&again), Ok(repr));
    // Every header bit is in the repr, so the bytes come back exactly.
    assert_eq!(&buf[..], data);
});
