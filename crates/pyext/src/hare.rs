//! Hare from Python: the e-MAT updater (M-modifier), NOO-Stat, Hare frames, and a
//! synchronous in-process switch for trace-driven runs (the same `pisa::Switch` the
//! threaded data plane drives, stepped by the caller so a replayed trace is deterministic).

use std::sync::Arc;
use std::time::Instant;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use hostlib::hare::frames::{self, Endpoint};
use hostlib::hare::noostat::{self, NooStat as RsNooStat};
use pisa::control::{ControlOp, ControlReply, WriteOp};
use pisa::{FieldMatch, PacketBuf, PipeConfig, ProgramSet, Switch};
use programs::hare::emat::{EmatOp, EmatState};
use programs::hare::HareConfig;
use wire::hare::{Op, Repr};
use wire::{EthernetAddress, Ipv4Address};

fn verr(e: impl std::fmt::Debug) -> PyErr {
    PyValueError::new_err(format!("{e:?}"))
}

type OpTuple = (usize, &'static str, Vec<u8>, Vec<u8>, u16);

fn op_tuple(o: &EmatOp) -> OpTuple {
    let first = if o.mat == 0 { vec![o.prev as u8] } else { o.prev.to_be_bytes().to_vec() };
    (o.mat, if o.write == WriteOp::Insert { "insert" } else { "delete" }, first, o.seg.clone(), o.index)
}

/// The control plane's e-MAT (K1): items with reference counts; every update returns the
/// table operations `(mat, "insert"|"delete", first_field, segment, index)` to write.
#[pyclass(module = "inswitch._native")]
pub struct HareEmat {
    inner: EmatState,
}

#[pymethods]
impl HareEmat {
    #[new]
    #[pyo3(signature = (key_bytes, slots, segment_bytes=None))]
    fn new(key_bytes: usize, slots: u32, segment_bytes: Option<usize>) -> PyResult<Self> {
        if key_bytes == 0 || key_bytes > 255 || slots == 0 || slots > 1 << 16 || segment_bytes == Some(0) {
            return Err(PyValueError::new_err("key_bytes 1..=255, slots 1..=65536, segment_bytes >= 1"));
        }
        let cfg = HareConfig { key_bytes, value_bytes: 4, slots, segment_bytes };
        Ok(HareEmat { inner: EmatState::new(cfg.shape(), slots) })
    }
    #[getter]
    fn segments(&self) -> Vec<usize> {
        self.inner.shape().segments.clone()
    }
    #[getter]
    fn ops_total(&self) -> u64 {
        self.inner.ops_total
    }
    fn __len__(&self) -> usize {
        self.inner.len()
    }
    fn insert(&mut self, key: &[u8], slot: u16) -> PyResult<Vec<OpTuple>> {
        Ok(self.inner.insert(key, slot).map_err(verr)?.iter().map(op_tuple).collect())
    }
    fn replace(&mut self, old: &[u8], new: &[u8]) -> PyResult<(u16, Vec<OpTuple>)> {
        let (s, ops) = self.inner.replace(old, new).map_err(verr)?;
        Ok((s, ops.iter().map(op_tuple).collect()))
    }
    fn remove(&mut self, key: &[u8]) -> PyResult<(u16, Vec<OpTuple>)> {
        let (s, ops) = self.inner.remove(key).map_err(verr)?;
        Ok((s, ops.iter().map(op_tuple).collect()))
    }
    fn lookup(&self, key: &[u8]) -> Option<u16> {
        self.inner.lookup(key)
    }
    fn slot_of(&self, key: &[u8]) -> Option<u16> {
        self.inner.slot_of(key)
    }
    fn free_slot(&self) -> Option<u16> {
        self.inner.free_slot()
    }
    fn entries(&self, mat: usize) -> usize {
        self.inner.entries(mat)
    }
}

/// NOO-Stat of one App thread: counters and a K-sized min-heap.
#[pyclass(module = "inswitch._native")]
pub struct NooStat {
    inner: RsNooStat,
}

#[pymethods]
impl NooStat {
    #[new]
    fn new(k: usize) -> Self {
        NooStat { inner: RsNooStat::new(k) }
    }
    fn record(&mut self, key: &[u8]) {
        self.inner.record(key)
    }
    fn record_many(&mut self, keys: Vec<Vec<u8>>) {
        for k in keys {
            self.inner.record(&k);
        }
    }
    fn count(&self, key: &[u8]) -> u32 {
        self.inner.count(key)
    }
    fn top<'py>(&self, py: Python<'py>) -> Vec<(Bound<'py, PyBytes>, u32)> {
        self.inner.top().into_iter().map(|(k, c)| (PyBytes::new(py, &k), c)).collect()
    }
    fn forget(&mut self, key: &[u8]) {
        self.inner.forget(key)
    }
    fn clear(&mut self) {
        self.inner.clear()
    }
    fn age(&mut self) {
        self.inner.age()
    }
    #[getter]
    fn heap_updates(&self) -> u64 {
        self.inner.heap_updates
    }
}

/// The integrator: overall top `k` of several App threads' heaps.
#[pyfunction]
fn noostat_integrate<'py>(py: Python<'py>, tops: Vec<Vec<(Vec<u8>, u32)>>, k: usize) -> Vec<(Bound<'py, PyBytes>, u32)> {
    noostat::integrate(&tops, k).into_iter().map(|(o, c)| (PyBytes::new(py, &o), c)).collect()
}

/// Backend-server throughput (queries/s) of a query loop with and without NOO-Stat: for
/// each key index in `stream`, look its value up in a store of `n_keys` keys and, with
/// NOO-Stat, record it in a K-sized heap (the cost Hare §IV-C attributes to K). Returns
/// `(qps_with_noostat, qps_without, heap_updates)`.
#[pyfunction]
fn noostat_server_bench(py: Python<'_>, k: usize, n_keys: u32, stream: Vec<u32>, key_bytes: usize) -> (f64, f64, u64) {
    py.detach(|| {
        let keys: Vec<Vec<u8>> = (0..n_keys)
            .map(|i| {
                let mut v = format!("key{i:012}").into_bytes();
                v.resize(key_bytes.max(1), b'.');
                v
            })
            .collect();
        let store: std::collections::HashMap<Vec<u8>, u64> = keys.iter().enumerate().map(|(i, k)| (k.clone(), i as u64)).collect();
        let run = |with: bool| {
            let mut s = RsNooStat::new(k);
            let mut acc = 0u64;
            let t = Instant::now();
            for &i in &stream {
                let key = &keys[(i % n_keys) as usize];
                acc = acc.wrapping_add(store[key]);
                if with {
                    s.record(key);
                }
            }
            let dt = t.elapsed().as_secs_f64().max(1e-9);
            std::hint::black_box(acc);
            (stream.len() as f64 / dt, s.heap_updates)
        };
        let (without, _) = run(false);
        let (with, updates) = run(true);
        (with, without, updates)
    })
}

fn endpoint(mac: &[u8], ip: &[u8], port: u16) -> PyResult<Endpoint> {
    let mac: [u8; 6] = mac.try_into().map_err(|_| PyValueError::new_err("mac is 6 bytes"))?;
    let ip: [u8; 4] = ip.try_into().map_err(|_| PyValueError::new_err("ip is 4 bytes"))?;
    Ok(Endpoint { mac: EthernetAddress(mac), ip: Ipv4Address::from_bytes(&ip).expect("4 bytes"), port })
}

/// A frame carrying one Hare message. `src`/`dst` are `(mac: bytes6, ip: bytes4, udp_port)`.
#[pyfunction]
#[pyo3(signature = (src, dst, op, key, key_field, value=Vec::new(), seq=0, hit_index=0, aux=0, status=0, flags=0))]
#[allow(clippy::too_many_arguments)]
fn hare_frame<'py>(
    py: Python<'py>,
    src: (Vec<u8>, Vec<u8>, u16),
    dst: (Vec<u8>, Vec<u8>, u16),
    op: u8,
    key: Vec<u8>,
    key_field: u8,
    value: Vec<u8>,
    seq: u32,
    hit_index: u16,
    aux: u16,
    status: u8,
    flags: u8,
) -> PyResult<Bound<'py, PyBytes>> {
    let op = Op::from_u8(op).ok_or_else(|| PyValueError::new_err("unknown op"))?;
    let m = Repr { op, flags, seq, hit_index, aux, status, key, key_field, value };
    let f = frames::frame(&endpoint(&src.0, &src.1, src.2)?, &endpoint(&dst.0, &dst.1, dst.2)?, &m).map_err(verr)?;
    Ok(PyBytes::new(py, &f))
}

/// Parse a frame: `(op, flags, seq, hit_index, aux, status, key, value, src_ip, src_port)`
/// or `None` when it is not a well-formed Hare frame.
#[pyfunction]
#[allow(clippy::type_complexity)]
fn hare_parse<'py>(
    py: Python<'py>,
    frame: &[u8],
) -> Option<(u8, u8, u32, u16, u16, u8, Bound<'py, PyBytes>, Bound<'py, PyBytes>, [u8; 4], u16)> {
    let (m, ip, port) = frames::parse(frame).ok()?;
    Some((m.op as u8, m.flags, m.seq, m.hit_index, m.aux, m.status, PyBytes::new(py, &m.key), PyBytes::new(py, &m.value), ip.0, port))
}

/// A switch stepped by the caller: frames in on a port, frames out per port, control
/// operations addressed by name. For trace-driven runs and tests.
#[pyclass(module = "inswitch._native")]
pub struct SimSwitch {
    // A mutex only so the object may be dropped on any thread; calls hold `&mut self`.
    sw: std::sync::Mutex<Switch>,
    set: Arc<ProgramSet>,
    now: u64,
}

impl SimSwitch {
    fn find(&self, kind: &str, prog: &str, name: &str) -> PyResult<u32> {
        for i in 0..self.set.len() {
            let d = self.set.decl(i);
            if d.name != prog {
                continue;
            }
            let ids = self.set.ids(i);
            let pos = match kind {
                "table" => d.tables.iter().position(|t| t.name == name).map(|p| ids.tables[p]),
                "action" => d.actions.iter().position(|t| t.name == name).map(|p| ids.actions[p]),
                "register" => d.registers.iter().position(|t| t.name == name).map(|p| ids.registers[p]),
                _ => None,
            };
            return pos.ok_or_else(|| PyValueError::new_err(format!("no {kind} `{name}` in `{prog}`")));
        }
        Err(PyValueError::new_err(format!("no program `{prog}`")))
    }
    fn ctl(&mut self, op: ControlOp) -> PyResult<ControlReply> {
        self.sw.get_mut().expect("switch lock").control(&op).map_err(|e| PyValueError::new_err(e.to_string()))
    }
}

#[pymethods]
impl SimSwitch {
    #[new]
    #[pyo3(signature = (programs, ports=4))]
    fn new(programs: Vec<String>, ports: u16) -> PyResult<Self> {
        let progs = programs::instantiate(&programs).map_err(PyValueError::new_err)?;
        let set = Arc::new(ProgramSet::new(progs).map_err(|e| PyValueError::new_err(format!("{e:?}")))?);
        let cfg = PipeConfig { queue_capacity: 1 << 16, ..PipeConfig::default() };
        Ok(SimSwitch { sw: std::sync::Mutex::new(Switch::new(set.clone(), ports, 1, cfg)), set, now: 1 })
    }
    /// Send frames into `port`; returns every frame the switch sent out, as `(port, bytes)`.
    fn process<'py>(&mut self, py: Python<'py>, port: u16, frames: Vec<Vec<u8>>) -> Vec<(u16, Bound<'py, PyBytes>)> {
        self.now += 1000;
        let mut v: Vec<PacketBuf> = frames.iter().map(|f| PacketBuf::from_slice(f, port)).collect();
        self.sw.get_mut().expect("switch lock").process(&mut v, self.now);
        // Recirculated packets (the lock manager's grants) take further passes.
        for _ in 0..4 {
            self.now += 10;
            self.sw.get_mut().expect("switch lock").tick(self.now);
        }
        self.sw.get_mut().expect("switch lock").drain_all().into_iter().map(|(p, b)| (p, PyBytes::new(py, &b))).collect()
    }
    /// A control packet from the CPU port; returns the packet-ins it caused.
    fn packet_out<'py>(&mut self, py: Python<'py>, frame: Vec<u8>) -> PyResult<Vec<Bound<'py, PyBytes>>> {
        self.now += 1000;
        self.sw.get_mut().expect("switch lock").packet_out(&frame, None, self.now).map_err(|e| PyValueError::new_err(e.to_string()))?;
        // Recirculated packets (an OO-Stat aging fetch's second pass) take further passes.
        for _ in 0..4 {
            self.now += 10;
            self.sw.get_mut().expect("switch lock").tick(self.now);
        }
        Ok(self.take_packet_ins(py))
    }
    /// Packet-ins waiting (clones to the CPU, control replies).
    fn take_packet_ins<'py>(&mut self, py: Python<'py>) -> Vec<Bound<'py, PyBytes>> {
        self.sw.get_mut().expect("switch lock").take_packet_ins().into_iter().map(|p| PyBytes::new(py, p.pkt.data())).collect()
    }
    /// Insert or delete an exact-match entry: `matches` are the field values in key order.
    #[pyo3(signature = (prog, table, op, matches, action, params=Vec::new()))]
    fn table_write(
        &mut self,
        prog: &str,
        table: &str,
        op: &str,
        matches: Vec<Vec<u8>>,
        action: &str,
        params: Vec<Vec<u8>>,
    ) -> PyResult<()> {
        let op = match op {
            "insert" => WriteOp::Insert,
            "delete" => WriteOp::Delete,
            "modify" => WriteOp::Modify,
            _ => return Err(PyValueError::new_err("op: insert, delete or modify")),
        };
        let table_id = self.find("table", prog, table)?;
        let action_id = if op == WriteOp::Delete { 0 } else { self.find("action", prog, action)? };
        let matches = matches.into_iter().enumerate().map(|(field, value)| FieldMatch::Exact { field, value }).collect();
        let params = params.into_iter().enumerate().map(|(i, p)| (i as u32 + 1, p)).collect();
        self.ctl(ControlOp::TableWrite { table_id, op, matches, priority: 0, action_id, params }).map(|_| ())
    }
    /// Write one register cell, or every cell with `index=None`.
    #[pyo3(signature = (prog, register, index, value))]
    fn register_write(&mut self, prog: &str, register: &str, index: Option<u32>, value: u64) -> PyResult<()> {
        let register_id = self.find("register", prog, register)?;
        self.ctl(ControlOp::RegisterWrite { register_id, index, value }).map(|_| ())
    }
    /// Read one register cell.
    fn register_read(&mut self, prog: &str, register: &str, index: u32) -> PyResult<u64> {
        let register_id = self.find("register", prog, register)?;
        match self.ctl(ControlOp::RegisterRead { register_id, index: Some(index) })? {
            ControlReply::RegisterCells(v) => Ok(v.first().map(|c| c.1).unwrap_or(0)),
            _ => Ok(0),
        }
    }
    /// A clone session to the CPU port (NetCache's hot-key reports).
    fn clone_to_cpu(&mut self, session: u16) -> PyResult<()> {
        self.ctl(ControlOp::CloneSessionWrite {
            op: WriteOp::Insert,
            session,
            session_cfg: pisa::CloneSession { replicas: vec![pisa::Replica { port: pisa::PORT_CPU, rid: 0 }], truncate_len: 0 },
        })
        .map(|_| ())
    }
    /// A clone session to the recirculation port (the lock manager's grants to waiters).
    fn clone_to_recirc(&mut self, session: u16) -> PyResult<()> {
        self.ctl(ControlOp::CloneSessionWrite {
            op: WriteOp::Insert,
            session,
            session_cfg: pisa::CloneSession { replicas: vec![pisa::Replica { port: pisa::PORT_RECIRC, rid: 0 }], truncate_len: 0 },
        })
        .map(|_| ())
    }
    /// Drops by reason name, counted in the pass of the program that decided them
    /// (program reasons are numbered per program, so they are named per program).
    fn drops(&self) -> std::collections::BTreeMap<String, u64> {
        let c = self.sw.lock().expect("switch lock").counters();
        let mut out = std::collections::BTreeMap::new();
        for (p, pc) in c.programs.iter().enumerate() {
            for (code, n) in pc.drops.iter().enumerate() {
                if *n == 0 {
                    continue;
                }
                let name = pisa::DropCode(code as u8).builtin_name().map(str::to_string).or_else(|| {
                    let i = code.checked_sub(pisa::DropCode::FIRST_PROGRAM as usize)?;
                    self.set.decl(p).drop_reasons.get(i).cloned()
                });
                *out.entry(name.unwrap_or_else(|| format!("code_{code}"))).or_insert(0) += *n;
            }
        }
        out
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<HareEmat>()?;
    m.add_class::<NooStat>()?;
    m.add_class::<SimSwitch>()?;
    m.add_function(wrap_pyfunction!(noostat_integrate, m)?)?;
    m.add_function(wrap_pyfunction!(noostat_server_bench, m)?)?;
    m.add_function(wrap_pyfunction!(hare_frame, m)?)?;
    m.add_function(wrap_pyfunction!(hare_parse, m)?)?;
    Ok(())
}
