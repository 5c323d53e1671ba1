//! YCSB's workload D for the native load generator: 95% reads, 5% inserts, reads drawn
//! from YCSB's "latest" distribution (`SkewedLatestGenerator`: a Zipfian with constant
//! 0.99 over the records inserted so far, counted back from the newest). It is the
//! definition `python/inswitch/hare/ycsb.py` uses (`Zipfian`, `Latest`, `Workload`), so
//! the two engines draw from one distribution (not one sequence: each has its own random
//! numbers). Keys are named as YCSB names them, `user` + FNV-1a-64 of the record index.

use super::loadgen::KvOp;

/// YCSB's Zipfian constant.
pub const ZIPFIAN_CONSTANT: f64 = 0.99;

const FNV_OFFSET_64: u64 = 0xCBF2_9CE4_8422_2325;
const FNV_PRIME_64: u64 = 1_099_511_628_211;

/// YCSB's `Utils.fnvhash64`: FNV-1a over the 8 little-endian bytes of a long, then the
/// absolute value of the result as a signed long (`i64::MIN` stays as it is).
pub fn fnvhash64(val: u64) -> u64 {
    let mut h = FNV_OFFSET_64;
    let mut v = val;
    for _ in 0..8 {
        h ^= v & 0xFF;
        v >>= 8;
        h = h.wrapping_mul(FNV_PRIME_64);
    }
    (h as i64).unsigned_abs()
}

/// YCSB's key of record `i` (`orderedinserts=false`).
pub fn record_key(i: u64) -> Vec<u8> {
    format!("user{}", fnvhash64(i)).into_bytes()
}

/// YCSB's `ZipfianGenerator` (Gray et al.'s method) over [0, items), item 0 the most
/// popular; [`grow`](Self::grow) extends the range, adding the new terms to zeta.
#[derive(Debug, Clone)]
pub struct Zipfian {
    items: u64,
    theta: f64,
    zeta2: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
}

fn zeta_terms(from: u64, to: u64, theta: f64) -> f64 {
    (from..=to).map(|i| 1.0 / (i as f64).powf(theta)).sum()
}

impl Zipfian {
    /// Over `items` (at least 1) with constant `theta` (in (0, 1)).
    pub fn new(items: u64, theta: f64) -> Zipfian {
        let mut z = Zipfian { items: 0, theta, zeta2: zeta_terms(1, 2, theta), alpha: 1.0 / (1.0 - theta), zetan: 0.0, eta: 0.0 };
        z.grow(items.max(1));
        z
    }

    /// The range now.
    pub fn items(&self) -> u64 {
        self.items
    }

    /// zeta(items, theta).
    pub fn zetan(&self) -> f64 {
        self.zetan
    }

    /// Extend the range to `items` (not less than now).
    pub fn grow(&mut self, items: u64) {
        if items > self.items {
            self.zetan += zeta_terms(self.items + 1, items, self.theta);
            self.items = items;
        }
        self.eta = (1.0 - (2.0 / self.items as f64).powf(1.0 - self.theta)) / (1.0 - self.zeta2 / self.zetan);
    }

    /// The draw for the uniform `u` in [0, 1).
    pub fn next(&self, u: f64) -> u64 {
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1.min(self.items - 1);
        }
        let r = (self.items as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        r.min(self.items - 1)
    }
}

/// splitmix64: the generator's uniform numbers.
#[derive(Debug, Clone)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1) (53 bits).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// Workload D's operation stream: each operation a read (probability `read_fraction`) of
/// a record drawn from "latest", or the insert of the next record. Record `i` is key
/// index `i` of the generator (records `0..records` exist at the start).
#[derive(Debug, Clone)]
pub struct LatestStream {
    records: u64,
    zipf: Zipfian,
    read_fraction: f64,
    rng: SplitMix64,
}

impl LatestStream {
    /// Over `records` existing records (at least 1).
    pub fn new(records: u64, read_fraction: f64, seed: u64) -> LatestStream {
        LatestStream { records, zipf: Zipfian::new(records, ZIPFIAN_CONSTANT), read_fraction, rng: SplitMix64(seed) }
    }

    /// Records inserted so far, the initial ones included.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// The underlying Zipfian (its range is [`records`](Self::records)).
    pub fn zipfian(&self) -> &Zipfian {
        &self.zipf
    }

    /// A read of the newest record minus a Zipfian draw (as `SkewedLatestGenerator`).
    pub fn read(&mut self) -> u64 {
        let u = self.rng.next_f64();
        self.records - 1 - self.zipf.next(u)
    }

    /// The insert of the next record (its index).
    pub fn insert(&mut self) -> u64 {
        let i = self.records;
        self.records += 1;
        self.zipf.grow(self.records);
        i
    }

    /// The next operation: (GET, record) or (PUT, a new record).
    pub fn next_op(&mut self) -> (KvOp, u64) {
        if self.rng.next_f64() < self.read_fraction {
            (KvOp::Get, self.read())
        } else {
            (KvOp::Put, self.insert())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnvhash64_is_ycsbs() {
        // Reference values of python/inswitch/hare/ycsb.py's fnvhash64 (itself checked
        // against YCSB's Utils.fnvhash64 in tests/test_hare_ycsb.py).
        fn reference(v: u64) -> u64 {
            let mut h: u128 = 0xCBF2_9CE4_8422_2325;
            for i in 0..8 {
                h = ((h ^ ((v >> (8 * i)) & 0xFF) as u128) * 1_099_511_628_211) % (1u128 << 64);
            }
            let s = h as u64 as i64;
            s.unsigned_abs()
        }
        for v in [0u64, 1, 2, 255, 256, 12_345_678_901, (1 << 40) + 7] {
            assert_eq!(fnvhash64(v), reference(v));
        }
        assert_eq!(record_key(0), format!("user{}", fnvhash64(0)).into_bytes());
    }

    /// Total variation between the draws' frequencies and Zipf(n, 0.99).
    fn tv(counts: &[u64], draws: u64) -> f64 {
        let n = counts.len();
        let z: f64 = zeta_terms(1, n as u64, ZIPFIAN_CONSTANT);
        counts
            .iter()
            .enumerate()
            .map(|(i, &c)| (c as f64 / draws as f64 - 1.0 / ((i + 1) as f64).powf(ZIPFIAN_CONSTANT) / z).abs())
            .sum::<f64>()
            / 2.0
    }

    #[test]
    fn zipfian_frequencies_match_the_distribution() {
        // As tests/test_hare_ycsb.py checks the python one: the two exact head cases
        // within 1% absolute, total variation under 3%.
        let (n, draws) = (50u64, 200_000u64);
        let z = Zipfian::new(n, ZIPFIAN_CONSTANT);
        let mut rng = SplitMix64(3);
        let mut c = vec![0u64; n as usize];
        for _ in 0..draws {
            c[z.next(rng.next_f64()) as usize] += 1;
        }
        let zn = zeta_terms(1, n, ZIPFIAN_CONSTANT);
        assert!((z.zetan() - zn).abs() < 1e-9);
        let p = |i: usize| 1.0 / ((i + 1) as f64).powf(ZIPFIAN_CONSTANT) / zn;
        assert!((c[0] as f64 / draws as f64 - p(0)).abs() < 0.01);
        assert!((c[1] as f64 / draws as f64 - p(1)).abs() < 0.01);
        assert!(tv(&c, draws) < 0.03, "{}", tv(&c, draws));
    }

    #[test]
    fn growing_keeps_zeta_exact() {
        let mut z = Zipfian::new(1000, ZIPFIAN_CONSTANT);
        for n in 1001..=1010 {
            z.grow(n);
        }
        assert_eq!(z.items(), 1010);
        assert!((z.zetan() - zeta_terms(1, 1010, ZIPFIAN_CONSTANT)).abs() < 1e-9);
    }

    #[test]
    fn latest_prefers_the_newest_records() {
        // tests/test_hare_ycsb.py's check of the python `Latest`, on this one.
        let mut s = LatestStream::new(1000, 0.95, 2);
        for _ in 0..10 {
            s.insert();
        }
        assert_eq!(s.records(), 1010);
        let draws = 400_000u64;
        let mut c = vec![0u64; 1010];
        for _ in 0..draws {
            c[s.read() as usize] += 1;
        }
        let newest = c.iter().enumerate().max_by_key(|&(_, n)| *n).unwrap().0;
        assert_eq!(newest, 1009);
        let p0 = 1.0 / zeta_terms(1, 1010, ZIPFIAN_CONSTANT);
        assert!((c[1009] as f64 / draws as f64 - p0).abs() < 0.015);
        // By age (newest first), the whole distribution is Zipf(1010, 0.99), as close as
        // Gray et al.'s approximation and this many draws allow (the python generator
        // measures 0.023 here).
        let by_age: Vec<u64> = c.iter().rev().copied().collect();
        assert!(tv(&by_age, draws) < 0.03, "{}", tv(&by_age, draws));
    }

    #[test]
    fn workload_d_mix_is_the_published_one() {
        let mut s = LatestStream::new(500, 0.95, 11);
        let mut puts = 0u64;
        let mut last_insert = 499;
        for _ in 0..20_000 {
            let (op, r) = s.next_op();
            if op == KvOp::Put {
                puts += 1;
                assert_eq!(r, last_insert + 1, "inserts take the next record");
                last_insert = r;
            } else {
                assert!(r <= last_insert, "reads only of records inserted");
            }
        }
        assert!((puts as f64 / 20_000.0 - 0.05).abs() < 0.015, "{puts}");
    }
}
