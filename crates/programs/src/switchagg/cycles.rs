//! The FPGA's time (SwitchAgg §5 and Table 3): what the model charges in clock cycles.
//!
//! The software switch runs the program as fast as the host can; what the FPGA would
//! take is computed here from the same events (packets, pairs, evictions, flushed words),
//! not measured. Table 3 gives each module's latency; throughput comes from the data path:
//! - the header extractor and the payload analyzer take the packet 128 bits per cycle;
//! - an FPE starts one pair every [`FPE_II`] cycles ("the search and aggregation can be
//!   done in two clock cycles without any pipeline stall", §4.2.4);
//! - the BPE, shared by the eight FPEs behind a scheduler, starts one access every
//!   [`BPE_II`] cycles: the DRAM's ~25-cycle latency is hidden by the memory controller
//!   that buffers commands (§5); the interval is our assumption (a bucket read and write
//!   over two DDR3 channels), the paper does not state it.

use std::collections::VecDeque;

use super::payload_analyzer::GROUPS;

/// Table 3, cycles.
pub const HEADER_ANALYZER: u64 = 3;
pub const CROSSBAR: u64 = 2;
pub const FPE_HASH: u64 = 10;
pub const FPE_AGGREGATE: u64 = 18;
pub const FPE_FORWARD: u64 = 5;
pub const BPE_AGGREGATE: u64 = 33;
pub const BPE_FLUSH: u64 = 31_250_000;

/// Cycles between two pairs entering one FPE.
pub const FPE_II: u64 = 2;
/// Cycles between two accesses entering the BPE (assumed; see the module doc).
pub const BPE_II: u64 = 4;
/// Clock, Hz, and bus width, bits (§5).
pub const CLOCK_HZ: u64 = 200_000_000;
pub const BUS_BITS: u64 = 128;

/// Latency of one pair through the engines, cycles (Table 3's rows on its path).
pub fn pair_latency(to_bpe: bool) -> u64 {
    HEADER_ANALYZER + CROSSBAR + FPE_HASH + FPE_AGGREGATE + FPE_FORWARD + if to_bpe { BPE_AGGREGATE } else { 0 }
}

/// Cycles the payload analyzer streams `bytes` bytes.
pub fn stream_cycles(bytes: u64) -> u64 {
    (bytes * 8).div_ceil(BUS_BITS)
}

/// One pair handed to an FPE: when (cycle its last byte left the analyzer), which group,
/// whether it goes on to the BPE (an eviction or a pass-through).
#[derive(Clone, Copy, Debug)]
pub struct PairEvent {
    pub cycle: u64,
    pub group: u8,
    pub to_bpe: bool,
}

/// What the FPE input FIFOs saw (Table 2's counters).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FifoStats {
    /// Pairs written into the FIFOs.
    pub written: u64,
    /// Writes that found their FIFO full (the engine behind it not at line rate).
    pub full: u64,
    /// Largest FIFO occupancy seen.
    pub max_depth: u64,
    /// Cycle the last pair left its engine.
    pub last_cycle: u64,
}

/// Replay pair arrivals (sorted by cycle) through eight FPE FIFOs of `depth` entries and
/// the shared BPE; a write into a full FIFO is counted (the analyzer then waits, as on
/// the board: nothing is lost).
pub fn simulate_fifos(events: &[PairEvent], depth: usize) -> FifoStats {
    let mut waiting: Vec<VecDeque<u64>> = vec![VecDeque::new(); GROUPS];
    let mut fpe_free = [0u64; GROUPS];
    let mut bpe_free = 0u64;
    let mut s = FifoStats::default();
    for e in events {
        let g = e.group as usize % GROUPS;
        let q = &mut waiting[g];
        while q.front().is_some_and(|&start| start <= e.cycle) {
            q.pop_front();
        }
        s.written += 1;
        if q.len() >= depth {
            s.full += 1;
        }
        let start = e.cycle.max(fpe_free[g]);
        let mut done = start + FPE_II;
        if e.to_bpe {
            // The scheduler hands the pair to the BPE when it can take one.
            let handoff = done.max(bpe_free);
            bpe_free = handoff + BPE_II;
            done = handoff;
        }
        fpe_free[g] = done;
        q.push_back(start);
        s.max_depth = s.max_depth.max(q.len() as u64);
        s.last_cycle = s.last_cycle.max(done + pair_latency(e.to_bpe));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engines_keep_up_below_their_rate_and_not_above() {
        // One pair every 2 cycles into one FPE: exactly its rate, never full.
        let ev: Vec<_> = (0..1000).map(|i| PairEvent { cycle: 2 * i, group: 0, to_bpe: false }).collect();
        assert_eq!(simulate_fifos(&ev, 4).full, 0);
        // One pair per cycle into one FPE: twice its rate, the FIFO fills.
        let ev: Vec<_> = (0..1000).map(|i| PairEvent { cycle: i, group: 0, to_bpe: false }).collect();
        assert!(simulate_fifos(&ev, 4).full > 400);
        // Spread over eight groups, one per cycle is fine.
        let ev: Vec<_> = (0..1000).map(|i| PairEvent { cycle: i, group: (i % 8) as u8, to_bpe: false }).collect();
        assert_eq!(simulate_fifos(&ev, 4).full, 0);
        assert_eq!(pair_latency(true), 3 + 2 + 10 + 18 + 5 + 33);
    }
}
