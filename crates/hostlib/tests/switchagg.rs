//! SwitchAgg end to end in memory: mappers → switch(es) → reducers, every result compared
//! with the same aggregation done without a switch (a HashMap per reducer).

use std::sync::Arc;

use hostlib::switchagg::harness::{self, frame, Faults, Job, Topology};
use pisa::control::{ControlOp, ControlReply};
use pisa::{PacketBuf, PipeConfig, Program, ProgramSet, ResourceReport, Switch, Target};
use programs::switchagg::{Config, SwitchAgg};
use proptest::prelude::*;
use wire::switchagg::{flags, Operation};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn key(i: u64, len: usize) -> Vec<u8> {
    let mut k = format!("k{i}-").into_bytes();
    while k.len() < len {
        k.push(b'a' + (i % 26) as u8);
    }
    k.truncate(len.max(1));
    // Keep keys distinct per i even when cut: put the number at the end too.
    if len >= 12 {
        let tail = format!("{i:010}");
        let n = k.len();
        k[n - 10..].copy_from_slice(tail.as_bytes());
    }
    k
}

#[allow(clippy::too_many_arguments)]
/// `mappers` mappers each sending `per` pairs over `vocab` keys, uniform or Zipf(`alpha`).
fn job(
    mappers: usize,
    per: usize,
    vocab: u64,
    alpha: Option<f64>,
    len: impl Fn(u64) -> usize,
    trees: usize,
    op: Operation,
    seed: u64,
) -> Job {
    let mut rng = Rng(seed | 1);
    let cdf: Vec<f64> = match alpha {
        Some(a) => {
            let w: Vec<f64> = (1..=vocab).map(|r| 1.0 / (r as f64).powf(a)).collect();
            let s: f64 = w.iter().sum();
            let mut acc = 0.0;
            w.iter()
                .map(|x| {
                    acc += x / s;
                    acc
                })
                .collect()
        }
        None => Vec::new(),
    };
    let ids: Vec<u64> = (0..vocab).collect();
    let keys: Vec<Vec<u8>> = ids.iter().map(|&i| key(i, len(i))).collect();
    let mappers = (0..mappers)
        .map(|_| {
            (0..per)
                .map(|_| {
                    let i = match alpha {
                        Some(_) => {
                            let u = rng.unit();
                            cdf.partition_point(|&c| c < u).min(vocab as usize - 1)
                        }
                        None => (rng.next() % vocab) as usize,
                    };
                    (keys[i].clone(), (rng.next() % 1000) as u32 + 1)
                })
                .collect()
        })
        .collect();
    Job { mappers, trees, op }
}

fn small() -> Config {
    Config { fpe_bytes: 64 << 10, bpe_bytes: 512 << 10, slots_per_bucket: 4, max_trees: 8, max_children: 16 }
}

fn check(job: &Job, topo: Topology, cfg: Config, faults: Faults) -> harness::Outcome {
    let out = harness::run(job, topo, cfg, faults);
    assert!(out.complete, "every tree flushed to its reducer: {out:?}");
    assert_eq!(out.reducer_seq_errors, 0, "the switch's stream to the reducer is in order");
    let want = harness::reference(job);
    assert_eq!(out.result.len(), want.len());
    for (t, (got, want)) in out.result.iter().zip(&want).enumerate() {
        assert_eq!(got.len(), want.len(), "tree {t}: number of keys");
        assert!(got == want, "tree {t}: reducer result differs from the reference");
    }
    assert!(!out.drops.keys().any(|k| k.starts_with("violation")), "no hardware-rule violation: {:?}", out.drops);
    out
}

#[test]
fn uniform_keys_sum_one_switch() {
    let j = job(3, 3000, 400, None, |i| 4 + (i % 20) as usize, 1, Operation::Sum, 1);
    let out = check(&j, Topology::Single, small(), Faults::default());
    assert!(out.reduction_ratio() > 0.8, "400 keys fit: most pairs aggregate ({})", out.reduction_ratio());
    assert!(out.recirculations > 0, "the flush recirculates");
}

#[test]
fn zipf_keys_with_collisions_and_evictions_to_the_bpe() {
    // Tiny engines: 2 KB of FPE, 8 KB of BPE for 5000 keys.
    let cfg = Config { fpe_bytes: 2 << 10, bpe_bytes: 8 << 10, ..small() };
    let j = job(4, 4000, 5000, Some(0.99), |i| 3 + (i % 30) as usize, 1, Operation::Sum, 2);
    let out = check(&j, Topology::Single, cfg, Faults::default());
    assert!(out.fpe_evictions > 0 && out.bpe_evictions > 0, "{out:?}");
    assert!(out.reduction_ratio() > 0.0 && out.reduction_ratio() < 0.9);
}

#[test]
fn no_back_end_engine() {
    let cfg = Config { fpe_bytes: 4 << 10, bpe_bytes: 0, ..small() };
    let j = job(2, 3000, 2000, None, |i| 5 + (i % 8) as usize, 1, Operation::Sum, 3);
    let out = check(&j, Topology::Single, cfg, Faults::default());
    assert!(out.fpe_evictions > 0);
    assert_eq!(out.bpe_evictions, 0);
}

#[test]
fn keys_of_every_group_and_longer_min_max() {
    // Lengths 1..=100: all eight groups and keys over 64 bytes, which bypass the engines.
    for op in [Operation::Min, Operation::Max, Operation::Sum] {
        let j = job(3, 1500, 300, None, |i| 1 + (i % 100) as usize, 1, op, 4);
        let out = check(&j, Topology::Single, Config { fpe_bytes: 8 << 10, bpe_bytes: 16 << 10, ..small() }, Faults::default());
        assert!(out.result[0].keys().any(|k| k.len() > 64), "long keys reach the reducer intact");
        assert!(out.result[0].keys().any(|k| k.len() == 1));
    }
}

#[test]
fn several_trees_share_the_memory() {
    let j = job(4, 2000, 800, Some(0.8), |i| 6 + (i % 40) as usize, 3, Operation::Sum, 5);
    let out = check(&j, Topology::Single, small(), Faults::default());
    assert!(out.result.iter().all(|r| !r.is_empty()));
}

#[test]
fn two_level_tree() {
    let j = job(6, 1500, 1000, Some(0.99), |i| 4 + (i % 50) as usize, 2, Operation::Sum, 6);
    let out = check(&j, Topology::TwoLevel(3), Config { fpe_bytes: 8 << 10, bpe_bytes: 32 << 10, ..small() }, Faults::default());
    // The switches' own pair counters: the leaves took every mapper pair, the top took what
    // the leaves sent on and sent the reducers what they got.
    let (leaves, top) = out.switch_pairs.split_at(3);
    assert_eq!(leaves.iter().map(|p| p.0).sum::<u64>(), out.pairs_in, "{:?}", out.switch_pairs);
    assert_eq!(top[0].0, leaves.iter().map(|p| p.1).sum::<u64>(), "{:?}", out.switch_pairs);
    assert_eq!(top[0].1, out.pairs_out, "{:?}", out.switch_pairs);
    assert!(top[0].1 < top[0].0 && leaves.iter().all(|p| p.1 < p.0), "each switch reduced: {:?}", out.switch_pairs);
}

#[test]
fn chain_of_hops() {
    let j = job(2, 2000, 3000, None, |i| 8 + (i % 8) as usize, 1, Operation::Max, 7);
    check(&j, Topology::Chain(3), Config { fpe_bytes: 8 << 10, bpe_bytes: 0, ..small() }, Faults::default());
}

#[test]
fn exactly_once_under_loss_duplication_and_reordering() {
    let j = job(3, 3000, 600, Some(0.99), |i| 4 + (i % 24) as usize, 2, Operation::Sum, 8);
    for seed in [1, 2] {
        let f = Faults { seed, loss: 0.1, duplicate: 0.1, reorder: 0.1 };
        let out = check(&j, Topology::Single, Config { fpe_bytes: 4 << 10, bpe_bytes: 16 << 10, ..small() }, f);
        assert!(out.faults.iter().all(|&k| k > 0), "faults were injected: {:?}", out.faults);
        assert!(out.retransmissions > 0);
        assert!(out.drops.get("switchagg_seq_gap").copied().unwrap_or(0) > 0, "gaps dropped: {:?}", out.drops);
        // Duplicates and retransmissions are not counted again: exactly the mappers' pairs.
        assert_eq!(out.switch_pairs, vec![(out.pairs_in, out.pairs_out)]);
    }
}

fn one_switch() -> (Switch, Arc<ProgramSet>) {
    let progs: Vec<Arc<dyn Program>> = vec![Arc::new(programs::forward::Forward::new()), Arc::new(SwitchAgg::with_config(small()))];
    let set = Arc::new(ProgramSet::new(progs).unwrap());
    (Switch::new(set.clone(), 4, 1, PipeConfig::default()), set)
}

fn drops(sw: &Switch, set: &ProgramSet) -> Vec<(String, u64)> {
    let c = sw.counters();
    let d = set.decl(1);
    c.programs[1]
        .drops
        .iter()
        .enumerate()
        .filter(|(_, &k)| k > 0)
        .map(|(i, &k)| {
            let n = pisa::DropCode(i as u8).builtin_name().map(str::to_string).unwrap_or_else(|| d.drop_reasons[i - 32].clone());
            (n, k)
        })
        .collect()
}

#[test]
fn malformed_packets_are_counted_drops() {
    let (mut sw, set) = one_switch();
    let good = frame(1, 200, 0, Operation::Sum, 0, 0, 0, &[(b"abc".to_vec(), 1)]);
    let mut bad = Vec::new();
    // Truncated inside a pair.
    let mut t = good.clone();
    t.truncate(good.len() - 2);
    bad.push(t);
    // A value of 8 bytes.
    let mut v = good.clone();
    v[42 + 14 + 1] = 8;
    bad.push(v);
    // More pairs than bytes.
    let mut n = good.clone();
    n[42 + 12] = 0x7F;
    bad.push(n);
    // UDP length beyond the frame.
    let mut u = good.clone();
    u[38] = 0xFF;
    bad.push(u);
    let mut rx: Vec<PacketBuf> = bad.iter().map(|b| PacketBuf::from_slice(b, 0)).collect();
    // Unknown tree (nothing configured on this switch).
    rx.push(PacketBuf::from_slice(&good, 0));
    sw.process(&mut rx, 1);
    assert!(sw.drain_all().is_empty());
    let d = drops(&sw, &set);
    assert!(d.contains(&("malformed".to_string(), 4)), "{d:?}");
    assert!(d.contains(&("switchagg_unknown_tree".to_string(), 1)), "{d:?}");
    assert_eq!(sw.counters().programs[1].violations.iter().sum::<u64>(), 0);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]
    /// Arbitrary bytes after valid Ethernet/IPv4/UDP headers to port 7071: never a panic,
    /// never a rule violation, every packet accounted for.
    #[test]
    fn hostile_payloads_never_panic(payload in proptest::collection::vec(any::<u8>(), 0..400), fl in 0u8..8) {
        let (mut sw, _) = one_switch();
        let mut f = frame(1, 200, 0, Operation::Sum, 0, 0, fl & !flags::BYPASS, &[]);
        f.truncate(42);
        f.extend_from_slice(&payload);
        let udp_len = (8 + payload.len()) as u16;
        f[38..40].copy_from_slice(&udp_len.to_be_bytes());
        let mut rx = vec![PacketBuf::from_slice(&f, 0)];
        sw.process(&mut rx, 1);
        let _ = sw.drain_all();
        prop_assert_eq!(sw.counters().programs[1].violations.iter().sum::<u64>(), 0);
    }
}

#[test]
fn duplicate_is_acknowledged_not_added() {
    // Drive one switch by hand: the same packet twice, then the next one.
    let j = Job { mappers: vec![vec![]], trees: 1, op: Operation::Sum };
    let _ = j;
    let (mut sw, set) = one_switch();
    // Configure tree 0 → parent port 3, 1 child, SUM, region 0 of 1.
    let ids = set.ids(1);
    sw.control(&ControlOp::TableWrite {
        table_id: ids.tables[0],
        op: pisa::WriteOp::Insert,
        matches: vec![pisa::FieldMatch::Exact { field: 0, value: vec![0, 0] }],
        priority: 0,
        action_id: ids.actions[0],
        params: vec![(1, vec![0, 3]), (2, vec![0, 1]), (3, vec![0]), (4, vec![0]), (5, vec![1]), (6, vec![0, 0])],
    })
    .unwrap();
    let p0 = frame(1, 200, 0, Operation::Sum, 0, 0, 0, &[(b"x".to_vec(), 5)]);
    for _ in 0..3 {
        let mut rx = vec![PacketBuf::from_slice(&p0, 0)];
        sw.process(&mut rx, 1);
        let out = sw.drain_all();
        // Absorbed: the packet comes back to the mapper as the ACK of seq 0.
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0, 0);
        let a = wire::switchagg::AggPacket::new_checked(&out[0].1[42..]).unwrap();
        assert_eq!((a.flags(), a.seq(), a.num_pairs()), (flags::ACK, 0, 0));
        assert_eq!(&out[0].1[0..6], &p0[6..12], "addressed back to the sender");
    }
    // A gap (seq 2 before 1) is dropped.
    let p2 = frame(1, 200, 0, Operation::Sum, 0, 2, flags::EOT, &[(b"x".to_vec(), 5)]);
    let mut rx = vec![PacketBuf::from_slice(&p2, 0)];
    sw.process(&mut rx, 2);
    assert!(sw.drain_all().is_empty());
    // Seq 1 with EoT: the last child is done; the flush carries x = 5 + 7 (not 5+5+5+7).
    sw.control(&ControlOp::CloneSessionWrite {
        op: pisa::WriteOp::Insert,
        session: programs::switchagg::FLUSH_SESSION,
        session_cfg: pisa::CloneSession { replicas: vec![pisa::Replica { port: pisa::PORT_RECIRC, rid: 0 }], truncate_len: 0 },
    })
    .unwrap();
    let p1 = frame(1, 200, 0, Operation::Sum, 0, 1, flags::EOT, &[(b"x".to_vec(), 7)]);
    let mut rx = vec![PacketBuf::from_slice(&p1, 0)];
    sw.process(&mut rx, 3);
    let mut got = Vec::new();
    for t in 0..10_000 {
        got.extend(sw.drain_all());
        sw.tick(4 + t);
    }
    let to_parent: Vec<_> = got.iter().filter(|(p, _)| *p == 3).collect();
    let mut pairs = Vec::new();
    let mut eot = 0;
    for (_, b) in &to_parent {
        let a = wire::switchagg::AggPacket::new_checked(&b[42..]).unwrap();
        eot += a.eot() as u32;
        pairs.extend(a.pairs().map(|r| r.map(|(k, v)| (k.to_vec(), v)).unwrap()));
    }
    assert_eq!(pairs, vec![(b"x".to_vec(), 12)]);
    assert_eq!(eot, 1);
    let rid = set.ids(1).registers[programs::switchagg::reg::EXPECTED_SEQ];
    match sw.control(&ControlOp::RegisterRead { register_id: rid, index: Some(0) }).unwrap() {
        ControlReply::RegisterCells(v) => assert_eq!(v[0].1, 2),
        _ => unreachable!(),
    }
}

#[test]
fn resource_report_tells_the_truth() {
    let fwd = programs::forward::Forward::new();
    let sa = SwitchAgg::new();
    let fpga = ResourceReport::new(&[fwd.decl(), sa.decl()], &Target::switchagg_fpga());
    assert!(fpga.fits, "the default (4 MB FPE, 256 MB BPE) fits the NetFPGA: {:?}", fpga.problems);
    assert_eq!(fpga.memories.len(), 16);
    assert!(fpga.memory_sram_bytes <= 4 << 20 && fpga.memory_sram_bytes > 3 << 20);
    let tofino = ResourceReport::new(&[fwd.decl(), sa.decl()], &Target::tofino1());
    assert!(!tofino.fits);
    assert!(tofino.problems.iter().any(|p| p.contains("payload analyzer")), "{:?}", tofino.problems);
    assert!(tofino.problems.iter().any(|p| p.contains("block memory")));
    // The paper's 32 MB of FPE memory exceeds the 690T's block RAM.
    let big = SwitchAgg::with_config(Config { fpe_bytes: 32 << 20, ..Config::default() });
    let r = ResourceReport::new(&[fwd.decl(), big.decl()], &Target::switchagg_fpga());
    assert!(!r.fits && r.problems.iter().any(|p| p.contains("block RAM")), "{:?}", r.problems);
}

#[test]
fn flush_packets_are_filled_to_the_frame() {
    // 3000 keys of 4..=24 bytes fit the engines: the reducer gets the flush only. Each flush
    // packet but the last takes bucket words until the next word's pairs do not fit, so it
    // is short of a full frame by less than one bucket (4 slots of at most 6 + 24 bytes).
    let cfg = Config { fpe_bytes: 4 << 20, bpe_bytes: 0, ..small() };
    let j = job(2, 6000, 3000, None, |i| 4 + (i % 21) as usize, 1, Operation::Sum, 9);
    let out = check(&j, Topology::Single, cfg, Faults::default());
    assert_eq!((out.fpe_evictions, out.pairs_out), (0, out.result[0].len() as u64), "every key in the FPEs, flushed once");
    let room = (programs::switchagg::MAX_FRAME - 42 - wire::switchagg::HEADER_LEN) as u64;
    let least = room - 4 * 30;
    let bound = out.pair_bytes_out.div_ceil(least);
    eprintln!(
        "reducer packets {} for {} pair bytes (full frames: {}, bound {bound})",
        out.reducer_packets,
        out.pair_bytes_out,
        out.pair_bytes_out.div_ceil(room)
    );
    assert!(out.reducer_packets <= bound, "{} packets for {} pair bytes; at most {bound}", out.reducer_packets, out.pair_bytes_out);
}
