//! NetSHa answer packets (NetSHa §3.3, Figure 2): the UDP payload of an IPv4 packet whose
//! ToS reserved bit ([`TOS_BIT`]) is set.
//!
//! ```text
//! Query# (1 byte)
//! then Query# times:  QID (4 bytes) | NUM (2 bytes) | NUM × (data id (4 bytes) | distance (8 bytes))
//! ```
//!
//! All fields are big-endian; the distance is an IEEE-754 double, as in the paper. One
//! 1500-byte packet carries up to [`MAX_ANSWERS`] answers.

use crate::error::{Error, Result};

/// The IPv4 ToS bit that marks NetSHa packets (the low "reserved" bit of the ToS byte).
pub const TOS_BIT: u8 = 0x01;
/// Length of Query#.
pub const HEADER_LEN: usize = 1;
/// Length of one query block's header (QID and NUM).
pub const BLOCK_HEADER_LEN: usize = 6;
/// Length of one answer (data id and distance).
pub const ANSWER_LEN: usize = 12;
/// Most answers one packet carries (§3.3: a standard Ethernet packet carries up to 120).
pub const MAX_ANSWERS: usize = 120;

/// A view of a NetSHa payload.
///
/// After [`new_checked`](Self::new_checked), the Query# blocks it declares all lie inside
/// the buffer and end exactly at its end, so no accessor can index out of bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetshaPacket<T: AsRef<[u8]>> {
    buffer: T,
}

/// One query block inside a [`NetshaPacket`]: where it is and what it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    /// Byte offset of the block (its QID) in the payload.
    pub offset: usize,
    /// Query ID.
    pub qid: u32,
    /// Number of answers.
    pub num: u16,
}

impl Block {
    /// Total length of the block in bytes.
    pub fn len(&self) -> usize {
        BLOCK_HEADER_LEN + ANSWER_LEN * self.num as usize
    }
    /// Whether the block has no answers.
    pub fn is_empty(&self) -> bool {
        self.num == 0
    }
}

/// Reads the block at `at` of `data`, if its header and its answers fit.
#[inline]
pub fn block_at(data: &[u8], at: usize) -> Result<Block> {
    if data.len() < at + BLOCK_HEADER_LEN {
        return Err(Error::Truncated);
    }
    let qid = u32::from_be_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]]);
    let num = u16::from_be_bytes([data[at + 4], data[at + 5]]);
    let b = Block { offset: at, qid, num };
    if data.len() < at + b.len() {
        return Err(Error::Truncated);
    }
    Ok(b)
}

/// The answer at `at` of `data` (callers checked the bounds).
#[inline]
pub fn answer_at(data: &[u8], at: usize) -> (u32, f64) {
    let id = u32::from_be_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]]);
    let mut d = [0u8; 8];
    d.copy_from_slice(&data[at + 4..at + 12]);
    (id, f64::from_bits(u64::from_be_bytes(d)))
}

/// Writes an answer at `at` of `data` (callers checked the bounds).
#[inline]
pub fn put_answer(data: &mut [u8], at: usize, id: u32, distance: f64) {
    data[at..at + 4].copy_from_slice(&id.to_be_bytes());
    data[at + 4..at + 12].copy_from_slice(&distance.to_bits().to_be_bytes());
}

impl<T: AsRef<[u8]>> NetshaPacket<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> NetshaPacket<T> {
        NetshaPacket { buffer }
    }

    /// Wraps a buffer after [`check_len`](Self::check_len).
    pub fn new_checked(buffer: T) -> Result<NetshaPacket<T>> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// `Truncated` if Query# or any NUM promises more bytes than the buffer holds (a
    /// lying Query# or NUM); `Malformed` if bytes follow the last declared block or the
    /// packet declares more than [`MAX_ANSWERS`] answers.
    pub fn check_len(&self) -> Result<()> {
        let data = self.buffer.as_ref();
        if data.is_empty() {
            return Err(Error::Truncated);
        }
        let mut at = HEADER_LEN;
        let mut answers = 0usize;
        for _ in 0..data[0] {
            let b = block_at(data, at)?;
            answers += b.num as usize;
            at += b.len();
        }
        if at != data.len() || answers > MAX_ANSWERS {
            return Err(Error::Malformed);
        }
        Ok(())
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Query#: the number of query blocks.
    pub fn query_count(&self) -> u8 {
        self.buffer.as_ref()[0]
    }

    /// The query blocks in order.
    pub fn blocks(&self) -> impl Iterator<Item = Block> + '_ {
        let data = self.buffer.as_ref();
        let mut at = HEADER_LEN;
        (0..self.query_count()).map_while(move |_| {
            let b = block_at(data, at).ok()?;
            at += b.len();
            Some(b)
        })
    }

    /// Answer `i` of a block of this packet.
    pub fn answer(&self, b: &Block, i: u16) -> (u32, f64) {
        answer_at(self.buffer.as_ref(), b.offset + BLOCK_HEADER_LEN + ANSWER_LEN * i as usize)
    }

    /// Total number of answers.
    pub fn answer_count(&self) -> usize {
        self.blocks().map(|b| b.num as usize).sum()
    }
}

/// The answers for one query in a packet.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryAnswers {
    /// Query ID.
    pub qid: u32,
    /// (data id, distance) pairs.
    pub answers: Vec<(u32, f64)>,
}

/// A parsed NetSHa payload.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NetshaRepr {
    /// The query blocks in order.
    pub queries: Vec<QueryAnswers>,
}

impl NetshaRepr {
    /// Parses a checked view.
    pub fn parse<T: AsRef<[u8]>>(packet: &NetshaPacket<T>) -> Result<NetshaRepr> {
        packet.check_len()?;
        let queries =
            packet.blocks().map(|b| QueryAnswers { qid: b.qid, answers: (0..b.num).map(|i| packet.answer(&b, i)).collect() }).collect();
        Ok(NetshaRepr { queries })
    }

    /// Bytes [`emit`](Self::emit) writes.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.queries.iter().map(|q| BLOCK_HEADER_LEN + ANSWER_LEN * q.answers.len()).sum::<usize>()
    }

    /// Writes the payload into `buf` (at least [`buffer_len`](Self::buffer_len) bytes).
    /// `Malformed` if there are more than 255 blocks, more than 65535 answers in a block,
    /// or more than [`MAX_ANSWERS`] in all; `Truncated` if `buf` is too short.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let total: usize = self.queries.iter().map(|q| q.answers.len()).sum();
        if self.queries.len() > 255 || total > MAX_ANSWERS || self.queries.iter().any(|q| q.answers.len() > u16::MAX as usize) {
            return Err(Error::Malformed);
        }
        if buf.len() < self.buffer_len() {
            return Err(Error::Truncated);
        }
        buf[0] = self.queries.len() as u8;
        let mut at = HEADER_LEN;
        for q in &self.queries {
            buf[at..at + 4].copy_from_slice(&q.qid.to_be_bytes());
            buf[at + 4..at + 6].copy_from_slice(&(q.answers.len() as u16).to_be_bytes());
            at += BLOCK_HEADER_LEN;
            for &(id, d) in &q.answers {
                put_answer(buf, at, id, d);
                at += ANSWER_LEN;
            }
        }
        Ok(())
    }
}

// ---- query packets (agent → servers, through the switch's server selection, §4) ----------

/// UDP destination port of NetSHa query packets (the servers' port); answers go elsewhere.
pub const QUERY_PORT: u16 = 7000;
/// Byte offsets of a query packet's fields (see [`QueryPacket`]): the one layout the host
/// code and the switch program share.
pub mod query_field {
    /// Query id.
    pub const QID: usize = 0;
    /// L, the number of bucket keys.
    pub const TABLES: usize = 4;
    /// The first bucket key.
    pub const KEYS: usize = 5;
}

/// Most LSH tables a query packet carries (one 8-byte bucket key each).
pub const MAX_TABLES: usize = 32;
/// Length of a query packet's fixed header (QID and L).
pub const QUERY_HEADER_LEN: usize = 5;
/// Length of one bucket key.
pub const KEY_LEN: usize = 8;

/// A view of a NetSHa query packet (the UDP payload, ToS bit set, to [`QUERY_PORT`]):
///
/// ```text
/// QID (4 bytes) | L (1 byte) | L × bucket key (8 bytes) | DIM (2 bytes) | DIM × f32 (4 bytes)
/// ```
///
/// Big-endian. The switch reads QID, L and the keys (its selection tables, one per LSH
/// table); the vector after them is payload for the servers. After
/// [`new_checked`](Self::new_checked) every field lies inside the buffer, which ends
/// exactly after the vector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryPacket<T: AsRef<[u8]>> {
    buffer: T,
}

/// Bytes of a query packet's header up to and including DIM, for `l` tables.
pub const fn query_header_len(l: usize) -> usize {
    QUERY_HEADER_LEN + KEY_LEN * l + 2
}

impl<T: AsRef<[u8]>> QueryPacket<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> QueryPacket<T> {
        QueryPacket { buffer }
    }

    /// Wraps a buffer after [`check_len`](Self::check_len).
    pub fn new_checked(buffer: T) -> Result<QueryPacket<T>> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// `Truncated` if L or DIM promise more bytes than the buffer holds; `Malformed` if L is
    /// 0 or above [`MAX_TABLES`], or bytes follow the vector.
    pub fn check_len(&self) -> Result<()> {
        let data = self.buffer.as_ref();
        if data.len() < QUERY_HEADER_LEN {
            return Err(Error::Truncated);
        }
        let l = data[query_field::TABLES] as usize;
        if l == 0 || l > MAX_TABLES {
            return Err(Error::Malformed);
        }
        let h = query_header_len(l);
        if data.len() < h {
            return Err(Error::Truncated);
        }
        let dim = u16::from_be_bytes([data[h - 2], data[h - 1]]) as usize;
        let end = h + 4 * dim;
        if data.len() < end {
            return Err(Error::Truncated);
        }
        if data.len() != end {
            return Err(Error::Malformed);
        }
        Ok(())
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Query ID.
    pub fn qid(&self) -> u32 {
        let d = self.buffer.as_ref();
        u32::from_be_bytes([d[0], d[1], d[2], d[3]])
    }

    /// L: the number of LSH tables (bucket keys).
    pub fn table_count(&self) -> u8 {
        self.buffer.as_ref()[4]
    }

    /// The query's bucket key in LSH table `t` (`t` < L).
    pub fn key(&self, t: usize) -> u64 {
        let at = QUERY_HEADER_LEN + KEY_LEN * t;
        let mut k = [0u8; 8];
        k.copy_from_slice(&self.buffer.as_ref()[at..at + 8]);
        u64::from_be_bytes(k)
    }

    /// DIM: the vector's length.
    pub fn dim(&self) -> u16 {
        let h = query_header_len(self.table_count() as usize);
        let d = self.buffer.as_ref();
        u16::from_be_bytes([d[h - 2], d[h - 1]])
    }

    /// Component `i` of the query vector (`i` < DIM).
    pub fn component(&self, i: usize) -> f32 {
        let at = query_header_len(self.table_count() as usize) + 4 * i;
        let d = self.buffer.as_ref();
        f32::from_bits(u32::from_be_bytes([d[at], d[at + 1], d[at + 2], d[at + 3]]))
    }
}

/// A parsed NetSHa query packet.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct QueryRepr {
    /// Query ID.
    pub qid: u32,
    /// One bucket key per LSH table.
    pub keys: Vec<u64>,
    /// The query vector.
    pub vector: Vec<f32>,
}

impl QueryRepr {
    /// Parses a checked view.
    pub fn parse<T: AsRef<[u8]>>(packet: &QueryPacket<T>) -> Result<QueryRepr> {
        packet.check_len()?;
        Ok(QueryRepr {
            qid: packet.qid(),
            keys: (0..packet.table_count() as usize).map(|t| packet.key(t)).collect(),
            vector: (0..packet.dim() as usize).map(|i| packet.component(i)).collect(),
        })
    }

    /// Bytes [`emit`](Self::emit) writes.
    pub fn buffer_len(&self) -> usize {
        query_header_len(self.keys.len()) + 4 * self.vector.len()
    }

    /// Writes the payload into `buf`. `Malformed` if there are no keys or more than
    /// [`MAX_TABLES`], or more than 65535 components; `Truncated` if `buf` is too short.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        if self.keys.is_empty() || self.keys.len() > MAX_TABLES || self.vector.len() > u16::MAX as usize {
            return Err(Error::Malformed);
        }
        if buf.len() < self.buffer_len() {
            return Err(Error::Truncated);
        }
        buf[0..4].copy_from_slice(&self.qid.to_be_bytes());
        buf[4] = self.keys.len() as u8;
        let mut at = QUERY_HEADER_LEN;
        for k in &self.keys {
            buf[at..at + 8].copy_from_slice(&k.to_be_bytes());
            at += KEY_LEN;
        }
        buf[at..at + 2].copy_from_slice(&(self.vector.len() as u16).to_be_bytes());
        at += 2;
        for x in &self.vector {
            buf[at..at + 4].copy_from_slice(&x.to_bits().to_be_bytes());
            at += 4;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> NetshaRepr {
        NetshaRepr {
            queries: vec![
                QueryAnswers { qid: 7, answers: vec![(1, 0.5), (2, 1.25)] },
                QueryAnswers { qid: 9, answers: vec![] },
                QueryAnswers { qid: 0xFFFF_FFFE, answers: vec![(3, 2.0)] },
            ],
        }
    }

    #[test]
    fn round_trip() {
        let r = sample();
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut buf).unwrap();
        assert_eq!(buf.len(), 1 + 6 + 24 + 6 + 6 + 12);
        let p = NetshaPacket::new_checked(&buf[..]).unwrap();
        assert_eq!(p.query_count(), 3);
        assert_eq!(p.answer_count(), 3);
        assert_eq!(NetshaRepr::parse(&p).unwrap(), r);
    }

    #[test]
    fn lying_lengths_are_errors() {
        let r = sample();
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut buf).unwrap();
        // NUM larger than the payload.
        let mut b = buf.clone();
        b[1 + 4..1 + 6].copy_from_slice(&3u16.to_be_bytes());
        assert_eq!(NetshaPacket::new_checked(&b[..]).unwrap_err(), Error::Truncated);
        // Query# larger than the blocks present.
        let mut b = buf.clone();
        b[0] = 4;
        assert_eq!(NetshaPacket::new_checked(&b[..]).unwrap_err(), Error::Truncated);
        // Query# smaller: bytes left over.
        let mut b = buf.clone();
        b[0] = 2;
        assert_eq!(NetshaPacket::new_checked(&b[..]).unwrap_err(), Error::Malformed);
        // Empty and one-byte-short buffers.
        assert_eq!(NetshaPacket::new_checked(&[][..]).unwrap_err(), Error::Truncated);
        assert!(NetshaPacket::new_checked(&buf[..buf.len() - 1]).is_err());
    }

    #[test]
    fn at_most_120_answers() {
        let q = QueryAnswers { qid: 1, answers: (0..121).map(|i| (i, i as f64)).collect() };
        let r = NetshaRepr { queries: vec![q] };
        let mut buf = vec![0u8; r.buffer_len()];
        assert_eq!(r.emit(&mut buf), Err(Error::Malformed));
        assert_eq!(1 + 6 + 120 * 12, 1447, "120 answers fit a 1500-byte frame with Ethernet, IPv4 and UDP");
    }

    #[test]
    fn query_round_trip_and_lies() {
        let r = QueryRepr { qid: 42, keys: vec![1, u64::MAX, 0x0123_4567_89AB_CDEF], vector: vec![0.5, -1.0] };
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut buf).unwrap();
        assert_eq!(buf.len(), 5 + 24 + 2 + 8);
        let p = QueryPacket::new_checked(&buf[..]).unwrap();
        assert_eq!((p.qid(), p.table_count(), p.key(1), p.dim()), (42, 3, u64::MAX, 2));
        assert_eq!(QueryRepr::parse(&p).unwrap(), r);
        // L larger than the keys present, or zero.
        let mut b = buf.clone();
        b[4] = 5;
        assert_eq!(QueryPacket::new_checked(&b[..]).unwrap_err(), Error::Truncated);
        b[4] = 0;
        assert_eq!(QueryPacket::new_checked(&b[..]).unwrap_err(), Error::Malformed);
        // DIM lying either way.
        let mut b = buf.clone();
        b[29..31].copy_from_slice(&3u16.to_be_bytes());
        assert_eq!(QueryPacket::new_checked(&b[..]).unwrap_err(), Error::Truncated);
        b[29..31].copy_from_slice(&1u16.to_be_bytes());
        assert_eq!(QueryPacket::new_checked(&b[..]).unwrap_err(), Error::Malformed);
        assert_eq!(QueryPacket::new_checked(&buf[..3]).unwrap_err(), Error::Truncated);
        assert_eq!(QueryRepr { qid: 1, keys: vec![], vector: vec![] }.emit(&mut buf), Err(Error::Malformed));
    }
}
