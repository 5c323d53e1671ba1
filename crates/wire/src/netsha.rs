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
}
