//! Aggregation host side for Python: `agg_map` (a mapper's sender) and `agg_reduce` (a
//! reducer's receiver), each running the Rust loop over a real UDP socket with the GIL
//! released. Pairs cross as bytes and numpy arrays, never one Python object per pair.

use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use hostlib::aggregation::{MapperConfig, Mode, Protocol, ReducerConfig};
use wire::daiet::Op;

fn verr(e: impl ToString) -> PyErr {
    PyValueError::new_err(e.to_string())
}

fn addr(s: &str) -> PyResult<SocketAddr> {
    s.parse().map_err(|_| verr(format!("`{s}` is not an ip:port address")))
}

fn parse_protocol(protocol: &str) -> PyResult<Protocol> {
    Protocol::from_name(protocol).ok_or_else(|| verr(format!("unknown protocol `{protocol}` (known: daiet, switchagg)")))
}

fn parse_common(protocol: &str, op: &str, mode: &str) -> PyResult<(Protocol, Op, Mode)> {
    let p = parse_protocol(protocol)?;
    let o = Op::from_name(op).ok_or_else(|| verr(format!("op must be sum, min or max, not `{op}`")))?;
    let m = Mode::from_name(mode).ok_or_else(|| verr(format!("mode must be switch or udp, not `{mode}`")))?;
    Ok((p, o, m))
}

/// Seeded faults the endpoint injects on its own socket (see `ports::aggregation::SocketFaults`).
fn faults(loss: f64, duplicate: f64, reorder: f64, seed: u64) -> PyResult<ports::aggregation::SocketFaults> {
    for (n, p) in [("loss", loss), ("duplicate", duplicate), ("reorder", reorder)] {
        if !(0.0..1.0).contains(&p) {
            return Err(verr(format!("{n} must be a probability in [0, 1), not {p}")));
        }
    }
    Ok(ports::aggregation::SocketFaults { loss, duplicate, reorder, seed })
}

/// The raw bytes of `arr` as a C-contiguous numpy array of `dtype` (one copy).
fn array_bytes(py: Python<'_>, arr: &Bound<'_, PyAny>, dtype: &str) -> PyResult<Vec<u8>> {
    let np = py.import("numpy")?;
    let a = np.call_method1("ascontiguousarray", (arr, dtype))?;
    let b = a.call_method0("tobytes")?;
    Ok(b.cast::<PyBytes>()?.as_bytes().to_vec())
}

fn le_chunks<const N: usize>(b: &[u8]) -> impl Iterator<Item = [u8; N]> + '_ {
    b.chunks_exact(N).map(|c| c.try_into().unwrap())
}

/// Send a mapper's pairs on their trees and serve them until every reducer says DONE.
/// `loss`, `duplicate`, `reorder` (with `seed`): faults injected on this socket, both
/// directions. Returns stats: packets_sent, bytes_sent, retransmissions, acks, fallback,
/// completed, pairs, elapsed_s, faults_injected, max_held_packets (most packets of a tree built and not yet acknowledged).
/// The longest key `protocol` carries whole; `agg_map` refuses longer ones (never
/// truncates them).
#[pyfunction]
fn agg_max_key_len(protocol: &str) -> PyResult<usize> {
    Ok(parse_protocol(protocol)?.max_key_len())
}

#[pyfunction]
#[pyo3(signature = (protocol, bind, trees, mapper_id, op, tree_of_pair, keys, key_offsets, values, timeout_s, mode="switch", loss=0.0, duplicate=0.0, reorder=0.0, seed=1))]
#[allow(clippy::too_many_arguments)]
fn agg_map<'py>(
    py: Python<'py>,
    protocol: &str,
    bind: &str,
    trees: Vec<(u16, String)>,
    mapper_id: u16,
    op: &str,
    tree_of_pair: &Bound<'py, PyAny>,
    keys: &[u8],
    key_offsets: &Bound<'py, PyAny>,
    values: &Bound<'py, PyAny>,
    timeout_s: f64,
    mode: &str,
    loss: f64,
    duplicate: f64,
    reorder: f64,
    seed: u64,
) -> PyResult<Bound<'py, PyDict>> {
    let MapCall { bind, cfg, tree_ids, dests, timeout, faults } =
        MapCall::new(protocol, bind, &trees, mapper_id, op, timeout_s, mode, (loss, duplicate, reorder, seed))?;
    let tp: Vec<u16> = le_chunks::<2>(&array_bytes(py, tree_of_pair, "uint16")?).map(u16::from_ne_bytes).collect();
    let offs: Vec<u64> = le_chunks::<8>(&array_bytes(py, key_offsets, "uint64")?).map(u64::from_ne_bytes).collect();
    let vals: Vec<u32> = le_chunks::<4>(&array_bytes(py, values, "uint32")?).map(u32::from_ne_bytes).collect();
    let keys = keys.to_vec();
    let run = py
        .detach(|| ports::aggregation::run_mapper(UdpSocket::bind(bind)?, cfg, &dests, &tree_ids, keys, offs, vals, tp, timeout, faults))
        .map_err(verr)?;
    map_stats(py, &run)
}

/// `agg_map` for pairs in spool files, `spool_paths[i]` holding tree `trees[i]`'s frames
/// `<u32 BE key length, key, u32 BE value>` (read as packets are needed: the mapper's
/// memory does not grow with its input). A malformed or truncated spool raises
/// ValueError naming the file. Stats as `agg_map`'s.
#[pyfunction]
#[pyo3(signature = (protocol, bind, trees, mapper_id, op, spool_paths, timeout_s, mode="switch", loss=0.0, duplicate=0.0, reorder=0.0, seed=1))]
#[allow(clippy::too_many_arguments)]
fn agg_map_spool<'py>(
    py: Python<'py>,
    protocol: &str,
    bind: &str,
    trees: Vec<(u16, String)>,
    mapper_id: u16,
    op: &str,
    spool_paths: Vec<std::path::PathBuf>,
    timeout_s: f64,
    mode: &str,
    loss: f64,
    duplicate: f64,
    reorder: f64,
    seed: u64,
) -> PyResult<Bound<'py, PyDict>> {
    let MapCall { bind, cfg, tree_ids, dests, timeout, faults } =
        MapCall::new(protocol, bind, &trees, mapper_id, op, timeout_s, mode, (loss, duplicate, reorder, seed))?;
    if spool_paths.len() != trees.len() {
        return Err(verr(format!("{} trees need {} spool files (got {})", trees.len(), trees.len(), spool_paths.len())));
    }
    let src = ports::aggregation::SpoolSource::open(&spool_paths).map_err(verr)?;
    let run = py
        .detach(|| ports::aggregation::run_mapper_source(UdpSocket::bind(bind)?, cfg, &dests, &tree_ids, src, timeout, faults))
        .map_err(verr)?;
    map_stats(py, &run)
}

/// What `agg_map` and `agg_map_spool` take alike, parsed and checked.
struct MapCall {
    bind: SocketAddr,
    cfg: MapperConfig,
    tree_ids: Vec<u16>,
    dests: Vec<SocketAddr>,
    timeout: Duration,
    faults: ports::aggregation::SocketFaults,
}

impl MapCall {
    #[allow(clippy::too_many_arguments)]
    fn new(
        protocol: &str,
        bind: &str,
        trees: &[(u16, String)],
        mapper_id: u16,
        op: &str,
        timeout_s: f64,
        mode: &str,
        (loss, duplicate, reorder, seed): (f64, f64, f64, u64),
    ) -> PyResult<MapCall> {
        let faults = faults(loss, duplicate, reorder, seed)?;
        let (proto, op, mode) = parse_common(protocol, op, mode)?;
        let mut cfg = MapperConfig::new(mapper_id, op, mode);
        cfg.protocol = proto;
        Ok(MapCall {
            bind: addr(bind)?,
            cfg,
            tree_ids: trees.iter().map(|t| t.0).collect(),
            dests: trees.iter().map(|t| addr(&t.1)).collect::<PyResult<Vec<_>>>()?,
            timeout: Duration::from_secs_f64(timeout_s.max(0.01)),
            faults,
        })
    }
}

/// A mapper run's stats for Python.
fn map_stats<'py>(py: Python<'py>, run: &ports::aggregation::MapRun) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("packets_sent", run.stats.packets_sent)?;
    d.set_item("bytes_sent", run.stats.bytes_sent)?;
    d.set_item("retransmissions", run.stats.retransmissions)?;
    d.set_item("timeouts", run.stats.timeouts)?;
    d.set_item("acks", run.stats.acks)?;
    d.set_item("pairs", run.stats.pairs)?;
    d.set_item("fallback", run.stats.fallback)?;
    d.set_item("completed", run.completed)?;
    d.set_item("elapsed_s", run.elapsed.as_secs_f64())?;
    d.set_item("faults_injected", run.faults_injected)?;
    d.set_item("max_held_packets", run.stats.max_held_packets)?;
    Ok(d)
}

/// `agg_reduce`'s result: keys blob, offsets, values, stats.
type ReduceOut<'py> = (Bound<'py, PyBytes>, Bound<'py, PyAny>, Bound<'py, PyAny>, Bound<'py, PyDict>);

/// Receive one tree: `(keys_blob, key_offsets uint64, values uint64, stats)`. Stats:
/// packets, bytes (UDP payload bytes received), pairs (received), distinct_keys,
/// duplicates, malformed, fallback, fallback_reason, completed, elapsed_s, faults_injected,
/// rcvbuf_bytes, socket_drops, done_resent (DONEs sent again to mappers that had not said
/// BYE). Fault arguments as for `agg_map`.
#[pyfunction]
#[pyo3(signature = (protocol, bind, tree_id, mappers, op, timeout_s, mode="switch", loss=0.0, duplicate=0.0, reorder=0.0, seed=1))]
#[allow(clippy::too_many_arguments)]
fn agg_reduce<'py>(
    py: Python<'py>,
    protocol: &str,
    bind: &str,
    tree_id: u16,
    mappers: Vec<String>,
    op: &str,
    timeout_s: f64,
    mode: &str,
    loss: f64,
    duplicate: f64,
    reorder: f64,
    seed: u64,
) -> PyResult<ReduceOut<'py>> {
    let faults = faults(loss, duplicate, reorder, seed)?;
    let (proto, op, mode) = parse_common(protocol, op, mode)?;
    let bind = addr(bind)?;
    let maps = mappers.iter().map(|m| addr(m)).collect::<PyResult<Vec<_>>>()?;
    let mut cfg = ReducerConfig::new(tree_id, maps.len(), op, mode);
    cfg.protocol = proto;
    let timeout = Duration::from_secs_f64(timeout_s.max(0.01));
    let run = py.detach(|| ports::aggregation::run_reducer(UdpSocket::bind(bind)?, cfg, &maps, timeout, faults)).map_err(verr)?;
    // Keys in sorted order, so outputs are deterministic.
    let sorted: BTreeMap<&Vec<u8>, &u64> = run.result.iter().collect();
    let mut blob = Vec::new();
    let mut offs: Vec<u8> = Vec::with_capacity((sorted.len() + 1) * 8);
    let mut vals: Vec<u8> = Vec::with_capacity(sorted.len() * 8);
    offs.extend_from_slice(&0u64.to_ne_bytes());
    for (k, v) in &sorted {
        blob.extend_from_slice(k);
        offs.extend_from_slice(&(blob.len() as u64).to_ne_bytes());
        vals.extend_from_slice(&v.to_ne_bytes());
    }
    let np = py.import("numpy")?;
    let to_arr = |b: Vec<u8>| -> PyResult<Bound<'py, PyAny>> {
        np.call_method1("frombuffer", (PyBytes::new(py, &b), "uint64"))?.call_method0("copy")
    };
    let d = PyDict::new(py);
    d.set_item("packets", run.stats.packets)?;
    d.set_item("bytes", run.stats.bytes)?;
    d.set_item("pairs", run.stats.pairs)?;
    d.set_item("distinct_keys", sorted.len())?;
    d.set_item("duplicates", run.stats.duplicates)?;
    d.set_item("malformed", run.stats.malformed)?;
    d.set_item("fallback", run.stats.fallback)?;
    d.set_item("fallback_reason", run.stats.fallback_reason.clone())?;
    d.set_item("completed", run.completed)?;
    d.set_item("elapsed_s", run.elapsed.as_secs_f64())?;
    d.set_item("faults_injected", run.faults_injected)?;
    d.set_item("rcvbuf_bytes", run.rcvbuf_bytes)?;
    d.set_item("socket_drops", run.socket_drops)?;
    d.set_item("done_resent", run.stats.done_resent)?;
    Ok((PyBytes::new(py, &blob), to_arr(offs)?, to_arr(vals)?, d))
}

/// Pair updates per second one core pushes through the `daiet` program in memory (data
/// packets of up to ten pairs, every recirculation run): a dict with pair_updates, packets,
/// passes, seconds, pair_updates_per_s (wall), cpu_seconds, pair_updates_per_cpu_s, drops,
/// verified_keys (keys whose aggregate was checked equal to the reference after the run).
#[pyfunction]
#[pyo3(signature = (batch=64, vocab=4096, duration=2.0))]
fn bench_daiet_pipeline<'py>(py: Python<'py>, batch: usize, vocab: u32, duration: f64) -> PyResult<Bound<'py, PyDict>> {
    let r = py.detach(|| ports::aggregation::bench::daiet_pipeline(batch.max(1), vocab.max(1), Duration::from_secs_f64(duration.max(0.1))));
    let d = PyDict::new(py);
    d.set_item("pair_updates", r.pair_updates)?;
    d.set_item("packets", r.packets)?;
    d.set_item("passes", r.passes)?;
    d.set_item("seconds", r.seconds)?;
    d.set_item("pair_updates_per_s", r.pair_updates_per_s)?;
    d.set_item("cpu_seconds", r.cpu_seconds)?;
    d.set_item("pair_updates_per_cpu_s", r.pair_updates_per_cpu_s)?;
    d.set_item("drops", r.drops)?;
    d.set_item("verified_keys", r.verified_keys)?;
    Ok(d)
}

/// `forward`'s 64-byte packet rate per CPU-second on this thread (the aggregation ratio's base).
#[pyfunction]
#[pyo3(signature = (duration=2.0))]
fn bench_forward_cpu_rate(py: Python<'_>, duration: f64) -> f64 {
    py.detach(|| ports::aggregation::bench::forward_cpu_rate(Duration::from_secs_f64(duration.max(0.1))))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(bench_daiet_pipeline, m)?)?;
    m.add_function(wrap_pyfunction!(bench_forward_cpu_rate, m)?)?;
    m.add_function(wrap_pyfunction!(agg_map, m)?)?;
    m.add_function(wrap_pyfunction!(agg_map_spool, m)?)?;
    m.add_function(wrap_pyfunction!(agg_max_key_len, m)?)?;
    m.add_function(wrap_pyfunction!(agg_reduce, m)?)?;
    Ok(())
}
