//! In-memory fabric: a switch port whose "wire" is a pair of lock-free bounded queues, and the
//! host-side handle ([`MemoryPeer`]) that plays the attached host.
//!
//! Used by tests, the in-memory benchmark and single-process demos, so both ends are
//! allocation-free in steady state and a frame crosses the port without being copied whenever
//! its buffer has the pool's capacity: the buffer itself moves. Each side keeps its own free
//! buffers (the switch its [`BufPool`], the host a free queue only host threads touch), so a
//! frame costs one push and one pop on a shared queue; buffers cross back through a small spare
//! queue only when traffic is unbalanced (a host that only sends, a port that only transmits),
//! which keeps cross-core traffic — the real cost of a queue between two threads — minimal.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use pisa::packet::{BufPool, PacketBuf, PortId, DEFAULT_BUF_CAPACITY};

use crate::port::Port;
use crate::stats::PortStats;
use crate::sys::{monotonic_ns, poll_readable, EventFd};

/// Default depth of each direction's queue, in frames.
pub const DEFAULT_QUEUE_DEPTH: usize = 4096;

/// Sizes of a memory port.
#[derive(Debug, Clone, Copy)]
pub struct MemoryConfig {
    /// Frames each direction's queue holds before it drops.
    pub queue_depth: usize,
    /// Capacity of the buffers the peer allocates; make it the switch pool's capacity so frames
    /// cross without a copy.
    pub buf_capacity: usize,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig { queue_depth: DEFAULT_QUEUE_DEPTH, buf_capacity: DEFAULT_BUF_CAPACITY }
    }
}

/// One direction of the wire: a queue plus a level-triggered doorbell.
///
/// Invariant: after any push, either the pusher rang the eventfd or `signalled` was already
/// set; the consumer clears `signalled` only after it saw the queue empty, then re-checks the
/// queue. So the eventfd is readable whenever frames are queued (no lost wake-ups), and the
/// producer pays a syscall only on the empty -> non-empty transition.
struct Direction {
    q: ArrayQueue<PacketBuf>,
    signalled: AtomicBool,
    efd: EventFd,
}

impl Direction {
    fn new(depth: usize) -> io::Result<Self> {
        Ok(Direction { q: ArrayQueue::new(depth), signalled: AtomicBool::new(false), efd: EventFd::new()? })
    }

    /// Called by a producer after it pushed one or more frames.
    #[inline]
    fn notify(&self) {
        // Order the push before reading the flag (Dekker-style with `idle`).
        fence(Ordering::SeqCst);
        if !self.signalled.load(Ordering::Relaxed) && !self.signalled.swap(true, Ordering::SeqCst) {
            self.efd.signal();
        }
    }

    /// Called by the consumer after it saw the queue empty.
    #[inline]
    fn idle(&self) {
        if self.signalled.load(Ordering::Relaxed) && self.signalled.swap(false, Ordering::SeqCst) {
            self.efd.clear();
            fence(Ordering::SeqCst);
            // A producer may have pushed between our empty pop and the clear: it either saw the
            // flag still set and skipped the doorbell, or rang it just before our clear wiped it
            // out. Either way the frame is in the queue now, so ring for it.
            if !self.q.is_empty() {
                self.signalled.store(true, Ordering::SeqCst);
                self.efd.signal();
            }
        }
    }
}

struct Shared {
    id: PortId,
    to_switch: Direction,
    to_host: Direction,
    /// Empty buffers owned by the host side (only host threads touch it, so it stays in
    /// their caches).
    host_free: ArrayQueue<PacketBuf>,
    /// Empty buffers crossing between the sides when traffic is unbalanced.
    spare: ArrayQueue<PacketBuf>,
    buf_capacity: usize,
    stats: Arc<PortStats>,
    host_sent: AtomicU64,
    host_received: AtomicU64,
    host_allocated: AtomicU64,
}

/// The switch keeps at least this many buffers in the spare queue for a host that sends more
/// than it receives.
const SPARE_LOW: usize = 128;
/// Below this many free buffers in its pool, the switch takes buffers back from the spare queue.
const POOL_LOW: usize = 256;

impl Shared {
    /// Keep an empty buffer on the host side; if the host has plenty, offer it to the switch
    /// side; if that is full too, free it.
    #[inline]
    fn host_recycle(&self, b: PacketBuf) {
        if let Err(b) = self.host_free.push(b) {
            let _ = self.spare.push(b);
        }
    }
}

/// Make a connected in-memory switch port (given to the data plane) and its host end.
///
/// `capacity` is the depth of each direction's queue, in frames.
pub fn memory_pair(id: PortId, capacity: usize) -> (MemoryPort, MemoryPeer) {
    memory_pair_with(id, MemoryConfig { queue_depth: capacity, ..MemoryConfig::default() })
        .expect("eventfd creation failed (out of file descriptors?)")
}

/// [`memory_pair`] with every size configurable; fails only if eventfds cannot be created.
pub fn memory_pair_with(id: PortId, cfg: MemoryConfig) -> io::Result<(MemoryPort, MemoryPeer)> {
    let depth = cfg.queue_depth.max(1);
    let shared = Arc::new(Shared {
        id,
        to_switch: Direction::new(depth)?,
        to_host: Direction::new(depth)?,
        host_free: ArrayQueue::new(depth + 256),
        spare: ArrayQueue::new(2 * SPARE_LOW + 1024),
        buf_capacity: cfg.buf_capacity,
        stats: Arc::new(PortStats::default()),
        host_sent: AtomicU64::new(0),
        host_received: AtomicU64::new(0),
        host_allocated: AtomicU64::new(0),
    });
    Ok((MemoryPort { id, name: format!("mem{id}"), shared: shared.clone() }, MemoryPeer { shared }))
}

/// The switch side of an in-memory port.
pub struct MemoryPort {
    id: PortId,
    name: String,
    shared: Arc<Shared>,
}

impl Port for MemoryPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn id(&self) -> PortId {
        self.id
    }

    fn recv_batch(&mut self, pool: &mut BufPool, out: &mut Vec<PacketBuf>, max: usize) -> usize {
        let sh = &*self.shared;
        let cap = pool.buf_capacity();
        let ts = monotonic_ns();
        let (mut n, mut bytes, mut oversize) = (0usize, 0u64, 0u64);
        let mut drained = false;
        while n < max {
            let Some(f) = sh.to_switch.q.pop() else {
                drained = true;
                break;
            };
            if f.len() > cap {
                oversize += 1;
                let _ = sh.spare.push(f);
                continue;
            }
            let mut b = if f.capacity() == cap {
                // Zero-copy: the pool keeps the host's buffer. If the host is short of buffers
                // (it sends more than it receives), give it one of ours.
                if sh.spare.len() < SPARE_LOW {
                    let _ = sh.spare.push(pool.get());
                }
                f
            } else {
                let mut b = pool.get();
                b.copy_from(f.data());
                let _ = sh.spare.push(f);
                b
            };
            b.port = self.id;
            b.ts_ns = ts;
            bytes += b.len() as u64;
            out.push(b);
            n += 1;
        }
        if drained {
            sh.to_switch.idle();
        }
        sh.stats.add_rx(n as u64, bytes);
        PortStats::count(&sh.stats.rx_oversize, oversize);
        n
    }

    fn send_batch(&mut self, pkts: &mut Vec<PacketBuf>, pool: &mut BufPool) -> usize {
        let sh = &*self.shared;
        let (mut n, mut bytes, mut full) = (0usize, 0u64, 0u64);
        for p in pkts.drain(..) {
            let len = p.len() as u64;
            match sh.to_host.q.push(p) {
                Ok(()) => {
                    n += 1;
                    bytes += len;
                    // The buffer left with the frame. If the pool runs low (this port transmits
                    // more than it receives), take back one the host has finished with.
                    if pool.free_count() < POOL_LOW {
                        if let Some(s) = sh.spare.pop() {
                            pool.put(s);
                        }
                    }
                }
                Err(p) => {
                    full += 1;
                    pool.put(p);
                }
            }
        }
        if n > 0 {
            sh.to_host.notify();
        }
        sh.stats.add_tx(n as u64, bytes);
        PortStats::count(&sh.stats.tx_full, full);
        n
    }

    fn poll_fd(&self) -> Option<RawFd> {
        Some(self.shared.to_switch.efd.raw())
    }

    fn stats(&self) -> Arc<PortStats> {
        self.shared.stats.clone()
    }
}

/// The host end of an in-memory port: what a test or a simulated host uses to put frames on the
/// wire and take them off. Cloneable and `Send + Sync`; clones share the same wire.
#[derive(Clone)]
pub struct MemoryPeer {
    shared: Arc<Shared>,
}

impl MemoryPeer {
    /// The switch port this peer is attached to.
    pub fn port_id(&self) -> PortId {
        self.shared.id
    }

    #[inline]
    fn enqueue(&self, frame: &[u8]) -> bool {
        let sh = &*self.shared;
        let mut b = match sh.host_free.pop().or_else(|| sh.spare.pop()) {
            Some(b) if b.capacity() >= frame.len() => b,
            // Start-up, or an oversize frame (which gets a buffer of its own so the switch
            // side can count it).
            _ => {
                sh.host_allocated.fetch_add(1, Ordering::Relaxed);
                PacketBuf::with_capacity(sh.buf_capacity.max(frame.len()))
            }
        };
        b.copy_from(frame);
        b.port = sh.id;
        match sh.to_switch.q.push(b) {
            Ok(()) => {
                sh.host_sent.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(b) => {
                PortStats::count(&sh.stats.rx_full, 1);
                sh.host_recycle(b);
                false
            }
        }
    }

    /// Put one frame on the wire toward the switch. False if the queue was full (the frame is
    /// dropped and counted as the port's `rx_full`).
    pub fn send(&self, frame: &[u8]) -> bool {
        let ok = self.enqueue(frame);
        if ok {
            self.shared.to_switch.notify();
        }
        ok
    }

    /// Put several frames on the wire, ringing the doorbell once. Returns how many were queued.
    pub fn send_batch(&self, frames: &[&[u8]]) -> usize {
        let n = frames.iter().filter(|f| self.enqueue(f)).count();
        if n > 0 {
            self.shared.to_switch.notify();
        }
        n
    }

    /// Take the next frame from the switch and hand its bytes to `f`, without copying or
    /// allocating. `None` if nothing is waiting.
    #[inline]
    pub fn recv_with<R>(&self, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let sh = &*self.shared;
        match sh.to_host.q.pop() {
            Some(b) => {
                let r = f(b.data());
                sh.host_recycle(b);
                sh.host_received.fetch_add(1, Ordering::Relaxed);
                Some(r)
            }
            None => {
                sh.to_host.idle();
                None
            }
        }
    }

    /// Take the next frame from the switch into `buf` without copying: `buf`'s old buffer is
    /// swapped with the frame's (and recycled). False if nothing is waiting.
    #[inline]
    pub fn recv_into(&self, buf: &mut PacketBuf) -> bool {
        let sh = &*self.shared;
        match sh.to_host.q.pop() {
            Some(mut b) => {
                std::mem::swap(buf, &mut b);
                sh.host_recycle(b);
                sh.host_received.fetch_add(1, Ordering::Relaxed);
                true
            }
            None => {
                sh.to_host.idle();
                false
            }
        }
    }

    /// Take the next frame from the switch as a new `Vec` (allocates; for tests).
    pub fn recv(&self) -> Option<Vec<u8>> {
        self.recv_with(|d| d.to_vec())
    }

    /// Every frame currently waiting, oldest first (allocates; for tests).
    pub fn recv_all(&self) -> Vec<Vec<u8>> {
        std::iter::from_fn(|| self.recv()).collect()
    }

    /// Wait up to `timeout` for a frame from the switch.
    pub fn recv_timeout(&self, timeout: Duration) -> Option<Vec<u8>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(f) = self.recv() {
                return Some(f);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || !poll_readable(self.poll_fd(), Some(left)).unwrap_or(false) {
                return self.recv();
            }
        }
    }

    /// A fd that is readable while frames from the switch may be waiting.
    pub fn poll_fd(&self) -> RawFd {
        self.shared.to_host.efd.raw()
    }

    /// Frames this peer queued toward the switch.
    pub fn sent(&self) -> u64 {
        self.shared.host_sent.load(Ordering::Relaxed)
    }

    /// Frames this peer took from the switch.
    pub fn received(&self) -> u64 {
        self.shared.host_received.load(Ordering::Relaxed)
    }

    /// Buffers the host side has allocated so far (none in steady state once warmed up).
    pub fn allocated(&self) -> u64 {
        self.shared.host_allocated.load(Ordering::Relaxed)
    }

    /// Frames this peer could not queue because the switch-bound queue was full.
    pub fn send_dropped(&self) -> u64 {
        self.shared.stats.rx_full.load(Ordering::Relaxed)
    }

    /// Frames queued toward the switch and not yet received by it.
    pub fn pending_to_switch(&self) -> usize {
        self.shared.to_switch.q.len()
    }

    /// Frames sent by the switch and not yet taken by this peer.
    pub fn pending_to_host(&self) -> usize {
        self.shared.to_host.q.len()
    }

    /// The switch port's counters.
    pub fn stats(&self) -> Arc<PortStats> {
        self.shared.stats.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(i: u32, len: usize) -> Vec<u8> {
        let mut f = vec![0u8; len];
        f[..4].copy_from_slice(&i.to_be_bytes());
        f
    }

    #[test]
    fn round_trip_both_ways() {
        let (mut port, peer) = memory_pair(3, 64);
        let mut pool = BufPool::new(DEFAULT_BUF_CAPACITY, 16);
        assert!(peer.send(&frame(1, 60)));
        assert_eq!(peer.send_batch(&[&frame(2, 100), &frame(3, 1514)]), 2);
        let mut got = Vec::new();
        assert_eq!(port.recv_batch(&mut pool, &mut got, 32), 3);
        assert_eq!(got[0].data(), &frame(1, 60)[..]);
        assert_eq!(got[2].data(), &frame(3, 1514)[..]);
        assert!(got.iter().all(|p| p.port == 3 && p.ts_ns > 0));
        assert_eq!(port.send_batch(&mut got, &mut pool), 3);
        assert!(got.is_empty());
        assert_eq!(peer.recv().unwrap(), frame(1, 60));
        let mut b = PacketBuf::with_capacity(16);
        assert!(peer.recv_into(&mut b));
        assert_eq!(b.data(), &frame(2, 100)[..]);
        assert_eq!(peer.recv_with(|d| d.len()), Some(1514));
        assert_eq!(peer.recv(), None);
        let s = port.stats().snapshot();
        assert_eq!((s.rx_packets, s.tx_packets, s.rx_bytes), (3, 3, 60 + 100 + 1514));
        assert_eq!((peer.sent(), peer.received()), (3, 3));
    }

    #[test]
    fn full_queues_drop_and_count() {
        let (mut port, peer) = memory_pair(0, 4);
        let mut pool = BufPool::new(DEFAULT_BUF_CAPACITY, 16);
        let sent = (0..10).filter(|&i| peer.send(&frame(i, 64))).count();
        assert_eq!(sent, 4);
        assert_eq!(peer.send_dropped(), 6);
        assert_eq!(port.stats().snapshot().rx_full, 6);
        let mut got = Vec::new();
        // `max` is honoured.
        assert_eq!(port.recv_batch(&mut pool, &mut got, 3), 3);
        assert_eq!(port.recv_batch(&mut pool, &mut got, 3), 1);
        let first: Vec<u32> = got.iter().map(|p| u32::from_be_bytes(p.data()[..4].try_into().unwrap())).collect();
        assert_eq!(first, vec![0, 1, 2, 3]);
        got.extend((0..6).map(|i| PacketBuf::from_slice(&frame(100 + i, 64), 0)));
        assert_eq!(port.send_batch(&mut got, &mut pool), 4);
        assert_eq!(port.stats().snapshot().tx_full, 6);
        assert_eq!(peer.recv_all().len(), 4);
    }

    #[test]
    fn oversize_is_dropped_and_counted() {
        let (mut port, peer) = memory_pair(0, 8);
        let mut pool = BufPool::new(128, 4);
        assert!(peer.send(&frame(0, 200)));
        assert!(peer.send(&frame(1, 100)));
        let mut got = Vec::new();
        assert_eq!(port.recv_batch(&mut pool, &mut got, 8), 1);
        assert_eq!(got[0].data(), &frame(1, 100)[..]);
        assert_eq!(port.stats().snapshot().rx_oversize, 1);
    }

    #[test]
    fn steady_state_does_not_allocate_pool_buffers() {
        let (mut port, peer) = memory_pair(0, 64);
        let mut pool = BufPool::new(DEFAULT_BUF_CAPACITY, 64);
        let f = frame(7, 64);
        let frames: Vec<&[u8]> = vec![&f; 32];
        let mut v = Vec::with_capacity(64);
        for _ in 0..1000 {
            assert_eq!(peer.send_batch(&frames), 32);
            assert_eq!(port.recv_batch(&mut pool, &mut v, 64), 32);
            assert_eq!(port.send_batch(&mut v, &mut pool), 32);
            let mut k = 0;
            while peer.recv_with(|_| ()).is_some() {
                k += 1;
            }
            assert_eq!(k, 32);
        }
        assert_eq!(pool.allocated(), 64);
    }

    #[test]
    fn one_way_traffic_stays_allocation_free() {
        // Host only sends, switch only receives: buffers must flow back to the host.
        let (mut port, peer) = memory_pair(0, 256);
        let mut pool = BufPool::new(DEFAULT_BUF_CAPACITY, 64);
        let f = frame(1, 64);
        let frames: Vec<&[u8]> = vec![&f; 32];
        let mut v = Vec::new();
        let mut cycle = |port: &mut MemoryPort, pool: &mut BufPool| {
            assert_eq!(peer.send_batch(&frames), 32);
            assert_eq!(port.recv_batch(pool, &mut v, 64), 32);
            v.drain(..).for_each(|p| pool.put(p));
        };
        for _ in 0..20 {
            cycle(&mut port, &mut pool);
        }
        let (host0, pool0) = (peer.allocated(), pool.allocated());
        for _ in 0..500 {
            cycle(&mut port, &mut pool);
        }
        assert_eq!((peer.allocated(), pool.allocated()), (host0, pool0));

        // Switch only transmits (as a multicast output port would), host only receives: buffers
        // must flow back to the pool.
        let (mut port, peer) = memory_pair(1, 256);
        let mut pool = BufPool::new(DEFAULT_BUF_CAPACITY, 64);
        let cycle = |port: &mut MemoryPort, pool: &mut BufPool| {
            let mut v: Vec<PacketBuf> = (0..32)
                .map(|_| {
                    let mut b = pool.get();
                    b.copy_from(&f);
                    b
                })
                .collect();
            assert_eq!(port.send_batch(&mut v, pool), 32);
            while peer.recv_with(|_| ()).is_some() {}
        };
        for _ in 0..50 {
            cycle(&mut port, &mut pool);
        }
        let pool0 = pool.allocated();
        for _ in 0..500 {
            cycle(&mut port, &mut pool);
        }
        assert_eq!(pool.allocated(), pool0);
    }

    #[test]
    fn eventfd_is_level_triggered() {
        let (mut port, peer) = memory_pair(0, 64);
        let fd = port.poll_fd().unwrap();
        let mut pool = BufPool::new(DEFAULT_BUF_CAPACITY, 4);
        let ready = |fd| poll_readable(fd, Some(Duration::ZERO)).unwrap();
        assert!(!ready(fd));
        for i in 0..5 {
            peer.send(&frame(i, 64));
        }
        assert!(ready(fd));
        let mut v = Vec::new();
        // A batch that hits `max` leaves frames queued: still readable.
        assert_eq!(port.recv_batch(&mut pool, &mut v, 2), 2);
        assert!(ready(fd));
        assert_eq!(port.recv_batch(&mut pool, &mut v, 10), 3);
        assert!(!ready(fd));
        // Host direction.
        assert!(!ready(peer.poll_fd()));
        port.send_batch(&mut v, &mut pool);
        assert!(ready(peer.poll_fd()));
        assert_eq!(peer.recv_all().len(), 5);
        assert!(!ready(peer.poll_fd()));
        assert!(peer.recv_timeout(Duration::from_millis(5)).is_none());
    }

    #[test]
    fn threads_exchange_frames_without_loss_or_lost_wakeups() {
        let (mut port, peer) = memory_pair(0, 256);
        const N: u32 = 20_000;
        let tx = peer.clone();
        let h = std::thread::spawn(move || {
            for i in 0..N {
                while !tx.send(&frame(i, 64)) {
                    std::thread::yield_now();
                }
            }
        });
        let mut pool = BufPool::new(DEFAULT_BUF_CAPACITY, 64);
        let mut v = Vec::new();
        let mut next = 0u32;
        while next < N {
            let got = port.recv_batch(&mut pool, &mut v, 64);
            for p in v.drain(..) {
                assert_eq!(u32::from_be_bytes(p.data()[..4].try_into().unwrap()), next);
                next += 1;
                pool.put(p);
            }
            if got < 64 && next < N {
                // Sleep on the doorbell: a lost wake-up would hang here until the timeout.
                let fd = port.poll_fd().unwrap();
                assert!(poll_readable(fd, Some(Duration::from_secs(5))).unwrap(), "lost wake-up");
            }
        }
        h.join().unwrap();
        assert_eq!(port.stats().snapshot().rx_full, peer.send_dropped());
    }
}
