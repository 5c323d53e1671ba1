//! The native fast path of the Hare client for load generation: a windowed UDP GET/PUT
//! loop (`hostlib::hare::loadgen` driven by `ports::hareload`) run with the GIL released,
//! its samples handed back as numpy arrays.

use std::net::SocketAddr;
use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use hostlib::hare::loadgen::{KvLoad, KvOp, LoadConfig};
use hostlib::hare::ycsb::LatestStream;

fn verr(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(e.to_string())
}

fn array<'py>(py: Python<'py>, bytes: Vec<u8>, dtype: &str) -> PyResult<Bound<'py, PyAny>> {
    py.import("numpy")?.call_method1("frombuffer", (PyBytes::new(py, &bytes), dtype))
}

/// Run a closed-loop load of Hare GETs (op 0) and PUTs (op 1): `ops[i]` on key
/// `op_keys[i]` (uint32 little-endian bytes), repeated in order for `duration` seconds
/// from `start_ns` (monotonic), then up to `drain` seconds for what is in flight.
/// `keys[j]` lives on `servers[server_of[j]]` ("ip:port") and holds `initial[j]` (None:
/// absent); every GET reply's value is checked against what the key holds.
///
/// Returns a dict: `send_ns`, `recv_ns` (uint64), `op`, `hit`, `status`, `check` (uint8;
/// check 1 right, 0 wrong, 2 not checked), `key` (uint32), one row per completed
/// operation; `stats` (counters: issued, sent, retransmits, completed, gets, puts, hits,
/// retries, timeouts, errors, malformed, late, mismatches, unchecked, unfinished,
/// send_failures); `start_ns`, `stop_ns`, `end_ns`; `expected`, per key (known, value).
///
/// `sole_writer`: this is the only client writing the keys, so each GET's value is checked
/// (off: only a malformed cell is a mismatch, nothing is `expected`). `history`: also
/// `cells` (uint8, one row of `value_size` bytes per completed operation: a GET's value, a
/// PUT's written value, as a cell) and `present` (uint8: 1 a value, 0 absent, 2 none: a
/// failed operation or a malformed cell), and the PUTs never acknowledged: `unacked_key`
/// (uint32), `unacked_send_ns` (uint64), `unacked_cells` (rows as `cells`). `shifts`:
/// (monotonic ns, uint32 little-endian remap of every key index) in time order: from then
/// on the stream's key k is issued as remap[k]. `reserve`: samples to make room for before
/// the run. `latest`: (read fraction, seed): YCSB-D in place of `ops` (which must then
/// be empty): reads from YCSB's "latest" distribution, the rest inserts of new keys
/// (record `len(keys)` on, named and placed as YCSB and the clients do; key index =
/// record index), so `expected` grows past `keys`.
#[pyfunction]
#[pyo3(signature = (servers, keys, server_of, initial, ops, op_keys, *, window=64, key_field=64, value_size=64, field_size=32,
                    timeout=0.3, retries=10, client=1, duration=3.0, drain=1.0, start_ns=0, bind="0.0.0.0:7371", seq_start=None,
                    sole_writer=true, history=true, shifts=Vec::new(), reserve=0, latest=None))]
#[allow(clippy::too_many_arguments)]
fn hare_load<'py>(
    py: Python<'py>,
    servers: Vec<String>,
    keys: Vec<Vec<u8>>,
    server_of: Vec<u16>,
    initial: Vec<Option<Vec<u8>>>,
    ops: &[u8],
    op_keys: &[u8],
    window: usize,
    key_field: u8,
    value_size: usize,
    field_size: usize,
    timeout: f64,
    retries: u32,
    client: u32,
    duration: f64,
    drain: f64,
    start_ns: u64,
    bind: &str,
    seq_start: Option<u32>,
    sole_writer: bool,
    history: bool,
    shifts: Vec<(u64, Vec<u8>)>,
    reserve: usize,
    latest: Option<(f64, u64)>,
) -> PyResult<Bound<'py, PyDict>> {
    let dests: Vec<SocketAddr> =
        servers.iter().map(|s| s.parse().map_err(|_| verr(format!("bad server address {s:?} (want ip:port)")))).collect::<PyResult<_>>()?;
    if server_of.iter().any(|&s| s as usize >= dests.len()) {
        return Err(verr("server_of names a server not in servers"));
    }
    if op_keys.len() != 4 * ops.len() {
        return Err(verr("op_keys must hold one uint32 per op"));
    }
    if !(timeout > 0.0 && duration >= 0.0 && drain >= 0.0) {
        return Err(verr("timeout must be positive, duration and drain not negative"));
    }
    if latest.is_some() && !ops.is_empty() {
        return Err(verr("latest replaces the stream: ops must be empty"));
    }
    if latest.is_some_and(|(r, _)| !(0.0..=1.0).contains(&r)) {
        return Err(verr("latest's read fraction must be in [0, 1]"));
    }
    let mut stream = ops
        .iter()
        .zip(op_keys.chunks_exact(4))
        .map(|(&o, k)| {
            let op = match o {
                0 => KvOp::Get,
                1 => KvOp::Put,
                _ => return Err(verr(format!("op {o} (0 get, 1 put)"))),
            };
            Ok((op, u32::from_le_bytes(k.try_into().unwrap())))
        })
        .collect::<PyResult<Vec<_>>>()?;
    if latest.is_some() {
        stream.push((KvOp::Get, 0)); // never issued: the generator takes its place
    }
    let seq_start = seq_start.unwrap_or_else(|| (ports::monotonic_ns() as u32) ^ std::process::id().rotate_left(16));
    let cfg = LoadConfig {
        window,
        key_field,
        value_size,
        field_size,
        timeout_ns: (timeout * 1e9) as u64,
        retries,
        client,
        seq_start,
        sole_writer,
        history,
    };
    let records = keys.len() as u64;
    let mut load = KvLoad::new(cfg, keys, server_of, initial, stream).map_err(verr)?;
    if let Some((reads, seed)) = latest {
        load.set_latest(LatestStream::new(records, reads, seed), dests.len() as u16).map_err(verr)?;
    }
    let shifts = shifts
        .into_iter()
        .map(|(at, m)| {
            if m.len() % 4 != 0 {
                return Err(verr("a shift's remap must hold one uint32 per key"));
            }
            Ok((at, m.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect()))
        })
        .collect::<PyResult<Vec<_>>>()?;
    load.set_shifts(shifts).map_err(verr)?;
    load.reserve(reserve);
    let bind: SocketAddr = bind.parse().map_err(|_| verr(format!("bad bind address {bind:?}")))?;
    let run = py
        .detach(|| {
            let sock = ports::hareload::bind(bind)?;
            ports::hareload::run_kv_load(
                &sock,
                &dests,
                &mut load,
                start_ns,
                Duration::from_secs_f64(duration),
                Duration::from_secs_f64(drain),
            )
        })
        .map_err(|e| verr(format!("load generator: {e}")))?;
    let s = &load.samples;
    let d = PyDict::new(py);
    d.set_item("send_ns", array(py, s.iter().flat_map(|x| x.send_ns.to_le_bytes()).collect(), "<u8")?)?;
    d.set_item("recv_ns", array(py, s.iter().flat_map(|x| x.recv_ns.to_le_bytes()).collect(), "<u8")?)?;
    d.set_item("key", array(py, s.iter().flat_map(|x| x.key.to_le_bytes()).collect(), "<u4")?)?;
    d.set_item("op", array(py, s.iter().map(|x| x.op).collect(), "u1")?)?;
    d.set_item("hit", array(py, s.iter().map(|x| x.hit as u8).collect(), "u1")?)?;
    d.set_item("status", array(py, s.iter().map(|x| x.status).collect(), "u1")?)?;
    d.set_item("check", array(py, s.iter().map(|x| x.check as u8).collect(), "u1")?)?;
    if history {
        let h = std::mem::take(&mut load.history);
        let rows = |a: Bound<'py, PyAny>| a.call_method1("reshape", ((-1i64, value_size),));
        d.set_item("cells", rows(array(py, h.cells, "u1")?)?)?;
        d.set_item("present", array(py, h.present, "u1")?)?;
        d.set_item("unacked_key", array(py, h.unacked_key.iter().flat_map(|k| k.to_le_bytes()).collect(), "<u4")?)?;
        d.set_item("unacked_send_ns", array(py, h.unacked_send_ns.iter().flat_map(|k| k.to_le_bytes()).collect(), "<u8")?)?;
        d.set_item("unacked_cells", rows(array(py, h.unacked_cells, "u1")?)?)?;
    }
    let st = &load.stats;
    let stats = PyDict::new(py);
    for (k, v) in [
        ("issued", st.issued),
        ("sent", st.sent),
        ("retransmits", st.retransmits),
        ("completed", st.completed),
        ("gets", st.gets),
        ("puts", st.puts),
        ("hits", st.hits),
        ("retries", st.retries),
        ("timeouts", st.timeouts),
        ("gave_up_after_retries", st.gave_up_after_retries),
        ("errors", st.errors),
        ("malformed", st.malformed),
        ("late", st.late),
        ("mismatches", st.mismatches),
        ("unchecked", st.unchecked),
        ("inserts", st.inserts),
        ("unfinished", run.unfinished),
        ("send_failures", run.send_failures),
    ] {
        stats.set_item(k, v)?;
    }
    d.set_item("stats", stats)?;
    d.set_item("start_ns", run.start_ns)?;
    d.set_item("stop_ns", run.stop_ns)?;
    d.set_item("end_ns", run.end_ns)?;
    let expected: Vec<(bool, Option<Bound<'py, PyBytes>>)> =
        load.expected().into_iter().map(|e| (e.is_some(), e.flatten().map(|v| PyBytes::new(py, v)))).collect();
    d.set_item("expected", expected)?;
    Ok(d)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(hare_load, m)?)?;
    Ok(())
}
