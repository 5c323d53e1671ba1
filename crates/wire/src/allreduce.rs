//! SwitchML-style allreduce packets (UDP destination port [`UDP_PORT`]): one worker's
//! contribution of [`ELEMS`] 32-bit integers to one aggregation slot, and the switch's
//! result for that slot.
//!
//! Layout of the UDP payload (all integers big-endian):
//!
//! ```text
//!  0  job     u16   job id: selects the job's memory partition (pool of slots)
//!  2  flags   u8    RESULT 0x01 · MAX 0x02 (aggregate with MAX, not SUM)
//!  3  ver     u8    shadow copy of the slot: 0 or 1 (alternates per use of the slot)
//!  4  worker  u16   worker id within the job, 0..n
//!  6  slot    u16   slot within the job's pool
//!  8  offset  u32   chunk number within the tensor (the host's, carried through)
//! 12  values  ELEMS x i32
//! ```
//!
//! Ethernet, IPv4, UDP and this payload make 42 + 12 + 128 = 182 bytes, within the 256 a
//! Tofino parser reaches. The field offsets are in [`field`], used by hosts and the switch.

use crate::error::{Error, Result};

/// UDP destination port the switch classifies as allreduce.
pub const UDP_PORT: u16 = 7074;
/// 32-bit elements per packet (SwitchML's 32: one register array per element, four per
/// stage, eight stages).
pub const ELEMS: usize = 32;

/// Byte offsets of the fields in the UDP payload.
pub mod field {
    /// Job id (u16).
    pub const JOB: usize = 0;
    /// Flags (u8).
    pub const FLAGS: usize = 2;
    /// Shadow copy (u8).
    pub const VER: usize = 3;
    /// Worker id (u16).
    pub const WORKER: usize = 4;
    /// Slot (u16).
    pub const SLOT: usize = 6;
    /// Chunk number (u32).
    pub const OFFSET: usize = 8;
    /// First value (i32 each).
    pub const VALUES: usize = 12;
}

/// Header bytes before the values.
pub const HEADER_LEN: usize = field::VALUES;
/// Whole UDP payload.
pub const PACKET_LEN: usize = HEADER_LEN + 4 * ELEMS;

/// Flag bits.
pub mod flags {
    /// Switch to worker: the slot's aggregate.
    pub const RESULT: u8 = 0x01;
    /// Aggregate with MAX (unsigned) instead of a wrapping SUM: the exponent round.
    pub const MAX: u8 = 0x02;
    /// Every defined bit.
    pub const ALL: u8 = RESULT | MAX;
}

/// A read/write view of an allreduce packet.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// A view without checks (getters may panic on a short buffer).
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }
    /// A view after [`Packet::check_len`].
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let p = Packet::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }
    /// The buffer holds the whole packet.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < PACKET_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }
    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    fn u16_at(&self, at: usize) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[at], b[at + 1]])
    }
    /// Job id.
    pub fn job(&self) -> u16 {
        self.u16_at(field::JOB)
    }
    /// Flag bits ([`flags`]).
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }
    /// Shadow copy (0 or 1 on a well-formed packet).
    pub fn ver(&self) -> u8 {
        self.buffer.as_ref()[field::VER]
    }
    /// Worker id.
    pub fn worker(&self) -> u16 {
        self.u16_at(field::WORKER)
    }
    /// Slot within the job's pool.
    pub fn slot(&self) -> u16 {
        self.u16_at(field::SLOT)
    }
    /// Chunk number.
    pub fn offset(&self) -> u32 {
        let b = self.buffer.as_ref();
        u32::from_be_bytes([b[field::OFFSET], b[field::OFFSET + 1], b[field::OFFSET + 2], b[field::OFFSET + 3]])
    }
    /// Value `i` (`i < ELEMS`).
    pub fn value(&self, i: usize) -> i32 {
        let at = field::VALUES + 4 * i;
        let b = self.buffer.as_ref();
        i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }
    /// Every value.
    pub fn values(&self) -> [i32; ELEMS] {
        std::array::from_fn(|i| self.value(i))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn set_u16(&mut self, at: usize, v: u16) {
        self.buffer.as_mut()[at..at + 2].copy_from_slice(&v.to_be_bytes());
    }
    /// Set the job id.
    pub fn set_job(&mut self, v: u16) {
        self.set_u16(field::JOB, v)
    }
    /// Set the flags.
    pub fn set_flags(&mut self, v: u8) {
        self.buffer.as_mut()[field::FLAGS] = v;
    }
    /// Set the shadow copy.
    pub fn set_ver(&mut self, v: u8) {
        self.buffer.as_mut()[field::VER] = v;
    }
    /// Set the worker id.
    pub fn set_worker(&mut self, v: u16) {
        self.set_u16(field::WORKER, v)
    }
    /// Set the slot.
    pub fn set_slot(&mut self, v: u16) {
        self.set_u16(field::SLOT, v)
    }
    /// Set the chunk number.
    pub fn set_offset(&mut self, v: u32) {
        self.buffer.as_mut()[field::OFFSET..field::OFFSET + 4].copy_from_slice(&v.to_be_bytes());
    }
    /// Set value `i`.
    pub fn set_value(&mut self, i: usize, v: i32) {
        let at = field::VALUES + 4 * i;
        self.buffer.as_mut()[at..at + 4].copy_from_slice(&v.to_be_bytes());
    }
}

/// A parsed allreduce packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repr {
    /// Job id.
    pub job: u16,
    /// Flag bits ([`flags`]).
    pub flags: u8,
    /// Shadow copy, 0 or 1.
    pub ver: u8,
    /// Worker id.
    pub worker: u16,
    /// Slot.
    pub slot: u16,
    /// Chunk number.
    pub offset: u32,
    /// The values.
    pub values: [i32; ELEMS],
}

impl Repr {
    /// Parse a checked view: undefined flags or a version other than 0/1 are malformed.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr> {
        p.check_len()?;
        if p.flags() & !flags::ALL != 0 || p.ver() > 1 {
            return Err(Error::Malformed);
        }
        Ok(Repr {
            job: p.job(),
            flags: p.flags(),
            ver: p.ver(),
            worker: p.worker(),
            slot: p.slot(),
            offset: p.offset(),
            values: p.values(),
        })
    }
    /// Bytes [`Repr::emit`] writes.
    pub const fn buffer_len(&self) -> usize {
        PACKET_LEN
    }
    /// Write into a view of at least [`PACKET_LEN`] bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        p.set_job(self.job);
        p.set_flags(self.flags);
        p.set_ver(self.ver);
        p.set_worker(self.worker);
        p.set_slot(self.slot);
        p.set_offset(self.offset);
        for (i, v) in self.values.iter().enumerate() {
            p.set_value(i, *v);
        }
    }
    /// The packet as a new buffer.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = vec![0u8; PACKET_LEN];
        self.emit(&mut Packet::new_unchecked(&mut v[..]));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn layout() {
        let mut values = [0i32; ELEMS];
        values[0] = -1;
        values[31] = 0x0102_0304;
        let r = Repr { job: 0x0A0B, flags: flags::MAX, ver: 1, worker: 0x0C0D, slot: 0x0E0F, offset: 0x1011_1213, values };
        let b = r.to_bytes();
        assert_eq!(b.len(), 140);
        assert_eq!(&b[..12], &[0x0A, 0x0B, 2, 1, 0x0C, 0x0D, 0x0E, 0x0F, 0x10, 0x11, 0x12, 0x13]);
        assert_eq!(&b[12..16], &[0xFF; 4]);
        assert_eq!(&b[136..140], &[1, 2, 3, 4]);
        assert_eq!(Repr::parse(&Packet::new_checked(&b[..]).unwrap()).unwrap(), r);
        assert_eq!(42 + PACKET_LEN, 182, "within a Tofino parser's 256 bytes");
    }

    #[test]
    fn malformed_and_truncated() {
        let b = Repr { job: 1, flags: 0, ver: 0, worker: 0, slot: 0, offset: 0, values: [0; ELEMS] }.to_bytes();
        assert_eq!(Packet::new_checked(&b[..PACKET_LEN - 1]).unwrap_err(), Error::Truncated);
        let mut bad = b.clone();
        bad[field::VER] = 2;
        assert_eq!(Repr::parse(&Packet::new_checked(&bad[..]).unwrap()).unwrap_err(), Error::Malformed);
        let mut bad = b;
        bad[field::FLAGS] = 0x80;
        assert_eq!(Repr::parse(&Packet::new_checked(&bad[..]).unwrap()).unwrap_err(), Error::Malformed);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(p) = Packet::new_checked(&data[..]) {
                let _ = (p.job(), p.flags(), p.ver(), p.worker(), p.slot(), p.offset(), p.values());
                if let Ok(r) = Repr::parse(&p) {
                    prop_assert_eq!(Repr::parse(&Packet::new_checked(&r.to_bytes()[..]).unwrap()).unwrap(), r);
                }
            } else {
                prop_assert!(data.len() < PACKET_LEN);
            }
        }

        #[test]
        fn emit_parse_roundtrip(job in any::<u16>(), fl in 0u8..=flags::ALL, ver in 0u8..=1, worker in any::<u16>(),
                                slot in any::<u16>(), offset in any::<u32>(), values in proptest::array::uniform32(any::<i32>())) {
            let r = Repr { job, flags: fl, ver, worker, slot, offset, values };
            let b = r.to_bytes();
            prop_assert_eq!(b.len(), r.buffer_len());
            prop_assert_eq!(Repr::parse(&Packet::new_checked(&b[..]).unwrap()).unwrap(), r);
        }
    }
}
