//! NetSHa payloads: answer packets (view, block walk, repr parse → emit round trip) and
//! query packets (the same for QID, keys and vector), on the same bytes.
#![no_main]

use std::hint::black_box;

use libfuzzer_sys::fuzz_target;
use wire::{NetshaPacket, NetshaRepr, QueryPacket, QueryRepr};

fuzz_target!(|data: &[u8]| {
    if let Ok(q) = QueryPacket::new_checked(data) {
        let l = q.table_count() as usize;
        for t in 0..l {
            black_box(q.key(t));
        }
        for i in 0..q.dim() as usize {
            black_box(q.component(i));
        }
        let repr = QueryRepr::parse(&q).expect("a checked query parses");
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut buf).expect("a parsed query emits");
        assert_eq!(&buf[..], data);
    }
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
