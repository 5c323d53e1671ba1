//! ICMPv4, just enough for ping: the view reads any message's common header; the repr
//! models echo request and echo reply only.

use core::fmt;

use crate::bytes;
use crate::checksum;
use crate::error::{Error, Result};

/// The ICMPv4 message type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Icmpv4Message {
    /// Echo reply, 0.
    EchoReply,
    /// Destination unreachable, 3.
    DstUnreachable,
    /// Redirect, 5.
    Redirect,
    /// Echo request, 8.
    EchoRequest,
    /// Time exceeded, 11.
    TimeExceeded,
    /// Parameter problem, 12.
    ParamProblem,
    /// Any other value. Never holds one of the values above (use `From<u8>`).
    Unknown(u8),
}

impl From<u8> for Icmpv4Message {
    #[inline]
    fn from(value: u8) -> Icmpv4Message {
        match value {
            0 => Icmpv4Message::EchoReply,
            3 => Icmpv4Message::DstUnreachable,
            5 => Icmpv4Message::Redirect,
            8 => Icmpv4Message::EchoRequest,
            11 => Icmpv4Message::TimeExceeded,
            12 => Icmpv4Message::ParamProblem,
            other => Icmpv4Message::Unknown(other),
        }
    }
}

impl From<Icmpv4Message> for u8 {
    #[inline]
    fn from(value: Icmpv4Message) -> u8 {
        match value {
            Icmpv4Message::EchoReply => 0,
            Icmpv4Message::DstUnreachable => 3,
            Icmpv4Message::Redirect => 5,
            Icmpv4Message::EchoRequest => 8,
            Icmpv4Message::TimeExceeded => 11,
            Icmpv4Message::ParamProblem => 12,
            Icmpv4Message::Unknown(other) => other,
        }
    }
}

impl fmt::Display for Icmpv4Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Icmpv4Message::EchoReply => f.write_str("echo reply"),
            Icmpv4Message::DstUnreachable => f.write_str("destination unreachable"),
            Icmpv4Message::Redirect => f.write_str("redirect"),
            Icmpv4Message::EchoRequest => f.write_str("echo request"),
            Icmpv4Message::TimeExceeded => f.write_str("time exceeded"),
            Icmpv4Message::ParamProblem => f.write_str("parameter problem"),
            Icmpv4Message::Unknown(v) => write!(f, "type {v}"),
        }
    }
}

/// Byte offsets of the ICMPv4 header fields (identifier and sequence number are the
/// echo messages' reading of the four "rest of header" bytes).
mod field {
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: usize = 2;
    pub const ECHO_IDENT: usize = 4;
    pub const ECHO_SEQNO: usize = 6;
    pub const DATA: usize = 8;
}

/// A view of an ICMPv4 message. The message extends to the end of the buffer (pass the
/// IPv4 payload), and the checksum covers all of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Icmpv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Icmpv4Packet<T> {
    /// Length of the header every ICMPv4 message has.
    pub const HEADER_LEN: usize = field::DATA;

    /// Wraps a buffer without checking it; getters panic if it is shorter than the header.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Icmpv4Packet<T> {
        Icmpv4Packet { buffer }
    }

    /// Wraps a buffer after [`check_len`](Self::check_len).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Icmpv4Packet<T>> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// `Truncated` if the buffer is shorter than the 8-byte header.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < field::DATA {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Gives the buffer back.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Message type.
    #[inline]
    pub fn msg_type(&self) -> Icmpv4Message {
        Icmpv4Message::from(self.buffer.as_ref()[field::TYPE])
    }

    /// Message code (0 for echo).
    #[inline]
    pub fn msg_code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    /// The checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        bytes::get_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Echo identifier (meaningful for echo messages only).
    #[inline]
    pub fn echo_ident(&self) -> u16 {
        bytes::get_u16(self.buffer.as_ref(), field::ECHO_IDENT)
    }

    /// Echo sequence number (meaningful for echo messages only).
    #[inline]
    pub fn echo_seq_no(&self) -> u16 {
        bytes::get_u16(self.buffer.as_ref(), field::ECHO_SEQNO)
    }

    /// Everything after the 8-byte header.
    #[inline]
    pub fn data(&self) -> &[u8] {
        bytes::clamped(self.buffer.as_ref(), field::DATA, usize::MAX)
    }

    /// Whether the checksum over the whole message is correct.
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        checksum::sum(self.buffer.as_ref()) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv4Packet<T> {
    /// Sets the message type.
    #[inline]
    pub fn set_msg_type(&mut self, value: Icmpv4Message) {
        self.buffer.as_mut()[field::TYPE] = value.into();
    }

    /// Sets the message code.
    #[inline]
    pub fn set_msg_code(&mut self, value: u8) {
        self.buffer.as_mut()[field::CODE] = value;
    }

    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, value: u16) {
        bytes::set_u16(self.buffer.as_mut(), field::CHECKSUM, value);
    }

    /// Sets the echo identifier.
    #[inline]
    pub fn set_echo_ident(&mut self, value: u16) {
        bytes::set_u16(self.buffer.as_mut(), field::ECHO_IDENT, value);
    }

    /// Sets the echo sequence number.
    #[inline]
    pub fn set_echo_seq_no(&mut self, value: u16) {
        bytes::set_u16(self.buffer.as_mut(), field::ECHO_SEQNO, value);
    }

    /// The data after the header, writable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        bytes::clamped_mut(self.buffer.as_mut(), field::DATA, usize::MAX)
    }

    /// Recomputes and stores the checksum over the whole buffer.
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let value = checksum::checksum(self.buffer.as_ref());
        self.set_checksum(value);
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Icmpv4Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The parsed form of an ICMPv4 echo message; `data` borrows from the packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Icmpv4Repr<'a> {
    /// Echo request (type 8, code 0).
    EchoRequest {
        /// Identifier, chosen by the sender to match replies.
        ident: u16,
        /// Sequence number.
        seq_no: u16,
        /// Data, echoed back by the reply.
        data: &'a [u8],
    },
    /// Echo reply (type 0, code 0).
    EchoReply {
        /// Identifier copied from the request.
        ident: u16,
        /// Sequence number copied from the request.
        seq_no: u16,
        /// Data copied from the request.
        data: &'a [u8],
    },
}

impl<'a> Icmpv4Repr<'a> {
    /// Parses an echo request or reply and verifies its checksum.
    ///
    /// Errors: `Truncated` for fewer than 8 bytes; `Checksum` if the checksum is wrong;
    /// `Malformed` for an echo message with a non-zero code; `Unsupported` for every other
    /// message type.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Icmpv4Packet<&'a T>) -> Result<Icmpv4Repr<'a>> {
        packet.check_len()?;
        if !packet.verify_checksum() {
            return Err(Error::Checksum);
        }
        let whole: &'a [u8] = packet.buffer.as_ref();
        let data = bytes::clamped(whole, field::DATA, usize::MAX);
        let (ident, seq_no) = (packet.echo_ident(), packet.echo_seq_no());
        match (packet.msg_type(), packet.msg_code()) {
            (Icmpv4Message::EchoRequest, 0) => Ok(Icmpv4Repr::EchoRequest { ident, seq_no, data }),
            (Icmpv4Message::EchoReply, 0) => Ok(Icmpv4Repr::EchoReply { ident, seq_no, data }),
            (Icmpv4Message::EchoRequest | Icmpv4Message::EchoReply, _) => Err(Error::Malformed),
            _ => Err(Error::Unsupported),
        }
    }

    /// Bytes [`emit`](Self::emit) writes: 8-byte header plus data.
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        match self {
            Icmpv4Repr::EchoRequest { data, .. } | Icmpv4Repr::EchoReply { data, .. } => field::DATA + data.len(),
        }
    }

    /// Writes the message and its checksum. `packet` should be exactly
    /// [`buffer_len`](Self::buffer_len) bytes, since the checksum covers the whole buffer;
    /// it panics if shorter.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut Icmpv4Packet<&mut T>) {
        let (msg_type, ident, seq_no, data) = match *self {
            Icmpv4Repr::EchoRequest { ident, seq_no, data } => (Icmpv4Message::EchoRequest, ident, seq_no, data),
            Icmpv4Repr::EchoReply { ident, seq_no, data } => (Icmpv4Message::EchoReply, ident, seq_no, data),
        };
        packet.set_msg_type(msg_type);
        packet.set_msg_code(0);
        packet.set_echo_ident(ident);
        packet.set_echo_seq_no(seq_no);
        packet.data_mut()[..data.len()].copy_from_slice(data);
        packet.fill_checksum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Echo request, ident 0x1234, seq 1, data "abcd"; checksum filled by hand below.
    const ECHO: [u8; 12] = [0x08, 0x00, 0x00, 0x00, 0x12, 0x34, 0x00, 0x01, b'a', b'b', b'c', b'd'];

    fn hand_checksum() -> u16 {
        // 0x0800 + 0x1234 + 0x0001 + 0x6162 + 0x6364, no carries beyond 16 bits to fold
        // except the one handled here.
        let mut acc: u32 = 0x0800 + 0x1234 + 0x0001 + 0x6162 + 0x6364;
        acc = (acc & 0xffff) + (acc >> 16);
        !(acc as u16)
    }

    fn echo_with_checksum() -> [u8; 12] {
        let mut e = ECHO;
        e[2..4].copy_from_slice(&hand_checksum().to_be_bytes());
        e
    }

    #[test]
    fn read_fields() {
        let bytes = echo_with_checksum();
        let p = Icmpv4Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(p.msg_type(), Icmpv4Message::EchoRequest);
        assert_eq!(p.msg_code(), 0);
        assert_eq!(p.checksum(), hand_checksum());
        assert_eq!(p.echo_ident(), 0x1234);
        assert_eq!(p.echo_seq_no(), 1);
        assert_eq!(p.data(), b"abcd");
        assert!(p.verify_checksum());
    }

    #[test]
    fn repr_parse_and_emit() {
        let bytes = echo_with_checksum();
        let p = Icmpv4Packet::new_checked(&bytes[..]).unwrap();
        let repr = Icmpv4Repr::parse(&p).unwrap();
        assert_eq!(repr, Icmpv4Repr::EchoRequest { ident: 0x1234, seq_no: 1, data: b"abcd" });
        assert_eq!(repr.buffer_len(), 12);
        let mut out = [0u8; 12];
        repr.emit(&mut Icmpv4Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
    }

    #[test]
    fn errors() {
        assert_eq!(Icmpv4Packet::new_checked(&ECHO[..7]).unwrap_err(), Error::Truncated);
        let p = Icmpv4Packet::new_checked(&ECHO[..]).unwrap();
        assert_eq!(Icmpv4Repr::parse(&p), Err(Error::Checksum));

        let mut b = ECHO;
        b[1] = 1;
        let mut p = Icmpv4Packet::new_unchecked(&mut b[..]);
        p.fill_checksum();
        let p = Icmpv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Icmpv4Repr::parse(&p), Err(Error::Malformed));

        let mut b = ECHO;
        b[0] = 3;
        let mut p = Icmpv4Packet::new_unchecked(&mut b[..]);
        p.fill_checksum();
        let p = Icmpv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.msg_type(), Icmpv4Message::DstUnreachable);
        assert_eq!(Icmpv4Repr::parse(&p), Err(Error::Unsupported));
    }

    #[test]
    fn reply_roundtrip() {
        let repr = Icmpv4Repr::EchoReply { ident: 7, seq_no: 0xffff, data: &[1, 2, 3] };
        let mut out = vec![0u8; repr.buffer_len()];
        repr.emit(&mut Icmpv4Packet::new_unchecked(&mut out[..]));
        assert_eq!(out[0], 0);
        let p = Icmpv4Packet::new_checked(&out[..]).unwrap();
        assert_eq!(Icmpv4Repr::parse(&p), Ok(repr));
    }
}
