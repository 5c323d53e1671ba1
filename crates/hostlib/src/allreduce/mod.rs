//! The worker side of SwitchML-style allreduce (`programs::allreduce`), sans-IO.
//!
//! A [`Worker`] takes UDP payloads and time in and gives UDP payloads and a deadline out
//! (`handle`, `handle_timeout`, `poll_transmit`, `poll_timeout`). One operation at a time
//! aggregates a vector of 32-bit integers, [`ELEMS`] per packet: chunk `k` goes to slot
//! `k mod s` of the job's pool; a slot's next chunk is sent when its result arrives, in the
//! other shadow copy. A contribution whose result does not come back within the
//! retransmission timeout (RFC 6298's estimate from the round trips, at least `rto_ns`,
//! doubled at each timeout) is sent again unchanged (the switch adds it once, and answers with the result if it is
//! complete). Every worker of a job must run the same operations in the same order.
//!
//! [`Worker::start_floats`] runs a float32 allreduce as two operations: the per-chunk
//! exponent round (MAX) and the quantized data round (SUM), see [`quant`].

pub mod quant;

use std::collections::VecDeque;

use wire::allreduce::{flags, Packet, Repr, ELEMS, PACKET_LEN};

/// A worker's place in a job.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    pub job: u16,
    /// This worker's id, `0..workers`.
    pub worker: u16,
    pub workers: u16,
    /// Slots of the job's pool (as the controller installed them): the window.
    pub slots: u16,
    /// Smallest retransmission timeout (the timeout adapts to the measured round trip above it).
    pub rto_ns: u64,
}

/// Counters of one worker.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerStats {
    pub packets_sent: u64,
    pub packets_received: u64,
    /// UDP payload bytes.
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub retransmissions: u64,
    /// Results for no slot in flight (duplicates, the other copy): ignored.
    pub ignored: u64,
}

#[derive(Clone, Copy)]
struct InFlight {
    chunk: u32,
    ver: u8,
    sent_at: u64,
    /// Sent more than once: its result gives no round-trip sample (Karn's rule).
    resent: bool,
}

/// Longest retransmission timeout.
const MAX_RTO_NS: u64 = 1_000_000_000;

/// What the current float operation is waiting for.
enum FloatPhase {
    None,
    Exponents { xs: Vec<f32> },
    Data { codes: Vec<u32> },
}

pub struct Worker {
    cfg: WorkerConfig,
    /// Next copy per slot (persists across operations: the switch's copies alternate).
    ver: Vec<u8>,
    max: bool,
    data: Vec<i32>,
    result: Vec<i32>,
    chunks: u32,
    done: u32,
    inflight: Vec<Option<InFlight>>,
    tx: VecDeque<Vec<u8>>,
    stats: WorkerStats,
    float: FloatPhase,
    float_result: Option<Vec<f32>>,
    float_len: usize,
    /// Smoothed round trip and its variation (RFC 6298), 0 before the first sample.
    srtt: u64,
    rttvar: u64,
    rto: u64,
}

impl Worker {
    pub fn new(cfg: WorkerConfig) -> Worker {
        assert!(cfg.slots > 0 && cfg.worker < cfg.workers, "a worker needs slots and an id below the worker count");
        let s = cfg.slots as usize;
        let cfg_rto = cfg.rto_ns;
        Worker {
            cfg,
            ver: vec![0; s],
            max: false,
            data: Vec::new(),
            result: Vec::new(),
            chunks: 0,
            done: 0,
            inflight: vec![None; s],
            tx: VecDeque::new(),
            stats: WorkerStats::default(),
            float: FloatPhase::None,
            float_result: None,
            float_len: 0,
            srtt: 0,
            rttvar: 0,
            rto: cfg_rto,
        }
    }

    pub fn config(&self) -> &WorkerConfig {
        &self.cfg
    }
    pub fn stats(&self) -> WorkerStats {
        self.stats
    }

    /// Start aggregating `values` (SUM, wrapping, or unsigned MAX with `max`). The previous
    /// operation must be finished.
    pub fn start(&mut self, now: u64, values: &[i32], max: bool) {
        assert!(self.is_done(), "one operation at a time");
        self.max = max;
        self.chunks = values.len().div_ceil(ELEMS) as u32;
        self.data = values.to_vec();
        self.data.resize(self.chunks as usize * ELEMS, 0);
        self.result = vec![0; self.data.len()];
        self.done = 0;
        let first = (self.cfg.slots as u32).min(self.chunks);
        for chunk in 0..first {
            self.send_chunk(now, chunk);
        }
    }

    /// Start a float32 SUM: the exponent round, then the data round.
    pub fn start_floats(&mut self, now: u64, xs: &[f32]) {
        let codes: Vec<i32> = quant::exponents(xs).into_iter().map(|c| c as i32).collect();
        self.float_result = None;
        self.float = FloatPhase::Exponents { xs: xs.to_vec() };
        self.start(now, &codes, true);
        self.advance_float(now);
    }

    /// Every chunk's result is in (true before any operation).
    pub fn is_done(&self) -> bool {
        self.done == self.chunks
    }
    /// A float operation's result, once finished.
    pub fn float_done(&self) -> bool {
        self.float_result.is_some()
    }

    /// The aggregate of the finished integer operation.
    pub fn result(&self) -> &[i32] {
        &self.result
    }
    /// The finished float operation's result (its length is the input's).
    pub fn take_floats(&mut self) -> Option<Vec<f32>> {
        self.float_result.take()
    }

    fn send_chunk(&mut self, now: u64, chunk: u32) {
        let slot = chunk % self.cfg.slots as u32;
        let ver = self.ver[slot as usize];
        self.inflight[slot as usize] = Some(InFlight { chunk, ver, sent_at: now, resent: false });
        self.tx.push_back(self.packet(chunk, ver));
        self.stats.packets_sent += 1;
        self.stats.bytes_sent += PACKET_LEN as u64;
    }

    fn packet(&self, chunk: u32, ver: u8) -> Vec<u8> {
        let at = chunk as usize * ELEMS;
        let mut values = [0i32; ELEMS];
        values.copy_from_slice(&self.data[at..at + ELEMS]);
        Repr {
            job: self.cfg.job,
            flags: if self.max { flags::MAX } else { 0 },
            ver,
            worker: self.cfg.worker,
            slot: (chunk % self.cfg.slots as u32) as u16,
            offset: chunk,
            values,
        }
        .to_bytes()
    }

    /// A UDP payload from the switch.
    pub fn handle(&mut self, now: u64, bytes: &[u8]) {
        self.stats.packets_received += 1;
        self.stats.bytes_received += bytes.len() as u64;
        let Ok(p) = Packet::new_checked(bytes) else {
            self.stats.ignored += 1;
            return;
        };
        let Ok(r) = Repr::parse(&p) else {
            self.stats.ignored += 1;
            return;
        };
        let slot = r.slot as usize;
        let want_max = if self.max { flags::MAX } else { 0 };
        let fl = match self.inflight.get(slot).copied().flatten() {
            Some(f) if r.job == self.cfg.job && r.flags == flags::RESULT | want_max && r.ver == f.ver && r.offset == f.chunk => f,
            _ => {
                self.stats.ignored += 1;
                return;
            }
        };
        if !fl.resent {
            self.rtt_sample(now.saturating_sub(fl.sent_at));
        }
        let at = fl.chunk as usize * ELEMS;
        self.result[at..at + ELEMS].copy_from_slice(&r.values);
        self.inflight[slot] = None;
        self.ver[slot] ^= 1;
        self.done += 1;
        let next = fl.chunk + self.cfg.slots as u32;
        if next < self.chunks {
            self.send_chunk(now, next);
        }
        self.advance_float(now);
    }

    /// Move a float operation on when its current round is finished.
    fn advance_float(&mut self, now: u64) {
        if !self.is_done() {
            return;
        }
        match std::mem::replace(&mut self.float, FloatPhase::None) {
            FloatPhase::None => {}
            FloatPhase::Exponents { xs } => {
                let codes: Vec<u32> = self.result.iter().map(|&c| c as u32).collect();
                let q = quant::quantize(&xs, &codes, self.cfg.workers as u32);
                self.float_len = xs.len();
                self.float = FloatPhase::Data { codes };
                self.start(now, &q, false);
                // An empty input is finished at once.
                self.advance_float(now);
            }
            FloatPhase::Data { codes } => {
                let mut out = quant::dequantize(&self.result, &codes, self.cfg.workers as u32);
                out.truncate(self.float_len);
                self.float_result = Some(out);
            }
        }
    }

    /// RFC 6298's estimator; the timeout never goes below the configured one.
    fn rtt_sample(&mut self, r: u64) {
        if self.srtt == 0 {
            self.srtt = r.max(1);
            self.rttvar = r / 2;
        } else {
            self.rttvar = (3 * self.rttvar + self.srtt.abs_diff(r)) / 4;
            self.srtt = (7 * self.srtt + r) / 8;
        }
        self.rto = (self.srtt + 4 * self.rttvar).clamp(self.cfg.rto_ns, MAX_RTO_NS);
    }

    /// The current retransmission timeout.
    pub fn rto_ns(&self) -> u64 {
        self.rto
    }

    /// Retransmit what timed out.
    pub fn handle_timeout(&mut self, now: u64) {
        let mut fired = false;
        for slot in 0..self.inflight.len() {
            if let Some(f) = self.inflight[slot] {
                if now >= f.sent_at + self.rto {
                    self.inflight[slot] = Some(InFlight { sent_at: now, resent: true, ..f });
                    self.tx.push_back(self.packet(f.chunk, f.ver));
                    self.stats.packets_sent += 1;
                    self.stats.bytes_sent += PACKET_LEN as u64;
                    self.stats.retransmissions += 1;
                    fired = true;
                }
            }
        }
        if fired {
            // Back off (RFC 6298 5.5): a timeout that fires is too short for this path.
            self.rto = (2 * self.rto).min(MAX_RTO_NS);
        }
    }

    /// The next UDP payload to send to the switch.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.tx.pop_front()
    }

    /// When [`Worker::handle_timeout`] should run next.
    pub fn poll_timeout(&self) -> Option<u64> {
        self.inflight.iter().flatten().map(|f| f.sent_at + self.rto).min()
    }
}
