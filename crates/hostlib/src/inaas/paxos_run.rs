//! Paxos run on the in-process service (the real switch model): two proposers of one
//! tenant, three learners, faults on every link (loss, duplication, reordering), the first
//! proposer killed mid-run, optionally revived as a zombie with its stale state. Safety is
//! checked on every vote; the outcome says whether every learner delivered the same
//! gap-free log and what each decision took.
//!
//! Learners are hosts reached over links with the same faults (a queue here: votes relayed
//! by the leader, acknowledgements back).

use std::collections::BTreeMap;

use wire::inaas::Operator;

use super::paxos::{kv_apply, kv_command, Learner, Proposer, Ring, Violation, Vote};
use super::service::Service;
use super::{ItemReq, Kind, Op};

/// Faults and the shape of a run.
#[derive(Clone, Debug)]
pub struct PaxosFaults {
    pub seed: u64,
    pub loss: f64,
    pub dup: f64,
    pub jitter_us: u64,
    /// When the first proposer dies (µs after the start; `None`: never).
    pub crash_at_us: Option<u64>,
    /// The dead proposer comes back with its stale state for a while.
    pub zombie: bool,
    pub values: usize,
    pub slots: u16,
    pub learners: usize,
}

impl Default for PaxosFaults {
    fn default() -> Self {
        PaxosFaults { seed: 1, loss: 0.0, dup: 0.0, jitter_us: 0, crash_at_us: None, zombie: false, values: 60, slots: 16, learners: 3 }
    }
}

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct PaxosOutcome {
    /// Contradictions seen by learners (two values for one instance): must be empty.
    pub violations: Vec<Violation>,
    /// Every learner's delivered log.
    pub logs: Vec<Vec<i32>>,
    /// Every learner's KV state, from its log.
    pub kv: Vec<BTreeMap<u32, u32>>,
    /// Every value the proposers were given.
    pub proposed: Vec<i32>,
    /// Values the surviving proposer was given (all must be delivered).
    pub must_deliver: Vec<i32>,
    /// µs from an instance's first 2a to its decision, per decided instance.
    pub latencies_us: Vec<u64>,
    pub took_over: bool,
    pub finished: bool,
    pub simulated_us: u64,
}

struct Link<T> {
    q: Vec<(u64, usize, T)>,
}

impl<T: Clone> Link<T> {
    fn send(&mut self, svc: &mut Service, rng: &mut u64, f: &PaxosFaults, to: usize, m: T) {
        let r = |rng: &mut u64| {
            *rng ^= *rng << 13;
            *rng ^= *rng >> 7;
            *rng ^= *rng << 17;
            (*rng % 1_000_000) as f64 / 1e6
        };
        if r(rng) < f.loss {
            return;
        }
        let copies = if r(rng) < f.dup { 2 } else { 1 };
        for _ in 0..copies {
            let j = (r(rng) * (f.jitter_us + 1) as f64) as u64;
            self.q.push((svc.now_us + svc.hop_us + j, to, m.clone()));
        }
    }
    fn due(&mut self, now: u64) -> Vec<(usize, T)> {
        let (now_q, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.q).into_iter().partition(|(t, _, _)| *t <= now);
        self.q = later;
        now_q.into_iter().map(|(_, to, m)| (to, m)).collect()
    }
}

/// Run Paxos with the acceptors in the switch under `f`.
pub fn run_paxos(f: &PaxosFaults) -> PaxosOutcome {
    let mut svc = Service::new(8, f.seed);
    let lease = 1 << 30;
    let p0 = svc.new_port();
    let t0 = svc.add_tenant(p0, Kind::Paxos, lease, lease, false, 1_000);
    let p1 = svc.new_port();
    let t1 = svc.add_member(t0, p1);
    let ring = Ring { base: 0, slots: f.slots };
    // Take the acceptors' cells (the leases; the switch clears their Paxos state).
    for idx in 0..ring.slots {
        let items: Vec<ItemReq> = (0..3).map(|seg| ItemReq { seg, idx: ring.base + idx, op: Op::Write { key: 0, value: 0 } }).collect();
        svc.submit(t0, &items, Operator::Add).expect("lease request");
    }
    svc.run(1_000_000);
    svc.tenants[t0].done.clear();
    svc.loss = f.loss;
    svc.dup = f.dup;
    svc.jitter_us = f.jitter_us;

    let (uid, gk) = (svc.tenants[t0].uid, svc.gk.mac());
    let mut props =
        [Proposer::new(1, ring, uid, svc.tenants[t0].client.asm.mac, gk), Proposer::new(2, ring, uid, svc.tenants[t1].client.asm.mac, gk)];
    let tenant_of = [t0, t1];
    let mut out = PaxosOutcome::default();
    let half = f.values / 2;
    for k in 0..f.values {
        let v = kv_command(1 + (k % 7) as u32, 1 + k as u32);
        out.proposed.push(v);
        let who = if f.crash_at_us.is_some() && k >= half { 1 } else { 0 };
        // With a crash, only what the survivor proposes must be delivered.
        if who == 1 || f.crash_at_us.is_none() {
            out.must_deliver.push(v);
        }
        props[who].propose(v);
    }
    let mut learners: Vec<Learner> = (0..f.learners).map(|_| Learner::default()).collect();
    let mut votes: Link<Vote> = Link { q: Vec::new() };
    let mut acks: Link<u64> = Link { q: Vec::new() };
    let mut rng = f.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let start = svc.now_us;
    props[0].take_over(0, start);
    let detect_us = 2_000;
    let zombie_for = 3_000;
    // Who runs: 0 alive until the crash; 1 from crash + detect; 0 again as a zombie.
    let mut delivered = vec![0u64; f.learners];
    // The floor stalls while a learner misses an instance: the leader then recovers.
    let (mut last_floor, mut floor_since) = (0u64, start);
    let limit = start + 400_000;
    while svc.now_us < limit {
        let now = svc.now_us;
        let t = now - start;
        let crashed = f.crash_at_us.is_some_and(|c| t >= c);
        let zombie = f.zombie && f.crash_at_us.is_some_and(|c| t >= c + detect_us + 500 && t < c + detect_us + 500 + zombie_for);
        let alive = [!crashed || zombie, f.crash_at_us.is_some_and(|c| t >= c + detect_us)];
        if alive[1] && props[1].round == 0 {
            props[1].on_floor(delivered.iter().copied().min().unwrap_or(0), now);
            props[1].take_over(0, now);
            out.took_over = true;
        }
        for p in 0..2 {
            let frames = std::mem::take(&mut svc.tenants[tenant_of[p]].paxos_in);
            if !alive[p] {
                continue;
            }
            for fr in frames {
                props[p].handle(now, &fr);
            }
            props[p].handle_timeout(now);
            while let Some(fr) = props[p].poll_transmit() {
                svc.send_raw(tenant_of[p], fr);
            }
            while let Some(v) = props[p].poll_vote() {
                for l in 0..f.learners {
                    votes.send(&mut svc, &mut rng, f, l, v);
                }
            }
        }
        for (l, v) in votes.due(now) {
            if let Err(e) = learners[l].on_vote(v) {
                out.violations.push(e);
            }
        }
        // Learners acknowledge their delivered prefix now and then (lossy too).
        if t.is_multiple_of(50) {
            for (l, lr) in learners.iter().enumerate() {
                for p in 0..2 {
                    acks.send(&mut svc, &mut rng, f, p * 64 + l, lr.delivered());
                }
            }
        }
        for (to, d) in acks.due(now) {
            let (p, l) = (to / 64, to % 64);
            delivered[l] = delivered[l].max(d);
            let _ = p;
        }
        let floor = delivered.iter().copied().min().unwrap_or(0);
        for p in 0..2 {
            if alive[p] {
                props[p].on_floor(floor, now);
            }
        }
        if floor != last_floor {
            (last_floor, floor_since) = (floor, now);
        } else if now - floor_since > 2_000 && delivered.iter().any(|d| *d > floor) {
            let leader = if alive[1] { 1 } else { 0 };
            if alive[leader] {
                props[leader].recover(now);
                floor_since = now;
            }
        }
        let all_in = out.must_deliver.iter().all(|v| learners.iter().all(|l| l.log.contains(v)));
        if all_in && !zombie && (f.crash_at_us.is_none() || alive[1]) {
            out.finished = true;
            break;
        }
        svc.run_for(1);
    }
    for p in &props {
        out.latencies_us.extend(p.latencies.iter().map(|(_, l)| *l));
    }
    if std::env::var_os("PAXOS_DEBUG").is_some() {
        for p in &props {
            eprintln!("proposer {}: {:?} leading {} decided {} pending {}", p.id, p.stats, p.leading, p.decided.len(), p.pending());
        }
        eprintln!("switch drops malformed {} violations {}", svc.drops("malformed"), svc.violations());
    }
    out.logs = learners.iter().map(|l| l.log.clone()).collect();
    out.kv = out.logs.iter().map(|l| kv_apply(l)).collect();
    out.simulated_us = svc.now_us - start;
    out
}

/// One tenant's Paxos on a shared service (the `paxos` tenant of `tenants run`): a leader,
/// learners reached in process (no faults between them), the acceptors in the switch.
pub struct PaxosGroup {
    pub t: usize,
    pub proposer: Proposer,
    pub learners: Vec<Learner>,
    pub violations: Vec<Violation>,
    reported: usize,
}

impl PaxosGroup {
    /// Lead tenant `t`'s acceptors in `ring` (the caller took their leases).
    pub fn start(svc: &mut Service, t: usize, ring: Ring, learners: usize) -> PaxosGroup {
        let (uid, mac, gk) = (svc.tenants[t].uid, svc.tenants[t].client.asm.mac, svc.gk.mac());
        let mut proposer = Proposer::new(1, ring, uid, mac, gk);
        proposer.take_over(0, svc.now_us);
        let mut g =
            PaxosGroup { t, proposer, learners: (0..learners).map(|_| Learner::default()).collect(), violations: Vec::new(), reported: 0 };
        g.flush(svc);
        g
    }

    fn flush(&mut self, svc: &mut Service) {
        while let Some(f) = self.proposer.poll_transmit() {
            svc.send_raw(self.t, f);
        }
        while let Some(v) = self.proposer.poll_vote() {
            for l in &mut self.learners {
                if let Err(e) = l.on_vote(v) {
                    self.violations.push(e);
                }
            }
        }
        let floor = self.learners.iter().map(|l| l.delivered()).min().unwrap_or(0);
        self.proposer.on_floor(floor, svc.now_us);
    }

    /// Answers in, retransmissions and votes out. Returns the decisions made since the
    /// last call: (instance, µs from its first 2a).
    pub fn step(&mut self, svc: &mut Service) -> Vec<(u64, u64)> {
        let now = svc.now_us;
        for f in std::mem::take(&mut svc.tenants[self.t].paxos_in) {
            self.proposer.handle(now, &f);
        }
        self.proposer.handle_timeout(now);
        self.flush(svc);
        let out = self.proposer.latencies[self.reported..].to_vec();
        self.reported = self.proposer.latencies.len();
        out
    }
}
