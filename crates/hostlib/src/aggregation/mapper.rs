//! The mapper's sender: one Go-Back-N stream per tree, retransmission on timeout, status
//! reports to the reducer, and the switch to a BYPASS stream when the reducer asks.
//!
//! The retransmission timeout adapts per tree as TCP's does (RFC 6298): a smoothed RTT
//! and its variation from acknowledgements (timed from the packet's latest copy; see
//! `handle` for why not Karn's rule), RTO = SRTT + 4 RTTVAR within
//! `[min_rto_ns, max_rto_ns]`, doubled on each timeout until the next sample. A fixed timeout either retransmits spuriously whenever a
//! loaded reducer answers late (which made the udp baseline's packet counts noisy) or
//! waits too long after a real loss.

use std::collections::VecDeque;

use wire::daiet::{flags, info, Op};

use super::source::{census, MemPairs, PairSource};
use super::stream::Packer;
use super::{Error, Header, Mode, Protocol};

/// Sender parameters.
#[derive(Debug, Clone)]
pub struct MapperConfig {
    pub protocol: Protocol,
    pub mapper_id: u16,
    pub op: Op,
    pub mode: Mode,
    /// Initial retransmission timeout (before any RTT sample).
    pub rto_ns: u64,
    /// Bounds of the adaptive timeout.
    pub min_rto_ns: u64,
    pub max_rto_ns: u64,
    /// Packets in flight per tree.
    pub window: usize,
    /// No acknowledgement for this long on the in-network stream: report `STALLED`. Long
    /// enough that a switch process starved of CPU on a loaded host is not taken for a
    /// restarted one (at 400 ms, a large rack job beside a compile fell back).
    pub stall_ns: u64,
    /// A mapper whose stream is acknowledged reports FINISHED at least this often (at most
    /// once per RTO otherwise) until the reducer answers NOTED.
    pub finished_report_ns: u64,
    /// Done, the mapper waits for each reducer's GONE before it closes its socket (a DONE
    /// reaching a closed socket draws an ICMP error from the host); the run loop stops
    /// waiting once nothing has arrived for this long (a GONE or a BYE lost).
    pub linger_ns: u64,
}

impl MapperConfig {
    pub fn new(mapper_id: u16, op: Op, mode: Mode) -> MapperConfig {
        MapperConfig {
            protocol: Protocol::Daiet,
            mapper_id,
            op,
            mode,
            // Before the first sample the RTT is unknown: start high, as TCP does (RFC 6298
            // says 1 s), because every tree's first window goes out at once and a loaded
            // reducer may take tens of ms to answer it; a timeout there resends the window.
            rto_ns: 200_000_000,
            // The old fixed timeout is the floor: on a loaded 2-core host a reducer is often
            // descheduled for more than 10 ms.
            min_rto_ns: 20_000_000,
            // Backed off well below `stall_ns`, so a few losses in a row are not taken for
            // a restarted switch.
            max_rto_ns: 500_000_000,
            window: 64,
            stall_ns: 2_000_000_000,
            finished_report_ns: 100_000_000,
            linger_ns: 500_000_000,
        }
    }
}

/// What a sender did.
#[derive(Debug, Clone, Default)]
pub struct MapperStats {
    pub packets_sent: u64,
    pub bytes_sent: u64,
    pub retransmissions: u64,
    /// Retransmission timeouts that fired.
    pub timeouts: u64,
    pub acks: u64,
    pub fallback: bool,
    pub pairs: u64,
    /// Most packets of one tree built and not yet acknowledged at once (they are built as
    /// the window advances and dropped once acknowledged).
    pub max_held_packets: u64,
}

/// A built packet not acknowledged yet.
struct Held {
    pkt: Vec<u8>,
    /// When it was last sent ([`UNSENT`] before), and whether it was sent more than once.
    sent_at: u64,
    resent: bool,
}

struct TreeTx {
    tree_id: u16,
    epoch: u16,
    /// Cuts the tree's pairs into packets as the window needs them.
    packer: Packer,
    /// Packets `base..base + held.len()`, built and not acknowledged.
    held: VecDeque<Held>,
    /// The stream's packet count (END included), once END is built.
    total: Option<usize>,
    base: usize,
    next: usize,
    /// When the oldest unacknowledged packet times out.
    timer: Option<u64>,
    rtt: Rtt,
    last_progress: u64,
    last_query: Option<u64>,
    finished: bool,
    /// The reducer noted FINISHED: no more reports (it sends DONE, or RESEND).
    noted: bool,
    done: bool,
    /// BYEs owed: one per DONE received (the reducer resends DONE until it hears BYE, and
    /// waits for the answer to each DONE it sent before it says GONE).
    bye_due: u32,
    /// The reducer said GONE: nothing more comes from it.
    gone: bool,
}

/// A mapper's sender over all trees. Packets go out as `(tree index, UDP payload)`, each to
/// its tree's reducer address (a switch on the path intercepts them).
pub struct Mapper<S: PairSource = MemPairs> {
    cfg: MapperConfig,
    trees: Vec<TreeTx>,
    source: S,
    /// The source's key buffer (reused for every pair).
    key: Vec<u8>,
    /// The source failed: the run cannot complete.
    error: Option<Error>,
    pub stats: MapperStats,
}

impl Mapper<MemPairs> {
    /// `tree_ids[i]` is the tree of index `i`; pair `j` is `keys[offsets[j]..offsets[j+1]]`
    /// with `values[j]`, sent on tree index `tree_of_pair[j]`.
    pub fn new(
        cfg: MapperConfig,
        tree_ids: &[u16],
        keys: Vec<u8>,
        offsets: Vec<u64>,
        values: Vec<u32>,
        tree_of_pair: Vec<u16>,
        now: u64,
    ) -> Result<Mapper, Error> {
        let src = MemPairs::new(tree_ids.len(), keys, offsets, values, tree_of_pair)?;
        Mapper::from_source(cfg, tree_ids, src, now)
    }
}

impl<S: PairSource> Mapper<S> {
    /// A sender of `source`'s pairs (its tree index `i` is `tree_ids[i]`). The source is
    /// read once first (pair counts, keys the protocol cannot carry: refused before
    /// anything is sent), then again as packets are needed.
    pub fn from_source(cfg: MapperConfig, tree_ids: &[u16], mut source: S, now: u64) -> Result<Mapper<S>, Error> {
        if source.trees() != tree_ids.len() {
            return Err(Error::TreeIds { source_trees: source.trees(), tree_ids: tree_ids.len() });
        }
        if cfg.protocol == Protocol::SwitchAgg {
            super::switchagg::check_mapper(cfg.mapper_id)?;
        }
        let proto = cfg.protocol;
        let c = census(&mut source, |n| proto.check_key_len(n))?;
        let (epoch, bypass) = match cfg.mode {
            Mode::Switch => (0, 0),
            Mode::Udp => (1, flags::BYPASS),
        };
        let mut m = Mapper {
            trees: tree_ids
                .iter()
                .map(|&t| TreeTx {
                    tree_id: t,
                    epoch,
                    packer: Packer::new(proto, Header { tree_id: t, flags: bypass, op: cfg.op, sender: cfg.mapper_id, epoch }),
                    held: VecDeque::new(),
                    total: None,
                    base: 0,
                    next: 0,
                    timer: None,
                    rtt: Rtt::new(cfg.rto_ns),
                    last_progress: now,
                    last_query: None,
                    finished: false,
                    noted: false,
                    done: false,
                    bye_due: 0,
                    gone: false,
                })
                .collect(),
            cfg,
            source,
            key: Vec::new(),
            error: None,
            stats: MapperStats::default(),
        };
        m.stats.pairs = c.pairs.iter().sum();
        Ok(m)
    }

    /// Why the run cannot complete: the source failed (e.g. a spool file could not be read).
    pub fn error(&self) -> Option<&Error> {
        self.error.as_ref()
    }

    fn header(&self, tree: usize, epoch: u16, extra: u8) -> Header {
        Header { tree_id: self.trees[tree].tree_id, flags: extra, op: self.cfg.op, sender: self.cfg.mapper_id, epoch }
    }

    /// Restart tree `i`'s stream under `epoch`, from its first pair.
    fn build(&mut self, i: usize, epoch: u16, extra: u8, now: u64) {
        let hdr = self.header(i, epoch, extra);
        if let Err(e) = self.source.rewind(i) {
            self.error.get_or_insert(e);
        }
        let t = &mut self.trees[i];
        t.epoch = epoch;
        t.packer = Packer::new(self.cfg.protocol, hdr);
        t.held.clear();
        t.total = None;
        t.base = 0;
        t.next = 0;
        t.timer = None;
        t.last_progress = now;
        t.last_query = None;
        t.finished = false;
        t.noted = false;
    }

    /// How long a done mapper waits for GONE after the last packet it received.
    pub fn linger_ns(&self) -> u64 {
        self.cfg.linger_ns
    }

    /// Change the adaptive timeout's bounds (equal bounds: a fixed timeout).
    pub fn set_rto_bounds(&mut self, min_ns: u64, max_ns: u64) {
        self.cfg.min_rto_ns = min_ns;
        self.cfg.max_rto_ns = max_ns.max(min_ns);
    }

    /// The current retransmission timeout of each tree.
    pub fn rto_ns(&self) -> Vec<u64> {
        self.trees.iter().map(|t| t.rtt.rto(self.cfg.min_rto_ns, self.cfg.max_rto_ns)).collect()
    }

    /// Every tree complete at its reducer.
    pub fn is_done(&self) -> bool {
        self.trees.iter().all(|t| t.done)
    }

    /// Done, and every BYE sent: the mapper can leave.
    pub fn is_quiet(&self) -> bool {
        self.is_done() && !self.trees.iter().any(|t| t.bye_due > 0)
    }

    /// Quiet, and every reducer said GONE: no packet is on its way to the mapper, which
    /// can close its socket.
    pub fn may_close(&self) -> bool {
        self.is_quiet() && self.trees.iter().all(|t| t.gone)
    }

    /// Tree ids still not complete.
    pub fn pending_trees(&self) -> Vec<u16> {
        self.trees.iter().filter(|t| !t.done).map(|t| t.tree_id).collect()
    }

    /// Packets to send now, as `(tree index, payload)`, appended to `out`. The mapper's
    /// timers run here too (retransmissions, reports, BYE): it has no `handle_timeout`.
    pub fn poll_transmit(&mut self, now: u64, out: &mut Vec<(usize, Vec<u8>)>) {
        let (min_rto, max_rto) = (self.cfg.min_rto_ns, self.cfg.max_rto_ns);
        for i in 0..self.trees.len() {
            let proto = self.cfg.protocol;
            let hdr = self.header(i, self.trees[i].epoch, flags::BYPASS | flags::QUERY);
            let mode = self.cfg.mode;
            let stall = self.cfg.stall_ns;
            let report = self.cfg.finished_report_ns;
            let window = self.cfg.window;
            let t = &mut self.trees[i];
            if t.done {
                for _ in 0..std::mem::take(&mut t.bye_due) {
                    let p = proto.control(hdr, 0, info::BYE);
                    self.stats.packets_sent += 1;
                    self.stats.bytes_sent += p.len() as u64;
                    out.push((i, p));
                }
                continue;
            }
            if t.timer.is_some_and(|d| now >= d) && t.base < t.next {
                self.stats.retransmissions += (t.next - t.base) as u64;
                self.stats.timeouts += 1;
                t.rtt.back_off(max_rto);
                t.next = t.base;
                t.timer = None;
            }
            let rto = t.rtt.rto(min_rto, max_rto);
            while t.next < t.base + window {
                if t.next == t.base + t.held.len() {
                    match build_next(t, i, &mut self.source, &mut self.key, proto) {
                        Ok(true) => self.stats.max_held_packets = self.stats.max_held_packets.max(t.held.len() as u64),
                        Ok(false) => break,
                        Err(e) => {
                            self.error.get_or_insert(e);
                            break;
                        }
                    }
                }
                let h = &mut t.held[t.next - t.base];
                h.resent = h.sent_at != UNSENT;
                h.sent_at = now;
                let p = h.pkt.clone();
                self.stats.packets_sent += 1;
                self.stats.bytes_sent += p.len() as u64;
                out.push((i, p));
                t.next += 1;
                if t.timer.is_none() {
                    t.timer = Some(now + rto);
                }
            }
            // Status reports to the reducer, at most one per RTO (once finished, at least one
            // per `finished_report_ns`).
            let every = if t.finished { rto.min(report) } else { rto };
            let due = t.last_query.is_none_or(|q| now >= q + every);
            let status = if t.finished {
                (!t.noted).then_some(info::FINISHED)
            } else if mode == Mode::Switch && t.epoch == 0 && now >= t.last_progress + stall {
                Some(info::STALLED)
            } else {
                None
            };
            if let (true, Some(s)) = (due, status) {
                t.last_query = Some(now);
                let p = proto.control(hdr, 0, s);
                self.stats.packets_sent += 1;
                self.stats.bytes_sent += p.len() as u64;
                out.push((i, p));
            }
        }
    }

    /// A packet received on the mapper's socket.
    pub fn handle(&mut self, now: u64, payload: &[u8]) {
        let Some(p) = self.cfg.protocol.parse(payload) else { return };
        let r = p.repr;
        let Some(i) = self.trees.iter().position(|t| t.tree_id == r.tree_id) else { return };
        if r.flags & flags::DONE != 0 {
            let t = &mut self.trees[i];
            t.done = true;
            t.bye_due += 1;
            return;
        }
        if r.flags & flags::QUERY != 0 {
            let t = &mut self.trees[i];
            if r.info == info::GONE && r.sender == super::REDUCER_SENDER && t.done {
                t.gone = true;
                return;
            }
            if r.info == info::NOTED && r.sender == super::REDUCER_SENDER && r.epoch == t.epoch && t.finished {
                t.noted = true;
            }
            return;
        }
        if r.flags & flags::RESEND != 0 {
            if r.epoch > self.trees[i].epoch {
                self.stats.fallback = true;
                self.build(i, r.epoch, flags::BYPASS, now);
            }
            return;
        }
        if r.flags & flags::ACK != 0 && r.sender == self.cfg.mapper_id {
            let (min_rto, max_rto) = (self.cfg.min_rto_ns, self.cfg.max_rto_ns);
            let t = &mut self.trees[i];
            if r.epoch != t.epoch {
                return;
            }
            self.stats.acks += 1;
            let acked = r.seq as usize + 1;
            if acked > t.base && acked <= t.base + t.held.len() {
                // Timed from the packet's latest copy. For a retransmitted packet that is
                // ambiguous (the ACK may answer an earlier copy, so it can only
                // under-estimate), and Karn's rule would take no sample at all; but a
                // Go-Back-N sender then starves: after a loss every packet in the window is
                // sent again and the receiver drops those past the hole, so a clean sample
                // almost never comes and the backed-off timeout stays (a loopback test at
                // 5% loss stalled for seconds). So a retransmitted packet's sample counts
                // while there is no estimate yet or when it is at least half the estimate
                // (an ACK of the earlier copy arrives sooner than that).
                let h = &t.held[acked - 1 - t.base];
                let (last, ambiguous) = (h.sent_at, h.resent);
                if last != UNSENT && now >= last {
                    let r = now - last;
                    if !ambiguous || t.rtt.srtt().is_none_or(|s| r >= s / 2) {
                        t.rtt.sample(r);
                    }
                }
                let rto = t.rtt.rto(min_rto, max_rto);
                t.held.drain(..acked - t.base);
                t.base = acked;
                t.next = t.next.max(acked);
                t.last_progress = now;
                t.timer = if t.base < t.next { Some(now + rto) } else { None };
                if t.total == Some(t.base) && !t.finished {
                    t.finished = true;
                    t.last_query = None;
                }
            }
        }
    }

    /// When `poll_transmit` has something to do next (a retransmission, a report, a BYE).
    pub fn poll_timeout(&self) -> Option<u64> {
        if self.trees.iter().any(|t| t.bye_due > 0) {
            return Some(0);
        }
        self.trees
            .iter()
            .filter(|t| !t.done)
            .flat_map(|t| {
                let rto = t.rtt.rto(self.cfg.min_rto_ns, self.cfg.max_rto_ns);
                let every = if t.finished { rto.min(self.cfg.finished_report_ns) } else { rto };
                let q = if (t.finished && !t.noted) || (!t.finished && self.cfg.mode == Mode::Switch && t.epoch == 0) {
                    let stall_at = if t.finished { 0 } else { t.last_progress + self.cfg.stall_ns };
                    Some(t.last_query.map_or(stall_at, |q| (q + every).max(stall_at)))
                } else {
                    None
                };
                [t.timer, q]
            })
            .flatten()
            .min()
    }
}

/// Build tree `i`'s next packet (data, then END) into `t.held`, reading its pairs from `src`
/// as the packer needs them; false once END is built.
fn build_next<S: PairSource>(t: &mut TreeTx, i: usize, src: &mut S, key: &mut Vec<u8>, proto: Protocol) -> Result<bool, Error> {
    if t.total.is_some() {
        return Ok(false);
    }
    let seq = t.base + t.held.len();
    let mut pkt = loop {
        if let Some(p) = t.packer.pop() {
            break p;
        }
        if t.packer.is_exhausted() {
            t.total = Some(seq + 1);
            break proto.end(t.packer.header());
        }
        match src.next_pair(i, key)? {
            Some(v) => {
                // Checked by the census already; a source changed since is refused too.
                proto.check_key_len(key.len())?;
                t.packer.push(key, v);
            }
            None => t.packer.finish(),
        }
    };
    proto.stamp(&mut pkt, seq as u32);
    t.held.push_back(Held { pkt, sent_at: UNSENT, resent: false });
    Ok(true)
}

/// `sent_at` of a packet not sent yet.
const UNSENT: u64 = u64::MAX;

/// RFC 6298's estimator, in nanoseconds.
#[derive(Debug, Clone)]
pub struct Rtt {
    srtt: Option<u64>,
    rttvar: u64,
    /// The current timeout before clamping (initial, computed or backed off).
    rto: u64,
    /// Timeouts since the last sample.
    backoffs: u32,
}

impl Rtt {
    pub fn new(initial_ns: u64) -> Rtt {
        Rtt { srtt: None, rttvar: 0, rto: initial_ns, backoffs: 0 }
    }

    /// A measured round trip (see `Mapper::handle` for which ACKs give one).
    pub fn sample(&mut self, r: u64) {
        let srtt = match self.srtt {
            None => {
                self.rttvar = r / 2;
                r
            }
            Some(s) => {
                self.rttvar = (3 * self.rttvar + s.abs_diff(r)) / 4;
                (7 * s + r) / 8
            }
        };
        self.srtt = Some(srtt);
        self.rto = srtt + (4 * self.rttvar).max(1_000);
        self.backoffs = 0;
    }

    /// A timeout fired: wait twice as long next time. From the second timeout in a row the
    /// estimate is dropped (RFC 6298 section 5 allows it: it is likely bogus), so the next
    /// ACK starts it afresh. Otherwise, once every packet left has been sent twice, `handle`
    /// rejects their samples against the old estimate and the timeout stays backed off to
    /// the maximum for the rest of the stream (a loopback run at 5% loss spent 10 s at
    /// 500 ms timeouts and ran into its time limit).
    pub fn back_off(&mut self, max: u64) {
        self.rto = self.rto.saturating_mul(2).min(max);
        self.backoffs += 1;
        if self.backoffs >= 2 {
            self.srtt = None;
            self.rttvar = 0;
        }
    }

    pub fn rto(&self, min: u64, max: u64) -> u64 {
        self.rto.clamp(min, max.max(min))
    }

    pub fn srtt(&self) -> Option<u64> {
        self.srtt
    }
}
