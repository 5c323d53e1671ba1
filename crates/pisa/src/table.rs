//! Match-action tables: exact (SRAM hash), LPM and ternary (TCAM), with fixed capacity and
//! a default action. Entries change only through the control plane; the packet path only
//! looks up.
//!
//! A key is the concatenation of the table's fields, each `ceil(bits/8)` bytes big-endian,
//! in declaration order. Programs build it from header bytes; the control plane builds it
//! from P4Runtime field matches.

use hashbrown::HashMap;
use rustc_hash::FxBuildHasher;

pub use crate::base::MatchKind;
use crate::base::{ActionId, ControlError, MAX_ACTION_PARAMS};
use crate::decl::{ActionDecl, ActionDecoder, TableDecl};

/// A lookup's outcome: whether an entry matched, and the action to run with its data.
/// The data is borrowed from the table (tables do not change during a pass), so a
/// result is two registers wide instead of a 56-byte copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableResult<'a> {
    pub hit: bool,
    pub action: ActionId,
    pub params: &'a [u64; MAX_ACTION_PARAMS],
    /// The action's decoder applied to `params` when the entry (or default) was written
    /// (see [`crate::ProgramBuilder::decode_action`]); 0 if the action has none.
    pub decoded: u32,
}

impl TableResult<'_> {
    /// Parameter `i` of the action (0 if absent).
    #[inline]
    pub fn param(&self, i: usize) -> u64 {
        self.params.get(i).copied().unwrap_or(0)
    }
    pub(crate) const NONE: TableResult<'static> =
        TableResult { hit: false, action: ActionId(u16::MAX), params: &[0; MAX_ACTION_PARAMS], decoded: 0 };
}

/// One field of a control-plane match, as P4Runtime sends it (0-based field index; values
/// big-endian of any length: leading zero bytes are accepted and must not carry set bits
/// above the field's width).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FieldMatch {
    Exact { field: usize, value: Vec<u8> },
    Ternary { field: usize, value: Vec<u8>, mask: Vec<u8> },
    Lpm { field: usize, value: Vec<u8>, prefix_len: u32 },
    Optional { field: usize, value: Vec<u8> },
}

/// A normalized key and mask, as [`TableState::normalize`] returns them.
pub type KeyMask = (Box<[u8]>, Box<[u8]>);

/// A stored entry in normalized form: full-width key and mask, priority, action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub key: Box<[u8]>,
    pub mask: Box<[u8]>,
    pub priority: i32,
    pub action: ActionId,
    pub params: Vec<u64>,
}

#[derive(Clone, Copy)]
struct BoundAction {
    action: ActionId,
    /// The action's decoder applied to `params` (0 without one); in what was padding after
    /// `action`, so a slot stays one cache line.
    decoded: u32,
    params: [u64; MAX_ACTION_PARAMS],
}

impl BoundAction {
    #[inline(always)]
    fn result(&self, hit: bool) -> TableResult<'_> {
        TableResult { hit, action: self.action, params: &self.params, decoded: self.decoded }
    }
}

/// Marks a free slot of a [`NarrowMap`] (no program has 65535 actions).
const NO_ACTION: ActionId = ActionId(u16::MAX);

/// One slot of a [`NarrowMap`]: key and action together in one cache line.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Slot {
    key: u64,
    act: BoundAction,
}

const EMPTY_SLOT: Slot = Slot { key: 0, act: BoundAction { action: NO_ACTION, decoded: 0, params: [0; MAX_ACTION_PARAMS] } };

/// Exact match on keys of at most 8 bytes (MAC addresses, ports, ids): the common lookup
/// on the packet path, so it gets its own map instead of a general hash map. Open
/// addressing with linear probing over one power-of-two array kept at most half full;
/// a Fibonacci (multiply-shift) hash picks the home slot. A hit is usually one multiply
/// and one cache line; a miss stops at the first free slot. It grows only on control-plane
/// inserts.
struct NarrowMap {
    slots: Box<[Slot]>,
    /// `64 - log2(slots.len())`: the multiply-shift keeps the hash's top bits.
    shift: u32,
    len: usize,
}

impl NarrowMap {
    const MIN_SLOTS: usize = 16;

    fn new() -> Self {
        Self::with_slots(Self::MIN_SLOTS)
    }

    fn with_slots(n: usize) -> Self {
        debug_assert!(n.is_power_of_two());
        NarrowMap { slots: vec![EMPTY_SLOT; n].into_boxed_slice(), shift: 64 - n.trailing_zeros(), len: 0 }
    }

    #[inline(always)]
    fn home(&self, key: u64) -> usize {
        (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    /// The slot holding `key`, or the free slot where it would go.
    #[inline(always)]
    fn probe(&self, key: u64) -> usize {
        let mask = self.slots.len() - 1;
        let mut i = self.home(key);
        loop {
            let s = &self.slots[i];
            if s.act.action == NO_ACTION || s.key == key {
                return i;
            }
            i = (i + 1) & mask;
        }
    }

    #[inline(always)]
    fn get(&self, key: u64) -> Option<&BoundAction> {
        let s = &self.slots[self.probe(key)];
        (s.act.action != NO_ACTION).then_some(&s.act)
    }

    fn get_mut(&mut self, key: u64) -> Option<&mut BoundAction> {
        let i = self.probe(key);
        let s = &mut self.slots[i];
        (s.act.action != NO_ACTION).then_some(&mut s.act)
    }

    fn insert(&mut self, key: u64, act: BoundAction) {
        debug_assert!(act.action != NO_ACTION);
        if (self.len + 1) * 2 > self.slots.len() {
            let mut bigger = Self::with_slots(self.slots.len() * 2);
            for s in self.slots.iter().filter(|s| s.act.action != NO_ACTION) {
                bigger.insert(s.key, s.act);
            }
            *self = bigger;
        }
        let i = self.probe(key);
        if self.slots[i].act.action == NO_ACTION {
            self.len += 1;
        }
        self.slots[i] = Slot { key, act };
    }

    /// Remove `key`; entries after it in its probe run move back so lookups never stop
    /// early at the hole (backward-shift deletion, no tombstones).
    fn remove(&mut self, key: u64) -> bool {
        let mask = self.slots.len() - 1;
        let mut hole = self.probe(key);
        if self.slots[hole].act.action == NO_ACTION {
            return false;
        }
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let s = self.slots[j];
            if s.act.action == NO_ACTION {
                break;
            }
            // `s` may fill the hole if its home is not cyclically inside (hole, j].
            let home = self.home(s.key);
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                self.slots[hole] = s;
                hole = j;
            }
        }
        self.slots[hole] = EMPTY_SLOT;
        self.len -= 1;
        true
    }

    fn clear(&mut self) {
        *self = Self::new();
    }

    fn iter(&self) -> impl Iterator<Item = (u64, &BoundAction)> {
        self.slots.iter().filter(|s| s.act.action != NO_ACTION).map(|s| (s.key, &s.act))
    }
}

struct TernaryEntry {
    value: Box<[u8]>,
    mask: Box<[u8]>,
    priority: i32,
    act: BoundAction,
}

enum Store {
    /// All-exact key of at most 8 bytes: the key as a big-endian u64.
    ExactNarrow(NarrowMap),
    ExactWide(HashMap<Box<[u8]>, BoundAction, FxBuildHasher>),
    /// A single LPM field of at most 128 bits: one hash map per prefix length in use.
    Lpm {
        bits: u32,
        lens: Vec<u32>,
        maps: Vec<HashMap<u128, BoundAction, FxBuildHasher>>,
    },
    /// Anything else, sorted by priority (highest first), ties by insertion order.
    Ternary(Vec<TernaryEntry>),
}

/// A table's state in one pipe.
pub struct TableState {
    name: String,
    size: u32,
    key_bytes: usize,
    fields: Vec<(usize, usize, u32, MatchKind)>, // (offset, bytes, bits, kind)
    store: Store,
    len: usize,
    default: BoundAction,
    initial_default: BoundAction,
    const_default: bool,
    needs_priority: bool,
    /// Decoders of the program's actions ([`TableState::with_decoders`]). (A boxed slice,
    /// not a `Vec`: the state stays 256 bytes, so a pass finds a table with one shift.)
    decoders: Box<[ActionDecoder]>,
}

fn be_u64(b: &[u8]) -> u64 {
    b.iter().fold(0u64, |a, &x| (a << 8) | x as u64)
}
fn be_u128(b: &[u8]) -> u128 {
    b.iter().fold(0u128, |a, &x| (a << 8) | x as u128)
}
fn lpm_mask(bits: u32, len: u32) -> u128 {
    if len == 0 {
        0
    } else {
        let full = if bits == 128 { u128::MAX } else { (1u128 << bits) - 1 };
        (u128::MAX << (bits - len)) & full
    }
}

impl TableState {
    pub fn new(decl: &TableDecl) -> TableState {
        let mut fields = Vec::with_capacity(decl.keys.len());
        let mut off = 0;
        for k in &decl.keys {
            fields.push((off, k.bytes(), k.bits, k.kind));
            off += k.bytes();
        }
        let key_bytes = off;
        let all_exact = decl.keys.iter().all(|k| k.kind == MatchKind::Exact);
        let single_lpm = decl.keys.len() == 1 && decl.keys[0].kind == MatchKind::Lpm;
        let store = if all_exact && key_bytes <= 8 {
            Store::ExactNarrow(NarrowMap::new())
        } else if all_exact {
            Store::ExactWide(HashMap::with_capacity_and_hasher(decl.size.min(1 << 16) as usize, FxBuildHasher))
        } else if single_lpm {
            Store::Lpm { bits: decl.keys[0].bits, lens: Vec::new(), maps: Vec::new() }
        } else {
            Store::Ternary(Vec::new())
        };
        let mut params = [0u64; MAX_ACTION_PARAMS];
        for (i, p) in decl.default_params.iter().enumerate().take(MAX_ACTION_PARAMS) {
            params[i] = *p;
        }
        let default = BoundAction { action: ActionId(decl.default_action), decoded: 0, params };
        TableState {
            name: decl.name.clone(),
            size: decl.size,
            key_bytes,
            fields,
            store,
            len: 0,
            default,
            initial_default: default,
            const_default: decl.const_default,
            needs_priority: decl.needs_priority(),
            decoders: Box::new([]),
        }
    }

    /// The table with the program's action decoders: from now on every entry and default
    /// written carries its action's decoded value (the default action is decoded now).
    pub fn with_decoders(mut self, decoders: &[ActionDecoder]) -> TableState {
        self.decoders = decoders.into();
        self.initial_default = self.act(self.initial_default.action, &self.initial_default.params);
        self.default = self.act(self.default.action, &self.default.params);
        self
    }

    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn key_bytes(&self) -> usize {
        self.key_bytes
    }

    /// Look up a key built in the table's key layout. A key of the wrong length misses.
    #[inline]
    pub fn lookup(&self, key: &[u8]) -> TableResult<'_> {
        if key.len() != self.key_bytes {
            return self.default.result(false);
        }
        let hit = match &self.store {
            Store::ExactNarrow(m) => m.get(be_u64(key)),
            Store::ExactWide(m) => m.get(key),
            Store::Lpm { bits, lens, maps } => {
                let k = be_u128(key);
                let mut found = None;
                for &l in lens {
                    if let Some(a) = maps[l as usize].get(&(k & lpm_mask(*bits, l))) {
                        found = Some(a);
                        break;
                    }
                }
                found
            }
            Store::Ternary(v) => {
                v.iter().find(|e| e.value.iter().zip(e.mask.iter()).zip(key).all(|((v, m), k)| k & m == *v)).map(|e| &e.act)
            }
        };
        match hit {
            Some(a) => a.result(true),
            None => self.default.result(false),
        }
    }

    /// Fast path for keys of at most 8 bytes given as a big-endian number.
    #[inline(always)]
    pub fn lookup_u64(&self, key: u64) -> TableResult<'_> {
        match &self.store {
            Store::ExactNarrow(m) => match m.get(key) {
                Some(a) => a.result(true),
                None => self.default.result(false),
            },
            _ => self.lookup_u64_slow(key),
        }
    }

    /// Other stores through the byte-key path (kept out of line so the narrow exact path
    /// stays small enough to inline into programs).
    #[inline(never)]
    fn lookup_u64_slow(&self, key: u64) -> TableResult<'_> {
        let b = key.to_be_bytes();
        self.lookup(&b[8usize.saturating_sub(self.key_bytes).min(8)..])
    }

    /// Turn P4Runtime field matches into a normalized key and mask.
    pub fn normalize(&self, matches: &[FieldMatch]) -> Result<KeyMask, ControlError> {
        let mut key = vec![0u8; self.key_bytes];
        let mut mask = vec![0u8; self.key_bytes];
        let mut seen = vec![false; self.fields.len()];
        for m in matches {
            let idx = match m {
                FieldMatch::Exact { field, .. }
                | FieldMatch::Ternary { field, .. }
                | FieldMatch::Lpm { field, .. }
                | FieldMatch::Optional { field, .. } => *field,
            };
            let &(off, nbytes, bits, kind) = self
                .fields
                .get(idx)
                .ok_or_else(|| ControlError::InvalidArgument(format!("table {}: no match field {}", self.name, idx + 1)))?;
            if std::mem::replace(&mut seen[idx], true) {
                return Err(ControlError::InvalidArgument(format!("table {}: field {} given twice", self.name, idx + 1)));
            }
            let fit = |v: &[u8], what: &str| -> Result<Vec<u8>, ControlError> {
                fit_field(v, nbytes, bits).ok_or_else(|| {
                    ControlError::InvalidArgument(format!("table {}: {what} of field {} does not fit in {bits} bits", self.name, idx + 1))
                })
            };
            let full = field_full_mask(nbytes, bits);
            let (v, mk) = match (m, kind) {
                (FieldMatch::Exact { value, .. }, MatchKind::Exact) => (fit(value, "value")?, full),
                (FieldMatch::Optional { value, .. }, MatchKind::Optional) => (fit(value, "value")?, full),
                (FieldMatch::Ternary { value, mask, .. }, MatchKind::Ternary) => {
                    let v = fit(value, "value")?;
                    let mk = fit(mask, "mask")?;
                    if v.iter().zip(&mk).any(|(a, b)| a & !b != 0) {
                        return Err(ControlError::InvalidArgument(format!(
                            "table {}: field {} has value bits outside its mask",
                            self.name,
                            idx + 1
                        )));
                    }
                    (v, mk)
                }
                (FieldMatch::Lpm { value, prefix_len, .. }, MatchKind::Lpm) => {
                    if *prefix_len > bits {
                        return Err(ControlError::InvalidArgument(format!("table {}: prefix length {prefix_len} > {bits}", self.name)));
                    }
                    let v = fit(value, "value")?;
                    let mk = prefix_mask_bytes(nbytes, bits, *prefix_len);
                    if v.iter().zip(&mk).any(|(a, b)| a & !b != 0) {
                        return Err(ControlError::InvalidArgument(format!("table {}: LPM value has bits beyond its prefix", self.name)));
                    }
                    (v, mk)
                }
                _ => {
                    return Err(ControlError::InvalidArgument(format!(
                        "table {}: wrong match kind for field {} (expected {:?})",
                        self.name,
                        idx + 1,
                        kind
                    )))
                }
            };
            key[off..off + nbytes].copy_from_slice(&v);
            mask[off..off + nbytes].copy_from_slice(&mk);
        }
        for (i, &(_, _, _, kind)) in self.fields.iter().enumerate() {
            if !seen[i] && kind == MatchKind::Exact {
                return Err(ControlError::InvalidArgument(format!("table {}: exact field {} is missing", self.name, i + 1)));
            }
        }
        Ok((key.into_boxed_slice(), mask.into_boxed_slice()))
    }

    fn check_priority(&self, priority: i32) -> Result<(), ControlError> {
        if self.needs_priority && priority <= 0 {
            return Err(ControlError::InvalidArgument(format!("table {}: entries need a priority > 0", self.name)));
        }
        if !self.needs_priority && priority != 0 {
            return Err(ControlError::InvalidArgument(format!("table {}: entries of exact/LPM tables take no priority", self.name)));
        }
        Ok(())
    }

    /// An entry's action data as stored: the parameters, and their decoded value if the
    /// action has a decoder (computed here, on every write: an entry never keeps a value
    /// decoded from parameters it no longer has).
    fn act(&self, action: ActionId, params: &[u64]) -> BoundAction {
        let mut p = [0u64; MAX_ACTION_PARAMS];
        for (i, v) in params.iter().enumerate().take(MAX_ACTION_PARAMS) {
            p[i] = *v;
        }
        let decoded = self.decoders.iter().find(|d| d.action == action).map_or(0, |d| (d.decode)(&p));
        BoundAction { action, decoded, params: p }
    }

    /// Insert (`modify == false`) or modify an entry.
    pub fn write(
        &mut self,
        key: Box<[u8]>,
        mask: Box<[u8]>,
        priority: i32,
        action: ActionId,
        params: &[u64],
        modify: bool,
    ) -> Result<(), ControlError> {
        self.check_priority(priority)?;
        if action == NO_ACTION {
            return Err(ControlError::InvalidArgument(format!("table {}: action id {} is reserved", self.name, action.0)));
        }
        let act = self.act(action, params);
        let name = &self.name;
        let full = self.len as u32 >= self.size;
        let exists_err = || ControlError::AlreadyExists(format!("table {name}: entry exists"));
        let missing_err = || ControlError::NotFound(format!("table {name}: no such entry"));
        let full_err = || ControlError::ResourceExhausted(format!("table {name} is full ({} entries)", self.size));
        let mut inserted = false;
        match &mut self.store {
            Store::ExactNarrow(m) => {
                let k = be_u64(&key);
                match (m.get_mut(k), modify) {
                    (Some(a), true) => *a = act,
                    (Some(_), false) => return Err(exists_err()),
                    (None, true) => return Err(missing_err()),
                    (None, false) if full => return Err(full_err()),
                    (None, false) => {
                        m.insert(k, act);
                        inserted = true;
                    }
                }
            }
            Store::ExactWide(m) => match (m.get_mut(&key), modify) {
                (Some(a), true) => *a = act,
                (Some(_), false) => return Err(exists_err()),
                (None, true) => return Err(missing_err()),
                (None, false) if full => return Err(full_err()),
                (None, false) => {
                    m.insert(key, act);
                    inserted = true;
                }
            },
            Store::Lpm { bits, lens, maps } => {
                let len = be_u128(&mask).count_ones();
                let k = be_u128(&key);
                if maps.len() <= len as usize {
                    maps.resize_with(len as usize + 1, || HashMap::with_hasher(FxBuildHasher));
                }
                let _ = bits;
                let map = &mut maps[len as usize];
                match (map.get_mut(&k), modify) {
                    (Some(a), true) => *a = act,
                    (Some(_), false) => return Err(exists_err()),
                    (None, true) => return Err(missing_err()),
                    (None, false) if full => return Err(full_err()),
                    (None, false) => {
                        map.insert(k, act);
                        if !lens.contains(&len) {
                            lens.push(len);
                            lens.sort_unstable_by(|a, b| b.cmp(a));
                        }
                        inserted = true;
                    }
                }
            }
            Store::Ternary(v) => {
                let pos = v.iter().position(|e| e.value == key && e.mask == mask && e.priority == priority);
                match (pos, modify) {
                    (Some(i), true) => v[i].act = act,
                    (Some(_), false) => return Err(exists_err()),
                    (None, true) => return Err(missing_err()),
                    (None, false) if full => return Err(full_err()),
                    (None, false) => {
                        // Stable insert after all entries of higher or equal priority.
                        let at = v.iter().position(|e| e.priority < priority).unwrap_or(v.len());
                        v.insert(at, TernaryEntry { value: key, mask, priority, act });
                        inserted = true;
                    }
                }
            }
        }
        if inserted {
            self.len += 1;
        }
        Ok(())
    }

    /// Delete the entry with this key, mask and priority.
    pub fn delete(&mut self, key: &[u8], mask: &[u8], priority: i32) -> Result<(), ControlError> {
        let removed = match &mut self.store {
            Store::ExactNarrow(m) => m.remove(be_u64(key)),
            Store::ExactWide(m) => m.remove(key).is_some(),
            Store::Lpm { lens, maps, .. } => {
                let len = be_u128(mask).count_ones();
                let r = maps.get_mut(len as usize).and_then(|m| m.remove(&be_u128(key))).is_some();
                if r && maps[len as usize].is_empty() {
                    lens.retain(|l| *l != len);
                }
                r
            }
            Store::Ternary(v) => match v.iter().position(|e| *e.value == *key && *e.mask == *mask && e.priority == priority) {
                Some(i) => {
                    v.remove(i);
                    true
                }
                None => false,
            },
        };
        if removed {
            self.len -= 1;
            Ok(())
        } else {
            Err(ControlError::NotFound(format!("table {}: no such entry", self.name)))
        }
    }

    pub fn clear(&mut self) {
        match &mut self.store {
            Store::ExactNarrow(m) => m.clear(),
            Store::ExactWide(m) => m.clear(),
            Store::Lpm { lens, maps, .. } => {
                lens.clear();
                maps.clear();
            }
            Store::Ternary(v) => v.clear(),
        }
        self.len = 0;
    }

    pub fn set_default(&mut self, action: ActionId, params: &[u64]) -> Result<(), ControlError> {
        if self.const_default {
            return Err(ControlError::PermissionDenied(format!("table {}: the default action is constant", self.name)));
        }
        self.default = self.act(action, params);
        Ok(())
    }

    pub fn reset_default(&mut self) {
        self.default = self.initial_default;
    }

    pub fn default_action(&self) -> (ActionId, &[u64]) {
        (self.default.action, &self.default.params)
    }

    /// Every entry, in normalized form (exact tables in unspecified order).
    pub fn entries(&self, n_params: impl Fn(ActionId) -> usize) -> Vec<Entry> {
        let kb = self.key_bytes;
        let mk = |key: Box<[u8]>, mask: Box<[u8]>, priority: i32, a: &BoundAction| Entry {
            key,
            mask,
            priority,
            action: a.action,
            params: a.params[..n_params(a.action).min(MAX_ACTION_PARAMS)].to_vec(),
        };
        let full_mask = || -> Box<[u8]> {
            let mut m = vec![0u8; kb];
            for &(off, nbytes, bits, _) in &self.fields {
                m[off..off + nbytes].copy_from_slice(&field_full_mask(nbytes, bits));
            }
            m.into_boxed_slice()
        };
        match &self.store {
            Store::ExactNarrow(m) => m.iter().map(|(k, a)| mk(k.to_be_bytes()[8 - kb..].into(), full_mask(), 0, a)).collect(),
            Store::ExactWide(m) => m.iter().map(|(k, a)| mk(k.clone(), full_mask(), 0, a)).collect(),
            Store::Lpm { bits, lens, maps } => lens
                .iter()
                .flat_map(|&l| {
                    maps[l as usize].iter().map(move |(k, a)| {
                        let kbytes = k.to_be_bytes();
                        let mbytes = lpm_mask(*bits, l).to_be_bytes();
                        (Box::<[u8]>::from(&kbytes[16 - kb..]), Box::<[u8]>::from(&mbytes[16 - kb..]), a)
                    })
                })
                .map(|(k, m, a)| mk(k, m, 0, a))
                .collect(),
            Store::Ternary(v) => v.iter().map(|e| mk(e.value.clone(), e.mask.clone(), e.priority, &e.act)).collect(),
        }
    }

    /// Split a normalized entry back into per-field matches (for P4Runtime reads).
    /// Wildcard ternary/optional fields are omitted, as P4Runtime requires.
    pub fn field_matches(&self, e: &Entry) -> Vec<FieldMatch> {
        let mut out = Vec::new();
        for (i, &(off, nbytes, _bits, kind)) in self.fields.iter().enumerate() {
            let v = e.key[off..off + nbytes].to_vec();
            let m = &e.mask[off..off + nbytes];
            match kind {
                MatchKind::Exact => out.push(FieldMatch::Exact { field: i, value: v }),
                MatchKind::Optional => {
                    if m.iter().any(|b| *b != 0) {
                        out.push(FieldMatch::Optional { field: i, value: v })
                    }
                }
                MatchKind::Ternary => {
                    if m.iter().any(|b| *b != 0) {
                        out.push(FieldMatch::Ternary { field: i, value: v, mask: m.to_vec() })
                    }
                }
                MatchKind::Lpm => {
                    let plen: u32 = m.iter().map(|b| b.count_ones()).sum();
                    if plen > 0 {
                        out.push(FieldMatch::Lpm { field: i, value: v, prefix_len: plen })
                    }
                }
            }
        }
        out
    }
}

/// Convert action parameters given as P4Runtime byte strings into numbers, checking widths.
pub fn params_from_bytes(action: &ActionDecl, params: &[(u32, Vec<u8>)]) -> Result<Vec<u64>, ControlError> {
    let mut out = vec![0u64; action.params.len()];
    let mut seen = vec![false; action.params.len()];
    for (pid, bytes) in params {
        let i = (*pid as usize)
            .checked_sub(1)
            .filter(|i| *i < action.params.len())
            .ok_or_else(|| ControlError::InvalidArgument(format!("action {}: no parameter {pid}", action.name)))?;
        let bits = action.params[i].bits;
        let v = fit_field(bytes, bits.div_ceil(8) as usize, bits).ok_or_else(|| {
            ControlError::InvalidArgument(format!(
                "action {}: parameter {} does not fit in {bits} bits",
                action.name, action.params[i].name
            ))
        })?;
        if std::mem::replace(&mut seen[i], true) {
            return Err(ControlError::InvalidArgument(format!("action {}: parameter {} given twice", action.name, action.params[i].name)));
        }
        out[i] = be_u64(&v);
    }
    if let Some(i) = seen.iter().position(|s| !s) {
        return Err(ControlError::InvalidArgument(format!("action {}: parameter {} is missing", action.name, action.params[i].name)));
    }
    Ok(out)
}

/// Right-align `v` into `nbytes`, rejecting set bits above `bits`.
fn fit_field(v: &[u8], nbytes: usize, bits: u32) -> Option<Vec<u8>> {
    let start = v.iter().position(|b| *b != 0).unwrap_or(v.len());
    let sig = &v[start..];
    if sig.len() > nbytes {
        return None;
    }
    let mut out = vec![0u8; nbytes];
    out[nbytes - sig.len()..].copy_from_slice(sig);
    let spare = nbytes as u32 * 8 - bits;
    if spare > 0 && nbytes > 0 && out[0] >> (8 - spare) != 0 {
        return None;
    }
    Some(out)
}

fn field_full_mask(nbytes: usize, bits: u32) -> Vec<u8> {
    prefix_mask_bytes(nbytes, bits, bits)
}

/// Mask bytes (right-aligned field of `bits` in `nbytes`) with the top `len` field bits set.
fn prefix_mask_bytes(nbytes: usize, bits: u32, len: u32) -> Vec<u8> {
    let mut out = vec![0u8; nbytes];
    let spare = nbytes as u32 * 8 - bits;
    for i in 0..len {
        let bit = spare + i; // from the most significant bit of the byte string
        out[(bit / 8) as usize] |= 0x80 >> (bit % 8);
    }
    out
}

/// Canonical P4Runtime byte string: no leading zero bytes, at least one byte.
pub fn canonical_bytes(v: &[u8]) -> Vec<u8> {
    let start = v.iter().position(|b| *b != 0).unwrap_or(v.len().saturating_sub(1));
    v[start..].to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn act(v: u64) -> BoundAction {
        BoundAction { action: ActionId(1), decoded: v as u32, params: [v, 0, 0, 0, 0, 0] }
    }

    /// The narrow map against std's HashMap, through growth and many deletions in dense
    /// probe runs (keys from a small space, so runs form and wrap around the array).
    #[test]
    fn narrow_map_matches_a_hash_map() {
        let mut rng = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for round in 0..200 {
            let space = 4 + round % 60;
            let mut m = NarrowMap::new();
            let mut r = std::collections::HashMap::new();
            for _ in 0..400 {
                let k = next() % space * 0x0100_0000_0001; // spread over the word
                match next() % 3 {
                    0 => {
                        let v = next();
                        m.insert(k, act(v));
                        r.insert(k, v);
                    }
                    1 => assert_eq!(m.remove(k), r.remove(&k).is_some()),
                    _ => assert_eq!(m.get(k).map(|a| a.params[0]), r.get(&k).copied()),
                }
                assert_eq!(m.len, r.len());
                assert!(m.len * 2 <= m.slots.len());
            }
            for (k, v) in &r {
                assert_eq!(m.get(*k).map(|a| a.params[0]), Some(*v));
            }
            let mut keys: Vec<u64> = m.iter().map(|(k, _)| k).collect();
            keys.sort_unstable();
            let mut want: Vec<u64> = r.keys().copied().collect();
            want.sort_unstable();
            assert_eq!(keys, want);
        }
    }

    #[test]
    fn narrow_map_keeps_key_zero_and_all_ones() {
        let mut m = NarrowMap::new();
        assert!(m.get(0).is_none());
        m.insert(0, act(5));
        m.insert(u64::MAX, act(6));
        assert_eq!(m.get(0).map(|a| a.params[0]), Some(5));
        assert_eq!(m.get(u64::MAX).map(|a| a.params[0]), Some(6));
        assert!(m.remove(0));
        assert!(m.get(0).is_none());
        assert!(!m.remove(0));
    }
}
