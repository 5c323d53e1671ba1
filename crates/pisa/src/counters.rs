//! The switch's own counters: per port, per program, drops by reason, recirculations.
//! These are observability of the model (what `/metrics` serves), not program resources.

use serde::Serialize;

use crate::base::DropCode;
use crate::pass::Violation;

#[derive(Clone, Debug, Default, Serialize)]
pub struct PortCounters {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    /// Packets dropped because this port's egress queue was full.
    pub queue_drops: u64,
    /// Deepest the egress queue has been, in packets.
    pub queue_depth_max: u64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct ProgramCounters {
    /// Ingress passes run by this program.
    pub ingress_passes: u64,
    /// Egress passes run by this program.
    pub egress_passes: u64,
    /// Drops decided in this program's passes, by drop code.
    pub drops: Vec<u64>,
    /// Rule violations, by [`Violation`] kind.
    pub violations: Vec<u64>,
}

impl ProgramCounters {
    fn new() -> Self {
        ProgramCounters { drops: vec![0; DropCode::MAX], violations: vec![0; Violation::ALL.len()], ..Default::default() }
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Counters {
    pub ports: Vec<PortCounters>,
    pub programs: Vec<ProgramCounters>,
    /// All drops by drop code.
    pub drops: Vec<u64>,
    pub recirculations: u64,
    /// Bytes through the recirculation port.
    pub recirc_bytes: u64,
    /// Ingress calls at which the recirculation port's line rate held waiting
    /// recirculations back (back-pressure; drops once the queue is full are `recirc_full`).
    pub recirc_rate_waits: u64,
    pub pktgen_packets: u64,
    pub packet_in: u64,
    pub packet_out: u64,
    pub digests: u64,
    pub clones: u64,
    pub mcast_replicas: u64,
    pub batches: u64,
}

impl Counters {
    pub fn new(ports: usize, programs: usize) -> Self {
        Counters {
            ports: vec![PortCounters::default(); ports],
            programs: (0..programs).map(|_| ProgramCounters::new()).collect(),
            drops: vec![0; DropCode::MAX],
            ..Default::default()
        }
    }

    /// Add another pipe's counters to these.
    pub fn merge(&mut self, o: &Counters) {
        if self.ports.len() < o.ports.len() {
            self.ports.resize(o.ports.len(), PortCounters::default());
        }
        for (a, b) in self.ports.iter_mut().zip(&o.ports) {
            a.rx_packets += b.rx_packets;
            a.rx_bytes += b.rx_bytes;
            a.tx_packets += b.tx_packets;
            a.tx_bytes += b.tx_bytes;
            a.queue_drops += b.queue_drops;
            a.queue_depth_max = a.queue_depth_max.max(b.queue_depth_max);
        }
        while self.programs.len() < o.programs.len() {
            self.programs.push(ProgramCounters::new());
        }
        for (a, b) in self.programs.iter_mut().zip(&o.programs) {
            a.ingress_passes += b.ingress_passes;
            a.egress_passes += b.egress_passes;
            add(&mut a.drops, &b.drops);
            add(&mut a.violations, &b.violations);
        }
        add(&mut self.drops, &o.drops);
        self.recirculations += o.recirculations;
        self.recirc_bytes += o.recirc_bytes;
        self.recirc_rate_waits += o.recirc_rate_waits;
        self.pktgen_packets += o.pktgen_packets;
        self.packet_in += o.packet_in;
        self.packet_out += o.packet_out;
        self.digests += o.digests;
        self.clones += o.clones;
        self.mcast_replicas += o.mcast_replicas;
        self.batches += o.batches;
    }

    pub fn total_drops(&self) -> u64 {
        self.drops.iter().sum()
    }
}

fn add(a: &mut Vec<u64>, b: &[u64]) {
    if a.len() < b.len() {
        a.resize(b.len(), 0);
    }
    for (x, y) in a.iter_mut().zip(b) {
        *x += y;
    }
}
