//! What the aggregation end-to-end tests (`daiet.rs`, `switchagg_e2e.rs`) share: a seeded
//! lossy link, Ethernet/IPv4/UDP framing, an in-memory network of `pisa::Switch`es and hosts,
//! and a job driver running hostlib's exactly-once mappers and reducers over it, with the
//! HashMap reference they are checked against. Each test binary uses a part of it.
#![allow(dead_code)]

use std::collections::HashMap;

pub mod daiet_net;

use hostlib::aggregation::{Mapper, MapperConfig, Mode, Protocol, Reducer, ReducerConfig};
use pisa::control::{ControlOp, WriteOp};
use pisa::{FieldMatch, PacketBuf, ProgramSet, Switch};
use wire::daiet::Op;

// ---- a small seeded generator and lossy links ----------------------------------------

pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn f(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[derive(Clone, Copy, Default)]
pub struct Faults {
    pub loss: f64,
    pub dup: f64,
    pub reorder: f64,
}

/// One direction of a link: loses, duplicates, holds back frames (released after later ones).
pub struct Link {
    pub rng: Rng,
    pub f: Faults,
    pub held: Vec<(usize, Vec<u8>)>,
}

impl Link {
    pub fn new(seed: u64, f: Faults) -> Link {
        Link { rng: Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1), f, held: Vec::new() }
    }
    pub fn pass(&mut self, pkts: Vec<(usize, Vec<u8>)>, flush: bool) -> Vec<(usize, Vec<u8>)> {
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

pub fn mac(h: u8) -> [u8; 6] {
    [2, 0, 0, 0, 0, h]
}

pub fn frame(src: u8, sport: u16, dst: u8, dport: u16, payload: &[u8]) -> Vec<u8> {
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
pub fn unframe(f: &[u8]) -> Option<(u8, u16, &[u8])> {
    if f.len() < 42 || f[12..14] != [8, 0] || f[23] != 17 {
        return None;
    }
    let udp_len = u16::from_be_bytes([f[38], f[39]]) as usize;
    if udp_len < 8 || f.len() < 34 + udp_len {
        return None;
    }
    Some((f[33], u16::from_be_bytes([f[36], f[37]]), &f[42..34 + udp_len]))
}

// ---- control-plane helpers ----------------------------------------------------------

pub fn ids(set: &ProgramSet, prog: usize, table: &str, action: &str) -> (u32, u32) {
    let d = set.decl(prog);
    let t = d.tables.iter().position(|t| t.name == table).unwrap();
    let a = d.actions.iter().position(|a| a.name == action).unwrap();
    (set.ids(prog).tables[t], set.ids(prog).actions[a])
}

/// `forward`'s L2 entries `host -> port` (program 0 of `set`), as the controller installs them.
pub fn install_l2(sw: &mut Switch, set: &ProgramSet, l2: &[(u8, u16)]) {
    let (l2t, l2a) = ids(set, 0, "l2_dmac", "l2_forward");
    for &(h, p) in l2 {
        sw.control(&ControlOp::TableWrite {
            table_id: l2t,
            op: WriteOp::Insert,
            matches: vec![FieldMatch::Exact { field: 0, value: mac(h).to_vec() }],
            priority: 0,
            action_id: l2a,
            params: vec![(1, be_bytes(p as u64, 9))],
        })
        .unwrap();
    }
}

pub fn be_bytes(v: u64, bits: u32) -> Vec<u8> {
    let n = bits.div_ceil(8) as usize;
    v.to_be_bytes()[8 - n..].to_vec()
}

// ---- the network ----------------------------------------------------------------------

/// Where a host or a switch port connects.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum End {
    Host(u8),
    Switch(usize, u16),
}

pub struct Net {
    pub switches: Vec<Switch>,
    /// Switch port links: `(switch, port) -> other end`.
    pub links: HashMap<(usize, u16), End>,
    /// Host -> `(switch, port)`, or None: hosts talk directly (no switch).
    pub attach: HashMap<u8, (usize, u16)>,
    pub up: Link,
    pub down: Link,
    /// Hosts whose links are fault-free (e.g. the reducers, to see the switch's own
    /// duplicate detection at work without a fallback).
    pub clean: Vec<u8>,
}

/// A job's hosts (mappers, then reducers), each on the switch port numbered as the host,
/// their L2 entries, and the switch's port count.
pub fn job_hosts(job: &Job) -> (Vec<u8>, Vec<(u8, u16)>, u16) {
    let mut hosts: Vec<u8> = job.mappers.clone();
    hosts.extend(job.reducers.iter().map(|r| r.0));
    let l2: Vec<(u8, u16)> = hosts.iter().map(|&h| (h, h as u16)).collect();
    let ports = hosts.iter().map(|&h| h as u16 + 1).max().unwrap_or(16).max(16);
    (hosts, l2, ports)
}

impl Net {
    /// One switch with every host on the port numbered as the host ([`job_hosts`]).
    pub fn one_switch(sw: Switch, hosts: &[u8], seed: u64, f: Faults) -> Net {
        Net {
            switches: vec![sw],
            links: hosts.iter().map(|&h| ((0usize, h as u16), End::Host(h))).collect(),
            attach: hosts.iter().map(|&h| (h, (0usize, h as u16))).collect(),
            up: Link::new(seed, f),
            down: Link::new(seed.wrapping_add(77), f),
            clean: Vec::new(),
        }
    }

    /// No switch at all: hosts talk directly, over fault-free links.
    pub fn no_switch() -> Net {
        Net {
            switches: vec![],
            links: HashMap::new(),
            attach: HashMap::new(),
            up: Link::new(1, Faults::default()),
            down: Link::new(2, Faults::default()),
            clean: Vec::new(),
        }
    }

    /// Deliver frames sent by hosts; returns frames arriving at hosts `(host, frame)`.
    pub fn run(&mut self, sent: Vec<(u8, Vec<u8>)>, now: u64, flush: bool) -> Vec<(u8, Vec<u8>)> {
        self.run_hooked(sent, now, flush, &mut |_, _, _| {})
    }

    /// [`Net::run`], calling `hook(now, round, switches)` before each round of the switches'
    /// batches (a controller acting while packets are inside the switches).
    pub fn run_hooked(
        &mut self,
        sent: Vec<(u8, Vec<u8>)>,
        now: u64,
        flush: bool,
        hook: &mut dyn FnMut(u64, usize, &mut [Switch]),
    ) -> Vec<(u8, Vec<u8>)> {
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
        for round in 0..400 {
            hook(now, round, &mut self.switches);
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

pub struct Job {
    /// Mapper hosts and their pairs per tree: `pairs[m] = [(tree index, key, value)]`.
    pub mappers: Vec<u8>,
    pub pairs: Vec<Vec<(u16, Vec<u8>, u32)>>,
    /// Reducer host and tree id per tree index.
    pub reducers: Vec<(u8, u16)>,
    pub op: Op,
}

pub struct Outcome {
    pub results: Vec<HashMap<Vec<u8>, u64>>,
    pub fallback: bool,
    pub reducer_pairs: u64,
    pub reducer_packets: u64,
    pub retransmissions: u64,
}

pub const MAPPER_PORT: u16 = 5000;

/// A restart: at this time, replace this switch by a fresh one.
pub type Restart = Option<(u64, usize, Box<dyn Fn() -> Switch>)>;

/// Run `job` to completion over `net`, the hosts speaking `protocol` to reducers listening
/// on UDP `port`.
pub fn run_job(job: &Job, net: &mut Net, restart: Restart, protocol: Protocol, port: u16) -> Outcome {
    run_job_tapped(job, net, restart, protocol, port, &mut |_, _| {})
}

/// [`run_job`], showing `tap` every frame delivered to a host `(host, frame)`.
pub fn run_job_tapped(
    job: &Job,
    net: &mut Net,
    restart: Restart,
    protocol: Protocol,
    port: u16,
    tap: &mut dyn FnMut(u8, &[u8]),
) -> Outcome {
    run_job_hooked(job, net, restart, protocol, port, tap, &mut |_, _, _| {})
}

/// [`run_job_tapped`], with a controller `hook` called before each round of the switches'
/// batches ([`Net::run_hooked`]).
pub fn run_job_hooked(
    job: &Job,
    net: &mut Net,
    restart: Restart,
    protocol: Protocol,
    port: u16,
    tap: &mut dyn FnMut(u8, &[u8]),
    hook: &mut dyn FnMut(u64, usize, &mut [Switch]),
) -> Outcome {
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
            cfg.protocol = protocol;
            cfg.rto_ns = 2_000_000;
            // Time here is simulated and fast: scale the adaptive timeout's bounds with
            // it (backed off below the stall report, so loss is not taken for a restart).
            cfg.min_rto_ns = 500_000;
            cfg.max_rto_ns = 16_000_000;
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
            cfg.protocol = protocol;
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
                sent.push((job.mappers[i], frame(job.mappers[i], MAPPER_PORT, job.reducers[t].0, port, &p)));
            }
        }
        for (r, red) in reducers.iter_mut().enumerate() {
            red.handle_timeout(now);
            let mut out = Vec::new();
            red.poll_transmit(&mut out);
            for (m, p) in out {
                sent.push((job.reducers[r].0, frame(job.reducers[r].0, port, job.mappers[m], MAPPER_PORT, &p)));
            }
        }
        for (h, f) in net.run_hooked(sent, now, steps.is_multiple_of(20), hook) {
            tap(h, &f);
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
                if rh == h && dport == port {
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

pub fn reference(job: &Job) -> Vec<HashMap<Vec<u8>, u64>> {
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
