//! Paxos with the acceptors in the switch: safety under loss, duplication, reordering and
//! a killed (and revived) proposer, as a property over fault seeds; liveness when faults
//! are bounded; the replicated KV agrees.

use std::collections::BTreeSet;

use hostlib::inaas::paxos::NOOP;
use hostlib::inaas::paxos_run::{run_paxos, PaxosFaults, PaxosOutcome};
use proptest::prelude::*;

/// Agreement (logs are prefixes of one another), validity (only proposed values or
/// no-ops), no contradiction seen by any learner. A value may be in the log twice (a
/// proposer re-proposes what it cannot know was chosen, at least once); the KV applies it
/// once.
fn assert_safe(o: &PaxosOutcome) {
    assert!(o.violations.is_empty(), "{:?}", o.violations);
    let longest = o.logs.iter().max_by_key(|l| l.len()).expect("learners");
    let proposed: BTreeSet<i32> = o.proposed.iter().copied().collect();
    for l in &o.logs {
        assert_eq!(&longest[..l.len()], &l[..], "two learners delivered different values");
        for v in l {
            assert!(*v == NOOP || proposed.contains(v), "delivered a value nobody proposed: {v}");
        }
    }
}

fn assert_live(o: &PaxosOutcome) {
    assert!(o.finished, "not every value delivered in time: {:?}", o.logs.iter().map(|l| l.len()).collect::<Vec<_>>());
    for l in &o.logs {
        for v in &o.must_deliver {
            assert!(l.contains(v), "value {v} missing");
        }
    }
    let kv0 = &o.kv[0];
    let n = o.logs.iter().map(|l| l.len()).min().unwrap_or(0);
    assert!(n >= o.must_deliver.len());
    for (l, kv) in o.logs.iter().zip(&o.kv) {
        if l.len() == o.logs[0].len() {
            assert_eq!(kv, kv0, "replicas of the KV differ");
        }
    }
}

#[test]
fn no_faults_decides_everything_in_order() {
    let o = run_paxos(&PaxosFaults { values: 40, ..Default::default() });
    assert_safe(&o);
    assert_live(&o);
    assert_eq!(o.logs[0], o.proposed, "one proposer, no faults: the log is the proposals");
    assert_eq!(o.latencies_us.len(), 40);
}

#[test]
fn proposer_killed_new_leader_finishes() {
    let o = run_paxos(&PaxosFaults { values: 40, crash_at_us: Some(30), loss: 0.02, ..Default::default() });
    assert_safe(&o);
    assert_live(&o);
    assert!(o.took_over);
}

proptest! {
    // A fixed seed: the same 48 fault sets every run. With a random one, CI drew a case the
    // model does not finish (`zombie_duel_with_heavy_duplication_finishes`, below).
    #![proptest_config(ProptestConfig { cases: 48, rng_seed: proptest::test_runner::RngSeed::Fixed(0x1ee7_5afe), ..ProptestConfig::default() })]
    #[test]
    fn safe_under_faults(seed in 1u64..1_000_000, loss in 0.0f64..0.15, dup in 0.0f64..0.2, jitter in 0u64..30,
                         crash in proptest::option::of(0u64..400), zombie in any::<bool>()) {
        let f = PaxosFaults { seed, loss, dup, jitter_us: jitter, crash_at_us: crash, zombie, values: 24, slots: 8, ..Default::default() };
        let o = run_paxos(&f);
        assert_safe(&o);
        assert_live(&o);
    }
}

proptest! {
    // The shape of `zombie_duel_with_heavy_duplication_finishes`: the first proposer dies
    // early, comes back as a zombie that fights the new leader (a higher ballot each time
    // it is refused), over links that duplicate a lot. The zombie drives the learners'
    // floor past instances the survivor still holds; those must not stall it.
    #![proptest_config(ProptestConfig { cases: 24, rng_seed: proptest::test_runner::RngSeed::Fixed(0x2b1d_d0e1), ..ProptestConfig::default() })]
    #[test]
    fn zombie_duel_under_duplication(seed in 1u64..1_000_000, loss in 0.0f64..0.05, dup in 0.1f64..0.3, jitter in 0u64..20,
                                     crash in 50u64..300) {
        let f = PaxosFaults { seed, loss, dup, jitter_us: jitter, crash_at_us: Some(crash), zombie: true, values: 24, slots: 8, ..Default::default() };
        let o = run_paxos(&f);
        assert_safe(&o);
        assert_live(&o);
    }
}

/// Found by the proptest on a random seed (2026-11-27): the zombie, fighting, drove the
/// learners' floor past the survivor's next instance; the survivor then started its
/// values in instances below the floor, whose slots already served later ones, and
/// resent them forever (answered stale, never refused). Fixed in `Proposer::on_floor`.
#[test]
fn zombie_duel_with_heavy_duplication_finishes() {
    let f = PaxosFaults {
        seed: 320175,
        loss: 0.028947912010019,
        dup: 0.19932170960501883,
        jitter_us: 11,
        crash_at_us: Some(118),
        zombie: true,
        values: 24,
        slots: 8,
        ..Default::default()
    };
    let o = run_paxos(&f);
    assert_safe(&o);
    assert_live(&o);
}

// ---- Host acceptors (the host-only baseline of `tenants run --real`) -------------------

use hostlib::inaas::paxos::{kv_command, parse_paxos_reply, paxos_frame, Answer, HostAcceptor, Learner, Proposer, Ring};
use hostlib::inaas::service::Service;
use hostlib::inaas::{ItemReq, Kind, Op};
use wire::ethernet::EthernetAddress;
use wire::inaas::Operator;

/// The same requests to the switch's acceptors (the in-process service) and to three
/// host acceptors give the same answer per acceptor: promise (with the vote), accept,
/// refusal with the promise, stale instance.
#[test]
fn host_acceptors_answer_as_the_switch_acceptors_do() {
    let mut svc = Service::new(4, 1);
    let p = svc.new_port();
    let t = svc.add_tenant(p, Kind::Paxos, 1 << 30, 1 << 30, false, 1_000);
    let ring = Ring { base: 3, slots: 2 };
    for idx in 0..ring.slots {
        let items: Vec<ItemReq> = (0..3).map(|seg| ItemReq { seg, idx: ring.base + idx, op: Op::Write { key: 0, value: 0 } }).collect();
        svc.submit(t, &items, Operator::Add).expect("lease");
    }
    svc.run(1_000_000);
    let (uid, mac, gk) = (svc.tenants[t].uid, svc.tenants[t].client.asm.mac, svc.gk.mac());
    let mut hosts: Vec<HostAcceptor> = (0..3).map(HostAcceptor::new).collect();
    // (phase 1, instance, ballot, value): promise, accept, lower ballot refused (both
    // phases), higher promise reads the vote, the ring's next instance of the slot, then
    // the old one stale, and a 2a that moves the slot though refused.
    let script = [
        (true, 0, 257, 0),
        (false, 0, 257, 11),
        (false, 0, 2, 12),
        (true, 0, 3, 0),
        (true, 0, 514, 0),
        (false, 2, 514, 13),
        (false, 0, 514, 14),
        (true, 1, 257, 0),
        (false, 1, 300, 15),
        (false, 3, 2, 16),
        (false, 1, 514, 17),
        (true, 3, 770, 0),
    ];
    for (k, &(phase1, inst, ballot, value)) in script.iter().enumerate() {
        let f = paxos_frame(mac, gk, uid, k as u32 + 1, phase1, ring, inst, ballot, value);
        svc.send_raw(t, f.clone());
        svc.run(1_000_000);
        let from_switch = std::mem::take(&mut svc.tenants[t].paxos_in);
        assert_eq!(from_switch.len(), 1, "step {k}");
        let sw = parse_paxos_reply(&from_switch[0]).expect("switch answer");
        for (j, h) in hosts.iter_mut().enumerate() {
            let mut a = f[..14].to_vec();
            a.extend(h.answer(&f[14..]).expect("host answer"));
            let r = parse_paxos_reply(&a).expect("host answer parses");
            assert_eq!((r.phase1, r.inst, r.ballot), (sw.phase1, sw.inst, sw.ballot));
            for (i, ans) in r.answers.iter().enumerate() {
                if i == j {
                    assert_eq!(*ans, sw.answers[j], "step {k} {:?}, acceptor {j}", script[k]);
                } else {
                    assert_eq!(*ans, Answer::Absent);
                }
            }
        }
    }
    let s = &hosts[0].stats;
    assert!(s.promised > 0 && s.voted > 0 && s.refused > 0 && s.stale > 0, "{s:?}");
}

/// A message in flight in [`HostRun`].
enum Msg {
    /// A request to acceptor `j`.
    Req(usize, Vec<u8>),
    /// An answer to proposer `p`.
    Ans(usize, Vec<u8>),
}

/// Proposers, three host acceptors and learners over lossy, duplicating, reordering links
/// (a seeded queue). Time advances to the next event: a delivery or a proposer's
/// `poll_timeout()` (nothing else wakes a proposer, so a timeout it fails to announce
/// stalls the run).
struct HostRun {
    now: u64,
    rng: u64,
    loss: u64,
    dup: u64,
    acceptors: Vec<HostAcceptor>,
    learners: Vec<Learner>,
    q: Vec<(u64, u64, Msg)>,
    n: u64,
}

impl HostRun {
    fn new(seed: u64, loss_pct: u64, dup_pct: u64) -> Self {
        HostRun {
            now: 0,
            rng: seed | 1,
            loss: loss_pct,
            dup: dup_pct,
            acceptors: (0..3).map(HostAcceptor::new).collect(),
            learners: (0..3).map(|_| Learner::default()).collect(),
            q: Vec::new(),
            n: 0,
        }
    }

    fn r(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng % 100
    }

    fn send(&mut self, m: impl Fn() -> Msg) {
        if self.r() < self.loss {
            return;
        }
        let copies = if self.r() < self.dup { 2 } else { 1 };
        for _ in 0..copies {
            let at = self.now + 5 + self.r() / 10;
            self.n += 1;
            self.q.push((at, self.n, m()));
        }
    }

    /// Drain proposer `p`'s output (frames to every acceptor, votes to every learner).
    fn drain(&mut self, ps: &mut [Proposer], p: usize) {
        while let Some(f) = ps[p].poll_transmit() {
            for j in 0..3 {
                self.send(|| Msg::Req(j, f.clone()));
            }
        }
        while let Some(v) = ps[p].poll_vote() {
            for l in &mut self.learners {
                l.on_vote(v).expect("a contradiction");
            }
        }
        let floor = self.learners.iter().map(|l| l.delivered()).min().unwrap_or(0);
        ps[p].on_floor(floor, self.now);
        while let Some(f) = ps[p].poll_transmit() {
            for j in 0..3 {
                self.send(|| Msg::Req(j, f.clone()));
            }
        }
    }

    /// Run until `done` or `limit_us`; `alive(p, now)` says who runs.
    #[allow(clippy::needless_range_loop)] // `p` also names the proposer to `alive`
    fn run(&mut self, ps: &mut [Proposer], limit_us: u64, alive: impl Fn(usize, u64) -> bool, done: impl Fn(&HostRun) -> bool) -> bool {
        while self.now < limit_us {
            for p in 0..ps.len() {
                if alive(p, self.now) {
                    self.drain(ps, p);
                }
            }
            if done(self) {
                return true;
            }
            let timers = (0..ps.len()).filter(|p| alive(*p, self.now)).filter_map(|p| ps[p].poll_timeout());
            let next_msg = self.q.iter().map(|m| m.0).min();
            let Some(next) = timers.chain(next_msg).min() else { return false };
            self.now = self.now.max(next);
            let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.q).into_iter().partition(|m| m.0 <= self.now);
            self.q = later;
            let mut due = due;
            due.sort_by_key(|m| (m.0, m.1));
            for (_, _, m) in due {
                match m {
                    Msg::Req(j, f) => {
                        if let Some(a) = self.acceptors[j].answer(&f[14..]) {
                            let mut b = f[..14].to_vec();
                            b.extend(a);
                            let p = proposer_of(&b);
                            self.send(|| Msg::Ans(p, b.clone()));
                        }
                    }
                    Msg::Ans(p, b) => {
                        if alive(p, self.now) {
                            ps[p].handle(self.now, &b);
                        }
                    }
                }
            }
            for p in 0..ps.len() {
                if alive(p, self.now) && ps[p].poll_timeout().is_some_and(|t| t <= self.now) {
                    ps[p].handle_timeout(self.now);
                }
            }
        }
        false
    }
}

/// The proposer an answer is for: the ballot's low byte (proposer id) minus one.
fn proposer_of(frame: &[u8]) -> usize {
    (parse_paxos_reply(frame).expect("answer").ballot & 0xFF) as usize - 1
}

fn proposer(id: u8, slots: u16) -> Proposer {
    let mut p = Proposer::new(id, Ring { base: 0, slots }, 7, EthernetAddress([2, 0, 0, 0, 0, id]), EthernetAddress([2, 0, 0, 0, 0, 1]));
    p.rto_us = 200;
    p
}

fn logs_agree(r: &HostRun) -> Vec<i32> {
    let longest = r.learners.iter().map(|l| l.log.clone()).max_by_key(|l| l.len()).expect("learners");
    for l in &r.learners {
        assert_eq!(&longest[..l.log.len()], &l.log[..], "two learners differ");
    }
    longest
}

/// The host-only baseline: the same proposer and learners, three host acceptors, under
/// loss and duplication; driven only by `poll_timeout` (a proposer that hid a due
/// retransmission would stall: the run must finish).
#[test]
fn one_proposer_with_host_acceptors_decides_everything_by_its_timers() {
    for seed in [1, 2, 3] {
        let mut r = HostRun::new(seed, 10, 10);
        let mut ps = vec![proposer(1, 8)];
        ps[0].take_over(0, 0);
        let values: Vec<i32> = (0..40).map(|k| kv_command(1 + k % 7, 1 + k)).collect();
        for v in &values {
            ps[0].propose(*v);
        }
        let done = r.run(&mut ps, 2_000_000, |_, _| true, |r| r.learners.iter().all(|l| l.log.len() >= 40));
        assert!(done, "seed {seed}: delivered {:?}", r.learners.iter().map(|l| l.log.len()).collect::<Vec<_>>());
        assert_eq!(logs_agree(&r), values, "one proposer: the log is the proposals");
        assert_eq!(ps[0].latencies.len(), 40);
    }
}

#[test]
fn poll_timeout_announces_retransmissions_and_the_backoff() {
    let mut p = proposer(1, 2);
    assert_eq!(p.poll_timeout(), None, "idle: no timer");
    p.take_over(0, 100);
    assert_eq!(p.poll_timeout(), Some(100 + p.rto_us), "phase 1 out: its retransmission");
    let sent: Vec<Vec<u8>> = std::iter::from_fn(|| p.poll_transmit()).collect();
    assert_eq!(sent.len(), 2);
    p.handle_timeout(100 + p.rto_us - 1);
    assert!(p.poll_transmit().is_none(), "not due yet");
    p.handle_timeout(100 + p.rto_us);
    assert_eq!(std::iter::from_fn(|| p.poll_transmit()).count(), 2, "due: both resent");
    // A refusal by a higher ballot with a backoff: quiet until the retake.
    p.backoff_us = 1_000;
    let mut acc = HostAcceptor::new(0);
    let higher = paxos_frame(EthernetAddress([2; 6]), EthernetAddress([1; 6]), 7, 1, true, Ring { base: 0, slots: 2 }, 0, 2 << 8 | 2, 0);
    acc.answer(&higher[14..]).expect("promise");
    let mine = paxos_frame(EthernetAddress([2; 6]), EthernetAddress([1; 6]), 7, 1, true, Ring { base: 0, slots: 2 }, 0, p.ballot(), 0);
    let mut refusal = mine[..14].to_vec();
    refusal.extend(acc.answer(&mine[14..]).expect("refusal"));
    p.handle(500, &refusal);
    let (at, by) = p.retake.expect("backing off");
    assert_eq!(by, 2 << 8 | 2);
    assert!((1_500..2_500).contains(&at), "backoff plus jitter: {at}");
    assert_eq!(p.poll_timeout(), Some(at));
    p.handle_timeout(at - 1);
    assert!(p.poll_transmit().is_none() && p.retake.is_some());
    p.handle_timeout(at);
    assert!(p.retake.is_none() && p.ballot() > 2 << 8 | 2 && p.stats.duels == 1);
    assert_eq!(std::iter::from_fn(|| p.poll_transmit()).count(), 2, "phase 1 again, above the refusal");

    // A leader with nothing in flight has no timer; a value proposed then is due at once
    // (`propose` takes no time: the latest time it was given).
    let mut q = proposer(3, 2);
    let mut accs: Vec<HostAcceptor> = (0..3).map(HostAcceptor::new).collect();
    q.take_over(0, 10);
    for f in std::iter::from_fn(|| q.poll_transmit()).collect::<Vec<_>>() {
        for a in accs.iter_mut() {
            let mut b = f[..14].to_vec();
            b.extend(a.answer(&f[14..]).expect("promise"));
            q.handle(20, &b);
        }
    }
    assert!(q.leading);
    assert_eq!(q.poll_timeout(), None, "idle leader");
    q.propose(5);
    assert_eq!(q.poll_timeout(), Some(20), "a queued value starts at once");
}

/// A duel of ballots on host acceptors: two proposers, each taking over above the one that
/// refused it after a backoff; with loss and duplication, every value of both is delivered,
/// the logs agree, and the duel took a bounded number of rounds.
#[test]
fn a_duel_of_ballots_settles_with_backoff() {
    for seed in [2, 3, 5] {
        let mut r = HostRun::new(seed, 5, 10);
        let mut ps = vec![proposer(1, 8), proposer(2, 8)];
        for p in ps.iter_mut() {
            p.backoff_us = 400;
        }
        ps[0].take_over(0, 0);
        ps[1].take_over(0, 0);
        let values: Vec<i32> = (0..30).map(|k| kv_command(1 + k % 7, 1 + k)).collect();
        for (k, v) in values.iter().enumerate() {
            ps[k % 2].propose(*v);
        }
        let done = r.run(&mut ps, 5_000_000, |_, _| true, |r| r.learners.iter().all(|l| values.iter().all(|v| l.log.contains(v))));
        assert!(done, "seed {seed}: delivered {:?}", r.learners.iter().map(|l| l.log.len()).collect::<Vec<_>>());
        logs_agree(&r);
        let rounds: u64 = ps.iter().map(|p| p.stats.rounds).sum();
        let duels: u64 = ps.iter().map(|p| p.stats.duels).sum();
        assert!(duels >= 1, "seed {seed}: no duel happened");
        assert!(rounds < 40, "seed {seed}: {rounds} rounds");
    }
}
