//! Table lookups against a brute-force reference, over random sequences of control-plane
//! writes: exact (narrow and wide keys), LPM and ternary; with each entry's decoded value
//! (`ProgramBuilder::decode_action`) following its parameters through every write.

use pisa::decl::{ActionDecl, ActionDecoder, KeyDecl, ParamDecl, TableDecl, MAX_ACTION_PARAMS};
use pisa::table::{FieldMatch, TableState};
use pisa::{ActionId, Gress, MatchKind};
use proptest::prelude::*;

fn decl(keys: &[(u32, MatchKind)], size: u32) -> TableDecl {
    TableDecl {
        name: "t".into(),
        doc: String::new(),
        gress: Gress::Ingress,
        stage: 0,
        size,
        keys: keys.iter().enumerate().map(|(i, (b, k))| KeyDecl { name: format!("f{i}"), bits: *b, kind: *k }).collect(),
        actions: vec![0, 1],
        default_action: 1,
        default_params: vec![],
        const_default: false,
    }
}

#[allow(dead_code)]
fn action() -> ActionDecl {
    ActionDecl { name: "a".into(), doc: String::new(), params: vec![ParamDecl { name: "v".into(), bits: 32 }] }
}

/// A decoder with a different value for every parameter (and never 0).
fn decode(p: &[u64; MAX_ACTION_PARAMS]) -> u32 {
    (p[0] as u32).rotate_left(7) ^ 0x5A5A_0001 | 1
}

fn params(v: u64) -> [u64; MAX_ACTION_PARAMS] {
    [v, 0, 0, 0, 0, 0]
}

#[derive(Clone, Debug)]
enum Op {
    Insert(Vec<u8>, Vec<u8>, i32, u64),
    Modify(Vec<u8>, Vec<u8>, i32, u64),
    Delete(Vec<u8>, Vec<u8>, i32),
    Lookup(Vec<u8>),
}

fn masked_eq(key: &[u8], value: &[u8], mask: &[u8]) -> bool {
    key.iter().zip(value).zip(mask).all(|((k, v), m)| k & m == *v)
}

/// The reference: entries in insertion order; best = highest (priority, prefix) then earliest.
struct Reference {
    entries: Vec<(Vec<u8>, Vec<u8>, i32, u64)>,
    size: usize,
    lpm: bool,
}

impl Reference {
    fn find(&self, v: &[u8], m: &[u8], p: i32) -> Option<usize> {
        self.entries.iter().position(|e| e.0 == v && e.1 == m && e.2 == p)
    }
    fn lookup(&self, key: &[u8]) -> Option<u64> {
        let mut best: Option<(i64, usize)> = None;
        for (i, e) in self.entries.iter().enumerate() {
            if masked_eq(key, &e.0, &e.1) {
                let rank = if self.lpm { e.1.iter().map(|b| b.count_ones() as i64).sum() } else { e.2 as i64 };
                if best.is_none_or(|(r, _)| rank > r) {
                    best = Some((rank, i));
                }
            }
        }
        best.map(|(_, i)| self.entries[i].3)
    }
}

fn run(kind: &str, ops: Vec<Op>) {
    let (d, key_len, lpm) = match kind {
        "narrow" => (decl(&[(12, MatchKind::Exact), (8, MatchKind::Exact)], 64), 3, false),
        "wide" => (decl(&[(80, MatchKind::Exact)], 64), 10, false),
        "lpm" => (decl(&[(32, MatchKind::Lpm)], 64), 4, true),
        _ => (decl(&[(16, MatchKind::Ternary), (8, MatchKind::Exact)], 64), 3, false),
    };
    let needs_prio = d.needs_priority();
    // Action 0 (every entry's) has a decoder; the default action 1 has none.
    let mut t = TableState::new(&d).with_decoders(&[ActionDecoder { action: ActionId(0), decode }]);
    let mut r = Reference { entries: Vec::new(), size: 64, lpm };
    for op in ops {
        match op {
            Op::Insert(v, m, p, val) => {
                let p = if needs_prio { p } else { 0 };
                let (v, m) = normalize(kind, v, m, key_len);
                let res = t.write(v.clone().into(), m.clone().into(), p, ActionId(0), &[val], false);
                let exists = r.find(&v, &m, p).is_some() || (!needs_prio && !lpm && r.entries.iter().any(|e| e.0 == v));
                if exists {
                    assert!(res.is_err(), "duplicate insert must fail");
                } else if r.entries.len() >= r.size {
                    assert!(res.is_err(), "insert into a full table must fail");
                } else {
                    res.expect("insert");
                    r.entries.push((v, m, p, val));
                }
            }
            Op::Modify(v, m, p, val) => {
                let p = if needs_prio { p } else { 0 };
                let (v, m) = normalize(kind, v, m, key_len);
                let res = t.write(v.clone().into(), m.clone().into(), p, ActionId(0), &[val], true);
                match r.find(&v, &m, p) {
                    Some(i) => {
                        res.expect("modify");
                        r.entries[i].3 = val;
                    }
                    None => assert!(res.is_err(), "modifying a missing entry must fail"),
                }
            }
            Op::Delete(v, m, p) => {
                let p = if needs_prio { p } else { 0 };
                let (v, m) = normalize(kind, v, m, key_len);
                let res = t.delete(&v, &m, p);
                match r.find(&v, &m, p) {
                    Some(i) => {
                        res.expect("delete");
                        r.entries.remove(i);
                    }
                    None => assert!(res.is_err()),
                }
            }
            Op::Lookup(k) => {
                let k: Vec<u8> = k.into_iter().chain(std::iter::repeat(0)).take(key_len).collect();
                let k = normalize(kind, k, vec![0xFF; key_len], key_len).0;
                let got = t.lookup(&k);
                let want = r.lookup(&k);
                assert_eq!(got.hit, want.is_some(), "hit for key {k:?}");
                if let Some(w) = want {
                    assert_eq!(got.param(0), w, "action data for key {k:?}");
                    assert_eq!(got.decoded, decode(&params(w)), "decoded value for key {k:?}");
                } else {
                    assert_eq!(got.action, ActionId(1), "default action on a miss");
                    assert_eq!(got.decoded, 0, "no decoder for the default action");
                }
            }
        }
        assert_eq!(t.len(), r.entries.len());
    }
}

/// Shape random bytes into a valid (value, mask) for the table kind.
fn normalize(kind: &str, v: Vec<u8>, m: Vec<u8>, n: usize) -> (Vec<u8>, Vec<u8>) {
    let mut v: Vec<u8> = v.into_iter().chain(std::iter::repeat(0)).take(n).collect();
    let mut m: Vec<u8> = m.into_iter().chain(std::iter::repeat(0)).take(n).collect();
    match kind {
        "narrow" => {
            v[0] &= 0x0F; // 12-bit field in 2 bytes
            m = vec![0x0F, 0xFF, 0xFF];
        }
        "wide" => m = vec![0xFF; n],
        "lpm" => {
            let len = (m[0] % 33) as u32;
            let mask: u32 = if len == 0 { 0 } else { u32::MAX << (32 - len) };
            m = mask.to_be_bytes().to_vec();
        }
        _ => {
            // Few distinct masks so overlaps happen often.
            m[0] = [0x00, 0xF0, 0xFF][m[0] as usize % 3];
            m[1] = [0x00, 0x0F, 0xFF][m[1] as usize % 3];
            m[2] = 0xFF;
        }
    }
    for (a, b) in v.iter_mut().zip(&m) {
        *a &= b;
    }
    (v, m)
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    // Small value space so lookups hit and entries collide.
    let bytes = || proptest::collection::vec(prop_oneof![Just(0u8), Just(1), Just(0xF0), Just(0xFF), any::<u8>()], 0..11);
    let op = prop_oneof![
        4 => (bytes(), bytes(), 1..4i32, any::<u32>()).prop_map(|(v, m, p, x)| Op::Insert(v, m, p, x as u64)),
        2 => (bytes(), bytes(), 1..4i32, any::<u32>()).prop_map(|(v, m, p, x)| Op::Modify(v, m, p, x as u64)),
        1 => (bytes(), bytes(), 1..4i32).prop_map(|(v, m, p)| Op::Delete(v, m, p)),
        4 => bytes().prop_map(Op::Lookup),
    ];
    proptest::collection::vec(op, 1..200)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(100))]
    #[test]
    fn exact_narrow_matches_reference(ops in ops()) { run("narrow", ops) }
    #[test]
    fn exact_wide_matches_reference(ops in ops()) { run("wide", ops) }
    #[test]
    fn lpm_matches_reference(ops in ops()) { run("lpm", ops) }
    #[test]
    fn ternary_matches_reference(ops in ops()) { run("ternary", ops) }
}

#[test]
fn normalize_checks_widths_masks_and_prefixes() {
    let t = TableState::new(&decl(&[(12, MatchKind::Exact), (32, MatchKind::Lpm)], 4));
    // 12-bit field: 0x1000 does not fit.
    assert!(t
        .normalize(&[
            FieldMatch::Exact { field: 0, value: vec![0x10, 0x00] },
            FieldMatch::Lpm { field: 1, value: vec![10, 0, 0, 0], prefix_len: 8 }
        ])
        .is_err());
    // Leading zero bytes are fine.
    assert!(t
        .normalize(&[
            FieldMatch::Exact { field: 0, value: vec![0, 0, 0x0F, 0xFF] },
            FieldMatch::Lpm { field: 1, value: vec![10, 0, 0, 0], prefix_len: 8 }
        ])
        .is_ok());
    // Bits beyond the prefix are refused.
    assert!(t
        .normalize(&[FieldMatch::Exact { field: 0, value: vec![1] }, FieldMatch::Lpm { field: 1, value: vec![10, 0, 0, 1], prefix_len: 8 }])
        .is_err());
    // Missing exact field.
    assert!(t.normalize(&[FieldMatch::Lpm { field: 1, value: vec![10, 0, 0, 0], prefix_len: 8 }]).is_err());
    // Unknown field, wrong kind, duplicate field.
    assert!(t.normalize(&[FieldMatch::Exact { field: 5, value: vec![1] }]).is_err());
    assert!(t.normalize(&[FieldMatch::Lpm { field: 0, value: vec![1], prefix_len: 1 }]).is_err());
    assert!(t.normalize(&[FieldMatch::Exact { field: 0, value: vec![1] }, FieldMatch::Exact { field: 0, value: vec![1] }]).is_err());
}

/// A default action with a decoder: a miss returns the default's decoded value, rewritten
/// by `set_default` and restored by `reset_default`; entries of an action without one
/// carry 0.
#[test]
fn decoded_values_of_the_default_action() {
    let mut d = decl(&[(16, MatchKind::Exact)], 4);
    d.default_action = 0;
    d.default_params = vec![7];
    let mut t = TableState::new(&d).with_decoders(&[ActionDecoder { action: ActionId(0), decode }]);
    assert_eq!(t.lookup(&[0, 1]).decoded, decode(&params(7)));
    t.set_default(ActionId(0), &[9]).unwrap();
    assert_eq!(t.lookup(&[0, 1]).decoded, decode(&params(9)));
    t.reset_default();
    assert_eq!(t.lookup(&[0, 1]).decoded, decode(&params(7)));
    t.write(vec![0, 1].into(), vec![0xFF, 0xFF].into(), 0, ActionId(1), &[], false).unwrap();
    let r = t.lookup(&[0, 1]);
    assert_eq!((r.hit, r.action, r.decoded), (true, ActionId(1), 0));
    t.write(vec![0, 1].into(), vec![0xFF, 0xFF].into(), 0, ActionId(0), &[3], true).unwrap();
    assert_eq!(t.lookup_u64(1).decoded, decode(&params(3)), "modified to an action with a decoder");
    // Without decoders (a table state made directly, as tools do): 0 everywhere.
    let t = TableState::new(&d);
    assert_eq!(t.lookup(&[0, 1]).decoded, 0);
}
