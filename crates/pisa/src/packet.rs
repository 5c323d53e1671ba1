//! Packet buffers and the pool that recycles them.
//!
//! The data plane never allocates on the per-packet path: every buffer comes from a
//! [`BufPool`] and goes back to it when the packet leaves the switch or is dropped.

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

/// One packet: a fixed-capacity byte buffer, the number of bytes in use, and the port it
/// arrived on (on receive) or leaves by (on transmit).
#[derive(Clone)]
pub struct PacketBuf {
    buf: Box<[u8]>,
    len: usize,
    /// Ingress port on receive; egress port on transmit.
    pub port: PortId,
    /// Time of arrival in nanoseconds, on the driver's clock.
    pub ts_ns: u64,
}

impl std::fmt::Debug for PacketBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PacketBuf")
            .field("len", &self.len)
            .field("port", &self.port)
            .field("ts_ns", &self.ts_ns)
            .finish()
    }
}

impl PacketBuf {
    pub fn with_capacity(capacity: usize) -> Self {
        PacketBuf { buf: vec![0u8; capacity].into_boxed_slice(), len: 0, port: PORT_NONE, ts_ns: 0 }
    }

    /// A buffer holding a copy of `bytes` (tests and control-plane injection; allocates).
    pub fn from_slice(bytes: &[u8], port: PortId) -> Self {
        let mut p = PacketBuf::with_capacity(bytes.len().max(DEFAULT_BUF_CAPACITY));
        p.buf[..bytes.len()].copy_from_slice(bytes);
        p.len = bytes.len();
        p.port = port;
        p
    }

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

    /// A buffer holding a copy of `src` (used for clones and multicast replicas).
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
}
