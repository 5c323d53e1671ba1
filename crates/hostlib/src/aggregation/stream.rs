//! [`Packer`]: a tree's pairs cut into data packets one at a time, as the sender's window
//! needs them (`Protocol::packetize` is the same packer run to the end).
//!
//! DAIET places fixed pairs by switch slice, which needs the pairs of a whole batch before
//! the first of its packets: the packer gathers up to [`DAIET_BATCH`] fixed pairs, then
//! drains them into packets. A tree of at most that many fixed pairs is packed exactly as
//! one batch of all its pairs; a larger one in consecutive batches (every packet but the
//! tree's last is still full, as the batch is a multiple of `MAX_PAIRS`).

use std::collections::VecDeque;

use wire::daiet::{self as dw, flags};

use super::{switchagg, Header, Protocol, VARLEN_BUDGET};

/// Fixed pairs per DAIET placement batch (about 1 MB held per tree).
pub const DAIET_BATCH: usize = 4096 * dw::MAX_PAIRS;

/// A fixed DAIET pair waiting for its packet (the key inline: no allocation per pair).
#[derive(Clone, Copy)]
struct Fixed {
    len: u8,
    key: [u8; dw::KEY_LEN],
    value: u32,
}

struct Daiet {
    /// One queue per switch slice; `heads[s]` pairs of queue `s` are already packed.
    queues: [Vec<Fixed>; dw::SLICES],
    heads: [usize; dw::SLICES],
    queued: usize,
    /// The open variable-length packet's pairs and their count.
    var: Vec<u8>,
    nvar: usize,
    /// A full batch is being drained: no input until it is.
    draining: bool,
}

struct SwitchAgg {
    cur: Vec<u8>,
    n: u16,
}

enum State {
    Daiet(Box<Daiet>),
    SwitchAgg(SwitchAgg),
}

/// An incremental packetizer of one tree's stream (data packets only, without sequence
/// numbers: the caller adds END and stamps).
pub struct Packer {
    hdr: Header,
    state: State,
    /// Packets complete and not taken yet.
    ready: VecDeque<Vec<u8>>,
    finished: bool,
}

/// The switch's payload analyzer takes at most 256 SwitchAgg pairs per packet.
const SA_MAX_PAIRS: u16 = 200;

impl Packer {
    pub fn new(proto: Protocol, hdr: Header) -> Packer {
        let state = match proto {
            Protocol::Daiet => State::Daiet(Box::new(Daiet {
                queues: Default::default(),
                heads: [0; dw::SLICES],
                queued: 0,
                var: Vec::new(),
                nvar: 0,
                draining: false,
            })),
            Protocol::SwitchAgg => State::SwitchAgg(SwitchAgg { cur: switchagg::data_header(&hdr), n: 0 }),
        };
        Packer { hdr, state, ready: VecDeque::new(), finished: false }
    }

    /// The stream's header (the END packet's too).
    pub fn header(&self) -> Header {
        self.hdr
    }

    /// Whether `push` may be called (not finished, no batch being drained).
    pub fn wants_input(&self) -> bool {
        !self.finished
            && match &self.state {
                State::Daiet(d) => !d.draining,
                State::SwitchAgg(_) => true,
            }
    }

    /// The next pair (only while `wants_input`).
    pub fn push(&mut self, k: &[u8], v: u32) {
        debug_assert!(self.wants_input());
        let hdr = self.hdr;
        match &mut self.state {
            State::Daiet(d) => {
                if dw::key_is_fixed(k) {
                    let mut key = [0u8; dw::KEY_LEN];
                    key[..k.len()].copy_from_slice(k);
                    d.queues[dw::slice_of(k)].push(Fixed { len: k.len() as u8, key, value: v });
                    d.queued += 1;
                    d.draining = d.queued == DAIET_BATCH;
                } else {
                    // Keys longer than DAIET_MAX_KEY_LEN are refused before packing (never
                    // truncated), so k fits the pair header's 16-bit length.
                    debug_assert!(k.len() <= u16::MAX as usize, "a DAIET key of {} bytes", k.len());
                    if d.nvar == u8::MAX as usize
                        || (d.nvar > 0 && dw::HEADER_LEN + d.var.len() + dw::VARPAIR_HEADER + k.len() > VARLEN_BUDGET)
                    {
                        self.ready.push_back(d.close_var(&hdr));
                    }
                    dw::emit_var_pair(&mut d.var, k, v);
                    d.nvar += 1;
                }
            }
            State::SwitchAgg(s) => {
                if let Some(p) = s.push(&hdr, k, v) {
                    self.ready.push_back(p);
                }
            }
        }
    }

    /// No more pairs.
    pub fn finish(&mut self) {
        if self.finished {
            return;
        }
        self.finished = true;
        let hdr = self.hdr;
        match &mut self.state {
            State::Daiet(d) => {
                if d.nvar > 0 {
                    self.ready.push_back(d.close_var(&hdr));
                }
                d.draining = d.queued > 0;
            }
            State::SwitchAgg(s) => {
                if s.n > 0 {
                    self.ready.push_back(s.close(&hdr));
                }
            }
        }
    }

    /// The next complete packet, if any (after `finish`, `None` means the stream's data
    /// packets are over).
    pub fn pop(&mut self) -> Option<Vec<u8>> {
        if let Some(p) = self.ready.pop_front() {
            return Some(p);
        }
        match &mut self.state {
            State::Daiet(d) if d.draining => Some(d.fixed_packet(&self.hdr)),
            _ => None,
        }
    }

    /// Finished and every packet taken.
    pub fn is_exhausted(&self) -> bool {
        self.finished
            && self.ready.is_empty()
            && match &self.state {
                State::Daiet(d) => !d.draining,
                State::SwitchAgg(_) => true,
            }
    }
}

impl Daiet {
    fn close_var(&mut self, hdr: &Header) -> Vec<u8> {
        let mut p = dw::Repr { flags: hdr.flags | flags::VARLEN, num_pairs: self.nvar as u8, ..hdr.repr() }.to_vec();
        p.extend_from_slice(&self.var);
        self.var.clear();
        self.nvar = 0;
        p
    }

    /// One packet of the batch being drained. Each position p takes from queue
    /// p % SLICES when it can, so a key mostly meets itself in the same slice of the
    /// switch's table; packets are always full (no holes) whatever the key skew.
    fn fixed_packet(&mut self, hdr: &Header) -> Vec<u8> {
        let mut p = dw::Repr { num_pairs: 0, ..hdr.repr() }.to_vec();
        p.reserve(dw::MAX_PAIRS * dw::PAIR_LEN);
        let mut used = 0;
        for pos in 0..dw::MAX_PAIRS {
            // The position's own slice if it has a pair waiting; otherwise the fullest queue
            // (a skewed key spills into other slices rather than leaving holes: it may then
            // be held in up to SLICES cells, each flushed to the reducer, which merges them).
            let home = pos % dw::SLICES;
            let left = |s: usize| self.queues[s].len() - self.heads[s];
            let s = if left(home) > 0 {
                home
            } else {
                match (0..dw::SLICES).filter(|&s| left(s) > 0).max_by_key(|&s| left(s)) {
                    Some(s) => s,
                    None => break,
                }
            };
            let f = self.queues[s][self.heads[s]];
            self.heads[s] += 1;
            dw::emit_fixed_pair(&mut p, &f.key[..f.len as usize], f.value);
            used = pos + 1;
        }
        dw::Packet::new_unchecked(&mut p[..]).set_num_pairs(used as u8);
        self.queued -= used;
        if self.queued == 0 {
            for q in &mut self.queues {
                q.clear();
            }
            self.heads = [0; dw::SLICES];
            self.draining = false;
        }
        p
    }
}

impl SwitchAgg {
    /// Add a pair; the packet it closed, if it did not fit the open one.
    fn push(&mut self, hdr: &Header, k: &[u8], v: u32) -> Option<Vec<u8>> {
        let k = &k[..k.len().min(switchagg::MAX_KEY_LEN)];
        let need = switchagg::wire_len(k);
        let np = switchagg::piece_count(k);
        let closed = (self.n > 0 && (self.cur.len() + need > VARLEN_BUDGET || self.n + np > SA_MAX_PAIRS)).then(|| self.close(hdr));
        switchagg::emit_key(&mut self.cur, k, v, &mut self.n);
        closed
    }

    fn close(&mut self, hdr: &Header) -> Vec<u8> {
        switchagg::set_num_pairs(&mut self.cur, self.n);
        self.n = 0;
        std::mem::replace(&mut self.cur, switchagg::data_header(hdr))
    }
}
