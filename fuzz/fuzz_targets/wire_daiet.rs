//! DAIET packets: view, getters, pairs, repr parse → emit → parse.
#![no_main]

use std::hint::black_box;

use libfuzzer_sys::fuzz_target;
use wire::daiet::{emit_fixed_pair, emit_var_pair, flags, Packet, Repr};

fuzz_target!(|data: &[u8]| {
    let Ok(p) = Packet::new_checked(data) else {
        return;
    };
    black_box((p.tree_id(), p.flags(), p.sender(), p.epoch(), p.seq(), p.info()));
    let repr = Repr::parse(&p).expect("a checked packet parses");
    let pairs: Vec<(Vec<u8>, u32)> = p.pairs().map(|(k, v)| (k.to_vec(), v)).collect();
    assert!(pairs.len() <= repr.num_pairs as usize, "holes are skipped, nothing is invented");
    assert!(p.total_len() <= data.len());
    // Re-emit: the header and the pairs (fixed keys come back unpadded) survive.
    let repr = Repr { num_pairs: pairs.len() as u8, ..repr };
    let mut v = repr.to_vec();
    for (k, val) in &pairs {
        if repr.flags & flags::VARLEN != 0 {
            emit_var_pair(&mut v, k, *val);
        } else {
            emit_fixed_pair(&mut v, k, *val);
        }
    }
    let again = Packet::new_checked(&v[..]).expect("emitted packet is valid");
    assert_eq!(Repr::parse(&again), Ok(repr));
    let pairs2: Vec<(Vec<u8>, u32)> = again.pairs().map(|(k, v)| (k.to_vec(), v)).collect();
    assert_eq!(pairs, pairs2);
});
