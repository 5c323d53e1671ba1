//! SwitchAgg end to end in memory: hostlib's exactly-once mappers and reducers speaking
//! SwitchAgg's wire format (`Protocol::SwitchAgg`) exchange real Ethernet/IPv4/UDP frames
//! through `pisa::Switch` instances running `forward,switchagg`, with seeded loss,
//! duplication and reordering on the host links, against a HashMap reference.

use std::collections::HashMap;
use std::sync::Arc;

use hostlib::aggregation::switchagg::SWITCH_CHILD_MIN;
use hostlib::aggregation::Protocol;
use hostlib::switchagg::harness::tree_config_op;
use pisa::control::{CloneSession, ControlOp, Replica, WriteOp};
use pisa::{PacketBuf, PipeConfig, Program, ProgramSet, Switch, PORT_RECIRC};
use programs::forward::Forward;
use programs::switchagg::{Config, SwitchAgg, ACK_RID, ACK_SESSION_BASE, FLUSH_SESSION};
use wire::daiet::Op;
use wire::switchagg::{Operation, UDP_PORT};

mod common;
use common::*;

fn run_job(job: &Job, net: &mut Net, restart: Restart) -> Outcome {
    common::run_job(job, net, restart, Protocol::SwitchAgg, UDP_PORT)
}

// ---- switches -------------------------------------------------------------------------

/// Small engines, so that flushes are short and collisions happen.
fn small() -> Config {
    Config { fpe_bytes: 64 << 10, bpe_bytes: 128 << 10, slots_per_bucket: 4, max_trees: 4, max_children: 256 }
}

fn set(cfg: Config) -> Arc<ProgramSet> {
    let progs: Vec<Arc<dyn Program>> = vec![Arc::new(Forward::new()), Arc::new(SwitchAgg::with_config(cfg))];
    Arc::new(ProgramSet::new(progs).unwrap())
}

/// A tree at one switch: `(tree id, parent port, children, up_child)`.
type TreeAt = (u16, u16, u16, u16);

fn operation(op: Op) -> Operation {
    Operation::from_code(op as u8).unwrap()
}

/// A switch with `ports` ports: L2 entries `host -> port`, trees (memory split evenly),
/// ACK sessions for every port and the flush session, as the controller installs them.
fn switch(cfg: Config, ports: u16, l2: &[(u8, u16)], trees: &[TreeAt], op: Op) -> Switch {
    let set = set(cfg);
    let pc = PipeConfig { queue_capacity: 1 << 16, egress_budget: 1 << 16, recirc_capacity: 1 << 12, ..PipeConfig::default() };
    let mut sw = Switch::new(set.clone(), ports, 1, pc);
    install_l2(&mut sw, &set, l2);
    for (i, &(id, parent, children, up)) in trees.iter().enumerate() {
        sw.control(&tree_config_op(&set, id, parent, children, operation(op), i as u8, trees.len() as u8, up)).unwrap();
    }
    for p in 0..ports {
        let session_cfg = CloneSession { replicas: vec![Replica { port: p, rid: ACK_RID }], truncate_len: 0 };
        sw.control(&ControlOp::CloneSessionWrite { op: WriteOp::Insert, session: ACK_SESSION_BASE + p, session_cfg }).unwrap();
    }
    let session_cfg = CloneSession { replicas: vec![Replica { port: PORT_RECIRC, rid: 0 }], truncate_len: 0 };
    sw.control(&ControlOp::CloneSessionWrite { op: WriteOp::Insert, session: FLUSH_SESSION, session_cfg }).unwrap();
    sw
}

/// Skewed words of every key-length group, some longer than any engine's slots (65..=254
/// bytes) and some longer than a SwitchAgg key (> 255 bytes); `trees` reducers by key.
fn words(mappers: usize, per_mapper: usize, vocab: u64, trees: u16, seed: u64) -> Vec<Vec<(u16, Vec<u8>, u32)>> {
    let mut r = Rng(seed | 1);
    (0..mappers)
        .map(|_| {
            (0..per_mapper)
                .map(|_| {
                    let u = r.f();
                    let w = ((u * u) * vocab as f64) as u64;
                    let key = match w % 29 {
                        0 => format!("{w:0>100}").into_bytes(),                 // 100 bytes: no engine holds it
                        1 => format!("{w:x>300}").into_bytes(),                 // 300 bytes: escaped in pieces
                        2 => format!("{:z>60}-{w}", "").into_bytes(),           // 61..64 bytes: the last group
                        3 => [b'k', 0, 0xFF, w as u8, (w >> 8) as u8].to_vec(), // binary bytes
                        _ => format!("w{w}").into_bytes(),
                    };
                    let t = (key.iter().map(|&b| b as u64).sum::<u64>() % trees as u64) as u16;
                    (t, key, 1 + (r.next() % 7) as u32)
                })
                .collect()
        })
        .collect()
}

/// One switch: mappers on ports = host numbers, reducers after them.
fn one_switch_net(job: &Job, cfg: Config, seed: u64, f: Faults, with_trees: bool) -> Net {
    let (hosts, l2, ports) = job_hosts(job);
    let trees: Vec<TreeAt> = if with_trees {
        job.reducers.iter().map(|&(h, id)| (id, h as u16, job.mappers.len() as u16, SWITCH_CHILD_MIN)).collect()
    } else {
        Vec::new()
    };
    Net::one_switch(switch(cfg, ports, &l2, &trees, job.op), &hosts, seed, f)
}

fn single_switch_job(op: Op, n_trees: u16, per_mapper: usize, seed: u64) -> Job {
    Job {
        mappers: vec![1, 2, 3],
        pairs: words(3, per_mapper, 300, n_trees, seed),
        reducers: (0..n_trees).map(|t| (10 + t as u8, 100 + t)).collect(),
        op,
    }
}

fn total_pairs(job: &Job) -> u64 {
    job.pairs.iter().map(|p| p.len() as u64).sum()
}

fn drops(sw: &Switch, name: &str) -> u64 {
    let c = sw.counters();
    let d = sw.pipes()[0].set().decl(1);
    let i = d.drop_reasons.iter().position(|r| r == name).unwrap();
    c.programs[1].drops[pisa::DropCode::FIRST_PROGRAM as usize + i]
}

// ---- tests ----------------------------------------------------------------------------

#[test]
fn switchagg_sum_min_max_exact_without_faults() {
    for op in [Op::Sum, Op::Min, Op::Max] {
        let job = single_switch_job(op, 2, 1500, 3);
        let mut net = one_switch_net(&job, small(), 1, Faults::default(), true);
        let out = run_job(&job, &mut net, None);
        assert_eq!(out.results, reference(&job), "{op:?}");
        assert!(!out.fallback, "{op:?}");
        assert_eq!(out.retransmissions, 0);
        // The switch aggregated: the reducers received far fewer pairs than were sent.
        assert!(out.reducer_pairs * 3 < total_pairs(&job), "{} of {}", out.reducer_pairs, total_pairs(&job));
        assert_eq!(net.switches[0].counters().total_drops(), 0, "no drops without faults");
    }
}

/// Large engines, few keys: the flush walks every word of the tree's regions, but sends the
/// reducer only the passes that found pairs and the EoT pass (the others recirculate
/// quietly), so the reducer sees about as many packets as the pairs fill.
#[test]
fn switchagg_sparse_table_flush_sends_no_empty_packets() {
    let job = single_switch_job(Op::Sum, 1, 400, 9);
    let cfg = Config { fpe_bytes: 1 << 20, bpe_bytes: 4 << 20, ..small() };
    let mut net = one_switch_net(&job, cfg, 1, Faults::default(), true);
    let out = run_job(&job, &mut net, None);
    assert_eq!(out.results, reference(&job));
    assert!(!out.fallback);
    let words: u64 = net.switches[0].pipes()[0].set().decl(1).memories.iter().map(|m| m.words as u64).sum();
    // Data packets (at most 3 mappers x 400 pairs / 200 a packet... and their ENDs), the
    // reducer's status queries, and the flush: far below one packet per few words.
    assert!(out.reducer_packets < 60, "{} packets to the reducer; the tree has {words} bucket words", out.reducer_packets);
    assert!(words > 10_000);
}

/// Tiny engines (no BPE): most pairs collide and travel on evicted; still exact.
#[test]
fn switchagg_tiny_engines_evict_and_stay_exact() {
    let job = single_switch_job(Op::Sum, 1, 800, 5);
    let cfg = Config { fpe_bytes: 4 << 10, bpe_bytes: 0, ..small() };
    let mut net = one_switch_net(&job, cfg, 1, Faults::default(), true);
    let out = run_job(&job, &mut net, None);
    assert_eq!(out.results, reference(&job));
    assert!(!out.fallback);
}

/// Keys of 65..=255 bytes pass the switch intact; keys longer than a SwitchAgg key (255)
/// and the empty key arrive whole, through escaped pieces.
#[test]
fn switchagg_long_and_empty_keys_arrive_intact() {
    let k300: Vec<u8> = (0..300u32).map(|i| (i % 251) as u8).collect();
    let k1000 = vec![b'q'; 1000];
    let k100 = vec![b'h'; 100];
    let mut k300b = k300.clone();
    k300b[299] ^= 1; // differs in the last byte only: no prefix merging
    let pairs = vec![
        vec![(0u16, k300.clone(), 1), (0, k100.clone(), 10), (0, vec![], 5), (0, b"x".to_vec(), 1), (0, k1000.clone(), 7)],
        vec![(0u16, k300.clone(), 2), (0, k100.clone(), 20), (0, k300b.clone(), 3), (0, vec![], 6), (0, k1000.clone(), 8)],
    ];
    let job = Job { mappers: vec![1, 2], pairs, reducers: vec![(10, 100)], op: Op::Sum };
    let mut net = one_switch_net(&job, small(), 1, Faults::default(), true);
    let out = run_job(&job, &mut net, None);
    let want: HashMap<Vec<u8>, u64> =
        [(k300, 3), (k300b, 3), (k100, 30), (vec![], 11), (b"x".to_vec(), 1), (k1000, 15)].into_iter().collect();
    assert_eq!(out.results[0], want);
    assert_eq!(out.results, reference(&job));
    assert!(!out.fallback);
}

/// Faults on the mappers' links only (both directions): the switch's `expected_seq`
/// absorbs lost, duplicated and reordered packets and lost ACKs; no fallback is needed.
#[test]
fn switchagg_dedups_mapper_faults_without_fallback() {
    for seed in 1..=4u64 {
        let job = single_switch_job(Op::Sum, 2, 800, seed);
        let f = Faults { loss: 0.08, dup: 0.08, reorder: 0.08 };
        let mut net = one_switch_net(&job, small(), seed, f, true);
        net.clean = job.reducers.iter().map(|r| r.0).collect();
        let out = run_job(&job, &mut net, None);
        assert_eq!(out.results, reference(&job), "seed {seed}");
        assert!(!out.fallback, "seed {seed}: the in-network path stayed exact on its own");
        assert!(out.retransmissions > 0);
        assert!(drops(&net.switches[0], "switchagg_seq_gap") > 0, "gaps were dropped and counted");
        assert!(out.reducer_pairs * 2 < total_pairs(&job));
    }
}

/// Faults on every host link, the reducers' too: losses after the switch are detected
/// from the switch's `up_seq` numbers and repaired by the host-side fallback.
#[test]
fn switchagg_exact_under_loss_duplication_and_reordering() {
    let mut fallbacks = 0;
    for seed in 1..=4u64 {
        for op in [Op::Sum, Op::Max] {
            let job = single_switch_job(op, 2, 600, seed);
            let f = Faults { loss: 0.05, dup: 0.05, reorder: 0.05 };
            let mut net = one_switch_net(&job, small(), seed, f, true);
            let out = run_job(&job, &mut net, None);
            assert_eq!(out.results, reference(&job), "seed {seed} {op:?}");
            assert!(out.retransmissions > 0, "faults were injected");
            fallbacks += out.fallback as u32;
        }
    }
    assert!(fallbacks > 0, "some switch->reducer loss was detected");
}

/// Leaf switch A (mappers 1, 2) under root switch B (mapper 3 and the reducer); A is child
/// 200 of B, B sends to the reducer as child SWITCH_CHILD_MIN.
#[test]
fn switchagg_two_level_tree_exact() {
    for (seed, f) in [(1u64, Faults::default()), (2, Faults { loss: 0.03, dup: 0.03, reorder: 0.03 })] {
        let job = Job { mappers: vec![1, 2, 3], pairs: words(3, 800, 200, 1, seed), reducers: vec![(10, 100)], op: Op::Sum };
        let a = switch(small(), 8, &[(1, 1), (2, 2), (3, 7), (10, 7)], &[(100, 7, 2, 200)], Op::Sum);
        let b = switch(small(), 8, &[(1, 7), (2, 7), (3, 3), (10, 4)], &[(100, 4, 2, SWITCH_CHILD_MIN)], Op::Sum);
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
fn switchagg_restart_mid_job_falls_back_and_stays_exact() {
    let job = single_switch_job(Op::Sum, 1, 8000, 21);
    let mut net = one_switch_net(&job, small(), 1, Faults::default(), true);
    let l2: Vec<(u8, u16)> = [1u8, 2, 3, 10].iter().map(|&h| (h, h as u16)).collect();
    let trees = vec![(100u16, 10u16, 3u16, SWITCH_CHILD_MIN)];
    let out = run_job(&job, &mut net, Some((400_000, 0, Box::new(move || switch(small(), 16, &l2, &trees, Op::Sum)))));
    assert_eq!(out.results, reference(&job));
    assert!(out.fallback, "state lost at the switch: the reducer must fall back");
}

#[test]
fn switchagg_tree_not_on_the_switch_falls_back_and_stays_exact() {
    let job = single_switch_job(Op::Sum, 1, 500, 4);
    let mut net = one_switch_net(&job, small(), 1, Faults { loss: 0.02, dup: 0.02, reorder: 0.02 }, false);
    let out = run_job(&job, &mut net, None);
    assert_eq!(out.results, reference(&job));
    assert!(out.fallback);
}

#[test]
fn switchagg_no_switch_at_all_falls_back_and_stays_exact() {
    let job = single_switch_job(Op::Min, 1, 500, 8);
    let mut net = Net::no_switch();
    let out = run_job(&job, &mut net, None);
    assert_eq!(out.results, reference(&job));
    assert!(out.fallback);
    assert!(out.reducer_packets > 0);
}

/// The host protocol's control messages pass the switch untouched (BYPASS); a CONTROL
/// packet without BYPASS, and the other hostile shapes, are counted drops, never panics.
#[test]
fn switchagg_control_messages_bypass_and_hostile_packets_are_counted_drops() {
    use hostlib::aggregation::Header;
    use wire::daiet::flags as df;
    let mut sw = switch(small(), 16, &[(1, 1), (10, 10)], &[(100, 10, 1, SWITCH_CHILD_MIN)], Op::Sum);
    let hdr = Header { tree_id: 100, flags: df::BYPASS | df::QUERY, op: Op::Sum, sender: 0, epoch: 0 };
    let q = Protocol::SwitchAgg.control(hdr, 0, wire::daiet::info::FINISHED);
    let mut rx = vec![PacketBuf::from_slice(&frame(1, MAPPER_PORT, 10, UDP_PORT, &q), 1)];
    sw.process(&mut rx, 0);
    let out = sw.drain_all();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, 10, "to the reducer's port");
    assert_eq!(unframe(&out[0].1).unwrap().2, &q[..], "untouched");
    let mut bad = q.clone();
    bad[1] = wire::switchagg::flags::CONTROL; // CONTROL without BYPASS
    let mut r = Rng(7);
    let mut frames = vec![frame(1, MAPPER_PORT, 10, UDP_PORT, &bad), frame(1, MAPPER_PORT, 10, UDP_PORT, &[1, 0, 0])];
    for _ in 0..200 {
        let len = (r.next() % 80) as usize;
        let mut p: Vec<u8> = (0..len).map(|_| r.next() as u8).collect();
        if len > 1 {
            p[0] = 1;
            p[1] &= 0x03; // no BYPASS: the switch parses it
        }
        frames.push(frame(1, MAPPER_PORT, 10, UDP_PORT, &p));
    }
    let n = frames.len() as u64;
    let mut rx: Vec<PacketBuf> = frames.iter().map(|f| PacketBuf::from_slice(f, 1)).collect();
    sw.process(&mut rx, 1);
    let passed = sw.drain_all().len() as u64;
    let c = sw.counters();
    assert!(c.drops[pisa::DropCode::MALFORMED.0 as usize] >= 2, "CONTROL without BYPASS and a cut header are malformed");
    assert!(c.total_drops() + passed >= n, "every hostile frame is dropped and counted or forwarded");
}
