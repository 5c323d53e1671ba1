//! The reducer's receiver for one tree: the switch's numbered stream, or (fallback and the
//! udp baseline) one Go-Back-N stream per mapper that it acknowledges itself.

use std::collections::{HashMap, HashSet};

use wire::daiet::{flags, info, Op};

use super::{merge, Header, Mode, Protocol, REDUCER_SENDER};

/// Receiver parameters.
#[derive(Debug, Clone)]
pub struct ReducerConfig {
    pub protocol: Protocol,
    pub tree_id: u16,
    pub n_mappers: usize,
    pub op: Op,
    pub mode: Mode,
    /// Resend interval of RESEND requests.
    pub rto_ns: u64,
    /// Every mapper finished but the switch's stream is incomplete and silent this long:
    /// fall back.
    pub grace_ns: u64,
    /// After completion, DONE is sent again to every mapper that has not said BYE, first
    /// after `rto_ns`, the interval doubling up to a fifth of this; the reducer's loop
    /// leaves once every mapper said BYE, or nothing has arrived for this long (so a mapper
    /// is left waiting only if about five DONEs in a row are lost). A job whose mappers all
    /// say BYE does not pay the linger.
    pub linger_ns: u64,
}

impl ReducerConfig {
    pub fn new(tree_id: u16, n_mappers: usize, op: Op, mode: Mode) -> ReducerConfig {
        ReducerConfig {
            protocol: Protocol::Daiet,
            tree_id,
            n_mappers,
            op,
            mode,
            rto_ns: 20_000_000,
            grace_ns: 500_000_000,
            linger_ns: 500_000_000,
        }
    }
}

/// What a receiver saw.
#[derive(Debug, Clone, Default)]
pub struct ReducerStats {
    pub packets: u64,
    /// UDP payload bytes received.
    pub bytes: u64,
    /// Pairs received (before the reducer's own aggregation; holes not counted).
    pub pairs: u64,
    pub duplicates: u64,
    pub malformed: u64,
    pub fallback: bool,
    /// Why it fell back (empty if it did not).
    pub fallback_reason: String,
    pub packets_sent: u64,
    /// DONEs sent again because a mapper had not said BYE.
    pub done_resent: u64,
}

#[derive(Default)]
struct SwitchStream {
    seen: HashSet<u32>,
    end: Option<u32>,
}

/// A reducer's receiver for one tree. Replies go out as `(mapper id, payload)`.
pub struct Reducer {
    cfg: ReducerConfig,
    epoch: u16,
    switch: HashMap<u16, SwitchStream>,
    switch_pairs: HashMap<Vec<u8>, u64>,
    host_expected: Vec<u32>,
    host_ended: Vec<bool>,
    host_pairs: HashMap<Vec<u8>, u64>,
    finished: Vec<bool>,
    all_finished_at: Option<u64>,
    /// When the switch's stream last brought something new (a long flush keeps it alive).
    last_switch_rx: u64,
    resend_pending: Vec<bool>,
    last_resend: u64,
    complete: bool,
    /// Mappers that said BYE after DONE.
    said_bye: Vec<bool>,
    /// DONEs sent to each mapper and BYEs heard from it since completion (a mapper answers
    /// every DONE with a BYE), and whether it was told GONE.
    dones: Vec<u32>,
    byes: Vec<u32>,
    gone: Vec<bool>,
    /// When DONE next goes again to the mappers that have not said BYE, and the interval.
    done_again_at: u64,
    done_every: u64,
    out: Vec<(usize, Vec<u8>)>,
    pub stats: ReducerStats,
}

impl Reducer {
    pub fn new(cfg: ReducerConfig) -> Reducer {
        let n = cfg.n_mappers;
        let epoch = if cfg.mode == Mode::Udp { 1 } else { 0 };
        Reducer {
            epoch,
            switch: HashMap::new(),
            switch_pairs: HashMap::new(),
            host_expected: vec![0; n],
            host_ended: vec![false; n],
            host_pairs: HashMap::new(),
            finished: vec![false; n],
            all_finished_at: None,
            last_switch_rx: 0,
            resend_pending: vec![false; n],
            last_resend: 0,
            complete: false,
            said_bye: vec![false; n],
            dones: vec![0; n],
            byes: vec![0; n],
            gone: vec![false; n],
            done_again_at: 0,
            done_every: 0,
            out: Vec::new(),
            stats: ReducerStats::default(),
            cfg,
        }
    }

    pub fn is_complete(&self) -> bool {
        self.complete
    }

    /// Complete, and every mapper has said BYE: nothing is left to answer.
    pub fn all_said_bye(&self) -> bool {
        self.complete && self.said_bye.iter().all(|&b| b)
    }

    /// Complete, and every DONE sent answered with a BYE (each mapper told GONE): nothing
    /// is in flight between the reducer and its mappers. A DONE sent again while the BYE
    /// was on its way is answered too, so after a spurious resend the reducer waits for
    /// that answer instead of leaving it to reach a closed socket; a lost DONE or BYE
    /// leaves this false, and the caller's linger bounds the wait.
    pub fn all_answered(&self) -> bool {
        self.complete && self.gone.iter().all(|&g| g)
    }

    /// The aggregated result (valid once complete).
    pub fn result(&self) -> &HashMap<Vec<u8>, u64> {
        if self.epoch == 0 {
            &self.switch_pairs
        } else {
            &self.host_pairs
        }
    }

    pub fn take_result(&mut self) -> HashMap<Vec<u8>, u64> {
        if self.epoch == 0 {
            std::mem::take(&mut self.switch_pairs)
        } else {
            std::mem::take(&mut self.host_pairs)
        }
    }

    fn hdr(&self, extra: u8) -> Header {
        Header { tree_id: self.cfg.tree_id, flags: flags::BYPASS | extra, op: self.cfg.op, sender: REDUCER_SENDER, epoch: self.epoch }
    }

    fn send(&mut self, to: usize, p: Vec<u8>) {
        self.stats.packets_sent += 1;
        self.out.push((to, p));
    }

    fn done_to(&mut self, m: usize) {
        self.dones[m] += 1;
        let p = self.cfg.protocol.control(self.hdr(flags::DONE), 0, 0);
        self.send(m, p);
    }

    fn set_complete(&mut self, now: u64) {
        if !self.complete {
            self.complete = true;
            self.done_every = self.cfg.rto_ns.max(1);
            self.done_again_at = now + self.done_every;
            for m in 0..self.cfg.n_mappers {
                self.done_to(m);
            }
        }
    }

    /// Fall back to host-side aggregation under a new epoch.
    fn fall_back(&mut self, now: u64, reason: &str) {
        if self.epoch != 0 || self.complete {
            return;
        }
        self.epoch = 1;
        self.stats.fallback = true;
        self.stats.fallback_reason = reason.to_string();
        self.switch_pairs.clear();
        self.switch.clear();
        self.resend_pending.iter_mut().for_each(|r| *r = true);
        self.resend_all(now);
    }

    fn resend_all(&mut self, now: u64) {
        self.last_resend = now;
        for m in 0..self.cfg.n_mappers {
            if self.resend_pending[m] {
                let p = self.cfg.protocol.control(self.hdr(flags::RESEND), 0, 0);
                self.send(m, p);
            }
        }
    }

    /// A packet received on the reducer's socket.
    pub fn handle(&mut self, now: u64, payload: &[u8]) {
        self.stats.packets += 1;
        self.stats.bytes += payload.len() as u64;
        let proto = self.cfg.protocol;
        let Some(p) = proto.parse(payload) else {
            self.stats.malformed += 1;
            return;
        };
        let r = p.repr;
        if r.tree_id != self.cfg.tree_id || r.flags & (flags::ACK | flags::RESEND | flags::DONE) != 0 {
            return;
        }
        let m = r.sender as usize;
        if r.flags & flags::QUERY != 0 {
            if m >= self.cfg.n_mappers {
                return;
            }
            if self.complete {
                if r.info == info::BYE {
                    self.said_bye[m] = true;
                    self.byes[m] += 1;
                    if self.byes[m] >= self.dones[m] && !self.gone[m] {
                        self.gone[m] = true;
                        let p = proto.control(self.hdr(flags::QUERY), 0, info::GONE);
                        self.send(m, p);
                    }
                } else {
                    self.done_to(m);
                }
                return;
            }
            match r.info {
                info::FINISHED if r.epoch == self.epoch => {
                    self.finished[m] = true;
                    if self.all_finished_at.is_none() && self.finished.iter().all(|&f| f) {
                        self.all_finished_at = Some(now);
                    }
                    // Noted: the mapper stops reporting (each report was a packet and a
                    // wake-up here for as long as the job ran).
                    let p = proto.control(self.hdr(flags::QUERY), 0, info::NOTED);
                    self.send(m, p);
                }
                info::STALLED => self.fall_back(now, "a mapper stalled at the switch (switch restarted or lost state)"),
                _ => {}
            }
            return;
        }
        self.stats.pairs += p.view.pairs().count() as u64;
        if r.flags & flags::FROM_SWITCH != 0 && r.flags & flags::BYPASS == 0 {
            if self.epoch != 0 || self.complete {
                return;
            }
            let s = self.switch.entry(r.sender).or_default();
            if !s.seen.insert(r.seq) {
                self.stats.duplicates += 1;
                return;
            }
            if r.flags & flags::END != 0 {
                s.end = Some(r.seq);
            }
            self.last_switch_rx = now;
            let op = self.cfg.op;
            for (k, v) in p.view.pairs() {
                merge(&mut self.switch_pairs, op, k, v as u64);
            }
            if self.switch.values().any(|s| s.end.is_some_and(|e| s.seen.len() as u64 == e as u64 + 1)) {
                self.set_complete(now);
            }
            return;
        }
        if r.flags & flags::BYPASS == 0 {
            // A mapper's in-network packet reached us untouched: no switch aggregates this
            // tree on the path.
            self.fall_back(now, "no switch aggregated the tree (a mapper's packet arrived directly)");
            return;
        }
        // A host-side stream: in-order only, acknowledged by us.
        if m >= self.cfg.n_mappers || r.epoch != self.epoch || self.epoch == 0 {
            return;
        }
        self.resend_pending[m] = false;
        if r.seq == self.host_expected[m] && !self.host_ended[m] {
            let op = self.cfg.op;
            for (k, v) in p.view.pairs() {
                merge(&mut self.host_pairs, op, k, v as u64);
            }
            self.host_expected[m] += 1;
            if r.flags & flags::END != 0 {
                self.host_ended[m] = true;
            }
        } else {
            self.stats.duplicates += 1;
        }
        if self.host_expected[m] > 0 {
            let hdr = Header { sender: r.sender, flags: flags::ACK | flags::BYPASS, ..self.hdr(0) };
            let p = proto.control(hdr, self.host_expected[m] - 1, 0);
            self.send(m, p);
        }
        if self.host_ended.iter().all(|&e| e) {
            self.set_complete(now);
        }
    }

    /// Timers: the fallback grace period, RESEND retries, and DONE again until BYE.
    pub fn handle_timeout(&mut self, now: u64) {
        if self.complete {
            if !self.all_said_bye() && now >= self.done_again_at {
                for m in 0..self.cfg.n_mappers {
                    if !self.said_bye[m] {
                        self.stats.done_resent += 1;
                        self.done_to(m);
                    }
                }
                self.done_every = (self.done_every * 2).min((self.cfg.linger_ns / 5).max(self.cfg.rto_ns));
                self.done_again_at = now + self.done_every;
            }
            return;
        }
        if self.epoch == 0 {
            if self.all_finished_at.is_some_and(|t| now >= t.max(self.last_switch_rx) + self.cfg.grace_ns) {
                let got: Vec<String> = self
                    .switch
                    .iter()
                    .map(|(id, s)| match s.end {
                        Some(e) => format!("switch {id}: {} of {} packets", s.seen.len(), e as u64 + 1),
                        None => format!("switch {id}: {} packets, no END", s.seen.len()),
                    })
                    .collect();
                let why = format!(
                    "the switch's stream stayed incomplete after every mapper finished (loss after the switch; {})",
                    if got.is_empty() { "nothing from a switch".to_string() } else { got.join(", ") }
                );
                self.fall_back(now, &why);
            }
        } else if self.resend_pending.iter().any(|&r| r) && now >= self.last_resend + self.cfg.rto_ns {
            self.resend_all(now);
        }
    }

    pub fn poll_timeout(&self) -> Option<u64> {
        if self.complete {
            return (!self.all_said_bye()).then_some(self.done_again_at);
        }
        if self.epoch == 0 {
            self.all_finished_at.map(|t| t.max(self.last_switch_rx) + self.cfg.grace_ns)
        } else if self.resend_pending.iter().any(|&r| r) {
            Some(self.last_resend + self.cfg.rto_ns)
        } else {
            None
        }
    }

    /// Replies to send, as `(mapper id, payload)`, appended to `out`.
    pub fn poll_transmit(&mut self, out: &mut Vec<(usize, Vec<u8>)>) {
        out.append(&mut self.out);
    }
}
