//! Fault injection: a port wrapper that loses, duplicates and reorders frames with a seeded
//! random generator, so an experiment with faults is repeatable bit for bit.
//!
//! Each frame passing through a direction consumes exactly three draws from that direction's
//! generator (loss, duplication, reordering, in that order), so the fate of frame *n* depends
//! only on the seed and *n*, never on batch boundaries or timing. Then:
//! - lost (draw 1 < `loss`): dropped, counted as `rx_fault`/`tx_fault` in the port's stats;
//! - duplicated (draw 2 < `duplicate`): a copy follows the frame;
//! - reordered (draw 3 < `reorder`): the frame (and its copy) is held back and released right
//!   after the next `reorder_gap` frames that pass undelayed.
//!
//! Held frames wait for later traffic; [`FaultPort::release_held`] lets them go at the end of a
//! run.

use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use pisa::packet::{BufPool, PacketBuf, PortId};

use crate::port::Port;
use crate::stats::PortStats;

/// What faults to inject.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultConfig {
    /// Seed of the generators (receive and transmit use separate streams derived from it).
    pub seed: u64,
    /// Probability a frame is lost.
    pub loss: f64,
    /// Probability a frame is duplicated.
    pub duplicate: f64,
    /// Probability a frame is held back and delivered late.
    pub reorder: f64,
    /// How many frames overtake a held-back frame.
    pub reorder_gap: usize,
    /// Also inject faults on transmit (with the same probabilities).
    pub on_tx: bool,
}

impl Default for FaultConfig {
    fn default() -> Self {
        FaultConfig { seed: 1, loss: 0.0, duplicate: 0.0, reorder: 0.0, reorder_gap: 1, on_tx: false }
    }
}

/// Counts of injected faults, by direction and kind.
#[derive(Debug, Default)]
pub struct FaultStats {
    /// Received frames dropped.
    pub rx_lost: AtomicU64,
    /// Received frames duplicated.
    pub rx_duplicated: AtomicU64,
    /// Received frames held back.
    pub rx_reordered: AtomicU64,
    /// Frames to transmit dropped.
    pub tx_lost: AtomicU64,
    /// Frames to transmit duplicated.
    pub tx_duplicated: AtomicU64,
    /// Frames to transmit held back.
    pub tx_reordered: AtomicU64,
}

/// SplitMix64: tiny, fast, statistically fine for fault draws, and fixed forever (unlike a
/// library generator whose stream may change between versions, which would silently change a
/// recorded experiment).
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    #[inline]
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    #[inline]
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// The fault logic of one direction.
struct Injector {
    rng: SplitMix64,
    /// Held frames and how many more undelayed frames must pass before each is released.
    held: VecDeque<(PacketBuf, usize)>,
}

/// Which counters an injector updates.
struct Counters<'a> {
    lost: &'a AtomicU64,
    duplicated: &'a AtomicU64,
    reordered: &'a AtomicU64,
    port_drop: &'a AtomicU64,
}

impl Injector {
    fn new(seed: u64) -> Self {
        Injector { rng: SplitMix64(seed), held: VecDeque::new() }
    }

    /// Decide the fate of `f`, appending whatever is delivered now to `out`.
    fn process(&mut self, cfg: &FaultConfig, f: PacketBuf, pool: &mut BufPool, out: &mut VecDeque<PacketBuf>, c: &Counters) {
        let (u_loss, u_dup, u_reorder) = (self.rng.next_f64(), self.rng.next_f64(), self.rng.next_f64());
        if u_loss < cfg.loss {
            c.lost.fetch_add(1, Relaxed);
            c.port_drop.fetch_add(1, Relaxed);
            pool.put(f);
            return;
        }
        let dup = (u_dup < cfg.duplicate).then(|| {
            c.duplicated.fetch_add(1, Relaxed);
            pool.copy_of(&f)
        });
        if u_reorder < cfg.reorder && cfg.reorder_gap > 0 {
            c.reordered.fetch_add(1, Relaxed);
            self.held.push_back((f, cfg.reorder_gap));
            if let Some(d) = dup {
                self.held.push_back((d, cfg.reorder_gap));
            }
            return;
        }
        out.push_back(f);
        out.extend(dup);
        // One more frame overtook every held frame; release those whose gap is used up.
        for h in self.held.iter_mut() {
            h.1 -= 1;
        }
        while self.held.front().is_some_and(|h| h.1 == 0) {
            out.push_back(self.held.pop_front().unwrap().0);
        }
    }
}

/// A port wrapper injecting loss, duplication and reordering; see the module docs.
pub struct FaultPort<P: Port> {
    inner: P,
    cfg: FaultConfig,
    rx: Injector,
    tx: Injector,
    /// Frames decided and waiting to be returned (a batch can grow by duplicates and releases
    /// beyond `max`, and `recv_batch` never returns more than `max`).
    rx_ready: VecDeque<PacketBuf>,
    tx_ready: VecDeque<PacketBuf>,
    scratch: Vec<PacketBuf>,
    faults: Arc<FaultStats>,
    port_stats: Arc<PortStats>,
}

impl<P: Port> FaultPort<P> {
    /// Wrap `inner`.
    pub fn new(inner: P, cfg: FaultConfig) -> Self {
        let port_stats = inner.stats();
        FaultPort {
            rx: Injector::new(cfg.seed),
            // A different, fixed stream for transmit so receive faults do not depend on how
            // much was transmitted.
            tx: Injector::new(cfg.seed ^ 0x5DEE_CE66_D1CE_4E5B),
            inner,
            cfg,
            rx_ready: VecDeque::new(),
            tx_ready: VecDeque::new(),
            scratch: Vec::new(),
            faults: Arc::new(FaultStats::default()),
            port_stats,
        }
    }

    /// Counts of injected faults.
    pub fn fault_stats(&self) -> Arc<FaultStats> {
        self.faults.clone()
    }

    /// Frames currently held back (receive, transmit).
    pub fn held(&self) -> (usize, usize) {
        (self.rx.held.len(), self.tx.held.len())
    }

    /// Let every held frame go: received ones are returned by the next `recv_batch` calls,
    /// transmitted ones are sent now.
    pub fn release_held(&mut self, pool: &mut BufPool) {
        self.rx_ready.extend(self.rx.held.drain(..).map(|h| h.0));
        let mut v: Vec<PacketBuf> = self.tx.held.drain(..).map(|h| h.0).collect();
        if !v.is_empty() {
            self.inner.send_batch(&mut v, pool);
        }
    }

    /// The wrapped port.
    pub fn inner(&self) -> &P {
        &self.inner
    }

    /// The wrapped port, mutably.
    pub fn inner_mut(&mut self) -> &mut P {
        &mut self.inner
    }
}

impl<P: Port> Port for FaultPort<P> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn id(&self) -> PortId {
        self.inner.id()
    }

    fn recv_batch(&mut self, pool: &mut BufPool, out: &mut Vec<PacketBuf>, max: usize) -> usize {
        if self.rx_ready.len() < max {
            let want = max - self.rx_ready.len();
            self.inner.recv_batch(pool, &mut self.scratch, want);
            let c = Counters {
                lost: &self.faults.rx_lost,
                duplicated: &self.faults.rx_duplicated,
                reordered: &self.faults.rx_reordered,
                port_drop: &self.port_stats.rx_fault,
            };
            for f in self.scratch.drain(..) {
                self.rx.process(&self.cfg, f, pool, &mut self.rx_ready, &c);
            }
            // A replayed input has no later traffic to release held frames: the end of the
            // file does.
            if self.inner.replay_done() == Some(true) {
                self.rx_ready.extend(self.rx.held.drain(..).map(|h| h.0));
            }
        }
        let n = self.rx_ready.len().min(max);
        out.extend(self.rx_ready.drain(..n));
        n
    }

    fn send_batch(&mut self, pkts: &mut Vec<PacketBuf>, pool: &mut BufPool) -> usize {
        if !self.cfg.on_tx {
            return self.inner.send_batch(pkts, pool);
        }
        let c = Counters {
            lost: &self.faults.tx_lost,
            duplicated: &self.faults.tx_duplicated,
            reordered: &self.faults.tx_reordered,
            port_drop: &self.port_stats.tx_fault,
        };
        for f in pkts.drain(..) {
            self.tx.process(&self.cfg, f, pool, &mut self.tx_ready, &c);
        }
        pkts.extend(self.tx_ready.drain(..));
        self.inner.send_batch(pkts, pool)
    }

    fn poll_fd(&self) -> Option<RawFd> {
        self.inner.poll_fd()
    }

    fn stats(&self) -> Arc<PortStats> {
        self.port_stats.clone()
    }

    fn replay_done(&self) -> Option<bool> {
        self.inner.replay_done().map(|d| d && self.rx_ready.is_empty() && self.rx.held.is_empty())
    }

    fn rx_ring(&self) -> Option<(usize, usize)> {
        self.inner.rx_ring()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::memory_pair;
    use pisa::packet::DEFAULT_BUF_CAPACITY;

    fn id_of(d: &[u8]) -> u32 {
        u32::from_be_bytes(d[..4].try_into().unwrap())
    }

    /// The documented semantics, written independently over plain ids.
    /// Returns (delivered, still held at the end, [lost, duplicated, reordered]).
    fn model(cfg: &FaultConfig, seed: u64, ids: impl Iterator<Item = u32>) -> (Vec<u32>, Vec<u32>, [u64; 3]) {
        let mut rng = SplitMix64(seed);
        let (mut out, mut held, mut n) = (Vec::new(), VecDeque::<(u32, usize)>::new(), [0u64; 3]);
        for id in ids {
            let (a, b, c) = (rng.next_f64(), rng.next_f64(), rng.next_f64());
            if a < cfg.loss {
                n[0] += 1;
                continue;
            }
            let copies = if b < cfg.duplicate { 2 } else { 1 };
            n[1] += (copies == 2) as u64;
            if c < cfg.reorder {
                n[2] += 1;
                held.extend(std::iter::repeat_n((id, cfg.reorder_gap), copies));
                continue;
            }
            out.extend(std::iter::repeat_n(id, copies));
            held.iter_mut().for_each(|h| h.1 -= 1);
            while held.front().is_some_and(|h| h.1 == 0) {
                out.push(held.pop_front().unwrap().0);
            }
        }
        (out, held.into_iter().map(|h| h.0).collect(), n)
    }

    fn run(cfg: &FaultConfig, n: u32, batch: usize) -> (Vec<u32>, Arc<FaultStats>, u64) {
        let (port, peer) = memory_pair(0, 4096);
        let mut port = FaultPort::new(port, cfg.clone());
        let mut pool = BufPool::new(DEFAULT_BUF_CAPACITY, 64);
        for i in 0..n {
            let mut f = vec![0u8; 64];
            f[..4].copy_from_slice(&i.to_be_bytes());
            assert!(peer.send(&f));
        }
        let mut got = Vec::new();
        let mut v = Vec::new();
        loop {
            let k = port.recv_batch(&mut pool, &mut v, batch);
            assert!(k <= batch, "never more than max");
            got.extend(v.drain(..).map(|p| id_of(p.data())));
            if k == 0 {
                break;
            }
        }
        (got, port.fault_stats(), port.stats().snapshot().rx_fault)
    }

    #[test]
    fn faults_match_the_model_and_repeat_for_a_seed() {
        let cfg = FaultConfig { seed: 42, loss: 0.1, duplicate: 0.05, reorder: 0.05, reorder_gap: 3, on_tx: false };
        let (got, fs, port_drops) = run(&cfg, 2000, 32);
        let (want, _, n) = model(&cfg, 42, 0..2000);
        assert_eq!(got, want, "delivered frames, in order, as predicted");
        assert_eq!(fs.rx_lost.load(Relaxed), n[0]);
        assert_eq!(fs.rx_duplicated.load(Relaxed), n[1]);
        assert_eq!(fs.rx_reordered.load(Relaxed), n[2]);
        assert_eq!(port_drops, n[0]);
        // The rates are about right (binomial, 2000 trials).
        assert!((150..250).contains(&n[0]), "loss count {}", n[0]);
        assert!((60..150).contains(&n[1]) && (60..150).contains(&n[2]), "{n:?}");
        // Batch boundaries do not matter; the seed does.
        assert_eq!(run(&cfg, 2000, 7).0, got);
        assert_ne!(run(&FaultConfig { seed: 43, ..cfg.clone() }, 2000, 32).0, got);
    }

    #[test]
    fn reorder_gap_is_exact() {
        // Hold the first frame for certain, let the next three pass: it comes out after two.
        let cfg = FaultConfig { reorder: 1.0, reorder_gap: 2, ..FaultConfig::default() };
        let mut inj = Injector::new(1);
        let mut pool = BufPool::new(64, 8);
        let mut out = VecDeque::new();
        let (a, b, c) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
        let d = AtomicU64::new(0);
        let cnt = Counters { lost: &a, duplicated: &b, reordered: &c, port_drop: &d };
        inj.process(&cfg, PacketBuf::from_slice(&[0, 0, 0, 1], 0), &mut pool, &mut out, &cnt);
        let pass = FaultConfig { reorder: 0.0, ..cfg.clone() };
        for i in 2..=4u32 {
            inj.process(&pass, PacketBuf::from_slice(&i.to_be_bytes(), 0), &mut pool, &mut out, &cnt);
        }
        let ids: Vec<u32> = out.iter().map(|p| id_of(p.data())).collect();
        assert_eq!(ids, vec![2, 3, 1, 4]);
    }

    #[test]
    fn tx_faults_and_release_held() {
        let (port, peer) = memory_pair(0, 4096);
        let cfg = FaultConfig { seed: 9, loss: 0.2, reorder: 0.1, reorder_gap: 4, on_tx: true, ..FaultConfig::default() };
        let mut port = FaultPort::new(port, cfg.clone());
        let mut pool = BufPool::new(DEFAULT_BUF_CAPACITY, 64);
        let mut v: Vec<PacketBuf> = (0..500u32).map(|i| PacketBuf::from_slice(&i.to_be_bytes(), 0)).collect();
        port.send_batch(&mut v, &mut pool);
        port.release_held(&mut pool);
        let got: Vec<u32> = peer.recv_all().iter().map(|d| id_of(d)).collect();
        let (mut want, held, n) = model(&cfg, 9 ^ 0x5DEE_CE66_D1CE_4E5B, 0..500);
        // release_held sends whatever was still held, in order, after everything else.
        want.extend(held);
        assert_eq!(got, want);
        let fs = port.fault_stats();
        assert_eq!(fs.tx_lost.load(Relaxed), n[0]);
        assert_eq!(fs.tx_reordered.load(Relaxed), n[2]);
        assert_eq!(port.stats().snapshot().tx_fault, n[0]);
        assert_eq!(port.held(), (0, 0));
    }
}
