//! Per-port counters, shared between the thread that runs a port and any thread that reads
//! them (metrics exporter, control plane).
//!
//! Every counter is an `AtomicU64` updated with `Relaxed` ordering: counters are monotone and
//! read for reporting only, so no ordering with the packet data is needed, and a relaxed
//! increment on an uncontended cache line costs about as much as a plain add.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

macro_rules! port_stats {
    (
        traffic { $($t:ident : $tdoc:literal,)* }
        drops { $($d:ident : $ddoc:literal,)* }
    ) => {
        /// Live counters of one port. Obtain with [`Port::stats`](crate::Port::stats).
        #[derive(Debug, Default)]
        pub struct PortStats {
            $(#[doc = $tdoc] pub $t: AtomicU64,)*
            $(#[doc = $ddoc] pub $d: AtomicU64,)*
        }

        /// A plain copy of [`PortStats`] at one moment.
        #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
        pub struct PortStatsSnapshot {
            $(#[doc = $tdoc] pub $t: u64,)*
            $(#[doc = $ddoc] pub $d: u64,)*
        }

        /// Names of the drop reasons, in the order [`PortStatsSnapshot::drops`] lists them.
        pub const DROP_REASONS: &[&str] = &[$(stringify!($d)),*];

        impl PortStats {
            /// Read every counter (each individually atomic; the set is not one atomic cut).
            pub fn snapshot(&self) -> PortStatsSnapshot {
                PortStatsSnapshot {
                    $($t: self.$t.load(Relaxed),)*
                    $($d: self.$d.load(Relaxed),)*
                }
            }
        }

        impl PortStatsSnapshot {
            /// `(name, value)` of the traffic counters (packets and bytes each way).
            pub fn traffic(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($t), self.$t)),*]
            }
            /// `(reason, count)` of every drop reason, for a Prometheus exporter
            /// (e.g. `inswitch_port_drops_total{port="...",reason="tx_full"}`).
            pub fn drops(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($d), self.$d)),*]
            }
            /// Frames dropped for any reason.
            pub fn total_drops(&self) -> u64 {
                0 $(+ self.$d)*
            }
        }
    };
}

port_stats! {
    traffic {
        rx_packets: "Frames received and handed to the switch.",
        rx_bytes: "Bytes of the frames counted in `rx_packets`.",
        tx_packets: "Frames transmitted.",
        tx_bytes: "Bytes of the frames counted in `tx_packets`.",
    }
    drops {
        rx_oversize: "Received frames larger than the buffer capacity (e.g. GSO super-packets).",
        rx_full: "Received frames lost because the receive queue or ring was full (kernel drops \
                  included where the kernel reports them).",
        rx_fill_empty: "Received frames the kernel could not deliver to an AF_XDP port because its \
                        fill ring was empty (no free buffer to receive into).",
        rx_xdp_dropped: "Received frames an AF_XDP socket dropped for another reason (e.g. larger \
                         than a UMEM chunk).",
        rx_error: "Receive calls that failed with an error other than \"nothing to read\".",
        tx_full: "Frames not sent because the queue, ring or socket buffer was full (EAGAIN, ENOBUFS).",
        tx_error: "Frames not sent because of another error (EMSGSIZE, ENETDOWN, ...).",
        tx_no_peer: "Frames not sent because the port has no peer yet (UDP tunnel before its \
                     host has sent anything).",
        rx_foreign: "Received datagrams dropped because they came from another address than the \
                     port's fixed peer (a UDP tunnel port bound to its host; anyone else is refused).",
        rx_fault: "Received frames dropped on purpose by a fault injector.",
        tx_fault: "Transmitted frames dropped on purpose by a fault injector.",
    }
}

impl PortStats {
    /// Count `n` received frames totalling `bytes`.
    #[inline]
    pub fn add_rx(&self, n: u64, bytes: u64) {
        if n > 0 {
            self.rx_packets.fetch_add(n, Relaxed);
            self.rx_bytes.fetch_add(bytes, Relaxed);
        }
    }

    /// Count `n` transmitted frames totalling `bytes`.
    #[inline]
    pub fn add_tx(&self, n: u64, bytes: u64) {
        if n > 0 {
            self.tx_packets.fetch_add(n, Relaxed);
            self.tx_bytes.fetch_add(bytes, Relaxed);
        }
    }

    /// Add `n` to a drop counter (a field of this struct).
    #[inline]
    pub fn count(counter: &AtomicU64, n: u64) {
        if n > 0 {
            counter.fetch_add(n, Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_lists_every_drop_reason() {
        let s = PortStats::default();
        s.add_rx(3, 300);
        PortStats::count(&s.tx_full, 2);
        PortStats::count(&s.rx_oversize, 1);
        let snap = s.snapshot();
        assert_eq!(snap.rx_packets, 3);
        assert_eq!(snap.rx_bytes, 300);
        assert_eq!(snap.total_drops(), 3);
        let drops = snap.drops();
        assert_eq!(drops.len(), DROP_REASONS.len());
        assert!(drops.contains(&("tx_full", 2)));
        assert!(drops.contains(&("rx_oversize", 1)));
        assert!(drops.iter().any(|&(n, _)| n == "tx_no_peer"));
        assert_eq!(snap.traffic()[0], ("rx_packets", 3));
    }
}
