//! DAIET end to end in memory: hostlib mappers and reducers exchange real Ethernet/IPv4/UDP
//! frames through `pisa::Switch` instances running `forward,daiet`, with seeded loss,
//! duplication and reordering on the host links, against a HashMap reference.

use std::collections::HashMap;
use std::sync::Arc;

use hostlib::aggregation::{Mapper, MapperConfig, Mode, Reducer, ReducerConfig};
use pisa::control::{CloneSession, ControlOp, Replica, WriteOp};
use pisa::{DropCode, FieldMatch, PacketBuf, PipeConfig, ProgramSet, ResourceReport, Switch, Target, PORT_RECIRC};
use programs::daiet::{Daiet, TreeConfig, ACK_FRAME_LEN, ACK_SESSION_BASE, WALK_SESSION};
use programs::forward::Forward;
use wire::daiet::{Op, UDP_PORT};

// ---- a small seeded generator and lossy links ----------------------------------------

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn f(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[derive(Clone, Copy, Default)]
struct Faults {
    loss: f64,
    dup: f64,
    reorder: f64,
}

/// One direction of a link: loses, duplicates, holds back frames (released after later ones).
struct Link {
    rng: Rng,
    f: Faults,
    held: Vec<(usize, Vec<u8>)>,
}

impl Link {
    fn new(seed: u64, f: Faults) -> Link {
        Link { rng: Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1), f, held: Vec::new() }
    }
    fn pass(&mut self, pkts: Vec<(usize, Vec<u8>)>, flush: bool) -> Vec<(usize, Vec<u8>)> {
        let mut out = Vec::new();
        for p in pkts {
            if self.rng.f() < self.f.loss {
                continue;
            }
            let dup = self.rng.f() < self.f.dup;
            if self.rng.f() < self.f.reorder {
                if dup {
                    self.held.push(p.clone());
                }
                self.held.push(p);
                continue;
            }
            if dup {
                out.push(p.clone());
            }
            out.push(p);
            out.append(&mut self.held);
        }
        if flush {
            out.append(&mut self.held);
        }
        out
    }
}

// ---- frames ---------------------------------------------------------------------------

fn mac(h: u8) -> [u8; 6] {
    [2, 0, 0, 0, 0, h]
}

fn frame(src: u8, sport: u16, dst: u8, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; 42];
    f[0..6].copy_from_slice(&mac(dst));
    f[6..12].copy_from_slice(&mac(src));
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    f[14] = 0x45;
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&[10, 0, 0, src]);
    f[30..34].copy_from_slice(&[10, 0, 0, dst]);
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(payload);
    let len = f.len();
    programs::daiet::layout::fix_lengths(&mut f, len);
    f
}

/// `(dst host, dst port, UDP payload)` of a frame.
fn unframe(f: &[u8]) -> Option<(u8, u16, &[u8])> {
    if f.len() < 42 || f[12..14] != [8, 0] || f[23] != 17 {
        return None;
    }
    let udp_len = u16::from_be_bytes([f[38], f[39]]) as usize;
    if udp_len < 8 || f.len() < 34 + udp_len {
        return None;
    }
    Some((f[33], u16::from_be_bytes([f[36], f[37]]), &f[42..34 + udp_len]))
}

// ---- switches -------------------------------------------------------------------------

fn set() -> Arc<ProgramSet> {
    Arc::new(ProgramSet::new(vec![Arc::new(Forward::new()), Arc::new(Daiet::new())]).unwrap())
}

fn ids(set: &ProgramSet, prog: usize, table: &str, action: &str) -> (u32, u32) {
    let d = set.decl(prog);
    let t = d.tables.iter().position(|t| t.name == table).unwrap();
    let a = d.actions.iter().position(|a| a.name == action).unwrap();
    (set.ids(prog).tables[t], set.ids(prog).actions[a])
}

fn be(v: u64, bits: u32) -> Vec<u8> {
    let n = bits.div_ceil(8) as usize;
    v.to_be_bytes()[8 - n..].to_vec()
}

/// A switch with `ports` ports: L2 entries `host -> port`, trees, clone sessions.
fn switch(ports: u16, l2: &[(u8, u16)], trees: &[(u16, TreeConfig)]) -> Switch {
    let set = set();
    let mut sw = Switch::new(set.clone(), ports, 1, PipeConfig::default());
    let (l2t, l2a) = ids(&set, 0, "l2_dmac", "l2_forward");
    for &(h, p) in l2 {
        sw.control(&ControlOp::TableWrite {
            table_id: l2t,
            op: WriteOp::Insert,
            matches: vec![FieldMatch::Exact { field: 0, value: mac(h).to_vec() }],
            priority: 0,
            action_id: l2a,
            params: vec![(1, be(p as u64, 9))],
        })
        .unwrap();
    }
    let (tt, ta) = ids(&set, 1, "daiet_trees", "set_tree");
    for (id, cfg) in trees {
        let params =
            cfg.params().iter().zip(TreeConfig::PARAMS).enumerate().map(|(i, (v, (_, bits)))| (i as u32 + 1, be(*v, bits))).collect();
        sw.control(&ControlOp::TableWrite {
            table_id: tt,
            op: WriteOp::Insert,
            matches: vec![FieldMatch::Exact { field: 0, value: id.to_be_bytes().to_vec() }],
            priority: 0,
            action_id: ta,
            params,
        })
        .unwrap();
    }
    for p in 0..ports {
        let session_cfg = CloneSession { replicas: vec![Replica { port: p, rid: 0 }], truncate_len: ACK_FRAME_LEN };
        sw.control(&ControlOp::CloneSessionWrite { op: WriteOp::Insert, session: ACK_SESSION_BASE + p, session_cfg }).unwrap();
    }
    let session_cfg = CloneSession { replicas: vec![Replica { port: PORT_RECIRC, rid: 0 }], truncate_len: 0 };
    sw.control(&ControlOp::CloneSessionWrite { op: WriteOp::Insert, session: WALK_SESSION, session_cfg }).unwrap();
    sw
}

fn tree(parent_port: u16, tree_idx: u16, part_base: u32, part_size: u32, op: Op, children: u16, switch_id: u16) -> TreeConfig {
    TreeConfig {
        parent_port,
        tree_idx,
        part_base,
        part_size,
        sender_base: tree_idx as u32 * 256,
        op,
        children,
        switch_id,
        max_senders: 256,
    }
}

// ---- the network ----------------------------------------------------------------------

/// Where a host or a switch port connects.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum End {
    Host(u8),
    Switch(usize, u16),
}

struct Net {
    switches: Vec<Switch>,
    /// Switch port links: `(switch, port) -> other end`.
    links: HashMap<(usize, u16), End>,
    /// Host -> `(switch, port)`, or None: hosts talk directly (no switch).
    attach: HashMap<u8, (usize, u16)>,
    up: Link,
    down: Link,
    /// Hosts whose links are fault-free (e.g. the reducers, to see the switch's own
    /// duplicate detection at work without a fallback).
    clean: Vec<u8>,
}

impl Net {
    /// Deliver frames sent by hosts; returns frames arriving at hosts `(host, frame)`.
    fn run(&mut self, sent: Vec<(u8, Vec<u8>)>, now: u64, flush: bool) -> Vec<(u8, Vec<u8>)> {
        let (clean, faulty): (Vec<_>, Vec<_>) =
            sent.into_iter().map(|(h, f)| (h as usize, f)).partition(|(h, _)| self.clean.contains(&(*h as u8)));
        let mut sent = self.up.pass(faulty, flush);
        sent.extend(clean);
        let mut arrived: Vec<(usize, Vec<u8>)> = Vec::new();
        let mut inbox: Vec<Vec<PacketBuf>> = (0..self.switches.len()).map(|_| Vec::new()).collect();
        for (h, f) in sent {
            match self.attach.get(&(h as u8)) {
                Some(&(s, p)) => inbox[s].push(PacketBuf::from_slice(&f, p)),
                None => {
                    if let Some((dst, _, _)) = unframe(&f) {
                        arrived.push((dst as usize, f));
                    }
                }
            }
        }
        for _round in 0..400 {
            let mut moved = false;
            for s in 0..self.switches.len() {
                let mut rx = std::mem::take(&mut inbox[s]);
                if !rx.is_empty() {
                    self.switches[s].process(&mut rx, now);
                    moved = true;
                } else if self.switches[s].pipes()[0].pending() > 0 {
                    self.switches[s].tick(now);
                    moved = true;
                }
                for (port, f) in self.switches[s].drain_all() {
                    match self.links.get(&(s, port)) {
                        Some(End::Switch(t, q)) => inbox[*t].push(PacketBuf::from_slice(&f, *q)),
                        Some(End::Host(h)) => arrived.push((*h as usize, f)),
                        None => {}
                    }
                }
            }
            if !moved && inbox.iter().all(|v| v.is_empty()) {
                break;
            }
        }
        let (clean, faulty): (Vec<_>, Vec<_>) = arrived.into_iter().partition(|(h, _)| self.clean.contains(&(*h as u8)));
        let mut out = self.down.pass(faulty, flush);
        out.extend(clean);
        out.into_iter().map(|(h, f)| (h as u8, f)).collect()
    }
}

// ---- a job ----------------------------------------------------------------------------

struct Job {
    /// Mapper hosts and their pairs per tree: `pairs[m] = [(tree index, key, value)]`.
    mappers: Vec<u8>,
    pairs: Vec<Vec<(u16, Vec<u8>, u32)>>,
    /// Reducer host and tree id per tree index.
    reducers: Vec<(u8, u16)>,
    op: Op,
}

struct Outcome {
    results: Vec<HashMap<Vec<u8>, u64>>,
    fallback: bool,
    reducer_pairs: u64,
    reducer_packets: u64,
    retransmissions: u64,
}

const MAPPER_PORT: u16 = 5000;

/// A restart: at this time, replace this switch by a fresh one.
type Restart = Option<(u64, usize, Box<dyn Fn() -> Switch>)>;

fn run_job(job: &Job, net: &mut Net, restart: Restart) -> Outcome {
    let mut now = 0u64;
    let tree_ids: Vec<u16> = job.reducers.iter().map(|r| r.1).collect();
    let mut mappers: Vec<Mapper> = job
        .pairs
        .iter()
        .enumerate()
        .map(|(i, ps)| {
            let mut keys = Vec::new();
            let mut offs = vec![0u64];
            for (_, k, _) in ps {
                keys.extend_from_slice(k);
                offs.push(keys.len() as u64);
            }
            let mut cfg = MapperConfig::new(i as u16, job.op, Mode::Switch);
            cfg.rto_ns = 2_000_000;
            cfg.stall_ns = 40_000_000;
            cfg.window = 16;
            Mapper::new(cfg, &tree_ids, keys, offs, ps.iter().map(|p| p.2).collect(), ps.iter().map(|p| p.0).collect(), 0).unwrap()
        })
        .collect();
    let mut reducers: Vec<Reducer> = job
        .reducers
        .iter()
        .map(|&(_, t)| {
            let mut cfg = ReducerConfig::new(t, job.mappers.len(), job.op, Mode::Switch);
            cfg.rto_ns = 2_000_000;
            cfg.grace_ns = 40_000_000;
            Reducer::new(cfg)
        })
        .collect();
    let mut restarted = false;
    let mut steps = 0u64;
    loop {
        steps += 1;
        assert!(steps < 100_000, "the job made no progress");
        if reducers.iter().all(|r| r.is_complete()) && mappers.iter().all(|m| m.is_done()) {
            break;
        }
        if let Some((at, s, mk)) = &restart {
            if !restarted && now >= *at {
                net.switches[*s] = mk();
                restarted = true;
            }
        }
        let mut sent: Vec<(u8, Vec<u8>)> = Vec::new();
        for (i, m) in mappers.iter_mut().enumerate() {
            let mut out = Vec::new();
            m.poll_transmit(now, &mut out);
            for (t, p) in out {
                sent.push((job.mappers[i], frame(job.mappers[i], MAPPER_PORT, job.reducers[t].0, UDP_PORT, &p)));
            }
        }
        for (r, red) in reducers.iter_mut().enumerate() {
            red.on_timer(now);
            let mut out = Vec::new();
            red.drain_transmit(&mut out);
            for (m, p) in out {
                sent.push((job.reducers[r].0, frame(job.reducers[r].0, UDP_PORT, job.mappers[m], MAPPER_PORT, &p)));
            }
        }
        for (h, f) in net.run(sent, now, steps.is_multiple_of(20)) {
            let Some((dst, dport, payload)) = unframe(&f) else { continue };
            if dst != h {
                continue; // flooded past its destination
            }
            if let Some(i) = job.mappers.iter().position(|&m| m == h) {
                if dport == MAPPER_PORT {
                    mappers[i].handle(now, payload);
                }
            }
            for (r, &(rh, _)) in job.reducers.iter().enumerate() {
                if rh == h && dport == UDP_PORT {
                    reducers[r].handle(now, payload);
                }
            }
        }
        now += 200_000;
    }
    Outcome {
        fallback: reducers.iter().any(|r| r.stats.fallback),
        reducer_pairs: reducers.iter().map(|r| r.stats.pairs).sum(),
        reducer_packets: reducers.iter().map(|r| r.stats.packets).sum(),
        retransmissions: mappers.iter().map(|m| m.stats.retransmissions).sum(),
        results: reducers.iter_mut().map(|r| r.take_result()).collect(),
    }
}

fn reference(job: &Job) -> Vec<HashMap<Vec<u8>, u64>> {
    let mut out = vec![HashMap::new(); job.reducers.len()];
    for ps in &job.pairs {
        for (t, k, v) in ps {
            let m: &mut HashMap<Vec<u8>, u64> = &mut out[*t as usize];
            match m.get_mut(k) {
                Some(x) => *x = job.op.apply64(*x, *v as u64),
                None => {
                    m.insert(k.clone(), *v as u64);
                }
            }
        }
    }
    out
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

/// One switch: mappers on ports 1..=M (hosts 1..=M), reducers after them.
fn one_switch_net(job: &Job, trees: &[(u16, TreeConfig)], seed: u64, f: Faults) -> Net {
    let mut hosts: Vec<u8> = job.mappers.clone();
    hosts.extend(job.reducers.iter().map(|r| r.0));
    let l2: Vec<(u8, u16)> = hosts.iter().map(|&h| (h, h as u16)).collect();
    let ports = hosts.iter().map(|&h| h as u16 + 1).max().unwrap_or(16).max(16);
    let sw = switch(ports, &l2, trees);
    Net {
        switches: vec![sw],
        links: hosts.iter().map(|&h| ((0usize, h as u16), End::Host(h))).collect(),
        attach: hosts.iter().map(|&h| (h, (0usize, h as u16))).collect(),
        up: Link::new(seed, f),
        down: Link::new(seed.wrapping_add(77), f),
        clean: Vec::new(),
    }
}

fn single_switch_job(op: Op, n_trees: u16, per_mapper: usize, seed: u64) -> Job {
    Job {
        mappers: vec![1, 2, 3],
        pairs: words(3, per_mapper, 300, n_trees, seed),
        reducers: (0..n_trees).map(|t| (10 + t as u8, 100 + t)).collect(),
        op,
    }
}

fn trees_for(job: &Job, part_size: u32) -> Vec<(u16, TreeConfig)> {
    job.reducers
        .iter()
        .enumerate()
        .map(|(i, &(h, id))| (id, tree(h as u16, i as u16, i as u32 * part_size, part_size, job.op, job.mappers.len() as u16, 250)))
        .collect()
}

fn total_pairs(job: &Job) -> u64 {
    job.pairs.iter().map(|p| p.len() as u64).sum()
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
    let mut net = Net {
        switches: vec![],
        links: HashMap::new(),
        attach: HashMap::new(),
        up: Link::new(1, Faults::default()),
        down: Link::new(2, Faults::default()),
        clean: Vec::new(),
    };
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
