//! Traffic manager pieces: the packet replication engine (multicast groups and clone
//! sessions) and the per-port egress queues with optional line-rate shaping.

use std::collections::{BTreeMap, VecDeque};

use crate::control::{CloneSession, ControlError, Replica, WriteOp};
use crate::packet::PacketBuf;

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
    /// Earliest time the port can start sending its next packet (shaping).
    next_free_ns: u64,
}

impl PortQueue {
    pub fn new() -> Self {
        PortQueue { q: VecDeque::new(), fresh: Vec::new(), draining: 0, next_free_ns: 0 }
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

impl Default for PortQueue {
    fn default() -> Self {
        Self::new()
    }
}
