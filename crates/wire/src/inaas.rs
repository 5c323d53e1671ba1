//! INaaS packets (INaaS paper §IV-C): one header carrying up to 20 key-value items, one per
//! switch memory segment, each with its own operation flags.
//!
//! The paper classifies INaaS packets by the Ethernet type field (§IV-D), so the header
//! follows Ethernet directly ([`ETHERTYPE`]). Layout (big-endian), 242 bytes:
//!
//! | offset | bytes | field |
//! | --- | --- | --- |
//! | 0 | 1 | operator (low 4 bits; 15 = compute done) |
//! | 1 | 1 | flags ([`flags`]: retransmitted, at the goalkeeper, reply, ...) |
//! | 2 | 4 | sequence number (the tenant adapter's, echoed back) |
//! | 6 | 4 | timestamp (µs, the lease clock) |
//! | 10 | 4 | time limit T (µs, the lease length) |
//! | 14 | 4 | uid (the tenant; never seen by the tenant, §V) |
//! | 18 | 3 × 8 | bitmaps of 20 bits: valid, read, write, reduce, compute, failed, preempted, overflow |
//! | 42 | 10 × 20 | items: register index (16), key (32), value (32, two's complement) |
//!
//! Differences from the paper's format, and why: one uid per packet instead of one per
//! item (20 × 32 bits do not fit the 256-byte parser beside the items; the goalkeeper keeps
//! the register owners it was told about, so a preempted item needs no uid of its own); an
//! explicit register index per item (Algorithm 1 reads `hdr.idx_j`, the controller's
//! memory scheduler chooses it); the failure, preemption and overflow bitmaps travel in the
//! header so the goalkeeper learns what the switch could not do; a sequence number for the
//! adapter's retransmission timer. Ethernet (14) + 242 = 256 bytes: exactly the parse depth
//! the tofino1 profile assumes.

// Field and variant names are the paper's; their meaning is in the table above.
#![allow(missing_docs)]

use crate::error::{Error, Result};

/// EtherType of INaaS packets (IEEE 802 local experimental EtherType 2).
pub const ETHERTYPE: u16 = 0x88B6;
/// Items (memory segments) per packet.
pub const ITEMS: usize = 20;
/// Header length after Ethernet.
pub const HEADER_LEN: usize = 242;
/// Bytes per item.
pub const ITEM_LEN: usize = 10;
/// The operator value the switch writes after a compute (paper: "setting the op bit to 15").
pub const OP_DONE: u8 = 15;
/// Paxos phase 1a (prepare) to the acceptors held in the tenant's leased registers: each
/// valid item is one acceptor (segment), `idx` the instance's slot, `key` the ballot.
/// Not an [`Operator`]: no compute may ride along.
pub const OP_PAXOS_1A: u8 = 10;
/// Paxos phase 2a (accept): as [`OP_PAXOS_1A`], `value` the proposed value. In both, the
/// instance tag rides in the key of item [`PAXOS_TAG_ITEM`], which is not valid.
pub const OP_PAXOS_2A: u8 = 11;
/// The (invalid) item whose key carries a Paxos packet's instance tag (instance + 1).
pub const PAXOS_TAG_ITEM: usize = ITEMS - 1;

/// Bloom filter insert: each valid item (segment `j` < 3, one per hash function) names a
/// register index `idx` the tenant holds a lease on and, in `key`, the bit mask to set in
/// that cell of the tenant's Bloom array `j`. Not an [`Operator`].
pub const OP_BLOOM_INSERT: u8 = 12;
/// Bloom filter membership query: as [`OP_BLOOM_INSERT`], nothing is set. The switch
/// answers in the value of every probe it could read: [`BLOOM_PRESENT`] if every bit it
/// read is set (the AND of the probes), else [`BLOOM_ABSENT`]; a probe it could not read
/// (no lease) is a failed item. (An insert is answered the same way, for the bits as they
/// were before it.)
pub const OP_BLOOM_QUERY: u8 = 13;
/// A Bloom answer: every probed bit is set.
pub const BLOOM_PRESENT: i32 = 1;
/// A Bloom answer: some probed bit is not set.
pub const BLOOM_ABSENT: i32 = 0;

/// Is `op` one of the two Bloom filter operations?
pub fn is_bloom(op: u8) -> bool {
    op == OP_BLOOM_INSERT || op == OP_BLOOM_QUERY
}

/// Is `op` one of the two Paxos operations?
pub fn is_paxos(op: u8) -> bool {
    op == OP_PAXOS_1A || op == OP_PAXOS_2A
}

/// Mask of the 20 item bits in a bitmap.
pub const ALL_ITEMS: u32 = (1 << ITEMS) - 1;

/// Bits of the flags byte.
pub mod flags {
    /// Sent again by the adapter after a timeout: the switch forwards it to the goalkeeper.
    pub const RETRANS: u8 = 0x01;
    /// The switch sent this packet to the goalkeeper (failures, preemption, overflow).
    pub const GOALKEEPER: u8 = 0x02;
    /// The switch answered the sender directly.
    pub const REPLY: u8 = 0x04;
    /// An answer from the goalkeeper host (the switch forwards it like any frame).
    pub const GK_REPLY: u8 = 0x08;
    /// The uid is not registered for the ingress port (forged), as the switch saw it.
    pub const FORGED: u8 = 0x10;
    /// The goalkeeper reply carries a trailer of 20 exact 64-bit values (overflowed results).
    pub const EXACT: u8 = 0x20;
}

/// Byte offsets of the header's fields, from the start of the header: the one layout
/// the host code (views and reprs) and the switch programs share.
#[allow(missing_docs)]
pub mod field {
    pub const OP: usize = 0;
    pub const FLAGS: usize = 1;
    pub const SEQ: usize = 2;
    pub const TIMESTAMP: usize = 6;
    pub const TIME_LIMIT: usize = 10;
    pub const UID: usize = 14;
    pub const BITMAPS: usize = 18;
    pub const ITEMS: usize = 42;
}

/// The eight per-item bitmaps, in header order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Bitmap {
    Valid = 0,
    Read = 1,
    Write = 2,
    Reduce = 3,
    Compute = 4,
    Failed = 5,
    Preempted = 6,
    Overflow = 7,
}

/// Operators of the compute primitive (paper §IV-C: values 0 to 9).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Operator {
    Add = 0,
    Sub = 1,
    Shl = 2,
    Shr = 3,
    And = 4,
    Or = 5,
    Xor = 6,
    Not = 7,
    Max = 8,
    Min = 9,
}

impl Operator {
    /// The operator for a field value, if it is one of 0–9.
    pub fn from_u8(v: u8) -> Option<Operator> {
        use Operator::*;
        Some(match v {
            0 => Add,
            1 => Sub,
            2 => Shl,
            3 => Shr,
            4 => And,
            5 => Or,
            6 => Xor,
            7 => Not,
            8 => Max,
            9 => Min,
            _ => return None,
        })
    }
}

/// A view of an INaaS header (the bytes after Ethernet).
#[derive(Debug, Clone)]
pub struct InaasPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> InaasPacket<T> {
    /// Wraps a buffer without checking its length (getters panic on a short buffer).
    pub const fn new_unchecked(buffer: T) -> Self {
        InaasPacket { buffer }
    }

    /// Wraps a buffer of at least [`HEADER_LEN`] bytes.
    pub fn new_checked(buffer: T) -> Result<Self> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(InaasPacket { buffer })
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    fn u32_at(&self, at: usize) -> u32 {
        let b = self.b();
        u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }

    /// Operator field (low 4 bits of byte 0).
    pub fn op(&self) -> u8 {
        self.b()[field::OP] & 0x0F
    }
    /// Flags byte.
    pub fn flags(&self) -> u8 {
        self.b()[field::FLAGS]
    }
    /// Sequence number.
    pub fn seq(&self) -> u32 {
        self.u32_at(field::SEQ)
    }
    /// Timestamp (µs).
    pub fn timestamp(&self) -> u32 {
        self.u32_at(field::TIMESTAMP)
    }
    /// Time limit T (µs).
    pub fn time_limit(&self) -> u32 {
        self.u32_at(field::TIME_LIMIT)
    }
    /// Tenant uid.
    pub fn uid(&self) -> u32 {
        self.u32_at(field::UID)
    }
    /// One of the 20-bit bitmaps.
    pub fn bitmap(&self, which: Bitmap) -> u32 {
        let at = field::BITMAPS + 3 * which as usize;
        let b = self.b();
        (u32::from_be_bytes([0, b[at], b[at + 1], b[at + 2]])) & ALL_ITEMS
    }
    /// Register index of item `j` (< 20).
    pub fn idx(&self, j: usize) -> u16 {
        let at = field::ITEMS + ITEM_LEN * j;
        u16::from_be_bytes([self.b()[at], self.b()[at + 1]])
    }
    /// Key of item `j`.
    pub fn key(&self, j: usize) -> u32 {
        self.u32_at(field::ITEMS + ITEM_LEN * j + 2)
    }
    /// Value of item `j` (two's complement).
    pub fn value(&self, j: usize) -> i32 {
        self.u32_at(field::ITEMS + ITEM_LEN * j + 6) as i32
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> InaasPacket<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    fn set_u32_at(&mut self, at: usize, v: u32) {
        self.bm()[at..at + 4].copy_from_slice(&v.to_be_bytes());
    }
    /// Set the operator (low 4 bits).
    pub fn set_op(&mut self, op: u8) {
        self.bm()[field::OP] = op & 0x0F;
    }
    /// Set the flags byte.
    pub fn set_flags(&mut self, f: u8) {
        self.bm()[field::FLAGS] = f;
    }
    /// Set the sequence number.
    pub fn set_seq(&mut self, v: u32) {
        self.set_u32_at(field::SEQ, v)
    }
    /// Set the timestamp.
    pub fn set_timestamp(&mut self, v: u32) {
        self.set_u32_at(field::TIMESTAMP, v)
    }
    /// Set the time limit.
    pub fn set_time_limit(&mut self, v: u32) {
        self.set_u32_at(field::TIME_LIMIT, v)
    }
    /// Set the uid.
    pub fn set_uid(&mut self, v: u32) {
        self.set_u32_at(field::UID, v)
    }
    /// Set one bitmap (bits above 20 are ignored).
    pub fn set_bitmap(&mut self, which: Bitmap, v: u32) {
        let at = field::BITMAPS + 3 * which as usize;
        let b = (v & ALL_ITEMS).to_be_bytes();
        self.bm()[at..at + 3].copy_from_slice(&b[1..]);
    }
    /// Set the register index of item `j`.
    pub fn set_idx(&mut self, j: usize, v: u16) {
        let at = field::ITEMS + ITEM_LEN * j;
        self.bm()[at..at + 2].copy_from_slice(&v.to_be_bytes());
    }
    /// Set the key of item `j`.
    pub fn set_key(&mut self, j: usize, v: u32) {
        self.set_u32_at(field::ITEMS + ITEM_LEN * j + 2, v)
    }
    /// Set the value of item `j`.
    pub fn set_value(&mut self, j: usize, v: i32) {
        self.set_u32_at(field::ITEMS + ITEM_LEN * j + 6, v as u32)
    }
}

/// One item of an INaaS packet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Item {
    pub idx: u16,
    pub key: u32,
    pub value: i32,
}

/// A parsed INaaS header.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InaasRepr {
    pub op: u8,
    pub flags: u8,
    pub seq: u32,
    pub timestamp: u32,
    pub time_limit: u32,
    pub uid: u32,
    /// The eight bitmaps, indexed by [`Bitmap`].
    pub bitmaps: [u32; 8],
    pub items: [Item; ITEMS],
}

impl InaasRepr {
    /// Parse a checked view. `Malformed` if the operator is neither 0–9, 10–11 (Paxos),
    /// 12–13 (Bloom) nor 15, or an item asks for a primitive without being valid.
    pub fn parse<T: AsRef<[u8]>>(p: &InaasPacket<T>) -> Result<InaasRepr> {
        let op = p.op();
        if Operator::from_u8(op).is_none() && op != OP_DONE && !is_paxos(op) && !is_bloom(op) {
            return Err(Error::Malformed);
        }
        let mut bitmaps = [0u32; 8];
        for (i, b) in bitmaps.iter_mut().enumerate() {
            *b = p.bitmap(BITMAPS[i]);
        }
        let ops = bitmaps[1] | bitmaps[2] | bitmaps[3] | bitmaps[4];
        if ops & !bitmaps[0] != 0 {
            return Err(Error::Malformed);
        }
        let mut items = [Item::default(); ITEMS];
        for (j, it) in items.iter_mut().enumerate() {
            *it = Item { idx: p.idx(j), key: p.key(j), value: p.value(j) };
        }
        Ok(InaasRepr {
            op,
            flags: p.flags(),
            seq: p.seq(),
            timestamp: p.timestamp(),
            time_limit: p.time_limit(),
            uid: p.uid(),
            bitmaps,
            items,
        })
    }

    /// Bytes [`emit`](Self::emit) writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write the header into a view of at least [`HEADER_LEN`] bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut InaasPacket<T>) {
        p.set_op(self.op);
        p.set_flags(self.flags);
        p.set_seq(self.seq);
        p.set_timestamp(self.timestamp);
        p.set_time_limit(self.time_limit);
        p.set_uid(self.uid);
        for (i, b) in self.bitmaps.iter().enumerate() {
            p.set_bitmap(BITMAPS[i], *b);
        }
        for (j, it) in self.items.iter().enumerate() {
            p.set_idx(j, it.idx);
            p.set_key(j, it.key);
            p.set_value(j, it.value);
        }
    }

    /// A bitmap by name.
    pub fn bits(&self, which: Bitmap) -> u32 {
        self.bitmaps[which as usize]
    }
    /// Set a bitmap by name.
    pub fn set_bits(&mut self, which: Bitmap, v: u32) {
        self.bitmaps[which as usize] = v & ALL_ITEMS;
    }
}

const BITMAPS: [Bitmap; 8] =
    [Bitmap::Valid, Bitmap::Read, Bitmap::Write, Bitmap::Reduce, Bitmap::Compute, Bitmap::Failed, Bitmap::Preempted, Bitmap::Overflow];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_truncation() {
        let mut r = InaasRepr { op: 3, flags: flags::RETRANS, seq: 7, timestamp: 11, time_limit: 500, uid: 42, ..Default::default() };
        r.set_bits(Bitmap::Valid, 0b101);
        r.set_bits(Bitmap::Reduce, 0b100);
        r.items[2] = Item { idx: 9, key: 0xABCD_0001, value: -5 };
        let mut buf = vec![0u8; HEADER_LEN];
        r.emit(&mut InaasPacket::new_unchecked(&mut buf[..]));
        let p = InaasPacket::new_checked(&buf[..]).unwrap();
        assert_eq!(InaasRepr::parse(&p).unwrap(), r);
        assert_eq!(InaasPacket::new_checked(&buf[..HEADER_LEN - 1]).unwrap_err(), Error::Truncated);
        buf[0] = 14; // neither an operator, Paxos (10-11), Bloom (12-13) nor done (15)
        assert_eq!(InaasRepr::parse(&InaasPacket::new_checked(&buf[..]).unwrap()).unwrap_err(), Error::Malformed);
    }

    #[test]
    fn op_without_valid_is_malformed() {
        let mut r = InaasRepr::default();
        r.set_bits(Bitmap::Read, 1);
        let mut buf = vec![0u8; HEADER_LEN];
        r.emit(&mut InaasPacket::new_unchecked(&mut buf[..]));
        assert_eq!(InaasRepr::parse(&InaasPacket::new_checked(&buf[..]).unwrap()).unwrap_err(), Error::Malformed);
    }
}
