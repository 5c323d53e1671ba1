//! Hare messages: key-value queries, lock requests and the packet-based plane interactions
//! (OO-Stat fetch/clear, state manager, application data movement) of the Hare paper
//! (hot-item offloading, §IV). One UDP payload format for all of them.
//!
//! ```text
//!  0      1      2        3          4            8           10     12         13      14     16
//! +------+------+--------+----------+------------+-----------+------+----------+-------+------+
//! |  op  |flags |key_len |key_field |    seq     | hit_index | aux  |value_len |status | rsvd |
//! +------+------+--------+----------+------------+-----------+------+----------+-------+------+
//! | key: key_field bytes (key_len meaningful, the rest zero) | value: value_len bytes         |
//! ```
//!
//! The key occupies a fixed-width field (`key_field`, the deployment's key size) so the
//! switch parser reaches the value at a fixed offset; `key_len` tells keys of different
//! lengths apart (the switch matches on it too, so "a" and "a\0" are different objects).

use crate::bytes;
use crate::error::{Error, Result};

/// UDP port of queries and control packets (servers and the switch listen here).
pub const PORT_SERVER: u16 = 7370;
/// UDP port of replies to clients.
pub const PORT_CLIENT: u16 = 7371;
/// Largest key field (bytes); the key length travels in one byte.
pub const MAX_KEY: usize = 255;
/// Largest value (bytes).
pub const MAX_VALUE: usize = 255;

/// Byte offsets of the header's fields, from the start of the header: the one layout
/// the host code (views and reprs) and the switch programs share.
#[allow(missing_docs)]
pub mod field {
    pub const OP: usize = 0;
    pub const FLAGS: usize = 1;
    pub const KEY_LEN: usize = 2;
    pub const KEY_FIELD: usize = 3;
    pub const SEQ: usize = 4;
    pub const HIT_INDEX: usize = 8;
    pub const AUX: usize = 10;
    pub const VALUE_LEN: usize = 12;
    pub const STATUS: usize = 13;
    pub const KEY: usize = 16;
}

/// Length of the fixed header.
pub const HEADER_LEN: usize = field::KEY;

/// The message kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Op {
    /// Client → server: read a key.
    Get = 1,
    /// Reply to a GET (from the server, or from the switch on a hit: flag `HIT`).
    GetReply = 2,
    /// Client → server: write a key (write-through on the switch).
    Put = 3,
    /// Server → client: the write is durable; carries key and value so the switch can
    /// refresh its copy.
    PutReply = 4,
    /// Client → lock server: acquire lock `key` in mode `status` (0 shared, 1 exclusive).
    Acquire = 5,
    /// Client → lock server: release lock `key`.
    Release = 6,
    /// Lock server or switch → client: the lock is granted.
    Grant = 7,
    /// Reply to a release.
    ReleaseAck = 8,
    /// Control: read the OO-Stat counter at `hit_index` (`status` 1: and clear it, 2: and
    /// halve it); the reply carries the count in `value` (4 bytes, big-endian).
    StatFetch = 16,
    /// Control: set the state-manager state of slot `hit_index` to `status`.
    StateSet = 17,
    /// Control: application data movement, server → switch (`datamv_server2switch`):
    /// write `value` into the slot `hit_index`.
    DataMvToSwitch = 18,
    /// Control: application data movement, switch → server (`datamv_switch2server`):
    /// read the slot `hit_index` into `value`.
    DataMvToServer = 19,
}

impl Op {
    /// The op for a byte, if known.
    pub fn from_u8(v: u8) -> Option<Op> {
        Some(match v {
            1 => Op::Get,
            2 => Op::GetReply,
            3 => Op::Put,
            4 => Op::PutReply,
            5 => Op::Acquire,
            6 => Op::Release,
            7 => Op::Grant,
            8 => Op::ReleaseAck,
            16 => Op::StatFetch,
            17 => Op::StateSet,
            18 => Op::DataMvToSwitch,
            19 => Op::DataMvToServer,
            _ => return None,
        })
    }

    /// Control messages between the control plane / servers and the switch.
    pub fn is_control(self) -> bool {
        (self as u8) >= 16
    }
}

/// Flag: answered by the switch.
pub const FLAG_HIT: u8 = 0x01;
/// Flag: a control message that the switch has processed (its reply).
pub const FLAG_DONE: u8 = 0x02;

/// A view of a Hare message.
///
/// After [`new_checked`](Self::new_checked): the header is present, `key_len <= key_field`
/// and the buffer holds `key_field + value_len` bytes after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps without checking (getters may panic on a short buffer).
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps after [`check_len`](Self::check_len).
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let p = Packet::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// `Truncated` when shorter than the header or its key and value; `Malformed` when
    /// `key_len > key_field`.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if b[field::KEY_LEN] > b[field::KEY_FIELD] {
            return Err(Error::Malformed);
        }
        if b.len() < HEADER_LEN + b[field::KEY_FIELD] as usize + b[field::VALUE_LEN] as usize {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// The op byte.
    pub fn op_raw(&self) -> u8 {
        self.buffer.as_ref()[field::OP]
    }
    /// The op, if known.
    pub fn op(&self) -> Option<Op> {
        Op::from_u8(self.op_raw())
    }
    /// Flags (`FLAG_HIT`, `FLAG_DONE`).
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }
    /// Meaningful key bytes.
    pub fn key_len(&self) -> u8 {
        self.buffer.as_ref()[field::KEY_LEN]
    }
    /// Width of the key field on the wire.
    pub fn key_field(&self) -> u8 {
        self.buffer.as_ref()[field::KEY_FIELD]
    }
    /// Request id chosen by the sender, echoed in the reply.
    pub fn seq(&self) -> u32 {
        let a: [u8; 4] = bytes::get_array(self.buffer.as_ref(), field::SEQ);
        u32::from_be_bytes(a)
    }
    /// Slot of the object on the switch (control messages; filled on a switch hit).
    pub fn hit_index(&self) -> u16 {
        bytes::get_u16(self.buffer.as_ref(), field::HIT_INDEX)
    }
    /// Sender-defined: client id for locks, counts for control replies.
    pub fn aux(&self) -> u16 {
        bytes::get_u16(self.buffer.as_ref(), field::AUX)
    }
    /// Length of the value.
    pub fn value_len(&self) -> u8 {
        self.buffer.as_ref()[field::VALUE_LEN]
    }
    /// Lock mode, state to set, or reply status.
    pub fn status(&self) -> u8 {
        self.buffer.as_ref()[field::STATUS]
    }
    /// The whole key field (padding included).
    pub fn key_field_bytes(&self) -> &[u8] {
        bytes::clamped(self.buffer.as_ref(), field::KEY, field::KEY + self.key_field() as usize)
    }
    /// The key (its meaningful bytes).
    pub fn key(&self) -> &[u8] {
        bytes::clamped(self.buffer.as_ref(), field::KEY, field::KEY + self.key_len() as usize)
    }
    /// The value.
    pub fn value(&self) -> &[u8] {
        let at = field::KEY + self.key_field() as usize;
        bytes::clamped(self.buffer.as_ref(), at, at + self.value_len() as usize)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the op.
    pub fn set_op(&mut self, op: Op) {
        self.buffer.as_mut()[field::OP] = op as u8;
    }
    /// Sets the flags.
    pub fn set_flags(&mut self, v: u8) {
        self.buffer.as_mut()[field::FLAGS] = v;
    }
    /// Sets the slot.
    pub fn set_hit_index(&mut self, v: u16) {
        bytes::set_u16(self.buffer.as_mut(), field::HIT_INDEX, v);
    }
    /// Sets `aux`.
    pub fn set_aux(&mut self, v: u16) {
        bytes::set_u16(self.buffer.as_mut(), field::AUX, v);
    }
    /// Sets the value length (the caller makes room for it).
    pub fn set_value_len(&mut self, v: u8) {
        self.buffer.as_mut()[field::VALUE_LEN] = v;
    }
    /// Sets the status.
    pub fn set_status(&mut self, v: u8) {
        self.buffer.as_mut()[field::STATUS] = v;
    }
    /// The value, writable.
    pub fn value_mut(&mut self) -> &mut [u8] {
        let at = field::KEY + self.key_field() as usize;
        let end = at + self.value_len() as usize;
        bytes::clamped_mut(self.buffer.as_mut(), at, end)
    }
}

/// A Hare message as plain values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repr {
    /// The message kind.
    pub op: Op,
    /// `FLAG_HIT`, `FLAG_DONE`.
    pub flags: u8,
    /// Request id, echoed in the reply.
    pub seq: u32,
    /// Slot on the switch.
    pub hit_index: u16,
    /// Client id (locks) or count (control replies).
    pub aux: u16,
    /// Lock mode, state to set, or reply status.
    pub status: u8,
    /// The key's meaningful bytes.
    pub key: Vec<u8>,
    /// Width of the key field on the wire (at least `key.len()`).
    pub key_field: u8,
    /// The value (empty for GET, ...).
    pub value: Vec<u8>,
}

impl Repr {
    /// Parse a checked view: `Unsupported` for an unknown op, `Malformed` when the key
    /// padding is not zero (two encodings of one key would be two objects on the switch).
    pub fn parse<T: AsRef<[u8]> + ?Sized>(p: &Packet<&T>) -> Result<Repr> {
        p.check_len()?;
        let op = p.op().ok_or(Error::Unsupported)?;
        let field = p.key_field_bytes();
        if field[p.key_len() as usize..].iter().any(|&b| b != 0) {
            return Err(Error::Malformed);
        }
        Ok(Repr {
            op,
            flags: p.flags(),
            seq: p.seq(),
            hit_index: p.hit_index(),
            aux: p.aux(),
            status: p.status(),
            key: p.key().to_vec(),
            key_field: p.key_field(),
            value: p.value().to_vec(),
        })
    }

    /// Bytes [`emit`](Self::emit) writes.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.key_field.max(self.key.len() as u8) as usize + self.value.len()
    }

    /// Write into `buf` (at least [`buffer_len`](Self::buffer_len) bytes). Keys longer
    /// than [`MAX_KEY`] or values longer than [`MAX_VALUE`] are `Malformed`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        if self.key.len() > MAX_KEY || self.value.len() > MAX_VALUE {
            return Err(Error::Malformed);
        }
        let n = self.buffer_len();
        if buf.len() < n {
            return Err(Error::Truncated);
        }
        let kf = self.key_field.max(self.key.len() as u8) as usize;
        buf[..n].fill(0);
        buf[field::OP] = self.op as u8;
        buf[field::FLAGS] = self.flags;
        buf[field::KEY_LEN] = self.key.len() as u8;
        buf[field::KEY_FIELD] = kf as u8;
        buf[field::SEQ..field::SEQ + 4].copy_from_slice(&self.seq.to_be_bytes());
        bytes::set_u16(buf, field::HIT_INDEX, self.hit_index);
        bytes::set_u16(buf, field::AUX, self.aux);
        buf[field::VALUE_LEN] = self.value.len() as u8;
        buf[field::STATUS] = self.status;
        buf[field::KEY..field::KEY + self.key.len()].copy_from_slice(&self.key);
        buf[field::KEY + kf..n].copy_from_slice(&self.value);
        Ok(())
    }

    /// Emit into a fresh vector.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut v = vec![0u8; self.buffer_len()];
        self.emit(&mut v)?;
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn get(key: &[u8], kf: u8) -> Repr {
        Repr { op: Op::Get, flags: 0, seq: 7, hit_index: 0, aux: 3, status: 0, key: key.to_vec(), key_field: kf, value: vec![] }
    }

    #[test]
    fn roundtrip_and_layout() {
        let mut r = get(b"user:42", 16);
        r.op = Op::Put;
        r.value = vec![9; 24];
        let b = r.to_bytes().unwrap();
        assert_eq!(b.len(), 16 + 16 + 24);
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.key(), b"user:42");
        assert_eq!(p.key_field_bytes().len(), 16);
        assert_eq!(p.value(), &[9; 24][..]);
        assert_eq!(Repr::parse(&p).unwrap(), r);
    }

    #[test]
    fn malformed_and_truncated() {
        let b = get(b"abc", 8).to_bytes().unwrap();
        assert_eq!(Packet::new_checked(&b[..10]).unwrap_err(), Error::Truncated);
        assert_eq!(Packet::new_checked(&b[..20]).unwrap_err(), Error::Truncated);
        let mut bad = b.clone();
        bad[2] = 9; // key_len > key_field
        assert_eq!(Packet::new_checked(&bad[..]).unwrap_err(), Error::Malformed);
        let mut pad = b.clone();
        pad[16 + 5] = 1; // non-zero padding
        assert_eq!(Repr::parse(&Packet::new_checked(&pad[..]).unwrap()).unwrap_err(), Error::Malformed);
        let mut op = b;
        op[0] = 99;
        assert_eq!(Repr::parse(&Packet::new_checked(&op[..]).unwrap()).unwrap_err(), Error::Unsupported);
        let long = get(&[1; 256], 0);
        assert!(long.to_bytes().is_err());
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..400)) {
            if let Ok(p) = Packet::new_checked(&data[..]) {
                let _ = (p.op(), p.seq(), p.hit_index(), p.aux(), p.status(), p.key(), p.value());
                if let Ok(r) = Repr::parse(&p) {
                    let again = r.to_bytes().unwrap();
                    prop_assert_eq!(Repr::parse(&Packet::new_checked(&again[..]).unwrap()).unwrap(), r);
                }
            }
        }

        #[test]
        fn emit_parse_roundtrip(key in proptest::collection::vec(1u8..=255, 0..100), pad in 0u8..50,
                                value in proptest::collection::vec(any::<u8>(), 0..128), seq in any::<u32>()) {
            let r = Repr { op: Op::PutReply, flags: FLAG_HIT, seq, hit_index: 5, aux: 1, status: 2,
                           key_field: key.len() as u8 + pad, key, value };
            let b = r.to_bytes().unwrap();
            prop_assert_eq!(Repr::parse(&Packet::new_checked(&b[..]).unwrap()).unwrap(), r);
        }
    }
}
