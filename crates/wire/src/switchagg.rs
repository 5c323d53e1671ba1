//! SwitchAgg packets (SwitchAgg §4.1, Table 1), carried in UDP to port [`UDP_PORT`].
//!
//! Every packet starts with a type byte. The **Aggregation** packet is
//! `<TreeID, EoT, Operation, NumPairs, <KeyLen, ValueLen, Key, Value>*>`, with the
//! reliability fields the exactly-once protocol needs (a flags byte holding EoT, ACK and
//! BYPASS; the sender's child id; a sequence number per sender and tree):
//!
//! ```text
//!  0      1      2      4      5      6        8        12         14
//! +------+------+------+------+------+--------+--------+----------+------------------+
//! | type | flags| tree | op   | rsvd | child  | seq    | num_pairs| pairs ...        |
//! +------+------+------+------+------+--------+--------+----------+------------------+
//! pair: | key_len u8 | value_len u8 (= 4) | key (key_len bytes) | value (u32, BE) |
//! ```
//!
//! Keys are 1..=255 bytes, never padded on the wire (the paper's point against fixed-size
//! pairs, §2.2.1); values are 32-bit integers (§4.2.3). The **Launch** (master to
//! controller), **Configure** (controller to switch) and **Ack** packets are in Table 1's
//! format after the same type byte.

use crate::bytes;
use crate::error::{Error, Result};

/// UDP destination port of SwitchAgg packets (the switch classifies by it; DAIET is 7070).
pub const UDP_PORT: u16 = 7071;

/// Packet types (Table 1).
pub mod packet_type {
    /// Aggregation: pairs on their way to the reducer.
    pub const AGGREGATION: u8 = 1;
    /// Launch: master to controller.
    pub const LAUNCH: u8 = 2;
    /// Configure: controller to switch.
    pub const CONFIGURE: u8 = 3;
    /// Ack: switch to controller (type 1), controller to master (type 0).
    pub const ACK: u8 = 4;
}

/// Bits of the flags byte.
pub mod flags {
    /// End of tree: the sender's last packet for this tree.
    pub const EOT: u8 = 0x01;
    /// An acknowledgement of (child, seq); carries no pairs.
    pub const ACK: u8 = 0x02;
    /// Forward untouched: no aggregation, no sequence check (host-side fallback, keys the
    /// switch does not aggregate).
    pub const BYPASS: u8 = 0x04;
    /// A host-to-host control message of the end hosts' exactly-once protocol (status
    /// query, resend request, done; `hostlib::aggregation::switchagg`), always with
    /// BYPASS so a switch forwards it untouched; its kind, info and epoch are in `seq`.
    pub const CONTROL: u8 = 0x08;
    /// Every bit defined.
    pub const ALL: u8 = EOT | ACK | BYPASS | CONTROL;
}

/// The aggregation function (the aggregation unit's `<Operation, Value1, Value2>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// Wrapping 32-bit sum.
    Sum,
    /// Smallest value.
    Min,
    /// Largest value.
    Max,
}

impl Operation {
    /// From its wire code (0, 1, 2).
    pub fn from_code(c: u8) -> Result<Operation> {
        match c {
            0 => Ok(Operation::Sum),
            1 => Ok(Operation::Min),
            2 => Ok(Operation::Max),
            _ => Err(Error::Malformed),
        }
    }
    /// Its wire code.
    pub fn code(self) -> u8 {
        match self {
            Operation::Sum => 0,
            Operation::Min => 1,
            Operation::Max => 2,
        }
    }
    /// `a` combined with `b`.
    #[inline]
    pub fn apply(self, a: u32, b: u32) -> u32 {
        match self {
            Operation::Sum => a.wrapping_add(b),
            Operation::Min => a.min(b),
            Operation::Max => a.max(b),
        }
    }
}

/// Byte offsets of the header's fields, from the start of the header: the one layout
/// the host code (views and reprs) and the switch programs share.
#[allow(missing_docs)]
pub mod field {
    pub const TYPE: usize = 0;
    pub const FLAGS: usize = 1;
    pub const TREE: usize = 2;
    pub const OP: usize = 4;
    pub const CHILD: usize = 6;
    pub const SEQ: usize = 8;
    pub const NUM_PAIRS: usize = 12;
    pub const PAIRS: usize = 14;
}

/// Bytes of the aggregation header before the pairs.
pub const HEADER_LEN: usize = field::PAIRS;
/// Bytes of a pair besides its key: key length, value length, 4-byte value.
pub const PAIR_OVERHEAD: usize = 6;
/// Width of every value, bytes.
pub const VALUE_LEN: usize = 4;

/// Bytes a pair of key length `key_len` takes on the wire.
#[inline]
pub fn pair_len(key_len: usize) -> usize {
    PAIR_OVERHEAD + key_len
}

/// A view of an Aggregation packet (the UDP payload).
///
/// After [`new_checked`](Self::new_checked) the header is present, the type is
/// Aggregation, the operation and flags are known, and exactly `num_pairs` well-formed
/// pairs follow (each value 4 bytes, each key at least 1 byte); bytes after them are
/// ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AggPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> AggPacket<T> {
    /// Wraps a buffer without checking it (getters may panic on a short one).
    #[inline]
    pub const fn new_unchecked(buffer: T) -> AggPacket<T> {
        AggPacket { buffer }
    }

    /// Wraps a buffer after [`check`](Self::check).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<AggPacket<T>> {
        let p = Self::new_unchecked(buffer);
        p.check()?;
        Ok(p)
    }

    /// `Truncated` if the header or a pair runs past the buffer; `Malformed` for another
    /// type, an unknown operation or flag, CONTROL without BYPASS, a non-zero reserved byte, a value that is not 4 bytes, an empty key.
    pub fn check(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let fl = b[field::FLAGS];
        if b[field::TYPE] != packet_type::AGGREGATION
            || fl & !flags::ALL != 0
            || (fl & flags::CONTROL != 0 && fl & flags::BYPASS == 0)
            || b[field::OP + 1] != 0
        {
            return Err(Error::Malformed);
        }
        Operation::from_code(b[field::OP])?;
        self.pairs_end().map(|_| ())
    }

    /// Offset just past the last pair, walking the pairs (what the payload analyzer does).
    pub fn pairs_end(&self) -> Result<usize> {
        let b = self.buffer.as_ref();
        let mut at = HEADER_LEN;
        for _ in 0..self.num_pairs() {
            if at + 2 > b.len() {
                return Err(Error::Truncated);
            }
            let (k, v) = (b[at] as usize, b[at + 1] as usize);
            if k == 0 || v != VALUE_LEN {
                return Err(Error::Malformed);
            }
            at += PAIR_OVERHEAD + k;
            if at > b.len() {
                return Err(Error::Truncated);
            }
        }
        Ok(at)
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// The type byte.
    pub fn packet_type(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }
    /// The flags byte.
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }
    /// End of tree for this sender.
    pub fn eot(&self) -> bool {
        self.flags() & flags::EOT != 0
    }
    /// The aggregation tree.
    pub fn tree_id(&self) -> u16 {
        bytes::get_u16(self.buffer.as_ref(), field::TREE)
    }
    /// The raw operation code.
    pub fn op_code(&self) -> u8 {
        self.buffer.as_ref()[field::OP]
    }
    /// The operation (checked by `new_checked`).
    pub fn op(&self) -> Result<Operation> {
        Operation::from_code(self.op_code())
    }
    /// The sender's id among the tree node's children.
    pub fn child_id(&self) -> u16 {
        bytes::get_u16(self.buffer.as_ref(), field::CHILD)
    }
    /// The sender's sequence number for this tree.
    pub fn seq(&self) -> u32 {
        let b = self.buffer.as_ref();
        u32::from_be_bytes(bytes::get_array(b, field::SEQ))
    }
    /// Number of pairs.
    pub fn num_pairs(&self) -> u16 {
        bytes::get_u16(self.buffer.as_ref(), field::NUM_PAIRS)
    }
    /// The pairs, in order. On a checked view every item is `Ok`.
    pub fn pairs(&self) -> PairIter<'_> {
        PairIter { buf: self.buffer.as_ref(), at: HEADER_LEN, left: self.num_pairs() }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AggPacket<T> {
    /// Sets the flags byte.
    pub fn set_flags(&mut self, v: u8) {
        self.buffer.as_mut()[field::FLAGS] = v;
    }
    /// Sets the tree id.
    pub fn set_tree_id(&mut self, v: u16) {
        bytes::set_u16(self.buffer.as_mut(), field::TREE, v);
    }
    /// Sets the child id.
    pub fn set_child_id(&mut self, v: u16) {
        bytes::set_u16(self.buffer.as_mut(), field::CHILD, v);
    }
    /// Sets the sequence number.
    pub fn set_seq(&mut self, v: u32) {
        self.buffer.as_mut()[field::SEQ..field::SEQ + 4].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the number of pairs.
    pub fn set_num_pairs(&mut self, v: u16) {
        bytes::set_u16(self.buffer.as_mut(), field::NUM_PAIRS, v);
    }
}

/// Writes one pair at the start of `out` (which must hold [`pair_len`] bytes); returns its
/// length. Keys of 1..=255 bytes.
#[inline]
pub fn emit_pair(out: &mut [u8], key: &[u8], value: u32) -> usize {
    let k = key.len();
    out[0] = k as u8;
    out[1] = VALUE_LEN as u8;
    out[2..2 + k].copy_from_slice(key);
    out[2 + k..6 + k].copy_from_slice(&value.to_be_bytes());
    PAIR_OVERHEAD + k
}

/// Iterator over the pairs of an [`AggPacket`]: `(key, value)`, or the error that stops it.
pub struct PairIter<'a> {
    buf: &'a [u8],
    at: usize,
    left: u16,
}

impl<'a> Iterator for PairIter<'a> {
    type Item = Result<(&'a [u8], u32)>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let b = self.buf;
        let at = self.at;
        if at + 2 > b.len() {
            self.left = 0;
            return Some(Err(Error::Truncated));
        }
        let (k, v) = (b[at] as usize, b[at + 1] as usize);
        if k == 0 || v != VALUE_LEN {
            self.left = 0;
            return Some(Err(Error::Malformed));
        }
        if at + PAIR_OVERHEAD + k > b.len() {
            self.left = 0;
            return Some(Err(Error::Truncated));
        }
        let key = &b[at + 2..at + 2 + k];
        let value = u32::from_be_bytes(bytes::get_array(b, at + 2 + k));
        self.at = at + PAIR_OVERHEAD + k;
        Some(Ok((key, value)))
    }
}

/// The parsed form of an Aggregation packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AggRepr {
    /// Bits of [`flags`].
    pub flags: u8,
    /// The aggregation tree.
    pub tree_id: u16,
    /// The aggregation function.
    pub op: Operation,
    /// The sender among the tree node's children.
    pub child_id: u16,
    /// The sender's sequence number for this tree.
    pub seq: u32,
    /// `(key, value)` pairs.
    pub pairs: Vec<(Vec<u8>, u32)>,
}

impl AggRepr {
    /// Parses a checked view (or checks it first).
    pub fn parse<T: AsRef<[u8]> + ?Sized>(p: &AggPacket<&T>) -> Result<AggRepr> {
        p.check()?;
        let pairs = p.pairs().map(|r| r.map(|(k, v)| (k.to_vec(), v))).collect::<Result<Vec<_>>>()?;
        Ok(AggRepr { flags: p.flags(), tree_id: p.tree_id(), op: p.op()?, child_id: p.child_id(), seq: p.seq(), pairs })
    }

    /// Bytes `emit` writes. Keys must be 1..=255 bytes and at most 65535 pairs.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.pairs.iter().map(|(k, _)| pair_len(k.len())).sum::<usize>()
    }

    /// Writes the packet into `out` (at least `buffer_len` bytes). `Malformed` for a key of
    /// 0 or more than 255 bytes or too many pairs; `Truncated` for a short buffer.
    pub fn emit(&self, out: &mut [u8]) -> Result<usize> {
        if self.pairs.len() > u16::MAX as usize
            || self.pairs.iter().any(|(k, _)| k.is_empty() || k.len() > 255)
            || self.flags & !flags::ALL != 0
        {
            return Err(Error::Malformed);
        }
        let n = self.buffer_len();
        if out.len() < n {
            return Err(Error::Truncated);
        }
        out[field::TYPE] = packet_type::AGGREGATION;
        out[field::FLAGS] = self.flags;
        bytes::set_u16(out, field::TREE, self.tree_id);
        out[field::OP] = self.op.code();
        out[field::OP + 1] = 0;
        bytes::set_u16(out, field::CHILD, self.child_id);
        out[field::SEQ..field::SEQ + 4].copy_from_slice(&self.seq.to_be_bytes());
        bytes::set_u16(out, field::NUM_PAIRS, self.pairs.len() as u16);
        let mut at = HEADER_LEN;
        for (k, v) in &self.pairs {
            at += emit_pair(&mut out[at..], k, *v);
        }
        Ok(n)
    }
}

/// Launch: `<Number of Reducers, Number of Mappers, <Reducer Addrs>, <Mapper Addrs>>`
/// (master to controller). Addresses are IPv4, 4 bytes each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchRepr {
    /// Reducer addresses (one aggregation tree each).
    pub reducers: Vec<[u8; 4]>,
    /// Mapper addresses.
    pub mappers: Vec<[u8; 4]>,
}

impl LaunchRepr {
    /// Parses `type, n_reducers u16, n_mappers u16, addresses`.
    pub fn parse(b: &[u8]) -> Result<LaunchRepr> {
        if b.len() < 5 {
            return Err(Error::Truncated);
        }
        if b[0] != packet_type::LAUNCH {
            return Err(Error::Malformed);
        }
        let (r, m) = (bytes::get_u16(b, 1) as usize, bytes::get_u16(b, 3) as usize);
        if b.len() < 5 + 4 * (r + m) {
            return Err(Error::Truncated);
        }
        let addr = |i: usize| bytes::get_array::<4>(b, 5 + 4 * i);
        Ok(LaunchRepr { reducers: (0..r).map(addr).collect(), mappers: (r..r + m).map(addr).collect() })
    }
    /// Bytes `emit` writes.
    pub fn buffer_len(&self) -> usize {
        5 + 4 * (self.reducers.len() + self.mappers.len())
    }
    /// Writes the packet; `Malformed` if a list has more than 65535 entries.
    pub fn emit(&self, out: &mut [u8]) -> Result<usize> {
        if self.reducers.len() > u16::MAX as usize || self.mappers.len() > u16::MAX as usize {
            return Err(Error::Malformed);
        }
        let n = self.buffer_len();
        if out.len() < n {
            return Err(Error::Truncated);
        }
        out[0] = packet_type::LAUNCH;
        bytes::set_u16(out, 1, self.reducers.len() as u16);
        bytes::set_u16(out, 3, self.mappers.len() as u16);
        for (i, a) in self.reducers.iter().chain(&self.mappers).enumerate() {
            out[5 + 4 * i..9 + 4 * i].copy_from_slice(a);
        }
        Ok(n)
    }
}

/// Configure: `<Number of Aggregation Trees, <TreeID, Number of Children>*>` (controller to
/// switch). The switch splits its memory evenly across the trees (§4.2.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigureRepr {
    /// `(tree id, number of children)`.
    pub trees: Vec<(u16, u16)>,
}

impl ConfigureRepr {
    /// Parses `type, n u16, (tree u16, children u16)*`.
    pub fn parse(b: &[u8]) -> Result<ConfigureRepr> {
        if b.len() < 3 {
            return Err(Error::Truncated);
        }
        if b[0] != packet_type::CONFIGURE {
            return Err(Error::Malformed);
        }
        let n = bytes::get_u16(b, 1) as usize;
        if b.len() < 3 + 4 * n {
            return Err(Error::Truncated);
        }
        Ok(ConfigureRepr { trees: (0..n).map(|i| (bytes::get_u16(b, 3 + 4 * i), bytes::get_u16(b, 5 + 4 * i))).collect() })
    }
    /// Bytes `emit` writes.
    pub fn buffer_len(&self) -> usize {
        3 + 4 * self.trees.len()
    }
    /// Writes the packet; `Malformed` beyond 65535 trees.
    pub fn emit(&self, out: &mut [u8]) -> Result<usize> {
        if self.trees.len() > u16::MAX as usize {
            return Err(Error::Malformed);
        }
        let n = self.buffer_len();
        if out.len() < n {
            return Err(Error::Truncated);
        }
        out[0] = packet_type::CONFIGURE;
        bytes::set_u16(out, 1, self.trees.len() as u16);
        for (i, (t, c)) in self.trees.iter().enumerate() {
            bytes::set_u16(out, 3 + 4 * i, *t);
            bytes::set_u16(out, 5 + 4 * i, *c);
        }
        Ok(n)
    }
}

/// Ack `<NULL>`, type 0 (controller and master) or 1 (controller and switch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckRepr {
    /// 0: controller and master; 1: controller and switch.
    pub ack_type: u8,
}

impl AckRepr {
    /// Parses `type, ack_type` (0 or 1).
    pub fn parse(b: &[u8]) -> Result<AckRepr> {
        if b.len() < 2 {
            return Err(Error::Truncated);
        }
        if b[0] != packet_type::ACK || b[1] > 1 {
            return Err(Error::Malformed);
        }
        Ok(AckRepr { ack_type: b[1] })
    }
    /// Bytes `emit` writes.
    pub fn buffer_len(&self) -> usize {
        2
    }
    /// Writes the packet.
    pub fn emit(&self, out: &mut [u8]) -> Result<usize> {
        if out.len() < 2 {
            return Err(Error::Truncated);
        }
        if self.ack_type > 1 {
            return Err(Error::Malformed);
        }
        out[0] = packet_type::ACK;
        out[1] = self.ack_type;
        Ok(2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> AggRepr {
        AggRepr {
            flags: flags::EOT,
            tree_id: 3,
            op: Operation::Max,
            child_id: 7,
            seq: 0xDEAD_BEEF,
            pairs: vec![(b"a".to_vec(), 1), (vec![b'x'; 64], 2), (vec![b'y'; 255], u32::MAX)],
        }
    }

    #[test]
    fn aggregation_roundtrip_and_fields() {
        let r = sample();
        let mut buf = vec![0u8; r.buffer_len() + 3];
        assert_eq!(r.emit(&mut buf).unwrap(), r.buffer_len());
        let p = AggPacket::new_checked(&buf[..]).unwrap();
        assert!(p.eot());
        assert_eq!((p.tree_id(), p.child_id(), p.seq(), p.num_pairs()), (3, 7, 0xDEAD_BEEF, 3));
        assert_eq!(p.pairs_end().unwrap(), r.buffer_len());
        assert_eq!(AggRepr::parse(&p).unwrap(), r);
    }

    #[test]
    fn malformed_and_truncated() {
        let r = sample();
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut buf).unwrap();
        for cut in 0..buf.len() {
            assert!(AggPacket::new_checked(&buf[..cut]).is_err(), "cut at {cut}");
        }
        let mut bad = buf.clone();
        bad[HEADER_LEN + 1] = 8; // a value of 8 bytes
        assert_eq!(AggPacket::new_checked(&bad[..]).unwrap_err(), Error::Malformed);
        let mut bad = buf.clone();
        bad[HEADER_LEN] = 0; // an empty key
        assert_eq!(AggPacket::new_checked(&bad[..]).unwrap_err(), Error::Malformed);
        let mut bad = buf.clone();
        bad[4] = 9; // unknown operation
        assert_eq!(AggPacket::new_checked(&bad[..]).unwrap_err(), Error::Malformed);
        let mut bad = buf.clone();
        bad[12] = 0xFF; // more pairs than bytes
        assert_eq!(AggPacket::new_checked(&bad[..]).unwrap_err(), Error::Truncated);
        let mut bad = buf.clone();
        bad[1] = flags::CONTROL; // a control message must bypass the switch
        assert_eq!(AggPacket::new_checked(&bad[..]).unwrap_err(), Error::Malformed);
        let mut ok = buf.clone();
        ok[1] = flags::CONTROL | flags::BYPASS;
        assert!(AggPacket::new_checked(&ok[..]).is_ok());
        let bad_key = AggRepr { pairs: vec![(vec![], 1)], ..sample() };
        assert_eq!(bad_key.emit(&mut [0u8; 64]).unwrap_err(), Error::Malformed);
    }

    #[test]
    fn control_packets_roundtrip() {
        let l = LaunchRepr { reducers: vec![[10, 0, 0, 9]], mappers: vec![[10, 0, 0, 1], [10, 0, 0, 2]] };
        let mut b = vec![0u8; l.buffer_len()];
        l.emit(&mut b).unwrap();
        assert_eq!(LaunchRepr::parse(&b).unwrap(), l);
        assert_eq!(LaunchRepr::parse(&b[..b.len() - 1]).unwrap_err(), Error::Truncated);
        let c = ConfigureRepr { trees: vec![(1, 3), (2, 4)] };
        let mut b = vec![0u8; c.buffer_len()];
        c.emit(&mut b).unwrap();
        assert_eq!(ConfigureRepr::parse(&b).unwrap(), c);
        let a = AckRepr { ack_type: 1 };
        let mut b = [0u8; 2];
        a.emit(&mut b).unwrap();
        assert_eq!(AckRepr::parse(&b).unwrap(), a);
        assert_eq!(AckRepr::parse(&[packet_type::ACK, 2]).unwrap_err(), Error::Malformed);
    }

    proptest! {
        #[test]
        fn any_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(p) = AggPacket::new_checked(&data[..]) {
                let r = AggRepr::parse(&p).unwrap();
                let mut out = vec![0u8; r.buffer_len()];
                r.emit(&mut out).unwrap();
                prop_assert_eq!(&out[..], &data[..r.buffer_len()]);
            }
            let _ = LaunchRepr::parse(&data);
            let _ = ConfigureRepr::parse(&data);
            let _ = AckRepr::parse(&data);
        }

        #[test]
        fn roundtrip(pairs in proptest::collection::vec((proptest::collection::vec(any::<u8>(), 1..80), any::<u32>()), 0..20),
                     fl in (0u8..16).prop_filter("CONTROL needs BYPASS", |f| f & 0x08 == 0 || f & 0x04 != 0), tree in any::<u16>(), seq in any::<u32>()) {
            let r = AggRepr { flags: fl, tree_id: tree, op: Operation::Sum, child_id: 1, seq, pairs };
            let mut out = vec![0u8; r.buffer_len()];
            r.emit(&mut out).unwrap();
            prop_assert_eq!(AggRepr::parse(&AggPacket::new_checked(&out[..]).unwrap()).unwrap(), r);
        }
    }
}
