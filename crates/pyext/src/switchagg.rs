//! SwitchAgg from Python: in-memory aggregation runs on the `switchagg` program (the
//! `hostlib::switchagg::harness` rack) and the FPGA line-rate model. Pairs cross as bytes
//! (keys back to back, `uint64` offsets, `uint32` values, little-endian: what numpy's
//! `tobytes()` gives); results come back the same way.

use std::time::{Duration, Instant};

use ports::aggregation::bench;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use hostlib::switchagg::harness::{self, Faults, Job, Topology};
use programs::switchagg::cycles::{self, PairEvent};
use programs::switchagg::payload_analyzer::{group_of, GROUPS};
use programs::switchagg::Config;
use wire::switchagg::{Operation, HEADER_LEN, PAIR_OVERHEAD};
use wire::L2_L4_LEN;

/// Pairs of one mapper (or one packet).
type Pairs = Vec<(Vec<u8>, u32)>;

fn value_err(e: impl ToString) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// Pairs from the byte arrays, split into `mappers` contiguous shares.
fn pairs_of(keys: &[u8], offsets: &[u8], values: &[u8], mappers: usize) -> PyResult<Vec<Pairs>> {
    if !offsets.len().is_multiple_of(8) || !values.len().is_multiple_of(4) {
        return Err(value_err("key_offsets must be uint64 and values uint32"));
    }
    let off: Vec<u64> = offsets.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect();
    let val: Vec<u32> = values.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
    if off.len() != val.len() + 1 {
        return Err(value_err("key_offsets needs one more entry than values"));
    }
    let n = val.len();
    let mut all = Vec::with_capacity(n);
    for i in 0..n {
        let (a, b) = (off[i] as usize, off[i + 1] as usize);
        if a > b || b > keys.len() || b - a == 0 || b - a > 255 {
            return Err(value_err(format!("key {i}: offsets {a}..{b} (keys are 1..=255 bytes within `keys`)")));
        }
        all.push((keys[a..b].to_vec(), val[i]));
    }
    let m = mappers.max(1);
    let mut it = all.into_iter();
    Ok((0..m).map(|j| it.by_ref().take((n * (j + 1)) / m - (n * j) / m).collect()).collect())
}

fn op_of(op: &str) -> PyResult<Operation> {
    match op {
        "sum" => Ok(Operation::Sum),
        "min" => Ok(Operation::Min),
        "max" => Ok(Operation::Max),
        _ => Err(value_err(format!("op must be sum, min or max, not `{op}`"))),
    }
}

fn topology_of(topology: &str, hops: usize, tors: usize) -> PyResult<Topology> {
    match topology {
        "single" => Ok(Topology::Single),
        "chain" => Ok(Topology::Chain(hops.max(1))),
        "two-level" | "two_level" => Ok(Topology::TwoLevel(tors.max(1))),
        _ => Err(value_err(format!("topology must be single, chain or two-level, not `{topology}`"))),
    }
}

/// Run one aggregation job through SwitchAgg switches in memory. Returns a dict: `pairs_in`,
/// `pair_bytes_in`, `pairs_out`, `pair_bytes_out`, `reduction_ratio`, `fpe_evictions`,
/// `bpe_evictions`, `recirculations`, `retransmissions`, `mapper_packets`, `mapper_bytes`,
/// `reducer_packets`, `reducer_bytes`, `faults` (lost, duplicated, reordered), `drops`,
/// `complete`, `reducer_seq_errors`, `seconds` (wall clock of the software model),
/// `flush_cycles` (FPGA cycles to drain the engines, one bucket word per cycle),
/// `engine_cycles` and `engine_seconds_at_clock` (the busiest engine's cycles for the
/// job's pairs at 200 MHz, a lower bound on the FPGA's aggregation time), and the
/// reducers' result as `result_trees` (uint32 per key), `result_keys`, `result_offsets`
/// (uint64), `result_values` (uint32).
#[pyfunction]
#[pyo3(signature = (keys, key_offsets, values, mappers=3, trees=1, op="sum", fpe_bytes=4<<20, bpe_bytes=256<<20, slots=4,
    topology="single", hops=1, tors=2, loss=0.0, duplicate=0.0, reorder=0.0, seed=1))]
#[allow(clippy::too_many_arguments)]
fn switchagg_run<'py>(
    py: Python<'py>,
    keys: &[u8],
    key_offsets: &[u8],
    values: &[u8],
    mappers: usize,
    trees: usize,
    op: &str,
    fpe_bytes: u64,
    bpe_bytes: u64,
    slots: u32,
    topology: &str,
    hops: usize,
    tors: usize,
    loss: f64,
    duplicate: f64,
    reorder: f64,
    seed: u64,
) -> PyResult<Bound<'py, PyDict>> {
    if mappers == 0 || mappers > 200 || trees == 0 || trees > 56 {
        return Err(value_err("mappers must be 1..=200 and trees 1..=56 (hosts 10.0.0.1.. and 10.0.0.200..)"));
    }
    let job = Job { mappers: pairs_of(keys, key_offsets, values, mappers)?, trees, op: op_of(op)? };
    let topo = topology_of(topology, hops, tors)?;
    let cfg = Config {
        fpe_bytes,
        bpe_bytes,
        slots_per_bucket: slots.clamp(1, 8),
        max_trees: trees.max(1) as u32,
        max_children: (mappers + tors + 1) as u32,
    };
    let faults = Faults { seed, loss, duplicate, reorder };
    let (out, secs) = py.detach(|| {
        let t = Instant::now();
        let o = harness::run(&job, topo, cfg, faults);
        (o, t.elapsed().as_secs_f64())
    });
    let flush_words: u64 = {
        let sa = programs::switchagg::SwitchAgg::with_config(cfg);
        sa.memories().map(|m| m.words() as u64).sum()
    };
    let d = PyDict::new(py);
    d.set_item("pairs_in", out.pairs_in)?;
    d.set_item("pair_bytes_in", out.pair_bytes_in)?;
    d.set_item("pairs_out", out.pairs_out)?;
    d.set_item("pair_bytes_out", out.pair_bytes_out)?;
    d.set_item("reduction_ratio", out.reduction_ratio())?;
    d.set_item("fpe_evictions", out.fpe_evictions)?;
    d.set_item("bpe_evictions", out.bpe_evictions)?;
    d.set_item("recirculations", out.recirculations)?;
    d.set_item("retransmissions", out.retransmissions)?;
    d.set_item("mapper_packets", out.mapper_packets)?;
    d.set_item("mapper_bytes", out.mapper_bytes)?;
    d.set_item("reducer_packets", out.reducer_packets)?;
    d.set_item("reducer_bytes", out.reducer_bytes)?;
    let f = PyDict::new(py);
    f.set_item("lost", out.faults[0])?;
    f.set_item("duplicated", out.faults[1])?;
    f.set_item("reordered", out.faults[2])?;
    d.set_item("faults", f)?;
    let dr = PyDict::new(py);
    for (k, v) in &out.drops {
        dr.set_item(k, v)?;
    }
    d.set_item("drops", dr)?;
    d.set_item("complete", out.complete)?;
    d.set_item("reducer_seq_errors", out.reducer_seq_errors)?;
    d.set_item("seconds", secs)?;
    d.set_item("flush_cycles", flush_words)?;
    // The busiest engine's cycles on the FPGA: each FPE starts a pair every FPE_II cycles,
    // the shared BPE an eviction every BPE_II (a lower bound on the aggregation time).
    let mut per_group = [0u64; GROUPS];
    for m in &job.mappers {
        for (k, _) in m {
            if let Some(g) = group_of(k.len()) {
                per_group[g] += 1;
            }
        }
    }
    let fpe_busiest = per_group.iter().max().copied().unwrap_or(0) * cycles::FPE_II;
    let engine_cycles = fpe_busiest.max(if bpe_bytes > 0 { out.fpe_evictions * cycles::BPE_II } else { 0 });
    d.set_item("engine_cycles", engine_cycles)?;
    d.set_item("engine_seconds_at_clock", engine_cycles as f64 / cycles::CLOCK_HZ as f64)?;
    let (mut tk, mut kb, mut ko, mut kv) = (Vec::new(), Vec::new(), vec![0u8; 8], Vec::new());
    for (t, m) in out.result.iter().enumerate() {
        let mut items: Vec<_> = m.iter().collect();
        items.sort();
        for (k, v) in items {
            tk.extend_from_slice(&(t as u32).to_le_bytes());
            kb.extend_from_slice(k);
            ko.extend_from_slice(&(kb.len() as u64).to_le_bytes());
            kv.extend_from_slice(&v.to_le_bytes());
        }
    }
    d.set_item("result_trees", PyBytes::new(py, &tk))?;
    d.set_item("result_keys", PyBytes::new(py, &kb))?;
    d.set_item("result_offsets", PyBytes::new(py, &ko))?;
    d.set_item("result_values", PyBytes::new(py, &kv))?;
    Ok(d)
}

/// Table 2 of SwitchAgg: do the engines keep up with the ports? The job runs once on the
/// software switch (measuring its rate and each group's FPE eviction rate); then the
/// mappers' frames are replayed on the FPGA's clock, `ports` ports at `load` × 10 Gbit/s,
/// through the payload analyzer and FPE FIFOs of `fifo_depth` pairs ([`cycles`]). Returns
/// `written`, `fifo_full`, `full_ratio`, `max_depth`, `offered_gbps`, `processed_gbps` (the
/// FPGA model), `software_job_seconds` (the software model, whole job with its flush),
/// `mapper_bytes_per_pair`, `correct`.
#[pyfunction]
#[pyo3(signature = (keys, key_offsets, values, ports=3, load=1.0, fpe_bytes=4<<20, bpe_bytes=256<<20, fifo_depth=16, seed=1))]
#[allow(clippy::too_many_arguments)]
fn switchagg_line_rate<'py>(
    py: Python<'py>,
    keys: &[u8],
    key_offsets: &[u8],
    values: &[u8],
    ports: usize,
    load: f64,
    fpe_bytes: u64,
    bpe_bytes: u64,
    fifo_depth: usize,
    seed: u64,
) -> PyResult<Bound<'py, PyDict>> {
    if ports == 0 || ports > 3 || !(load > 0.0 && load <= 1.0) {
        return Err(value_err("ports must be 1..=3 (the fourth goes to the reducer) and load in (0, 1]"));
    }
    let job = Job { mappers: pairs_of(keys, key_offsets, values, ports)?, trees: 1, op: Operation::Sum };
    let cfg = Config { fpe_bytes, bpe_bytes, slots_per_bucket: 4, max_trees: 1, max_children: ports as u32 };
    let (out, secs, events, bytes) = py.detach(|| {
        let t = Instant::now();
        let o = harness::run(&job, Topology::Single, cfg, Faults::default());
        let secs = t.elapsed().as_secs_f64();
        // Per-group probability that a pair goes on to the BPE, from the run.
        let mut pairs_g = [0u64; GROUPS];
        for m in &job.mappers {
            for (k, _) in m {
                if let Some(g) = group_of(k.len()) {
                    pairs_g[g] += 1;
                }
            }
        }
        let p_bpe: Vec<f64> = (0..GROUPS)
            .map(|g| if pairs_g[g] == 0 { 0.0 } else { (o.fpe_evictions_by_group[g] as f64 / pairs_g[g] as f64).min(1.0) })
            .collect();
        // Replay: each port sends its mapper's packets back to back at `load`; a pair reaches
        // its FPE when its last byte has streamed through the analyzer and the crossbar.
        let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut events = Vec::new();
        let mut bytes = 0u64;
        let ns_per_byte = 8.0 / (10.0 * load); // at load x 10 Gbit/s
        for m in &job.mappers {
            let mut t_ns = 0.0f64;
            for pkt in harness::packetize(m) {
                let start = (t_ns * cycles::CLOCK_HZ as f64 / 1e9) as u64;
                let mut off = (L2_L4_LEN + HEADER_LEN) as u64;
                for (k, _) in &pkt {
                    off += (PAIR_OVERHEAD + k.len()) as u64;
                    if let Some(g) = group_of(k.len()) {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        let u = (rng >> 11) as f64 / (1u64 << 53) as f64;
                        let cycle = start + cycles::HEADER_ANALYZER + cycles::stream_cycles(off) + cycles::CROSSBAR;
                        events.push(PairEvent { cycle, group: g as u8, to_bpe: bpe_bytes > 0 && u < p_bpe[g] });
                    }
                }
                // Frame plus preamble and inter-frame gap on the wire.
                let wire = off + 4 + 20;
                bytes += off;
                t_ns += wire as f64 * ns_per_byte;
            }
        }
        events.sort_by_key(|e| e.cycle);
        (o, secs, events, bytes)
    });
    let s = cycles::simulate_fifos(&events, fifo_depth.max(1));
    let last = events.last().map(|e| e.cycle).unwrap_or(0).max(1);
    let d = PyDict::new(py);
    d.set_item("written", s.written)?;
    d.set_item("fifo_full", s.full)?;
    d.set_item("full_ratio", if s.written == 0 { 0.0 } else { s.full as f64 / s.written as f64 })?;
    d.set_item("max_depth", s.max_depth)?;
    let secs_fpga = last as f64 / cycles::CLOCK_HZ as f64;
    let done = s.last_cycle.max(1) as f64 / cycles::CLOCK_HZ as f64;
    d.set_item("offered_gbps", bytes as f64 * 8.0 / secs_fpga / 1e9)?;
    d.set_item("processed_gbps", bytes as f64 * 8.0 / done / 1e9)?;
    // The whole job on the software model, flush of every engine word included (the
    // aggregation rate alone is `switchagg_bench`).
    d.set_item("software_job_seconds", secs)?;
    d.set_item("mapper_bytes_per_pair", out.mapper_bytes as f64 / out.pairs_in.max(1) as f64)?;
    d.set_item("correct", out.complete && out.result == harness::reference(&job))?;
    Ok(d)
}

/// Pair updates per second one core gets from the `switchagg` program: the pairs (one
/// tree, `mappers` children, numbered packets of up to 1500 bytes) go through a configured
/// switch in batches of `batch` frames, round after round for `duration` seconds (sequence
/// numbers continue, so every round aggregates); the flush is not timed. After the run the
/// tree is flushed and the switch's aggregate checked against the pairs' sums times the
/// rounds run (`ports::aggregation::bench::SwitchAggWorkload`): ValueError if it differs.
/// Returns `(pairs, seconds, pairs_per_s)` (wall seconds of the timed rounds).
#[pyfunction]
#[pyo3(signature = (keys, key_offsets, values, mappers=3, fpe_bytes=4<<20, bpe_bytes=256<<20, batch=32, duration=1.0))]
#[allow(clippy::too_many_arguments)]
fn switchagg_bench(
    py: Python<'_>,
    keys: &[u8],
    key_offsets: &[u8],
    values: &[u8],
    mappers: usize,
    fpe_bytes: u64,
    bpe_bytes: u64,
    batch: usize,
    duration: f64,
) -> PyResult<(u64, f64, f64)> {
    let m = mappers.clamp(1, 200);
    let shares = pairs_of(keys, key_offsets, values, m)?;
    let cfg = Config { fpe_bytes, bpe_bytes, slots_per_bucket: 4, max_trees: 1, max_children: m as u32 };
    let r = py
        .detach(|| {
            bench::switchagg_measure(bench::SwitchAggWorkload::new(&shares, cfg, batch), Duration::from_secs_f64(duration.max(0.05)))
        })
        .map_err(|e| value_err(format!("the switch's aggregate is wrong: {e}")))?;
    Ok((r.pair_updates, r.seconds, r.pair_updates_per_s))
}

/// `inswitch bench aggregation`'s SwitchAgg measurement (`ports::aggregation::bench::
/// switchagg_pipeline`): pair updates on one core, `vocab` distinct 16-byte keys (as the
/// DAIET measurement), full 1500-byte packets from 3 mappers, default engines (4 MB FPE,
/// 256 MB BPE), 100 ms warm-up. After the timed rounds the tree is flushed and the switch's
/// aggregate checked against the reference (ValueError if it differs). Returns a dict:
/// `pair_updates`, `packets`, `passes`, `seconds` (wall), `pair_updates_per_s` (per wall
/// second), `cpu_seconds`, `pair_updates_per_cpu_s` (per CPU-second of the measuring
/// thread), `pairs_per_packet`, `drops` (violations included; absorbed packets are not
/// drops, they become ACKs), `verified_keys` (keys checked equal to the reference).
#[pyfunction]
#[pyo3(signature = (batch=64, vocab=4096, duration=2.0))]
fn bench_switchagg_pipeline<'py>(py: Python<'py>, batch: usize, vocab: u32, duration: f64) -> PyResult<Bound<'py, PyDict>> {
    let r = py
        .detach(|| {
            bench::switchagg_measure(bench::switchagg_workload(batch.max(1), vocab.max(1)), Duration::from_secs_f64(duration.max(0.05)))
        })
        .map_err(|e| value_err(format!("SwitchAgg bench: the switch's aggregate is wrong: {e}")))?;
    let d = PyDict::new(py);
    d.set_item("pair_updates", r.pair_updates)?;
    d.set_item("packets", r.packets)?;
    d.set_item("passes", r.passes)?;
    d.set_item("seconds", r.seconds)?;
    d.set_item("pair_updates_per_s", r.pair_updates_per_s)?;
    d.set_item("cpu_seconds", r.cpu_seconds)?;
    d.set_item("pair_updates_per_cpu_s", r.pair_updates_per_cpu_s)?;
    d.set_item("pairs_per_packet", r.pair_updates as f64 / r.packets.max(1) as f64)?;
    d.set_item("drops", r.drops)?;
    d.set_item("verified_keys", r.verified_keys)?;
    Ok(d)
}

// ----- task launch: the shim layer (Launch -> Configure -> Ack), sans-IO -------------------
// Times cross as seconds on the caller's clock (e.g. time.monotonic()), kept as ns inside.

fn ns(s: f64) -> u64 {
    (s.max(0.0) * 1e9) as u64
}

fn ipv4(s: &str) -> PyResult<[u8; 4]> {
    s.parse::<std::net::Ipv4Addr>().map(|a| a.octets()).map_err(|_| value_err(format!("not an IPv4 address: {s:?}")))
}

/// The master's shim: the Launch until the controller's Ack type 0.
#[pyclass(module = "inswitch._native")]
struct SwitchAggShim {
    inner: hostlib::switchagg::Shim,
}

#[pymethods]
impl SwitchAggShim {
    #[new]
    fn new(reducers: Vec<String>, mappers: Vec<String>, rto: f64) -> PyResult<Self> {
        if reducers.is_empty() || reducers.len() > u16::MAX as usize || mappers.len() > u16::MAX as usize {
            return Err(value_err("1..65535 reducers, at most 65535 mappers"));
        }
        let r = reducers.iter().map(|a| ipv4(a)).collect::<PyResult<Vec<_>>>()?;
        let m = mappers.iter().map(|a| ipv4(a)).collect::<PyResult<Vec<_>>>()?;
        Ok(SwitchAggShim { inner: hostlib::switchagg::Shim::new(&r, &m, ns(rto).max(1)) })
    }
    fn poll_transmit<'py>(&mut self, py: Python<'py>, now: f64) -> Option<Bound<'py, PyBytes>> {
        self.inner.poll_transmit(ns(now)).map(|b| PyBytes::new(py, &b))
    }
    fn poll_timeout(&self) -> Option<f64> {
        self.inner.poll_timeout().map(|t| t as f64 / 1e9)
    }
    fn handle_timeout(&mut self, now: f64) {
        self.inner.handle_timeout(ns(now))
    }
    fn handle(&mut self, now: f64, data: &[u8]) {
        self.inner.handle(ns(now), data)
    }
    #[getter]
    fn started(&self) -> bool {
        self.inner.started()
    }
    #[getter]
    fn launches_sent(&self) -> u64 {
        self.inner.launches_sent
    }
}

/// The controller's side of one launch. `plan`: per switch, its `(tree, children)`.
#[pyclass(module = "inswitch._native")]
struct SwitchAggController {
    inner: hostlib::switchagg::Controller,
}

#[pymethods]
impl SwitchAggController {
    #[new]
    fn new(plan: Vec<Vec<(u16, u16)>>, rto: f64) -> PyResult<Self> {
        let plan: Vec<_> = plan.into_iter().map(|trees| hostlib::switchagg::SwitchPlan { trees }).collect();
        hostlib::switchagg::Controller::new(&plan, ns(rto).max(1))
            .map(|inner| SwitchAggController { inner })
            .ok_or_else(|| value_err("a plan: at least one switch, the same number (>= 1) of trees on each"))
    }
    /// A packet from the master (`switch` None) or from switch `switch`.
    #[pyo3(signature = (now, data, switch=None))]
    fn handle(&mut self, now: f64, data: &[u8], switch: Option<usize>) {
        let from = switch.map_or(hostlib::switchagg::Peer::Master, hostlib::switchagg::Peer::Switch);
        self.inner.handle(ns(now), from, data)
    }
    /// `(switch or None for the master, bytes)`.
    fn poll_transmit<'py>(&mut self, py: Python<'py>) -> Option<(Option<usize>, Bound<'py, PyBytes>)> {
        self.inner.poll_transmit().map(|(to, b)| {
            let to = match to {
                hostlib::switchagg::Peer::Master => None,
                hostlib::switchagg::Peer::Switch(i) => Some(i),
            };
            (to, PyBytes::new(py, &b))
        })
    }
    fn poll_timeout(&self) -> Option<f64> {
        self.inner.poll_timeout().map(|t| t as f64 / 1e9)
    }
    fn handle_timeout(&mut self, now: f64) {
        self.inner.handle_timeout(ns(now))
    }
    #[getter]
    fn configured(&self) -> bool {
        self.inner.configured()
    }
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.inner.stats;
        let d = PyDict::new(py);
        d.set_item("launches", s.launches)?;
        d.set_item("configures_sent", s.configures_sent)?;
        d.set_item("configure_retransmissions", s.configure_retransmissions)?;
        d.set_item("switch_acks", s.switch_acks)?;
        d.set_item("master_acks_sent", s.master_acks_sent)?;
        d.set_item("ignored", s.ignored)?;
        Ok(d)
    }
}

/// The switch's side of a Configure: `([(tree, children, region, regions)], ack bytes)`, or
/// None if the bytes are not a Configure it can install.
#[pyfunction]
fn switchagg_on_configure<'py>(py: Python<'py>, data: &[u8]) -> Option<(Vec<hostlib::switchagg::shim::TreeEntry>, Bound<'py, PyBytes>)> {
    hostlib::switchagg::switch_on_configure(data).map(|(t, ack)| (t, PyBytes::new(py, &ack)))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<SwitchAggShim>()?;
    m.add_class::<SwitchAggController>()?;
    m.add_function(wrap_pyfunction!(switchagg_on_configure, m)?)?;
    m.add_function(wrap_pyfunction!(switchagg_run, m)?)?;
    m.add_function(wrap_pyfunction!(switchagg_line_rate, m)?)?;
    m.add_function(wrap_pyfunction!(switchagg_bench, m)?)?;
    m.add_function(wrap_pyfunction!(bench_switchagg_pipeline, m)?)?;
    Ok(())
}
