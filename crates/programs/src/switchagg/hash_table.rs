//! Memory management and the hash table of a processing engine (SwitchAgg §4.2.4, Fig. 8).
//!
//! An engine's memory is divided into buckets; a bucket is one memory word holding a
//! round-robin victim pointer and several slots of the group's fixed size. A pair's key
//! is hashed to a bucket and compared, whole, with every slot of it (the FPGA reads the
//! bucket as one wide word). On a hit the aggregation unit combines the values; on a miss
//! the pair takes an empty slot, or evicts the stored pair it collided with, which moves
//! on to the next level (FPE → BPE → next hop).
//!
//! Layout of a bucket word: `[victim u8] [slot]*`, a slot `[key_len u8] [value u32 LE]
//! [key, zero-padded to the slot size]`; `key_len == 0` marks an empty slot.
//!
//! One rule beyond the paper: a stored pair is evicted only for a key at least as long,
//! otherwise the incoming pair moves on instead. Every pair leaving an engine is then no
//! longer than the pair that came in, so the switch rewrites a packet's pairs in place and
//! a packet never grows (the FPGA's forward stage writes pairs back into the packet).

use wire::switchagg::Operation;

/// Bytes of a slot of `slot_len` key bytes.
#[inline]
pub const fn slot_bytes(slot_len: usize) -> usize {
    1 + 4 + slot_len
}

/// Bytes of a bucket word of `slots` slots.
#[inline]
pub const fn bucket_bytes(slots: usize, slot_len: usize) -> usize {
    1 + slots * slot_bytes(slot_len)
}

/// A pair moving on to the next level (len 0: none).
#[derive(Clone, Copy)]
pub struct Spill {
    pub len: u8,
    pub value: u32,
    pub key: [u8; 64],
}

impl Default for Spill {
    fn default() -> Self {
        Spill { len: 0, value: 0, key: [0; 64] }
    }
}

impl Spill {
    pub fn some(key: &[u8], value: u32) -> Spill {
        let mut s = Spill { len: key.len() as u8, value, key: [0; 64] };
        s.key[..key.len()].copy_from_slice(key);
        s
    }
    #[inline]
    pub fn is_some(&self) -> bool {
        self.len != 0
    }
    #[inline]
    pub fn key(&self) -> &[u8] {
        &self.key[..self.len as usize]
    }
}

/// What an engine did with a pair.
#[derive(Clone, Copy, Default)]
pub struct Outcome {
    /// The pair that moves on (evicted, or the incoming one), if any.
    pub spill: Spill,
    /// A stored pair was evicted to make room.
    pub evicted: bool,
}

/// Aggregate `key`/`value` into the bucket `word` (slots of `slot_len` key bytes).
/// `key` is 1..=`slot_len` bytes.
#[inline]
pub fn aggregate(word: &mut [u8], slot_len: usize, key: &[u8], value: u32, op: Operation) -> Outcome {
    let sb = slot_bytes(slot_len);
    let slots = (word.len() - 1) / sb;
    let mut empty = None;
    for s in 0..slots {
        let at = 1 + s * sb;
        let len = word[at] as usize;
        if len == 0 {
            if empty.is_none() {
                empty = Some(at);
            }
            continue;
        }
        if len == key.len() && &word[at + 5..at + 5 + len] == key {
            let old = u32::from_le_bytes([word[at + 1], word[at + 2], word[at + 3], word[at + 4]]);
            word[at + 1..at + 5].copy_from_slice(&op.apply(old, value).to_le_bytes());
            return Outcome::default();
        }
    }
    if let Some(at) = empty {
        store(word, at, slot_len, key, value);
        return Outcome::default();
    }
    // Collision: evict from the victim pointer on, the first pair no longer than this one.
    let start = word[0] as usize % slots;
    for i in 0..slots {
        let s = (start + i) % slots;
        let at = 1 + s * sb;
        let len = word[at] as usize;
        if len <= key.len() {
            let old = u32::from_le_bytes([word[at + 1], word[at + 2], word[at + 3], word[at + 4]]);
            let spill = Spill::some(&word[at + 5..at + 5 + len], old);
            store(word, at, slot_len, key, value);
            word[0] = ((s + 1) % slots) as u8;
            return Outcome { spill, evicted: true };
        }
    }
    Outcome { spill: Spill::some(key, value), evicted: false }
}

#[inline]
fn store(word: &mut [u8], at: usize, slot_len: usize, key: &[u8], value: u32) {
    word[at] = key.len() as u8;
    word[at + 1..at + 5].copy_from_slice(&value.to_le_bytes());
    word[at + 5..at + 5 + key.len()].copy_from_slice(key);
    word[at + 5 + key.len()..at + 5 + slot_len].fill(0);
}

/// Empty the bucket, handing each stored pair to `out` (the flush).
pub fn drain(word: &mut [u8], slot_len: usize, mut out: impl FnMut(&[u8], u32)) {
    let sb = slot_bytes(slot_len);
    let slots = (word.len() - 1) / sb;
    for s in 0..slots {
        let at = 1 + s * sb;
        let len = word[at] as usize;
        if len != 0 {
            let v = u32::from_le_bytes([word[at + 1], word[at + 2], word[at + 3], word[at + 4]]);
            out(&word[at + 5..at + 5 + len], v);
            word[at] = 0;
        }
    }
    // Written only when set: a never-used DRAM page stays unmapped through the flush.
    if word[0] != 0 {
        word[0] = 0;
    }
}

/// Bytes the pairs stored in `word` take in a packet (`PAIR_OVERHEAD` each plus the key).
#[inline]
pub fn stored_bytes(word: &[u8], slot_len: usize, pair_overhead: usize) -> usize {
    let sb = slot_bytes(slot_len);
    let slots = (word.len() - 1) / sb;
    (0..slots).map(|s| word[1 + s * sb] as usize).filter(|&len| len != 0).map(|len| pair_overhead + len).sum()
}

/// The flush's read of one bucket: drain `word` into `out` only if its pairs fit in
/// `room` bytes of packet (`pair_overhead` per pair plus the key); otherwise leave it
/// whole for the next packet. One read-modify-write of the word either way, as the
/// FPGA's flush reads a bucket once. Returns whether the word was taken.
#[inline]
pub fn drain_within(word: &mut [u8], slot_len: usize, pair_overhead: usize, room: usize, out: impl FnMut(&[u8], u32)) -> bool {
    if stored_bytes(word, slot_len, pair_overhead) > room {
        return false;
    }
    drain(word, slot_len, out);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hit_miss_collision_and_drain() {
        let mut w = vec![0u8; bucket_bytes(2, 8)];
        assert!(!aggregate(&mut w, 8, b"ab", 1, Operation::Sum).spill.is_some());
        assert!(!aggregate(&mut w, 8, b"ab", 2, Operation::Sum).spill.is_some());
        // A key sharing a prefix is another key: never added to "ab".
        assert!(!aggregate(&mut w, 8, b"abc", 5, Operation::Sum).spill.is_some());
        let o = aggregate(&mut w, 8, b"xyz", 7, Operation::Sum);
        assert!(o.evicted);
        assert_eq!((o.spill.key(), o.spill.value), (&b"ab"[..], 3));
        // A longer stored key is not evicted for a shorter one: the short one moves on.
        let o = aggregate(&mut w, 8, b"q", 1, Operation::Sum);
        assert!(!o.evicted && o.spill.key() == b"q");
        let mut got = Vec::new();
        drain(&mut w, 8, |k, v| got.push((k.to_vec(), v)));
        got.sort();
        assert_eq!(got, vec![(b"abc".to_vec(), 5), (b"xyz".to_vec(), 7)]);
        assert!(w.iter().all(|&b| b == 0) || w[0] == 0);
    }

    #[test]
    fn drain_within_takes_the_word_only_if_its_pairs_fit() {
        let mut w = vec![0u8; bucket_bytes(4, 16)];
        aggregate(&mut w, 16, b"abcd", 1, Operation::Sum);
        aggregate(&mut w, 16, b"0123456789", 2, Operation::Sum);
        // 4 + 10 key bytes and 6 bytes of overhead each.
        assert_eq!(stored_bytes(&w, 16, 6), 26);
        let before = w.clone();
        let mut got = Vec::new();
        assert!(!drain_within(&mut w, 16, 6, 25, |k, v| got.push((k.to_vec(), v))));
        assert!(got.is_empty() && w == before, "a word that does not fit is left whole");
        assert!(drain_within(&mut w, 16, 6, 26, |k, v| got.push((k.to_vec(), v))));
        got.sort();
        assert_eq!(got, vec![(b"0123456789".to_vec(), 2), (b"abcd".to_vec(), 1)]);
        assert_eq!(stored_bytes(&w, 16, 6), 0);
        // An empty word fits anywhere.
        assert!(drain_within(&mut w, 16, 6, 0, |_, _| panic!("nothing stored")));
    }

    #[test]
    fn min_and_max() {
        let mut w = vec![0u8; bucket_bytes(1, 8)];
        aggregate(&mut w, 8, b"k", 5, Operation::Min);
        aggregate(&mut w, 8, b"k", 3, Operation::Min);
        aggregate(&mut w, 8, b"k", 9, Operation::Min);
        let mut got = Vec::new();
        drain(&mut w, 8, |k, v| got.push((k.to_vec(), v)));
        assert_eq!(got, vec![(b"k".to_vec(), 3)]);
        aggregate(&mut w, 8, b"k", 5, Operation::Max);
        aggregate(&mut w, 8, b"k", 9, Operation::Max);
        got.clear();
        drain(&mut w, 8, |k, v| got.push((k.to_vec(), v)));
        assert_eq!(got, vec![(b"k".to_vec(), 9)]);
    }
}
