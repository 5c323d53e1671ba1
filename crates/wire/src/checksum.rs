//! The Internet checksum (RFC 1071) and its incremental update (RFC 1624).
//!
//! Terminology used here:
//! - a *sum* is the folded 16-bit one's complement sum of some bytes, taken as big-endian
//!   16-bit words (an odd trailing byte is the high byte of a last word padded with zero);
//! - a *checksum* is the complement of a sum, the value written into a header.
//!
//! Data whose checksum field holds a correct checksum sums to `0xFFFF`.
//!
//! The switch rewrites headers on every packet (TTL decrement, address or ToS rewrite), so
//! the incremental helpers [`update_u16`] and [`update_u32`] exist to avoid re-summing the
//! header: they fold the change of one field into the old checksum in a handful of
//! branch-free integer operations.

use crate::ipv4::{Ipv4Address, Protocol};

/// Folds a wide accumulator of 16-bit word sums down to 16 bits with end-around carry.
#[inline]
fn fold(mut acc: u64) -> u16 {
    // Each step at least halves the number of significant bits above 16; four steps take
    // any u64 down to 16 bits.
    acc = (acc & 0xffff_ffff) + (acc >> 32);
    acc = (acc & 0xffff) + (acc >> 16);
    acc = (acc & 0xffff) + (acc >> 16);
    acc = (acc & 0xffff) + (acc >> 16);
    acc as u16
}

/// The folded one's complement sum of `data` (not complemented).
///
/// Works on eight bytes at a time: because 2^16 ≡ 1 (mod 2^16 − 1), adding 32-bit
/// big-endian words into a wide accumulator and folding at the end gives the same result
/// as adding 16-bit words with end-around carry.
#[inline]
pub fn sum(data: &[u8]) -> u16 {
    let mut acc: u64 = 0;
    let mut chunks = data.chunks_exact(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let word = u64::from_be_bytes(word);
        // Two 32-bit halves per step: at most 2^33 per step, so the u64 cannot overflow
        // before 2^31 steps (16 GiB of data).
        acc += (word >> 32) + (word & 0xffff_ffff);
    }
    let mut rest = chunks.remainder();
    if rest.len() >= 4 {
        acc += u64::from(u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]));
        rest = &rest[4..];
    }
    if rest.len() >= 2 {
        acc += u64::from(u16::from_be_bytes([rest[0], rest[1]]));
        rest = &rest[2..];
    }
    if let Some(&last) = rest.first() {
        acc += u64::from(last) << 8;
    }
    fold(acc)
}

/// One's complement addition of several sums (for example a pseudo-header sum and a
/// payload sum).
#[inline]
pub fn combine(sums: &[u16]) -> u16 {
    fold(sums.iter().map(|&s| u64::from(s)).sum())
}

/// The checksum of `data`: the complement of its [`sum`]. Zero the checksum field first.
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    !sum(data)
}

/// The sum (not complemented) of the IPv4 pseudo header that UDP and TCP checksums cover:
/// source and destination address, protocol number and the upper-layer length.
#[inline]
pub fn pseudo_header_ipv4(src_addr: Ipv4Address, dst_addr: Ipv4Address, protocol: Protocol, length: u16) -> u16 {
    let acc = u64::from(src_addr.to_u32() >> 16)
        + u64::from(src_addr.to_u32() & 0xffff)
        + u64::from(dst_addr.to_u32() >> 16)
        + u64::from(dst_addr.to_u32() & 0xffff)
        + u64::from(u8::from(protocol))
        + u64::from(length);
    fold(acc)
}

/// Updates checksum `csum` after a 16-bit word of the covered data changed from `old` to
/// `new` (RFC 1624, equation 3: `HC' = ~(~HC + ~m + m')`).
///
/// For a checksum over data that is not all zero (an IPv4 header always has its version
/// byte set) the result equals full recomputation, including the choice between the two
/// representations of zero. UDP callers must leave a checksum of 0 ("none") alone and
/// send a result of 0 as `0xFFFF`.
///
/// A change of one byte is a change of the word that holds it: for the TTL (the high byte
/// of the TTL/protocol word) pass `u16::from_be_bytes([old_ttl, protocol])` and
/// `u16::from_be_bytes([new_ttl, protocol])`.
#[inline]
#[must_use]
pub fn update_u16(csum: u16, old: u16, new: u16) -> u16 {
    let acc = u64::from(!csum) + u64::from(!old) + u64::from(new);
    !fold(acc)
}

/// Updates checksum `csum` after a 32-bit, 16-bit-aligned field of the covered data (an
/// IPv4 address, for example) changed from `old` to `new`. Same rules as [`update_u16`].
#[inline]
#[must_use]
pub fn update_u32(csum: u16, old: u32, new: u32) -> u16 {
    let not_old = !old;
    let acc = u64::from(!csum) + u64::from(not_old >> 16) + u64::from(not_old & 0xffff) + u64::from(new >> 16) + u64::from(new & 0xffff);
    !fold(acc)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Straightforward RFC 1071 reference: 16-bit words, carry folded after each add.
    fn reference_sum(data: &[u8]) -> u16 {
        let mut acc: u32 = 0;
        for pair in data.chunks(2) {
            let word = if pair.len() == 2 { u16::from_be_bytes([pair[0], pair[1]]) } else { u16::from_be_bytes([pair[0], 0]) };
            acc += u32::from(word);
            acc = (acc & 0xffff) + (acc >> 16);
        }
        acc as u16
    }

    #[test]
    fn rfc1071_example() {
        // The worked example of RFC 1071 section 3: 00 01 f2 03 f4 f5 f6 f7 sums to ddf2.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(sum(&data), 0xddf2);
        assert_eq!(checksum(&data), !0xddf2);
    }

    #[test]
    fn empty_and_odd_lengths() {
        assert_eq!(sum(&[]), 0);
        assert_eq!(sum(&[0xab]), 0xab00);
        assert_eq!(sum(&[0x12, 0x34, 0x56]), 0x1234 + 0x5600);
    }

    #[test]
    fn matches_reference_on_all_tail_lengths() {
        let data: Vec<u8> = (0..300u32).map(|i| (i * 37 + 11) as u8).collect();
        for len in 0..data.len() {
            assert_eq!(sum(&data[..len]), reference_sum(&data[..len]), "len {len}");
        }
        let ones = vec![0xffu8; 1001];
        assert_eq!(sum(&ones), reference_sum(&ones));
    }

    #[test]
    fn combine_adds_with_carry() {
        assert_eq!(combine(&[0xffff, 0x0001]), 0x0001);
        assert_eq!(combine(&[0x8000, 0x8000]), 0x0001);
        assert_eq!(combine(&[]), 0);
    }

    #[test]
    fn pseudo_header_by_hand() {
        let src = Ipv4Address([10, 0, 0, 1]);
        let dst = Ipv4Address([10, 0, 0, 2]);
        // 0x0a00 + 0x0001 + 0x0a00 + 0x0002 + 17 + 12
        let expected = 0x0a00u32 + 0x0001 + 0x0a00 + 0x0002 + 17 + 12;
        assert_eq!(pseudo_header_ipv4(src, dst, Protocol::Udp, 12), expected as u16);
    }

    #[test]
    fn incremental_ttl_decrement() {
        // UDP from 192.168.0.1 to 192.168.0.199, TTL 64, total length 0x73: its header
        // checksum is 0xb861 (a widely reproduced worked example).
        let mut header =
            [0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7];
        assert_eq!(checksum(&header), 0xb861);
        let csum = checksum(&header);
        let old = u16::from_be_bytes([header[8], header[9]]);
        header[8] -= 1;
        let new = u16::from_be_bytes([header[8], header[9]]);
        assert_eq!(update_u16(csum, old, new), checksum(&header));
        let old_addr = u32::from_be_bytes([header[12], header[13], header[14], header[15]]);
        header[12..16].copy_from_slice(&[192, 168, 1, 77]);
        let before = checksum(&{
            let mut h = header;
            h[12..16].copy_from_slice(&old_addr.to_be_bytes());
            h
        });
        assert_eq!(update_u32(before, old_addr, 0xc0a8_014d), checksum(&header));
    }

    #[test]
    fn incremental_noop_and_extremes() {
        assert_eq!(update_u16(0x1234, 0xabcd, 0xabcd), 0x1234);
        assert_eq!(update_u32(0x1234, 7, 7), 0x1234);
        // Must not overflow anywhere with all-ones inputs.
        let _ = update_u16(0xffff, 0xffff, 0xffff);
        let _ = update_u32(0, 0, u32::MAX);
    }
}
