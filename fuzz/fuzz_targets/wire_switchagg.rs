//! SwitchAgg packets: the aggregation view and repr (check, pair walk, parse, emit →
//! parse) and the Launch / Configure / Ack reprs, on arbitrary bytes.
#![no_main]

use std::hint::black_box;

use libfuzzer_sys::fuzz_target;
use wire::switchagg::{AckRepr, AggPacket, AggRepr, ConfigureRepr, LaunchRepr};

fuzz_target!(|data: &[u8]| {
    let unchecked = AggPacket::new_unchecked(data);
    if data.len() >= wire::switchagg::HEADER_LEN {
        // The pair walk on an unchecked view stops with an error, never panics.
        black_box(unchecked.pairs().count());
        black_box(unchecked.pairs_end().ok());
    }
    if let Ok(p) = AggPacket::new_checked(data) {
        black_box((p.flags(), p.tree_id(), p.child_id(), p.seq()));
        assert!(p.pairs().all(|r| r.is_ok()));
        let r = AggRepr::parse(&p).expect("a checked packet parses");
        let mut out = vec![0u8; r.buffer_len()];
        assert_eq!(r.emit(&mut out), Ok(r.buffer_len()));
        assert_eq!(&out[..], &data[..r.buffer_len()]);
        assert_eq!(AggRepr::parse(&AggPacket::new_checked(&out[..]).unwrap()), Ok(r));
    }
    if let Ok(l) = LaunchRepr::parse(data) {
        let mut b = vec![0u8; l.buffer_len()];
        l.emit(&mut b).unwrap();
        assert_eq!(LaunchRepr::parse(&b).unwrap(), l);
    }
    if let Ok(c) = ConfigureRepr::parse(data) {
        let mut b = vec![0u8; c.buffer_len()];
        c.emit(&mut b).unwrap();
        assert_eq!(ConfigureRepr::parse(&b).unwrap(), c);
    }
    if let Ok(a) = AckRepr::parse(data) {
        let mut b = [0u8; 2];
        a.emit(&mut b).unwrap();
        assert_eq!(AckRepr::parse(&b).unwrap(), a);
    }
});
