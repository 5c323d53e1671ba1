//! Answering from the switch: a received UDP/IPv4 frame turned, in place, into a reply to
//! its sender (DAIET's and SwitchAgg's ACKs, Hare's replies). One place for what several
//! programs do the same way.

use wire::L2_L4_LEN;

/// Swap the frame's MAC addresses, IPv4 addresses and UDP ports, the UDP header at
/// `udp_at` (34 unless the IPv4 header has options). False, and nothing changed, if the
/// header region is too short for that.
#[inline]
pub fn swap_addresses(h: &mut [u8], udp_at: usize) -> bool {
    if udp_at < 34 {
        return false;
    }
    let Some(h) = h.get_mut(..udp_at + 4) else { return false };
    swap::<6>(h, 0, 6);
    swap::<4>(h, 26, 30);
    swap::<2>(h, udp_at, udp_at + 2);
    true
}

/// TTL of a reply the switch makes: a new packet as far as hops go, so a host's default
/// (Linux's `ip_default_ttl`), whatever the request had left after its hops.
pub const REPLY_TTL: u8 = 64;

/// Address the frame as a reply to the neighbour it came from: destination MAC the source
/// MAC it arrived with, source MAC the one it was addressed to (`arrival`: destination
/// then source, as the parser extracted them, before any routing rewrite), IPv4 addresses
/// and UDP ports swapped (UDP header at `udp_at`), TTL [`REPLY_TTL`]. The IPv4 checksum is
/// left to the caller ([`fix_lengths`]). For a frame that was not routed this is
/// [`swap_addresses`] with a fresh TTL. False, and nothing changed, if the header region is
/// too short.
#[inline]
pub fn address_reply(h: &mut [u8], udp_at: usize, arrival: &[u8; 12]) -> bool {
    if !swap_addresses(h, udp_at) {
        return false;
    }
    h[0..6].copy_from_slice(&arrival[6..12]);
    h[6..12].copy_from_slice(&arrival[0..6]);
    h[22] = REPLY_TTL;
    true
}

/// Swap the frame's Ethernet addresses (a layer-2 protocol's reply, e.g. INaaS). False,
/// and nothing changed, if the frame is shorter than the two addresses.
#[inline]
pub fn swap_macs(h: &mut [u8]) -> bool {
    let Some(h) = h.get_mut(..12) else { return false };
    swap::<6>(h, 0, 6);
    true
}

/// Exchange the `N`-byte fields at `a` and `b` (both inside `h`: the caller checked).
#[inline(always)]
fn swap<const N: usize>(h: &mut [u8], a: usize, b: usize) {
    let x: [u8; N] = *h[a..].first_chunk().expect("field inside the header region");
    let y: [u8; N] = *h[b..].first_chunk().expect("field inside the header region");
    h[a..a + N].copy_from_slice(&y);
    h[b..b + N].copy_from_slice(&x);
}

/// After the header region changed length, for a frame of `frame_len` bytes with an IPv4
/// header without options: IPv4 total length and header checksum, UDP length (the UDP
/// checksum cleared: optional over IPv4). A region shorter than [`L2_L4_LEN`] is left
/// alone.
#[inline]
pub fn fix_lengths(h: &mut [u8], frame_len: usize) {
    // The fixed 42 bytes as one array: every index below is checked once, here.
    let Some(h) = h.first_chunk_mut::<L2_L4_LEN>() else { return };
    let ip_len = (frame_len - 14) as u16;
    h[16..18].copy_from_slice(&ip_len.to_be_bytes());
    let udp_len = (frame_len - 34) as u16;
    h[38..40].copy_from_slice(&udp_len.to_be_bytes());
    h[40..42].fill(0);
    h[24..26].fill(0);
    let c = wire::checksum::sum(&h[14..34]);
    h[24..26].copy_from_slice(&(!c).to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swap_and_lengths_match_the_field_by_field_rewrite() {
        let mut f: Vec<u8> = (0..L2_L4_LEN as u32 + 20).map(|i| (i * 37 + 11) as u8).collect();
        let mut want = f.clone();
        for i in 0..6 {
            want.swap(i, 6 + i);
        }
        for i in 0..4 {
            want.swap(26 + i, 30 + i);
        }
        want.swap(34, 36);
        want.swap(35, 37);
        assert!(swap_addresses(&mut f, 34));
        assert_eq!(f, want);
        let n = f.len();
        fix_lengths(&mut f, n);
        assert_eq!(u16::from_be_bytes([f[16], f[17]]) as usize, n - 14);
        assert_eq!(u16::from_be_bytes([f[38], f[39]]) as usize, n - 34);
        assert_eq!(wire::checksum::sum(&f[14..34]), 0xFFFF, "a valid IPv4 header checksum");
        // With IPv4 options the UDP ports are further on.
        let mut g: Vec<u8> = (0..60u32).map(|i| i as u8).collect();
        let mut want = g.clone();
        want.swap(38, 40);
        want.swap(39, 41);
        assert!(swap_addresses(&mut g, 38));
        assert_eq!(&g[34..42], &want[34..42]);
        // A routed frame (MACs rewritten since it arrived): addressed back to where it came from.
        let mut r: Vec<u8> = (0..L2_L4_LEN as u8).collect();
        let arrival: [u8; 12] = [0xAA, 0xAA, 0xAA, 0xAA, 0xAA, 0x01, 0xBB, 0xBB, 0xBB, 0xBB, 0xBB, 0x02];
        let mut want = r.clone();
        assert!(swap_addresses(&mut want, 34));
        want[0..6].copy_from_slice(&arrival[6..]);
        want[6..12].copy_from_slice(&arrival[..6]);
        want[22] = REPLY_TTL;
        assert!(address_reply(&mut r, 34, &arrival));
        assert_eq!(r, want);
        // Too short: untouched.
        let mut short = vec![7u8; 30];
        assert!(!swap_addresses(&mut short, 34));
        assert!(!address_reply(&mut short, 34, &arrival));
        fix_lengths(&mut short, 30);
        assert_eq!(short, vec![7u8; 30]);
    }
}
