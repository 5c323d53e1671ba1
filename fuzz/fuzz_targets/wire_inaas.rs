//! INaaS header: view, getters, repr parse, emit → parse round trip.
#![no_main]

use std::hint::black_box;

use libfuzzer_sys::fuzz_target;
use wire::inaas::{Bitmap, InaasPacket, InaasRepr, HEADER_LEN, ITEMS};

fuzz_target!(|data: &[u8]| {
    let Ok(p) = InaasPacket::new_checked(data) else {
        assert!(data.len() < HEADER_LEN);
        return;
    };
    black_box((p.op(), p.flags(), p.seq(), p.timestamp(), p.time_limit(), p.uid(), p.bitmap(Bitmap::Overflow)));
    for j in 0..ITEMS {
        black_box((p.idx(j), p.key(j), p.value(j)));
    }
    let Ok(repr) = InaasRepr::parse(&p) else { return };
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut InaasPacket::new_unchecked(&mut buf[..]));
    let again = InaasRepr::parse(&InaasPacket::new_checked(&buf[..]).unwrap()).expect("emitted header parses");
    assert_eq!(again, repr);
});
