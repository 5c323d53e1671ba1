//! Packet buffers and the pool that recycles them.
//!
//! A [`PacketBuf`] is a pointer-sized handle: the frame's bytes and the intrinsic
//! metadata that travels with it ([`PacketMeta`]) live behind it, so queues and batches
//! move 8 bytes per packet, like the descriptor rings of a hardware switch or DPDK's mbufs.
//! The data plane never allocates on the per-packet path: every buffer comes from a
//! [`BufPool`] and goes back to it when the packet leaves the switch or is dropped.

use std::ops::{Deref, DerefMut};

use crate::base::DropCode;
pub use crate::base::BRIDGED_BYTES;

/// A switch port number. Front-panel ports are `0..N`; a few numbers are reserved for the
/// internal ports every PISA switch has.
pub type PortId = u16;

/// The CPU port: packets sent here become P4Runtime PacketIn messages; PacketOut messages
/// enter the pipeline from here.
pub const PORT_CPU: PortId = 0xFFF0;
/// The recirculation port: a packet sent here re-enters ingress of the same pipe (a new,
/// counted pass).
pub const PORT_RECIRC: PortId = 0xFFF1;
/// The packet generator's port (Tofino's pktgen): generated packets arrive from here.
pub const PORT_PKTGEN: PortId = 0xFFF2;
/// "No port chosen yet".
pub const PORT_NONE: PortId = 0xFFFF;

/// Default buffer capacity: a 1500-byte MTU frame plus headers, rounded up.
pub const DEFAULT_BUF_CAPACITY: usize = 2048;

/// Intrinsic metadata that travels with a packet through ingress, the traffic manager and
/// egress (Tofino's ig_intr_md, ig_intr_md_for_tm, eg_intr_md and bridged metadata).
///
/// Laid out widest field first so that copying it between queues moves aligned words.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct PacketMeta {
    pub bridged: [u8; BRIDGED_BYTES],
    /// Truncate to this many bytes when leaving (0: no truncation): clone sessions set it.
    pub truncate_len: u32,
    pub ingress_port: PortId,
    /// Unicast destination (PORT_NONE: none chosen).
    pub egress_port: PortId,
    /// Multicast group (0: none).
    pub mcast_grp: u16,
    /// Multicast replicas to this port are pruned (Tofino's L2 exclusion of the source).
    pub mcast_prune_port: PortId,
    /// Ingress-to-egress clone session (0: none).
    pub clone_session: u16,
    /// Egress-to-egress clone session (0: none).
    pub e2e_clone_session: u16,
    /// Replication id (multicast instance or clone replica) seen by egress.
    pub rid: u16,
    /// The packet trace recording this packet and its copies (0: none; see [`crate::trace`]).
    pub trace: u16,
    /// Set when the packet is to be dropped.
    pub drop: Option<DropCode>,
    /// Recirculations so far (0 on the first pass).
    pub recirculations: u8,
    /// Index of the program that owns the packet in the program set (0xFF: none).
    pub owner: u8,
    /// This packet is a clone.
    pub is_clone: bool,
    /// Unused: rounds the struct up to whole 16-byte words, so copying it is a few aligned
    /// vector moves.
    pub(crate) _reserved: [u8; 7],
}

impl PacketMeta {
    #[inline]
    pub fn new(ingress_port: PortId) -> Self {
        let mut m = Self::BLANK;
        m.ingress_port = ingress_port;
        m
    }

    /// Reset to a new packet's metadata in place: a copy of one constant (a few wide
    /// moves), then the port.
    #[inline]
    pub(crate) fn reset(&mut self, ingress_port: PortId) {
        *self = Self::BLANK;
        self.ingress_port = ingress_port;
    }

    const BLANK: PacketMeta = PacketMeta {
        bridged: [0; BRIDGED_BYTES],
        truncate_len: 0,
        ingress_port: PORT_NONE,
        egress_port: PORT_NONE,
        mcast_grp: 0,
        mcast_prune_port: PORT_NONE,
        clone_session: 0,
        e2e_clone_session: 0,
        rid: 0,
        drop: None,
        recirculations: 0,
        owner: 0xFF,
        is_clone: false,
        trace: 0,
        _reserved: [0; 7],
    };
}

const _: () = assert!(std::mem::size_of::<PacketMeta>().is_multiple_of(16));

/// What a [`PacketBuf`] points to: the bytes, how many are in use, where the packet came
/// from or goes, and its metadata.
#[derive(Clone)]
pub struct PacketInner {
    buf: Box<[u8]>,
    len: usize,
    /// Ingress port on receive; egress port on transmit (set by whoever moves it).
    pub port: PortId,
    /// Time of arrival in nanoseconds, on the driver's clock.
    pub ts_ns: u64,
    /// Intrinsic metadata, valid while the packet is inside the switch.
    pub meta: PacketMeta,
}

/// One packet: a handle to its bytes and metadata. Fields and methods of [`PacketInner`]
/// are reached through it (`pkt.port`, `pkt.data()`).
#[derive(Clone)]
pub struct PacketBuf(Box<PacketInner>);

impl Deref for PacketBuf {
    type Target = PacketInner;
    #[inline(always)]
    fn deref(&self) -> &PacketInner {
        &self.0
    }
}

impl DerefMut for PacketBuf {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut PacketInner {
        &mut self.0
    }
}

impl std::fmt::Debug for PacketBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PacketBuf").field("len", &self.len).field("port", &self.port).field("ts_ns", &self.ts_ns).finish()
    }
}

impl PacketBuf {
    pub fn with_capacity(capacity: usize) -> Self {
        PacketBuf(Box::new(PacketInner {
            buf: vec![0u8; capacity].into_boxed_slice(),
            len: 0,
            port: PORT_NONE,
            ts_ns: 0,
            meta: PacketMeta::new(PORT_NONE),
        }))
    }

    /// A buffer holding a copy of `bytes` (tests and control-plane injection; allocates).
    pub fn from_slice(bytes: &[u8], port: PortId) -> Self {
        let mut p = PacketBuf::with_capacity(bytes.len().max(DEFAULT_BUF_CAPACITY));
        p.buf[..bytes.len()].copy_from_slice(bytes);
        p.len = bytes.len();
        p.port = port;
        p
    }
}

impl PacketInner {
    #[inline]
    pub fn capacity(&self) -> usize {
        self.buf.len()
    }
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The bytes in use.
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.buf[..self.len]
    }
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buf[..self.len]
    }
    /// The first `n` bytes (`n <= len`, which the pass keeps true for its header region).
    #[inline(always)]
    pub(crate) fn head(&self, n: usize) -> &[u8] {
        &self.buf[..n]
    }
    #[inline(always)]
    pub(crate) fn head_mut(&mut self, n: usize) -> &mut [u8] {
        &mut self.buf[..n]
    }
    /// The whole buffer, for receive calls that fill it; follow with [`set_len`](Self::set_len).
    #[inline]
    pub fn raw_mut(&mut self) -> &mut [u8] {
        &mut self.buf
    }
    /// Set the number of bytes in use; clamps to capacity.
    #[inline]
    pub fn set_len(&mut self, len: usize) {
        self.len = len.min(self.buf.len());
    }
    /// Replace the contents with `bytes`; false (and unchanged) if they do not fit.
    #[inline]
    pub fn copy_from(&mut self, bytes: &[u8]) -> bool {
        if bytes.len() > self.buf.len() {
            return false;
        }
        self.buf[..bytes.len()].copy_from_slice(bytes);
        self.len = bytes.len();
        true
    }
}

/// Most buffers a pool keeps free. Buffers made outside the pool (tests, control-plane
/// injection) also come back to it; past this bound they are released instead of piling up.
pub const DEFAULT_MAX_FREE: usize = 16384;

/// A free list of equally sized packet buffers.
pub struct BufPool {
    free: Vec<PacketBuf>,
    capacity: usize,
    allocated: usize,
    max_free: usize,
}

impl BufPool {
    /// A pool of buffers of `capacity` bytes, with `prealloc` of them made up front.
    pub fn new(capacity: usize, prealloc: usize) -> Self {
        let free = (0..prealloc).map(|_| PacketBuf::with_capacity(capacity)).collect();
        BufPool { free, capacity, allocated: prealloc, max_free: DEFAULT_MAX_FREE.max(prealloc) }
    }

    /// A buffer with length 0. Allocates only when the pool is empty (start-up, bursts).
    #[inline]
    pub fn get(&mut self) -> PacketBuf {
        match self.free.pop() {
            Some(mut p) => {
                p.len = 0;
                p.port = PORT_NONE;
                p.ts_ns = 0;
                p
            }
            None => {
                self.allocated += 1;
                PacketBuf::with_capacity(self.capacity)
            }
        }
    }

    /// A buffer holding a copy of `src`, metadata included (clones, multicast replicas).
    #[inline]
    pub fn copy_of(&mut self, src: &PacketBuf) -> PacketBuf {
        let mut p = self.get();
        if p.capacity() < src.len() {
            p = PacketBuf::with_capacity(src.capacity());
        }
        p.buf[..src.len].copy_from_slice(&src.buf[..src.len]);
        p.len = src.len;
        p.port = src.port;
        p.ts_ns = src.ts_ns;
        p.meta = src.meta;
        p
    }

    /// Give a buffer back (kept for reuse while the free list is below its bound).
    #[inline]
    pub fn put(&mut self, p: PacketBuf) {
        if p.capacity() == self.capacity && self.free.len() < self.max_free {
            self.free.push(p);
        }
    }

    pub fn buf_capacity(&self) -> usize {
        self.capacity
    }
    /// Buffers ever made by this pool.
    pub fn allocated(&self) -> usize {
        self.allocated
    }
    pub fn free_count(&self) -> usize {
        self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_recycles_without_allocating() {
        let mut pool = BufPool::new(256, 4);
        let a = pool.get();
        let b = pool.get();
        pool.put(a);
        pool.put(b);
        for _ in 0..100 {
            let p = pool.get();
            pool.put(p);
        }
        assert_eq!(pool.allocated(), 4);
    }

    #[test]
    fn free_list_is_bounded() {
        let mut pool = BufPool::new(64, 0);
        for _ in 0..DEFAULT_MAX_FREE + 100 {
            pool.put(PacketBuf::with_capacity(64));
        }
        assert_eq!(pool.free_count(), DEFAULT_MAX_FREE);
    }

    #[test]
    fn copy_from_rejects_oversize() {
        let mut p = PacketBuf::with_capacity(8);
        assert!(!p.copy_from(&[0u8; 9]));
        assert!(p.copy_from(&[1, 2, 3]));
        assert_eq!(p.data(), &[1, 2, 3]);
    }

    #[test]
    fn handle_is_pointer_sized() {
        assert_eq!(std::mem::size_of::<PacketBuf>(), std::mem::size_of::<usize>());
    }
}
