//! Zero-copy packet views and their parsed forms.
//!
//! Every protocol has two halves:
//!
//! - a **view** (`EthernetFrame<T>`, `Ipv4Packet<T>`, ...) over any `T: AsRef<[u8]>`, with
//!   getters that read fields in place and, when `T: AsMut<[u8]>`, setters that write them
//!   in place. Views never allocate and never copy the buffer; the switch pipeline uses them
//!   on every packet. `new_checked` validates every length the getters rely on, so after it
//!   succeeds no getter can index out of bounds; `new_unchecked` skips that for callers that
//!   already know (its getters may panic on a short buffer).
//! - a **repr** (`EthernetRepr`, `Ipv4Repr`, ...): a plain value holding the fields that
//!   matter, with `parse` (view to value, validating semantics and checksums), `buffer_len`
//!   and `emit` (value to bytes, filling checksums). Host code builds packets with reprs.
//!
//! Malformed bytes produce an [`Error`], never a panic; the `fuzz/` project at the
//! workspace root checks that.
//!
//! The style follows the `wire` module of smoltcp.
//!
//! A worked example (build Ethernet/IPv4/UDP, then forward it in place) is on [`EthernetFrame`].

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod allreduce;
pub mod arp;
pub mod checksum;
pub mod daiet;
pub mod error;
pub mod ethernet;
pub mod hare;
pub mod icmpv4;
pub mod inaas;
pub mod ipv4;
pub mod netsha;
pub mod switchagg;
pub mod udp;

pub use arp::{ArpOperation, ArpPacket, ArpRepr};
pub use error::{Error, Result};
pub use ethernet::{EtherType, EthernetAddress, EthernetFrame, EthernetRepr};
pub use icmpv4::{Icmpv4Message, Icmpv4Packet, Icmpv4Repr};
pub use ipv4::{Ipv4Address, Ipv4Cidr, Ipv4Packet, Ipv4Repr, Protocol as IpProtocol};
pub use netsha::{NetshaPacket, NetshaRepr, QueryPacket, QueryRepr};
pub use udp::{UdpPacket, UdpRepr};

/// Bytes of the Ethernet, IPv4 (without options) and UDP headers: where the UDP payload,
/// and so every in-network protocol's header, begins in the frames the switch programs
/// handle.
pub const L2_L4_LEN: usize = EthernetFrame::<&[u8]>::HEADER_LEN + Ipv4Packet::<&[u8]>::MIN_HEADER_LEN + UdpPacket::<&[u8]>::HEADER_LEN;

/// Whether `frame` is Ethernet/IPv4/UDP with an IPv4 header without options and all
/// [`L2_L4_LEN`] header bytes present: the frames whose UDP payload begins at
/// [`L2_L4_LEN`]. (The switch programs parse only these; anything else is malformed.)
#[inline]
pub fn is_ipv4_udp(frame: &[u8]) -> bool {
    const ETH: usize = EthernetFrame::<&[u8]>::HEADER_LEN;
    frame.len() >= L2_L4_LEN
        && frame[ethernet::field::ETHERTYPE..ethernet::field::ETHERTYPE + 2] == u16::from(EtherType::Ipv4).to_be_bytes()
        && frame[ETH + ipv4::field::VER_IHL] == 0x45
        && frame[ETH + ipv4::field::PROTOCOL] == u8::from(IpProtocol::Udp)
}

/// Big-endian field access shared by the views. Callers guarantee the bounds (the checked
/// constructors validate them once).
pub(crate) mod bytes {
    #[inline]
    pub(crate) fn get_u16(data: &[u8], at: usize) -> u16 {
        u16::from_be_bytes([data[at], data[at + 1]])
    }

    #[inline]
    pub(crate) fn set_u16(data: &mut [u8], at: usize, value: u16) {
        data[at..at + 2].copy_from_slice(&value.to_be_bytes());
    }

    #[inline]
    pub(crate) fn get_array<const N: usize>(data: &[u8], at: usize) -> [u8; N] {
        let mut out = [0u8; N];
        out.copy_from_slice(&data[at..at + N]);
        out
    }

    /// `data[start..end]` clamped to the buffer, so a view whose length fields were
    /// rewritten after the checked constructor yields a shorter slice instead of panicking.
    #[inline]
    pub(crate) fn clamped(data: &[u8], start: usize, end: usize) -> &[u8] {
        let end = end.min(data.len());
        let start = start.min(end);
        &data[start..end]
    }

    /// Mutable counterpart of [`clamped`].
    #[inline]
    pub(crate) fn clamped_mut(data: &mut [u8], start: usize, end: usize) -> &mut [u8] {
        let end = end.min(data.len());
        let start = start.min(end);
        &mut data[start..end]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame built by the reprs passes the check; each of the four things it tests,
    /// changed alone, fails it.
    #[test]
    fn ipv4_udp_check_matches_the_reprs() {
        let eth = EthernetRepr {
            src_addr: EthernetAddress([2, 0, 0, 0, 0, 1]),
            dst_addr: EthernetAddress([2, 0, 0, 0, 0, 2]),
            ethertype: EtherType::Ipv4,
        };
        let (src, dst) = (Ipv4Address::new(10, 0, 0, 1), Ipv4Address::new(10, 0, 0, 2));
        let udp = UdpRepr { src_port: 1, dst_port: 2 };
        let ip =
            Ipv4Repr { src_addr: src, dst_addr: dst, next_header: IpProtocol::Udp, payload_len: udp.buffer_len(), hop_limit: 64, tos: 0 };
        let mut buf = vec![0u8; eth.buffer_len() + ip.buffer_len() + ip.payload_len];
        assert_eq!(buf.len(), L2_L4_LEN);
        let mut frame = EthernetFrame::new_unchecked(&mut buf[..]);
        eth.emit(&mut frame);
        let mut packet = Ipv4Packet::new_unchecked(frame.payload_mut());
        ip.emit(&mut packet);
        udp.emit(&mut UdpPacket::new_unchecked(packet.payload_mut()), src, dst, 0, |_| {});
        assert!(is_ipv4_udp(&buf));
        assert!(!is_ipv4_udp(&buf[..L2_L4_LEN - 1]));
        for (at, v) in [(12, 0x86), (14, 0x46), (23, 6)] {
            let mut b = buf.clone();
            b[at] = v;
            assert!(!is_ipv4_udp(&b), "byte {at} = {v:#x}");
        }
    }
}
