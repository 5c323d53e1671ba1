//! `inswitch._native`: the data plane, programs and targets as seen from Python.
//!
//! Python gets coarse operations: start a data plane over ports, control-plane writes and
//! reads addressed by P4Runtime ids, batches of frames for in-memory ports, JSON for
//! declarations, counters and reports. Nothing here runs per packet in Python; calls that
//! wait release the GIL.

mod aggregation;
mod allreduce;
mod hare;
mod hareload;
mod inaas;
mod netsha;
mod p4rt_wire;
mod pcap;

use std::sync::Arc;
use std::time::Duration;

mod switchagg;

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

use pisa::control::{CloneSession, ControlError, ControlOp, ControlReply, Replica, WriteOp};
use pisa::table::{canonical_bytes, FieldMatch};
use pisa::{IndirectRef, ProgramSet, ResourceReport, Target};
use ports::dataplane::{Dataplane as RsDataplane, DataplaneOptions};
use ports::spec::{open_ports, OpenOptions, PortSpec};
use ports::{MemoryPeer, MAX_RING_FRAMES, MIN_RING_FRAMES};

create_exception!(_native, ControlPlaneError, PyException, "A control-plane operation failed; args are (grpc_code, message).");

fn control_err(e: ControlError) -> PyErr {
    ControlPlaneError::new_err((e.grpc_code(), e.to_string()))
}

fn value_err(e: impl ToString) -> PyErr {
    PyValueError::new_err(e.to_string())
}

fn program_set(names: &[String], target_name: Option<&str>) -> PyResult<Arc<ProgramSet>> {
    if names.is_empty() {
        return Err(value_err("no programs given"));
    }
    // Built for the target, as a switch with that target loads it: a program whose size
    // follows from it (inaas) then has the arrays that switch has.
    let progs = match target_name {
        Some(t) => programs::instantiate_for(names, &target(t)?),
        None => programs::instantiate(names),
    }
    .map_err(value_err)?;
    Ok(Arc::new(ProgramSet::new(progs).map_err(value_err)?))
}

/// Check a packet-trace match expression; raises ValueError saying what is wrong.
#[pyfunction]
fn trace_filter_check(expr: &str) -> PyResult<String> {
    pisa::TraceFilter::parse(expr).map(|f| f.text().to_string()).map_err(value_err)
}

fn target(name: &str) -> PyResult<Target> {
    Target::by_name(name).ok_or_else(|| value_err(format!("unknown target `{name}` (known: {})", Target::NAMES.join(", "))))
}

/// A program set for a switch to run: checked against `target` (default `unbounded`, the
/// model's own limits) when it loads, so a set that does not fit is refused naming the
/// objects, before any packet.
fn loaded_set(names: &[String], target_name: Option<&str>) -> PyResult<Arc<ProgramSet>> {
    if names.is_empty() {
        return Err(value_err("no programs given"));
    }
    let t = target(target_name.unwrap_or("unbounded"))?;
    let progs = programs::instantiate_for(names, &t).map_err(value_err)?;
    Ok(Arc::new(ProgramSet::load_on(progs, &t).map_err(value_err)?))
}

/// Names of the data-plane programs this build has.
#[pyfunction]
fn program_names() -> Vec<&'static str> {
    programs::names().collect()
}

/// Names of the resource-report targets.
#[pyfunction]
fn target_names() -> Vec<&'static str> {
    Target::NAMES.to_vec()
}

/// Declarations and P4Runtime ids of a program set, as JSON; with `target`, the set as a
/// switch with that target builds it (default: the model's own limits, `unbounded`).
#[pyfunction]
#[pyo3(signature = (programs, target=None))]
fn program_set_json(programs: Vec<String>, target: Option<String>) -> PyResult<String> {
    Ok(program_set(&programs, target.as_deref())?.to_json().to_string())
}

/// The resource report of a program set against a target, as JSON.
#[pyfunction]
fn resources_json(programs: Vec<String>, target: &str) -> PyResult<String> {
    let t = self::target(target)?;
    if programs.is_empty() {
        return Err(value_err("no programs given"));
    }
    // Built for the target: a program whose size follows from it (inaas) is reported as
    // the switch would load it there.
    let progs = programs::instantiate_for(&programs, &t).map_err(value_err)?;
    let set = ProgramSet::new(progs).map_err(value_err)?;
    let decls: Vec<_> = (0..set.len()).map(|i| set.decl(i)).collect();
    serde_json::to_string(&ResourceReport::new(&decls, &t)).map_err(value_err)
}

fn write_op(op: &str) -> PyResult<WriteOp> {
    match op {
        "insert" => Ok(WriteOp::Insert),
        "modify" => Ok(WriteOp::Modify),
        "delete" => Ok(WriteOp::Delete),
        _ => Err(value_err(format!("write op must be insert, modify or delete, not `{op}`"))),
    }
}

/// Parse Python match tuples: ("exact", field_id, value) | ("ternary", fid, value, mask) |
/// ("lpm", fid, value, prefix_len) | ("optional", fid, value); field ids are 1-based.
fn parse_matches(matches: &Bound<'_, PyList>) -> PyResult<Vec<FieldMatch>> {
    let mut out = Vec::new();
    for m in matches.iter() {
        let t = m.cast::<PyTuple>().map_err(|_| value_err("a match is a tuple"))?;
        let kind: String = t.get_item(0)?.extract()?;
        let fid: usize = t.get_item(1)?.extract()?;
        let field = fid.checked_sub(1).ok_or_else(|| value_err("match field ids start at 1"))?;
        let value: Vec<u8> = t.get_item(2)?.extract()?;
        out.push(match kind.as_str() {
            "exact" => FieldMatch::Exact { field, value },
            "optional" => FieldMatch::Optional { field, value },
            "ternary" => FieldMatch::Ternary { field, value, mask: t.get_item(3)?.extract()? },
            "lpm" => FieldMatch::Lpm { field, value, prefix_len: t.get_item(3)?.extract()? },
            k => return Err(value_err(format!("unknown match kind `{k}`"))),
        });
    }
    Ok(out)
}

fn match_tuple<'py>(py: Python<'py>, m: &FieldMatch) -> PyResult<Bound<'py, PyTuple>> {
    let b = |v: &[u8]| PyBytes::new(py, &canonical_bytes(v));
    match m {
        FieldMatch::Exact { field, value } => ("exact", field + 1, b(value)).into_pyobject(py),
        FieldMatch::Optional { field, value } => ("optional", field + 1, b(value)).into_pyobject(py),
        FieldMatch::Ternary { field, value, mask } => ("ternary", field + 1, b(value), b(mask)).into_pyobject(py),
        FieldMatch::Lpm { field, value, prefix_len } => ("lpm", field + 1, b(value), *prefix_len).into_pyobject(py),
    }
}

/// A running software switch data plane: one thread per pipe over real or in-memory ports.
#[pyclass(module = "inswitch._native")]
struct Dataplane {
    inner: RsDataplane,
    peers: Vec<MemoryPeer>,
    /// Per port, its receive ring `(slots, bytes mapped)` as opened (AF_PACKET ports only).
    rx_rings: Vec<Option<(usize, usize)>>,
    stopped: std::sync::atomic::AtomicBool,
}

impl Dataplane {
    fn dp(&self) -> PyResult<&RsDataplane> {
        if self.stopped.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(value_err("the data plane is stopped"));
        }
        Ok(&self.inner)
    }
    fn control(&self, py: Python<'_>, op: ControlOp) -> PyResult<ControlReply> {
        let dp = self.dp()?;
        py.detach(|| dp.control(op)).map_err(control_err)
    }
    fn peer(&self, port: u16) -> PyResult<&MemoryPeer> {
        self.peers.iter().find(|p| p.port_id() == port).ok_or_else(|| value_err(format!("port {port} is not an in-memory port")))
    }
}

/// An entry of a table with an action profile: (matches, priority, "member" | "group", id).
type IndirectEntry<'py> = (Vec<Bound<'py, PyTuple>>, i32, &'static str, u32);

/// A multicast group as Python sees it: `(group, [(port, rid)])`.
type GroupTuple = (u16, Vec<(u16, u16)>);

fn replicas(v: Vec<(u16, u16)>) -> Vec<Replica> {
    v.into_iter().map(|(port, rid)| Replica { port, rid }).collect()
}

#[pymethods]
impl Dataplane {
    /// Start a data plane running `programs` over the ports of `ports` (e.g. "memory:4",
    /// "udp:40000:4", "veth:s1,s2").
    #[new]
    /// `fault=(loss, duplicate, reorder, seed)` wraps every port in a seeded fault injector
    /// (ports::fault) acting on received frames.
    /// `hold_replay=True` keeps file ports (`pcap:IN:OUT,...`) from replaying until
    /// `start_replay()`, so entries can be installed first.
    /// `pcap_max_bytes` rotates each port's capture file when it reaches that size.
    /// `port_qdisc=True` sends AF_PACKET frames through each interface's qdisc (so `tc netem`
    /// shaping a link applies to what the switch sends) instead of straight to the driver.
    /// `xdp_busy_poll=True` makes `xdp:` ports ask the kernel to busy-poll their sockets.
    /// `target` (default `unbounded`): the set is refused at load, naming the objects, if it
    /// does not fit that target's limits.
    /// `cores`: the CPU of each pipe's thread (one per pipe, distinct; default not pinned).
    /// `rx_ring_frames`: slots of each AF_PACKET port's receive ring (default 4096; rounded
    /// up to whole ring blocks; see `port_rx_rings`).
    #[pyo3(signature = (programs, ports, pipes=1, pcap_dir=None, queue_capacity=4096, port_rate_bps=None, buf_capacity=2048, batch=64, fault=None, pcap_max_bytes=None, port_qdisc=false, hold_replay=false, target=None, xdp_busy_poll=false, cores=None, rx_ring_frames=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        programs: Vec<String>,
        ports: &str,
        pipes: u8,
        pcap_dir: Option<String>,
        queue_capacity: usize,
        port_rate_bps: Option<u64>,
        buf_capacity: usize,
        batch: usize,
        fault: Option<(f64, f64, f64, u64)>,
        pcap_max_bytes: Option<u64>,
        port_qdisc: bool,
        hold_replay: bool,
        target: Option<String>,
        xdp_busy_poll: bool,
        cores: Option<Vec<usize>>,
        rx_ring_frames: Option<usize>,
    ) -> PyResult<Self> {
        let cores = cores.unwrap_or_default();
        if let Some(n) = rx_ring_frames {
            if !(MIN_RING_FRAMES..=MAX_RING_FRAMES).contains(&n) {
                return Err(value_err(format!("rx_ring_frames {n} is outside {MIN_RING_FRAMES}..={MAX_RING_FRAMES}")));
            }
        }
        // Checked before any port is opened: a bad list leaves no interface touched.
        ports::dataplane::check_cores(&cores, pipes).map_err(value_err)?;
        let set = loaded_set(&programs, target.as_deref())?;
        let spec = PortSpec::parse(ports).map_err(value_err)?;
        let fault = match fault {
            Some((loss, duplicate, reorder, seed)) => {
                for (what, p) in [("loss", loss), ("duplicate", duplicate), ("reorder", reorder)] {
                    if !(0.0..=1.0).contains(&p) {
                        return Err(value_err(format!("fault {what} probability {p} is outside 0..1")));
                    }
                }
                Some(ports::fault::FaultConfig { seed, loss, duplicate, reorder, ..Default::default() })
            }
            None => None,
        };
        let opts = OpenOptions {
            buf_capacity,
            pcap_dir: pcap_dir.map(Into::into),
            pcap_max_bytes,
            fault,
            qdisc_bypass: !port_qdisc,
            xdp: ports::XdpConfig { busy_poll: xdp_busy_poll, ..Default::default() },
            ..OpenOptions::default()
        };
        let opts = OpenOptions { rx_ring_frames: rx_ring_frames.unwrap_or(opts.rx_ring_frames), ..opts };
        let (ports, peers) = open_ports(&spec, &opts).map_err(value_err)?;
        let rx_rings = ports.iter().map(|p| p.rx_ring()).collect();
        if pipes == 0 || pipes as usize > ports.len().max(1) {
            return Err(value_err(format!("pipes must be 1..={}", ports.len().max(1))));
        }
        let mut dopts = DataplaneOptions { pipes, batch, hold_replay, cores, ..DataplaneOptions::default() };
        dopts.pipe.queue_capacity = queue_capacity;
        dopts.pipe.port_rate_bps = port_rate_bps;
        dopts.pipe.buf_capacity = buf_capacity;
        let inner = py.detach(|| RsDataplane::start(set, ports, dopts)).map_err(value_err)?;
        Ok(Dataplane { inner, peers, rx_rings, stopped: false.into() })
    }

    /// Let held file ports start replaying.
    fn start_replay(&self) -> PyResult<()> {
        self.dp()?.start_replay();
        Ok(())
    }
    /// With file ports: True once every input is replayed and the pipeline is empty (stop
    /// the data plane then to close the outputs). None without file ports.
    fn replay_done(&self, py: Python<'_>) -> PyResult<Option<bool>> {
        let dp = self.dp()?;
        py.detach(|| dp.replay_done()).map_err(control_err)
    }
    #[getter]
    fn num_ports(&self) -> PyResult<u16> {
        Ok(self.dp()?.num_ports())
    }
    #[getter]
    fn num_pipes(&self) -> PyResult<u8> {
        Ok(self.dp()?.num_pipes())
    }
    /// The CPU each pipe's thread is pinned to (empty: not pinned).
    #[getter]
    fn cores(&self) -> PyResult<Vec<usize>> {
        Ok(self.dp()?.cores().to_vec())
    }
    /// Names of the loaded programs, in set order.
    fn program_names(&self) -> PyResult<Vec<String>> {
        Ok(self.dp()?.program_set().names())
    }
    /// Declarations and P4Runtime ids of the loaded set, as JSON.
    fn program_set_json(&self) -> PyResult<String> {
        Ok(self.dp()?.program_set().to_json().to_string())
    }
    /// Load another program set (checked against `target` as in the constructor); all
    /// tables, registers and replication state start over.
    #[pyo3(signature = (programs, target=None))]
    fn set_programs(&self, py: Python<'_>, programs: Vec<String>, target: Option<String>) -> PyResult<()> {
        let set = loaded_set(&programs, target.as_deref())?;
        let dp = self.dp()?;
        py.detach(|| dp.replace_program_set(set)).map_err(control_err)
    }

    /// Insert, modify or delete a table entry.
    #[pyo3(signature = (op, table_id, matches, priority=0, action_id=0, params=Vec::new()))]
    #[allow(clippy::too_many_arguments)]
    fn table_write(
        &self,
        py: Python<'_>,
        op: &str,
        table_id: u32,
        matches: &Bound<'_, PyList>,
        priority: i32,
        action_id: u32,
        params: Vec<(u32, Vec<u8>)>,
    ) -> PyResult<()> {
        let op = ControlOp::TableWrite { table_id, op: write_op(op)?, matches: parse_matches(matches)?, priority, action_id, params };
        self.control(py, op).map(|_| ())
    }
    /// Table writes in order, in one round trip to the data plane: each
    /// `(op, table_id, matches, priority, action_id, params)` as `table_write` takes them.
    /// Returns one `None` (applied) or `(grpc_code, message)` per write.
    #[allow(clippy::type_complexity)]
    fn table_write_many(
        &self,
        py: Python<'_>,
        writes: Vec<(String, u32, Bound<'_, PyList>, i32, u32, Vec<(u32, Vec<u8>)>)>,
    ) -> PyResult<Vec<Option<(u32, String)>>> {
        let mut ops = Vec::with_capacity(writes.len());
        for (op, table_id, matches, priority, action_id, params) in writes {
            ops.push(ControlOp::TableWrite {
                table_id,
                op: write_op(&op)?,
                matches: parse_matches(&matches)?,
                priority,
                action_id,
                params,
            });
        }
        let dp = self.dp()?;
        let results = py.detach(|| dp.control_many(ops)).map_err(control_err)?;
        Ok(results.into_iter().map(|r| r.err().map(|e| (e.grpc_code(), e.to_string()))).collect())
    }
    fn table_set_default(&self, py: Python<'_>, table_id: u32, action_id: u32, params: Vec<(u32, Vec<u8>)>) -> PyResult<()> {
        self.control(py, ControlOp::TableSetDefault { table_id, action_id, params }).map(|_| ())
    }
    fn table_reset_default(&self, py: Python<'_>, table_id: u32) -> PyResult<()> {
        self.control(py, ControlOp::TableResetDefault { table_id }).map(|_| ())
    }
    fn table_clear(&self, py: Python<'_>, table_id: u32) -> PyResult<()> {
        self.control(py, ControlOp::TableClear { table_id }).map(|_| ())
    }
    /// Entries of a table: (list of (matches, priority, action_id, params), (default action_id, params)).
    /// Values are canonical byte strings (no leading zero bytes), as P4Runtime returns them.
    #[allow(clippy::type_complexity)]
    fn table_read<'py>(
        &self,
        py: Python<'py>,
        table_id: u32,
    ) -> PyResult<(Vec<(Vec<Bound<'py, PyTuple>>, i32, u32, Vec<(u32, Bound<'py, PyBytes>)>)>, (u32, Vec<(u32, Bound<'py, PyBytes>)>))>
    {
        let dp = self.dp()?;
        let set = dp.program_set();
        let reply = self.control(py, ControlOp::TableRead { table_id })?;
        let ControlReply::TableEntries { entries, default_action, default_params } = reply else {
            return Err(value_err("unexpected reply"));
        };
        let addr = set.resolve(table_id, pisa::program::id_prefix::TABLE).ok_or_else(|| value_err("table vanished"))?;
        let decl = set.decl(addr.program as usize);
        let tdecl = &decl.tables[addr.index as usize];
        let state = pisa::table::TableState::new(tdecl);
        let aid = |a: u16| set.ids(addr.program as usize).actions[a as usize];
        let params = |a: u16, p: &[u64]| -> Vec<(u32, Bound<'py, PyBytes>)> {
            let ad = &decl.actions[a as usize];
            ad.params
                .iter()
                .zip(p)
                .enumerate()
                .map(|(i, (pd, v))| {
                    ((i + 1) as u32, PyBytes::new(py, &canonical_bytes(&v.to_be_bytes()[8 - pd.bits.div_ceil(8) as usize..])))
                })
                .collect()
        };
        let mut out = Vec::new();
        // Entries pointing at action profile members or groups: see `table_read_indirect`.
        for e in entries.iter().filter(|e| IndirectRef::of_stored(e.action, &e.params).is_none()) {
            let ms = state.field_matches(e).iter().map(|m| match_tuple(py, m)).collect::<PyResult<Vec<_>>>()?;
            out.push((ms, e.priority, aid(e.action.0), params(e.action.0, &e.params)));
        }
        Ok((out, (aid(default_action), params(default_action, &default_params))))
    }

    /// Insert, modify or delete an entry of a table implemented by an action profile,
    /// pointing at a member or (exactly one of the two) a group.
    #[pyo3(signature = (op, table_id, matches, priority=0, member_id=None, group_id=None))]
    #[allow(clippy::too_many_arguments)]
    fn table_write_indirect(
        &self,
        py: Python<'_>,
        op: &str,
        table_id: u32,
        matches: &Bound<'_, PyList>,
        priority: i32,
        member_id: Option<u32>,
        group_id: Option<u32>,
    ) -> PyResult<()> {
        let target = match (member_id, group_id) {
            (Some(m), None) => IndirectRef::Member(m),
            (None, Some(g)) => IndirectRef::Group(g),
            _ => return Err(value_err("an indirect entry points at a member or a group (one of the two)")),
        };
        let op = ControlOp::TableWriteIndirect { table_id, op: write_op(op)?, matches: parse_matches(matches)?, priority, target };
        self.control(py, op).map(|_| ())
    }
    /// Entries of a table implemented by an action profile: `[(matches, priority, kind, id)]`
    /// with kind "member" or "group".
    fn table_read_indirect<'py>(&self, py: Python<'py>, table_id: u32) -> PyResult<Vec<IndirectEntry<'py>>> {
        let dp = self.dp()?;
        let set = dp.program_set();
        let ControlReply::TableEntries { entries, .. } = self.control(py, ControlOp::TableRead { table_id })? else {
            return Err(value_err("unexpected reply"));
        };
        let addr = set.resolve(table_id, pisa::program::id_prefix::TABLE).ok_or_else(|| value_err("table vanished"))?;
        let state = pisa::table::TableState::new(&set.decl(addr.program as usize).tables[addr.index as usize]);
        let mut out = Vec::new();
        for e in &entries {
            let ms = state.field_matches(e).iter().map(|m| match_tuple(py, m)).collect::<PyResult<Vec<_>>>()?;
            match IndirectRef::of_stored(e.action, &e.params) {
                Some(IndirectRef::Member(m)) => out.push((ms, e.priority, "member", m)),
                Some(IndirectRef::Group(g)) => out.push((ms, e.priority, "group", g)),
                None => return Err(value_err("a direct entry in a table with an action profile")),
            }
        }
        Ok(out)
    }
    /// Insert, modify or delete an action profile member (action id and params as in table_write).
    #[pyo3(signature = (op, profile_id, member_id, action_id=0, params=Vec::new()))]
    fn profile_member_write(
        &self,
        py: Python<'_>,
        op: &str,
        profile_id: u32,
        member_id: u32,
        action_id: u32,
        params: Vec<(u32, Vec<u8>)>,
    ) -> PyResult<()> {
        let op = ControlOp::ProfileMemberWrite { profile_id, op: write_op(op)?, member_id, action_id, params };
        self.control(py, op).map(|_| ())
    }
    /// Insert, modify or delete an action selector group of `[(member_id, weight)]`.
    #[pyo3(signature = (op, profile_id, group_id, members=Vec::new()))]
    fn profile_group_write(&self, py: Python<'_>, op: &str, profile_id: u32, group_id: u32, members: Vec<(u32, u32)>) -> PyResult<()> {
        let op = ControlOp::ProfileGroupWrite { profile_id, op: write_op(op)?, group_id, members };
        self.control(py, op).map(|_| ())
    }
    /// An action profile's members `[(member_id, action_id, [(param_id, bytes)])]` and
    /// groups `[(group_id, [(member_id, weight)])]`.
    #[allow(clippy::type_complexity)]
    fn profile_read<'py>(
        &self,
        py: Python<'py>,
        profile_id: u32,
    ) -> PyResult<(Vec<(u32, u32, Vec<(u32, Bound<'py, PyBytes>)>)>, Vec<(u32, Vec<(u32, u32)>)>)> {
        let dp = self.dp()?;
        let set = dp.program_set();
        let ControlReply::ProfileEntries { members, groups } = self.control(py, ControlOp::ProfileRead { profile_id })? else {
            return Err(value_err("unexpected reply"));
        };
        let addr = set.resolve(profile_id, pisa::program::id_prefix::ACTION_PROFILE).ok_or_else(|| value_err("profile vanished"))?;
        let decl = set.decl(addr.program as usize);
        let ids = set.ids(addr.program as usize);
        let mut out = Vec::new();
        for (id, a, values) in members {
            let ad = &decl.actions[a.0 as usize];
            let ps = ad
                .params
                .iter()
                .zip(&values)
                .enumerate()
                .map(|(i, (pd, v))| {
                    ((i + 1) as u32, PyBytes::new(py, &canonical_bytes(&v.to_be_bytes()[8 - pd.bits.div_ceil(8) as usize..])))
                })
                .collect();
            out.push((id, ids.actions[a.0 as usize], ps));
        }
        Ok((out, groups))
    }

    /// Cells of a register: `[(index, value)]`, all cells when `index` is None. Values are
    /// the cell's bits (a pair register's high half in bits 32..64). Reads come from `pipe`.
    #[pyo3(signature = (register_id, index=None, pipe=0))]
    fn register_read(&self, py: Python<'_>, register_id: u32, index: Option<u32>, pipe: u8) -> PyResult<Vec<(u32, u64)>> {
        let dp = self.dp()?;
        match py.detach(|| dp.control_pipe(pipe, ControlOp::RegisterRead { register_id, index })).map_err(control_err)? {
            ControlReply::RegisterCells(v) => Ok(v),
            _ => Err(value_err("unexpected reply")),
        }
    }
    /// `register_read` of pipe 0 as a serialized `p4.v1.ReadResponse` (one RegisterEntry
    /// entity per cell), for the P4Runtime server.
    #[pyo3(signature = (register_id, index=None))]
    fn register_read_response<'py>(&self, py: Python<'py>, register_id: u32, index: Option<u32>) -> PyResult<Bound<'py, PyBytes>> {
        let dp = self.dp()?;
        match py.detach(|| dp.control_pipe(0, ControlOp::RegisterRead { register_id, index })).map_err(control_err)? {
            ControlReply::RegisterCells(v) => Ok(PyBytes::new(py, &p4rt_wire::register_read_response(register_id, &v))),
            _ => Err(value_err("unexpected reply")),
        }
    }
    /// Write one cell, or every cell when `index` is None, in every pipe.
    #[pyo3(signature = (register_id, index, value))]
    fn register_write(&self, py: Python<'_>, register_id: u32, index: Option<u32>, value: u64) -> PyResult<()> {
        self.control(py, ControlOp::RegisterWrite { register_id, index, value }).map(|_| ())
    }

    fn mcast_group_write(&self, py: Python<'_>, op: &str, group: u16, replicas_: Vec<(u16, u16)>) -> PyResult<()> {
        self.control(py, ControlOp::McastGroupWrite { op: write_op(op)?, group, replicas: replicas(replicas_) }).map(|_| ())
    }
    #[pyo3(signature = (group=None))]
    fn mcast_group_read(&self, py: Python<'_>, group: Option<u16>) -> PyResult<Vec<GroupTuple>> {
        match self.control(py, ControlOp::McastGroupRead { group })? {
            ControlReply::McastGroups(v) => Ok(v.into_iter().map(|(g, r)| (g, r.into_iter().map(|x| (x.port, x.rid)).collect())).collect()),
            _ => Err(value_err("unexpected reply")),
        }
    }
    #[pyo3(signature = (op, session, replicas_, truncate_len=0))]
    fn clone_session_write(&self, py: Python<'_>, op: &str, session: u16, replicas_: Vec<(u16, u16)>, truncate_len: u32) -> PyResult<()> {
        let cfg = CloneSession { replicas: replicas(replicas_), truncate_len };
        self.control(py, ControlOp::CloneSessionWrite { op: write_op(op)?, session, session_cfg: cfg }).map(|_| ())
    }
    #[pyo3(signature = (session=None))]
    #[allow(clippy::type_complexity)]
    fn clone_session_read(&self, py: Python<'_>, session: Option<u16>) -> PyResult<Vec<(u16, Vec<(u16, u16)>, u32)>> {
        match self.control(py, ControlOp::CloneSessionRead { session })? {
            ControlReply::CloneSessions(v) => {
                Ok(v.into_iter().map(|(s, c)| (s, c.replicas.into_iter().map(|x| (x.port, x.rid)).collect(), c.truncate_len)).collect())
            }
            _ => Err(value_err("unexpected reply")),
        }
    }
    /// Enable or disable delivery of a digest (by P4Runtime id).
    fn digest_config(&self, py: Python<'_>, digest_id: u32, enabled: bool) -> PyResult<()> {
        self.control(py, ControlOp::DigestConfig { digest_id, enabled }).map(|_| ())
    }
    /// Change a packet generator's period (0 disables it).
    fn pktgen_config(&self, py: Python<'_>, program: String, name: String, period_ns: u64) -> PyResult<()> {
        self.control(py, ControlOp::PktGenConfig { program, name, period_ns }).map(|_| ())
    }

    /// Send a frame from the controller; with `egress_port` it goes straight out of that port.
    #[pyo3(signature = (frame, egress_port=None))]
    fn packet_out(&self, py: Python<'_>, frame: Vec<u8>, egress_port: Option<u16>) -> PyResult<()> {
        let dp = self.dp()?;
        py.detach(|| dp.packet_out(frame, egress_port)).map_err(control_err)
    }
    /// Frames the data plane sent to the controller: `[(frame, ingress_port)]`, waiting up to `timeout` seconds.
    #[pyo3(signature = (timeout=0.0, max=1024))]
    fn wait_packet_ins<'py>(&self, py: Python<'py>, timeout: f64, max: usize) -> PyResult<Vec<(Bound<'py, PyBytes>, u16)>> {
        let dp = self.dp()?;
        let v = py.detach(|| dp.wait_packet_ins(Duration::from_secs_f64(timeout.max(0.0)), max));
        Ok(v.into_iter().map(|(b, p)| (PyBytes::new(py, &b), p)).collect())
    }
    /// Digests: `[(digest_p4_id, data)]`, waiting up to `timeout` seconds.
    #[pyo3(signature = (timeout=0.0, max=1024))]
    fn wait_digests<'py>(&self, py: Python<'py>, timeout: f64, max: usize) -> PyResult<Vec<(u32, Bound<'py, PyBytes>)>> {
        let dp = self.dp()?;
        let set = dp.program_set();
        let v = py.detach(|| dp.wait_digests(Duration::from_secs_f64(timeout.max(0.0)), max));
        Ok(v.into_iter().map(|d| (set.ids(d.program as usize).digests[d.digest as usize], PyBytes::new(py, &d.data))).collect())
    }

    /// Counters as JSON: per port (pipeline and I/O), per program (drops and violations by
    /// name), switch-wide drops by reason, recirculations, controller traffic.
    fn counters_json(&self, py: Python<'_>) -> PyResult<String> {
        let dp = self.dp()?;
        let c = py.detach(|| dp.counters()).map_err(control_err)?;
        let set = dp.program_set();
        let drop_name = |code: usize, prog: Option<usize>| -> Option<String> {
            if let Some(n) = pisa::DropCode(code as u8).builtin_name() {
                return Some(n.to_string());
            }
            let i = code.checked_sub(pisa::DropCode::FIRST_PROGRAM as usize)?;
            match prog {
                Some(p) => set.decl(p).drop_reasons.get(i).cloned(),
                None => None,
            }
        };
        let named = |v: &[u64], prog: Option<usize>| -> serde_json::Map<String, serde_json::Value> {
            v.iter()
                .enumerate()
                .filter(|(_, n)| **n > 0)
                .map(|(i, n)| (drop_name(i, prog).unwrap_or_else(|| format!("code{i}")), (*n).into()))
                .collect()
        };
        let mut programs = serde_json::Map::new();
        for (i, p) in c.programs.iter().enumerate() {
            let violations: serde_json::Map<_, _> =
                pisa::Violation::ALL.iter().map(|v| (v.name().to_string(), p.violations[v.index()].into())).collect();
            programs.insert(
                set.decl(i).name.clone(),
                serde_json::json!({
                    "ingress_passes": p.ingress_passes, "egress_passes": p.egress_passes,
                    "drops": named(&p.drops, Some(i)), "violations": violations,
                }),
            );
        }
        // Switch-wide drops: program-specific codes are attributed through the programs.
        let mut drops = named(&c.drops, None);
        drops.retain(|k, _| !k.starts_with("code"));
        for p in programs.values() {
            for (k, v) in p["drops"].as_object().into_iter().flatten() {
                if pisa::DropCode::FIRST_PROGRAM as usize <= 64 && !drops.contains_key(k) {
                    drops.insert(k.clone(), v.clone());
                }
            }
        }
        let ports: Vec<_> = c
            .ports
            .iter()
            .enumerate()
            .map(|(i, pc)| {
                let (name, io) = dp.port_stats().get(i).map(|(n, s)| (n.clone(), s.snapshot())).unzip();
                let io = io.map(|s| {
                    let mut m: serde_json::Map<String, serde_json::Value> =
                        s.traffic().into_iter().map(|(k, v)| (k.to_string(), v.into())).collect();
                    m.insert(
                        "drops".into(),
                        s.drops()
                            .into_iter()
                            .map(|(k, v)| (k.to_string(), serde_json::Value::from(v)))
                            .collect::<serde_json::Map<_, _>>()
                            .into(),
                    );
                    m
                });
                serde_json::json!({
                    "port": i, "name": name, "rx_packets": pc.rx_packets, "rx_bytes": pc.rx_bytes,
                    "tx_packets": pc.tx_packets, "tx_bytes": pc.tx_bytes, "queue_drops": pc.queue_drops,
                    "queue_depth_max": pc.queue_depth_max, "io": io,
                })
            })
            .collect();
        Ok(serde_json::json!({
            "ports": ports, "programs": programs, "drops": drops,
            "recirculations": c.recirculations, "pktgen_packets": c.pktgen_packets,
            "packet_in": c.packet_in, "packet_out": c.packet_out, "digests": c.digests,
            "clones": c.clones, "mcast_replicas": c.mcast_replicas, "batches": c.batches,
            "events_dropped": dp.events_dropped(),
        })
        .to_string())
    }

    /// Put a frame into an in-memory port (as if a host sent it). False if the port's queue is full.
    fn inject(&self, port: u16, frame: &[u8]) -> PyResult<bool> {
        Ok(self.peer(port)?.send(frame))
    }
    /// Put many frames into an in-memory port; returns how many were accepted.
    fn inject_many(&self, port: u16, frames: Vec<Vec<u8>>) -> PyResult<usize> {
        let p = self.peer(port)?;
        let refs: Vec<&[u8]> = frames.iter().map(|f| f.as_slice()).collect();
        Ok(p.send_batch(&refs))
    }
    /// Frames the switch sent out of an in-memory port, waiting up to `timeout` seconds for the first.
    #[pyo3(signature = (port, timeout=0.0, max=1_000_000))]
    fn drain<'py>(&self, py: Python<'py>, port: u16, timeout: f64, max: usize) -> PyResult<Vec<Bound<'py, PyBytes>>> {
        let p = self.peer(port)?;
        let mut out = Vec::new();
        if timeout > 0.0 {
            if let Some(f) = py.detach(|| p.recv_timeout(Duration::from_secs_f64(timeout))) {
                out.push(PyBytes::new(py, &f));
            }
        }
        while out.len() < max {
            match p.recv_with(|f| PyBytes::new(py, f)) {
                Some(b) => out.push(b),
                None => break,
            }
        }
        Ok(out)
    }

    /// Stop the data-plane threads (also done when the object is collected). Other threads
    /// may be inside calls at the same time: those fail with an "unavailable" error.
    fn stop(&self, py: Python<'_>) {
        self.stopped.store(true, std::sync::atomic::Ordering::Relaxed);
        py.detach(|| self.inner.stop());
    }

    /// Arm a packet trace: packets matching `expr` (see `trace_filter_check`), at most
    /// `limit` per pipe; None disarms. A bad expression raises ValueError.
    #[pyo3(signature = (expr, limit=1_000_000))]
    fn trace_arm(&self, py: Python<'_>, expr: Option<String>, limit: u32) -> PyResult<()> {
        let dp = self.dp()?;
        let session = match expr {
            Some(e) => Some(pisa::TraceSession { filter: pisa::TraceFilter::parse(&e).map_err(value_err)?, limit }),
            None => None,
        };
        py.detach(|| dp.trace_arm(session)).map_err(control_err)
    }

    /// The packet traces complete now (no event for `quiet` seconds), as JSON:
    /// `{"records": [...], "matched", "skipped", "armed"}` (pisa::trace::Record::to_json).
    #[pyo3(signature = (quiet=0.05))]
    fn trace_take(&self, py: Python<'_>, quiet: f64) -> PyResult<String> {
        let dp = self.dp()?;
        let t = py.detach(|| dp.trace_take(Duration::from_secs_f64(quiet.max(0.0)))).map_err(control_err)?;
        let set = dp.program_set();
        let records: Vec<_> = t.records.iter().map(|r| r.to_json(&set)).collect();
        Ok(serde_json::json!({"records": records, "matched": t.matched, "skipped": t.skipped, "armed": t.armed}).to_string())
    }

    /// Names of the ports, by port number.
    fn port_names(&self) -> PyResult<Vec<String>> {
        Ok(self.dp()?.port_stats().iter().map(|(n, _)| n.clone()).collect())
    }
    /// Per port, `(slots, bytes mapped)` of its receive ring as the kernel set it up
    /// (AF_PACKET ports), or None (ports without one).
    fn port_rx_rings(&self) -> PyResult<Vec<Option<(usize, usize)>>> {
        self.dp()?;
        Ok(self.rx_rings.clone())
    }
}

fn parse_ip(s: &str) -> PyResult<wire::ipv4::Ipv4Address> {
    s.parse().map_err(|_| value_err(format!("not an IPv4 address: {s:?}")))
}

fn parse_sockaddr(s: &str) -> PyResult<std::net::SocketAddrV4> {
    s.parse().map_err(|_| value_err(format!("not an IPv4 HOST:PORT address: {s:?}")))
}

/// A host on the switch without a kernel interface: ARP, ping and UDP over a UDP-tunnel
/// switch port (the rack's no-root mode). Frames are handled by a native thread.
#[pyclass(module = "inswitch._native")]
struct TunnelHost {
    inner: Option<ports::tunnelhost::TunnelHost>,
}

impl TunnelHost {
    fn host(&self) -> PyResult<&ports::tunnelhost::TunnelHost> {
        self.inner.as_ref().ok_or_else(|| value_err("the host is closed"))
    }
}

#[pymethods]
impl TunnelHost {
    #[new]
    /// `gateway_mac`: the gateway's MAC as a permanent neighbour entry (no ARP for it; a
    /// fabric's leaf answers none), as `ip neigh replace GW lladdr MAC nud permanent`.
    #[pyo3(signature = (switch_addr, mac, ip, prefix_len=24, gateway=None, local_addr=None, gateway_mac=None))]
    fn new(
        switch_addr: &str,
        mac: &str,
        ip: &str,
        prefix_len: u8,
        gateway: Option<&str>,
        local_addr: Option<&str>,
        gateway_mac: Option<&str>,
    ) -> PyResult<Self> {
        let parse_mac = |m: &str| -> PyResult<wire::ethernet::EthernetAddress> {
            m.parse().map_err(|_| value_err(format!("not a MAC address: {m:?}")))
        };
        let mac = parse_mac(mac)?;
        let gw = gateway.map(parse_ip).transpose()?;
        let gw_mac = gateway_mac.map(parse_mac).transpose()?;
        let local = local_addr.map(parse_sockaddr).transpose()?;
        let neighbor = match (gw, gw_mac) {
            (Some(g), Some(m)) => Some((g, m)),
            (None, Some(_)) => return Err(value_err("gateway_mac needs a gateway")),
            _ => None,
        };
        let h = ports::tunnelhost::TunnelHost::start(parse_sockaddr(switch_addr)?, local, mac, parse_ip(ip)?, prefix_len, gw)
            .map_err(value_err)?;
        if let Some((g, m)) = neighbor {
            h.set_static_neighbor(g, m);
        }
        Ok(TunnelHost { inner: Some(h) })
    }
    /// Accept datagrams to `port`.
    fn udp_bind(&self, port: u16) -> PyResult<()> {
        self.host()?.bind_udp(port);
        Ok(())
    }
    fn udp_send(&self, py: Python<'_>, dst_ip: &str, dst_port: u16, src_port: u16, payload: Vec<u8>) -> PyResult<()> {
        let dst = parse_ip(dst_ip)?;
        let h = self.host()?;
        py.detach(|| h.send_udp(dst, src_port, dst_port, &payload)).map_err(value_err)
    }
    /// `[(src_ip, src_port, payload)]` that arrived on `port`, waiting up to `timeout` s.
    #[pyo3(signature = (port, timeout=1.0, max=1024))]
    fn udp_recv<'py>(&self, py: Python<'py>, port: u16, timeout: f64, max: usize) -> PyResult<Vec<(String, u16, Bound<'py, PyBytes>)>> {
        let h = self.host()?;
        let v = py.detach(|| h.recv_udp(port, Duration::from_secs_f64(timeout.max(0.0)), max));
        Ok(v.into_iter().map(|(a, p, b)| (a.to_string(), p, PyBytes::new(py, &b))).collect())
    }
    /// Round-trip times in seconds (None when lost).
    #[pyo3(signature = (dst_ip, count=1, timeout=1.0, interval=0.2))]
    fn ping(&self, py: Python<'_>, dst_ip: &str, count: u16, timeout: f64, interval: f64) -> PyResult<Vec<Option<f64>>> {
        let dst = parse_ip(dst_ip)?;
        let h = self.host()?;
        py.detach(|| h.ping(dst, count, Duration::from_secs_f64(timeout.max(0.0)), Duration::from_secs_f64(interval.max(0.0))))
            .map_err(value_err)
    }
    /// The host stack's counters.
    fn stats(&self) -> PyResult<std::collections::BTreeMap<&'static str, u64>> {
        let h = self.host()?;
        let s = h.stats();
        Ok([
            ("rx_frames", s.rx_frames),
            ("tx_frames", s.tx_frames),
            ("rx_malformed", s.rx_malformed),
            ("rx_not_for_us", s.rx_not_for_us),
            ("rx_unbound_port", s.rx_unbound_port),
            ("rx_unsupported", s.rx_unsupported),
            ("arp_unresolved_drops", s.arp_unresolved_drops),
            ("rx_queue_drops", h.rx_queue_drops()),
        ]
        .into_iter()
        .collect())
    }
    fn close(&mut self, py: Python<'_>) {
        if let Some(mut h) = self.inner.take() {
            py.detach(move || h.close());
        }
    }
}

/// Send UDP datagrams of `payload_len` bytes to `dst` ("IP:PORT") for `duration` seconds,
/// as fast as possible or at `pps`. Returns counts (sent, bytes, enobufs, eagain, errors, seconds).
#[pyfunction]
#[pyo3(signature = (dst, payload_len, duration, pps=None))]
fn udp_blast(
    py: Python<'_>,
    dst: &str,
    payload_len: usize,
    duration: f64,
    pps: Option<u64>,
) -> PyResult<std::collections::BTreeMap<&'static str, f64>> {
    let dst = parse_sockaddr(dst)?;
    let r =
        py.detach(|| ports::traffic::udp_blast(dst, payload_len, Duration::from_secs_f64(duration.max(0.0)), pps)).map_err(value_err)?;
    Ok([
        ("sent", r.sent as f64),
        ("bytes", r.bytes as f64),
        ("enobufs", r.enobufs as f64),
        ("eagain", r.eagain as f64),
        ("errors", r.errors as f64),
        ("seconds", r.elapsed.as_secs_f64()),
        ("pps", r.pps()),
    ]
    .into_iter()
    .collect())
}

/// Send copies of one Ethernet `frame` out of interface `ifname` (in the calling process's
/// namespace) for `duration` seconds as fast as the transmit ring takes them, through AF_XDP
/// (`xdp`) or a PACKET_MMAP TX ring. Returns (sent, seconds, pps, ring_full, port).
#[pyfunction]
#[pyo3(signature = (ifname, frame, duration, xdp=true))]
fn frame_blast(py: Python<'_>, ifname: &str, frame: Vec<u8>, duration: f64, xdp: bool) -> PyResult<(u64, f64, f64, u64, String)> {
    let r =
        py.detach(|| ports::traffic::frame_blast(ifname, &frame, Duration::from_secs_f64(duration.max(0.0)), xdp)).map_err(value_err)?;
    Ok((r.sent, r.elapsed.as_secs_f64(), r.pps(), r.ring_full, r.port))
}

/// Count UDP datagrams arriving at `bind` ("IP:PORT") for up to `duration` seconds (or until
/// `idle` seconds pass without one after the first). Returns counts and the rate over the
/// active interval.
#[pyfunction]
#[pyo3(signature = (bind, duration, idle=1.0))]
fn udp_sink(py: Python<'_>, bind: &str, duration: f64, idle: f64) -> PyResult<std::collections::BTreeMap<&'static str, f64>> {
    let bind = parse_sockaddr(bind)?;
    let r = py
        .detach(|| ports::traffic::udp_sink(bind, Duration::from_secs_f64(duration.max(0.0)), Duration::from_secs_f64(idle.max(0.0))))
        .map_err(value_err)?;
    let mut m: std::collections::BTreeMap<&'static str, f64> =
        [("packets", r.packets as f64), ("bytes", r.bytes as f64), ("seconds", r.elapsed.as_secs_f64()), ("pps", r.pps())]
            .into_iter()
            .collect();
    if let Some(s) = r.max_seq {
        m.insert("max_seq", s as f64);
    }
    if let Some(l) = r.latency_avg_ns {
        m.insert("latency_avg_ns", l as f64);
    }
    Ok(m)
}

/// The bare loop doing the forward pipeline's essential work: `(packets, seconds, mpps)`.
#[pyfunction]
#[pyo3(signature = (batch=32, duration=2.0))]
fn bench_bare_forward_loop(py: Python<'_>, batch: usize, duration: f64) -> (u64, f64, f64) {
    let r = py.detach(|| ports::bench::bare_forward_loop(batch.max(1), Duration::from_secs_f64(duration.max(0.1))));
    (r.packets, r.seconds, r.mpps)
}

/// Packets per second one core pushes through the `forward` pipeline in memory:
/// `(packets, seconds, mpps)`.
#[pyfunction]
#[pyo3(signature = (frame_len=64, batch=32, duration=2.0))]
fn bench_forward_pipeline(py: Python<'_>, frame_len: usize, batch: usize, duration: f64) -> (u64, f64, f64) {
    let r = py.detach(|| ports::bench::forward_pipeline(frame_len, batch.max(1), Duration::from_secs_f64(duration.max(0.1))));
    (r.packets, r.seconds, r.mpps)
}

/// The `forward` program on the threaded data plane, one pipe per core in `cores` (pinned),
/// four ports offering 64-byte frames at full speed, every frame crossing pipes
/// (`crossing`) or staying in its pipe: a dict with `packets`, `seconds`, `mpps`, `pipes`,
/// `cores`, `crossed`, `tm_drops`, `ring_full_drops`, `cpu_seconds` and `wait_seconds`
/// (what the pipe threads ran and waited for a CPU during the measurement).
#[pyfunction]
#[pyo3(signature = (cores, crossing=false, frame_len=64, batch=32, duration=2.0))]
fn bench_forward_pipes<'py>(
    py: Python<'py>,
    cores: Vec<usize>,
    crossing: bool,
    frame_len: usize,
    batch: usize,
    duration: f64,
) -> PyResult<Bound<'py, PyDict>> {
    if cores.is_empty() {
        return Err(value_err("give at least one core"));
    }
    ports::dataplane::check_cores(&cores, cores.len() as u8).map_err(value_err)?;
    let r = py
        .detach(|| ports::bench::forward_pipes(frame_len, batch.max(1), &cores, crossing, Duration::from_secs_f64(duration.max(0.1))))
        .map_err(value_err)?;
    let d = PyDict::new(py);
    d.set_item("packets", r.rate.packets)?;
    d.set_item("seconds", r.rate.seconds)?;
    d.set_item("mpps", r.rate.mpps)?;
    d.set_item("pipes", r.pipes)?;
    d.set_item("cores", r.cores)?;
    d.set_item("crossed", r.crossed)?;
    d.set_item("tm_drops", r.tm_drops)?;
    d.set_item("ring_full_drops", r.ring_full_drops)?;
    d.set_item("cpu_seconds", r.cpu_seconds)?;
    d.set_item("wait_seconds", r.wait_seconds)?;
    Ok(d)
}

/// The IPv4 routing path of `forward` in memory on one core: `(packets, seconds, mpps)`.
#[pyfunction]
#[pyo3(signature = (frame_len=64, batch=32, duration=2.0))]
fn bench_route_pipeline(py: Python<'_>, frame_len: usize, batch: usize, duration: f64) -> (u64, f64, f64) {
    let r = py.detach(|| ports::bench::route_pipeline(frame_len, batch.max(1), Duration::from_secs_f64(duration.max(0.1))));
    (r.packets, r.seconds, r.mpps)
}

/// The IPv4 routing path through file ports (a capture of `packets` frames replayed
/// through a running data plane, files in `dir`): `(packets, seconds, mpps)`.
#[pyfunction]
#[pyo3(signature = (dir, frame_len=64, packets=200_000))]
fn bench_pcap_route(py: Python<'_>, dir: String, frame_len: usize, packets: usize) -> PyResult<(u64, f64, f64)> {
    let r = py.detach(|| ports::bench::pcap_route(frame_len, packets.max(1), std::path::Path::new(&dir))).map_err(value_err)?;
    Ok((r.packets, r.seconds, r.mpps))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("ControlPlaneError", m.py().get_type::<ControlPlaneError>())?;
    m.add_function(wrap_pyfunction!(program_names, m)?)?;
    m.add_function(wrap_pyfunction!(trace_filter_check, m)?)?;
    m.add_function(wrap_pyfunction!(target_names, m)?)?;
    m.add_function(wrap_pyfunction!(program_set_json, m)?)?;
    m.add_function(wrap_pyfunction!(resources_json, m)?)?;
    m.add_class::<Dataplane>()?;
    netsha::register(m)?;
    m.add_class::<TunnelHost>()?;
    m.add_function(wrap_pyfunction!(udp_blast, m)?)?;
    m.add_function(wrap_pyfunction!(udp_sink, m)?)?;
    m.add_function(wrap_pyfunction!(frame_blast, m)?)?;
    m.add_function(wrap_pyfunction!(bench_forward_pipeline, m)?)?;
    m.add_function(wrap_pyfunction!(bench_bare_forward_loop, m)?)?;
    m.add_function(wrap_pyfunction!(bench_route_pipeline, m)?)?;
    m.add_function(wrap_pyfunction!(bench_forward_pipes, m)?)?;
    m.add_function(wrap_pyfunction!(bench_pcap_route, m)?)?;
    aggregation::register(m)?;
    allreduce::register(m)?;
    switchagg::register(m)?;
    hare::register(m)?;
    hareload::register(m)?;
    inaas::register(m)?;
    pcap::register(m)?;
    Ok(())
}
