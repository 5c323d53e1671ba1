//! A tenant's requests in flight: the retransmission timer of §IV-D. A request not
//! answered within `rto_us` is sent again with the retransmission flag (the switch hands
//! it to the goalkeeper), up to `max_tries` times.

use std::collections::{BTreeMap, VecDeque};

use wire::inaas::{flags, Operator, ITEMS};

use super::assembly::{parse_reply, Assembler, FrameError, ItemReq, ItemResult};

/// A finished request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    pub seq: u32,
    /// Per segment: `None` if the request had no item there.
    pub results: [Option<ItemResult>; ITEMS],
    /// Microseconds from first send to answer.
    pub latency_us: u64,
    /// Answered by the goalkeeper rather than the switch.
    pub via_goalkeeper: bool,
    /// Gave up after `max_tries` (every item is a miss).
    pub gave_up: bool,
}

#[derive(Clone, Debug)]
struct InFlight {
    frame: Vec<u8>,
    first_us: u64,
    deadline_us: u64,
    tries: u32,
    valid: [bool; ITEMS],
}

/// Counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientStats {
    pub sent: u64,
    pub retransmitted: u64,
    pub answered_by_switch: u64,
    pub answered_by_goalkeeper: u64,
    pub gave_up: u64,
    pub stray: u64,
}

pub struct TenantClient {
    pub asm: Assembler,
    pub rto_us: u64,
    pub max_tries: u32,
    inflight: BTreeMap<u32, InFlight>,
    out: VecDeque<Vec<u8>>,
    pub stats: ClientStats,
}

impl TenantClient {
    pub fn new(asm: Assembler, rto_us: u64, max_tries: u32) -> Self {
        TenantClient { asm, rto_us, max_tries, inflight: BTreeMap::new(), out: VecDeque::new(), stats: ClientStats::default() }
    }

    /// Queue a request; returns its sequence number.
    pub fn send(&mut self, items: &[ItemReq], op: Operator, now_us: u64) -> Result<u32, FrameError> {
        let (seq, frame) = self.asm.build(items, op, now_us as u32)?;
        let mut valid = [false; ITEMS];
        for it in items {
            valid[it.seg] = true;
        }
        self.out.push_back(frame.clone());
        self.stats.sent += 1;
        self.inflight.insert(seq, InFlight { frame, first_us: now_us, deadline_us: now_us + self.rto_us, tries: 1, valid });
        Ok(seq)
    }

    /// The next frame to put on the wire.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.out.pop_front()
    }

    /// Requests still unanswered.
    pub fn in_flight(&self) -> usize {
        self.inflight.len()
    }

    /// Earliest retransmission deadline.
    pub fn poll_timeout(&self) -> Option<u64> {
        self.inflight.values().map(|f| f.deadline_us).min()
    }

    /// A frame for this tenant.
    pub fn handle(&mut self, now_us: u64, frame: &[u8]) -> Option<Completion> {
        let r = parse_reply(frame)?;
        if r.uid != self.asm.uid {
            self.stats.stray += 1;
            return None;
        }
        let Some(f) = self.inflight.remove(&r.seq) else {
            self.stats.stray += 1;
            return None;
        };
        let via_goalkeeper = r.flags & flags::GK_REPLY != 0;
        if via_goalkeeper {
            self.stats.answered_by_goalkeeper += 1;
        } else {
            self.stats.answered_by_switch += 1;
        }
        let mut results = r.results;
        for (j, v) in f.valid.iter().enumerate() {
            if !v {
                results[j] = None;
            }
        }
        Some(Completion { seq: r.seq, results, latency_us: now_us.saturating_sub(f.first_us), via_goalkeeper, gave_up: false })
    }

    /// Retransmit what is due; returns requests given up on.
    pub fn handle_timeout(&mut self, now_us: u64) -> Vec<Completion> {
        let mut gave_up = Vec::new();
        let due: Vec<u32> = self.inflight.iter().filter(|(_, f)| f.deadline_us <= now_us).map(|(s, _)| *s).collect();
        for seq in due {
            let f = self.inflight.get_mut(&seq).expect("due request is in flight");
            if f.tries >= self.max_tries {
                let f = self.inflight.remove(&seq).expect("present");
                self.stats.gave_up += 1;
                let mut results = [None; ITEMS];
                for (j, v) in f.valid.iter().enumerate() {
                    if *v {
                        results[j] = Some(ItemResult::Miss);
                    }
                }
                gave_up.push(Completion { seq, results, latency_us: now_us - f.first_us, via_goalkeeper: false, gave_up: true });
                continue;
            }
            f.tries += 1;
            f.deadline_us = now_us + self.rto_us;
            f.frame[14 + 1] |= flags::RETRANS;
            self.out.push_back(f.frame.clone());
            self.stats.retransmitted += 1;
        }
        gave_up
    }
}
