//! Key-value aggregation, host side (sans-IO): the mapper's [`Mapper`] sender and the
//! reducer's [`Reducer`] receiver, for in-network aggregation (DAIET; the packet encoding
//! sits behind [`Protocol`] so SwitchAgg can be added as a second variant).
//!
//! Exactly once, the fallback, completion and variable-length keys: docs/wordcount.md,
//! "Exactly once, host side".

pub mod mapper;
pub mod reducer;
pub mod source;
pub mod stream;
pub mod switchagg;

pub use mapper::{Mapper, MapperConfig, MapperStats};
pub use reducer::{Reducer, ReducerConfig, ReducerStats};
pub use source::{MemPairs, PairSource};
pub use stream::Packer;

use wire::daiet::{self as dw, flags, Op};

/// Why a mapper refuses its input or stops: everything is checked before the first packet
/// except a source that fails later ([`Mapper::error`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("{values} values need {} offsets and tree indexes (got {offsets} and {tree_indexes})", values + 1)]
    Shape { values: usize, offsets: usize, tree_indexes: usize },
    #[error("key offsets must be non-decreasing and within the keys")]
    Offsets,
    #[error("tree index {index} out of range ({trees} trees)")]
    TreeIndex { index: u16, trees: usize },
    #[error("the source has {source_trees} trees, {tree_ids} tree ids given")]
    TreeIds { source_trees: usize, tree_ids: usize },
    #[error("daiet: a key of {len} bytes is longer than {max} (one frame); never truncated")]
    DaietKey { len: usize, max: usize },
    #[error("switchagg: a key of {len} bytes is longer than {max}")]
    SwitchAggKey { len: usize, max: usize },
    #[error("switchagg: mapper id {id} must be below {max} (the switch's children per tree)")]
    SwitchAggMapper { id: u16, max: usize },
    /// A [`PairSource`] could not be read (I/O, a malformed file), in its own words.
    #[error("{0}")]
    Source(String),
}

/// The sender field of the reducer's own control messages (DONE, RESEND, NOTED; an ACK's
/// sender is the acknowledged mapper's).
pub const REDUCER_SENDER: u16 = u16::MAX;

/// How a mapper sends its pairs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Aggregate in the network.
    Switch,
    /// Plain UDP to the reducers (BYPASS), same reliability: the baseline.
    Udp,
}

impl Mode {
    pub fn from_name(s: &str) -> Option<Mode> {
        match s {
            "switch" => Some(Mode::Switch),
            "udp" => Some(Mode::Udp),
            _ => None,
        }
    }
}

/// The in-network protocol whose packets carry the pairs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Daiet,
    /// SwitchAgg's wire format (see [`switchagg`]).
    SwitchAgg,
}

impl Protocol {
    pub fn from_name(s: &str) -> Option<Protocol> {
        match s {
            "daiet" => Some(Protocol::Daiet),
            "switchagg" => Some(Protocol::SwitchAgg),
            _ => None,
        }
    }

    /// The longest key this protocol carries whole (a mapper refuses longer ones rather than
    /// truncating them; an application sends those another way, e.g. WordCount's TCP side
    /// channel).
    pub fn max_key_len(self) -> usize {
        match self {
            Protocol::Daiet => DAIET_MAX_KEY_LEN,
            Protocol::SwitchAgg => switchagg::MAX_KEY_LEN,
        }
    }

    /// Cut a tree's pairs into the data packets of one stream (without sequence numbers,
    /// which [`Protocol::stamp`] writes). `pairs` yields `(key, value)`.
    /// The mapper builds the same packets one at a time with a [`Packer`].
    pub fn packetize<'a>(self, hdr: Header, pairs: impl Iterator<Item = (&'a [u8], u32)>) -> Vec<Vec<u8>> {
        let mut packer = Packer::new(self, hdr);
        let mut out = Vec::new();
        for (k, v) in pairs {
            while !packer.wants_input() {
                out.extend(packer.pop());
            }
            packer.push(k, v);
        }
        packer.finish();
        out.extend(std::iter::from_fn(|| packer.pop()));
        out
    }

    /// Refuse a key this protocol cannot carry whole (longer than [`Protocol::max_key_len`]).
    pub fn check_key_len(self, len: usize) -> Result<(), Error> {
        if len <= self.max_key_len() {
            return Ok(());
        }
        Err(match self {
            Protocol::Daiet => Error::DaietKey { len, max: DAIET_MAX_KEY_LEN },
            Protocol::SwitchAgg => Error::SwitchAggKey { len, max: switchagg::MAX_KEY_LEN },
        })
    }

    /// The END packet of a stream.
    pub fn end(self, hdr: Header) -> Vec<u8> {
        match self {
            Protocol::Daiet => dw::Repr { flags: hdr.flags | flags::END, ..hdr.repr() }.to_vec(),
            Protocol::SwitchAgg => switchagg::end(hdr),
        }
    }

    /// A control packet (ACK, RESEND, QUERY, DONE); an ACK carries the acknowledged
    /// number in `seq`.
    pub fn control(self, hdr: Header, seq: u32, info: u8) -> Vec<u8> {
        match self {
            Protocol::Daiet => dw::Repr { seq, info, ..hdr.repr() }.to_vec(),
            Protocol::SwitchAgg => switchagg::control(hdr, seq, info),
        }
    }

    /// Write sequence number and epoch into a packet built by `packetize`/`end`.
    pub fn stamp(self, pkt: &mut [u8], seq: u32) {
        match self {
            Protocol::Daiet => dw::Packet::new_unchecked(pkt).set_seq(seq),
            Protocol::SwitchAgg => switchagg::stamp(pkt, seq),
        }
    }

    /// Parse a received payload.
    pub fn parse(self, payload: &[u8]) -> Option<Parsed<'_>> {
        match self {
            Protocol::Daiet => {
                let p = dw::Packet::new_checked(payload).ok()?;
                let r = dw::Repr::parse(&p).ok()?;
                Some(Parsed { repr: r, view: View::Daiet(p) })
            }
            Protocol::SwitchAgg => {
                let (repr, pairs) = switchagg::parse(payload)?;
                Some(Parsed { repr, view: View::SwitchAgg(pairs) })
            }
        }
    }
}

/// A received packet: its header and a view for its pairs.
pub struct Parsed<'a> {
    pub repr: dw::Repr,
    pub view: View<'a>,
}

/// A received packet's pairs, in its protocol's format.
pub enum View<'a> {
    Daiet(dw::Packet<&'a [u8]>),
    SwitchAgg(switchagg::Pairs),
}

impl View<'_> {
    /// `(key, value)` pairs.
    pub fn pairs(&self) -> impl Iterator<Item = (&[u8], u32)> + '_ {
        let (a, b) = match self {
            View::Daiet(p) => (Some(p.pairs()), None),
            View::SwitchAgg(p) => (None, Some(p.iter())),
        };
        a.into_iter().flatten().chain(b.into_iter().flatten())
    }
}

/// Header fields common to a stream's packets.
#[derive(Debug, Clone, Copy)]
pub struct Header {
    pub tree_id: u16,
    pub flags: u8,
    pub op: Op,
    pub sender: u16,
    pub epoch: u16,
}

impl Header {
    pub(crate) fn repr(&self) -> dw::Repr {
        dw::Repr {
            tree_id: self.tree_id,
            flags: self.flags,
            op: self.op as u8,
            sender: self.sender,
            epoch: self.epoch,
            ..Default::default()
        }
    }
}

/// Payload budget of a variable-length packet (fits a 1500-byte MTU with headers).
pub const VARLEN_BUDGET: usize = 1400;

/// Longest DAIET key: its VARLEN packet (header, pair header, key) is one frame of
/// [`VARLEN_BUDGET`]. A switch does not reassemble IP fragments: a longer datagram would
/// reach the switch's DAIET program cut into a first fragment it cannot take as a packet
/// and fragments without a header, so the in-network stream loses it (found with a 60 kB
/// word, whose job then fell back to the hosts). Longer keys are refused, never truncated.
pub const DAIET_MAX_KEY_LEN: usize = VARLEN_BUDGET - dw::HEADER_LEN - dw::VARPAIR_HEADER;

/// Add a pair into an aggregate map.
#[inline]
pub(crate) fn merge(map: &mut std::collections::HashMap<Vec<u8>, u64>, op: Op, k: &[u8], v: u64) {
    if let Some(x) = map.get_mut(k) {
        *x = op.apply64(*x, v);
    } else {
        map.insert(k.to_vec(), v);
    }
}

#[cfg(test)]
mod tests;
