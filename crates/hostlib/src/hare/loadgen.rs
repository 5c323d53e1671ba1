//! A closed-loop key-value load generator (sans-IO): GETs and PUTs of a fixed key set in
//! Hare messages, `window` requests in flight, each with a sequence number that matches its
//! reply, a per-request timeout with retransmission, and every GET reply's value checked
//! against the value the key holds (so a fast wrong answer is counted, not measured).
//!
//! The I/O loop around it (`ports::hareload`) feeds it datagrams and the time:
//! [`KvLoad::handle`] for a reply, [`KvLoad::handle_timeout`] when [`KvLoad::poll_timeout`]
//! passes, and sends what [`KvLoad::poll_transmit`] gives until it gives nothing.
//!
//! Values travel as the hosts' value *cell* (`python/inswitch/hare/wire.py`):
//! `[length][bytes][zero padding]`, `[0xFF][padding]` for an absent key.
//!
//! Consistency the per-GET check relies on ([`LoadConfig::sole_writer`]): this generator is
//! the only writer of its keys. A PUT is sent only when no other request of its key is in
//! flight, and no request of a key is sent while its PUT is in flight, so each GET has
//! exactly one right answer: the value of the key's last acknowledged PUT (or its initial
//! value). A PUT that is never answered leaves its key unknown (it may or may not have
//! landed) and the key's GETs unchecked until its next acknowledged PUT. With other writers
//! a GET has no single right answer: only a malformed cell is refused, and the run is
//! checked by its [`History`] (every completed operation's value, for a linearizability
//! checker, and the PUTs never acknowledged).
//!
//! A hotspot shift is a key remap switched at a given time ([`KvLoad::set_shifts`]): from
//! then on the stream's key `k` is issued as `remap[k]`.
//!
//! YCSB-D ([`KvLoad::set_latest`]) replaces the fixed stream by its generator
//! ([`super::ycsb::LatestStream`]): each insert is a PUT of a new key (the next record,
//! absent until then), so the key set grows as the run goes.

use std::collections::VecDeque;

use wire::hare::{Op, Packet, Repr, FLAG_HIT};

use super::ycsb::{record_key, LatestStream};

/// Reply status bit of the storage agent: the store failed, the operation was not applied.
pub const STATUS_ERROR: u8 = 0x40;
/// Reply status bit of the storage agent: the object is moving, ask again.
pub const STATUS_RETRY: u8 = 0x80;
/// First byte of the cell of an absent key.
pub const NIL: u8 = 0xFF;

/// One operation of the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvOp {
    /// Read the key.
    Get,
    /// Write a fresh value (naming key, client and version) to the key.
    Put,
}

/// Knobs of a run.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// Requests in flight at most.
    pub window: usize,
    /// Width of the key field on the wire.
    pub key_field: u8,
    /// Size of the value cell (the switch's value width).
    pub value_size: usize,
    /// Length of a PUT's value (at most `value_size - 1`).
    pub field_size: usize,
    /// A request unanswered this long is sent again.
    pub timeout_ns: u64,
    /// Sends after the first before a request is abandoned.
    pub retries: u32,
    /// Written into PUT values so writers are told apart.
    pub client: u32,
    /// High bits of the first sequence number (a random start keeps two runs' replies apart).
    pub seq_start: u32,
    /// This generator is the only writer of its keys: each GET's value is checked against
    /// what the key holds. Off when other clients write the same keys (only a malformed
    /// cell is then a mismatch; the history is the check).
    pub sole_writer: bool,
    /// Record every completed operation's value and the unacknowledged PUTs ([`History`]).
    pub history: bool,
}

/// What the run did, for a linearizability checker: one row per [`Sample`] (in the same
/// order) of `cell_size` bytes, and the PUTs never acknowledged. Rows hold the value
/// normalised to a cell, `[length][bytes][zero padding]`; `present` says how to read it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    /// Bytes per row (the value cell size).
    pub cell_size: usize,
    /// A GET's returned value or a PUT's written value, one `cell_size` row per sample.
    pub cells: Vec<u8>,
    /// Per sample: [`PRESENT`], [`ABSENT`] (a GET of an absent key), or [`NO_VALUE`] (a
    /// failed operation, or a GET whose reply's cell was malformed).
    pub present: Vec<u8>,
    /// PUTs never acknowledged (abandoned, answered with the error status, or in flight at
    /// the end): they may or may not have landed.
    pub unacked_key: Vec<u32>,
    /// Their first transmission (ns).
    pub unacked_send_ns: Vec<u64>,
    /// Their values, one `cell_size` row each.
    pub unacked_cells: Vec<u8>,
}

/// [`History::present`]: the row holds a value.
pub const PRESENT: u8 = 1;
/// [`History::present`]: the key was absent.
pub const ABSENT: u8 = 0;
/// [`History::present`]: no value (a failed operation or a malformed cell).
pub const NO_VALUE: u8 = 2;

impl History {
    fn new(cell_size: usize) -> History {
        History { cell_size, ..History::default() }
    }

    /// Reserve room for `n` more rows (so a run does not reallocate while it is measured).
    pub fn reserve(&mut self, n: usize) {
        self.cells.reserve(n * self.cell_size);
        self.present.reserve(n);
    }

    /// Rows recorded.
    pub fn len(&self) -> usize {
        self.present.len()
    }

    /// No row.
    pub fn is_empty(&self) -> bool {
        self.present.is_empty()
    }

    /// Row `i`'s value: `Some(None)` absent, `None` no value.
    pub fn value(&self, i: usize) -> Option<Option<&[u8]>> {
        let row = &self.cells[i * self.cell_size..(i + 1) * self.cell_size];
        match self.present[i] {
            PRESENT => Some(Some(&row[1..1 + row[0] as usize])),
            ABSENT => Some(None),
            _ => None,
        }
    }

    /// Append `value` as a row of `cells` (None: absent; a value too long for the cell is
    /// no value).
    fn push_cell(cells: &mut Vec<u8>, size: usize, value: Option<&[u8]>) -> u8 {
        let at = cells.len();
        cells.resize(at + size, 0);
        match value {
            None => {
                cells[at] = NIL;
                ABSENT
            }
            Some(v) if v.len() < size => {
                cells[at] = v.len() as u8;
                cells[at + 1..at + 1 + v.len()].copy_from_slice(v);
                PRESENT
            }
            Some(_) => NO_VALUE,
        }
    }

    fn record(&mut self, value: Option<Option<&[u8]>>) {
        let p = match value {
            Some(v) => Self::push_cell(&mut self.cells, self.cell_size, v),
            None => {
                self.cells.resize(self.cells.len() + self.cell_size, 0);
                NO_VALUE
            }
        };
        self.present.push(p);
    }

    fn unacked(&mut self, key: u32, send_ns: u64, value: &[u8]) {
        self.unacked_key.push(key);
        self.unacked_send_ns.push(send_ns);
        Self::push_cell(&mut self.unacked_cells, self.cell_size, Some(value));
    }
}

/// Whether a completed GET's value was right.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Check {
    /// The value the key holds.
    Ok = 1,
    /// Another value (or a malformed cell): the run is wrong.
    Mismatch = 0,
    /// Not checked: a PUT, a failed operation, a key whose last PUT was never answered,
    /// or any GET when other clients write too ([`LoadConfig::sole_writer`] off).
    Unchecked = 2,
}

/// One completed operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// First transmission (ns, the caller's clock).
    pub send_ns: u64,
    /// Reply received.
    pub recv_ns: u64,
    /// 0 GET, 1 PUT.
    pub op: u8,
    /// Index of the key.
    pub key: u32,
    /// Answered by the switch.
    pub hit: bool,
    /// The reply's status byte.
    pub status: u8,
    /// The value check.
    pub check: Check,
}

/// Counters of a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadStats {
    /// Requests issued (first transmissions).
    pub issued: u64,
    /// Datagrams sent (first transmissions and retransmissions).
    pub sent: u64,
    /// Retransmissions after a timeout.
    pub retransmits: u64,
    /// Operations answered (samples).
    pub completed: u64,
    /// GETs answered.
    pub gets: u64,
    /// PUTs answered.
    pub puts: u64,
    /// GETs the switch answered.
    pub hits: u64,
    /// "Retry" answers (the object was moving); the request is sent again after a back-off.
    pub retries: u64,
    /// Requests abandoned after all retransmissions, or answered only "retry" for as long
    /// (`gave_up_after_retries`).
    pub timeouts: u64,
    /// Of `timeouts`: requests answered "retry" until `timeout_ns * (retries + 1)` had passed
    /// since their first sending (an object that never stops moving must not hold a window
    /// slot, and its key, for the rest of the run).
    pub gave_up_after_retries: u64,
    /// Answers with the error status (the store failed).
    pub errors: u64,
    /// Datagrams that are not a reply to a request of ours (not a Hare message, wrong op
    /// or key for the sequence number they carry).
    pub malformed: u64,
    /// Well-formed replies to no request in flight (duplicates, or to a request already
    /// answered or abandoned).
    pub late: u64,
    /// GET replies whose value is not the key's (with other writers: a malformed cell).
    pub mismatches: u64,
    /// GET replies not checked (the key's last PUT was never answered, or other clients
    /// write too).
    pub unchecked: u64,
    /// New keys the YCSB-D generator made (its inserts issued).
    pub inserts: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Free,
    /// Waiting for its (re)transmission in `tx`.
    Queued,
    /// Sent, waiting for the reply until `deadline`.
    Waiting,
    /// Answered "retry": sent again at `deadline`.
    Backoff,
}

#[derive(Debug, Clone)]
struct Flight {
    state: State,
    seq: u32,
    op: KvOp,
    key: u32,
    first_ns: u64,
    deadline: u64,
    sends: u32,
    backoffs: u32,
    payload: Vec<u8>,
    /// The value a PUT writes.
    value: Vec<u8>,
}

/// The generator: the key set, what each key holds, the requests in flight.
#[derive(Debug)]
pub struct KvLoad {
    cfg: LoadConfig,
    keys: Vec<Vec<u8>>,
    server_of: Vec<u16>,
    /// What each key holds (None: absent), when known.
    expected: Vec<Option<Vec<u8>>>,
    known: Vec<bool>,
    gets_in_flight: Vec<u32>,
    put_in_flight: Vec<bool>,
    stream: Vec<(KvOp, u32)>,
    next: usize,
    /// YCSB-D's generator in place of `stream`, the storage servers a new key is placed
    /// on, and its next operation (drawn, not yet issued: its key was busy).
    latest: Option<(LatestStream, u16)>,
    pending: Option<(KvOp, u32)>,
    /// Key remaps and when each starts (ns), in time order; `remap` is the one in force.
    shifts: VecDeque<(u64, Vec<u32>)>,
    remap: Option<Vec<u32>>,
    version: u64,
    slots: Vec<Flight>,
    free: Vec<usize>,
    slot_bits: u32,
    generation: u32,
    tx: VecDeque<(usize, u32)>,
    stopped: bool,
    /// Completed operations, in completion order.
    pub samples: Vec<Sample>,
    /// Counters.
    pub stats: LoadStats,
    /// Every completed operation's value and the PUTs never acknowledged (when
    /// [`LoadConfig::history`]).
    pub history: History,
}

/// Why a generator cannot be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("window must be 1..=65536")]
    Window,
    #[error("value_size 2..=255 and field_size at most value_size - 1")]
    ValueSize,
    #[error("keys, server_of and initial must be non-empty and of one length")]
    KeyArrays,
    #[error("every key must be 1..=key_field bytes")]
    KeyLength,
    #[error("an initial value does not fit the value cell")]
    InitialValue,
    #[error("the stream must be non-empty and name known keys")]
    Stream,
    #[error("timeout must be positive")]
    Timeout,
    #[error("a hotspot shift remaps a fixed stream: not with YCSB-D")]
    ShiftWithLatest,
    #[error("shift times must increase")]
    ShiftOrder,
    #[error("a shift must map every key to a known key")]
    ShiftMap,
    #[error("the generator must start at the key set's size")]
    LatestRecords,
    #[error("servers must cover every key's server")]
    LatestServers,
    #[error("key_field too short for YCSB's keys")]
    LatestKeyField,
}

/// The cell of `value` in `size` bytes (None: absent).
pub fn cell(value: Option<&[u8]>, size: usize) -> Vec<u8> {
    let mut c = vec![0u8; size];
    match value {
        None => c[0] = NIL,
        Some(v) => {
            c[0] = v.len() as u8;
            c[1..1 + v.len()].copy_from_slice(v);
        }
    }
    c
}

/// The value in a cell: `Some(None)` absent, `None` a malformed cell (empty, or a length
/// past its end).
pub fn uncell(c: &[u8]) -> Option<Option<&[u8]>> {
    match c.first() {
        None => None,
        Some(&NIL) => Some(None),
        Some(&n) if (n as usize) < c.len() => Some(Some(&c[1..1 + n as usize])),
        Some(_) => None,
    }
}

impl KvLoad {
    /// `keys[i]` lives on server `server_of[i]` and holds `initial[i]`; `stream` is the
    /// operations in order (by key index), repeated until [`stop`](Self::stop).
    pub fn new(
        cfg: LoadConfig,
        keys: Vec<Vec<u8>>,
        server_of: Vec<u16>,
        initial: Vec<Option<Vec<u8>>>,
        stream: Vec<(KvOp, u32)>,
    ) -> Result<KvLoad, ConfigError> {
        if cfg.window == 0 || cfg.window > 1 << 16 {
            return Err(ConfigError::Window);
        }
        if cfg.value_size < 2 || cfg.value_size > wire::hare::MAX_VALUE || cfg.field_size > cfg.value_size - 1 {
            return Err(ConfigError::ValueSize);
        }
        if keys.is_empty() || keys.len() != server_of.len() || keys.len() != initial.len() {
            return Err(ConfigError::KeyArrays);
        }
        if keys.iter().any(|k| k.is_empty() || k.len() > cfg.key_field as usize) {
            return Err(ConfigError::KeyLength);
        }
        if initial.iter().flatten().any(|v| v.len() > cfg.value_size - 1) {
            return Err(ConfigError::InitialValue);
        }
        if stream.is_empty() || stream.iter().any(|&(_, k)| k as usize >= keys.len()) {
            return Err(ConfigError::Stream);
        }
        if cfg.timeout_ns == 0 {
            return Err(ConfigError::Timeout);
        }
        let n = keys.len();
        let (cfg_value_size, sole_writer) = (cfg.value_size, cfg.sole_writer);
        let slot_bits = (cfg.window as u32).next_power_of_two().trailing_zeros().max(1);
        let free = (0..cfg.window).rev().collect();
        let slots = (0..cfg.window)
            .map(|_| Flight {
                state: State::Free,
                seq: 0,
                op: KvOp::Get,
                key: 0,
                first_ns: 0,
                deadline: 0,
                sends: 0,
                backoffs: 0,
                payload: Vec::new(),
                value: Vec::new(),
            })
            .collect();
        Ok(KvLoad {
            generation: cfg.seq_start,
            cfg,
            keys,
            server_of,
            expected: initial,
            known: vec![sole_writer; n],
            gets_in_flight: vec![0; n],
            put_in_flight: vec![false; n],
            stream,
            next: 0,
            latest: None,
            pending: None,
            shifts: VecDeque::new(),
            remap: None,
            version: 0,
            slots,
            free,
            slot_bits,
            tx: VecDeque::new(),
            stopped: false,
            samples: Vec::new(),
            stats: LoadStats::default(),
            history: History::new(cfg_value_size),
        })
    }

    /// Hotspot shifts: from time `at` (ns, the caller's clock) on, the stream's key `k` is
    /// issued as `remap[k]`. Times must increase; each remap names every key.
    pub fn set_shifts(&mut self, shifts: Vec<(u64, Vec<u32>)>) -> Result<(), ConfigError> {
        let n = self.keys.len();
        if self.latest.is_some() && !shifts.is_empty() {
            return Err(ConfigError::ShiftWithLatest);
        }
        if shifts.windows(2).any(|w| w[0].0 >= w[1].0) {
            return Err(ConfigError::ShiftOrder);
        }
        if shifts.iter().any(|(_, m)| m.len() != n || m.iter().any(|&k| k as usize >= n)) {
            return Err(ConfigError::ShiftMap);
        }
        self.shifts = shifts.into();
        Ok(())
    }

    /// YCSB-D: issue the operations of `gen` (over the records `0..keys`, key index =
    /// record index) instead of the stream; a new record's key is YCSB's name for it
    /// ([`record_key`]), placed on server `crc32(key) % servers` as the clients place keys.
    pub fn set_latest(&mut self, gen: LatestStream, servers: u16) -> Result<(), ConfigError> {
        if gen.records() != self.keys.len() as u64 {
            return Err(ConfigError::LatestRecords);
        }
        if servers == 0 || self.server_of.iter().any(|&s| s >= servers) {
            return Err(ConfigError::LatestServers);
        }
        if (self.cfg.key_field as usize) < record_key(u64::MAX / 2 + 1).len() {
            return Err(ConfigError::LatestKeyField);
        }
        if !self.shifts.is_empty() {
            return Err(ConfigError::ShiftWithLatest);
        }
        self.latest = Some((gen, servers));
        Ok(())
    }

    /// The next operation of the generator (drawn once, kept until issued); an insert's
    /// key joins the key set, absent.
    fn latest_next(&mut self) -> Option<(KvOp, u32)> {
        if self.pending.is_none() {
            let (gen, servers) = self.latest.as_mut()?;
            let (op, r) = gen.next_op();
            if op == KvOp::Put {
                let key = record_key(r);
                self.server_of.push((pisa::hash::HashAlgo::Crc32.compute(&key) % *servers as u32) as u16);
                self.keys.push(key);
                self.expected.push(None);
                self.known.push(self.cfg.sole_writer);
                self.gets_in_flight.push(0);
                self.put_in_flight.push(false);
                self.stats.inserts += 1;
            }
            self.pending = Some((op, r as u32));
        }
        self.pending
    }

    /// Reserve room for `n` samples (and their history rows), so a run does not
    /// reallocate while it is measured.
    pub fn reserve(&mut self, n: usize) {
        self.samples.reserve(n);
        if self.cfg.history {
            self.history.reserve(n);
        }
    }

    /// The PUTs still in flight go to the history's unacknowledged ones (call at the end
    /// of a run: they may or may not have landed).
    pub fn abandon_in_flight(&mut self) {
        for s in 0..self.slots.len() {
            let f = &self.slots[s];
            if f.state != State::Free {
                if f.op == KvOp::Put {
                    self.known[f.key as usize] = false;
                    if self.cfg.history {
                        self.history.unacked(f.key, f.first_ns, &f.value);
                    }
                }
                self.release(s);
            }
        }
        self.tx.clear();
    }

    /// Issue no new operation (those in flight go on until answered or abandoned).
    pub fn stop(&mut self) {
        self.stopped = true;
    }

    /// Requests in flight (sent, queued for a retransmission or backing off).
    pub fn in_flight(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Stopped and nothing in flight.
    pub fn is_idle(&self) -> bool {
        self.stopped && self.in_flight() == 0
    }

    /// What each key holds as far as this generator knows (None in the outer option: not
    /// known, its last PUT was never answered).
    /// Nothing is known when other clients write too.
    pub fn expected(&self) -> Vec<Option<Option<&[u8]>>> {
        self.expected.iter().zip(&self.known).map(|(v, &k)| k.then_some(v.as_deref())).collect()
    }

    /// The next datagram to send: (server index, payload). Call until None.
    pub fn poll_transmit(&mut self, now: u64) -> Option<(u16, &[u8])> {
        while let Some((s, seq)) = self.tx.pop_front() {
            let f = &self.slots[s];
            if f.state == State::Queued && f.seq == seq {
                return Some(self.transmit(s, now));
            }
        }
        if self.stopped || self.free.is_empty() {
            return None;
        }
        while self.shifts.front().is_some_and(|&(at, _)| at <= now) {
            self.remap = self.shifts.pop_front().map(|(_, m)| m);
        }
        let (op, key) = match self.latest_next() {
            Some(next) => next,
            None => {
                let (op, key) = self.stream[self.next];
                (op, self.remap.as_ref().map_or(key, |m| m[key as usize]))
            }
        };
        let k = key as usize;
        let blocked = self.put_in_flight[k] || (op == KvOp::Put && self.gets_in_flight[k] > 0);
        if blocked {
            return None; // in stream order: wait for the key's requests to finish
        }
        if self.latest.is_some() {
            self.pending = None;
        } else {
            self.next = (self.next + 1) % self.stream.len();
        }
        let s = self.free.pop().expect("a free slot");
        self.generation = self.generation.wrapping_add(1);
        let seq = (self.generation << self.slot_bits) | s as u32;
        let value = if op == KvOp::Put {
            self.version += 1;
            let mut v = format!("{:x}.{:x}.{:x}:", key, self.cfg.client, self.version).into_bytes();
            v.resize(self.cfg.field_size.max(v.len()).min(self.cfg.value_size - 1), b'x');
            self.put_in_flight[k] = true;
            v
        } else {
            self.gets_in_flight[k] += 1;
            Vec::new()
        };
        let repr = Repr {
            op: if op == KvOp::Get { Op::Get } else { Op::Put },
            flags: 0,
            seq,
            hit_index: 0,
            aux: 0,
            status: 0,
            key: self.keys[k].clone(),
            key_field: self.cfg.key_field,
            value: if op == KvOp::Put { cell(Some(&value), self.cfg.value_size) } else { Vec::new() },
        };
        let f = &mut self.slots[s];
        f.payload.resize(repr.buffer_len(), 0);
        repr.emit(&mut f.payload).expect("checked at new()");
        f.state = State::Queued;
        f.seq = seq;
        f.op = op;
        f.key = key;
        f.first_ns = now;
        f.sends = 0;
        f.backoffs = 0;
        f.value = value;
        self.stats.issued += 1;
        Some(self.transmit(s, now))
    }

    fn transmit(&mut self, s: usize, now: u64) -> (u16, &[u8]) {
        let f = &mut self.slots[s];
        f.state = State::Waiting;
        f.deadline = now + self.cfg.timeout_ns;
        f.sends += 1;
        self.stats.sent += 1;
        (self.server_of[f.key as usize], &f.payload[..])
    }

    /// The earliest deadline of a request in flight (None: nothing to wait for).
    pub fn poll_timeout(&self) -> Option<u64> {
        self.slots.iter().filter(|f| matches!(f.state, State::Waiting | State::Backoff)).map(|f| f.deadline).min()
    }

    /// Retransmit what timed out, abandon what ran out of retries, resend what backed off.
    pub fn handle_timeout(&mut self, now: u64) {
        for s in 0..self.slots.len() {
            let f = &mut self.slots[s];
            if f.deadline > now {
                continue;
            }
            match f.state {
                // The bound runs from the first sending: a back-off restarting it would let a
                // request answered "retry" for ever live for ever.
                State::Backoff if now - f.first_ns >= self.cfg.timeout_ns.saturating_mul(u64::from(self.cfg.retries) + 1) => {
                    self.stats.gave_up_after_retries += 1;
                    self.abandon(s);
                }
                State::Backoff => {
                    f.state = State::Queued;
                    self.tx.push_back((s, f.seq));
                }
                State::Waiting if f.sends > self.cfg.retries => self.abandon(s),
                State::Waiting => {
                    f.state = State::Queued;
                    self.stats.retransmits += 1;
                    self.tx.push_back((s, f.seq));
                }
                _ => {}
            }
        }
    }

    /// Give a request up: a PUT may or may not have landed.
    fn abandon(&mut self, s: usize) {
        let f = &self.slots[s];
        self.stats.timeouts += 1;
        if f.op == KvOp::Put {
            self.known[f.key as usize] = false;
            if self.cfg.history {
                self.history.unacked(f.key, f.first_ns, &f.value);
            }
        }
        self.release(s);
    }

    fn release(&mut self, s: usize) {
        let f = &mut self.slots[s];
        let k = f.key as usize;
        match f.op {
            KvOp::Get => self.gets_in_flight[k] -= 1,
            KvOp::Put => self.put_in_flight[k] = false,
        }
        f.state = State::Free;
        self.free.push(s);
    }

    /// A datagram received at `now`.
    pub fn handle(&mut self, now: u64, data: &[u8]) {
        let Ok(p) = Packet::new_checked(data) else {
            self.stats.malformed += 1;
            return;
        };
        let seq = p.seq();
        let s = (seq & ((1u32 << self.slot_bits) - 1)) as usize;
        let live = self.slots.get(s).filter(|f| f.seq == seq && matches!(f.state, State::Waiting | State::Queued));
        let Some(f) = live else {
            // A reply of ours that comes too late, or something that is no reply at all.
            if matches!(p.op(), Some(Op::GetReply | Op::PutReply)) {
                self.stats.late += 1;
            } else {
                self.stats.malformed += 1;
            }
            return;
        };
        let want = if f.op == KvOp::Get { Op::GetReply } else { Op::PutReply };
        if p.op() != Some(want) || p.key() != &self.keys[f.key as usize][..] {
            self.stats.malformed += 1;
            return;
        }
        let status = p.status();
        if status & STATUS_RETRY != 0 {
            // The object is moving: ask again, backing off (0.2 ms doubling to 5 ms).
            self.stats.retries += 1;
            let f = &mut self.slots[s];
            f.backoffs += 1;
            f.state = State::Backoff;
            f.deadline = now + (100_000u64 << f.backoffs.min(6)).min(5_000_000);
            return;
        }
        let (op, key, first_ns) = (f.op, f.key as usize, f.first_ns);
        let hit = p.flags() & FLAG_HIT != 0;
        let record = self.cfg.history;
        let check = if status & STATUS_ERROR != 0 {
            self.stats.errors += 1;
            if op == KvOp::Put {
                self.known[key] = false; // not applied, says the agent; do not bet on it
                if record {
                    self.history.unacked(key as u32, first_ns, &self.slots[s].value);
                }
            }
            if record {
                self.history.record(None);
            }
            Check::Unchecked
        } else if op == KvOp::Get {
            self.stats.gets += 1;
            self.stats.hits += hit as u64;
            let got = uncell(p.value());
            if record {
                self.history.record(got);
            }
            if got.is_none() {
                self.stats.mismatches += 1; // a malformed cell: no writer wrote it
                Check::Mismatch
            } else if !self.cfg.sole_writer || !self.known[key] {
                self.stats.unchecked += 1;
                Check::Unchecked
            } else if got == Some(self.expected[key].as_deref()) {
                Check::Ok
            } else {
                self.stats.mismatches += 1;
                Check::Mismatch
            }
        } else {
            self.stats.puts += 1;
            let v = std::mem::take(&mut self.slots[s].value);
            if record {
                self.history.record(Some(Some(&v)));
            }
            self.expected[key] = Some(v);
            self.known[key] = self.cfg.sole_writer;
            Check::Unchecked
        };
        self.stats.completed += 1;
        self.samples.push(Sample { send_ns: first_ns, recv_ns: now, op: op as u8, key: key as u32, hit, status, check });
        self.release(s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(window: usize) -> LoadConfig {
        LoadConfig {
            window,
            key_field: 8,
            value_size: 16,
            field_size: 10,
            timeout_ns: 1000,
            retries: 2,
            client: 1,
            seq_start: 5,
            sole_writer: true,
            history: true,
        }
    }

    type KeySet = (Vec<Vec<u8>>, Vec<u16>, Vec<Option<Vec<u8>>>);

    fn keys(n: usize) -> KeySet {
        let k: Vec<Vec<u8>> = (0..n).map(|i| format!("k{i}").into_bytes()).collect();
        let v = (0..n).map(|i| Some(format!("v{i}").into_bytes())).collect();
        (k, (0..n as u16).map(|i| i % 2).collect(), v)
    }

    fn gen(window: usize, stream: Vec<(KvOp, u32)>) -> KvLoad {
        let (k, s, v) = keys(4);
        KvLoad::new(cfg(window), k, s, v, stream).unwrap()
    }

    /// The server's side: the reply to `req` with `value` (a GET) as a cell.
    fn reply(req: &[u8], value: Option<&[u8]>, flags: u8, status: u8) -> Vec<u8> {
        let mut r = Repr::parse(&Packet::new_checked(req).unwrap()).unwrap();
        r.op = if r.op == Op::Get { Op::GetReply } else { Op::PutReply };
        if r.op == Op::GetReply {
            r.value = cell(value, 16);
        }
        r.flags = flags;
        r.status = status;
        r.to_bytes().unwrap()
    }

    fn drain(g: &mut KvLoad, now: u64) -> Vec<(u16, Vec<u8>)> {
        let mut out = vec![];
        while let Some((s, b)) = g.poll_transmit(now) {
            out.push((s, b.to_vec()));
        }
        out
    }

    #[test]
    fn window_bounds_in_flight_and_replies_free_slots() {
        let mut g = gen(3, vec![(KvOp::Get, 0), (KvOp::Get, 1), (KvOp::Get, 2), (KvOp::Get, 3)]);
        let sent = drain(&mut g, 0);
        assert_eq!(sent.len(), 3);
        assert_eq!(g.in_flight(), 3);
        assert_eq!(sent.iter().map(|(s, _)| *s).collect::<Vec<_>>(), vec![0, 1, 0]);
        // Replies out of order, each checked against the key's value.
        g.handle(10, &reply(&sent[2].1, Some(b"v2"), FLAG_HIT, 0));
        g.handle(11, &reply(&sent[0].1, Some(b"v0"), 0, 0));
        assert_eq!(g.stats.completed, 2);
        assert_eq!(g.stats.hits, 1);
        assert_eq!(g.stats.mismatches, 0);
        assert_eq!(g.samples[0], Sample { send_ns: 0, recv_ns: 10, op: 0, key: 2, hit: true, status: 0, check: Check::Ok });
        let more = drain(&mut g, 20);
        assert_eq!(more.len(), 2); // keys 3 and 0 (the stream wraps)
        assert_eq!(g.in_flight(), 3);
    }

    #[test]
    fn wrong_value_is_a_mismatch() {
        let mut g = gen(2, vec![(KvOp::Get, 1)]);
        let sent = drain(&mut g, 0);
        g.handle(5, &reply(&sent[0].1, Some(b"v0"), FLAG_HIT, 0));
        g.handle(6, &reply(&sent[1].1, None, 0, 0));
        assert_eq!(g.stats.mismatches, 2);
        assert_eq!(g.samples.iter().filter(|s| s.check == Check::Mismatch).count(), 2);
    }

    #[test]
    fn timeout_retransmits_same_seq_then_abandons() {
        let mut g = gen(1, vec![(KvOp::Get, 0)]);
        let first = drain(&mut g, 0);
        assert_eq!(g.poll_timeout(), Some(1000));
        g.handle_timeout(999);
        assert!(drain(&mut g, 999).is_empty());
        g.handle_timeout(1000);
        let again = drain(&mut g, 1000);
        assert_eq!(again, first, "the retransmission is the same request");
        assert_eq!(g.stats.retransmits, 1);
        // A reply to either transmission completes it; the other is late.
        g.handle(1500, &reply(&first[0].1, Some(b"v0"), 0, 0));
        g.handle(1501, &reply(&again[0].1, Some(b"v0"), 0, 0));
        assert_eq!((g.stats.completed, g.stats.late), (1, 1));
        assert_eq!(g.samples[0].send_ns, 0, "latency from the first transmission");
        // The next request goes unanswered: 1 + retries sends, then abandoned.
        let r = drain(&mut g, 2000);
        assert_eq!(r.len(), 1);
        for t in [3000, 4000] {
            g.handle_timeout(t);
            assert_eq!(drain(&mut g, t).len(), 1);
        }
        g.handle_timeout(5000);
        assert_eq!(g.stats.timeouts, 1);
        assert_eq!(g.stats.sent, 5);
        // A reply after it was abandoned is late, not a completion.
        g.handle(5100, &reply(&r[0].1, Some(b"v0"), 0, 0));
        assert_eq!((g.stats.completed, g.stats.late), (1, 2));
    }

    #[test]
    fn malformed_and_foreign_replies_are_counted() {
        let mut g = gen(2, vec![(KvOp::Get, 0), (KvOp::Get, 1)]);
        let sent = drain(&mut g, 0);
        g.handle(1, b"garbage");
        // Right seq, wrong key.
        let mut r = Repr::parse(&Packet::new_checked(&sent[0].1[..]).unwrap()).unwrap();
        r.op = Op::GetReply;
        r.key = b"other".to_vec();
        g.handle(2, &r.to_bytes().unwrap());
        // Right seq and key, but a PUT reply to a GET.
        let mut w = reply(&sent[1].1, Some(b"v1"), 0, 0);
        w[0] = Op::PutReply as u8;
        g.handle(3, &w);
        assert_eq!(g.stats.malformed, 3);
        assert_eq!(g.in_flight(), 2, "still waiting for the real replies");
    }

    #[test]
    fn retry_status_backs_off_and_resends() {
        // a 1 ms timeout: a request answered "retry" lives 3 ms, past the 0.2 ms back-off
        let (k, sv, v) = keys(4);
        let mut g = KvLoad::new(LoadConfig { timeout_ns: 1_000_000, ..cfg(1) }, k, sv, v, vec![(KvOp::Get, 0)]).unwrap();
        let sent = drain(&mut g, 0);
        g.handle(10, &reply(&sent[0].1, None, 0, STATUS_RETRY));
        assert_eq!(g.stats.retries, 1);
        assert!(drain(&mut g, 10).is_empty());
        assert_eq!(g.poll_timeout(), Some(10 + 200_000));
        g.handle_timeout(10 + 200_000);
        let again = drain(&mut g, 200_010);
        assert_eq!(again, sent);
        g.handle(200_020, &reply(&again[0].1, Some(b"v0"), 0, 0));
        assert_eq!((g.stats.completed, g.stats.mismatches), (1, 0));
    }

    #[test]
    fn retry_for_ever_is_abandoned_from_the_first_send() {
        // timeout 1000 ns, 2 retries: a request lives at most 3000 ns, "retry" or not
        let mut g = gen(1, vec![(KvOp::Put, 0), (KvOp::Get, 1)]);
        let mut now = 0;
        let mut out = drain(&mut g, now);
        let put = out[0].1.clone();
        for _ in 0..100 {
            if g.stats.timeouts > 0 {
                break;
            }
            for (_, d) in &out {
                g.handle(now + 1, &reply(d, None, 0, STATUS_RETRY));
            }
            now = g.poll_timeout().expect("the request backs off");
            g.handle_timeout(now);
            out = drain(&mut g, now);
        }
        assert_eq!((g.stats.timeouts, g.stats.gave_up_after_retries), (1, 1), "{:?}", g.stats);
        assert!((3000..3000 + 5_000_000).contains(&now), "given up at {now} ns");
        assert!(g.stats.retries >= 1);
        assert_eq!(g.expected()[0], None, "the PUT may or may not have landed");
        // the slot is free again: the next request goes out
        assert_eq!(out.len(), 1);
        assert_ne!(out[0].1, put);
    }

    #[test]
    fn put_serialises_its_key_and_sets_the_expected_value() {
        let mut g = gen(4, vec![(KvOp::Get, 0), (KvOp::Put, 0), (KvOp::Get, 0), (KvOp::Get, 1)]);
        let sent = drain(&mut g, 0);
        assert_eq!(sent.len(), 1, "the PUT waits for the GET of its key");
        g.handle(1, &reply(&sent[0].1, Some(b"v0"), 0, 0));
        let put = drain(&mut g, 2);
        assert_eq!(put.len(), 1, "the next GET of key 0 waits for the PUT");
        let pr = Repr::parse(&Packet::new_checked(&put[0].1[..]).unwrap()).unwrap();
        assert_eq!(pr.op, Op::Put);
        let written = uncell(&pr.value).unwrap().unwrap().to_vec();
        assert_eq!(uncell(&[5, 1]), None, "a length past the cell's end");
        assert_eq!(written.len(), 10);
        assert!(written.starts_with(b"0.1.1:"));
        g.handle(3, &reply(&put[0].1, None, 0, 0));
        assert_eq!(g.expected()[0], Some(Some(&written[..])));
        let gets = drain(&mut g, 4);
        assert_eq!(gets.len(), 3, "GET k0, GET k1, GET k0; then the PUT of k0 waits");
        // The old value is now wrong; the new one right.
        g.handle(5, &reply(&gets[0].1, Some(b"v0"), 0, 0));
        g.handle(6, &reply(&gets[1].1, Some(b"v1"), 0, 0));
        g.handle(7, &reply(&gets[2].1, Some(&written), 0, 0));
        assert_eq!((g.stats.mismatches, g.stats.completed), (1, 5));
    }

    #[test]
    fn unanswered_put_leaves_the_key_unchecked() {
        let mut g = gen(1, vec![(KvOp::Put, 2), (KvOp::Get, 2)]);
        drain(&mut g, 0);
        for t in [1000, 2000] {
            g.handle_timeout(t);
            assert_eq!(drain(&mut g, t).len(), 1);
        }
        g.handle_timeout(3000);
        assert_eq!(g.stats.timeouts, 1);
        assert_eq!(g.expected()[2], None);
        let get = drain(&mut g, 3000);
        assert_eq!(get.len(), 1, "the GET of the key goes out once the PUT is abandoned");
        g.handle(3002, &reply(&get[0].1, Some(b"anything"), 0, 0));
        assert_eq!((g.stats.mismatches, g.stats.unchecked), (0, 1));
    }

    #[test]
    fn stop_drains_to_idle() {
        let mut g = gen(2, vec![(KvOp::Get, 0)]);
        let sent = drain(&mut g, 0);
        g.stop();
        for (_, b) in &sent {
            g.handle(1, &reply(b, Some(b"v0"), 0, 0));
        }
        assert!(drain(&mut g, 2).is_empty());
        assert!(g.is_idle());
    }

    #[test]
    fn sequence_numbers_stay_unique_across_wraps() {
        let mut c = cfg(3);
        c.seq_start = u32::MAX - 1;
        let (k, s, v) = keys(4);
        let mut g = KvLoad::new(c, k, s, v, vec![(KvOp::Get, 0)]).unwrap();
        let mut seen = std::collections::HashSet::new();
        for t in 0..50u64 {
            for (_, b) in drain(&mut g, t) {
                let seq = Packet::new_checked(&b[..]).unwrap().seq();
                assert!(seen.insert(seq), "seq {seq} reused while in the recent past");
                g.handle(t, &reply(&b, Some(b"v0"), 0, 0));
            }
        }
        assert_eq!(g.stats.completed, 150);
    }

    #[test]
    fn history_records_every_value_in_sample_order() {
        let mut g = gen(4, vec![(KvOp::Get, 0), (KvOp::Put, 1), (KvOp::Get, 2), (KvOp::Get, 3)]);
        let sent = drain(&mut g, 0);
        assert_eq!(sent.len(), 4);
        let put = Repr::parse(&Packet::new_checked(&sent[1].1[..]).unwrap()).unwrap();
        let written = uncell(&put.value).unwrap().unwrap().to_vec();
        g.handle(1, &reply(&sent[2].1, None, 0, 0)); // absent (a mismatch: k2 holds v2)
        g.handle(2, &reply(&sent[1].1, None, 0, 0)); // the PUT's ack
        g.handle(3, &reply(&sent[0].1, Some(b"v0"), FLAG_HIT, 0));
        let mut bad = reply(&sent[3].1, Some(b"v3"), 0, 0);
        let n = bad.len();
        bad[n - 16] = 40; // the cell's length past its end
        g.handle(4, &bad);
        let h = &g.history;
        assert_eq!(h.len(), g.samples.len());
        assert_eq!(h.cells.len(), 4 * 16);
        assert_eq!(g.samples.iter().map(|s| s.key).collect::<Vec<_>>(), vec![2, 1, 0, 3]);
        assert_eq!(h.value(0), Some(None), "a GET of an absent key");
        assert_eq!(h.value(1), Some(Some(&written[..])), "a PUT's written value");
        assert_eq!(h.value(2), Some(Some(&b"v0"[..])));
        assert_eq!(h.value(3), None, "a malformed cell is no value");
        assert_eq!(h.present, vec![ABSENT, PRESENT, PRESENT, NO_VALUE]);
        assert_eq!(&h.cells[16..18], &[10, b'1'], "rows are normalised cells");
        assert_eq!(g.stats.mismatches, 2);
        assert!(h.unacked_key.is_empty());
    }

    #[test]
    fn unacknowledged_puts_are_in_the_history() {
        let mut g = gen(3, vec![(KvOp::Put, 0), (KvOp::Put, 1), (KvOp::Put, 2)]);
        let sent = drain(&mut g, 0);
        let value = |b: &[u8]| uncell(&Repr::parse(&Packet::new_checked(b).unwrap()).unwrap().value).unwrap().unwrap().to_vec();
        // key 1: the agent failed; key 0: never answered (abandoned); key 2: in flight at the end.
        g.handle(5, &reply(&sent[1].1, None, 0, STATUS_ERROR));
        g.stop();
        for t in [1000, 2000, 3000] {
            g.handle_timeout(t);
            for (_, b) in drain(&mut g, t) {
                if Packet::new_checked(&b[..]).unwrap().key() == b"k2" {
                    g.handle(t + 1, &reply(&b, None, 0, STATUS_RETRY)); // backs off
                }
            }
        }
        assert_eq!(g.stats.timeouts, 1);
        assert_eq!(g.in_flight(), 1);
        g.abandon_in_flight();
        assert!(g.is_idle());
        let h = &g.history;
        assert_eq!(h.unacked_key, vec![1, 0, 2]);
        assert_eq!(h.unacked_send_ns, vec![0, 0, 0]);
        for (i, s) in [1usize, 0, 2].into_iter().enumerate() {
            assert_eq!(&h.unacked_cells[i * 16 + 1..i * 16 + 1 + h.unacked_cells[i * 16] as usize], &value(&sent[s].1)[..]);
        }
        assert_eq!(h.present, vec![NO_VALUE], "the failed PUT's sample has no value");
        assert_eq!(g.expected()[..3], [None, None, None]);
    }

    #[test]
    fn other_writers_turn_the_value_check_off_but_not_the_history() {
        let (k, s, v) = keys(4);
        let mut c = cfg(2);
        c.sole_writer = false;
        let mut g = KvLoad::new(c, k, s, v, vec![(KvOp::Get, 0), (KvOp::Get, 1)]).unwrap();
        assert!(g.expected().iter().all(|e| e.is_none()), "nothing is known");
        let sent = drain(&mut g, 0);
        g.handle(1, &reply(&sent[0].1, Some(b"another"), 0, 0));
        let mut bad = reply(&sent[1].1, Some(b"v1"), 0, 0);
        let n = bad.len();
        bad[n - 16] = 16;
        g.handle(2, &bad);
        assert_eq!((g.stats.unchecked, g.stats.mismatches), (1, 1), "only the malformed cell is refused");
        assert_eq!(g.samples[0].check, Check::Unchecked);
        assert_eq!(g.history.value(0), Some(Some(&b"another"[..])));
    }

    #[test]
    fn history_off_records_nothing() {
        let (k, s, v) = keys(4);
        let mut c = cfg(2);
        c.history = false;
        let mut g = KvLoad::new(c, k, s, v, vec![(KvOp::Get, 0), (KvOp::Put, 1)]).unwrap();
        for (_, b) in drain(&mut g, 0) {
            g.handle(1, &reply(&b, Some(b"v0"), 0, 0));
        }
        assert_eq!((g.stats.completed, g.history.len(), g.history.cells.len()), (2, 0, 0));
    }

    #[test]
    fn shifts_remap_keys_from_their_time_on() {
        let mut g = gen(1, vec![(KvOp::Get, 0), (KvOp::Get, 1)]);
        g.set_shifts(vec![(100, vec![3, 2, 1, 0]), (200, vec![1, 1, 1, 1])]).unwrap();
        let mut keys = vec![];
        for t in [0, 50, 100, 150, 250, 260] {
            let sent = drain(&mut g, t);
            let b = &sent[0].1;
            keys.push(Packet::new_checked(&b[..]).unwrap().key().to_vec());
            let v = format!("v{}", std::str::from_utf8(&keys.last().unwrap()[1..]).unwrap());
            g.handle(t, &reply(b, Some(v.as_bytes()), 0, 0));
        }
        let want: Vec<Vec<u8>> = ["k0", "k1", "k3", "k2", "k1", "k1"].iter().map(|k| k.as_bytes().to_vec()).collect();
        assert_eq!(keys, want);
        assert_eq!(g.stats.mismatches, 0, "each GET is checked against the remapped key");
        assert_eq!(g.samples.iter().map(|s| s.key).collect::<Vec<_>>(), vec![0, 1, 3, 2, 1, 1]);
        assert_eq!(g.set_shifts(vec![(5, vec![0, 1, 2, 4])]), Err(ConfigError::ShiftMap));
        assert_eq!(g.set_shifts(vec![(5, vec![0; 4]), (5, vec![0; 4])]), Err(ConfigError::ShiftOrder));
    }

    #[test]
    fn ycsb_d_inserts_new_absent_keys_and_reads_them_after() {
        use crate::hare::ycsb::{record_key, LatestStream};
        let mut c = cfg(1);
        c.key_field = 32;
        c.value_size = 32;
        let keys: Vec<Vec<u8>> = (0..4).map(record_key).collect();
        let server_of = keys.iter().map(|k| (pisa::HashAlgo::Crc32.compute(k) % 2) as u16).collect();
        let mut g = KvLoad::new(c, keys, server_of, vec![Some(b"v".to_vec()); 4], vec![(KvOp::Get, 0)]).unwrap();
        assert_eq!(g.set_latest(LatestStream::new(5, 0.95, 1), 2), Err(ConfigError::LatestRecords), "the generator starts at the key set");
        // Half inserts, so a short run has several.
        g.set_latest(LatestStream::new(4, 0.5, 7), 2).unwrap();
        assert_eq!(g.set_shifts(vec![(1, vec![0, 1, 2, 3])]), Err(ConfigError::ShiftWithLatest));
        let mut inserted: Vec<u32> = vec![];
        let mut written: Vec<Option<Vec<u8>>> = vec![Some(b"v".to_vec()); 4];
        for t in 0..200u64 {
            let sent = drain(&mut g, t);
            assert_eq!(sent.len(), 1);
            let (srv, b) = &sent[0];
            let r = Repr::parse(&Packet::new_checked(&b[..]).unwrap()).unwrap();
            let idx = (0..).find(|&i| record_key(i) == r.key).unwrap() as usize;
            assert_eq!(*srv as u32, pisa::HashAlgo::Crc32.compute(&r.key) % 2, "placed as the clients place keys");
            if r.op == Op::Put && idx >= written.len() {
                assert_eq!(idx, written.len(), "an insert is the next record");
                inserted.push(idx as u32);
                written.push(None);
            }
            // The server's answer: a GET gets what the key holds (absent until inserted).
            let answer = written[idx].clone();
            if r.op == Op::Put {
                written[idx] = Some(uncell(&r.value).unwrap().unwrap().to_vec());
            }
            g.handle(t, &reply(b, answer.as_deref(), 0, 0));
        }
        assert!(inserted.len() > 50, "{}", inserted.len());
        assert_eq!(g.stats.inserts, inserted.len() as u64);
        assert_eq!(g.expected().len(), 4 + inserted.len());
        assert_eq!((g.stats.mismatches, g.stats.completed), (0, 200), "every GET of a new key sees its insert");
        assert!(g.samples.iter().any(|s| s.op == 0 && s.key >= 4), "new keys are read");
    }

    #[test]
    fn bad_configs_are_refused() {
        let (k, s, v) = keys(2);
        assert_eq!(KvLoad::new(cfg(0), k.clone(), s.clone(), v.clone(), vec![(KvOp::Get, 0)]).err(), Some(ConfigError::Window));
        assert_eq!(KvLoad::new(cfg(1), k.clone(), s.clone(), v.clone(), vec![(KvOp::Get, 2)]).err(), Some(ConfigError::Stream));
        assert_eq!(
            KvLoad::new(cfg(1), vec![b"toolongkey".to_vec(), b"a".to_vec()], s, v, vec![(KvOp::Get, 0)]).err(),
            Some(ConfigError::KeyLength)
        );
    }
}
