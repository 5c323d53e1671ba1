//! IPv4: addresses, prefixes, the header view and its parsed form.

use core::fmt;
use core::str::FromStr;

use crate::bytes;
use crate::checksum;
use crate::error::{Error, Result};

/// A 32-bit IPv4 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Ipv4Address(pub [u8; 4]);

impl Ipv4Address {
    /// `0.0.0.0`.
    pub const UNSPECIFIED: Ipv4Address = Ipv4Address([0; 4]);
    /// The limited broadcast address `255.255.255.255`.
    pub const BROADCAST: Ipv4Address = Ipv4Address([255; 4]);

    /// Builds `a.b.c.d`.
    #[inline]
    pub const fn new(a: u8, b: u8, c: u8, d: u8) -> Ipv4Address {
        Ipv4Address([a, b, c, d])
    }

    /// Builds an address from a slice; `None` unless the slice is exactly four bytes.
    #[inline]
    pub fn from_bytes(data: &[u8]) -> Option<Ipv4Address> {
        <[u8; 4]>::try_from(data).ok().map(Ipv4Address)
    }

    /// The four octets.
    #[inline]
    pub const fn as_bytes(&self) -> &[u8; 4] {
        &self.0
    }

    /// The address as a host-order integer (`10.0.0.1` is `0x0a00_0001`): the key for
    /// LPM and exact-match tables.
    #[inline]
    pub const fn to_u32(&self) -> u32 {
        u32::from_be_bytes(self.0)
    }

    /// Inverse of [`to_u32`](Self::to_u32).
    #[inline]
    pub const fn from_u32(value: u32) -> Ipv4Address {
        Ipv4Address(value.to_be_bytes())
    }

    /// Whether this is `0.0.0.0`.
    #[inline]
    pub const fn is_unspecified(&self) -> bool {
        self.to_u32() == 0
    }

    /// Whether this is `255.255.255.255`.
    #[inline]
    pub const fn is_broadcast(&self) -> bool {
        self.to_u32() == u32::MAX
    }

    /// Whether this is in `224.0.0.0/4`.
    #[inline]
    pub const fn is_multicast(&self) -> bool {
        self.0[0] & 0xf0 == 0xe0
    }

    /// Whether this is in `127.0.0.0/8`.
    #[inline]
    pub const fn is_loopback(&self) -> bool {
        self.0[0] == 127
    }

    /// Whether this is in `169.254.0.0/16`.
    #[inline]
    pub const fn is_link_local(&self) -> bool {
        self.0[0] == 169 && self.0[1] == 254
    }

    /// Whether this can name one host: not unspecified, broadcast or multicast.
    #[inline]
    pub const fn is_unicast(&self) -> bool {
        !(self.is_unspecified() || self.is_broadcast() || self.is_multicast())
    }
}

impl fmt::Display for Ipv4Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(f, "{}.{}.{}.{}", b[0], b[1], b[2], b[3])
    }
}

impl FromStr for Ipv4Address {
    type Err = Error;

    /// Parses dotted-quad notation: four decimal octets of one to three digits.
    fn from_str(s: &str) -> Result<Ipv4Address> {
        let mut out = [0u8; 4];
        let mut parts = s.split('.');
        for octet in out.iter_mut() {
            let part = parts.next().ok_or(Error::Malformed)?;
            if part.is_empty() || part.len() > 3 || !part.bytes().all(|c| c.is_ascii_digit()) {
                return Err(Error::Malformed);
            }
            *octet = part.parse().map_err(|_| Error::Malformed)?;
        }
        if parts.next().is_some() {
            return Err(Error::Malformed);
        }
        Ok(Ipv4Address(out))
    }
}

impl From<std::net::Ipv4Addr> for Ipv4Address {
    #[inline]
    fn from(addr: std::net::Ipv4Addr) -> Ipv4Address {
        Ipv4Address(addr.octets())
    }
}

impl From<Ipv4Address> for std::net::Ipv4Addr {
    #[inline]
    fn from(addr: Ipv4Address) -> std::net::Ipv4Addr {
        std::net::Ipv4Addr::from(addr.0)
    }
}

/// An IPv4 prefix, `address/prefix_len`: a route or a subnet.
///
/// The address may have host bits set (`10.0.0.1/24` names interface address and subnet at
/// once); [`network`](Self::network) clears them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Cidr {
    /// The address.
    pub address: Ipv4Address,
    /// Number of leading bits that form the prefix; values above 32 act as 32.
    pub prefix_len: u8,
}

impl Ipv4Cidr {
    /// Builds a prefix; `Err(Malformed)` if `prefix_len > 32`.
    pub fn new(address: Ipv4Address, prefix_len: u8) -> Result<Ipv4Cidr> {
        if prefix_len > 32 {
            return Err(Error::Malformed);
        }
        Ok(Ipv4Cidr { address, prefix_len })
    }

    /// The netmask as an integer (`/24` is `0xffff_ff00`).
    #[inline]
    pub const fn netmask_u32(&self) -> u32 {
        let len = if self.prefix_len > 32 { 32 } else { self.prefix_len as u32 };
        match u32::MAX.checked_shl(32 - len) {
            Some(mask) => mask,
            None => 0,
        }
    }

    /// The netmask as an address (`/24` is `255.255.255.0`).
    #[inline]
    pub const fn netmask(&self) -> Ipv4Address {
        Ipv4Address::from_u32(self.netmask_u32())
    }

    /// The same prefix with the host bits of the address cleared.
    #[inline]
    pub const fn network(&self) -> Ipv4Cidr {
        Ipv4Cidr { address: Ipv4Address::from_u32(self.address.to_u32() & self.netmask_u32()), prefix_len: self.prefix_len }
    }

    /// Whether `addr` lies inside this prefix.
    #[inline]
    pub const fn contains(&self, addr: Ipv4Address) -> bool {
        let mask = self.netmask_u32();
        (self.address.to_u32() ^ addr.to_u32()) & mask == 0
    }

    /// Whether every address of `other` lies inside this prefix.
    #[inline]
    pub const fn contains_subnet(&self, other: &Ipv4Cidr) -> bool {
        other.netmask_u32() & self.netmask_u32() == self.netmask_u32() && self.contains(other.address)
    }
}

impl fmt::Display for Ipv4Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.address, self.prefix_len)
    }
}

impl FromStr for Ipv4Cidr {
    type Err = Error;

    /// Parses `a.b.c.d/n` with `n` in `0..=32`.
    fn from_str(s: &str) -> Result<Ipv4Cidr> {
        let (addr, len) = s.split_once('/').ok_or(Error::Malformed)?;
        if len.is_empty() || len.len() > 2 || !len.bytes().all(|c| c.is_ascii_digit()) {
            return Err(Error::Malformed);
        }
        let len: u8 = len.parse().map_err(|_| Error::Malformed)?;
        Ipv4Cidr::new(addr.parse()?, len)
    }
}

/// The IPv4 protocol field: what the payload is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    /// ICMP, 1.
    Icmp,
    /// TCP, 6.
    Tcp,
    /// UDP, 17.
    Udp,
    /// Any other value. Never holds one of the values above (use `From<u8>`).
    Unknown(u8),
}

impl From<u8> for Protocol {
    #[inline]
    fn from(value: u8) -> Protocol {
        match value {
            1 => Protocol::Icmp,
            6 => Protocol::Tcp,
            17 => Protocol::Udp,
            other => Protocol::Unknown(other),
        }
    }
}

impl From<Protocol> for u8 {
    #[inline]
    fn from(value: Protocol) -> u8 {
        match value {
            Protocol::Icmp => 1,
            Protocol::Tcp => 6,
            Protocol::Udp => 17,
            Protocol::Unknown(other) => other,
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Protocol::Icmp => f.write_str("ICMP"),
            Protocol::Tcp => f.write_str("TCP"),
            Protocol::Udp => f.write_str("UDP"),
            Protocol::Unknown(v) => write!(f, "0x{v:02x}"),
        }
    }
}

/// Byte offsets of the header's fields, from the start of the header: the one layout
/// the host code (views and reprs) and the switch programs share.
#[allow(missing_docs)]
pub mod field {
    pub const VER_IHL: usize = 0;
    pub const TOS: usize = 1;
    pub const LENGTH: usize = 2;
    pub const IDENT: usize = 4;
    pub const FLG_OFF: usize = 6;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: usize = 10;
    pub const SRC_ADDR: usize = 12;
    pub const DST_ADDR: usize = 16;
    pub const OPTIONS: usize = 20;
}

/// Flag bits in the flags/fragment-offset word.
const FLAG_DONT_FRAG: u16 = 0x4000;
const FLAG_MORE_FRAGS: u16 = 0x2000;
const FRAG_OFFSET_MASK: u16 = 0x1fff;

/// A view of an IPv4 packet (header, options and payload).
///
/// After [`new_checked`](Self::new_checked), `20 <= header_len <= total_len <= buffer
/// length`, so [`options`](Self::options) and [`payload`](Self::payload) are in bounds;
/// bytes after `total_len` (Ethernet padding) are not part of the payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Length of a header without options.
    pub const MIN_HEADER_LEN: usize = field::OPTIONS;

    /// Wraps a buffer without checking it; getters panic if it is shorter than the header,
    /// and variable-length accessors are clamped to the buffer.
    #[inline]
    pub const fn new_unchecked(buffer: T) -> Ipv4Packet<T> {
        Ipv4Packet { buffer }
    }

    /// Wraps a buffer after [`check_len`](Self::check_len).
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Ipv4Packet<T>> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Validates the length fields against each other and the buffer:
    /// `Truncated` if the buffer is shorter than 20 bytes, than the header length or than
    /// the total length; `Malformed` if IHL < 5 or total length < header length.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < field::OPTIONS {
            return Err(Error::Truncated);
        }
        let header_len = usize::from(self.header_len());
        let total_len = usize::from(self.total_len());
        if header_len < field::OPTIONS || total_len < header_len {
            Err(Error::Malformed)
        } else if header_len > len || total_len > len {
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

    /// The version field (4 for a valid packet; checked by [`Ipv4Repr::parse`], not here).
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// Header length in bytes (IHL × 4), options included.
    #[inline]
    pub fn header_len(&self) -> u8 {
        (self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }

    /// The whole type-of-service byte (DSCP and ECN). The in-network protocols mark
    /// their packets with a reserved bit of it, so the switch parser reads it raw.
    #[inline]
    pub fn tos(&self) -> u8 {
        self.buffer.as_ref()[field::TOS]
    }

    /// Differentiated services code point (upper six bits of the ToS byte).
    #[inline]
    pub fn dscp(&self) -> u8 {
        self.tos() >> 2
    }

    /// Explicit congestion notification (lower two bits of the ToS byte).
    #[inline]
    pub fn ecn(&self) -> u8 {
        self.tos() & 0x03
    }

    /// Total length of the datagram (header plus payload) in bytes.
    #[inline]
    pub fn total_len(&self) -> u16 {
        bytes::get_u16(self.buffer.as_ref(), field::LENGTH)
    }

    /// Identification (groups the fragments of one datagram).
    #[inline]
    pub fn ident(&self) -> u16 {
        bytes::get_u16(self.buffer.as_ref(), field::IDENT)
    }

    #[inline]
    fn flags_and_offset(&self) -> u16 {
        bytes::get_u16(self.buffer.as_ref(), field::FLG_OFF)
    }

    /// The don't-fragment flag.
    #[inline]
    pub fn dont_frag(&self) -> bool {
        self.flags_and_offset() & FLAG_DONT_FRAG != 0
    }

    /// The more-fragments flag.
    #[inline]
    pub fn more_frags(&self) -> bool {
        self.flags_and_offset() & FLAG_MORE_FRAGS != 0
    }

    /// Fragment offset in bytes (the 13-bit field times 8).
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        (self.flags_and_offset() & FRAG_OFFSET_MASK) << 3
    }

    /// Whether this is a fragment (offset non-zero or more fragments follow).
    #[inline]
    pub fn is_fragment(&self) -> bool {
        self.flags_and_offset() & (FLAG_MORE_FRAGS | FRAG_OFFSET_MASK) != 0
    }

    /// Time to live (the IPv6 name is used to match the other protocols' views).
    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// Time to live; same as [`hop_limit`](Self::hop_limit).
    #[inline]
    pub fn ttl(&self) -> u8 {
        self.hop_limit()
    }

    /// Protocol of the payload.
    #[inline]
    pub fn next_header(&self) -> Protocol {
        Protocol::from(self.buffer.as_ref()[field::PROTOCOL])
    }

    /// Protocol of the payload; same as [`next_header`](Self::next_header).
    #[inline]
    pub fn protocol(&self) -> Protocol {
        self.next_header()
    }

    /// The header checksum field.
    #[inline]
    pub fn checksum(&self) -> u16 {
        bytes::get_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Source address.
    #[inline]
    pub fn src_addr(&self) -> Ipv4Address {
        Ipv4Address(bytes::get_array(self.buffer.as_ref(), field::SRC_ADDR))
    }

    /// Destination address.
    #[inline]
    pub fn dst_addr(&self) -> Ipv4Address {
        Ipv4Address(bytes::get_array(self.buffer.as_ref(), field::DST_ADDR))
    }

    /// The options bytes (empty when the header length is 20).
    #[inline]
    pub fn options(&self) -> &[u8] {
        let end = usize::from(self.header_len());
        bytes::clamped(self.buffer.as_ref(), field::OPTIONS, end)
    }

    /// The payload: from the end of the header to `total_len`.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let start = usize::from(self.header_len());
        let end = usize::from(self.total_len());
        bytes::clamped(self.buffer.as_ref(), start, end)
    }

    /// The header bytes (options included), as covered by the checksum.
    #[inline]
    pub fn header(&self) -> &[u8] {
        bytes::clamped(self.buffer.as_ref(), 0, usize::from(self.header_len()))
    }

    /// Whether the header checksum is correct.
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        checksum::sum(self.header()) == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Sets the version field.
    #[inline]
    pub fn set_version(&mut self, value: u8) {
        let data = self.buffer.as_mut();
        data[field::VER_IHL] = (data[field::VER_IHL] & 0x0f) | (value << 4);
    }

    /// Sets the header length in bytes (stored as `value / 4`).
    #[inline]
    pub fn set_header_len(&mut self, value: u8) {
        let data = self.buffer.as_mut();
        data[field::VER_IHL] = (data[field::VER_IHL] & 0xf0) | ((value / 4) & 0x0f);
    }

    /// Sets the whole type-of-service byte.
    #[inline]
    pub fn set_tos(&mut self, value: u8) {
        self.buffer.as_mut()[field::TOS] = value;
    }

    /// Sets the DSCP (six bits), keeping the ECN bits.
    #[inline]
    pub fn set_dscp(&mut self, value: u8) {
        let tos = (self.tos() & 0x03) | (value << 2);
        self.set_tos(tos);
    }

    /// Sets the ECN (two bits), keeping the DSCP.
    #[inline]
    pub fn set_ecn(&mut self, value: u8) {
        let tos = (self.tos() & !0x03) | (value & 0x03);
        self.set_tos(tos);
    }

    /// Sets the total length.
    #[inline]
    pub fn set_total_len(&mut self, value: u16) {
        bytes::set_u16(self.buffer.as_mut(), field::LENGTH, value);
    }

    /// Sets the identification.
    #[inline]
    pub fn set_ident(&mut self, value: u16) {
        bytes::set_u16(self.buffer.as_mut(), field::IDENT, value);
    }

    #[inline]
    fn set_flags_and_offset(&mut self, value: u16) {
        bytes::set_u16(self.buffer.as_mut(), field::FLG_OFF, value);
    }

    /// Clears all three flag bits, keeping the fragment offset.
    #[inline]
    pub fn clear_flags(&mut self) {
        let value = self.flags_and_offset() & FRAG_OFFSET_MASK;
        self.set_flags_and_offset(value);
    }

    /// Sets or clears the don't-fragment flag.
    #[inline]
    pub fn set_dont_frag(&mut self, value: bool) {
        let old = self.flags_and_offset() & !FLAG_DONT_FRAG;
        self.set_flags_and_offset(if value { old | FLAG_DONT_FRAG } else { old });
    }

    /// Sets or clears the more-fragments flag.
    #[inline]
    pub fn set_more_frags(&mut self, value: bool) {
        let old = self.flags_and_offset() & !FLAG_MORE_FRAGS;
        self.set_flags_and_offset(if value { old | FLAG_MORE_FRAGS } else { old });
    }

    /// Sets the fragment offset in bytes (must be a multiple of 8; the low bits are dropped).
    #[inline]
    pub fn set_frag_offset(&mut self, value: u16) {
        let old = self.flags_and_offset() & !FRAG_OFFSET_MASK;
        self.set_flags_and_offset(old | (value >> 3));
    }

    /// Sets the time to live.
    #[inline]
    pub fn set_hop_limit(&mut self, value: u8) {
        self.buffer.as_mut()[field::TTL] = value;
    }

    /// Sets the time to live; same as [`set_hop_limit`](Self::set_hop_limit).
    #[inline]
    pub fn set_ttl(&mut self, value: u8) {
        self.set_hop_limit(value);
    }

    /// Sets the protocol of the payload.
    #[inline]
    pub fn set_next_header(&mut self, value: Protocol) {
        self.buffer.as_mut()[field::PROTOCOL] = value.into();
    }

    /// Sets the protocol; same as [`set_next_header`](Self::set_next_header).
    #[inline]
    pub fn set_protocol(&mut self, value: Protocol) {
        self.set_next_header(value);
    }

    /// Sets the checksum field.
    #[inline]
    pub fn set_checksum(&mut self, value: u16) {
        bytes::set_u16(self.buffer.as_mut(), field::CHECKSUM, value);
    }

    /// Sets the source address.
    #[inline]
    pub fn set_src_addr(&mut self, value: Ipv4Address) {
        self.buffer.as_mut()[field::SRC_ADDR..field::DST_ADDR].copy_from_slice(&value.0);
    }

    /// Sets the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, value: Ipv4Address) {
        self.buffer.as_mut()[field::DST_ADDR..field::OPTIONS].copy_from_slice(&value.0);
    }

    /// The options bytes, writable.
    #[inline]
    pub fn options_mut(&mut self) -> &mut [u8] {
        let end = usize::from(self.header_len());
        bytes::clamped_mut(self.buffer.as_mut(), field::OPTIONS, end)
    }

    /// The payload, writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = usize::from(self.header_len());
        let end = usize::from(self.total_len());
        bytes::clamped_mut(self.buffer.as_mut(), start, end)
    }

    /// Recomputes and stores the header checksum.
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let value = checksum::checksum(self.header());
        self.set_checksum(value);
    }

    /// Decrements the TTL and patches the checksum incrementally (RFC 1624), the
    /// forwarding fast path. Returns the new TTL, or `None` (packet untouched) if the TTL
    /// was already 0.
    #[inline]
    pub fn decrement_hop_limit(&mut self) -> Option<u8> {
        let ttl = self.hop_limit().checked_sub(1)?;
        let proto = self.buffer.as_ref()[field::PROTOCOL];
        let old = u16::from_be_bytes([ttl + 1, proto]);
        let new = u16::from_be_bytes([ttl, proto]);
        self.set_hop_limit(ttl);
        let csum = checksum::update_u16(self.checksum(), old, new);
        self.set_checksum(csum);
        Some(ttl)
    }

    /// Rewrites the ToS byte and patches the checksum incrementally (how the switch sets
    /// or clears the in-network marking bit).
    #[inline]
    pub fn set_tos_update_checksum(&mut self, value: u8) {
        let ver_ihl = self.buffer.as_ref()[field::VER_IHL];
        let old = u16::from_be_bytes([ver_ihl, self.tos()]);
        let new = u16::from_be_bytes([ver_ihl, value]);
        self.set_tos(value);
        let csum = checksum::update_u16(self.checksum(), old, new);
        self.set_checksum(csum);
    }

    /// Rewrites the source address and patches the checksum incrementally.
    #[inline]
    pub fn set_src_addr_update_checksum(&mut self, value: Ipv4Address) {
        let old = self.src_addr().to_u32();
        self.set_src_addr(value);
        let csum = checksum::update_u32(self.checksum(), old, value.to_u32());
        self.set_checksum(csum);
    }

    /// Rewrites the destination address and patches the checksum incrementally.
    #[inline]
    pub fn set_dst_addr_update_checksum(&mut self, value: Ipv4Address) {
        let old = self.dst_addr().to_u32();
        self.set_dst_addr(value);
        let csum = checksum::update_u32(self.checksum(), old, value.to_u32());
        self.set_checksum(csum);
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Ipv4Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The parsed form of an unfragmented IPv4 header (options are skipped on parse and never
/// emitted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Repr {
    /// Source address.
    pub src_addr: Ipv4Address,
    /// Destination address.
    pub dst_addr: Ipv4Address,
    /// Protocol of the payload.
    pub next_header: Protocol,
    /// Payload length in bytes (total length minus header length); at most 65515.
    pub payload_len: usize,
    /// Time to live.
    pub hop_limit: u8,
    /// The whole type-of-service byte, kept raw because the in-network protocols use one
    /// of its bits as a marker.
    pub tos: u8,
}

impl Ipv4Repr {
    /// Parses a header and verifies its checksum.
    ///
    /// Errors: the length errors of [`Ipv4Packet::check_len`]; `Malformed` if the version
    /// is not 4; `Checksum` if the checksum is wrong; `Unsupported` for a fragment.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Ipv4Packet<&T>) -> Result<Ipv4Repr> {
        Self::parse_inner(packet, true)
    }

    /// Like [`parse`](Self::parse) without verifying the checksum, for callers that trust
    /// the sender (the in-memory fabric) or verified it already.
    pub fn parse_unchecked_checksum<T: AsRef<[u8]> + ?Sized>(packet: &Ipv4Packet<&T>) -> Result<Ipv4Repr> {
        Self::parse_inner(packet, false)
    }

    fn parse_inner<T: AsRef<[u8]> + ?Sized>(packet: &Ipv4Packet<&T>, verify: bool) -> Result<Ipv4Repr> {
        packet.check_len()?;
        if packet.version() != 4 {
            return Err(Error::Malformed);
        }
        if verify && !packet.verify_checksum() {
            return Err(Error::Checksum);
        }
        if packet.is_fragment() {
            return Err(Error::Unsupported);
        }
        let payload_len = usize::from(packet.total_len()) - usize::from(packet.header_len());
        Ok(Ipv4Repr {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            next_header: packet.next_header(),
            payload_len,
            hop_limit: packet.hop_limit(),
            tos: packet.tos(),
        })
    }

    /// Bytes [`emit`](Self::emit) writes: a 20-byte header.
    #[inline]
    pub const fn buffer_len(&self) -> usize {
        field::OPTIONS
    }

    /// Writes a 20-byte header (identification 0, don't-fragment set) with a correct
    /// checksum into `packet`, which must be at least [`buffer_len`](Self::buffer_len)
    /// bytes long (panics otherwise). A `payload_len` above 65515 saturates the total
    /// length at 65535. The payload bytes are left as they are.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut Ipv4Packet<&mut T>) {
        let total = u16::try_from(self.payload_len.saturating_add(field::OPTIONS)).unwrap_or(u16::MAX);
        packet.set_version(4);
        packet.set_header_len(field::OPTIONS as u8);
        packet.set_tos(self.tos);
        packet.set_total_len(total);
        packet.set_ident(0);
        packet.set_flags_and_offset(FLAG_DONT_FRAG);
        packet.set_hop_limit(self.hop_limit);
        packet.set_next_header(self.next_header);
        packet.set_src_addr(self.src_addr);
        packet.set_dst_addr(self.dst_addr);
        packet.fill_checksum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sum of big-endian 16-bit words with end-around carry, written out independently of
    /// the `checksum` module.
    fn ones_sum(data: &[u8]) -> u16 {
        let mut acc: u32 = 0;
        let mut i = 0;
        while i + 1 < data.len() {
            acc += (u32::from(data[i]) << 8) | u32::from(data[i + 1]);
            i += 2;
        }
        if i < data.len() {
            acc += u32::from(data[i]) << 8;
        }
        while acc > 0xffff {
            acc = (acc & 0xffff) + (acc >> 16);
        }
        acc as u16
    }

    // 10.0.0.1 -> 10.0.0.2, UDP, TTL 64, DF, ident 0x1c46, ToS 0x04 (one reserved-style
    // marker bit), total length 24: a 20-byte header and four payload bytes, then two bytes
    // of link padding that are not part of the datagram.
    const PACKET: [u8; 26] = [
        0x45, 0x04, 0x00, 0x18, 0x1c, 0x46, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0x0a, 0x00, 0x00, 0x01, 0x0a, 0x00, 0x00, 0x02, 0xaa, 0xbb,
        0xcc, 0xdd, 0x00, 0x00,
    ];

    fn packet_with_checksum() -> [u8; 26] {
        let mut p = PACKET;
        let c = !ones_sum(&p[..20]);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        p
    }

    #[test]
    fn read_fields() {
        let bytes = packet_with_checksum();
        let p = Ipv4Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.header_len(), 20);
        assert_eq!(p.tos(), 0x04);
        assert_eq!(p.dscp(), 1);
        assert_eq!(p.ecn(), 0);
        assert_eq!(p.total_len(), 24);
        assert_eq!(p.ident(), 0x1c46);
        assert!(p.dont_frag());
        assert!(!p.more_frags());
        assert_eq!(p.frag_offset(), 0);
        assert!(!p.is_fragment());
        assert_eq!(p.ttl(), 64);
        assert_eq!(p.protocol(), Protocol::Udp);
        assert_eq!(p.src_addr(), Ipv4Address::new(10, 0, 0, 1));
        assert_eq!(p.dst_addr(), Ipv4Address::new(10, 0, 0, 2));
        assert!(p.options().is_empty());
        assert_eq!(p.payload(), &[0xaa, 0xbb, 0xcc, 0xdd]);
        assert!(p.verify_checksum());
        // Independent check: the header with its checksum sums to all ones.
        assert_eq!(ones_sum(&bytes[..20]), 0xffff);
    }

    #[test]
    fn fill_checksum_matches_hand_sum() {
        let mut bytes = PACKET;
        let mut p = Ipv4Packet::new_unchecked(&mut bytes[..]);
        assert!(!p.verify_checksum());
        p.fill_checksum();
        assert!(p.verify_checksum());
        assert_eq!(bytes, packet_with_checksum());
    }

    #[test]
    fn write_fields() {
        let mut bytes = [0u8; 24];
        let mut p = Ipv4Packet::new_unchecked(&mut bytes[..]);
        p.set_version(4);
        p.set_header_len(20);
        p.set_dscp(1);
        p.set_ecn(0);
        p.set_total_len(24);
        p.set_ident(0x1c46);
        p.clear_flags();
        p.set_dont_frag(true);
        p.set_more_frags(true);
        p.set_more_frags(false);
        p.set_frag_offset(0);
        p.set_ttl(64);
        p.set_protocol(Protocol::Udp);
        p.set_src_addr(Ipv4Address::new(10, 0, 0, 1));
        p.set_dst_addr(Ipv4Address::new(10, 0, 0, 2));
        p.payload_mut().copy_from_slice(&[0xaa, 0xbb, 0xcc, 0xdd]);
        p.fill_checksum();
        assert_eq!(bytes[..], packet_with_checksum()[..24]);
    }

    #[test]
    fn fragments_and_flags() {
        let mut bytes = packet_with_checksum();
        let mut p = Ipv4Packet::new_unchecked(&mut bytes[..]);
        p.set_frag_offset(1480);
        p.set_more_frags(true);
        assert_eq!(p.frag_offset(), 1480);
        assert!(p.more_frags());
        assert!(p.dont_frag());
        assert!(p.is_fragment());
        p.fill_checksum();
        let p = Ipv4Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(Ipv4Repr::parse(&p), Err(Error::Unsupported));
    }

    #[test]
    fn options_are_exposed() {
        // IHL 6: four option bytes (NOP NOP NOP EOL), no payload.
        let mut bytes = [0u8; 24];
        bytes[..20].copy_from_slice(&PACKET[..20]);
        bytes[0] = 0x46;
        bytes[3] = 24;
        bytes[20..].copy_from_slice(&[1, 1, 1, 0]);
        let mut p = Ipv4Packet::new_unchecked(&mut bytes[..]);
        p.fill_checksum();
        let p = Ipv4Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(p.header_len(), 24);
        assert_eq!(p.options(), &[1, 1, 1, 0]);
        assert!(p.payload().is_empty());
        let repr = Ipv4Repr::parse(&p).unwrap();
        assert_eq!(repr.payload_len, 0);
    }

    #[test]
    fn check_len_cases() {
        let good = packet_with_checksum();
        assert_eq!(Ipv4Packet::new_checked(&good[..19]).unwrap_err(), Error::Truncated);
        // IHL 4.
        let mut b = good;
        b[0] = 0x44;
        assert_eq!(Ipv4Packet::new_checked(&b[..]).unwrap_err(), Error::Malformed);
        // IHL 15 = 60 bytes > 26-byte buffer (total length raised so it is not the cause).
        let mut b = good;
        b[0] = 0x4f;
        b[3] = 60;
        assert_eq!(Ipv4Packet::new_checked(&b[..]).unwrap_err(), Error::Truncated);
        // Total length below the header length.
        let mut b = good;
        b[3] = 19;
        assert_eq!(Ipv4Packet::new_checked(&b[..]).unwrap_err(), Error::Malformed);
        // Total length beyond the buffer.
        let mut b = good;
        b[3] = 27;
        assert_eq!(Ipv4Packet::new_checked(&b[..]).unwrap_err(), Error::Truncated);
        // Exactly the datagram, no padding.
        assert!(Ipv4Packet::new_checked(&good[..24]).is_ok());
    }

    #[test]
    fn repr_parse_and_emit() {
        let bytes = packet_with_checksum();
        let p = Ipv4Packet::new_checked(&bytes[..]).unwrap();
        let repr = Ipv4Repr::parse(&p).unwrap();
        assert_eq!(
            repr,
            Ipv4Repr {
                src_addr: Ipv4Address::new(10, 0, 0, 1),
                dst_addr: Ipv4Address::new(10, 0, 0, 2),
                next_header: Protocol::Udp,
                payload_len: 4,
                hop_limit: 64,
                tos: 0x04,
            }
        );
        let mut out = [0u8; 24];
        out[20..].copy_from_slice(&bytes[20..24]);
        repr.emit(&mut Ipv4Packet::new_unchecked(&mut out[..]));
        // Same bytes except the identification, which emit sets to 0.
        let mut expected = PACKET;
        expected[4] = 0;
        expected[5] = 0;
        let c = !ones_sum(&expected[..20]);
        expected[10..12].copy_from_slice(&c.to_be_bytes());
        assert_eq!(out[..], expected[..24]);
    }

    #[test]
    fn repr_rejects_bad_version_and_checksum() {
        let mut b = packet_with_checksum();
        b[10] ^= 0x01;
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Ipv4Repr::parse(&p), Err(Error::Checksum));
        assert!(Ipv4Repr::parse_unchecked_checksum(&p).is_ok());
        let mut b = PACKET;
        b[0] = 0x65;
        let mut p = Ipv4Packet::new_unchecked(&mut b[..]);
        p.fill_checksum();
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(Ipv4Repr::parse(&p), Err(Error::Malformed));
    }

    #[test]
    fn incremental_rewrites_keep_checksum_valid() {
        let mut b = packet_with_checksum();
        let mut p = Ipv4Packet::new_unchecked(&mut b[..]);
        assert_eq!(p.decrement_hop_limit(), Some(63));
        assert!(p.verify_checksum());
        p.set_tos_update_checksum(0x00);
        assert!(p.verify_checksum());
        p.set_src_addr_update_checksum(Ipv4Address::new(192, 168, 7, 9));
        p.set_dst_addr_update_checksum(Ipv4Address::new(255, 255, 255, 255));
        assert!(p.verify_checksum());
        let incremental = p.checksum();
        p.fill_checksum();
        assert_eq!(p.checksum(), incremental);
        p.set_hop_limit(0);
        p.fill_checksum();
        assert_eq!(p.decrement_hop_limit(), None);
        assert_eq!(p.hop_limit(), 0);
    }

    #[test]
    fn mutated_lengths_do_not_panic() {
        let mut b = packet_with_checksum();
        let mut p = Ipv4Packet::new_checked(&mut b[..]).unwrap();
        p.set_header_len(60);
        p.set_total_len(u16::MAX);
        assert_eq!(p.options().len(), 6);
        assert!(p.payload().is_empty());
        let _ = p.verify_checksum();
        p.fill_checksum();
    }

    #[test]
    fn address_text_and_kinds() {
        let a = Ipv4Address::new(192, 168, 1, 20);
        assert_eq!(a.to_string(), "192.168.1.20");
        assert_eq!("192.168.1.20".parse(), Ok(a));
        assert_eq!(a.to_u32(), 0xc0a8_0114);
        assert_eq!(Ipv4Address::from_u32(0xc0a8_0114), a);
        for bad in ["", "1.2.3", "1.2.3.4.5", "256.1.1.1", "1..2.3", "+1.2.3.4", "1.2.3.0004"] {
            assert_eq!(bad.parse::<Ipv4Address>(), Err(Error::Malformed), "{bad}");
        }
        assert!(Ipv4Address::new(224, 0, 0, 1).is_multicast());
        assert!(Ipv4Address::new(127, 0, 0, 1).is_loopback());
        assert!(Ipv4Address::new(169, 254, 3, 4).is_link_local());
        assert!(Ipv4Address::BROADCAST.is_broadcast());
        assert!(Ipv4Address::UNSPECIFIED.is_unspecified());
        assert!(a.is_unicast());
        assert!(!Ipv4Address::BROADCAST.is_unicast());
        let std: std::net::Ipv4Addr = a.into();
        assert_eq!(Ipv4Address::from(std), a);
    }

    #[test]
    fn cidr() {
        let c: Ipv4Cidr = "10.1.2.3/16".parse().unwrap();
        assert!(c.contains(Ipv4Address::new(10, 1, 255, 255)));
        assert!(!c.contains(Ipv4Address::new(10, 2, 0, 0)));
        assert_eq!(c.netmask(), Ipv4Address::new(255, 255, 0, 0));
        assert_eq!(c.network().address, Ipv4Address::new(10, 1, 0, 0));
        assert_eq!(c.to_string(), "10.1.2.3/16");
        let all = Ipv4Cidr::new(Ipv4Address::UNSPECIFIED, 0).unwrap();
        assert!(all.contains(Ipv4Address::BROADCAST));
        assert!(all.contains_subnet(&c));
        assert!(!c.contains_subnet(&all));
        let host = Ipv4Cidr::new(Ipv4Address::new(10, 1, 2, 3), 32).unwrap();
        assert!(host.contains(Ipv4Address::new(10, 1, 2, 3)));
        assert!(!host.contains(Ipv4Address::new(10, 1, 2, 4)));
        assert!(c.contains_subnet(&host));
        // Out-of-range prefix lengths built through the public fields behave as /32.
        let odd = Ipv4Cidr { address: Ipv4Address::new(10, 1, 2, 3), prefix_len: 200 };
        assert_eq!(odd.netmask_u32(), u32::MAX);
        assert_eq!(Ipv4Cidr::new(Ipv4Address::UNSPECIFIED, 33), Err(Error::Malformed));
        for bad in ["10.0.0.0", "10.0.0.0/", "10.0.0.0/33", "10.0.0.0/+1", "x/8"] {
            assert!(bad.parse::<Ipv4Cidr>().is_err(), "{bad}");
        }
    }
}
