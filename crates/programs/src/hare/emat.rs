//! K1, the e-MAT (Hare §IV-B): M exact-match tables in consecutive stages. An object (a
//! key) is split into M segments of up to the stage's match width; `MAT_1` matches
//! `{key_len, seg_1}`, `MAT_m` matches `{index from MAT_(m-1), seg_m}`. Each table's action
//! hands the next table an index; the last table's index is the object's slot (the hit
//! index of the application data).
//!
//! Duplicate items are merged (one entry per distinct `{index, segment}` in each MAT, with
//! a reference count of the offloaded objects sharing it), so there is no false miss; the
//! chain of indexes links an object's segments one by one, so there is no false hit.
//!
//! [`EmatState`] is the control-plane side (the M-modifier): it keeps the items and their
//! reference counts and turns "replace `O_old` by `O_new`" into table operations with the
//! paper's updating mechanism (Case 1: `I_new_m == I_old_m`, nothing to do; Case 2: delete
//! `I_old_m` only if no other offloaded object shares it, insert `I_new_m` only if it is not
//! in `MAT_m` yet), at most 2×M operations per replaced object.

use std::collections::HashMap;

use pisa::control::{ControlOp, WriteOp};
use pisa::decl::TableSpec;
use pisa::TraceMode;
use pisa::{ActionId, FieldMatch, Gress, MatchKind, Pass, ProgramBuilder, Table};

/// Bits of an index passed from one MAT to the next (and of the slot).
pub const INDEX_BITS: u32 = 16;

/// The shape of an e-MAT: key field width and segment widths.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmatShape {
    /// Width of the key field in packets (bytes).
    pub key_bytes: usize,
    /// Bytes of the key each MAT matches, in order (sum = `key_bytes`).
    pub segments: Vec<usize>,
}

impl EmatShape {
    /// Split `key_bytes` into segments of at most `segment_bytes`.
    pub fn new(key_bytes: usize, segment_bytes: usize) -> EmatShape {
        assert!(key_bytes > 0 && segment_bytes > 0);
        let mut segments = Vec::new();
        let mut left = key_bytes;
        while left > 0 {
            let s = left.min(segment_bytes);
            segments.push(s);
            left -= s;
        }
        EmatShape { key_bytes, segments }
    }

    /// M, the number of MATs.
    pub fn mats(&self) -> usize {
        self.segments.len()
    }

    /// Byte offset of segment `m` in the key field.
    pub fn offset(&self, m: usize) -> usize {
        self.segments[..m].iter().sum()
    }

    /// The key padded to the key field.
    pub fn pad(&self, key: &[u8]) -> Option<Vec<u8>> {
        if key.len() > self.key_bytes || key.len() > 255 {
            return None;
        }
        let mut v = key.to_vec();
        v.resize(self.key_bytes, 0);
        Some(v)
    }
}

/// One table operation of the M-modifier.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmatOp {
    /// Which MAT (0-based).
    pub mat: usize,
    /// Insert or delete.
    pub write: WriteOp,
    /// The first key field: `key_len` for `MAT_1`, the previous index otherwise.
    pub prev: u16,
    /// The segment.
    pub seg: Vec<u8>,
    /// The action data: the index handed on (the slot in the last MAT).
    pub index: u16,
}

#[derive(Clone, Debug)]
struct Item {
    index: u16,
    refs: u32,
}

/// Why an e-MAT update was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EmatError {
    /// The key is longer than the key field.
    KeyTooLong,
    /// The object is already offloaded.
    AlreadyOffloaded,
    /// The object is not offloaded.
    NotOffloaded,
    /// A MAT has no free index left.
    Full,
    /// The slot is taken or out of range.
    BadSlot,
}

/// The control plane's copy of the e-MAT: items with reference counts, free indexes per
/// MAT, and which object occupies which slot.
#[derive(Clone, Debug)]
pub struct EmatState {
    shape: EmatShape,
    /// Entries each MAT can hold (and the range of indexes it hands out).
    capacity: u32,
    items: Vec<HashMap<(u16, Vec<u8>), Item>>,
    free: Vec<Vec<u16>>,
    objects: HashMap<Vec<u8>, u16>,
    slots: Vec<Option<Vec<u8>>>,
    /// Table operations issued so far.
    pub ops_total: u64,
}

impl EmatState {
    /// An empty e-MAT of `capacity` entries per MAT (at most 65536) and as many slots.
    pub fn new(shape: EmatShape, capacity: u32) -> EmatState {
        assert!((1..=1 << INDEX_BITS).contains(&capacity));
        let m = shape.mats();
        // Indexes of intermediate MATs are handed out lowest first.
        let free = (0..m).map(|_| (0..capacity).rev().map(|i| i as u16).collect()).collect();
        EmatState {
            shape,
            capacity,
            items: vec![HashMap::new(); m],
            free,
            objects: HashMap::new(),
            slots: vec![None; capacity as usize],
            ops_total: 0,
        }
    }

    /// The shape.
    pub fn shape(&self) -> &EmatShape {
        &self.shape
    }
    /// Slots (objects that can be offloaded at once).
    pub fn capacity(&self) -> u32 {
        self.capacity
    }
    /// Number of offloaded objects.
    pub fn len(&self) -> usize {
        self.objects.len()
    }
    /// Whether nothing is offloaded.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }
    /// Slot of an offloaded object.
    pub fn slot_of(&self, key: &[u8]) -> Option<u16> {
        self.objects.get(key).copied()
    }
    /// Object in a slot.
    pub fn object_in(&self, slot: u16) -> Option<&[u8]> {
        self.slots.get(slot as usize).and_then(|o| o.as_deref())
    }
    /// A free slot, if any (lowest first).
    pub fn free_slot(&self) -> Option<u16> {
        self.slots.iter().position(|s| s.is_none()).map(|i| i as u16)
    }
    /// Entries currently in MAT `m`.
    pub fn entries(&self, m: usize) -> usize {
        self.items[m].len()
    }

    /// What the data plane computes: follow the chain of MATs (`None` is a miss).
    pub fn lookup(&self, key: &[u8]) -> Option<u16> {
        let padded = self.shape.pad(key)?;
        let mut prev = key.len() as u16;
        for m in 0..self.shape.mats() {
            let off = self.shape.offset(m);
            let seg = padded[off..off + self.shape.segments[m]].to_vec();
            prev = self.items[m].get(&(prev, seg))?.index;
        }
        Some(prev)
    }

    fn segs(&self, key: &[u8]) -> Result<Vec<Vec<u8>>, EmatError> {
        let padded = self.shape.pad(key).ok_or(EmatError::KeyTooLong)?;
        Ok((0..self.shape.mats())
            .map(|m| {
                let off = self.shape.offset(m);
                padded[off..off + self.shape.segments[m]].to_vec()
            })
            .collect())
    }

    /// Remove one reference to the item `(prev, seg)` of MAT `m`; delete it (one op) when
    /// no offloaded object shares it any more. Returns the item's index.
    fn unref(&mut self, m: usize, prev: u16, seg: Vec<u8>, ops: &mut Vec<EmatOp>) -> u16 {
        let last = m + 1 == self.shape.mats();
        let key = (prev, seg);
        let it = self.items[m].get_mut(&key).expect("an offloaded object's item exists");
        it.refs -= 1;
        let index = it.index;
        if it.refs == 0 {
            self.items[m].remove(&key);
            if !last {
                self.free[m].push(index);
            }
            ops.push(EmatOp { mat: m, write: WriteOp::Delete, prev: key.0, seg: key.1, index });
        }
        index
    }

    /// Add one reference to the item `(prev, seg)` of MAT `m`, inserting it (one op) when it
    /// is not there; the last MAT's item gets `slot` as its index.
    fn addref(&mut self, m: usize, prev: u16, seg: Vec<u8>, slot: u16, ops: &mut Vec<EmatOp>) -> Result<u16, EmatError> {
        let last = m + 1 == self.shape.mats();
        let key = (prev, seg);
        if let Some(it) = self.items[m].get_mut(&key) {
            it.refs += 1;
            return Ok(it.index);
        }
        let index = if last { slot } else { self.free[m].pop().ok_or(EmatError::Full)? };
        ops.push(EmatOp { mat: m, write: WriteOp::Insert, prev: key.0, seg: key.1.clone(), index });
        self.items[m].insert(key, Item { index, refs: 1 });
        Ok(index)
    }

    /// Offload `key` into the free slot `slot` (at most M inserts).
    pub fn insert(&mut self, key: &[u8], slot: u16) -> Result<Vec<EmatOp>, EmatError> {
        if self.objects.contains_key(key) {
            return Err(EmatError::AlreadyOffloaded);
        }
        if slot as u32 >= self.capacity || self.slots[slot as usize].is_some() {
            return Err(EmatError::BadSlot);
        }
        let segs = self.segs(key)?;
        // A free slot means fewer objects than indexes in every MAT: an index is free.
        let mut ops = Vec::new();
        let mut prev = key.len() as u16;
        for (m, seg) in segs.into_iter().enumerate() {
            prev = self.addref(m, prev, seg, slot, &mut ops)?;
        }
        self.objects.insert(key.to_vec(), slot);
        self.slots[slot as usize] = Some(key.to_vec());
        self.ops_total += ops.len() as u64;
        Ok(ops)
    }

    /// Evict `key` (at most M deletes); returns the freed slot and the operations.
    pub fn remove(&mut self, key: &[u8]) -> Result<(u16, Vec<EmatOp>), EmatError> {
        let slot = *self.objects.get(key).ok_or(EmatError::NotOffloaded)?;
        let segs = self.segs(key)?;
        let mut ops = Vec::new();
        let mut prev = key.len() as u16;
        for (m, seg) in segs.into_iter().enumerate() {
            prev = self.unref(m, prev, seg, &mut ops);
        }
        self.objects.remove(key);
        self.slots[slot as usize] = None;
        self.ops_total += ops.len() as u64;
        Ok((slot, ops))
    }

    /// Replace the offloaded `old` by `new` in `old`'s slot with the updating mechanism:
    /// MAT by MAT, Case 1 (`I_new_m == I_old_m`) changes nothing; Case 2 deletes `I_old_m`
    /// only if it is not shared and inserts `I_new_m` only if it is not there. At most 2×M
    /// operations; merged items shared with other objects never change.
    pub fn replace(&mut self, old: &[u8], new: &[u8]) -> Result<(u16, Vec<EmatOp>), EmatError> {
        let slot = *self.objects.get(old).ok_or(EmatError::NotOffloaded)?;
        if self.objects.contains_key(new) {
            return Err(EmatError::AlreadyOffloaded);
        }
        let old_segs = self.segs(old)?;
        let new_segs = self.segs(new)?;
        // Every MAT holds at most one item per offloaded object and has as many indexes
        // as slots, and `old`'s items are released before `new`'s are added: an index is
        // always free.
        let mut ops = Vec::new();
        let (mut p_old, mut p_new) = (old.len() as u16, new.len() as u16);
        for m in 0..self.shape.mats() {
            let (so, sn) = (old_segs[m].clone(), new_segs[m].clone());
            if p_old == p_new && so == sn {
                // Case 1: deleting I_old_m and inserting I_new_m cancel out; the reference
                // passes from the old object to the new one.
                let idx = self.items[m][&(p_old, so)].index;
                p_old = idx;
                p_new = idx;
                continue;
            }
            // Case 2.
            let io = self.unref(m, p_old, so, &mut ops);
            let inew = self.addref(m, p_new, sn, slot, &mut ops)?;
            p_old = io;
            p_new = inew;
        }
        debug_assert!(ops.len() <= 2 * self.shape.mats());
        self.objects.remove(old);
        self.objects.insert(new.to_vec(), slot);
        self.slots[slot as usize] = Some(new.to_vec());
        self.ops_total += ops.len() as u64;
        Ok((slot, ops))
    }
}

/// The data-plane half: the M tables and their `set_index` action.
pub struct Emat {
    pub(crate) shape: EmatShape,
    pub(crate) mats: Vec<Table>,
    pub(crate) a_set_index: ActionId,
}

/// Names of the MATs (`emat_1` .. `emat_M`, 1-based as in the paper).
pub fn mat_name(m: usize) -> String {
    format!("emat_{}", m + 1)
}

impl Emat {
    /// Declare the M tables in ingress stages `first_stage ..`, `entries` each.
    pub fn declare(b: &mut ProgramBuilder, shape: EmatShape, first_stage: u8, entries: u32) -> Emat {
        let a_set_index = b.action("set_index", &[("index", INDEX_BITS)], "hand the index of the matched item to the next MAT");
        let a_miss = b.action("emat_miss", &[], "not an offloaded object");
        let mut mats = Vec::new();
        // Names must outlive the builder call: leak-free by building owned strings first.
        let names: Vec<String> = (0..shape.mats()).map(mat_name).collect();
        let segs: Vec<String> = (0..shape.mats()).map(|m| format!("hdr.hare.key_seg{}", m + 1)).collect();
        for m in 0..shape.mats() {
            let first = if m == 0 { ("hdr.hare.key_len", 8) } else { ("meta.emat_index", INDEX_BITS) };
            let keys = [(first.0, first.1, MatchKind::Exact), (segs[m].as_str(), shape.segments[m] as u32 * 8, MatchKind::Exact)];
            mats.push(b.table(TableSpec {
                name: &names[m],
                doc: "e-MAT: {index from the previous MAT (key length for the first), key segment} -> index",
                gress: Gress::Ingress,
                stage: first_stage + m as u8,
                size: entries,
                keys: &keys,
                actions: &[a_set_index, a_miss],
                default_action: (a_miss, &[]),
                const_default: true,
            }));
        }
        Emat { shape, mats, a_set_index }
    }

    /// Hit-check a padded key field of `key_len` meaningful bytes: the slot, or `None`.
    #[inline]
    pub fn lookup<M: TraceMode>(&self, pass: &mut Pass<'_, M>, key_len: u8, key_field: &[u8]) -> Option<u16> {
        let mut buf = [0u8; 2 + 256];
        let mut prev: u16 = key_len as u16;
        let mut off = 0;
        for (m, t) in self.mats.iter().enumerate() {
            let w = self.shape.segments[m];
            let first = if m == 0 { 1 } else { 2 };
            if m == 0 {
                buf[0] = key_len;
            } else {
                buf[..2].copy_from_slice(&prev.to_be_bytes());
            }
            buf[first..first + w].copy_from_slice(&key_field[off..off + w]);
            off += w;
            let r = pass.apply(t, &buf[..first + w]);
            if !r.hit || r.action != self.a_set_index {
                return None;
            }
            prev = r.param(0) as u16;
        }
        Some(prev)
    }

    /// The P4Runtime-style write for one M-modifier operation, given the program's
    /// table and action ids.
    pub fn control_op(op: &EmatOp, table_ids: &[u32], set_index_action_id: u32) -> ControlOp {
        let first = if op.mat == 0 { vec![op.prev as u8] } else { op.prev.to_be_bytes().to_vec() };
        ControlOp::TableWrite {
            table_id: table_ids[op.mat],
            op: op.write,
            matches: vec![FieldMatch::Exact { field: 0, value: first }, FieldMatch::Exact { field: 1, value: op.seg.clone() }],
            priority: 0,
            action_id: set_index_action_id,
            params: if op.write == WriteOp::Delete { vec![] } else { vec![(1, op.index.to_be_bytes().to_vec())] },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    /// The tables as the switch holds them, changed only by the operations.
    #[derive(Default)]
    struct Tables(Vec<HashMap<(u16, Vec<u8>), u16>>);

    impl Tables {
        fn apply(&mut self, ops: &[EmatOp]) {
            for o in ops {
                while self.0.len() <= o.mat {
                    self.0.push(HashMap::new());
                }
                let k = (o.prev, o.seg.clone());
                match o.write {
                    WriteOp::Insert => assert!(self.0[o.mat].insert(k, o.index).is_none(), "insert of an existing entry"),
                    WriteOp::Delete => assert!(self.0[o.mat].remove(&k).is_some(), "delete of a missing entry"),
                    WriteOp::Modify => unreachable!(),
                }
            }
        }
        fn lookup(&self, shape: &EmatShape, key: &[u8]) -> Option<u16> {
            let p = shape.pad(key)?;
            let mut prev = key.len() as u16;
            for m in 0..shape.mats() {
                let off = shape.offset(m);
                prev = *self.0.get(m)?.get(&(prev, p[off..off + shape.segments[m]].to_vec()))?;
            }
            Some(prev)
        }
    }

    fn hex(x: u32) -> Vec<u8> {
        // The paper's Figure 8 objects: one nibble per 1-byte segment.
        vec![(x >> 8) as u8 & 0xF, (x >> 4) as u8 & 0xF, x as u8 & 0xF]
    }

    #[test]
    fn papers_examples() {
        let shape = EmatShape::new(3, 1);
        let mut e = EmatState::new(shape.clone(), 16);
        let mut t = Tables::default();
        for (i, o) in [0x111, 0x112, 0x211].iter().enumerate() {
            t.apply(&e.insert(&hex(*o), i as u16).unwrap());
        }
        // Merged: MAT_1 holds {0x1, 0x2}, MAT_2 two items, MAT_3 three.
        assert_eq!((e.entries(0), e.entries(1), e.entries(2)), (2, 2, 3));
        // Example 1: 0x111 -> 0x114 touches only MAT_3 (one delete, one insert).
        let (_, ops) = e.replace(&hex(0x111), &hex(0x114)).unwrap();
        assert_eq!(ops.iter().map(|o| o.mat).collect::<Vec<_>>(), vec![2, 2]);
        t.apply(&ops);
        // Example 2 (after restoring 0x111): replace 0x211 by 0x113.
        let (_, ops) = e.replace(&hex(0x211), &hex(0x113)).unwrap();
        assert_eq!(ops.iter().filter(|o| o.write == WriteOp::Delete).count(), 3);
        assert_eq!(ops.iter().filter(|o| o.write == WriteOp::Insert).count(), 1);
        t.apply(&ops);
        for o in [0x114, 0x112, 0x113] {
            assert_eq!(t.lookup(&shape, &hex(o)), e.slot_of(&hex(o)));
            assert!(t.lookup(&shape, &hex(o)).is_some());
        }
        for o in [0x111, 0x211, 0x212, 0x411] {
            assert_eq!(t.lookup(&shape, &hex(o)), None, "{o:x}");
        }
    }

    fn key_strategy() -> impl Strategy<Value = Vec<u8>> {
        // Small alphabet and short keys: many shared segments, the hard case.
        proptest::collection::vec(0u8..3, 1..7)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]
        /// After any sequence of replacements a query hits exactly when its object is
        /// offloaded, at its slot; each replacement uses at most 2×M operations.
        #[test]
        fn no_false_hit_or_miss(seg in 1usize..4,
                                init in proptest::collection::vec(key_strategy(), 1..12),
                                steps in proptest::collection::vec((any::<prop::sample::Index>(), key_strategy()), 0..60),
                                probes in proptest::collection::vec(key_strategy(), 0..30)) {
            let shape = EmatShape::new(6, seg);
            let mut e = EmatState::new(shape.clone(), 32);
            let mut t = Tables::default();
            let mut set: HashMap<Vec<u8>, u16> = HashMap::new();
            for k in init {
                if set.contains_key(&k) { continue; }
                let slot = e.free_slot().unwrap();
                let ops = e.insert(&k, slot).unwrap();
                prop_assert!(ops.len() <= shape.mats());
                t.apply(&ops);
                set.insert(k, slot);
            }
            for (which, new) in steps {
                let olds: Vec<_> = { let mut v: Vec<_> = set.keys().cloned().collect(); v.sort(); v };
                let old = which.get(&olds).clone();
                if set.contains_key(&new) { continue; }
                let (slot, ops) = e.replace(&old, &new).unwrap();
                prop_assert!(ops.len() <= 2 * shape.mats(), "{} ops", ops.len());
                prop_assert_eq!(slot, set[&old]);
                t.apply(&ops);
                set.remove(&old);
                set.insert(new, slot);
                let all: HashSet<_> = set.keys().cloned().collect();
                for k in all.iter().chain(probes.iter()) {
                    prop_assert_eq!(t.lookup(&shape, k), set.get(k).copied(), "key {:?}", k);
                }
            }
            for k in probes.iter() {
                prop_assert_eq!(t.lookup(&shape, k), set.get(k).copied());
                prop_assert_eq!(e.lookup(k), set.get(k).copied());
            }
            // Evicting everything leaves every MAT empty.
            for k in set.keys() {
                let (_, ops) = e.remove(k).unwrap();
                t.apply(&ops);
            }
            prop_assert!(t.0.iter().all(|m| m.is_empty()));
        }
    }
}
