//! The `bloom` tenant's adapter side: where a key's probes land in the tenant's region,
//! the requests that insert and query it, the switch's answer, and a plain host-side copy
//! of the same filter (the reference the switch's answers are checked against, and the
//! host-only server's filter).
//!
//! The filter is partitioned (one array per hash function, [`HASHES`] of them, see
//! `programs::inaas::bloom`): hash function `j` picks one of the `cells` registers of the
//! tenant's region in segment `j` and one of its 32 bits. Its false-positive rate after
//! `n` inserts into `m` bits is, to first order, the classic `(1 - e^{-kn/m})^k`
//! ([`theory_fp`]).

use programs::inaas::bloom::{BITS_PER_CELL, HASHES};
use wire::inaas::{BLOOM_ABSENT, BLOOM_PRESENT, ITEMS};

use super::assembly::{ItemReq, ItemResult, Op};

/// The tenant's registers: indexes `base .. base + cells` of segments `0..HASHES`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub base: u16,
    pub cells: u16,
}

fn mix(mut z: u64) -> u64 {
    // splitmix64's finalizer.
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Layout {
    /// Bits of the filter (m).
    pub fn bits(&self) -> u64 {
        HASHES as u64 * self.cells as u64 * BITS_PER_CELL as u64
    }

    /// Per hash function: (register index, bit mask).
    pub fn probes(&self, key: u64) -> [(u16, u32); HASHES] {
        std::array::from_fn(|j| {
            let h = mix(key ^ mix(j as u64 + 1));
            let cell = (h >> 5) % self.cells as u64;
            (self.base + cell as u16, 1u32 << (h & 31))
        })
    }

    /// The request that inserts `key`.
    pub fn insert(&self, key: u64) -> Vec<ItemReq> {
        self.probes(key).iter().enumerate().map(|(seg, &(idx, mask))| ItemReq { seg, idx, op: Op::BloomInsert { mask } }).collect()
    }

    /// The request that asks whether `key` is in.
    pub fn query(&self, key: u64) -> Vec<ItemReq> {
        self.probes(key).iter().enumerate().map(|(seg, &(idx, mask))| ItemReq { seg, idx, op: Op::BloomQuery { mask } }).collect()
    }
}

/// The switch's answer to a Bloom request: `Some(false)` if a probe it read is unset,
/// `Some(true)` if it read every probe the request made and all are set, `None` if it
/// could not read enough (a probe without a lease) to say: ask the host-only filter.
pub fn answer(results: &[Option<ItemResult>; ITEMS]) -> Option<bool> {
    let (mut all, mut any) = (true, false);
    for r in results.iter().take(HASHES) {
        match r {
            None => {}
            Some(ItemResult::Done(v)) if *v == BLOOM_ABSENT as i64 => return Some(false),
            Some(ItemResult::Done(v)) if *v == BLOOM_PRESENT as i64 => any = true,
            Some(_) => all = false,
        }
    }
    (all && any).then_some(true)
}

/// The same filter on a host: words per hash function, per cell of the region.
#[derive(Clone, Debug)]
pub struct HostBloom {
    pub layout: Layout,
    words: Vec<[u32; HASHES]>,
    pub inserted: u64,
}

impl HostBloom {
    pub fn new(layout: Layout) -> HostBloom {
        HostBloom { layout, words: vec![[0; HASHES]; layout.cells as usize], inserted: 0 }
    }
    pub fn insert(&mut self, key: u64) {
        for (j, (idx, mask)) in self.layout.probes(key).into_iter().enumerate() {
            self.words[(idx - self.layout.base) as usize][j] |= mask;
        }
        self.inserted += 1;
    }
    pub fn contains(&self, key: u64) -> bool {
        self.layout.probes(key).into_iter().enumerate().all(|(j, (idx, mask))| self.words[(idx - self.layout.base) as usize][j] & mask != 0)
    }
    /// Fraction of the bits set.
    pub fn fill(&self) -> f64 {
        let ones: u64 = self.words.iter().flat_map(|w| w.iter()).map(|w| w.count_ones() as u64).sum();
        ones as f64 / self.layout.bits() as f64
    }
}

/// `(1 - e^{-kn/m})^k`: the false-positive rate of a Bloom filter of `m` bits and `k`
/// hash functions after `n` inserts.
pub fn theory_fp(n: u64, m: u64, k: u32) -> f64 {
    (1.0 - (-(k as f64) * n as f64 / m as f64).exp()).powi(k as i32)
}

/// Inserts that bring a filter of `m` bits and `k` hash functions to rate `p` (the inverse
/// of [`theory_fp`]).
pub fn elements_for_rate(m: u64, k: u32, p: f64) -> u64 {
    (-(m as f64) / k as f64 * (1.0 - p.powf(1.0 / k as f64)).ln()).round() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn theory_and_its_inverse() {
        let m = 3 * 1024 * 32;
        let n = elements_for_rate(m, 3, 0.024);
        assert!((theory_fp(n, m, 3) - 0.024).abs() < 1e-4);
        let l = Layout { base: 10, cells: 7 };
        for key in 0..1000 {
            for (idx, mask) in l.probes(key) {
                assert!((10..17).contains(&idx) && mask.count_ones() == 1);
            }
        }
    }
}
