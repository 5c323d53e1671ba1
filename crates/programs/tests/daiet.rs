//! DAIET end to end in memory: hostlib mappers and reducers exchange real Ethernet/IPv4/UDP
//! frames through `pisa::Switch` instances running `forward,daiet`, with seeded loss,
//! duplication and reordering on the host links, against a HashMap reference.

use std::collections::HashMap;

use hostlib::aggregation::Protocol;
use pisa::{DropCode, PacketBuf, ResourceReport, Target};
use wire::daiet::{Op, UDP_PORT};

mod common;
use common::daiet_net::*;
use common::*;

fn run_job(job: &Job, net: &mut Net, restart: Restart) -> Outcome {
    common::run_job(job, net, restart, Protocol::Daiet, UDP_PORT)
}

/// Zipf-ish words with some long keys; `trees` reducers by key hash.
fn words(mappers: usize, per_mapper: usize, vocab: u64, trees: u16, seed: u64) -> Vec<Vec<(u16, Vec<u8>, u32)>> {
    let mut r = Rng(seed | 1);
    (0..mappers)
        .map(|_| {
            (0..per_mapper)
                .map(|_| {
                    // Skewed: the square of a uniform draw.
                    let u = r.f();
                    let w = ((u * u) * vocab as f64) as u64;
                    let key = match w % 23 {
                        0 => format!("an-unusually-long-word-{w:04}").into_bytes(),
                        1 => format!("0123456789abcdef{w}").into_bytes(), // 16-byte prefix shared
                        _ => format!("w{w}").into_bytes(),
                    };
                    let t = (key.iter().map(|&b| b as u64).sum::<u64>() % trees as u64) as u16;
                    (t, key, 1 + (r.next() % 7) as u32)
                })
                .collect()
        })
        .collect()
}

fn single_switch_job(op: Op, n_trees: u16, per_mapper: usize, seed: u64) -> Job {
    Job {
        mappers: vec![1, 2, 3],
        pairs: words(3, per_mapper, 300, n_trees, seed),
        reducers: (0..n_trees).map(|t| (10 + t as u8, 100 + t)).collect(),
        op,
    }
}

// ---- tests ----------------------------------------------------------------------------

#[test]
fn single_switch_sum_min_max_exact_without_faults() {
    for op in [Op::Sum, Op::Min, Op::Max] {
        let job = single_switch_job(op, 1, 1500, 3);
        let trees = trees_for(&job, 4096);
        let mut net = one_switch_net(&job, &trees, 1, Faults::default());
        let out = run_job(&job, &mut net, None);
        assert_eq!(out.results, reference(&job), "{op:?}");
        assert!(!out.fallback);
        assert_eq!(out.retransmissions, 0);
        // The switch aggregated: the reducer received far fewer pairs than were sent.
        assert!(out.reducer_pairs * 3 < total_pairs(&job), "{} of {}", out.reducer_pairs, total_pairs(&job));
        let c = net.switches[0].counters();
        assert_eq!(c.total_drops(), 0, "no drops without faults");
    }
}

/// SwitchML's bitmap protocol stops at 32 workers; ours keeps one sequence cell per
/// (tree, sender): 40 mappers, with faults on their links.
#[test]
fn forty_mappers_one_tree() {
    let n = 40;
    let job = Job { mappers: (1..=n as u8).collect(), pairs: words(n, 120, 150, 1, 17), reducers: vec![(100, 100)], op: Op::Sum };
    let trees = trees_for(&job, 1024);
    let f = Faults { loss: 0.03, dup: 0.03, reorder: 0.03 };
    let mut net = one_switch_net(&job, &trees, 5, f);
    net.clean = vec![100];
    let out = run_job(&job, &mut net, None);
    assert_eq!(out.results, reference(&job));
    assert!(!out.fallback);
    assert!(out.reducer_pairs * 4 < total_pairs(&job));
}

#[test]
fn tiny_tables_force_collisions_and_stay_exact() {
    let job = single_switch_job(Op::Sum, 1, 800, 5);
    let trees = trees_for(&job, 8);
    let mut net = one_switch_net(&job, &trees, 1, Faults::default());
    let out = run_job(&job, &mut net, None);
    assert_eq!(out.results, reference(&job));
    assert!(!out.fallback);
}

/// Defect 1 of the public DAIET code: a key hashing to a cell holding a different key was
/// added to it. With one cell per slice (four cells in all) and nine distinct keys, at
/// least five keys find their cell taken by a different key.
#[test]
fn a_colliding_key_is_never_added_to_a_different_stored_key() {
    let mut ps: Vec<(u16, Vec<u8>, u32)> = (0..8).map(|i| (0u16, format!("k{i}").into_bytes(), i + 1)).collect();
    for i in 0..4 {
        ps.push((0, b"apple".to_vec(), 10 + i));
        ps.push((0, b"k3".to_vec(), 100));
    }
    let job = Job { mappers: vec![1], pairs: vec![ps], reducers: vec![(10, 100)], op: Op::Sum };
    let trees = trees_for(&job, 1);
    let mut net = one_switch_net(&job, &trees, 1, Faults::default());
    let out = run_job(&job, &mut net, None);
    assert_eq!(out.results, reference(&job));
    assert_eq!(out.results[0][&b"apple".to_vec()], 46);
    assert_eq!(out.results[0][&b"k3".to_vec()], 404);
    // At most four keys had a cell: the others reached the reducer as spillover.
    assert!(out.reducer_pairs >= 4 + 5, "collisions went on as spillover: {}", out.reducer_pairs);
}

/// Defect 2: keys longer than 16 bytes were truncated, merging keys with a common prefix.
#[test]
fn long_keys_are_never_truncated() {
    let long = vec![b'z'; 300];
    let pairs = vec![
        vec![(0u16, b"0123456789abcdef".to_vec(), 1), (0, b"0123456789abcdefX".to_vec(), 10), (0, long.clone(), 100)],
        vec![(0u16, b"0123456789abcdef".to_vec(), 2), (0, b"0123456789abcdefY".to_vec(), 20), (0, long.clone(), 200)],
    ];
    let job = Job { mappers: vec![1, 2], pairs, reducers: vec![(10, 100)], op: Op::Sum };
    let trees = trees_for(&job, 64);
    let mut net = one_switch_net(&job, &trees, 1, Faults::default());
    let out = run_job(&job, &mut net, None);
    let want: HashMap<Vec<u8>, u64> =
        [(b"0123456789abcdef".to_vec(), 3), (b"0123456789abcdefX".to_vec(), 10), (b"0123456789abcdefY".to_vec(), 20), (long, 300)]
            .into_iter()
            .collect();
    assert_eq!(out.results[0], want);
    assert!(!out.fallback);
}

#[test]
fn several_trees_share_the_switch_memory() {
    let job = single_switch_job(Op::Sum, 3, 1000, 11);
    // Uneven partitions of the shared arrays.
    let sizes = [1024u32, 256, 64];
    let mut base = 0;
    let trees: Vec<_> = job
        .reducers
        .iter()
        .enumerate()
        .map(|(i, &(h, id))| {
            let t = tree(h as u16, i as u16, base, sizes[i], job.op, 3, 250);
            base += sizes[i];
            (id, t)
        })
        .collect();
    let mut net = one_switch_net(&job, &trees, 1, Faults::default());
    let out = run_job(&job, &mut net, None);
    assert_eq!(out.results, reference(&job));
    assert!(!out.fallback);
}

/// Faults on the mappers' links only (both directions): the switch's sequence check
/// absorbs lost, duplicated and reordered packets and lost ACKs; no fallback is needed.
#[test]
fn switch_dedups_mapper_faults_without_fallback() {
    for seed in 1..=4u64 {
        let job = single_switch_job(Op::Sum, 2, 800, seed);
        let trees = trees_for(&job, 256);
        let f = Faults { loss: 0.08, dup: 0.08, reorder: 0.08 };
        let mut net = one_switch_net(&job, &trees, seed, f);
        net.clean = job.reducers.iter().map(|r| r.0).collect();
        let out = run_job(&job, &mut net, None);
        assert_eq!(out.results, reference(&job), "seed {seed}");
        assert!(!out.fallback, "seed {seed}: the in-network path stayed exact on its own");
        assert!(out.retransmissions > 0);
        let c = net.switches[0].counters();
        let daiet = &c.programs[1].drops;
        assert!(daiet[32] + daiet[33] > 0, "gaps or in-flight copies were dropped and counted");
        assert!(out.reducer_pairs * 2 < total_pairs(&job));
    }
}

/// Faults on every host link, the reducers' too: losses after the switch are detected
/// from the switch's sequence numbers and repaired by the host-side fallback.
#[test]
fn exact_under_loss_duplication_and_reordering() {
    for seed in 1..=4u64 {
        for op in [Op::Sum, Op::Max] {
            let job = single_switch_job(op, 2, 600, seed);
            let trees = trees_for(&job, 256);
            let f = Faults { loss: 0.05, dup: 0.05, reorder: 0.05 };
            let mut net = one_switch_net(&job, &trees, seed, f);
            let out = run_job(&job, &mut net, None);
            assert_eq!(out.results, reference(&job), "seed {seed} {op:?}");
            assert!(out.retransmissions > 0, "faults were injected");
        }
    }
}

/// ToR switch A (mappers 1, 2) under switch B (mapper 3 and the reducer); A is one child
/// (sender 200) of B.
#[test]
fn two_level_tree_exact_with_and_without_faults() {
    for (seed, f) in [(1u64, Faults::default()), (2, Faults { loss: 0.03, dup: 0.03, reorder: 0.03 })] {
        let job = Job { mappers: vec![1, 2, 3], pairs: words(3, 800, 200, 1, seed), reducers: vec![(10, 100)], op: Op::Sum };
        let a = switch(8, &[(1, 1), (2, 2), (3, 7), (10, 7)], &[(100, tree(7, 0, 0, 512, Op::Sum, 2, 200))]);
        let b = switch(8, &[(1, 7), (2, 7), (3, 3), (10, 4)], &[(100, tree(4, 0, 0, 512, Op::Sum, 2, 201))]);
        let mut links = HashMap::new();
        links.insert((0usize, 1u16), End::Host(1));
        links.insert((0, 2), End::Host(2));
        links.insert((0, 7), End::Switch(1, 7));
        links.insert((1, 7), End::Switch(0, 7));
        links.insert((1, 3), End::Host(3));
        links.insert((1, 4), End::Host(10));
        let attach = [(1u8, (0usize, 1u16)), (2, (0, 2)), (3, (1, 3)), (10, (1, 4))].into_iter().collect();
        let mut net = Net { switches: vec![a, b], links, attach, up: Link::new(seed, f), down: Link::new(seed + 9, f), clean: Vec::new() };
        let out = run_job(&job, &mut net, None);
        assert_eq!(out.results, reference(&job), "seed {seed}");
        if f.loss == 0.0 {
            assert!(!out.fallback);
            assert!(out.reducer_pairs * 2 < total_pairs(&job));
        }
    }
}

#[test]
fn switch_restart_mid_job_falls_back_and_stays_exact() {
    let job = single_switch_job(Op::Sum, 1, 3000, 21);
    let trees = trees_for(&job, 4096);
    let mut net = one_switch_net(&job, &trees, 1, Faults::default());
    let l2: Vec<(u8, u16)> = [1u8, 2, 3, 10].iter().map(|&h| (h, h as u16)).collect();
    let trees2 = trees.clone();
    let out = run_job(&job, &mut net, Some((2_000_000, 0, Box::new(move || switch(16, &l2, &trees2)))));
    assert_eq!(out.results, reference(&job));
    assert!(out.fallback, "state lost at the switch: the reducer must fall back");
}

#[test]
fn tree_not_on_the_switch_falls_back_and_stays_exact() {
    let job = single_switch_job(Op::Sum, 1, 500, 4);
    let mut net = one_switch_net(&job, &[], 1, Faults { loss: 0.02, dup: 0.02, reorder: 0.02 });
    let out = run_job(&job, &mut net, None);
    assert_eq!(out.results, reference(&job));
    assert!(out.fallback);
}

#[test]
fn no_switch_at_all_falls_back_and_stays_exact() {
    let job = single_switch_job(Op::Min, 1, 500, 8);
    let mut net = Net::no_switch();
    let out = run_job(&job, &mut net, None);
    assert_eq!(out.results, reference(&job));
    assert!(out.fallback);
    assert!(out.reducer_packets > 0);
}

#[test]
fn malformed_daiet_packets_are_dropped_and_counted() {
    let trees = [(100u16, tree(10, 0, 0, 64, Op::Sum, 1, 250))];
    let mut sw = switch(16, &[(1, 1), (10, 10)], &trees);
    let mut r = Rng(99);
    let mut frames = Vec::new();
    // Truncated headers, too many pairs, pairs cut short, END with pairs, random bytes.
    frames.push(frame(1, 5000, 10, UDP_PORT, &[0, 100, 0]));
    let mut h = wire::daiet::Repr { tree_id: 100, num_pairs: 11, ..Default::default() }.to_vec();
    h.extend(vec![b'a'; 220]);
    frames.push(frame(1, 5000, 10, UDP_PORT, &h));
    let mut h = wire::daiet::Repr { tree_id: 100, num_pairs: 3, ..Default::default() }.to_vec();
    h.extend(vec![b'a'; 25]);
    frames.push(frame(1, 5000, 10, UDP_PORT, &h));
    let mut h = wire::daiet::Repr { tree_id: 100, flags: wire::daiet::flags::END, num_pairs: 1, ..Default::default() }.to_vec();
    h.extend(vec![b'a'; 20]);
    frames.push(frame(1, 5000, 10, UDP_PORT, &h));
    let n_bad = frames.len() as u64;
    for _ in 0..2000 {
        let n = (r.next() % 300) as usize;
        let mut p: Vec<u8> = (0..n).map(|_| r.next() as u8).collect();
        if p.len() >= 2 {
            p[0] = 0;
            p[1] = 100;
        }
        frames.push(frame(1, 5000, 10, UDP_PORT, &p));
    }
    let mut bufs: Vec<PacketBuf> = frames.iter().map(|f| PacketBuf::from_slice(f, 1)).collect();
    sw.process(&mut bufs, 1);
    for t in 0..2000 {
        sw.tick(2 + t);
    }
    sw.drain_all();
    let c = sw.counters();
    assert!(c.drops[DropCode::MALFORMED.0 as usize] >= n_bad, "malformed drops counted: {}", c.drops[DropCode::MALFORMED.0 as usize]);
    // The switch still aggregates afterwards.
    let job =
        Job { mappers: vec![1], pairs: vec![vec![(0, b"k".to_vec(), 1), (0, b"k".to_vec(), 2)]], reducers: vec![(10, 101)], op: Op::Sum };
    let trees = [(101u16, tree(10, 1, 64, 64, Op::Sum, 1, 250))];
    let mut net = one_switch_net(&job, &trees, 1, Faults::default());
    let out = run_job(&job, &mut net, None);
    assert_eq!(out.results, reference(&job));
}

#[test]
fn daiet_fits_tofino1() {
    let set = set();
    let decls: Vec<_> = (0..set.len()).map(|i| set.decl(i)).collect();
    let r = ResourceReport::new(&decls, &Target::tofino1());
    assert!(r.fits, "{:?}", r.problems);
    assert!(r.stages_used <= 12);
}
