//! The interface between the data plane and anything that moves frames in and out of it.

use std::os::fd::RawFd;
use std::sync::Arc;

use pisa::packet::{BufPool, PacketBuf, PortId};

use crate::stats::PortStats;

/// One switch port: a source and sink of Ethernet frames, driven in batches by one data-plane
/// thread.
///
/// Calls never block. A driver that wants to sleep waits on [`poll_fd`](Port::poll_fd) — but
/// only after [`recv_batch`](Port::recv_batch) returned fewer than `max` frames, because a port
/// may stop signalling while frames are still queued from a batch that hit `max`.
pub trait Port: Send {
    /// Human-readable name, e.g. "veth-s1", "udp:127.0.0.1:40001", "mem3".
    fn name(&self) -> &str;

    /// The switch port number this port was created with.
    fn id(&self) -> PortId;

    /// Receive up to `max` frames WITHOUT blocking, appending them to `out`. Buffers come from
    /// `pool`; each gets `port = self.id()` and `ts_ns` (CLOCK_MONOTONIC ns, read once per
    /// batch). Returns frames received.
    ///
    /// Errors (EAGAIN etc.) are not returned: they are counted in the stats; a frame larger than
    /// the pool's buffer capacity is dropped and counted (reason `rx_oversize`).
    fn recv_batch(&mut self, pool: &mut BufPool, out: &mut Vec<PacketBuf>, max: usize) -> usize;

    /// Transmit every frame in `pkts` (draining the Vec), returning all buffers to `pool`.
    /// Frames that cannot be sent (ring full, ENOBUFS, peer gone) are dropped and counted by
    /// reason. Returns frames sent.
    fn send_batch(&mut self, pkts: &mut Vec<PacketBuf>, pool: &mut BufPool) -> usize;

    /// A fd that becomes readable when frames may be waiting (for epoll in the driver), if any.
    fn poll_fd(&self) -> Option<RawFd>;

    /// Shared counters (readable from another thread while the port runs).
    fn stats(&self) -> Arc<PortStats>;

    /// For a port replaying a finite input (a capture file): `Some(true)` once every frame
    /// has been delivered. `None` for live ports. The driver reads a replaying port only
    /// while the traffic manager has room (a file can wait; a wire cannot), and the switch
    /// knows a replay is over when every replaying port is done and the pipeline is empty.
    fn replay_done(&self) -> Option<bool> {
        None
    }

    /// For a port that receives through a kernel ring mapped into the process (AF_PACKET):
    /// `(slots, bytes mapped)` of its receive ring, as the kernel set it up. `None` for
    /// others. The rings are most of a switch's resident memory per port, so the switch
    /// reports them.
    fn rx_ring(&self) -> Option<(usize, usize)> {
        None
    }
}

/// Boxed ports are ports, so wrappers such as [`CapturePort`](crate::CapturePort) and
/// [`FaultPort`](crate::FaultPort) can wrap the `Box<dyn Port>` that
/// [`open_ports`](crate::open_ports) makes.
impl<P: Port + ?Sized> Port for Box<P> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn id(&self) -> PortId {
        (**self).id()
    }
    fn recv_batch(&mut self, pool: &mut BufPool, out: &mut Vec<PacketBuf>, max: usize) -> usize {
        (**self).recv_batch(pool, out, max)
    }
    fn send_batch(&mut self, pkts: &mut Vec<PacketBuf>, pool: &mut BufPool) -> usize {
        (**self).send_batch(pkts, pool)
    }
    fn poll_fd(&self) -> Option<RawFd> {
        (**self).poll_fd()
    }
    fn stats(&self) -> Arc<PortStats> {
        (**self).stats()
    }
    fn replay_done(&self) -> Option<bool> {
        (**self).replay_done()
    }
    fn rx_ring(&self) -> Option<(usize, usize)> {
        (**self).rx_ring()
    }
}
