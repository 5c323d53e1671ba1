//! NetSHa §4 "Query server selection" in the switch: a query packet's L bucket keys are
//! looked up in L exact-match tables, the server bitmaps ORed, the query multicast and
//! pruned at egress. Checked against the same selection without the switch (the OR of a
//! map's bitmaps, every server when empty), and malformed query packets are counted drops.

use std::collections::{BTreeSet, HashMap};

use pisa::{DropCode, ResourceReport, Target};
use programs::netsha::path::{query_frame, SwitchPath};
use programs::netsha::{Netsha, NetshaConfig};
use wire::netsha::{QueryPacket, QueryRepr};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn emit(q: &QueryRepr) -> Vec<u8> {
    let mut b = vec![0u8; q.buffer_len()];
    q.emit(&mut b).unwrap();
    b
}

fn drops(path: &SwitchPath, name: &str) -> u64 {
    path.netsha_drops(0).into_iter().find(|(n, _)| n == name).map(|x| x.1).unwrap()
}

/// Servers' bucket directories → the controller's entries; random queries (keys drawn
/// from the directories or absent) → the servers that receive each query equal the
/// reference selection, and each receives the query unchanged.
#[test]
fn switch_selection_equals_the_reference() {
    let (servers, l) = (24usize, 10usize);
    let cfg = NetshaConfig { tables: l as u32, ..NetshaConfig::unbounded() };
    let mut path = SwitchPath::new(&[Some(cfg)], servers);
    let mut rng = Rng(0x5eed);
    // Each server holds ~150 buckets per table out of 400 possible keys.
    let mut dir: HashMap<(usize, u64), u32> = HashMap::new();
    for s in 0..servers {
        for t in 0..l {
            for _ in 0..150 {
                let key = (rng.next() % 400).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                *dir.entry((t, key)).or_default() |= 1 << s;
            }
        }
    }
    for (&(t, key), &bits) in &dir {
        path.install_selection(t, key, bits).unwrap();
    }
    let mut to_all = 0;
    for qid in 0..300u32 {
        let keys: Vec<u64> = (0..l)
            .map(|_| {
                let k = rng.next() % 1200; // two in three keys absent from every server
                if k < 400 {
                    k.wrapping_mul(0x9E37_79B9_7F4A_7C15)
                } else {
                    k
                }
            })
            .collect();
        let q = QueryRepr { qid, keys: keys.clone(), vector: (0..100).map(|i| i as f32 * 0.5 - qid as f32).collect() };
        let out = path.send_query(&emit(&q), 1_000 + qid as u64);
        let got: BTreeSet<usize> = out.iter().map(|(s, _)| *s).collect();
        assert_eq!(got.len(), out.len(), "one copy per server");
        let bits = keys.iter().enumerate().fold(0u32, |b, (t, k)| b | dir.get(&(t, *k)).copied().unwrap_or(0));
        let want: BTreeSet<usize> = if bits == 0 { (0..servers).collect() } else { (0..servers).filter(|s| bits >> s & 1 == 1).collect() };
        to_all += (bits == 0) as usize;
        assert_eq!(got, want, "query {qid}");
        for (_, f) in &out {
            let p = QueryPacket::new_checked(&f[42..]).expect("servers receive a valid query");
            assert_eq!(QueryRepr::parse(&p).unwrap(), q);
        }
    }
    assert!(to_all > 0 && to_all < 300, "both cases exercised: {to_all} queries to every server");
    let c = path.counters(0);
    assert_eq!(c.drops[DropCode::VIOLATION.0 as usize], 0, "no hardware rule broken");
}

/// A fabric: the replicas to servers behind other switches leave addressed to their server
/// (next hop MAC, the switch's MAC, the server's IP), ToS bit clear, IPv4 checksum right,
/// UDP checksum 0, the query itself unchanged; a server without an entry gets the query as
/// the agent sent it (the rack).
#[test]
fn replicas_to_servers_behind_other_switches_are_addressed_to_them() {
    let mut path = SwitchPath::new(&[Some(NetshaConfig { tables: 4, ..NetshaConfig::unbounded() })], 3);
    path.install_selection(0, 5, 0b011).unwrap();
    path.set_server_addr(1, [2, 0, 0, 0, 0, 0x77], [2, 0, 0, 0, 0, 0x55], [10, 0, 2, 7]).unwrap();
    let q = QueryRepr { qid: 4, keys: vec![5, 1, 2, 3], vector: vec![0.25; 6] };
    let body = emit(&q);
    let sent = query_frame(&body);
    let out = path.send_query(&body, 1_000);
    assert_eq!(out.iter().map(|x| x.0).collect::<Vec<_>>(), vec![0, 1]);
    assert_eq!(out[0].1, sent, "server 0 has no entry: the query as sent");
    let f = &out[1].1;
    assert_eq!(&f[0..6], &[2, 0, 0, 0, 0, 0x77]);
    assert_eq!(&f[6..12], &[2, 0, 0, 0, 0, 0x55]);
    assert_eq!(&f[30..34], &[10, 0, 2, 7]);
    assert_eq!(f[15] & wire::netsha::TOS_BIT, 0, "ToS bit clear: no later switch selects again");
    assert!(wire::Ipv4Packet::new_unchecked(&f[14..34]).verify_checksum());
    assert_eq!(&f[40..42], &[0, 0]);
    assert_eq!(f.len(), sent.len());
    assert_eq!(
        &f[12..30],
        &{
            let mut v = sent[12..30].to_vec();
            v[3] &= !wire::netsha::TOS_BIT;
            v[12..14].copy_from_slice(&f[24..26]);
            v
        }[..]
    );
    let p = QueryPacket::new_checked(&f[42..]).expect("a valid query");
    assert_eq!(QueryRepr::parse(&p).unwrap(), q);
}

/// Malformed query packets (lying L, lying DIM, truncated keys, bad lengths) are dropped
/// and counted; a valid query after them is still selected.
#[test]
fn malformed_queries_are_counted_drops() {
    let mut path = SwitchPath::new(&[Some(NetshaConfig { tables: 4, ..NetshaConfig::unbounded() })], 4);
    path.install_selection(2, 77, 0b0100).unwrap();
    let good = QueryRepr { qid: 9, keys: vec![1, 2, 77, 3], vector: vec![1.0; 8] };
    let body = emit(&good);
    let mut bad: Vec<Vec<u8>> = Vec::new();
    // L other than the switch's table count.
    let mut b = body.clone();
    b[4] = 3;
    bad.push(b);
    let mut b = body.clone();
    b[4] = 200;
    bad.push(b);
    // DIM larger than the vector, and smaller.
    let mut b = body.clone();
    b[37..39].copy_from_slice(&9u16.to_be_bytes());
    bad.push(b);
    let mut b = body.clone();
    b[37..39].copy_from_slice(&7u16.to_be_bytes());
    bad.push(b);
    // Truncated inside the keys.
    bad.push(body[..20].to_vec());
    for (i, b) in bad.iter().enumerate() {
        let out = path.send_query(b, 1_000 + i as u64);
        assert!(out.is_empty(), "malformed query {i} reached a server");
    }
    // IP and UDP lengths that disagree with the frame.
    let mut f = query_frame(&body);
    f[16..18].copy_from_slice(&300u16.to_be_bytes());
    assert!(path.send_query_frame(&f, 1_500).is_empty());
    let mut f = query_frame(&body);
    f[38..40].copy_from_slice(&20u16.to_be_bytes());
    assert!(path.send_query_frame(&f, 1_600).is_empty());
    assert_eq!(drops(&path, "netsha_query_malformed"), bad.len() as u64 + 2);
    let out = path.send_query(&body, 2_000);
    assert_eq!(out.iter().map(|x| x.0).collect::<Vec<_>>(), vec![2]);
    assert_eq!(drops(&path, "netsha_query_pruned"), 3, "three replicas pruned at egress");
}

/// The selection tables are declared and reported: with L = 10 the tables fit tofino1's
/// stages in `netsha-tofino1`; the Table 1 program still does not fit (its slots).
#[test]
fn selection_tables_are_declared() {
    let t1 = Target::by_name("tofino1").unwrap();
    let prog = Netsha::with_config(NetshaConfig::tofino1());
    let d = pisa::Program::decl(&prog);
    let sel: Vec<_> = d.tables.iter().filter(|t| t.name.starts_with("select_")).collect();
    assert_eq!(sel.len(), 10);
    let r = ResourceReport::new(&[d], &t1);
    assert!(r.fits, "{r:?}");
    let big = Netsha::with_config(NetshaConfig::unbounded());
    assert!(!ResourceReport::new(&[pisa::Program::decl(&big)], &t1).fits);
}

/// The query counters: queries selected and the servers they went to, queries to all.
#[test]
fn query_counters_count() {
    let mut path = SwitchPath::new(&[Some(NetshaConfig { tables: 2, ..NetshaConfig::unbounded() })], 5);
    path.install_selection(0, 10, 0b00011).unwrap();
    path.install_selection(1, 20, 0b10000).unwrap();
    for (qid, keys) in [(1u32, vec![10u64, 20]), (2, vec![10, 0]), (3, vec![0, 0])] {
        let q = QueryRepr { qid, keys, vector: vec![] };
        path.send_query(&emit(&q), 1_000);
    }
    let ev: HashMap<String, u64> = path.netsha_events(0).into_iter().collect();
    assert_eq!((ev["queries_selected"], ev["servers_selected"]), (2, 5));
    assert_eq!((ev["queries_to_all_servers"], ev["servers_to_all_servers"]), (1, 0));
    assert_eq!(drops(&path, "netsha_query_pruned"), 10 - 5);
}

mod hostile {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// Arbitrary bytes and flipped valid queries to the query port: no panic, no broken
        /// hardware rule; whatever reaches a server is a well-formed query, the rest are
        /// counted drops.
        #[test]
        fn hostile_queries_are_counted_drops(
            garbage in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..120), 1..8),
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
        ) {
            let mut path = SwitchPath::new(&[Some(NetshaConfig { tables: 3, ..NetshaConfig::unbounded() })], 3);
            path.install_selection(1, 5, 0b010).unwrap();
            let mut sent = 0u64;
            let mut arrived = 0u64;
            let valid = emit(&QueryRepr { qid: 4, keys: vec![9, 5, 1], vector: vec![0.25; 6] });
            let mut bodies = garbage;
            let mut v = valid.clone();
            for (at, x) in &flips {
                let i = at % v.len();
                v[i] ^= x;
            }
            bodies.push(v);
            for (i, b) in bodies.iter().enumerate() {
                let out = path.send_query(b, 1_000 + i as u64);
                sent += 1;
                arrived += (!out.is_empty()) as u64;
                for (_, f) in out {
                    prop_assert!(QueryPacket::new_checked(&f[42..]).is_ok(), "a server got a malformed query");
                }
            }
            let c = path.counters(0);
            prop_assert_eq!(c.drops[DropCode::VIOLATION.0 as usize], 0);
            prop_assert_eq!(drops(&path, "netsha_query_malformed") + arrived, sent);
            // The valid query still goes where it should.
            let out = path.send_query(&valid, 9_000);
            prop_assert_eq!(out.iter().map(|x| x.0).collect::<Vec<_>>(), vec![1]);
        }
    }
}
