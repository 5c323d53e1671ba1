//! NOO-Stat (Hare §IV-C, Tech 1): on each backend server, precise counters for the
//! non-offloaded objects it serves and a real-time K-sized min-heap of the hottest, kept
//! per App thread; the integrator merges the threads' heaps into the server's top K.

use std::collections::HashMap;

/// Counters and a K-sized min-heap of one App thread.
#[derive(Clone, Debug, Default)]
pub struct NooStat {
    k: usize,
    counts: HashMap<Vec<u8>, u32>,
    /// Min-heap by count of (count, object).
    heap: Vec<(u32, Vec<u8>)>,
    /// Position of each object in `heap`.
    pos: HashMap<Vec<u8>, usize>,
    /// Heap updates done (sifts), for the cost the paper attributes to K.
    pub heap_updates: u64,
}

impl NooStat {
    /// A NOO-Stat keeping the top `k`.
    pub fn new(k: usize) -> NooStat {
        NooStat { k, ..Default::default() }
    }

    /// K.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Count one query for `obj` and keep the heap current: an object in the heap moves
    /// down as its count grows; one outside enters when it beats the heap top.
    pub fn record(&mut self, obj: &[u8]) {
        let c = match self.counts.get_mut(obj) {
            Some(c) => {
                *c = c.saturating_add(1);
                *c
            }
            None => {
                self.counts.insert(obj.to_vec(), 1);
                1
            }
        };
        if self.k == 0 {
            return;
        }
        if let Some(&i) = self.pos.get(obj) {
            self.heap[i].0 = c;
            self.sift_down(i);
            self.heap_updates += 1;
        } else if self.heap.len() < self.k {
            self.heap.push((c, obj.to_vec()));
            let i = self.heap.len() - 1;
            self.pos.insert(obj.to_vec(), i);
            self.sift_up(i);
            self.heap_updates += 1;
        } else if c > self.heap[0].0 {
            let old = std::mem::replace(&mut self.heap[0], (c, obj.to_vec()));
            self.pos.remove(&old.1);
            self.pos.insert(obj.to_vec(), 0);
            self.sift_down(0);
            self.heap_updates += 1;
        }
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        *self.pos.get_mut(&self.heap[a].1).expect("in heap") = a;
        *self.pos.get_mut(&self.heap[b].1).expect("in heap") = b;
    }

    fn sift_up(&mut self, mut i: usize) {
        while i > 0 {
            let p = (i - 1) / 2;
            if self.heap[i].0 < self.heap[p].0 {
                self.swap(i, p);
                i = p;
            } else {
                break;
            }
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        let n = self.heap.len();
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut m = i;
            if l < n && self.heap[l].0 < self.heap[m].0 {
                m = l;
            }
            if r < n && self.heap[r].0 < self.heap[m].0 {
                m = r;
            }
            if m == i {
                break;
            }
            self.swap(i, m);
            i = m;
        }
    }

    /// Frequency of an object since the last clear.
    pub fn count(&self, obj: &[u8]) -> u32 {
        self.counts.get(obj).copied().unwrap_or(0)
    }

    /// The heap's objects, hottest first.
    pub fn top(&self) -> Vec<(Vec<u8>, u32)> {
        let mut v: Vec<_> = self.heap.iter().map(|(c, o)| (o.clone(), *c)).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        v
    }

    /// Forget an object (it has been offloaded: it is no longer a non-offloaded object).
    pub fn forget(&mut self, obj: &[u8]) {
        self.counts.remove(obj);
        if let Some(i) = self.pos.remove(obj) {
            let last = self.heap.len() - 1;
            if i != last {
                self.heap.swap(i, last);
                *self.pos.get_mut(&self.heap[i].1).expect("in heap") = i;
            }
            self.heap.pop();
            if i < self.heap.len() {
                self.sift_down(i);
                self.sift_up(i);
            }
        }
    }

    /// Aging: halve every count (the heap order is kept: halving is monotone); objects
    /// whose count reaches 0 are forgotten.
    pub fn age(&mut self) {
        self.counts.retain(|_, c| {
            *c /= 2;
            *c > 0
        });
        for e in self.heap.iter_mut() {
            e.0 /= 2;
        }
        let gone: Vec<Vec<u8>> = self.heap.iter().filter(|e| e.0 == 0).map(|e| e.1.clone()).collect();
        for o in gone {
            if let Some(i) = self.pos.remove(&o) {
                let last = self.heap.len() - 1;
                if i != last {
                    self.heap.swap(i, last);
                    *self.pos.get_mut(&self.heap[i].1).expect("in heap") = i;
                }
                self.heap.pop();
                if i < self.heap.len() {
                    self.sift_down(i);
                    self.sift_up(i);
                }
            }
        }
    }

    /// Step 7: clear counters and heap.
    pub fn clear(&mut self) {
        self.counts.clear();
        self.heap.clear();
        self.pos.clear();
    }
}

/// The integrator (Sys thread): the overall K hottest across App threads' heaps (counts of
/// an object seen by several threads add up), hottest first.
pub fn integrate(tops: &[Vec<(Vec<u8>, u32)>], k: usize) -> Vec<(Vec<u8>, u32)> {
    let mut sum: HashMap<&[u8], u64> = HashMap::new();
    for t in tops {
        for (o, c) in t {
            *sum.entry(o.as_slice()).or_default() += *c as u64;
        }
    }
    let mut v: Vec<_> = sum.into_iter().map(|(o, c)| (o.to_vec(), c.min(u32::MAX as u64) as u32)).collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v.truncate(k);
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The heap holds exactly the K highest counts (against sorting a plain Counter).
        #[test]
        fn heap_is_the_exact_top_k(stream in proptest::collection::vec(0u8..40, 0..600), k in 1usize..12) {
            let mut s = NooStat::new(k);
            let mut plain: HashMap<u8, u32> = HashMap::new();
            for x in &stream {
                s.record(&[*x]);
                *plain.entry(*x).or_default() += 1;
            }
            let mut counts: Vec<u32> = plain.values().copied().collect();
            counts.sort_unstable_by(|a, b| b.cmp(a));
            counts.truncate(k);
            let top: Vec<u32> = s.top().iter().map(|t| t.1).collect();
            // Exact counts for every heap member, and the K-th largest count matched: the
            // heap is a top K (ties may pick either object).
            for (o, c) in s.top() {
                prop_assert_eq!(c, plain[&o[0]]);
            }
            prop_assert_eq!(top, counts);
        }
    }

    #[test]
    fn integrator_merges_threads() {
        let a = vec![(b"x".to_vec(), 5), (b"y".to_vec(), 3)];
        let b = vec![(b"y".to_vec(), 4), (b"z".to_vec(), 1)];
        let t = integrate(&[a, b], 2);
        assert_eq!(t, vec![(b"y".to_vec(), 7), (b"x".to_vec(), 5)]);
    }

    #[test]
    fn forget_and_clear() {
        let mut s = NooStat::new(2);
        for o in [b"a", b"a", b"b", b"c", b"c", b"c"] {
            s.record(o);
        }
        assert_eq!(s.top(), vec![(b"c".to_vec(), 3), (b"a".to_vec(), 2)]);
        s.forget(b"c");
        assert_eq!(s.top(), vec![(b"a".to_vec(), 2)]);
        s.clear();
        s.record(b"a");
        s.record(b"a");
        s.record(b"a");
        s.record(b"b");
        s.age();
        assert_eq!(s.top(), vec![(b"a".to_vec(), 1)]);
        assert_eq!(s.count(b"b"), 0);
        s.clear();
        assert!(s.top().is_empty());
    }
}
