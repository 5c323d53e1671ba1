//! DAIET's spillover bucket in registers (§4, Algorithm 1 lines 13-15): colliding pairs are
//! gathered across packets and leave for the parent ten at a time; nothing is lost or
//! sent twice, under concurrency and faults; the bucket is empty after END.

use std::collections::HashMap;

use hostlib::aggregation::Protocol;
use pisa::control::{ControlOp, ControlReply};
use pisa::{PacketBuf, Switch};
use programs::daiet::bucket::bucket_index;
use programs::daiet::Daiet;
use wire::daiet::{flags, Op, MAX_PAIRS, UDP_PORT};

mod common;
use common::daiet_net::*;
use common::*;

const CHILD: u8 = 1;
const PARENT: u8 = 10;
const TREE: u16 = 100;

/// A packet to the parent: its sequence number and pairs.
type Sent = (u32, Vec<(Vec<u8>, u32)>);

/// A register's cells `[lo, hi)` (program 1 is `daiet`).
fn cells(sw: &mut Switch, name: &str, lo: u32, hi: u32) -> Vec<u64> {
    let set = set();
    let i = set.decl(1).registers.iter().position(|r| r.name == name).unwrap_or_else(|| panic!("register {name}"));
    let id = set.ids(1).registers[i];
    (lo..hi)
        .map(|k| match sw.control(&ControlOp::RegisterRead { register_id: id, index: Some(k) }).unwrap() {
            ControlReply::RegisterCells(v) => v[0].1,
            _ => unreachable!(),
        })
        .collect()
}

/// The bucket registers of tree slot `tree_idx`: slots and counters (ring, busy).
fn bucket_is_empty(sw: &mut Switch, tree_idx: u16) -> bool {
    let slots = bucket_index(tree_idx, 0, 0)..bucket_index(tree_idx + 1, 0, 0);
    let mut all = Vec::new();
    for name in ["spill_key0", "spill_key1", "spill_key2", "spill_key3", "spill_value"] {
        all.extend(cells(sw, name, slots.start, slots.end));
    }
    for name in ["spill_ring", "spill_busy"] {
        all.extend(cells(sw, name, tree_idx as u32, tree_idx as u32 + 1));
    }
    all.iter().all(|&c| c == 0)
}

fn data_frame(sender: u16, seq: u32, fl: u8, pairs: &[(Vec<u8>, u32)]) -> Vec<u8> {
    daiet_data_frame(TREE, CHILD, PARENT, sender, seq, fl, pairs)
}

/// Put one frame through the switch and run it to completion; the frames that left.
fn send(sw: &mut Switch, f: &[u8], now: u64) -> Vec<(u16, Vec<u8>)> {
    sw.process(&mut vec![PacketBuf::from_slice(f, CHILD as u16)], now);
    for _ in 0..10_000 {
        if sw.pipes()[0].pending() == 0 {
            break;
        }
        sw.tick(now);
    }
    assert_eq!(sw.pipes()[0].pending(), 0, "the packet's passes ended");
    sw.drain_all()
}

/// `(flags, seq, pairs)` of a DAIET frame.
fn parse(f: &[u8]) -> (u8, u32, Vec<(Vec<u8>, u32)>) {
    let (_, _, payload) = unframe(f).expect("a UDP frame");
    let p = wire::daiet::Packet::new_checked(payload).expect("a DAIET packet");
    assert_eq!(p.pairs().count(), p.num_pairs() as usize, "no holes in the switch's packets");
    (p.flags(), p.seq(), p.pairs().map(|(k, v)| (k.to_vec(), v)).collect())
}

/// One child, one cell per slice (four in all) and distinct keys: every key past the first
/// four collides, is gathered in the bucket and leaves in packets of exactly ten; the END
/// brings the cells and the bucket's remainder. Pairs out = pairs in, each once.
#[test]
fn colliding_pairs_leave_gathered_in_packets_of_ten() {
    for (n_keys, per_packet) in [(97usize, 10usize), (64, 3), (40, 1), (123, 7)] {
        let trees = [(TREE, tree(PARENT as u16, 0, 0, 1, Op::Sum, 1, 250))];
        let mut sw = switch(16, &[(CHILD, CHILD as u16), (PARENT, PARENT as u16)], &trees);
        let pairs: Vec<(Vec<u8>, u32)> = (0..n_keys).map(|i| (format!("key-{i:05}").into_bytes(), 1 + i as u32 * 3)).collect();
        let mut out_data: Vec<Sent> = Vec::new();
        let mut acks = 0;
        let mut seq = 0u32;
        for chunk in pairs.chunks(per_packet) {
            for (port, f) in send(&mut sw, &data_frame(0, seq, 0, chunk), seq as u64) {
                let (fl, s, ps) = parse(&f);
                match port {
                    p if p == CHILD as u16 => {
                        assert_eq!((fl, s), (flags::ACK, seq));
                        acks += 1;
                    }
                    p if p == PARENT as u16 => {
                        assert_eq!(fl, flags::FROM_SWITCH);
                        out_data.push((s, ps));
                    }
                    p => panic!("frame on port {p}"),
                }
            }
            seq += 1;
        }
        assert_eq!(acks, seq, "every packet acknowledged once its pairs were in registers");
        // While the job runs, the switch sends only full buckets.
        assert!(out_data.iter().all(|(_, ps)| ps.len() == MAX_PAIRS), "{n_keys}/{per_packet}");
        // A packet's pair at position p uses slice p % 4: one cell per slice reached.
        let in_cells = per_packet.min(4);
        let spilled = n_keys - in_cells;
        assert_eq!(out_data.len(), spilled / MAX_PAIRS, "one packet per full bucket");
        // END: the four cells and the bucket's remainder, then END.
        let mut end_data = Vec::new();
        let mut ends = 0;
        for (port, f) in send(&mut sw, &data_frame(0, seq, flags::END, &[]), 1_000) {
            let (fl, s, ps) = parse(&f);
            if port == CHILD as u16 {
                assert_eq!((fl, s), (flags::ACK, seq));
            } else if fl & flags::END != 0 {
                ends += 1;
            } else {
                end_data.push((s, ps));
            }
        }
        assert_eq!(ends, 1);
        let rest = in_cells + spilled % MAX_PAIRS;
        let sizes: Vec<usize> = end_data.iter().map(|(_, ps)| ps.len()).collect();
        assert_eq!(sizes.iter().sum::<usize>(), rest);
        assert_eq!(sizes.len(), rest.div_ceil(MAX_PAIRS));
        // The switch's stream towards the parent is numbered without gaps.
        let mut seqs: Vec<u32> = out_data.iter().chain(&end_data).map(|(s, _)| *s).collect();
        seqs.sort_unstable();
        assert_eq!(seqs, (0..seqs.len() as u32).collect::<Vec<_>>());
        // Each pair exactly once.
        let mut got: Vec<(Vec<u8>, u32)> = out_data.into_iter().chain(end_data).flat_map(|(_, ps)| ps).collect();
        got.sort();
        let mut want = pairs.clone();
        want.sort();
        assert_eq!(got, want, "{n_keys}/{per_packet}");
        assert!(bucket_is_empty(&mut sw, 0), "the END left an empty bucket");
        assert_eq!(cells(&mut sw, "spill_overflow", 0, 1), vec![0], "one packet at a time never finds the bucket busy");
        for s in 0..4 {
            assert_eq!(cells(&mut sw, &format!("stack_top_{s}"), 0, 1), vec![0]);
            assert_eq!(cells(&mut sw, &format!("key0_{s}"), 0, 1), vec![0]);
        }
    }
}

/// After END the tree starts afresh: a second round on the same switch is exact again.
#[test]
fn the_bucket_is_empty_after_end_and_the_tree_is_reused() {
    let trees = [(TREE, tree(PARENT as u16, 3, 8, 2, Op::Max, 1, 250))];
    let mut sw = switch(16, &[(CHILD, CHILD as u16), (PARENT, PARENT as u16)], &trees);
    let mut seq = 0u32;
    for round in 0..2u32 {
        let mut want: HashMap<Vec<u8>, u32> = HashMap::new();
        let mut got: HashMap<Vec<u8>, u32> = HashMap::new();
        let mut r = Rng(7 + round as u64);
        for i in 0..30 {
            let ps: Vec<(Vec<u8>, u32)> = (0..10).map(|_| (format!("w{}", r.next() % 45).into_bytes(), (r.next() % 1000) as u32)).collect();
            for (k, v) in &ps {
                let e = want.entry(k.clone()).or_insert(0);
                *e = (*e).max(*v);
            }
            let mut frames = send(&mut sw, &data_frame(0, seq, 0, &ps), seq as u64);
            if round == 0 && seq == 12 {
                // Mid-job the bucket holds pairs.
                assert!(!bucket_is_empty(&mut sw, 3));
            }
            frames.extend(if i == 29 { send(&mut sw, &data_frame(0, seq + 1, flags::END, &[]), 0) } else { Vec::new() });
            for (port, f) in frames {
                let (fl, _, ps) = parse(&f);
                if port == PARENT as u16 && fl & flags::END == 0 {
                    for (k, v) in ps {
                        let e = got.entry(k).or_insert(0);
                        *e = (*e).max(v);
                    }
                }
            }
            seq += 1;
        }
        seq += 1; // the END
        assert_eq!(got, want, "round {round}");
        assert!(bucket_is_empty(&mut sw, 3), "round {round}: empty after END");
    }
}

/// Many children at once (all of their windows in one batch, so their passes interleave),
/// tiny tables, several trees, SUM/MIN/MAX, seeded loss, duplication and reordering: the
/// reducers' results equal the reference; buckets filled and drained while others stored
/// into the next buffers; every bucket is empty afterwards.
#[test]
fn concurrent_drains_under_faults_lose_nothing() {
    let mut full_packets = 0;
    for (seed, op) in [(1u64, Op::Sum), (2, Op::Min), (3, Op::Max), (4, Op::Sum)] {
        let n = 12usize;
        let mut r = Rng(seed * 31 + 5);
        let pairs: Vec<Vec<(u16, Vec<u8>, u32)>> = (0..n)
            .map(|_| {
                (0..150)
                    .map(|_| {
                        let w = r.next() % 400;
                        ((w % 3) as u16, format!("k{w}").into_bytes(), 1 + (r.next() % 50) as u32)
                    })
                    .collect()
            })
            .collect();
        let job = Job { mappers: (1..=n as u8).collect(), pairs, reducers: vec![(20, 100), (21, 101), (22, 102)], op };
        let sizes = [1u32, 2, 4];
        let trees: Vec<_> = job
            .reducers
            .iter()
            .enumerate()
            .map(|(i, &(h, id))| (id, tree(h as u16, i as u16, 8 * i as u32, sizes[i], op, n as u16, 250)))
            .collect();
        let f = if seed == 4 { Faults::default() } else { Faults { loss: 0.03, dup: 0.03, reorder: 0.05 } };
        let mut net = one_switch_net(&job, &trees, seed, f);
        let reducers: Vec<u8> = job.reducers.iter().map(|r| r.0).collect();
        let mut tap = |h: u8, f: &[u8]| {
            if reducers.contains(&h) {
                let (_, _, payload) = unframe(f).unwrap();
                if let Ok(p) = wire::daiet::Packet::new_checked(payload) {
                    if p.flags() & flags::FROM_SWITCH != 0 && p.num_pairs() as usize == MAX_PAIRS {
                        full_packets += 1;
                    }
                }
            }
        };
        let out = run_job_tapped(&job, &mut net, None, Protocol::Daiet, UDP_PORT, &mut tap);
        assert_eq!(out.results, reference(&job), "seed {seed} {op:?}");
        if f.loss == 0.0 {
            assert!(!out.fallback, "seed {seed}: exact in the network");
        }
        for i in 0..3 {
            assert!(bucket_is_empty(&mut net.switches[0], i), "seed {seed} tree {i}");
        }
    }
    assert!(full_packets > 20, "buckets were filled and drained: {full_packets}");
}

/// Without faults every pair reaches the reducer exactly once through the switch: the
/// reducer's pair count is the distinct keys per cell plus the spilled pairs, and the
/// overflow (the bucket busy) is counted, never lost.
#[test]
fn pairs_in_equal_pairs_out_with_many_children() {
    let n = 10usize;
    // Distinct keys everywhere: nothing can be aggregated, so every pair must come out once.
    let pairs: Vec<Vec<(u16, Vec<u8>, u32)>> =
        (0..n).map(|m| (0..90).map(|i| (0u16, format!("m{m}-{i}").into_bytes(), 1)).collect()).collect();
    let job = Job { mappers: (1..=n as u8).collect(), pairs, reducers: vec![(20, 100)], op: Op::Sum };
    let trees = trees_for(&job, 1);
    let mut net = one_switch_net(&job, &trees, 1, Faults::default());
    let mut full = 0;
    let mut tap = |h: u8, f: &[u8]| {
        if h == 20 && parse(f).2.len() == MAX_PAIRS {
            full += 1;
        }
    };
    let out = run_job_tapped(&job, &mut net, None, Protocol::Daiet, UDP_PORT, &mut tap);
    assert_eq!(out.results, reference(&job));
    assert!(!out.fallback);
    assert_eq!(out.reducer_pairs, total_pairs(&job), "each pair exactly once");
    let sw = &mut net.switches[0];
    let overflow = cells(sw, "spill_overflow", 0, 1)[0];
    // Four keys took the four cells; the others went through the bucket or, when it was
    // busy, on in their packet (counted).
    assert!(overflow < total_pairs(&job) - 4, "overflow {overflow}");
    assert!(full > 0, "buckets were gathered and drained");
    assert_eq!(sw.counters().total_drops(), 0);
    assert!(bucket_is_empty(sw, 0));
}

#[test]
fn daiet_still_declares_only_what_tofino1_has() {
    let d = Daiet::new();
    let f = programs::forward::Forward::new();
    let r = pisa::ResourceReport::new(&[pisa::Program::decl(&f), pisa::Program::decl(&d)], &pisa::Target::tofino1());
    assert!(r.fits, "{:?}", r.problems);
    let decl = pisa::Program::decl(&d);
    for name in ["spill_ring", "spill_busy"] {
        assert!(decl.registers.iter().any(|r| r.name == name), "{name}");
    }
    // The bucket's counters are declared instructions, checked against the target.
    let unchecked: Vec<_> = r.unchecked_alus.iter().filter(|a| a.contains("spill")).collect();
    assert!(unchecked.is_empty(), "{unchecked:?}");
    assert!(decl.notes.iter().any(|n| n.contains("spillover bucket")));
}

/// Zipf-like words: the square of a uniform draw over `vocab`.
fn skewed(mappers: usize, per_mapper: usize, vocab: u64, seed: u64) -> Vec<Vec<(u16, Vec<u8>, u32)>> {
    let mut r = Rng(seed | 1);
    (0..mappers)
        .map(|_| {
            (0..per_mapper)
                .map(|_| {
                    let u = r.f();
                    (0u16, format!("w{}", ((u * u) * vocab as f64) as u64).into_bytes(), 1)
                })
                .collect()
        })
        .collect()
}

/// How much of the spillover the bucket gathers, and how much finds it busy
/// (`cargo test -p programs --test daiet_spill bucket_load -- --nocapture` prints it).
#[test]
fn bucket_load() {
    for (mappers, part) in [(3usize, 16u32), (3, 64), (3, 256), (12, 16), (12, 64), (12, 256)] {
        let job = Job {
            mappers: (1..=mappers as u8).collect(),
            pairs: skewed(mappers, 3000 / mappers * 4, 2000, 9),
            reducers: vec![(20, 100)],
            op: Op::Sum,
        };
        let trees = trees_for(&job, part);
        let mut net = one_switch_net(&job, &trees, 1, Faults::default());
        let mut hist = [0u64; MAX_PAIRS + 1];
        let mut tap = |h: u8, f: &[u8]| {
            if h == 20 {
                let (_, _, payload) = unframe(f).unwrap();
                if let Ok(p) = wire::daiet::Packet::new_checked(payload) {
                    if p.flags() & flags::FROM_SWITCH != 0 && p.flags() & flags::END == 0 {
                        hist[(p.num_pairs() as usize).min(MAX_PAIRS)] += 1;
                    }
                }
            }
        };
        let out = run_job_tapped(&job, &mut net, None, Protocol::Daiet, UDP_PORT, &mut tap);
        assert_eq!(out.results, reference(&job));
        let overflow = cells(&mut net.switches[0], "spill_overflow", 0, 1)[0];
        let c = net.switches[0].counters();
        eprintln!(
            "mappers {mappers:2} cells {:4}: pairs in {} out {} packets out {} sizes {:?} overflow {} recirc {}",
            part * 4,
            total_pairs(&job),
            out.reducer_pairs,
            out.reducer_packets,
            hist,
            overflow,
            c.recirculations
        );
    }
}

/// Hostile traffic on a tree with one cell per slice: random headers, pair counts, keys
/// (zero bytes, holes), sequence numbers and flags, some in order so they are admitted and
/// reach the bucket. No panic, no packet left circulating, only counted drops; afterwards a
/// job on the switch is exact and the bucket empty.
#[test]
fn hostile_packets_on_a_colliding_tree_leave_no_packet_behind() {
    let trees = [(TREE, tree(PARENT as u16, 0, 0, 1, Op::Sum, 1, 250))];
    let mut sw = switch(16, &[(CHILD, CHILD as u16), (PARENT, PARENT as u16)], &trees);
    let mut r = Rng(4242);
    let mut seq = 0u32;
    for i in 0..3000u64 {
        let n = (r.next() % 12) as usize;
        let pairs: Vec<(Vec<u8>, u32)> =
            (0..n).map(|_| ((0..1 + r.next() % 16).map(|_| (r.next() % 5) as u8 * 60).collect(), r.next() as u32)).collect();
        let fl = match r.next() % 10 {
            0 => flags::VARLEN,
            1 => flags::END,
            2 => r.next() as u8,
            _ => 0,
        };
        let s = if r.next().is_multiple_of(3) { r.next() as u32 % (seq + 3) } else { seq };
        let mut f = {
            let repr = wire::daiet::Repr { tree_id: TREE, flags: fl, sender: 0, seq: s, num_pairs: n as u8, ..Default::default() };
            let mut p = repr.to_vec();
            for (k, v) in &pairs {
                let mut key = [0u8; 16];
                key[..k.len()].copy_from_slice(k);
                p.extend_from_slice(&key);
                p.extend_from_slice(&v.to_be_bytes());
            }
            frame(CHILD, MAPPER_PORT, PARENT, UDP_PORT, &p)
        };
        if r.next().is_multiple_of(7) {
            let cut = (r.next() as usize) % f.len();
            f.truncate(cut.max(14));
        }
        let out = send(&mut sw, &f, i);
        if out.iter().any(|(p, fr)| *p == CHILD as u16 && parse_ack(fr) == Some(seq)) {
            seq += 1;
        }
    }
    let c = sw.counters();
    assert!(c.total_drops() > 0);
    assert_eq!(c.programs[1].violations.iter().sum::<u64>(), 0, "no hardware rule broken");
    assert!(seq > 100, "many hostile packets were admitted: {seq}");
    // The tree's END empties it; then a clean round is exact.
    let out = send(&mut sw, &data_frame(0, seq, flags::END, &[]), 5000);
    assert!(out.iter().any(|(p, f)| *p == CHILD as u16 && parse_ack(f) == Some(seq)), "the END was admitted");
    assert!(bucket_is_empty(&mut sw, 0));
    let pairs: Vec<(Vec<u8>, u32)> = (0..10).map(|i| (format!("clean{i}").into_bytes(), i + 1)).collect();
    let mut got: Vec<(Vec<u8>, u32)> = Vec::new();
    let frames = [data_frame(0, seq + 1, 0, &pairs), data_frame(0, seq + 2, flags::END, &[])];
    for (i, f) in frames.iter().enumerate() {
        for (port, fr) in send(&mut sw, f, 6000 + i as u64) {
            if port == PARENT as u16 {
                got.extend(parse(&fr).2);
            }
        }
    }
    got.sort();
    assert_eq!(got, pairs);
    assert!(bucket_is_empty(&mut sw, 0));
}

/// The sequence number of an ACK frame.
fn parse_ack(f: &[u8]) -> Option<u32> {
    let (_, _, payload) = unframe(f)?;
    let p = wire::daiet::Packet::new_checked(payload).ok()?;
    (p.flags() & flags::ACK != 0).then(|| p.seq())
}
