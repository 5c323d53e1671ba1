//! NetSHa payloads: view, block walk, repr parse → emit → parse round trip.
#![no_main]

use std::hint::black_box;

use libfuzzer_sys::fuzz_target;
use wire::{NetshaPacket, NetshaRepr};

fuzz_target!(|data: &[u8]| {
    let Ok(packet) = NetshaPacket::new_checked(data) else {
        return;
    };
    let mut n = 0;
    for b in packet.blocks() {
        for i in 0..b.num {
            black_box(packet.answer(&b, i));
        }
        n += b.num as usize;
    }
    assert_eq!(n, packet.answer_count());
    let repr = NetshaRepr::parse(&packet).expect("a checked packet parses");
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut buf).expect("a parsed packet emits");
    // Distances round-trip bit for bit (NaN payloads included), so the bytes do too.
    assert_eq!(&buf[..], data);
});
