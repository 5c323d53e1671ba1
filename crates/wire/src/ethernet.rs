//! Ethernet II frames (no VLAN tag parsing; a tagged frame shows `EtherType::Vlan`).

use core::fmt;
use core::str::FromStr;

use crate::bytes;
use crate::error::{Error, Result};

/// A 48-bit Ethernet (MAC) address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct EthernetAddress(pub [u8; 6]);

impl EthernetAddress {
    /// The broadcast address `ff:ff:ff:ff:ff:ff`.
    pub const BROADCAST: EthernetAddress = EthernetAddress([0xff; 6]);

    /// Builds an address from a slice; `None` unless the slice is exactly six bytes.
    #[inline]
    pub fn from_bytes(data: &[u8]) -> Option<EthernetAddress> {
        <[u8; 6]>::try_from(data).ok().map(EthernetAddress)
    }

    /// The six octets.
    #[inline]
    pub const fn as_bytes(&self) -> &[u8; 6] {
        &self.0
    }

    /// Whether this is the broadcast address.
    #[inline]
    pub fn is_broadcast(&self) -> bool {
        self.0 == [0xff; 6]
    }

    /// Whether the group bit (lowest bit of the first octet) is set. Broadcast counts as
    /// multicast, as on the wire.
    #[inline]
    pub const fn is_multicast(&self) -> bool {
        self.0[0] & 0x01 != 0
    }

    /// Whether this is an individual (neither multicast nor broadcast) address.
    #[inline]
    pub const fn is_unicast(&self) -> bool {
        !self.is_multicast()
    }

    /// Whether the locally-administered bit is set.
    #[inline]
    pub const fn is_local(&self) -> bool {
        self.0[0] & 0x02 != 0
    }

    /// The address as the low 48 bits of a `u64`, big-endian: a compact key for exact-match
    /// tables (`aa:bb:cc:dd:ee:ff` becomes `0xaabb_ccdd_eeff`).
    #[inline]
    pub const fn to_u64(&self) -> u64 {
        let b = self.0;
        u64::from_be_bytes([0, 0, b[0], b[1], b[2], b[3], b[4], b[5]])
    }

    /// Inverse of [`to_u64`](Self::to_u64); the upper 16 bits of `value` are ignored.
    #[inline]
    pub const fn from_u64(value: u64) -> EthernetAddress {
        let b = value.to_be_bytes();
        EthernetAddress([b[2], b[3], b[4], b[5], b[6], b[7]])
    }
}

impl fmt::Display for EthernetAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(f, "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", b[0], b[1], b[2], b[3], b[4], b[5])
    }
}

impl FromStr for EthernetAddress {
    type Err = Error;

    /// Parses six two-digit hex octets separated by `:` (or all by `-`).
    fn from_str(s: &str) -> Result<EthernetAddress> {
        let sep = if s.contains('-') { '-' } else { ':' };
        let mut out = [0u8; 6];
        let mut parts = s.split(sep);
        for octet in out.iter_mut() {
            let part = parts.next().ok_or(Error::Malformed)?;
            if part.len() != 2 || !part.bytes().all(|c| c.is_ascii_hexdigit()) {
                return Err(Error::Malformed);
            }
            *octet = u8::from_str_radix(part, 16).map_err(|_| Error::Malformed)?;
        }
        if parts.next().is_some() {
            return Err(Error::Malformed);
        }
        Ok(EthernetAddress(out))
    }
}

/// The EtherType field: which protocol the frame payload carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EtherType {
    /// IPv4, `0x0800`.
    Ipv4,
    /// ARP, `0x0806`.
    Arp,
    /// IPv6, `0x86DD`.
    Ipv6,
    /// An 802.1Q VLAN tag follows, `0x8100`.
    Vlan,
    /// Any other value. Never holds one of the values above (use `From<u16>`).
    Unknown(u16),
}

impl From<u16> for EtherType {
    #[inline]
    fn from(value: u16) -> EtherType {
        match value {
            0x0800 => EtherType::Ipv4,
            0x0806 => EtherType::Arp,
            0x86DD => EtherType::Ipv6,
            0x8100 => EtherType::Vlan,
            other => EtherType::Unknown(other),
        }
    }
}

impl From<EtherType> for u16 {
    #[inline]
    fn from(value: EtherType) -> u16 {
        match value {
            EtherType::Ipv4 => 0x0800,
            EtherType::Arp => 0x0806,
            EtherType::Ipv6 => 0x86DD,
            EtherType::Vlan => 0x8100,
            EtherType::Unknown(other) => other,
        }
    }
}

impl fmt::Display for EtherType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EtherType::Ipv4 => f.write_str("IPv4"),
            EtherType::Arp => f.write_str("ARP"),
            EtherType::Ipv6 => f.write_str("IPv6"),
            EtherType::Vlan => f.write_str("VLAN"),
            EtherType::Unknown(v) => write!(f, "0x{v:04x}"),
        }
    }
}

/// Byte offsets of the header's fields, from the start of the header: the one layout
/// the host code (views and reprs) and the switch programs share.
#[allow(missing_docs)]
pub mod field {
    pub const DST: usize = 0;
    pub const SRC: usize = 6;
    pub const ETHERTYPE: usize = 12;
    pub const PAYLOAD: usize = 14;
}

/// A view of an Ethernet II frame (destination, source, EtherType, payload; no FCS).
///
/// # Example
///
/// ```
/// use wire::{EtherType, EthernetAddress, EthernetFrame, EthernetRepr, IpProtocol};
/// use wire::{Ipv4Address, Ipv4Packet, Ipv4Repr, UdpPacket, UdpRepr};
///
/// // Build Ethernet / IPv4 / UDP carrying "hi".
/// let (src, dst) = (Ipv4Address::new(10, 0, 0, 1), Ipv4Address::new(10, 0, 0, 2));
/// let eth = EthernetRepr {
///     src_addr: EthernetAddress([2, 0, 0, 0, 0, 1]),
///     dst_addr: EthernetAddress([2, 0, 0, 0, 0, 2]),
///     ethertype: EtherType::Ipv4,
/// };
/// let udp = UdpRepr { src_port: 5000, dst_port: 9000 };
/// let ip = Ipv4Repr {
///     src_addr: src,
///     dst_addr: dst,
///     next_header: IpProtocol::Udp,
///     payload_len: udp.buffer_len() + 2,
///     hop_limit: 64,
///     tos: 0,
/// };
/// let mut buf = vec![0u8; eth.buffer_len() + ip.buffer_len() + ip.payload_len];
/// let mut frame = EthernetFrame::new_unchecked(&mut buf[..]);
/// eth.emit(&mut frame);
/// let mut packet = Ipv4Packet::new_unchecked(frame.payload_mut());
/// ip.emit(&mut packet);
/// let mut datagram = UdpPacket::new_unchecked(packet.payload_mut());
/// udp.emit(&mut datagram, src, dst, 2, |p| p.copy_from_slice(b"hi"));
///
/// // Forward it: view in place, decrement the TTL with an incremental checksum update.
/// let mut frame = EthernetFrame::new_checked(&mut buf[..]).unwrap();
/// let mut packet = Ipv4Packet::new_checked(frame.payload_mut()).unwrap();
/// assert_eq!(packet.decrement_hop_limit(), Some(63));
/// assert!(packet.verify_checksum());
/// let datagram = UdpPacket::new_checked(packet.payload()).unwrap();
/// assert_eq!(datagram.dst_port(), 9000);
/// assert_eq!(datagram.payload(), b"hi");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Length of the Ethernet header.
    pub const HEADER_LEN: usize = field::PAYLOAD;

    /// Wraps a buffer without checking it; getters panic if it is shorter than
    /// [`HEADER_LEN`](Self::HEADER_LEN).
    #[inline]
    pub const fn new_unchecked(buffer: T) -> EthernetFrame<T> {
        EthernetFrame { buffer }
    }

    /// Wraps a buffer after [`check_len`](Self::check_len).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<EthernetFrame<T>> {
        let frame = Self::new_unchecked(buffer);
        frame.check_len()?;
        Ok(frame)
    }

    /// Ensures the buffer holds a whole header. `Err(Truncated)` otherwise.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < Self::HEADER_LEN {
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

    /// Header length (constant, for symmetry with the other views).
    #[inline]
    pub const fn header_len() -> usize {
        Self::HEADER_LEN
    }

    /// Buffer length needed for a frame carrying `payload_len` bytes.
    #[inline]
    pub const fn buffer_len(payload_len: usize) -> usize {
        Self::HEADER_LEN + payload_len
    }

    /// Destination address.
    #[inline]
    pub fn dst_addr(&self) -> EthernetAddress {
        EthernetAddress(bytes::get_array(self.buffer.as_ref(), field::DST))
    }

    /// Source address.
    #[inline]
    pub fn src_addr(&self) -> EthernetAddress {
        EthernetAddress(bytes::get_array(self.buffer.as_ref(), field::SRC))
    }

    /// EtherType.
    #[inline]
    pub fn ethertype(&self) -> EtherType {
        EtherType::from(bytes::get_u16(self.buffer.as_ref(), field::ETHERTYPE))
    }

    /// Everything after the header (including any padding up to the minimum frame size).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        bytes::clamped(self.buffer.as_ref(), field::PAYLOAD, usize::MAX)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Sets the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, value: EthernetAddress) {
        self.buffer.as_mut()[field::DST..field::SRC].copy_from_slice(&value.0);
    }

    /// Sets the source address.
    #[inline]
    pub fn set_src_addr(&mut self, value: EthernetAddress) {
        self.buffer.as_mut()[field::SRC..field::ETHERTYPE].copy_from_slice(&value.0);
    }

    /// Sets the EtherType.
    #[inline]
    pub fn set_ethertype(&mut self, value: EtherType) {
        bytes::set_u16(self.buffer.as_mut(), field::ETHERTYPE, value.into());
    }

    /// The payload, writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        bytes::clamped_mut(self.buffer.as_mut(), field::PAYLOAD, usize::MAX)
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for EthernetFrame<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The parsed form of an Ethernet header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EthernetRepr {
    /// Source address.
    pub src_addr: EthernetAddress,
    /// Destination address.
    pub dst_addr: EthernetAddress,
    /// Protocol of the payload.
    pub ethertype: EtherType,
}

impl EthernetRepr {
    /// Reads the header of a frame. Fails only if the buffer is too short.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(frame: &EthernetFrame<&T>) -> Result<EthernetRepr> {
        frame.check_len()?;
        Ok(EthernetRepr { src_addr: frame.src_addr(), dst_addr: frame.dst_addr(), ethertype: frame.ethertype() })
    }

    /// Bytes [`emit`](Self::emit) writes: the header only.
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        field::PAYLOAD
    }

    /// Writes the header into the first [`buffer_len`](Self::buffer_len) bytes of `frame`
    /// (panics if the buffer is shorter); the payload is left as it is.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, frame: &mut EthernetFrame<&mut T>) {
        frame.set_src_addr(self.src_addr);
        frame.set_dst_addr(self.dst_addr);
        frame.set_ethertype(self.ethertype);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Broadcast ARP frame header from 52:54:00:12:34:56, then four payload bytes.
    const FRAME: [u8; 18] = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x08, 0x06, 0xde, 0xad, 0xbe, 0xef];

    #[test]
    fn read_fields() {
        let frame = EthernetFrame::new_checked(&FRAME[..]).unwrap();
        assert_eq!(frame.dst_addr(), EthernetAddress::BROADCAST);
        assert_eq!(frame.src_addr(), EthernetAddress([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]));
        assert_eq!(frame.ethertype(), EtherType::Arp);
        assert_eq!(frame.payload(), &[0xde, 0xad, 0xbe, 0xef]);
    }

    #[test]
    fn write_fields() {
        let mut buf = [0u8; 18];
        let mut frame = EthernetFrame::new_unchecked(&mut buf[..]);
        frame.set_dst_addr(EthernetAddress::BROADCAST);
        frame.set_src_addr(EthernetAddress([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]));
        frame.set_ethertype(EtherType::Arp);
        frame.payload_mut().copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(buf, FRAME);
    }

    #[test]
    fn repr_roundtrip() {
        let frame = EthernetFrame::new_checked(&FRAME[..]).unwrap();
        let repr = EthernetRepr::parse(&frame).unwrap();
        let mut buf = [0u8; 18];
        buf[14..].copy_from_slice(&FRAME[14..]);
        repr.emit(&mut EthernetFrame::new_unchecked(&mut buf[..]));
        assert_eq!(buf, FRAME);
        assert_eq!(repr.buffer_len(), 14);
    }

    #[test]
    fn too_short() {
        assert_eq!(EthernetFrame::new_checked(&FRAME[..13]).unwrap_err(), Error::Truncated);
        let frame = EthernetFrame::new_checked(&FRAME[..14]).unwrap();
        assert!(frame.payload().is_empty());
    }

    #[test]
    fn address_kinds_and_keys() {
        let a = EthernetAddress([0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff]);
        assert_eq!(a.to_u64(), 0xaabb_ccdd_eeff);
        assert_eq!(EthernetAddress::from_u64(0xffff_aabb_ccdd_eeff), a);
        assert!(EthernetAddress::BROADCAST.is_broadcast());
        assert!(EthernetAddress::BROADCAST.is_multicast());
        assert!(EthernetAddress([0x01, 0x00, 0x5e, 0, 0, 1]).is_multicast());
        assert!(EthernetAddress([0x02, 0, 0, 0, 0, 1]).is_unicast());
        assert!(EthernetAddress([0x02, 0, 0, 0, 0, 1]).is_local());
        assert_eq!(EthernetAddress::from_bytes(&[1, 2, 3]), None);
    }

    #[test]
    fn address_text() {
        let a = EthernetAddress([0x0a, 0xbb, 0x0c, 0xdd, 0x0e, 0xff]);
        assert_eq!(a.to_string(), "0a:bb:0c:dd:0e:ff");
        assert_eq!("0a:bb:0c:dd:0e:ff".parse::<EthernetAddress>(), Ok(a));
        assert_eq!("0A-BB-0C-DD-0E-FF".parse::<EthernetAddress>(), Ok(a));
        for bad in [
            "",
            "0a:bb:0c:dd:0e",
            "0a:bb:0c:dd:0e:ff:00",
            "0a:bb:0c:dd:0e:f",
            "0a:bb:0c:dd:0e:+f",
            "0a:bb-0c:dd:0e:ff",
            "0a:bb:0c:dd:0e:fff",
        ] {
            assert_eq!(bad.parse::<EthernetAddress>(), Err(Error::Malformed), "{bad}");
        }
    }

    #[test]
    fn ethertype_conversions() {
        for v in [0x0800u16, 0x0806, 0x86DD, 0x8100, 0x1234] {
            assert_eq!(u16::from(EtherType::from(v)), v);
        }
        assert_eq!(EtherType::from(0x1234), EtherType::Unknown(0x1234));
    }
}
