//! Multi-Paxos with the acceptors in the switch (`programs::inaas::paxos`), proposers and
//! learners on hosts, sans-IO. Anchor: P4xos (acceptor per instance: rnd, vrnd, value).
//!
//! - Instance `i` lives in slot `base + i % slots` of segments 0–2 (three acceptors, a
//!   majority is two); the tag `i + 1` tells a slot's instances apart as the ring turns.
//!   A slot is reused only once every learner delivered the instance before it
//!   ([`Proposer::floor`]).
//! - Ballot = round << 8 | proposer id: two proposers never share one.
//! - A proposer that becomes leader runs phase 1 on every slot of the window
//!   `[floor, floor + slots)`; a promise on a slot covers every later instance of it (the
//!   acceptor's rnd is per slot). It then re-proposes, per instance, the value of the
//!   highest voted round among the promises, a no-op ([`NOOP`]) for a hole below the
//!   highest voted instance, and its own values after that.
//! - The switch answers phase 2a with each acceptor's vote (phase 2b); the proposer relays
//!   the votes to the learners ([`Vote`]), as P4xos's acceptors multicast them. A learner
//!   decides an instance when a majority of acceptors voted at one ballot, and delivers
//!   the log in order with no gap. Learners acknowledge their delivered prefix
//!   ([`Learner::delivered`]); the leader resends votes of instances not yet acknowledged.

use std::collections::{BTreeMap, VecDeque};

use wire::ethernet::{EtherType, EthernetAddress, EthernetFrame, EthernetRepr};
use wire::inaas::{flags, Bitmap, InaasPacket, InaasRepr, Item, ETHERTYPE, HEADER_LEN, OP_PAXOS_1A, OP_PAXOS_2A, PAXOS_TAG_ITEM};

/// Acceptors (segments 0..3).
pub const ACCEPTORS: usize = 3;
/// Votes that decide.
pub const MAJORITY: usize = 2;
/// The value a new leader fills a hole with.
pub const NOOP: i32 = 0;

/// Where the acceptors' state lives in the tenant's leased registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ring {
    pub base: u16,
    pub slots: u16,
}

impl Ring {
    pub fn slot(&self, inst: u64) -> u16 {
        self.base + (inst % self.slots as u64) as u16
    }
}

/// A Paxos request frame: phase 1a (`value` ignored) or 2a for instance `inst` at `ballot`,
/// to all three acceptors.
#[allow(clippy::too_many_arguments)]
pub fn paxos_frame(
    src: EthernetAddress,
    dst: EthernetAddress,
    uid: u32,
    seq: u32,
    phase1: bool,
    ring: Ring,
    inst: u64,
    ballot: u32,
    value: i32,
) -> Vec<u8> {
    let mut r = InaasRepr { op: if phase1 { OP_PAXOS_1A } else { OP_PAXOS_2A }, flags: 0, seq, uid, ..Default::default() };
    let idx = ring.slot(inst);
    for j in 0..ACCEPTORS {
        r.items[j] = Item { idx, key: ballot, value: if phase1 { 0 } else { value } };
    }
    // The tag item (not valid) carries the instance tag and, echoed, the ballot.
    r.items[PAXOS_TAG_ITEM] = Item { idx: 0, key: (inst + 1) as u32, value: ballot as i32 };
    let mask = (1 << ACCEPTORS) - 1;
    r.set_bits(Bitmap::Valid, mask);
    r.set_bits(Bitmap::Read, mask);
    let eth = EthernetRepr { src_addr: src, dst_addr: dst, ethertype: EtherType::Unknown(ETHERTYPE) };
    let mut buf = vec![0u8; 14 + HEADER_LEN];
    eth.emit(&mut EthernetFrame::new_unchecked(&mut buf[..]));
    r.emit(&mut InaasPacket::new_unchecked(&mut buf[14..]));
    buf
}

/// One acceptor's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// 1b: promised; its vote for this instance (vrnd 0: none).
    Promise { vrnd: u32, value: i32 },
    /// 2b: voted (ballot, value).
    Voted,
    /// Refused: it promised a higher ballot.
    Refused { promised: u32 },
    /// The tenant holds no lease on the cell (nothing done).
    NoLease,
    /// Not in this answer (its item is not valid): a host acceptor ([`HostAcceptor`])
    /// answers for itself alone.
    Absent,
}

/// A parsed answer of the switch's acceptors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PaxosReply {
    pub phase1: bool,
    pub inst: u64,
    pub ballot: u32,
    /// The value proposed (2a).
    pub value: i32,
    pub answers: [Answer; ACCEPTORS],
}

/// Parse a switch's Paxos answer (`None`: not one).
pub fn parse_paxos_reply(frame: &[u8]) -> Option<PaxosReply> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if eth.ethertype() != EtherType::Unknown(ETHERTYPE) {
        return None;
    }
    let p = InaasPacket::new_checked(&frame[14..]).ok()?;
    let op = p.op();
    if (op != OP_PAXOS_1A && op != OP_PAXOS_2A) || p.flags() & flags::REPLY == 0 {
        return None;
    }
    let tag = p.key(PAXOS_TAG_ITEM);
    if tag == 0 {
        return None;
    }
    let phase1 = op == OP_PAXOS_1A;
    let ballot = p.value(PAXOS_TAG_ITEM) as u32;
    let failed = p.bitmap(Bitmap::Failed);
    let valid = p.bitmap(Bitmap::Valid);
    let mut answers = [Answer::NoLease; ACCEPTORS];
    for (j, a) in answers.iter_mut().enumerate() {
        let k = p.key(j);
        *a = if valid & 1 << j == 0 {
            Answer::Absent
        } else if failed & 1 << j != 0 {
            if k != ballot {
                Answer::Refused { promised: k }
            } else {
                Answer::NoLease
            }
        } else if phase1 {
            Answer::Promise { vrnd: k, value: p.value(j) }
        } else {
            Answer::Voted
        };
    }
    Some(PaxosReply { phase1, inst: tag as u64 - 1, ballot, value: p.value(0), answers })
}

/// One acceptor's state in a slot (P4xos: rnd, vrnd, value), as the switch's
/// `paxos_instance_j`, `paxos_round_j` and `paxos_vote_j` cells hold it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AcceptorCell {
    /// The newest instance tag the slot served.
    pub instance: u32,
    pub rnd: u32,
    pub vrnd: u32,
    /// The instance tag of the vote, and its value.
    pub vtag: u32,
    pub value: i32,
}

/// Counters of a [`HostAcceptor`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AcceptorStats {
    pub promised: u64,
    pub voted: u64,
    pub refused: u64,
    pub stale: u64,
    pub malformed: u64,
}

/// Acceptor `j` as a host process (the host-only baseline of `tenants run --real`): the
/// switch acceptor's semantics (`programs::inaas::paxos`: a stale instance refused with
/// promise 0, promise or accept by comparing the ballot with rnd, the vote read or written)
/// on the same request, answered for itself alone (only item `j` valid in the answer). Its
/// cells are its own for good: no lease. Sans-IO: [`HostAcceptor::answer`] takes a request's
/// INaaS header (no Ethernet) and gives the answer's.
#[derive(Clone, Debug)]
pub struct HostAcceptor {
    pub j: usize,
    pub cells: BTreeMap<u16, AcceptorCell>,
    pub stats: AcceptorStats,
}

impl HostAcceptor {
    pub fn new(j: usize) -> Self {
        assert!(j < ACCEPTORS);
        HostAcceptor { j, cells: BTreeMap::new(), stats: AcceptorStats::default() }
    }

    /// The answer to a phase-1a or 2a request (`None`: not one, or malformed; dropped).
    pub fn answer(&mut self, req: &[u8]) -> Option<Vec<u8>> {
        let j = self.j;
        let Ok(p) = InaasPacket::new_checked(req) else {
            self.stats.malformed += 1;
            return None;
        };
        let (op, tag, ballot) = (p.op(), p.key(PAXOS_TAG_ITEM), p.key(j));
        let well_formed = (op == OP_PAXOS_1A || op == OP_PAXOS_2A)
            && p.flags() & flags::REPLY == 0
            && p.bitmap(Bitmap::Valid) & 1 << j != 0
            && tag != 0
            && ballot != 0
            && ballot < 1 << 31;
        if !well_formed {
            self.stats.malformed += 1;
            return None;
        }
        let phase1 = op == OP_PAXOS_1A;
        let (idx, value) = (p.idx(j), p.value(j));
        let mut out = req[..HEADER_LEN].to_vec();
        let mut a = InaasPacket::new_unchecked(&mut out[..]);
        a.set_flags(a.flags() & !flags::RETRANS | flags::REPLY);
        let c = self.cells.entry(idx).or_default();
        let mut failed = false;
        let stale = tag < c.instance;
        if !stale && !phase1 {
            // A 2a moves the slot to its instance whether accepted or not (the switch's
            // `Advance` runs before the round decision).
            c.instance = tag;
        }
        if stale {
            // An older instance of the ring: refused untouched, promise 0.
            failed = true;
            a.set_key(j, 0);
            self.stats.stale += 1;
        } else if ballot < c.rnd {
            failed = true;
            a.set_key(j, c.rnd);
            self.stats.refused += 1;
        } else if phase1 {
            c.rnd = ballot;
            let (k, v) = if c.vtag == tag { (c.vrnd, c.value) } else { (0, 0) };
            a.set_key(j, k);
            a.set_value(j, v);
            self.stats.promised += 1;
        } else {
            (c.rnd, c.vrnd, c.vtag, c.value) = (ballot, ballot, tag, value);
            self.stats.voted += 1;
        }
        a.set_bitmap(Bitmap::Valid, 1 << j);
        a.set_bitmap(Bitmap::Read, 1 << j);
        a.set_bitmap(Bitmap::Failed, if failed { 1 << j } else { 0 });
        Some(out)
    }
}

/// Acceptor `acceptor` voted `value` at `ballot` for `inst` (relayed to learners).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Vote {
    pub inst: u64,
    pub acceptor: u8,
    pub ballot: u32,
    pub value: i32,
}

/// Bytes of one [`Vote`] on a host-to-host link ([`Vote::to_bytes`]).
pub const VOTE_LEN: usize = 17;

impl Vote {
    /// Little-endian: instance (8), acceptor (1), ballot (4), value (4). For a leader that
    /// relays votes to learners in another process (`tenants run --real`).
    pub fn to_bytes(&self) -> [u8; VOTE_LEN] {
        let mut b = [0u8; VOTE_LEN];
        b[..8].copy_from_slice(&self.inst.to_le_bytes());
        b[8] = self.acceptor;
        b[9..13].copy_from_slice(&self.ballot.to_le_bytes());
        b[13..].copy_from_slice(&self.value.to_le_bytes());
        b
    }

    /// The vote in `b` (`None`: not [`VOTE_LEN`] bytes, or no acceptor of ours).
    pub fn from_bytes(b: &[u8]) -> Option<Vote> {
        if b.len() != VOTE_LEN || b[8] as usize >= ACCEPTORS {
            return None;
        }
        Some(Vote {
            inst: u64::from_le_bytes(b[..8].try_into().ok()?),
            acceptor: b[8],
            ballot: u32::from_le_bytes(b[9..13].try_into().ok()?),
            value: i32::from_le_bytes(b[13..].try_into().ok()?),
        })
    }
}

#[derive(Clone, Debug)]
struct Slot {
    value: i32,
    phase1: bool,
    /// Acceptors that answered this phase (bits).
    answered: u8,
    votes: Vec<Vote>,
    /// Best vote seen in phase 1: (vrnd, value).
    best: (u32, i32),
    sent_us: u64,
    done: bool,
}

/// Counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProposerStats {
    pub sent: u64,
    pub resent: u64,
    pub refused: u64,
    pub no_lease: u64,
    pub rounds: u64,
    /// Takeovers above a refusal after a backoff ([`Proposer::backoff_us`]): the duel's
    /// rounds this proposer started.
    pub duels: u64,
}

/// A proposer (the leader while it runs). Frames out via [`Proposer::poll_transmit`]; votes
/// for learners via [`Proposer::poll_vote`].
pub struct Proposer {
    pub id: u8,
    pub round: u32,
    pub ring: Ring,
    uid: u32,
    mac: EthernetAddress,
    service_mac: EthernetAddress,
    seq: u32,
    /// Every learner delivered everything below this.
    pub floor: u64,
    /// Phase 1 is over for the window (the proposer leads).
    pub leading: bool,
    /// Instances whose phase 1 is still open while taking over.
    preparing: usize,
    next_inst: u64,
    queue: VecDeque<i32>,
    /// Values given to this proposer (the only ones it puts back in its queue).
    mine: std::collections::BTreeSet<i32>,
    slots: BTreeMap<u64, Slot>,
    /// Instances decided (a majority voted) as this proposer saw it.
    pub decided: BTreeMap<u64, (u32, i32)>,
    pub rto_us: u64,
    out: VecDeque<Vec<u8>>,
    votes: VecDeque<Vote>,
    /// Send time of each instance's first 2a (for the latency of a decision).
    pub started_us: BTreeMap<u64, u64>,
    /// (instance, microseconds from first 2a to decision).
    pub latencies: Vec<(u64, u64)>,
    pub stats: ProposerStats,
    /// Defer to a higher ballot: a refusal by a higher ballot makes this proposer step down
    /// ([`Proposer::stepped_down`]) instead of taking over above it. Off by default (the
    /// harness decides who runs); a leader that comes back from a pause with stale state
    /// (`tenants run --real --paxos-zombie`) defers, as a correct proposer does.
    pub defer: bool,
    /// The higher ballot it stepped down to (with [`Proposer::defer`]): from then it sends
    /// nothing and ignores every answer (counting their refusals), until
    /// [`Proposer::take_over`].
    pub stepped_down: Option<u32>,
    /// Ignore refusals: keep the ballot and go on (re)sending, neither stepping down nor
    /// taking over. Off by default; a fighting zombie (`tenants run --real
    /// --paxos-zombie-fights`), whose every frame the acceptors must refuse.
    pub stubborn: bool,
    /// A duel of ballots: a refusal by a higher ballot makes the proposer go quiet for
    /// `backoff_us` (doubled for each refusal without a decision between, up to 16 times,
    /// plus up to `backoff_us` of jitter drawn from its id), then take over above it. 0
    /// (the default): take over at once.
    pub backoff_us: u64,
    /// With [`Proposer::backoff_us`]: after this many duel rounds, defer at the next
    /// refusal (step down) instead; 0: no limit.
    pub max_duels: u64,
    /// While backing off: (when to take over, the ballot that refused it).
    pub retake: Option<(u64, u32)>,
    /// Refusals since the last decision (the backoff's exponent).
    streak: u32,
    rng: u64,
    /// The latest time the proposer was given (values proposed since are due then).
    last_us: u64,
}

impl Proposer {
    pub fn new(id: u8, ring: Ring, uid: u32, mac: EthernetAddress, service_mac: EthernetAddress) -> Self {
        assert!(id > 0);
        Proposer {
            id,
            round: 0,
            ring,
            uid,
            mac,
            service_mac,
            seq: 1,
            floor: 0,
            leading: false,
            preparing: 0,
            next_inst: 0,
            queue: VecDeque::new(),
            mine: Default::default(),
            slots: BTreeMap::new(),
            decided: BTreeMap::new(),
            rto_us: 200,
            out: VecDeque::new(),
            votes: VecDeque::new(),
            started_us: BTreeMap::new(),
            latencies: Vec::new(),
            stats: ProposerStats::default(),
            defer: false,
            stepped_down: None,
            stubborn: false,
            backoff_us: 0,
            max_duels: 0,
            retake: None,
            streak: 0,
            rng: 0x9E37_79B9_7F4A_7C15 ^ id as u64,
            last_us: 0,
        }
    }

    pub fn ballot(&self) -> u32 {
        self.round << 8 | self.id as u32
    }

    /// A client value to be chosen (in order, one instance each).
    pub fn propose(&mut self, v: i32) {
        assert!(v != NOOP);
        self.mine.insert(v);
        self.queue.push_back(v);
    }

    /// Values still waiting for an instance or a decision.
    pub fn pending(&self) -> usize {
        self.queue.len() + self.slots.values().filter(|s| !s.done).count()
    }

    fn send(&mut self, inst: u64, now_us: u64) {
        let b = self.ballot();
        let s = self.slots.get_mut(&inst).expect("slot");

        s.sent_us = now_us;
        let f = paxos_frame(self.mac, self.service_mac, self.uid, self.seq, s.phase1, self.ring, inst, b, s.value);
        self.seq = self.seq.wrapping_add(1).max(1);
        self.out.push_back(f);
        self.stats.sent += 1;
    }

    /// Become leader with a round above `seen` (every promise refused so far): phase 1 on
    /// the whole window above the floor.
    pub fn take_over(&mut self, seen: u32, now_us: u64) {
        self.stepped_down = None;
        self.retake = None;
        self.last_us = self.last_us.max(now_us);
        self.round = self.round.max(seen >> 8) + 1;
        self.stats.rounds += 1;
        self.leading = false;
        // Values in flight go back to the queue's front unless decided.
        let mut back: Vec<i32> = Vec::new();
        for (i, s) in std::mem::take(&mut self.slots) {
            if !self.decided.contains_key(&i) && self.mine.contains(&s.value) && !s.phase1 {
                back.push(s.value);
            }
        }
        for v in back.into_iter().rev() {
            self.queue.push_front(v);
        }
        // Every slot of the window, decided or not: a promise on a slot is what lets this
        // ballot use the slot's later instances without another phase 1.
        let from = self.floor;
        self.preparing = 0;
        for inst in from..self.floor + self.ring.slots as u64 {
            self.prepare(inst, now_us);
        }
        self.next_inst = from;
        if self.preparing == 0 {
            self.lead(now_us);
        }
    }

    fn prepare(&mut self, inst: u64, now_us: u64) {
        self.slots
            .insert(inst, Slot { value: NOOP, phase1: true, answered: 0, votes: Vec::new(), best: (0, NOOP), sent_us: 0, done: false });
        self.preparing += 1;
        self.send(inst, now_us);
    }

    /// A learner reports a gap that does not close (P4xos: the learner asks the leader to
    /// fill it): run phase 1 again on the window, which re-decides each open instance
    /// with the value a majority may have chosen, and relays the votes again.
    pub fn recover(&mut self, now_us: u64) {
        let b = self.ballot();
        self.decided.retain(|i, _| *i < self.floor);
        self.take_over(b, now_us);
    }

    /// Everything below this the proposer saw decided.
    fn decided_prefix(&self) -> u64 {
        let mut i = self.floor;
        while self.decided.contains_key(&i) {
            i += 1;
        }
        i
    }

    /// Phase 1 done: phase 2 for voted instances (and no-ops for holes below them).
    fn lead(&mut self, now_us: u64) {
        self.leading = true;
        let top = self.slots.iter().filter(|(_, s)| s.best.0 > 0).map(|(i, _)| *i).max();
        let prepared: Vec<u64> = self.slots.keys().copied().collect();
        let mut next = self.decided_prefix();
        for inst in prepared {
            let s = self.slots.get_mut(&inst).expect("slot");
            if top.is_some_and(|t| inst <= t) {
                s.phase1 = false;
                s.value = s.best.1;
                s.answered = 0;
                s.done = false;
                s.votes.clear();
                // An adopted value is proposed here, not again from the queue.
                let v = s.value;
                self.queue.retain(|q| *q != v);
                self.started_us.entry(inst).or_insert(now_us);
                self.send(inst, now_us);
                next = next.max(inst + 1);
            } else {
                self.slots.remove(&inst);
            }
        }
        self.next_inst = next.max(self.decided.keys().next_back().map(|i| i + 1).unwrap_or(0));
        self.fill(now_us);
    }

    /// Start instances for queued values, within the window.
    fn fill(&mut self, now_us: u64) {
        if !self.leading {
            return;
        }
        while !self.queue.is_empty() && self.next_inst < self.floor + self.ring.slots as u64 {
            let inst = self.next_inst;
            self.next_inst += 1;
            if self.decided.contains_key(&inst) {
                continue;
            }
            let v = self.queue.pop_front().expect("non-empty");
            self.slots
                .insert(inst, Slot { value: v, phase1: false, answered: 0, votes: Vec::new(), best: (0, NOOP), sent_us: 0, done: false });
            self.started_us.insert(inst, now_us);
            self.send(inst, now_us);
        }
    }

    /// The learners delivered everything below `floor` (the minimum of their acks).
    pub fn on_floor(&mut self, floor: u64, now_us: u64) {
        if self.stepped_down.is_some() || self.retake.is_some() {
            return;
        }
        if floor > self.floor {
            let old_end = self.floor + self.ring.slots as u64;
            self.floor = floor;
            // An instance every learner delivered that this proposer did not see decided
            // with its value may hold another one: its value goes back to the queue (at
            // least once; the state machine drops a duplicate by command id).
            let mut back = Vec::new();
            for (i, s) in self.slots.iter() {
                if *i < floor && !s.phase1 && self.mine.contains(&s.value) && self.decided.get(i).map(|d| d.1) != Some(s.value) {
                    back.push(s.value);
                }
            }
            for v in back.into_iter().rev() {
                self.queue.push_front(v);
            }
            self.slots.retain(|i, _| *i >= floor);
            // New values start above the floor: an instance below it was delivered (with
            // another leader's value), its slot serves a later one, and a 2a for it would
            // only ever be answered stale, resent forever.
            self.next_inst = self.next_inst.max(floor);
            if !self.leading {
                // Instances below the floor need no phase 1 any more; the slots they leave
                // are prepared for the instances that now use them.
                self.preparing = self.slots.values().filter(|s| s.phase1 && !s.done).count();
                for inst in old_end.max(floor)..floor + self.ring.slots as u64 {
                    self.prepare(inst, now_us);
                }
                if self.preparing == 0 {
                    self.lead(now_us);
                }
            }
            self.fill(now_us);
        }
    }

    /// An answer of the switch.
    pub fn handle(&mut self, now_us: u64, frame: &[u8]) {
        self.last_us = self.last_us.max(now_us);
        let Some(r) = parse_paxos_reply(frame) else { return };
        if self.retake.is_some() {
            return; // backing off: quiet until it takes over again
        }
        if self.stepped_down.is_some() && r.ballot == self.ballot() {
            // Quiet, but still counting the refusals of what it sent before it stepped down.
            self.stats.refused += r.answers.iter().filter(|a| matches!(a, Answer::Refused { promised } if *promised > 0)).count() as u64;
            return;
        }
        if self.stepped_down.is_some() || r.ballot != self.ballot() {
            return; // an older round's answer
        }
        let ballot = self.ballot();
        let Some(s) = self.slots.get_mut(&r.inst) else { return };
        if s.phase1 != r.phase1 || s.done {
            return;
        }
        let mut higher = 0;
        let mut stale = false;
        for (j, a) in r.answers.iter().enumerate() {
            match *a {
                Answer::Refused { promised: 0 } => stale = true,
                Answer::Refused { promised } => {
                    higher = higher.max(promised);
                    self.stats.refused += 1;
                }
                Answer::NoLease => self.stats.no_lease += 1,
                Answer::Absent => {}
                Answer::Promise { vrnd, value } => {
                    s.answered |= 1 << j;
                    if vrnd > s.best.0 {
                        s.best = (vrnd, value);
                    }
                }
                Answer::Voted => {
                    s.answered |= 1 << j;
                    let v = Vote { inst: r.inst, acceptor: j as u8, ballot: r.ballot, value: r.value };
                    if !s.votes.contains(&v) {
                        s.votes.push(v);
                    }
                }
            }
        }
        if stale {
            // The slot serves a later instance: this one was delivered by every learner
            // (and so was everything before it), whatever this proposer heard.
            self.on_floor(r.inst + 1, now_us);
            return;
        }
        if higher > ballot && self.stubborn {
            return; // counted; the timer resends it at the same ballot
        }
        if higher > ballot && (self.defer || (self.backoff_us > 0 && self.max_duels > 0 && self.stats.duels >= self.max_duels)) {
            self.step_down(higher);
            return;
        }
        if higher > ballot && self.backoff_us > 0 {
            self.back_off(higher, now_us);
            return;
        }
        if higher > ballot {
            // Someone leads with a higher ballot: try again above it (a real deployment
            // would back off or defer to it; the harness decides who runs).
            self.take_over(higher, now_us);
            return;
        }
        if s.answered.count_ones() as usize >= MAJORITY {
            s.done = true;
            if r.phase1 {
                self.preparing = self.preparing.saturating_sub(1);
                if self.preparing == 0 {
                    self.lead(now_us);
                }
            } else {
                let votes = s.votes.clone();
                self.votes.extend(votes);
                self.streak = 0;
                self.decided.insert(r.inst, (r.ballot, r.value));
                if let Some(t0) = self.started_us.get(&r.inst) {
                    self.latencies.push((r.inst, now_us.saturating_sub(*t0)));
                }
            }
        }
    }

    /// Refused by `higher` in a duel: what it had in flight goes back to the queue, and it
    /// stays quiet until [`Proposer::retake`]'s time (exponential backoff with jitter, so
    /// two duelling proposers stop refusing each other's phase 1).
    fn back_off(&mut self, higher: u32, now_us: u64) {
        let mut back: Vec<i32> = Vec::new();
        for (i, s) in std::mem::take(&mut self.slots) {
            if !self.decided.contains_key(&i) && self.mine.contains(&s.value) && !s.phase1 && !back.contains(&s.value) {
                back.push(s.value);
            }
        }
        for v in back.into_iter().rev() {
            if !self.queue.contains(&v) {
                self.queue.push_front(v);
            }
        }
        self.leading = false;
        self.preparing = 0;
        self.out.clear();
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let wait = (self.backoff_us << self.streak.min(4)) + self.rng % self.backoff_us.max(1);
        self.streak += 1;
        self.retake = Some((now_us + wait, higher));
    }

    /// When [`Proposer::handle_timeout`] has work: the first retransmission or vote resend
    /// due, the end of a backoff, or now (the latest time given) when queued values can
    /// start instances. `None`: nothing to time (stepped down, or idle).
    pub fn poll_timeout(&self) -> Option<u64> {
        if self.stepped_down.is_some() {
            return None;
        }
        if let Some((at, _)) = self.retake {
            return Some(at);
        }
        let resend = self.slots.values().filter(|s| !s.done || !s.phase1).map(|s| s.sent_us + self.rto_us).min();
        let fill = (self.leading && !self.queue.is_empty() && self.next_inst < self.floor + self.ring.slots as u64).then_some(self.last_us);
        match (resend, fill) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Defer to `higher`: stop leading, forget what is in flight (frames not yet taken
    /// included) and the queue; nothing goes out any more.
    fn step_down(&mut self, higher: u32) {
        self.stepped_down = Some(higher);
        self.leading = false;
        self.preparing = 0;
        self.slots.clear();
        self.queue.clear();
        self.out.clear();
        self.votes.clear();
    }

    /// Resend what is unanswered; votes of decided instances learners have not acknowledged
    /// go out again.
    pub fn handle_timeout(&mut self, now_us: u64) {
        self.last_us = self.last_us.max(now_us);
        if self.stepped_down.is_some() {
            return;
        }
        if let Some((at, higher)) = self.retake {
            if now_us < at {
                return;
            }
            self.stats.duels += 1;
            self.take_over(higher, now_us);
        }
        // Values that arrived since the last call start their instances.
        self.fill(now_us);
        let due: Vec<u64> = self.slots.iter().filter(|(_, s)| !s.done && now_us >= s.sent_us + self.rto_us).map(|(i, _)| *i).collect();
        for inst in due {
            self.stats.resent += 1;
            self.send(inst, now_us);
        }
        let stale: Vec<Vote> = self
            .slots
            .values()
            .filter(|s| s.done && !s.phase1 && now_us >= s.sent_us + self.rto_us)
            .flat_map(|s| s.votes.clone())
            .collect();
        for s in self.slots.values_mut() {
            if s.done && !s.phase1 && now_us >= s.sent_us + self.rto_us {
                s.sent_us = now_us;
            }
        }
        self.votes.extend(stale);
    }

    /// The next frame to send.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.out.pop_front()
    }

    /// The next vote for the learners.
    pub fn poll_vote(&mut self) -> Option<Vote> {
        self.votes.pop_front()
    }
}

/// A vote that contradicts what a learner knows (never happens while Paxos is safe).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Violation {
    #[error("instance {inst}: two values at ballot {ballot}")]
    TwoValues { inst: u64, ballot: u32 },
    #[error("instance {inst}: decided {first}, then {then}")]
    Redecided { inst: u64, first: i32, then: i32 },
}

/// A learner: decides from acceptors' votes, delivers a gap-free log.
#[derive(Default)]
pub struct Learner {
    /// (instance, ballot) -> (acceptors that voted, value). Kept after delivery, so a
    /// second value chosen for a delivered instance is still caught.
    votes: BTreeMap<(u64, u32), (u8, i32)>,
    decided: BTreeMap<u64, i32>,
    /// The delivered log, in order, no gap.
    pub log: Vec<i32>,
}

impl Learner {
    /// A relayed vote. Returns an error if it contradicts a decision (never happens while
    /// Paxos is safe; the harness counts it).
    pub fn on_vote(&mut self, v: Vote) -> Result<(), Violation> {
        let e = self.votes.entry((v.inst, v.ballot)).or_insert((0, v.value));
        if e.1 != v.value {
            return Err(Violation::TwoValues { inst: v.inst, ballot: v.ballot });
        }
        e.0 |= 1 << v.acceptor;
        if e.0.count_ones() as usize >= MAJORITY {
            let value = e.1;
            if let Some(&d) = self.decided.get(&v.inst) {
                if d != value {
                    return Err(Violation::Redecided { inst: v.inst, first: d, then: value });
                }
            }
            self.decided.insert(v.inst, value);
            while let Some(&x) = self.decided.get(&(self.log.len() as u64)) {
                self.log.push(x);
            }
        }
        Ok(())
    }

    /// Instances delivered (the acknowledgement to proposers).
    pub fn delivered(&self) -> u64 {
        self.log.len() as u64
    }

    /// Instances decided but not delivered (each waits for a gap below it to close).
    pub fn undelivered(&self) -> usize {
        self.decided.range(self.log.len() as u64..).count()
    }
}

/// The replicated KV on top: a command is `key << 20 | value` (key < 2^11, value < 2^20),
/// a PUT, and is its own id (each is proposed once). The state is what the delivered log
/// built, each command applied once: a proposer that comes back after a crash re-proposes
/// what it cannot know was chosen, so a command may be in the log twice (as in any Paxos
/// log; state machines drop duplicates by command id).
pub fn kv_command(key: u32, value: u32) -> i32 {
    ((key & 0x7FF) << 20 | (value & 0xF_FFFF)) as i32
}

/// Apply a delivered log to a KV state.
pub fn kv_apply(log: &[i32]) -> BTreeMap<u32, u32> {
    let mut m = BTreeMap::new();
    let mut seen = std::collections::BTreeSet::new();
    for &c in log {
        if c != NOOP && seen.insert(c) {
            m.insert((c as u32) >> 20, (c as u32) & 0xF_FFFF);
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vote_bytes_round_trip_and_refuse_garbage() {
        let v = Vote { inst: 1 << 40 | 7, acceptor: 2, ballot: 3 << 8 | 2, value: -5 };
        assert_eq!(Vote::from_bytes(&v.to_bytes()), Some(v));
        let mut b = v.to_bytes();
        b[8] = ACCEPTORS as u8;
        assert_eq!(Vote::from_bytes(&b), None);
        assert_eq!(Vote::from_bytes(&b[..VOTE_LEN - 1]), None);
    }

    /// The switch's answer to `p`'s 2a for `inst`: every acceptor refused it, having
    /// promised `promised`.
    fn refusal(inst: u64, ballot: u32, promised: u32) -> Vec<u8> {
        let mut r = InaasRepr { op: OP_PAXOS_2A, flags: flags::REPLY, seq: 1, uid: 7, ..Default::default() };
        for j in 0..ACCEPTORS {
            r.items[j] = Item { idx: 0, key: promised, value: 5 };
        }
        r.items[PAXOS_TAG_ITEM] = Item { idx: 0, key: (inst + 1) as u32, value: ballot as i32 };
        r.set_bits(Bitmap::Valid, 7);
        r.set_bits(Bitmap::Failed, 7);
        from_switch(&r)
    }

    /// `r` as the switch sends it to the proposer (MAC ...:01 to ...:02).
    fn from_switch(r: &InaasRepr) -> Vec<u8> {
        let eth = EthernetRepr {
            src_addr: EthernetAddress([2, 0, 0, 0, 0, 1]),
            dst_addr: EthernetAddress([2, 0, 0, 0, 0, 2]),
            ethertype: EtherType::Unknown(ETHERTYPE),
        };
        let mut buf = vec![0u8; 14 + HEADER_LEN];
        eth.emit(&mut EthernetFrame::new_unchecked(&mut buf[..]));
        r.emit(&mut InaasPacket::new_unchecked(&mut buf[14..]));
        buf
    }

    /// The frames `p` has to send (taking them).
    fn frames(p: &mut Proposer) -> Vec<Vec<u8>> {
        std::iter::from_fn(|| p.poll_transmit()).collect()
    }

    /// How many frames `p` has to send (taking them).
    fn sent(p: &mut Proposer) -> usize {
        frames(p).len()
    }

    /// A leader: phase 1 on its two slots promised, value 5 proposed in instance 0.
    fn leader(defer: bool) -> Proposer {
        let mut p =
            Proposer::new(1, Ring { base: 0, slots: 2 }, 7, EthernetAddress([2, 0, 0, 0, 0, 2]), EthernetAddress([2, 0, 0, 0, 0, 1]));
        p.defer = defer;
        p.take_over(0, 0);
        for inst in 0..2 {
            let mut r = InaasRepr { op: OP_PAXOS_1A, flags: flags::REPLY, seq: 1, uid: 7, ..Default::default() };
            r.items[PAXOS_TAG_ITEM] = Item { idx: 0, key: (inst + 1) as u32, value: p.ballot() as i32 };
            r.set_bits(Bitmap::Valid, 7);
            p.handle(1, &from_switch(&r));
        }
        assert!(p.leading);
        p.propose(5);
        p.handle_timeout(2);
        assert_eq!(sent(&mut p), 2 + 1); // phase 1 on two slots, then the 2a
        p
    }

    #[test]
    fn a_deferring_proposer_steps_down_on_a_higher_ballot_and_goes_quiet() {
        let higher = 2 << 8 | 2;
        let mut p = leader(true);
        p.propose(6);
        p.handle_timeout(3);
        assert_eq!(sent(&mut p), 1); // the 2a of instance 1
        p.handle(3, &refusal(0, p.ballot(), higher));
        assert_eq!((p.stepped_down, p.leading, p.stats.refused), (Some(higher), false, 3));
        // The refusal of its other 2a still counts; nothing changes.
        p.handle(4, &refusal(1, p.ballot(), higher));
        assert_eq!((p.stepped_down, p.stats.refused), (Some(higher), 6));
        // Nothing more goes out: no retransmission, no new value, no phase 1 on a new floor.
        p.propose(7);
        p.handle_timeout(1_000_000);
        p.on_floor(1, 1_000_000);
        assert!(sent(&mut p) == 0 && p.poll_vote().is_none() && p.decided.is_empty());
        // Without `defer` (the default), the same refusal makes it try again above it.
        let mut q = leader(false);
        q.handle(3, &refusal(0, q.ballot(), higher));
        assert_eq!(q.stepped_down, None);
        assert!(q.ballot() > higher && sent(&mut q) > 0);
    }

    #[test]
    fn learner_names_a_contradiction() {
        let mut l = Learner::default();
        l.on_vote(Vote { inst: 0, acceptor: 0, ballot: 257, value: 8 }).unwrap();
        assert_eq!(l.on_vote(Vote { inst: 0, acceptor: 1, ballot: 257, value: 9 }), Err(Violation::TwoValues { inst: 0, ballot: 257 }));
        l.on_vote(Vote { inst: 0, acceptor: 1, ballot: 257, value: 8 }).unwrap();
        l.on_vote(Vote { inst: 0, acceptor: 0, ballot: 513, value: 9 }).unwrap();
        let e = l.on_vote(Vote { inst: 0, acceptor: 1, ballot: 513, value: 9 }).unwrap_err();
        assert_eq!(e, Violation::Redecided { inst: 0, first: 8, then: 9 });
        assert_eq!(e.to_string(), "instance 0: decided 8, then 9");
    }

    /// The instance a request frame is for.
    fn inst_of(frame: &[u8]) -> u64 {
        InaasPacket::new_unchecked(&frame[14..]).key(PAXOS_TAG_ITEM) as u64 - 1
    }

    #[test]
    fn values_start_at_the_floor_when_it_passes_the_next_instance() {
        // Instances 0 and 1 in flight (values 5, 6); another leader's values were chosen
        // in 0..4 and every learner delivered them: the floor jumps to 4.
        let mut p = leader(false);
        p.propose(6);
        p.handle_timeout(3);
        assert_eq!(frames(&mut p).iter().map(|f| inst_of(f)).collect::<Vec<_>>(), vec![1]);
        p.on_floor(4, 4);
        // 5 and 6 go again, in 4 and 5: below the floor their slots serve later instances
        // (the acceptors answer stale, never decide), which once stalled the proposer.
        assert_eq!(frames(&mut p).iter().map(|f| inst_of(f)).collect::<Vec<_>>(), vec![4, 5]);
        assert_eq!(p.pending(), 2);
    }

    #[test]
    fn a_stubborn_proposer_keeps_its_ballot_and_resends_what_is_refused() {
        let higher = 2 << 8 | 2;
        let mut p = leader(false);
        p.stubborn = true;
        let b = p.ballot();
        p.handle(3, &refusal(0, b, higher));
        assert_eq!((p.ballot(), p.leading, p.stepped_down, p.stats.refused), (b, true, None, 3));
        assert!(sent(&mut p) == 0 && p.decided.is_empty());
        p.handle_timeout(3 + p.rto_us);
        let out = frames(&mut p);
        assert_eq!(out.len(), 1, "the refused 2a, again");
        assert_eq!(out[0][14..], paxos_frame(p.mac, p.service_mac, p.uid, p.seq - 1, false, p.ring, 0, b, 5)[14..]);
    }

    #[test]
    fn learner_counts_what_waits_for_a_gap() {
        let mut l = Learner::default();
        for acceptor in 0..2 {
            l.on_vote(Vote { inst: 1, acceptor, ballot: 257, value: 9 }).unwrap();
        }
        assert_eq!((l.delivered(), l.undelivered()), (0, 1));
        for acceptor in 0..2 {
            l.on_vote(Vote { inst: 0, acceptor, ballot: 257, value: 8 }).unwrap();
        }
        assert_eq!((l.log.clone(), l.undelivered()), (vec![8, 9], 0));
    }
}
