//! The exactly-once host protocol ([`super`]) spoken in SwitchAgg's wire format
//! (`wire::switchagg`, UDP port 7071), for the `switchagg` program.
//!
//! The mapper, reducer, Go-Back-N, fallback and completion logic are DAIET's; only the
//! encoding differs. The mapping, field by field:
//!
//! - **sender** is SwitchAgg's child id. A mapper's id is its child id at the switch
//!   (`< 256`, the program's `max_children`). The switch rewrites what it sends on to its
//!   parent with the tree's `up_child` and `up_seq`: the reducer takes a non-BYPASS data
//!   packet whose child id is at least [`SWITCH_CHILD_MIN`] as the switch's numbered stream
//!   (DAIET's `FROM_SWITCH`), so a controller configures the root switch of a tree with
//!   `up_child >= SWITCH_CHILD_MIN`. A mapper's own packet reaching the reducer (child id
//!   below it) means no switch is on the path: fallback, as in DAIET.
//! - **END** is EoT. The switch's flush ends with EoT and carries the last `up_seq`, so the
//!   reducer detects a lost switch→reducer packet by the numbers it has not seen, exactly as
//!   with DAIET's flush numbers.
//! - **epoch**: SwitchAgg has no epoch field, and the protocol has only two: 0 (in the
//!   network) and 1 (host fallback or the udp baseline, whose packets are all BYPASS). A
//!   data packet or ACK is of epoch 1 if and only if it is BYPASS (the switch's ACKs are
//!   never BYPASS; the reducer's always are).
//! - **QUERY / RESEND / DONE** are host-to-host control messages: flags `CONTROL|BYPASS`,
//!   and `seq` holds `kind << 24 | info << 16 | epoch`.
//!
//! **Keys.** Keys of 1..=64 bytes are ordinary pairs that the switch aggregates in the
//! FPE of their length group. Every other key (empty, or longer than 64 bytes) is
//! *escaped*: cut into pieces of 65..=255 bytes, each a pair whose key is a marker byte and
//! a chunk of the key; the switch aggregates no key longer than 64 bytes, so the pieces
//! travel on intact, in order and in the same packet, and the receiver glues them back. The
//! value rides on the last piece. A key of 65..=254 bytes is one piece (one byte longer);
//! the longest key is [`MAX_KEY_LEN`] (its pieces fill one packet).

use std::ops::Range;

use wire::daiet::{self as dw, flags as df};
use wire::switchagg::{self as sa, flags as sf};

use super::Header;

/// Child ids from which a switch (not a mapper) sends to the reducer (`up_child` of a
/// tree's root switch).
pub const SWITCH_CHILD_MIN: u16 = 0x8000;
/// Mapper ids must be below this (the `switchagg` program's children per tree).
pub const MAX_MAPPERS: usize = 256;
/// Longest key an escaped key can be (all its pieces in one packet of [`super::VARLEN_BUDGET`]).
pub const MAX_KEY_LEN: usize = 1300;
/// Longest key the switch aggregates (its largest FPE group).
pub const ENGINE_KEY_MAX: usize = 64;
/// Data bytes of a piece at most (255-byte key minus the marker).
const PIECE_DATA: usize = 254;
/// Marker byte of an escaped piece.
mod marker {
    /// More pieces of this key follow.
    pub const MORE: u8 = 0xE1;
    /// The last piece.
    pub const LAST: u8 = 0xE0;
    /// The empty key (one piece of zero padding).
    pub const EMPTY: u8 = 0xEE;
}
/// Control kinds in `seq >> 24`.
mod kind {
    pub const QUERY: u8 = 1;
    pub const RESEND: u8 = 2;
    pub const DONE: u8 = 3;
}

/// What a SwitchAgg mapper cannot be: an id beyond the switch's children (its keys are
/// checked by `Protocol::check_key_len`).
pub(crate) fn check_mapper(mapper_id: u16) -> Result<(), super::Error> {
    if mapper_id as usize >= MAX_MAPPERS {
        return Err(super::Error::SwitchAggMapper { id: mapper_id, max: MAX_MAPPERS });
    }
    Ok(())
}

fn header(hdr: &Header, fl: u8, seq: u32, num_pairs: u16) -> Vec<u8> {
    let mut p = vec![0u8; sa::HEADER_LEN];
    p[0] = sa::packet_type::AGGREGATION;
    p[1] = fl;
    p[2..4].copy_from_slice(&hdr.tree_id.to_be_bytes());
    p[4] = hdr.op as u8; // DAIET and SwitchAgg number sum/min/max alike (0, 1, 2)
    p[6..8].copy_from_slice(&hdr.sender.to_be_bytes());
    p[8..12].copy_from_slice(&seq.to_be_bytes());
    p[12..14].copy_from_slice(&num_pairs.to_be_bytes());
    p
}

/// Data-packet flags from the DAIET header's.
fn data_flags(hdr: &Header) -> u8 {
    if hdr.flags & df::BYPASS != 0 {
        sf::BYPASS
    } else {
        0
    }
}

/// The pairs a key becomes on the wire: itself, or its escaped pieces.
fn pieces(k: &[u8], v: u32, mut f: impl FnMut(&[u8], u32)) {
    if !k.is_empty() && k.len() <= ENGINE_KEY_MAX {
        f(k, v);
        return;
    }
    let mut buf = [0u8; 255];
    if k.is_empty() {
        buf[0] = marker::EMPTY;
        f(&buf[..ENGINE_KEY_MAX + 1], v);
        return;
    }
    // n pieces of near-equal size: each at least 65 bytes with its marker, since
    // k.len() > 64 and, for n > 1, k.len() / n > 254 (n - 1) / n >= 127.
    let n = k.len().div_ceil(PIECE_DATA);
    let mut at = 0;
    for i in 0..n {
        let len = (k.len() - at).div_ceil(n - i);
        let last = i + 1 == n;
        buf[0] = if last { marker::LAST } else { marker::MORE };
        buf[1..1 + len].copy_from_slice(&k[at..at + len]);
        f(&buf[..1 + len], if last { v } else { 0 });
        at += len;
    }
}

/// Wire bytes of a key's pairs.
pub(crate) fn wire_len(k: &[u8]) -> usize {
    let mut n = 0;
    pieces(k, 0, |p, _| n += sa::pair_len(p.len()));
    n
}

/// An empty data packet of a stream (pairs are appended by [`emit_key`]).
pub(crate) fn data_header(hdr: &Header) -> Vec<u8> {
    header(hdr, data_flags(hdr), 0, 0)
}

/// Pairs on the wire for a key (its escaped pieces, or itself).
pub(crate) fn piece_count(k: &[u8]) -> u16 {
    k.len().div_ceil(PIECE_DATA).max(1) as u16
}

/// Append a key's pairs to a data packet, counting them in `n`.
pub(crate) fn emit_key(cur: &mut Vec<u8>, k: &[u8], v: u32, n: &mut u16) {
    pieces(k, v, |pk, pv| {
        let at = cur.len();
        cur.resize(at + sa::pair_len(pk.len()), 0);
        sa::emit_pair(&mut cur[at..], pk, pv);
        *n += 1;
    });
}

/// Write a data packet's pair count.
pub(crate) fn set_num_pairs(p: &mut [u8], n: u16) {
    p[12..14].copy_from_slice(&n.to_be_bytes());
}

/// Cut a tree's pairs into SwitchAgg data packets of at most [`super::VARLEN_BUDGET`] bytes.
#[cfg(test)]
fn packetize<'a>(hdr: Header, pairs: impl Iterator<Item = (&'a [u8], u32)>) -> Vec<Vec<u8>> {
    super::Protocol::SwitchAgg.packetize(hdr, pairs)
}

/// The END (EoT) packet.
pub(crate) fn end(hdr: Header) -> Vec<u8> {
    header(&hdr, data_flags(&hdr) | sf::EOT, 0, 0)
}

/// ACK (with the acknowledged `seq`) or a QUERY/RESEND/DONE control message.
pub(crate) fn control(hdr: Header, seq: u32, info: u8) -> Vec<u8> {
    let bypass = data_flags(&hdr);
    if hdr.flags & df::ACK != 0 {
        return header(&hdr, sf::ACK | bypass, seq, 0);
    }
    let k = if hdr.flags & df::QUERY != 0 {
        kind::QUERY
    } else if hdr.flags & df::RESEND != 0 {
        kind::RESEND
    } else {
        kind::DONE
    };
    let word = (k as u32) << 24 | (info as u32) << 16 | hdr.epoch as u32;
    header(&hdr, sf::CONTROL | sf::BYPASS, word, 0)
}

/// Write the sequence number.
pub(crate) fn stamp(pkt: &mut [u8], seq: u32) {
    sa::AggPacket::new_unchecked(pkt).set_seq(seq);
}

/// A received packet's pairs, escaped keys glued back.
pub struct Pairs {
    keys: Vec<u8>,
    items: Vec<(Range<u32>, u32)>,
}

impl Pairs {
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], u32)> + '_ {
        self.items.iter().map(|(r, v)| (&self.keys[r.start as usize..r.end as usize], *v))
    }
}

/// Parse a SwitchAgg packet into the protocol's header and its pairs; None if malformed
/// (including a piece sequence cut short or an unknown control kind).
pub(crate) fn parse(payload: &[u8]) -> Option<(dw::Repr, Pairs)> {
    let p = sa::AggPacket::new_checked(payload).ok()?;
    let fl = p.flags();
    let bypass = fl & sf::BYPASS != 0;
    let mut r = dw::Repr {
        tree_id: p.tree_id(),
        flags: 0,
        op: p.op_code(),
        sender: p.child_id(),
        epoch: bypass as u16,
        seq: p.seq(),
        num_pairs: p.num_pairs().min(u8::MAX as u16) as u8,
        info: 0,
    };
    if bypass {
        r.flags |= df::BYPASS;
    }
    let mut pairs = Pairs { keys: Vec::new(), items: Vec::new() };
    if fl & sf::CONTROL != 0 {
        let w = p.seq();
        r.flags |= match (w >> 24) as u8 {
            kind::QUERY => df::QUERY,
            kind::RESEND => df::RESEND,
            kind::DONE => df::DONE,
            _ => return None,
        };
        r.info = (w >> 16) as u8;
        r.epoch = w as u16;
        r.seq = 0;
        return Some((r, pairs));
    }
    if fl & sf::ACK != 0 {
        r.flags |= df::ACK;
        return Some((r, pairs));
    }
    if fl & sf::EOT != 0 {
        r.flags |= df::END;
    }
    if !bypass && p.child_id() >= SWITCH_CHILD_MIN {
        r.flags |= df::FROM_SWITCH;
    }
    let mut open: Option<u32> = None;
    for item in p.pairs() {
        let (k, v) = item.ok()?;
        if k.len() <= ENGINE_KEY_MAX {
            if open.is_some() {
                return None;
            }
            let s = pairs.keys.len() as u32;
            pairs.keys.extend_from_slice(k);
            pairs.items.push((s..pairs.keys.len() as u32, v));
            continue;
        }
        match k[0] {
            marker::EMPTY if open.is_none() => {
                let s = pairs.keys.len() as u32;
                pairs.items.push((s..s, v));
            }
            marker::MORE | marker::LAST => {
                let s = *open.get_or_insert(pairs.keys.len() as u32);
                pairs.keys.extend_from_slice(&k[1..]);
                if k[0] == marker::LAST {
                    pairs.items.push((s..pairs.keys.len() as u32, v));
                    open = None;
                }
            }
            _ => return None,
        }
    }
    if open.is_some() {
        return None;
    }
    Some((r, pairs))
}

#[cfg(test)]
mod tests {
    use super::super::VARLEN_BUDGET;
    use super::*;
    use wire::daiet::Op;

    fn hdr(flags: u8, epoch: u16) -> Header {
        Header { tree_id: 7, flags, op: Op::Sum, sender: 3, epoch }
    }

    #[test]
    fn keys_of_every_length_roundtrip_and_pieces_bypass_the_engines() {
        let keys: Vec<Vec<u8>> = [0usize, 1, 7, 8, 63, 64, 65, 200, 254, 255, 256, 300, 508, 509, 1000, MAX_KEY_LEN]
            .iter()
            .map(|&n| (0..n).map(|i| (i * 31 % 256) as u8).collect())
            .collect();
        let pairs: Vec<(&[u8], u32)> = keys.iter().enumerate().map(|(i, k)| (k.as_slice(), i as u32 + 1)).collect();
        let pkts = packetize(hdr(0, 0), pairs.iter().copied());
        let mut got = Vec::new();
        for p in &pkts {
            assert!(p.len() <= VARLEN_BUDGET, "packet of {} bytes", p.len());
            let v = sa::AggPacket::new_checked(&p[..]).unwrap();
            assert!(v.num_pairs() <= 200);
            for kv in v.pairs() {
                let (k, _) = kv.unwrap();
                // Either an engine's key or a piece no engine holds.
                assert!(!k.is_empty() && k.len() <= 255);
                if k.len() > ENGINE_KEY_MAX {
                    assert!(matches!(k[0], marker::MORE | marker::LAST | marker::EMPTY));
                }
            }
            let (r, ps) = parse(p).unwrap();
            assert_eq!((r.tree_id, r.sender, r.epoch, r.flags), (7, 3, 0, 0));
            got.extend(ps.iter().map(|(k, v)| (k.to_vec(), v)));
        }
        let want: Vec<(Vec<u8>, u32)> = pairs.iter().map(|(k, v)| (k.to_vec(), *v)).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn control_ack_end_and_epochs() {
        let q = control(hdr(df::BYPASS | df::QUERY, 1), 0, dw::info::FINISHED);
        let (r, _) = parse(&q).unwrap();
        assert_eq!((r.flags, r.epoch, r.info, r.sender), (df::BYPASS | df::QUERY, 1, dw::info::FINISHED, 3));
        let (r, _) = parse(&control(hdr(df::BYPASS | df::RESEND, 1), 0, 0)).unwrap();
        assert_eq!((r.flags, r.epoch), (df::BYPASS | df::RESEND, 1));
        let (r, _) = parse(&control(hdr(df::BYPASS | df::DONE, 0), 0, 0)).unwrap();
        assert_eq!((r.flags, r.epoch), (df::BYPASS | df::DONE, 0));
        let (r, _) = parse(&control(hdr(df::BYPASS | df::ACK, 1), 41, 0)).unwrap();
        assert_eq!((r.flags, r.epoch, r.seq), (df::BYPASS | df::ACK, 1, 41));
        let mut e = end(hdr(0, 0));
        stamp(&mut e, 9);
        let (r, _) = parse(&e).unwrap();
        assert_eq!((r.flags, r.seq, r.epoch), (df::END, 9, 0));
        // The switch's stream: child id of a root switch.
        let mut s = end(Header { sender: SWITCH_CHILD_MIN, ..hdr(0, 0) });
        stamp(&mut s, 4);
        assert_eq!(parse(&s).unwrap().0.flags, df::END | df::FROM_SWITCH);
        // An unknown control kind or a cut piece sequence is malformed.
        let mut bad = q.clone();
        bad[8] = 9;
        assert!(parse(&bad).is_none());
        let long = vec![5u8; 600];
        let p = &packetize(hdr(0, 0), [(&long[..], 1)].into_iter())[0];
        let mut cut = p.clone();
        cut[13] -= 1; // drop the last piece
        let cut_len = cut.len() - sa::pair_len(long.len() / 3 + 1);
        assert!(parse(&cut[..cut_len]).is_none());
    }

    #[test]
    fn mapper_refuses_what_switchagg_cannot_carry() {
        use super::super::{Error, Mapper, MapperConfig, Mode, Protocol};
        let mk = |id: u16, klen: usize| {
            let mut cfg = MapperConfig::new(id, Op::Sum, Mode::Switch);
            cfg.protocol = Protocol::SwitchAgg;
            Mapper::new(cfg, &[1], vec![b'a'; klen], vec![0, klen as u64], vec![1], vec![0], 0)
        };
        assert!(mk(3, MAX_KEY_LEN).is_ok());
        assert!(matches!(mk(3, MAX_KEY_LEN + 1), Err(Error::SwitchAggKey { len, .. }) if len == MAX_KEY_LEN + 1));
        assert!(matches!(mk(MAX_MAPPERS as u16, 5), Err(Error::SwitchAggMapper { id, .. }) if id as usize == MAX_MAPPERS));
    }

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    /// Random keys of random lengths (0..=MAX_KEY_LEN) round-trip exactly; random bytes and
    /// random corruptions of valid packets never panic the parser.
    #[test]
    fn random_keys_roundtrip_and_random_bytes_never_panic() {
        let mut r = Rng(0x5A66_2222);
        for _ in 0..200 {
            let n = (r.next() % 12) as usize;
            let keys: Vec<Vec<u8>> = (0..n)
                .map(|_| {
                    let len = match r.next() % 4 {
                        0 => (r.next() % 65) as usize,
                        1 => 65 + (r.next() % 191) as usize,
                        _ => (r.next() % (MAX_KEY_LEN as u64 + 1)) as usize,
                    };
                    (0..len).map(|_| r.next() as u8).collect()
                })
                .collect();
            let pairs: Vec<(&[u8], u32)> = keys.iter().map(|k| (k.as_slice(), r.next() as u32)).collect();
            let pkts = packetize(hdr(df::BYPASS, 1), pairs.iter().copied());
            let mut got = Vec::new();
            for p in &pkts {
                assert!(p.len() <= VARLEN_BUDGET);
                let (rp, ps) = parse(p).unwrap();
                assert_eq!((rp.flags, rp.epoch), (df::BYPASS, 1));
                got.extend(ps.iter().map(|(k, v)| (k.to_vec(), v)));
                // Corrupt one byte: parse may refuse it, never panic.
                let mut bad = p.clone();
                let at = (r.next() as usize) % bad.len();
                bad[at] = r.next() as u8;
                let _ = parse(&bad);
                let _ = parse(&p[..(r.next() as usize) % p.len()]);
            }
            let want: Vec<(Vec<u8>, u32)> = pairs.iter().map(|(k, v)| (k.to_vec(), *v)).collect();
            assert_eq!(got, want);
        }
        for _ in 0..5000 {
            let len = (r.next() % 64) as usize;
            let mut b: Vec<u8> = (0..len).map(|_| r.next() as u8).collect();
            if len > 1 && r.next().is_multiple_of(2) {
                b[0] = sa::packet_type::AGGREGATION;
                b[1] &= sf::ALL;
            }
            let _ = parse(&b);
        }
    }
}
