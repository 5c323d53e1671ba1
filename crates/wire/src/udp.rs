//! UDP datagrams over IPv4.

use crate::bytes;
use crate::checksum;
use crate::error::{Error, Result};
use crate::ipv4::{Ipv4Address, Protocol};

/// Byte offsets of the header's fields, from the start of the header: the one layout
/// the host code (views and reprs) and the switch programs share.
#[allow(missing_docs)]
pub mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const LENGTH: usize = 4;
    pub const CHECKSUM: usize = 6;
    pub const PAYLOAD: usize = 8;
}

/// A view of a UDP datagram (header and payload).
///
/// After [`new_checked`](Self::new_checked), `8 <= len <= buffer length`; the payload ends
/// at `len`, so trailing bytes in the buffer are ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Length of the UDP header.
    pub const HEADER_LEN: usize = field::PAYLOAD;

    /// Wraps a buffer without checking it; getters panic if it is shorter than the header,
    /// and the payload accessors are clamped to the buffer.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> UdpPacket<T> {
        UdpPacket { buffer }
    }

    /// Wraps a buffer after [`check_len`](Self::check_len).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<UdpPacket<T>> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// `Truncated` if the buffer is shorter than the header or than the length field;
    /// `Malformed` if the length field is below 8.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let buffer_len = self.buffer.as_ref().len();
        if buffer_len < field::PAYLOAD {
            return Err(Error::Truncated);
        }
        let len = usize::from(self.len());
        if len < field::PAYLOAD {
            Err(Error::Malformed)
        } else if len > buffer_len {
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

    /// Source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        bytes::get_u16(self.buffer.as_ref(), field::SRC_PORT)
    }

    /// Destination port (the switch parser classifies in-network traffic by it).
    #[inline]
    pub fn dst_port(&self) -> u16 {
        bytes::get_u16(self.buffer.as_ref(), field::DST_PORT)
    }

    /// The length field: header plus payload, in bytes.
    #[inline]
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> u16 {
        bytes::get_u16(self.buffer.as_ref(), field::LENGTH)
    }

    /// The checksum field (0 means the sender computed none).
    #[inline]
    pub fn checksum(&self) -> u16 {
        bytes::get_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// The payload: from the end of the header to the length field.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        bytes::clamped(self.buffer.as_ref(), field::PAYLOAD, usize::from(self.len()))
    }

    /// Header and payload as covered by the checksum.
    #[inline]
    fn datagram(&self) -> &[u8] {
        bytes::clamped(self.buffer.as_ref(), 0, usize::from(self.len()))
    }

    /// Sum (not complemented) of pseudo header, header and payload.
    #[inline]
    fn full_sum(&self, src_addr: Ipv4Address, dst_addr: Ipv4Address) -> u16 {
        let datagram = self.datagram();
        // The pseudo header carries the length field as sent; `datagram` is the same
        // length unless the view was mutated past its buffer.
        checksum::combine(&[checksum::pseudo_header_ipv4(src_addr, dst_addr, Protocol::Udp, self.len()), checksum::sum(datagram)])
    }

    /// Whether the checksum is correct for a datagram from `src_addr` to `dst_addr`. A
    /// checksum of 0 means "not computed" over IPv4 and is accepted.
    #[inline]
    pub fn verify_checksum(&self, src_addr: Ipv4Address, dst_addr: Ipv4Address) -> bool {
        self.checksum() == 0 || self.full_sum(src_addr, dst_addr) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    /// Sets the source port.
    #[inline]
    pub fn set_src_port(&mut self, value: u16) {
        bytes::set_u16(self.buffer.as_mut(), field::SRC_PORT, value);
    }

    /// Sets the destination port.
    #[inline]
    pub fn set_dst_port(&mut self, value: u16) {
        bytes::set_u16(self.buffer.as_mut(), field::DST_PORT, value);
    }

    /// Sets the length field.
    #[inline]
    pub fn set_len(&mut self, value: u16) {
        bytes::set_u16(self.buffer.as_mut(), field::LENGTH, value);
    }

    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, value: u16) {
        bytes::set_u16(self.buffer.as_mut(), field::CHECKSUM, value);
    }

    /// The payload, writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = usize::from(self.len());
        bytes::clamped_mut(self.buffer.as_mut(), field::PAYLOAD, end)
    }

    /// Computes and stores the checksum for a datagram from `src_addr` to `dst_addr`. A
    /// computed 0 is stored as `0xFFFF`, since 0 on the wire means "no checksum".
    #[inline]
    pub fn fill_checksum(&mut self, src_addr: Ipv4Address, dst_addr: Ipv4Address) {
        self.set_checksum(0);
        let value = match !self.full_sum(src_addr, dst_addr) {
            0 => 0xffff,
            other => other,
        };
        self.set_checksum(value);
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for UdpPacket<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The parsed form of a UDP header; the payload stays in the packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
}

impl UdpRepr {
    /// Parses a header, verifying the checksum against the IPv4 pseudo header when
    /// `verify` is set (a zero checksum always passes).
    ///
    /// Errors: the length errors of [`UdpPacket::check_len`]; `Checksum` if verification
    /// fails.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        packet: &UdpPacket<&T>,
        src_addr: Ipv4Address,
        dst_addr: Ipv4Address,
        verify: bool,
    ) -> Result<UdpRepr> {
        packet.check_len()?;
        if verify && !packet.verify_checksum(src_addr, dst_addr) {
            return Err(Error::Checksum);
        }
        Ok(UdpRepr { src_port: packet.src_port(), dst_port: packet.dst_port() })
    }

    /// Bytes of header [`emit`](Self::emit) writes (the payload comes on top).
    #[inline]
    pub const fn header_len(&self) -> usize {
        field::PAYLOAD
    }

    /// Same as [`header_len`](Self::header_len), under the name the other reprs use.
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        field::PAYLOAD
    }

    /// Writes the header, lets `emit_payload` fill the `payload_len` payload bytes, then
    /// computes the checksum over pseudo header, header and payload.
    ///
    /// The buffer must hold at least `8 + payload_len` bytes (the header writes panic on a
    /// shorter one; the payload slice is clamped). `payload_len` must not exceed 65527.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(
        &self,
        packet: &mut UdpPacket<&mut T>,
        src_addr: Ipv4Address,
        dst_addr: Ipv4Address,
        payload_len: usize,
        emit_payload: impl FnOnce(&mut [u8]),
    ) {
        let len = u16::try_from(payload_len.saturating_add(field::PAYLOAD)).unwrap_or(u16::MAX);
        packet.set_src_port(self.src_port);
        packet.set_dst_port(self.dst_port);
        packet.set_len(len);
        emit_payload(packet.payload_mut());
        packet.fill_checksum(src_addr, dst_addr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Independent one's complement sum over 16-bit words.
    fn ones_sum(words: impl IntoIterator<Item = u16>) -> u16 {
        let mut acc: u32 = 0;
        for w in words {
            acc += u32::from(w);
            acc = (acc & 0xffff) + (acc >> 16);
        }
        acc as u16
    }

    const SRC: Ipv4Address = Ipv4Address::new(10, 0, 0, 1);
    const DST: Ipv4Address = Ipv4Address::new(10, 0, 0, 2);

    // Port 40000 -> 9000, length 13 (five payload bytes "hello"), checksum filled below,
    // then one byte that is not part of the datagram.
    const DATAGRAM: [u8; 14] = [0x9c, 0x40, 0x23, 0x28, 0x00, 0x0d, 0x00, 0x00, b'h', b'e', b'l', b'l', b'o', 0x77];

    /// The checksum computed by hand: pseudo header words, header words (checksum 0), then
    /// payload words with the odd byte padded.
    fn hand_checksum() -> u16 {
        let words = [
            0x0a00, 0x0001, 0x0a00, 0x0002, 0x0011, 0x000d, // pseudo header
            0x9c40, 0x2328, 0x000d, 0x0000, // header
            0x6865, 0x6c6c, 0x6f00, // "hello"
        ];
        !ones_sum(words)
    }

    fn datagram_with_checksum() -> [u8; 14] {
        let mut d = DATAGRAM;
        d[6..8].copy_from_slice(&hand_checksum().to_be_bytes());
        d
    }

    #[test]
    fn read_fields() {
        let bytes = datagram_with_checksum();
        let p = UdpPacket::new_checked(&bytes[..]).unwrap();
        assert_eq!(p.src_port(), 40000);
        assert_eq!(p.dst_port(), 9000);
        assert_eq!(p.len(), 13);
        assert_eq!(p.checksum(), hand_checksum());
        assert_eq!(p.payload(), b"hello");
        assert!(p.verify_checksum(SRC, DST));
        assert!(!p.verify_checksum(DST, Ipv4Address::new(10, 0, 0, 3)));
    }

    #[test]
    fn fill_checksum_matches_hand_sum() {
        let mut bytes = DATAGRAM;
        let mut p = UdpPacket::new_unchecked(&mut bytes[..]);
        p.fill_checksum(SRC, DST);
        assert_eq!(p.checksum(), hand_checksum());
    }

    #[test]
    fn zero_checksum_means_none() {
        let bytes = DATAGRAM;
        let p = UdpPacket::new_checked(&bytes[..]).unwrap();
        assert!(p.verify_checksum(SRC, DST));
        assert!(UdpRepr::parse(&p, SRC, DST, true).is_ok());
    }

    #[test]
    fn computed_zero_is_sent_as_all_ones() {
        // Choose the payload word so that the full sum is 0xFFFF before complementing,
        // that is, the checksum would be 0.
        let mut bytes = [0u8; 10];
        bytes[4..6].copy_from_slice(&10u16.to_be_bytes());
        let partial = ones_sum([0x0a00, 0x0001, 0x0a00, 0x0002, 0x0011, 10, 10]);
        let word = !partial; // partial + word == 0xffff
        bytes[8..10].copy_from_slice(&word.to_be_bytes());
        let mut p = UdpPacket::new_unchecked(&mut bytes[..]);
        p.fill_checksum(SRC, DST);
        assert_eq!(p.checksum(), 0xffff);
        assert!(p.verify_checksum(SRC, DST));
    }

    #[test]
    fn check_len_cases() {
        let b = datagram_with_checksum();
        assert_eq!(UdpPacket::new_checked(&b[..7]).unwrap_err(), Error::Truncated);
        assert_eq!(UdpPacket::new_checked(&b[..12]).unwrap_err(), Error::Truncated);
        assert!(UdpPacket::new_checked(&b[..13]).is_ok());
        let mut b = b;
        b[5] = 7;
        assert_eq!(UdpPacket::new_checked(&b[..]).unwrap_err(), Error::Malformed);
    }

    #[test]
    fn repr_parse_and_emit() {
        let bytes = datagram_with_checksum();
        let p = UdpPacket::new_checked(&bytes[..]).unwrap();
        let repr = UdpRepr::parse(&p, SRC, DST, true).unwrap();
        assert_eq!(repr, UdpRepr { src_port: 40000, dst_port: 9000 });
        assert_eq!(UdpRepr::parse(&p, SRC, Ipv4Address::new(1, 2, 3, 4), true), Err(Error::Checksum));
        assert!(UdpRepr::parse(&p, SRC, Ipv4Address::new(1, 2, 3, 4), false).is_ok());

        let mut out = [0u8; 13];
        repr.emit(&mut UdpPacket::new_unchecked(&mut out[..]), SRC, DST, 5, |payload| payload.copy_from_slice(b"hello"));
        assert_eq!(out[..], bytes[..13]);
        assert_eq!(repr.buffer_len(), 8);
    }
}
