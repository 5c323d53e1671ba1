//! The traffic manager ([`TrafficManager`]) between a pipe's ingress and the egress of every pipe: the
//! packet replication engine (multicast groups and clone sessions), the per-port egress
//! queues with optional line-rate shaping, the recirculation and CPU queues, the buffer
//! pool and the counters; and the port map and queue sizes it works with.

use std::collections::{BTreeMap, VecDeque};

use crate::base::{ControlError, DropCode};
use crate::control::{CloneSession, Replica, WriteOp};
use crate::counters::Counters;
use crate::packet::{BufPool, PacketBuf, PortId, PORT_CPU, PORT_NONE, PORT_RECIRC};

/// Largest clone session id (Tofino 1's mirror session ids are 10 bits).
pub const MAX_CLONE_SESSION: u16 = 1023;

/// The packet replication engine's configuration (control-plane written).
#[derive(Default, Clone)]
pub struct Pre {
    groups: BTreeMap<u16, Vec<Replica>>,
    sessions: BTreeMap<u16, CloneSession>,
}

impl Pre {
    #[inline]
    pub fn group(&self, g: u16) -> Option<&[Replica]> {
        self.groups.get(&g).map(|v| v.as_slice())
    }
    #[inline]
    pub fn session(&self, s: u16) -> Option<&CloneSession> {
        self.sessions.get(&s)
    }

    pub fn write_group(&mut self, op: WriteOp, g: u16, replicas: Vec<Replica>) -> Result<(), ControlError> {
        if g == 0 {
            return Err(ControlError::InvalidArgument("multicast group 0 is reserved".into()));
        }
        write(&mut self.groups, op, g, replicas, "multicast group")
    }

    pub fn write_session(&mut self, op: WriteOp, s: u16, cfg: CloneSession) -> Result<(), ControlError> {
        if s == 0 || s > MAX_CLONE_SESSION {
            return Err(ControlError::OutOfRange(format!("clone session ids are 1..={MAX_CLONE_SESSION}")));
        }
        write(&mut self.sessions, op, s, cfg, "clone session")
    }

    pub fn groups(&self) -> impl Iterator<Item = (u16, &Vec<Replica>)> {
        self.groups.iter().map(|(k, v)| (*k, v))
    }
    pub fn sessions(&self) -> impl Iterator<Item = (u16, &CloneSession)> {
        self.sessions.iter().map(|(k, v)| (*k, v))
    }
}

fn write<V>(m: &mut BTreeMap<u16, V>, op: WriteOp, k: u16, v: V, what: &str) -> Result<(), ControlError> {
    match op {
        WriteOp::Insert => {
            if m.contains_key(&k) {
                return Err(ControlError::AlreadyExists(format!("{what} {k}")));
            }
            m.insert(k, v);
        }
        WriteOp::Modify => match m.get_mut(&k) {
            Some(x) => *x = v,
            None => return Err(ControlError::NotFound(format!("{what} {k}"))),
        },
        WriteOp::Delete => {
            if m.remove(&k).is_none() {
                return Err(ControlError::NotFound(format!("{what} {k}")));
            }
        }
    }
    Ok(())
}

/// One egress port's queue, FIFO, in two parts. `q` holds what earlier egress calls left
/// (budget, shaping); `fresh` what arrived while `q` was empty, in order. Most packets
/// arrive to an empty queue and leave at the next egress call, and a plain vector is
/// cheaper to fill and to drain as a batch than the ring; the ring keeps the backlog.
/// Whenever `fresh` holds packets, `q` is empty (so `q` then `fresh` is the FIFO order),
/// except while egress drains `fresh` and puts back what it could not send.
pub struct PortQueue {
    pub q: VecDeque<PacketBuf>,
    pub(crate) fresh: Vec<PacketBuf>,
    /// While egress queues a packet's clones: the packets it took out of `fresh` with it
    /// and has not sent yet, which count as still queued.
    pub(crate) draining: usize,
    shaper: Shaper,
}

/// A port's line rate: when it can start sending its next frame. Used by the egress
/// queues and by the recirculation port, which is one port of the same rate.
#[derive(Clone, Copy, Debug, Default)]
pub struct Shaper {
    next_free_ns: u64,
}

impl Shaper {
    /// May a frame of `len` bytes start at `now` on a port of `rate_bps`? If yes, account
    /// for it. `None`: the port takes whatever it is given.
    #[inline]
    pub fn admit(&mut self, now: u64, rate_bps: Option<u64>, len: usize) -> bool {
        let Some(rate) = rate_bps else { return true };
        if now < self.next_free_ns {
            return false;
        }
        // Preamble, frame gap and FCS add 24 bytes on the wire per frame.
        let wire_bits = ((len + 24) * 8) as u64;
        let start = self.next_free_ns.max(now.saturating_sub(1_000)); // at most 1 us of burst credit
        self.next_free_ns = start + wire_bits * 1_000_000_000 / rate.max(1);
        true
    }

    pub fn next_free_ns(&self) -> u64 {
        self.next_free_ns
    }
}

impl PortQueue {
    pub fn new() -> Self {
        PortQueue { q: VecDeque::new(), fresh: Vec::new(), draining: 0, shaper: Shaper::default() }
    }

    /// Packets queued.
    #[inline]
    pub fn len(&self) -> usize {
        self.q.len() + self.fresh.len() + self.draining
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Queue a packet at the tail.
    #[inline]
    pub(crate) fn push(&mut self, pkt: PacketBuf) {
        if self.q.is_empty() {
            self.fresh.push(pkt);
        } else {
            self.q.push_back(pkt);
        }
    }

    /// May the head packet leave at `now` on a port of `rate_bps`? If yes, account for it.
    #[inline]
    pub fn admit(&mut self, now: u64, rate_bps: Option<u64>, len: usize) -> bool {
        self.shaper.admit(now, rate_bps, len)
    }

    pub fn next_free_ns(&self) -> u64 {
        self.shaper.next_free_ns()
    }
}

impl Default for PortQueue {
    fn default() -> Self {
        Self::new()
    }
}

/// Which pipe each front-panel port belongs to.
#[derive(Clone, Debug)]
pub struct PortMap {
    pipe_of: Vec<u8>,
    pipes: u8,
}

impl PortMap {
    /// `ports` ports split into `pipes` contiguous groups.
    pub fn contiguous(ports: u16, pipes: u8) -> PortMap {
        let pipes = pipes.max(1);
        let per = (ports as usize).div_ceil(pipes as usize).max(1);
        PortMap { pipe_of: (0..ports as usize).map(|p| (p / per) as u8).collect(), pipes }
    }
    #[inline]
    pub fn pipe_of(&self, port: PortId) -> Option<u8> {
        self.pipe_of.get(port as usize).copied()
    }
    pub fn num_ports(&self) -> u16 {
        self.pipe_of.len() as u16
    }
    pub fn pipes(&self) -> u8 {
        self.pipes
    }
    /// The ports of pipe `p`.
    pub fn ports_of(&self, p: u8) -> Vec<PortId> {
        (0..self.pipe_of.len()).filter(|&i| self.pipe_of[i] == p).map(|i| i as PortId).collect()
    }
}

/// Sizes and rates of a pipe's queues.
#[derive(Clone, Debug)]
pub struct PipeConfig {
    /// Packets per egress port queue.
    pub queue_capacity: usize,
    /// Packets waiting to recirculate.
    pub recirc_capacity: usize,
    /// Recirculated packets admitted per ingress batch (a bound on one call's work).
    pub recirc_per_batch: usize,
    /// Line rate of the pipe's recirculation port; `None`: the front-panel ports' rate
    /// ([`PipeConfig::port_rate_bps`]), as on Tofino, where it is one port of the pipe.
    /// Recirculated passes beyond it wait in the recirculation queue (back-pressure) and,
    /// once that is full, are counted `recirc_full` drops. See [`PipeConfig::recirc_rate`].
    pub recirc_rate_bps: Option<u64>,
    /// PacketIn messages waiting for the controller.
    pub cpu_capacity: usize,
    /// Digests waiting for the controller.
    pub digest_capacity: usize,
    /// Packet buffer size in bytes.
    pub buf_capacity: usize,
    /// Port line rate for egress shaping; None sends as fast as the port takes packets.
    pub port_rate_bps: Option<u64>,
    /// Most packets sent per port per egress call.
    pub egress_budget: usize,
}

impl Default for PipeConfig {
    fn default() -> Self {
        PipeConfig {
            queue_capacity: 4096,
            recirc_capacity: 4096,
            recirc_per_batch: 256,
            recirc_rate_bps: None,
            cpu_capacity: 4096,
            digest_capacity: 4096,
            buf_capacity: crate::packet::DEFAULT_BUF_CAPACITY,
            port_rate_bps: None,
            egress_budget: 256,
        }
    }
}

impl PipeConfig {
    /// The recirculation port's line rate (`None`: unshaped, as the ports are).
    pub fn recirc_rate(&self) -> Option<u64> {
        self.recirc_rate_bps.or(self.port_rate_bps)
    }
}

/// Ingress output, one vector per destination pipe.
pub struct Handoff {
    pub per_pipe: Vec<Vec<PacketBuf>>,
}

impl Handoff {
    pub fn new(pipes: u8) -> Self {
        Handoff { per_pipe: (0..pipes.max(1)).map(|_| Vec::new()).collect() }
    }
    pub fn is_empty(&self) -> bool {
        self.per_pipe.iter().all(|v| v.is_empty())
    }
}

/// A packet for the controller.
pub struct PacketIn {
    pub pkt: PacketBuf,
    pub ingress_port: PortId,
}

/// The traffic manager and what it needs: replication engine, queues, the recirculation
/// and CPU ports, buffers and counters. Apart from the passes, so that a batch loop can
/// keep a pass open on a program's state while it hands packets to the traffic manager.
pub(crate) struct TrafficManager {
    pub(crate) id: u8,
    pub(crate) pre: Pre,
    pub(crate) map: PortMap,
    pub(crate) cfg: PipeConfig,
    pub(crate) queues: Vec<PortQueue>,
    /// Packets waiting to recirculate, oldest first: recirculations are pushed at the end,
    /// an ingress call takes its batch from the front (see [`crate::pipe::Pipe::ingress`]). Two plain
    /// vectors instead of a ring: the batch is usually the whole queue, swapped out at once.
    pub(crate) recirc: Vec<PacketBuf>,
    /// The batch an ingress call is running (empty between calls; kept for its allocation).
    pub(crate) recirc_due: Vec<PacketBuf>,
    /// Packets of that batch not run yet: they still wait in the recirculation queue, as
    /// far as its capacity is concerned.
    pub(crate) recirc_due_left: usize,
    /// The recirculation port's line rate.
    pub(crate) recirc_port: Shaper,
    pub(crate) cpu: VecDeque<PacketIn>,
    pub(crate) pool: BufPool,
    pub(crate) counters: Counters,
    /// Traced packets this traffic manager dropped (trace id, reason, program to blame),
    /// until the pipe moves them into their records.
    pub(crate) traced_drops: Vec<(u16, DropCode, Option<u8>)>,
}

impl TrafficManager {
    pub(crate) fn new(id: u8, map: PortMap, cfg: PipeConfig, programs: usize) -> TrafficManager {
        let n = map.num_ports() as usize;
        TrafficManager {
            id,
            counters: Counters::new(n, programs),
            pre: Pre::default(),
            queues: (0..n).map(|_| PortQueue::new()).collect(),
            recirc: Vec::new(),
            recirc_due: Vec::new(),
            recirc_due_left: 0,
            recirc_port: Shaper::default(),
            cpu: VecDeque::new(),
            pool: BufPool::new(cfg.buf_capacity, 0),
            traced_drops: Vec::new(),
            map,
            cfg,
        }
    }

    pub(crate) fn count_drop(&mut self, code: DropCode, blame: Option<u8>) {
        self.counters.drops[code.0 as usize] += 1;
        if let Some(p) = blame {
            if let Some(c) = self.counters.programs.get_mut(p as usize) {
                c.drops[code.0 as usize] += 1;
            }
        }
    }

    /// Note the drop of a traced packet (drops are the rare path: one more test there).
    #[inline]
    pub(crate) fn trace_drop(&mut self, pkt: &PacketBuf, code: DropCode, program: Option<u8>) {
        if pkt.meta.trace != 0 {
            self.traced_drops.push((pkt.meta.trace, code, program));
        }
    }

    #[inline(never)]
    pub(crate) fn dispose_ingress(&mut self, pkt: PacketBuf, blame: Option<u8>, recirc_limit: Option<u32>, out: &mut Handoff) {
        let meta = &pkt.meta;
        // Mirroring is independent of the drop decision, as on Tofino.
        if meta.clone_session != 0 && meta.drop != Some(DropCode::VIOLATION) {
            let s = meta.clone_session;
            self.clone_to_session(&pkt, s, out);
        }
        let meta = &pkt.meta;
        if let Some(code) = meta.drop {
            self.count_drop(code, blame);
            self.pool.put(pkt);
            return;
        }
        if meta.mcast_grp != 0 {
            let Some(replicas) = self.pre.group(meta.mcast_grp) else {
                self.trace_drop(&pkt, DropCode::NO_GROUP, None);
                self.count_drop(DropCode::NO_GROUP, None);
                self.pool.put(pkt);
                return;
            };
            // Copy for all but the last replica, which takes the original buffer.
            let prune = meta.mcast_prune_port;
            let targets: smallvec_like::Targets = replicas.iter().filter(|r| r.port != prune).copied().collect();
            let n = targets.len();
            if n == 0 {
                self.pool.put(pkt);
                return;
            }
            self.counters.mcast_replicas += n as u64;
            for r in &targets.as_slice()[..n - 1] {
                let mut copy = self.pool.copy_of(&pkt);
                copy.meta.egress_port = r.port;
                copy.meta.rid = r.rid;
                copy.meta.mcast_grp = 0;
                self.route(copy, recirc_limit, out);
            }
            let r = targets.as_slice()[n - 1];
            let mut pkt = pkt;
            pkt.meta.egress_port = r.port;
            pkt.meta.rid = r.rid;
            pkt.meta.mcast_grp = 0;
            self.route(pkt, recirc_limit, out);
            return;
        }
        if meta.egress_port == PORT_NONE {
            self.trace_drop(&pkt, DropCode::NO_ROUTE, blame);
            self.count_drop(DropCode::NO_ROUTE, blame);
            self.pool.put(pkt);
            return;
        }
        self.route(pkt, recirc_limit, out);
    }

    /// Send one packet towards its egress port (in whichever pipe owns it).
    #[inline]
    pub(crate) fn route(&mut self, pkt: PacketBuf, recirc_limit: Option<u32>, out: &mut Handoff) {
        match pkt.meta.egress_port {
            PORT_CPU => {
                if self.cpu.len() >= self.cfg.cpu_capacity {
                    self.trace_drop(&pkt, DropCode::CPU_FULL, None);
                    self.count_drop(DropCode::CPU_FULL, None);
                    self.pool.put(pkt);
                } else {
                    self.counters.packet_in += 1;
                    let ingress_port = pkt.meta.ingress_port;
                    self.cpu.push_back(PacketIn { pkt, ingress_port });
                }
            }
            PORT_RECIRC => self.recirculate(pkt, recirc_limit),
            port => match self.map.pipe_of(port) {
                // Our own port: straight into its queue, no handoff.
                Some(p) if p == self.id => self.enqueue_one(pkt),
                Some(p) => out.per_pipe[p as usize].push(pkt),
                None => {
                    self.trace_drop(&pkt, DropCode::BAD_PORT, None);
                    self.count_drop(DropCode::BAD_PORT, None);
                    self.pool.put(pkt);
                }
            },
        }
    }

    /// A packet sent to the recirculation port: dropped (and counted) beyond its program's
    /// recirculation limit or when the recirculation queue is full, queued otherwise.
    #[inline(always)]
    pub(crate) fn recirculate(&mut self, mut pkt: PacketBuf, recirc_limit: Option<u32>) {
        let over = recirc_limit.is_some_and(|l| pkt.meta.recirculations as u32 >= l);
        if over {
            let owner = pkt.meta.owner;
            self.trace_drop(&pkt, DropCode::RECIRC_LIMIT, Some(owner));
            self.count_drop(DropCode::RECIRC_LIMIT, Some(owner));
            self.pool.put(pkt);
        } else if self.recirc.len() + self.recirc_due_left >= self.cfg.recirc_capacity {
            self.trace_drop(&pkt, DropCode::RECIRC_FULL, None);
            self.count_drop(DropCode::RECIRC_FULL, None);
            self.pool.put(pkt);
        } else {
            // The recirculation port loops back into this pipe's ingress; its egress
            // control is not run (a simplification: no program here needs it).
            pkt.meta.is_clone = false;
            self.recirc.push(pkt);
        }
    }

    pub(crate) fn clone_to_session(&mut self, pkt: &PacketBuf, session: u16, out: &mut Handoff) {
        let Some(s) = self.pre.session(session) else {
            self.count_drop(DropCode::NO_GROUP, None);
            return;
        };
        let replicas: smallvec_like::Targets = s.replicas.iter().copied().collect();
        let trunc = s.truncate_len;
        for r in replicas.as_slice() {
            let mut copy = self.pool.copy_of(pkt);
            if trunc > 0 && copy.len() > trunc as usize {
                copy.set_len(trunc as usize);
            }
            self.counters.clones += 1;
            let m = &mut copy.meta;
            m.egress_port = r.port;
            m.rid = r.rid;
            m.is_clone = true;
            m.clone_session = 0;
            m.e2e_clone_session = 0;
            m.mcast_grp = 0;
            m.drop = None;
            m.truncate_len = trunc;
            self.route(copy, Some(u32::MAX), out);
        }
    }

    #[inline(always)]
    pub(crate) fn enqueue_one(&mut self, pkt: PacketBuf) {
        let port = pkt.meta.egress_port as usize;
        let q = &mut self.queues[port];
        let n = q.len();
        if n >= self.cfg.queue_capacity {
            self.trace_drop(&pkt, DropCode::QUEUE_FULL, None);
            self.counters.ports[port].queue_drops += 1;
            self.counters.drops[DropCode::QUEUE_FULL.0 as usize] += 1;
            self.pool.put(pkt);
            return;
        }
        q.push(pkt);
        let d = n as u64 + 1;
        let c = &mut self.counters.ports[port];
        if d > c.queue_depth_max {
            c.queue_depth_max = d;
        }
    }
}

/// A tiny inline vector of replicas so replication does not allocate for small groups.
mod smallvec_like {
    use crate::control::Replica;

    pub struct Targets {
        inline: [Replica; 16],
        n: usize,
        spill: Vec<Replica>,
    }

    impl Targets {
        pub fn len(&self) -> usize {
            if self.spill.is_empty() {
                self.n
            } else {
                self.spill.len()
            }
        }
        pub fn as_slice(&self) -> &[Replica] {
            if self.spill.is_empty() {
                &self.inline[..self.n]
            } else {
                &self.spill
            }
        }
    }

    impl FromIterator<Replica> for Targets {
        fn from_iter<I: IntoIterator<Item = Replica>>(iter: I) -> Self {
            let mut t = Targets { inline: [Replica { port: 0, rid: 0 }; 16], n: 0, spill: Vec::new() };
            for r in iter {
                if t.spill.is_empty() && t.n < 16 {
                    t.inline[t.n] = r;
                    t.n += 1;
                } else {
                    if t.spill.is_empty() {
                        t.spill.extend_from_slice(&t.inline[..t.n]);
                    }
                    t.spill.push(r);
                }
            }
            t
        }
    }
}
