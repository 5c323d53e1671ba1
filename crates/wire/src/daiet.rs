//! DAIET aggregation packets (UDP destination port [`UDP_PORT`]), with the reliability
//! fields shared with SwitchAgg.
//!
//! Layout of the UDP payload (all integers big-endian):
//!
//! ```text
//!  0  tree_id    u16   aggregation tree (one per reducer)
//!  2  flags      u8    END 0x01 · ACK 0x02 · BYPASS 0x04 · VARLEN 0x08 · FROM_SWITCH 0x10
//!                      · RESEND 0x20 · QUERY 0x40 · DONE 0x80
//!  3  op         u8    0 SUM · 1 MIN · 2 MAX
//!  4  sender     u16   mapper id, or the switch's id on packets a switch sends on
//!  6  epoch      u16   0: the in-network stream; n > 0: the n-th host-side (fallback) stream
//!  8  seq        u32   per (tree, sender, epoch) sequence number; END carries the last one;
//!                      ACK: the sequence number acknowledged (cumulative)
//! 12  num_pairs  u8    pairs that follow
//! 13  info       u8    QUERY: 1 finished (END acknowledged) · 2 stalled (no progress)
//! 14  pairs
//! ```
//!
//! 14 header bytes keep Ethernet, IPv4, UDP, this header and ten fixed pairs within the
//! 256 bytes a Tofino parser reaches.
//!
//! Fixed and variable-length pairs, and where a sender places a key: docs/wordcount.md,
//! "DAIET's pairs and slices".

use crate::error::{Error, Result};

/// UDP destination port the switch classifies as DAIET.
pub const UDP_PORT: u16 = 7070;
/// Header length in bytes.
pub const HEADER_LEN: usize = 14;
/// Key bytes of a fixed-size pair.
pub const KEY_LEN: usize = 16;
/// Bytes of one fixed-size pair (key and 32-bit value).
pub const PAIR_LEN: usize = KEY_LEN + 4;
/// Most fixed-size pairs in one packet (what a Tofino parser reaches, as in the paper).
pub const MAX_PAIRS: usize = 10;
/// Header bytes of one variable-length pair (key length and value).
pub const VARPAIR_HEADER: usize = 6;

/// Flag bits.
pub mod flags {
    /// The sender's last packet of the tree (children counter at the switch).
    pub const END: u8 = 0x01;
    /// An acknowledgement (no pairs).
    pub const ACK: u8 = 0x02;
    /// The switch must forward the packet untouched (plain UDP to the reducer).
    pub const BYPASS: u8 = 0x04;
    /// Pairs are variable-length.
    pub const VARLEN: u8 = 0x08;
    /// Sent on by a switch (its aggregated or spilled pairs, or its END).
    pub const FROM_SWITCH: u8 = 0x10;
    /// Reducer to mapper: resend the tree's pairs in BYPASS under the packet's epoch.
    pub const RESEND: u8 = 0x20;
    /// Mapper to reducer: status report (see `info`).
    pub const QUERY: u8 = 0x40;
    /// Reducer to mapper: the tree is complete.
    pub const DONE: u8 = 0x80;
}

/// QUERY `info` values.
pub mod info {
    /// The mapper's END was acknowledged.
    pub const FINISHED: u8 = 1;
    /// The mapper makes no progress through the switch.
    pub const STALLED: u8 = 2;
    /// Reducer to mapper: your FINISHED is noted; stop reporting until DONE (or RESEND).
    pub const NOTED: u8 = 3;
    /// Mapper to reducer: DONE received (one BYE per DONE; the reducer stops resending DONE).
    pub const BYE: u8 = 4;
    /// Reducer to mapper: every DONE sent to you was answered, nothing more comes from this
    /// reducer: close the socket (a DONE reaching a closed one draws an ICMP error).
    pub const GONE: u8 = 5;
}

/// Aggregation operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// Sum (wrapping at 2^32 in the switch's 32-bit cells).
    Sum = 0,
    /// Minimum.
    Min = 1,
    /// Maximum.
    Max = 2,
}

impl Op {
    /// From the wire value.
    pub fn from_u8(v: u8) -> Option<Op> {
        match v {
            0 => Some(Op::Sum),
            1 => Some(Op::Min),
            2 => Some(Op::Max),
            _ => None,
        }
    }
    /// From its name: `sum`, `min`, `max`.
    pub fn from_name(s: &str) -> Option<Op> {
        match s {
            "sum" => Some(Op::Sum),
            "min" => Some(Op::Min),
            "max" => Some(Op::Max),
            _ => None,
        }
    }
    /// Combine two 64-bit values.
    #[inline]
    pub fn apply64(self, a: u64, b: u64) -> u64 {
        match self {
            Op::Sum => a.wrapping_add(b),
            Op::Min => a.min(b),
            Op::Max => a.max(b),
        }
    }
    /// Combine two 32-bit values (as a switch cell does).
    #[inline]
    pub fn apply32(self, a: u32, b: u32) -> u32 {
        match self {
            Op::Sum => a.wrapping_add(b),
            Op::Min => a.min(b),
            Op::Max => a.max(b),
        }
    }
}

/// Pairs the switch aggregates per pass: one register slice each.
pub const SLICES: usize = 4;

const fn crc32_table() -> [u32; 256] {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { 0xEDB8_8320 ^ (c >> 1) } else { c >> 1 };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
}
static CRC32: [u32; 256] = crc32_table();

/// CRC-32 (ISO-HDLC, as P4's `crc32` and the switch's `key_hash` units).
pub fn crc32(data: &[u8]) -> u32 {
    !data.iter().fold(!0u32, |c, &b| CRC32[((c ^ b as u32) & 0xFF) as usize] ^ (c >> 8))
}

/// The slice of a fixed key: the top bits of the CRC-32 of the zero-padded key.
pub fn slice_of(key: &[u8]) -> usize {
    let mut k = [0u8; KEY_LEN];
    let n = key.len().min(KEY_LEN);
    k[..n].copy_from_slice(&key[..n]);
    (crc32(&k) >> 30) as usize % SLICES
}

/// Whether a key can travel as a fixed-size pair (1..=16 bytes, no zero byte).
#[inline]
pub fn key_is_fixed(key: &[u8]) -> bool {
    !key.is_empty() && key.len() <= KEY_LEN && !key.contains(&0)
}

/// Byte offsets of the header's fields, from the start of the header: the one layout
/// the host code (views and reprs) and the switch programs share.
#[allow(missing_docs)]
pub mod field {
    pub const TREE: usize = 0;
    pub const FLAGS: usize = 2;
    pub const OP: usize = 3;
    pub const SENDER: usize = 4;
    pub const EPOCH: usize = 6;
    pub const SEQ: usize = 8;
    pub const NUM_PAIRS: usize = 12;
    pub const INFO: usize = 13;
}

/// A view of a DAIET packet (the UDP payload).
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

fn get_u16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}
fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wrap without checking (getters panic on a buffer shorter than the header).
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wrap after [`check_len`](Self::check_len).
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let p = Packet { buffer };
        p.check_len()?;
        Ok(p)
    }

    /// `Truncated` if the buffer is shorter than the header or than its pairs need;
    /// `Malformed` for too many fixed pairs, a bad op, or ACK/control packets with pairs.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if Op::from_u8(b[field::OP]).is_none() {
            return Err(Error::Malformed);
        }
        let n = self.num_pairs() as usize;
        let f = self.flags();
        if n > 0 && f & (flags::ACK | flags::RESEND | flags::QUERY | flags::DONE) != 0 {
            return Err(Error::Malformed);
        }
        if f & flags::VARLEN == 0 {
            if n > MAX_PAIRS {
                return Err(Error::Malformed);
            }
            if b.len() < HEADER_LEN + n * PAIR_LEN {
                return Err(Error::Truncated);
            }
        } else {
            let mut at = HEADER_LEN;
            for _ in 0..n {
                if b.len() < at + VARPAIR_HEADER {
                    return Err(Error::Truncated);
                }
                let kl = get_u16(b, at) as usize;
                at += VARPAIR_HEADER + kl;
                if b.len() < at {
                    return Err(Error::Truncated);
                }
            }
        }
        Ok(())
    }

    /// The buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// Tree id.
    pub fn tree_id(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::TREE)
    }
    /// Flag bits (see [`flags`]).
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }
    /// Operation byte.
    pub fn op(&self) -> u8 {
        self.buffer.as_ref()[field::OP]
    }
    /// Sender id.
    pub fn sender(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::SENDER)
    }
    /// Epoch.
    pub fn epoch(&self) -> u16 {
        get_u16(self.buffer.as_ref(), field::EPOCH)
    }
    /// Sequence number.
    pub fn seq(&self) -> u32 {
        get_u32(self.buffer.as_ref(), field::SEQ)
    }
    /// Number of pairs.
    pub fn num_pairs(&self) -> u8 {
        self.buffer.as_ref()[field::NUM_PAIRS]
    }
    /// QUERY status.
    pub fn info(&self) -> u8 {
        self.buffer.as_ref()[field::INFO]
    }
    /// The pairs, fixed or variable-length as the flags say. Fixed keys come without
    /// their zero padding.
    pub fn pairs(&self) -> Pairs<'_> {
        let b = self.buffer.as_ref();
        Pairs { buf: b, at: HEADER_LEN, left: self.num_pairs() as usize, varlen: self.flags() & flags::VARLEN != 0 }
    }
    /// Bytes of header and pairs (trailing bytes of the buffer excluded).
    pub fn total_len(&self) -> usize {
        let mut p = self.pairs();
        while p.next().is_some() {}
        p.at
    }
}

/// Iterator over a packet's pairs: `(key, value)`; holes are skipped.
pub struct Pairs<'a> {
    buf: &'a [u8],
    at: usize,
    left: usize,
    varlen: bool,
}

impl<'a> Iterator for Pairs<'a> {
    type Item = (&'a [u8], u32);
    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        if self.varlen {
            if self.buf.len() < self.at + VARPAIR_HEADER {
                self.left = 0;
                return None;
            }
            let kl = get_u16(self.buf, self.at) as usize;
            let v = get_u32(self.buf, self.at + 2);
            let s = self.at + VARPAIR_HEADER;
            if self.buf.len() < s + kl {
                self.left = 0;
                return None;
            }
            self.at = s + kl;
            self.left -= 1;
            Some((&self.buf[s..s + kl], v))
        } else {
            if self.buf.len() < self.at + PAIR_LEN {
                self.left = 0;
                return None;
            }
            let k = &self.buf[self.at..self.at + KEY_LEN];
            let kl = k.iter().position(|&c| c == 0).unwrap_or(KEY_LEN);
            let v = get_u32(self.buf, self.at + KEY_LEN);
            self.at += PAIR_LEN;
            self.left -= 1;
            if kl == 0 {
                // A hole: nothing at this position.
                return self.next();
            }
            Some((&k[..kl], v))
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set the tree id.
    pub fn set_tree_id(&mut self, v: u16) {
        self.buffer.as_mut()[field::TREE..field::TREE + 2].copy_from_slice(&v.to_be_bytes());
    }
    /// Set the flags.
    pub fn set_flags(&mut self, v: u8) {
        self.buffer.as_mut()[field::FLAGS] = v;
    }
    /// Set the op byte.
    pub fn set_op(&mut self, v: u8) {
        self.buffer.as_mut()[field::OP] = v;
    }
    /// Set the sender id.
    pub fn set_sender(&mut self, v: u16) {
        self.buffer.as_mut()[field::SENDER..field::SENDER + 2].copy_from_slice(&v.to_be_bytes());
    }
    /// Set the epoch.
    pub fn set_epoch(&mut self, v: u16) {
        self.buffer.as_mut()[field::EPOCH..field::EPOCH + 2].copy_from_slice(&v.to_be_bytes());
    }
    /// Set the sequence number.
    pub fn set_seq(&mut self, v: u32) {
        self.buffer.as_mut()[field::SEQ..field::SEQ + 4].copy_from_slice(&v.to_be_bytes());
    }
    /// Set the pair count.
    pub fn set_num_pairs(&mut self, v: u8) {
        self.buffer.as_mut()[field::NUM_PAIRS] = v;
    }
    /// Set the QUERY status.
    pub fn set_info(&mut self, v: u8) {
        self.buffer.as_mut()[field::INFO] = v;
    }
}

/// The header fields, as a plain value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Repr {
    /// Tree id.
    pub tree_id: u16,
    /// Flag bits.
    pub flags: u8,
    /// Operation (wire value).
    pub op: u8,
    /// Sender id.
    pub sender: u16,
    /// Epoch.
    pub epoch: u16,
    /// Sequence number.
    pub seq: u32,
    /// Number of pairs that follow.
    pub num_pairs: u8,
    /// QUERY status.
    pub info: u8,
}

impl Repr {
    /// Parse a checked view's header.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr> {
        p.check_len()?;
        Ok(Repr {
            tree_id: p.tree_id(),
            flags: p.flags(),
            op: p.op(),
            sender: p.sender(),
            epoch: p.epoch(),
            seq: p.seq(),
            num_pairs: p.num_pairs(),
            info: p.info(),
        })
    }
    /// Header bytes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Write the header (the pairs are written separately: [`emit_fixed_pair`],
    /// [`emit_var_pair`]).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_tree_id(self.tree_id);
        p.set_flags(self.flags);
        p.set_op(self.op);
        p.set_sender(self.sender);
        p.set_epoch(self.epoch);
        p.set_seq(self.seq);
        p.set_num_pairs(self.num_pairs);
        p.set_info(self.info);
    }
    /// The header as a new vector.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; HEADER_LEN];
        self.emit(&mut Packet::new_unchecked(&mut v[..]));
        v
    }
}

/// Append a fixed-size pair (the key must satisfy [`key_is_fixed`]).
pub fn emit_fixed_pair(out: &mut Vec<u8>, key: &[u8], value: u32) {
    debug_assert!(key.len() <= KEY_LEN);
    let n = key.len().min(KEY_LEN);
    out.extend_from_slice(&key[..n]);
    out.extend(std::iter::repeat_n(0u8, KEY_LEN - n));
    out.extend_from_slice(&value.to_be_bytes());
}

/// Append a hole (an empty position of a fixed-pair packet).
pub fn emit_hole(out: &mut Vec<u8>) {
    out.extend_from_slice(&[0u8; PAIR_LEN]);
}

/// Append a variable-length pair (keys up to 65535 bytes).
pub fn emit_var_pair(out: &mut Vec<u8>, key: &[u8], value: u32) {
    out.extend_from_slice(&(key.len() as u16).to_be_bytes());
    out.extend_from_slice(&value.to_be_bytes());
    out.extend_from_slice(key);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_fixed_and_varlen() {
        let r = Repr { tree_id: 3, flags: flags::END, op: 2, sender: 700, epoch: 1, seq: 9, num_pairs: 2, info: 0 };
        let mut v = r.to_vec();
        emit_fixed_pair(&mut v, b"hello", 5);
        emit_fixed_pair(&mut v, b"0123456789abcdef", 7);
        let p = Packet::new_checked(&v[..]).unwrap();
        assert_eq!(Repr::parse(&p).unwrap(), r);
        let pairs: Vec<_> = p.pairs().collect();
        assert_eq!(pairs, vec![(&b"hello"[..], 5), (&b"0123456789abcdef"[..], 7)]);
        assert_eq!(p.total_len(), 54);

        let r = Repr { flags: flags::VARLEN, num_pairs: 2, ..r };
        let mut v = r.to_vec();
        let long = vec![b'x'; 300];
        emit_var_pair(&mut v, &long, 1);
        emit_var_pair(&mut v, b"", 2);
        let p = Packet::new_checked(&v[..]).unwrap();
        let pairs: Vec<_> = p.pairs().collect();
        assert_eq!(pairs, vec![(&long[..], 1), (&b""[..], 2)]);
    }

    #[test]
    fn malformed_is_an_error() {
        assert_eq!(Packet::new_checked(&[0u8; HEADER_LEN - 1][..]).err(), Some(Error::Truncated));
        let mut v = Repr { num_pairs: 11, ..Default::default() }.to_vec();
        v.resize(HEADER_LEN + 11 * PAIR_LEN, 1);
        assert_eq!(Packet::new_checked(&v[..]).err(), Some(Error::Malformed));
        let v = Repr { num_pairs: 2, ..Default::default() }.to_vec();
        assert_eq!(Packet::new_checked(&v[..]).err(), Some(Error::Truncated));
        let mut v = Repr { op: 9, ..Default::default() }.to_vec();
        assert_eq!(Packet::new_checked(&v[..]).err(), Some(Error::Malformed));
        v[3] = 0;
        v[2] = flags::VARLEN;
        v[12] = 1;
        v.extend_from_slice(&[0, 10, 0, 0, 0, 1, b'a']);
        assert_eq!(Packet::new_checked(&v[..]).err(), Some(Error::Truncated));
    }

    #[test]
    fn crc32_check_value_and_holes() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        let mut v = Repr { num_pairs: 3, ..Default::default() }.to_vec();
        emit_fixed_pair(&mut v, b"a", 1);
        emit_hole(&mut v);
        emit_fixed_pair(&mut v, b"b", 2);
        let p = Packet::new_checked(&v[..]).unwrap();
        assert_eq!(p.pairs().collect::<Vec<_>>(), vec![(&b"a"[..], 1), (&b"b"[..], 2)]);
        assert!(slice_of(b"a") < SLICES);
    }

    #[test]
    fn fixed_keys() {
        assert!(key_is_fixed(b"word"));
        assert!(!key_is_fixed(b""));
        assert!(!key_is_fixed(b"seventeen bytes!!"));
        assert!(!key_is_fixed(b"a\0b"));
    }
}
