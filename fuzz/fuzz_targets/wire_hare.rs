//! Hare messages: view, getters, repr parse → emit → parse again.
#![no_main]

use std::hint::black_box;

use libfuzzer_sys::fuzz_target;
use wire::hare::{Packet, Repr};

fuzz_target!(|data: &[u8]| {
    let Ok(p) = Packet::new_checked(data) else {
        return;
    };
    black_box((p.op(), p.flags(), p.seq(), p.hit_index(), p.aux(), p.status()));
    assert!(p.key().len() <= p.key_field_bytes().len());
    assert_eq!(p.value().len(), p.value_len() as usize);
    if let Ok(r) = Repr::parse(&p) {
        let again = r.to_bytes().expect("a parsed message emits");
        let q = Packet::new_checked(&again[..]).expect("emitted message is valid");
        assert_eq!(Repr::parse(&q), Ok(r));
    }
});
