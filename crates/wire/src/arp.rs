//! ARP (RFC 826). The view handles any hardware/protocol address sizes; the repr models
//! only Ethernet/IPv4, the one combination the switch and hosts use.

use core::fmt;

use crate::bytes;
use crate::error::{Error, Result};
use crate::ethernet::{EtherType, EthernetAddress};
use crate::ipv4::Ipv4Address;

/// The ARP operation field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ArpOperation {
    /// Who has the target protocol address? (1)
    Request,
    /// The target protocol address is at this hardware address. (2)
    Reply,
    /// Any other value. Never holds 1 or 2 (use `From<u16>`).
    Unknown(u16),
}

impl From<u16> for ArpOperation {
    #[inline]
    fn from(value: u16) -> ArpOperation {
        match value {
            1 => ArpOperation::Request,
            2 => ArpOperation::Reply,
            other => ArpOperation::Unknown(other),
        }
    }
}

impl From<ArpOperation> for u16 {
    #[inline]
    fn from(value: ArpOperation) -> u16 {
        match value {
            ArpOperation::Request => 1,
            ArpOperation::Reply => 2,
            ArpOperation::Unknown(other) => other,
        }
    }
}

impl fmt::Display for ArpOperation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArpOperation::Request => f.write_str("request"),
            ArpOperation::Reply => f.write_str("reply"),
            ArpOperation::Unknown(v) => write!(f, "operation {v}"),
        }
    }
}

/// The hardware type value for Ethernet.
pub const HARDWARE_ETHERNET: u16 = 1;

/// Byte offsets of the fixed ARP fields; the addresses follow at offsets that depend on
/// the two length fields.
mod field {
    pub const HTYPE: usize = 0;
    pub const PTYPE: usize = 2;
    pub const HLEN: usize = 4;
    pub const PLEN: usize = 5;
    pub const OPER: usize = 6;
    pub const SHA: usize = 8;
}

/// A view of an ARP packet.
///
/// After [`new_checked`](Self::new_checked) the buffer holds the fixed fields and all four
/// addresses as sized by `hardware_len` and `protocol_len`. Bytes past them (Ethernet
/// padding) are ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ArpPacket<T> {
    /// Length of the fixed part, before the addresses.
    pub const FIXED_LEN: usize = field::SHA;

    /// Wraps a buffer without checking it; getters panic if it is too short.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> ArpPacket<T> {
        ArpPacket { buffer }
    }

    /// Wraps a buffer after [`check_len`](Self::check_len).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<ArpPacket<T>> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// `Truncated` unless the buffer holds the fixed fields and the four addresses.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < field::SHA || len < self.packet_len() {
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

    /// Length of the packet as its length fields describe it: `8 + 2 * (hlen + plen)`.
    #[inline]
    pub fn packet_len(&self) -> usize {
        field::SHA + 2 * (usize::from(self.hardware_len()) + usize::from(self.protocol_len()))
    }

    /// Hardware type (1 for Ethernet).
    #[inline]
    pub fn hardware_type(&self) -> u16 {
        bytes::get_u16(self.buffer.as_ref(), field::HTYPE)
    }

    /// Protocol type, in EtherType numbering (IPv4 for the packets the repr models).
    #[inline]
    pub fn protocol_type(&self) -> EtherType {
        EtherType::from(bytes::get_u16(self.buffer.as_ref(), field::PTYPE))
    }

    /// Length of a hardware address in bytes.
    #[inline]
    pub fn hardware_len(&self) -> u8 {
        self.buffer.as_ref()[field::HLEN]
    }

    /// Length of a protocol address in bytes.
    #[inline]
    pub fn protocol_len(&self) -> u8 {
        self.buffer.as_ref()[field::PLEN]
    }

    /// The operation.
    #[inline]
    pub fn operation(&self) -> ArpOperation {
        ArpOperation::from(bytes::get_u16(self.buffer.as_ref(), field::OPER))
    }

    /// Offsets of the four address fields: (sha, spa, tha, tpa), each the start offset.
    #[inline]
    fn offsets(&self) -> (usize, usize, usize, usize) {
        let hlen = usize::from(self.hardware_len());
        let plen = usize::from(self.protocol_len());
        let spa = field::SHA + hlen;
        let tha = spa + plen;
        let tpa = tha + hlen;
        (field::SHA, spa, tha, tpa)
    }

    /// Sender hardware address (`hardware_len` bytes).
    #[inline]
    pub fn source_hardware_addr(&self) -> &[u8] {
        let (sha, spa, _, _) = self.offsets();
        bytes::clamped(self.buffer.as_ref(), sha, spa)
    }

    /// Sender protocol address (`protocol_len` bytes).
    #[inline]
    pub fn source_protocol_addr(&self) -> &[u8] {
        let (_, spa, tha, _) = self.offsets();
        bytes::clamped(self.buffer.as_ref(), spa, tha)
    }

    /// Target hardware address (`hardware_len` bytes).
    #[inline]
    pub fn target_hardware_addr(&self) -> &[u8] {
        let (_, _, tha, tpa) = self.offsets();
        bytes::clamped(self.buffer.as_ref(), tha, tpa)
    }

    /// Target protocol address (`protocol_len` bytes).
    #[inline]
    pub fn target_protocol_addr(&self) -> &[u8] {
        let (_, _, _, tpa) = self.offsets();
        let end = tpa + usize::from(self.protocol_len());
        bytes::clamped(self.buffer.as_ref(), tpa, end)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ArpPacket<T> {
    /// Sets the hardware type.
    #[inline]
    pub fn set_hardware_type(&mut self, value: u16) {
        bytes::set_u16(self.buffer.as_mut(), field::HTYPE, value);
    }

    /// Sets the protocol type.
    #[inline]
    pub fn set_protocol_type(&mut self, value: EtherType) {
        bytes::set_u16(self.buffer.as_mut(), field::PTYPE, value.into());
    }

    /// Sets the hardware address length. Set both lengths before the addresses.
    #[inline]
    pub fn set_hardware_len(&mut self, value: u8) {
        self.buffer.as_mut()[field::HLEN] = value;
    }

    /// Sets the protocol address length. Set both lengths before the addresses.
    #[inline]
    pub fn set_protocol_len(&mut self, value: u8) {
        self.buffer.as_mut()[field::PLEN] = value;
    }

    /// Sets the operation.
    #[inline]
    pub fn set_operation(&mut self, value: ArpOperation) {
        bytes::set_u16(self.buffer.as_mut(), field::OPER, value.into());
    }

    /// Writes `value` into the field at `start` that is `len` bytes long.
    ///
    /// Panics if `value.len() != len` or the buffer is too short: both are mistakes of the
    /// code building the packet, not properties of received bytes.
    #[inline]
    fn set_field(&mut self, start: usize, len: u8, value: &[u8]) {
        let end = start + usize::from(len);
        self.buffer.as_mut()[start..end].copy_from_slice(value);
    }

    /// Sets the sender hardware address. Panics unless `value.len() == hardware_len()`.
    #[inline]
    pub fn set_source_hardware_addr(&mut self, value: &[u8]) {
        let (sha, _, _, _) = self.offsets();
        let len = self.hardware_len();
        self.set_field(sha, len, value);
    }

    /// Sets the sender protocol address. Panics unless `value.len() == protocol_len()`.
    #[inline]
    pub fn set_source_protocol_addr(&mut self, value: &[u8]) {
        let (_, spa, _, _) = self.offsets();
        let len = self.protocol_len();
        self.set_field(spa, len, value);
    }

    /// Sets the target hardware address. Panics unless `value.len() == hardware_len()`.
    #[inline]
    pub fn set_target_hardware_addr(&mut self, value: &[u8]) {
        let (_, _, tha, _) = self.offsets();
        let len = self.hardware_len();
        self.set_field(tha, len, value);
    }

    /// Sets the target protocol address. Panics unless `value.len() == protocol_len()`.
    #[inline]
    pub fn set_target_protocol_addr(&mut self, value: &[u8]) {
        let (_, _, _, tpa) = self.offsets();
        let len = self.protocol_len();
        self.set_field(tpa, len, value);
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for ArpPacket<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The parsed form of an ARP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ArpRepr {
    /// ARP for IPv4 over Ethernet.
    EthernetIpv4 {
        /// Request, reply or another operation.
        operation: ArpOperation,
        /// Sender MAC address.
        source_hardware_addr: EthernetAddress,
        /// Sender IPv4 address.
        source_protocol_addr: Ipv4Address,
        /// Target MAC address (zero in a request).
        target_hardware_addr: EthernetAddress,
        /// Target IPv4 address (the one being resolved, in a request).
        target_protocol_addr: Ipv4Address,
    },
}

/// Length of an Ethernet/IPv4 ARP packet.
const ETHERNET_IPV4_LEN: usize = field::SHA + 2 * (6 + 4);

impl ArpRepr {
    /// Parses an Ethernet/IPv4 ARP packet.
    ///
    /// Errors: `Truncated` if the buffer is short; `Unsupported` for any other hardware
    /// type, protocol type or address lengths.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &ArpPacket<&T>) -> Result<ArpRepr> {
        packet.check_len()?;
        if packet.hardware_type() != HARDWARE_ETHERNET
            || packet.protocol_type() != EtherType::Ipv4
            || packet.hardware_len() != 6
            || packet.protocol_len() != 4
        {
            return Err(Error::Unsupported);
        }
        let data: &[u8] = packet.buffer.as_ref();
        Ok(ArpRepr::EthernetIpv4 {
            operation: packet.operation(),
            source_hardware_addr: EthernetAddress(bytes::get_array(data, 8)),
            source_protocol_addr: Ipv4Address(bytes::get_array(data, 14)),
            target_hardware_addr: EthernetAddress(bytes::get_array(data, 18)),
            target_protocol_addr: Ipv4Address(bytes::get_array(data, 24)),
        })
    }

    /// Bytes [`emit`](Self::emit) writes (28).
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        match self {
            ArpRepr::EthernetIpv4 { .. } => ETHERNET_IPV4_LEN,
        }
    }

    /// Writes the packet into the first [`buffer_len`](Self::buffer_len) bytes of `packet`
    /// (panics if the buffer is shorter).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut ArpPacket<&mut T>) {
        match *self {
            ArpRepr::EthernetIpv4 { operation, source_hardware_addr, source_protocol_addr, target_hardware_addr, target_protocol_addr } => {
                packet.set_hardware_type(HARDWARE_ETHERNET);
                packet.set_protocol_type(EtherType::Ipv4);
                packet.set_hardware_len(6);
                packet.set_protocol_len(4);
                packet.set_operation(operation);
                packet.set_source_hardware_addr(&source_hardware_addr.0);
                packet.set_source_protocol_addr(&source_protocol_addr.0);
                packet.set_target_hardware_addr(&target_hardware_addr.0);
                packet.set_target_protocol_addr(&target_protocol_addr.0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // "Who has 10.0.0.2? Tell 10.0.0.1" from 52:54:00:12:34:56, followed by 18 bytes of
    // padding as it arrives in a minimum-size Ethernet frame.
    const REQUEST: [u8; 46] = [
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, 0x0a, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x0a, 0x00, 0x00, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];

    fn request_repr() -> ArpRepr {
        ArpRepr::EthernetIpv4 {
            operation: ArpOperation::Request,
            source_hardware_addr: EthernetAddress([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]),
            source_protocol_addr: Ipv4Address::new(10, 0, 0, 1),
            target_hardware_addr: EthernetAddress([0; 6]),
            target_protocol_addr: Ipv4Address::new(10, 0, 0, 2),
        }
    }

    #[test]
    fn read_fields() {
        let p = ArpPacket::new_checked(&REQUEST[..]).unwrap();
        assert_eq!(p.hardware_type(), 1);
        assert_eq!(p.protocol_type(), EtherType::Ipv4);
        assert_eq!(p.hardware_len(), 6);
        assert_eq!(p.protocol_len(), 4);
        assert_eq!(p.operation(), ArpOperation::Request);
        assert_eq!(p.packet_len(), 28);
        assert_eq!(p.source_hardware_addr(), &[0x52, 0x54, 0x00, 0x12, 0x34, 0x56]);
        assert_eq!(p.source_protocol_addr(), &[10, 0, 0, 1]);
        assert_eq!(p.target_hardware_addr(), &[0; 6]);
        assert_eq!(p.target_protocol_addr(), &[10, 0, 0, 2]);
    }

    #[test]
    fn repr_parse_and_emit() {
        let p = ArpPacket::new_checked(&REQUEST[..]).unwrap();
        assert_eq!(ArpRepr::parse(&p), Ok(request_repr()));
        let mut out = [0u8; 28];
        request_repr().emit(&mut ArpPacket::new_unchecked(&mut out[..]));
        assert_eq!(out[..], REQUEST[..28]);
        assert_eq!(request_repr().buffer_len(), 28);
    }

    #[test]
    fn too_short() {
        assert_eq!(ArpPacket::new_checked(&REQUEST[..27]).unwrap_err(), Error::Truncated);
        assert_eq!(ArpPacket::new_checked(&REQUEST[..7]).unwrap_err(), Error::Truncated);
        assert!(ArpPacket::new_checked(&REQUEST[..28]).is_ok());
    }

    #[test]
    fn other_sizes_view_but_do_not_parse() {
        // A made-up hardware type with 2-byte hardware and 16-byte protocol addresses.
        let mut buf = [0u8; 8 + 2 * (2 + 16)];
        let mut p = ArpPacket::new_unchecked(&mut buf[..]);
        p.set_hardware_type(6);
        p.set_protocol_type(EtherType::Ipv6);
        p.set_hardware_len(2);
        p.set_protocol_len(16);
        p.set_operation(ArpOperation::Reply);
        p.set_source_hardware_addr(&[1, 2]);
        p.set_source_protocol_addr(&[3; 16]);
        p.set_target_hardware_addr(&[4, 5]);
        p.set_target_protocol_addr(&[6; 16]);
        let p = ArpPacket::new_checked(&buf[..]).unwrap();
        assert_eq!(p.source_hardware_addr(), &[1, 2]);
        assert_eq!(p.source_protocol_addr(), &[3; 16]);
        assert_eq!(p.target_hardware_addr(), &[4, 5]);
        assert_eq!(p.target_protocol_addr(), &[6; 16]);
        assert_eq!(ArpRepr::parse(&p), Err(Error::Unsupported));
        assert_eq!(ArpPacket::new_checked(&buf[..buf.len() - 1]).unwrap_err(), Error::Truncated);
    }

    #[test]
    fn unknown_operation_is_kept() {
        let mut buf = REQUEST;
        buf[7] = 9;
        let p = ArpPacket::new_checked(&buf[..]).unwrap();
        match ArpRepr::parse(&p).unwrap() {
            ArpRepr::EthernetIpv4 { operation, .. } => {
                assert_eq!(operation, ArpOperation::Unknown(9));
            }
        }
        assert_eq!(u16::from(ArpOperation::from(2)), 2);
    }
}
