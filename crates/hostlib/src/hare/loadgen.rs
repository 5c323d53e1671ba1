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
//! Consistency the check relies on: this generator is the only writer of its keys. A PUT
//! is sent only when no other request of its key is in flight, and no request of a key is
//! sent while its PUT is in flight, so each GET has exactly one right answer: the value of
//! the key's last acknowledged PUT (or its initial value). A PUT that is never answered
//! leaves its key unknown (it may or may not have landed) and the key's GETs unchecked
//! until its next acknowledged PUT.

use std::collections::VecDeque;

use wire::hare::{Op, Packet, Repr, FLAG_HIT};

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
}

/// Whether a completed GET's value was right.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Check {
    /// The value the key holds.
    Ok = 1,
    /// Another value (or a malformed cell): the run is wrong.
    Mismatch = 0,
    /// Not checked: a PUT, a failed operation, or a key whose last PUT was never answered.
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
    /// Requests abandoned after all retransmissions.
    pub timeouts: u64,
    /// Answers with the error status (the store failed).
    pub errors: u64,
    /// Datagrams that are not a reply to a request of ours (not a Hare message, wrong op
    /// or key for the sequence number they carry).
    pub malformed: u64,
    /// Well-formed replies to no request in flight (duplicates, or to a request already
    /// answered or abandoned).
    pub late: u64,
    /// GET replies whose value is not the key's.
    pub mismatches: u64,
    /// GET replies not checked (the key's last PUT was never answered).
    pub unchecked: u64,
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
}

/// Why a generator cannot be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

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
        let bad = |s: &str| Err(ConfigError(s.to_string()));
        if cfg.window == 0 || cfg.window > 1 << 16 {
            return bad("window must be 1..=65536");
        }
        if cfg.value_size < 2 || cfg.value_size > wire::hare::MAX_VALUE || cfg.field_size > cfg.value_size - 1 {
            return bad("value_size 2..=255 and field_size at most value_size - 1");
        }
        if keys.is_empty() || keys.len() != server_of.len() || keys.len() != initial.len() {
            return bad("keys, server_of and initial must be non-empty and of one length");
        }
        if keys.iter().any(|k| k.is_empty() || k.len() > cfg.key_field as usize) {
            return bad("every key must be 1..=key_field bytes");
        }
        if initial.iter().flatten().any(|v| v.len() > cfg.value_size - 1) {
            return bad("an initial value does not fit the value cell");
        }
        if stream.is_empty() || stream.iter().any(|&(_, k)| k as usize >= keys.len()) {
            return bad("the stream must be non-empty and name known keys");
        }
        if cfg.timeout_ns == 0 {
            return bad("timeout must be positive");
        }
        let n = keys.len();
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
            known: vec![true; n],
            gets_in_flight: vec![0; n],
            put_in_flight: vec![false; n],
            stream,
            next: 0,
            version: 0,
            slots,
            free,
            slot_bits,
            tx: VecDeque::new(),
            stopped: false,
            samples: Vec::new(),
            stats: LoadStats::default(),
        })
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
        let (op, key) = self.stream[self.next];
        let k = key as usize;
        let blocked = self.put_in_flight[k] || (op == KvOp::Put && self.gets_in_flight[k] > 0);
        if blocked {
            return None; // in stream order: wait for the key's requests to finish
        }
        self.next = (self.next + 1) % self.stream.len();
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
                State::Backoff => {
                    f.state = State::Queued;
                    self.tx.push_back((s, f.seq));
                }
                State::Waiting if f.sends > self.cfg.retries => {
                    self.stats.timeouts += 1;
                    if f.op == KvOp::Put {
                        self.known[f.key as usize] = false; // it may or may not have landed
                    }
                    self.release(s);
                }
                State::Waiting => {
                    f.state = State::Queued;
                    self.stats.retransmits += 1;
                    self.tx.push_back((s, f.seq));
                }
                _ => {}
            }
        }
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
        let check = if status & STATUS_ERROR != 0 {
            self.stats.errors += 1;
            if op == KvOp::Put {
                self.known[key] = false; // not applied, says the agent; do not bet on it
            }
            Check::Unchecked
        } else if op == KvOp::Get {
            self.stats.gets += 1;
            self.stats.hits += hit as u64;
            if !self.known[key] {
                self.stats.unchecked += 1;
                Check::Unchecked
            } else if uncell(p.value()) == Some(self.expected[key].as_deref()) {
                Check::Ok
            } else {
                self.stats.mismatches += 1;
                Check::Mismatch
            }
        } else {
            self.stats.puts += 1;
            self.expected[key] = Some(std::mem::take(&mut self.slots[s].value));
            self.known[key] = true;
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
        LoadConfig { window, key_field: 8, value_size: 16, field_size: 10, timeout_ns: 1000, retries: 2, client: 1, seq_start: 5 }
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
        let mut g = gen(1, vec![(KvOp::Get, 0)]);
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
    fn bad_configs_are_refused() {
        let (k, s, v) = keys(2);
        assert!(KvLoad::new(cfg(0), k.clone(), s.clone(), v.clone(), vec![(KvOp::Get, 0)]).is_err());
        assert!(KvLoad::new(cfg(1), k.clone(), s.clone(), v.clone(), vec![(KvOp::Get, 2)]).is_err());
        assert!(KvLoad::new(cfg(1), vec![b"toolongkey".to_vec(), b"a".to_vec()], s, v, vec![(KvOp::Get, 0)]).is_err());
    }
}
