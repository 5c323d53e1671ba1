//! ports: packet I/O for the inswitch data plane.
//!
//! A switch port is anything implementing [`Port`]: it receives and transmits batches of
//! Ethernet frames in [`PacketBuf`](pisa::packet::PacketBuf)s taken from and returned to the
//! data plane's [`BufPool`](pisa::packet::BufPool), never blocks, and counts everything it
//! drops in its [`PortStats`]. Implementations:
//!
//! - [`MemoryPort`] — in-memory fabric (tests, benchmarks, single-process runs);
//! - [`UdpPort`] — one UDP socket per port on loopback, one frame per datagram (no root);
//! - [`AfPacketPort`] — AF_PACKET with a PACKET_MMAP ring on a real interface, typically the
//!   switch end of a veth pair (root);
//! - [`XdpPort`] — AF_XDP (UMEM + fill/completion/rx/tx rings) with a redirect program the
//!   port attaches itself (root; falls back to AF_PACKET where XDP is unavailable);
//! - [`FilePort`] — replays a pcap/pcapng capture and writes what it sends (bmv2's
//!   `--use-files`);
//!
//! and wrappers: [`CapturePort`] (pcapng capture) and [`FaultPort`] (loss, duplication,
//! reordering). [`PortSpec`] and [`open_ports`] build a set of ports from a string such as
//! `"veth:s1,s2,s3"`; [`traffic`] has the UDP blaster and sink used in benchmarks, and
//! [`netns`] the namespace + veth fixture the tests and benchmarks use.

#![warn(missing_docs)]

pub mod afpacket;
pub mod aggregation;
pub mod allreduce;
pub mod bench;
pub mod dataplane;
pub mod fault;
pub mod file;
pub mod hareload;
pub mod memory;
pub mod netns;
pub mod pcap;
pub mod port;
pub mod spec;
pub mod stats;
mod sys;
pub mod traffic;
pub mod tunnelhost;
pub mod udp;
pub mod xdp;

pub use afpacket::{complete_l4_checksum, AfPacketConfig, AfPacketPort, TxMode, MAX_RING_FRAMES, MIN_RING_FRAMES};
pub use fault::{FaultConfig, FaultPort, FaultStats};
pub use file::{parse_capture, read_capture, FilePort, Frames};
pub use memory::{memory_pair, memory_pair_with, MemoryConfig, MemoryPeer, MemoryPort};
pub use pcap::{capture_path, CapturePort, Direction, PcapngWriter};
pub use port::Port;
pub use spec::{open_ports, OpenOptions, OpenedPorts, PortError, PortSpec, SpecError, MAX_PORTS};
pub use stats::{PortStats, PortStatsSnapshot, DROP_REASONS};
pub use sys::{monotonic_ns, realtime_ns};
pub use traffic::{udp_blast, udp_sink, BlastReport, SinkReport};
pub use udp::{UdpConfig, UdpPort, UdpTunnelHost};
pub use xdp::{XdpConfig, XdpPort};

#[cfg(test)]
mod tests {
    use super::*;

    /// The data plane moves ports to its threads and hands peers to host threads.
    #[test]
    fn ports_are_send_and_peers_are_shareable() {
        fn send<T: Send>() {}
        fn send_sync<T: Send + Sync>() {}
        send::<MemoryPort>();
        send::<UdpPort>();
        send::<AfPacketPort>();
        send::<XdpPort>();
        send::<CapturePort<Box<dyn Port>>>();
        send::<FaultPort<Box<dyn Port>>>();
        send_sync::<MemoryPeer>();
        send_sync::<PortStats>();
        send::<UdpTunnelHost>();
    }
}
