//! `inswitch._native.InaasService`: the in-process INaaS service (switch with `forward` +
//! `inaas`, goalkeeper, tenants; crates/hostlib/src/inaas/service.rs) for Python's
//! adapters, controller and experiments. Numbers cross as little-endian byte strings
//! (`numpy.frombuffer`), one call per packet or per batch, never per item.

use std::collections::HashMap;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use hostlib::inaas::paxos::{HostAcceptor, Learner, Proposer, Ring, Vote, ACCEPTORS, VOTE_LEN};
use hostlib::inaas::paxos_run::{run_paxos, PaxosFaults, PaxosGroup};
use hostlib::inaas::{build_frame, parse_reply, Goalkeeper, ItemReq, ItemResult, Kind, Op, Service, TenantInfo};
use wire::ethernet::EthernetAddress;
use wire::inaas::{Operator, ITEMS};

fn kind(s: &str) -> PyResult<Kind> {
    Ok(match s {
        "kv" => Kind::Kv,
        "reduce" => Kind::Reduce,
        "bloom" => Kind::Bloom,
        "paxos" => Kind::Paxos,
        _ => return Err(PyValueError::new_err(format!("unknown tenant kind {s:?} (kv, reduce, bloom, paxos)"))),
    })
}

fn le<const N: usize>(b: &[u8], i: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[i * N..i * N + N]);
    a
}

/// Items from packed arrays: segs u8, idxs u16, ops u8 (0 read, 1 write, 2 swap, 3 reduce
/// with key = key16 << 16 | worker, 4 collect with key = key16 << 16 | workers, 5 compute
/// with key = parameter, 6 Bloom insert and 7 Bloom query with key = the bit mask, in
/// segments 0-2: the switch answers 1 present / 0 absent in each probe's value), keys u32,
/// values i32.
fn items(segs: &[u8], idxs: &[u8], ops: &[u8], keys: &[u8], values: &[u8]) -> PyResult<Vec<ItemReq>> {
    let n = segs.len();
    if n > ITEMS || idxs.len() != 2 * n || ops.len() != n || keys.len() != 4 * n || values.len() != 4 * n {
        return Err(PyValueError::new_err("item arrays: at most 20 items; u8 segs, u16 idxs, u8 ops, u32 keys, i32 values"));
    }
    (0..n)
        .map(|i| {
            let key = u32::from_le_bytes(le::<4>(keys, i));
            let value = i32::from_le_bytes(le::<4>(values, i));
            let op = match ops[i] {
                0 => Op::Read { key },
                1 => Op::Write { key, value },
                2 => Op::Swap { key, value },
                3 => Op::Reduce { key16: (key >> 16) as u16, worker: key as u8, value },
                4 => Op::Collect { key16: (key >> 16) as u16, workers: key as u8 },
                5 => Op::Compute { value, param: key },
                6 => Op::BloomInsert { mask: key },
                7 => Op::BloomQuery { mask: key },
                o => return Err(PyValueError::new_err(format!("unknown op code {o}"))),
            };
            Ok(ItemReq { seg: segs[i] as usize, idx: u16::from_le_bytes(le::<2>(idxs, i)), op })
        })
        .collect()
}

fn operator(op: u8) -> PyResult<Operator> {
    Operator::from_u8(op).ok_or_else(|| PyValueError::new_err("operator must be 0..9"))
}

#[pyclass(module = "inswitch._native", unsendable)]
pub struct InaasService {
    s: Service,
    paxos: std::collections::HashMap<usize, PaxosGroup>,
}

#[pymethods]
impl InaasService {
    #[new]
    #[pyo3(signature = (ports=64, seed=1))]
    fn new(ports: u16, seed: u64) -> Self {
        InaasService { s: Service::new(ports, seed), paxos: Default::default() }
    }

    /// A fresh switch port (a new host).
    fn new_port(&mut self) -> u16 {
        self.s.new_port()
    }

    /// Register a tenant (the controller's uid stays inside): returns its index.
    #[pyo3(signature = (port, kind_name, lease_us, max_lease_us, subscription=false, rto_us=200))]
    fn add_tenant(
        &mut self,
        port: u16,
        kind_name: &str,
        lease_us: u32,
        max_lease_us: u32,
        subscription: bool,
        rto_us: u64,
    ) -> PyResult<usize> {
        Ok(self.s.add_tenant(port, kind(kind_name)?, lease_us, max_lease_us, subscription, rto_us))
    }

    /// Another host (worker) of tenant `of` on `port`: same uid and bill. Returns its index.
    fn add_member(&mut self, of: usize, port: u16) -> usize {
        self.s.add_member(of, port)
    }

    /// A host-only server on its own port, `service_us` per frame; returns the port.
    fn add_server(&mut self, service_us: u64) -> u16 {
        self.s.add_server(service_us)
    }

    /// One request of up to 20 items for tenant `t`; returns its sequence number.
    #[pyo3(signature = (t, segs, idxs, ops, keys, values, op=0))]
    #[allow(clippy::too_many_arguments)] // a request's columns, as Python passes them
    fn submit(&mut self, t: usize, segs: &[u8], idxs: &[u8], ops: &[u8], keys: &[u8], values: &[u8], op: u8) -> PyResult<u32> {
        let it = items(segs, idxs, ops, keys, values)?;
        self.s.submit(t, &it, operator(op)?).map_err(|e| PyValueError::new_err(e.to_string()))
    }

    /// A frame as tenant `t`'s adapter would build it (an attacker that sniffed its uid).
    #[pyo3(signature = (t, segs, idxs, ops, keys, values, op=0))]
    #[allow(clippy::too_many_arguments)]
    fn forge_frame<'py>(
        &self,
        py: Python<'py>,
        t: usize,
        segs: &[u8],
        idxs: &[u8],
        ops: &[u8],
        keys: &[u8],
        values: &[u8],
        op: u8,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let it = items(segs, idxs, ops, keys, values)?;
        let tn = &self.s.tenants[t];
        let f = build_frame(tn.client.asm.mac, self.s.gk.mac(), tn.uid, 0x7fff_0000, tn.lease_us, &it, operator(op)?, 0, 0)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(PyBytes::new(py, &f))
    }

    /// A frame with a uid chosen by the caller (forged) from tenant `t`'s MAC.
    fn forge_uid_frame<'py>(&self, py: Python<'py>, t: usize, uid: u32, seg: u8, idx: u16, key: u32) -> PyResult<Bound<'py, PyBytes>> {
        let tn = &self.s.tenants[t];
        let it = [ItemReq { seg: seg as usize, idx, op: Op::Read { key } }];
        let f = build_frame(tn.client.asm.mac, self.s.gk.mac(), uid, 1, 1000, &it, Operator::Add, 0, 0)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(PyBytes::new(py, &f))
    }

    /// Frame bytes into the switch from a host port.
    fn inject_raw(&mut self, port: u16, frame: Vec<u8>) {
        self.s.inject_raw(port, frame)
    }

    /// A baseline (host-only) frame from tenant `t` to a server port.
    fn submit_baseline(&mut self, t: usize, server_port: u16, payload: &[u8]) {
        self.s.submit_baseline(t, server_port, payload)
    }

    /// Run the simulation until idle or `max_us` passed.
    fn run(&mut self, py: Python<'_>, max_us: u64) {
        let _ = py;
        self.s.run(max_us)
    }

    /// Advance exactly `us` of simulated time, idle or not.
    fn run_for(&mut self, us: u64) {
        self.s.run_for(us)
    }

    /// Requests still unanswered for tenant `t`.
    fn in_flight(&self, t: usize) -> usize {
        self.s.tenants[t].client.in_flight()
    }

    /// Finished requests of tenant `t`: (seqs u32, latency_us u64, via_goalkeeper u8,
    /// gave_up u8, status u8 x 20 per request (0 no item, 1 done, 2 miss), values i64 x 20).
    #[allow(clippy::type_complexity)]
    fn take_completions<'py>(
        &mut self,
        py: Python<'py>,
        t: usize,
    ) -> (Bound<'py, PyBytes>, Bound<'py, PyBytes>, Bound<'py, PyBytes>, Bound<'py, PyBytes>, Bound<'py, PyBytes>, Bound<'py, PyBytes>)
    {
        let done = std::mem::take(&mut self.s.tenants[t].done);
        let (mut seqs, mut lat, mut gk, mut gu, mut st, mut vals) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for c in &done {
            seqs.extend_from_slice(&c.seq.to_le_bytes());
            lat.extend_from_slice(&c.latency_us.to_le_bytes());
            gk.push(c.via_goalkeeper as u8);
            gu.push(c.gave_up as u8);
            for r in &c.results {
                let (s, v) = match r {
                    None => (0u8, 0i64),
                    Some(ItemResult::Done(v)) => (1, *v),
                    Some(ItemResult::Miss) => (2, 0),
                };
                st.push(s);
                vals.extend_from_slice(&v.to_le_bytes());
            }
        }
        (
            PyBytes::new(py, &seqs),
            PyBytes::new(py, &lat),
            PyBytes::new(py, &gk),
            PyBytes::new(py, &gu),
            PyBytes::new(py, &st),
            PyBytes::new(py, &vals),
        )
    }

    /// Baseline answers of tenant `t`: (sent_us u64, done_us u64, payloads).
    fn take_baseline<'py>(&mut self, py: Python<'py>, t: usize) -> (Bound<'py, PyBytes>, Bound<'py, PyBytes>, Vec<Bound<'py, PyBytes>>) {
        let done = std::mem::take(&mut self.s.tenants[t].baseline_done);
        let mut a = Vec::new();
        let mut b = Vec::new();
        let mut p = Vec::new();
        for (s, d, payload) in &done {
            a.extend_from_slice(&s.to_le_bytes());
            b.extend_from_slice(&d.to_le_bytes());
            p.push(PyBytes::new(py, payload));
        }
        (PyBytes::new(py, &a), PyBytes::new(py, &b), p)
    }

    /// What the switch counted for tenant `t` (its usage registers).
    fn switch_usage<'py>(&mut self, py: Python<'py>, t: usize) -> PyResult<Bound<'py, PyDict>> {
        let u = self.s.switch_usage(t);
        let d = PyDict::new(py);
        d.set_item("alu_ops", u.alu_ops)?;
        d.set_item("packets", u.packets)?;
        d.set_item("mismatches", u.mismatches)?;
        d.set_item("leases", u.leases)?;
        Ok(d)
    }

    /// Leases the goalkeeper saw tenant `t` take.
    fn goalkeeper_leases(&self, t: usize) -> u64 {
        self.s.gk.acquisitions().get(&self.s.tenants[t].uid).copied().unwrap_or(0)
    }

    /// µs each tenant held registers, from every lease the goalkeeper learnt of (on the
    /// model's clock, open leases counted to `run_end_us`), per tenant index (its members
    /// share it); -1 gathers uids of no tenant.
    fn goalkeeper_held_us(&self, run_end_us: u64) -> HashMap<i64, u64> {
        let ts = &self.s.tenants;
        let of = |uid: u32| ts.iter().position(|t| t.uid == uid).map_or(-1, |i| i as i64);
        let mut out = HashMap::new();
        for (uid, us) in self.s.gk.holds().held_us(run_end_us) {
            *out.entry(of(uid)).or_default() += us;
        }
        out
    }

    /// The goalkeeper's counters.
    fn goalkeeper_stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let g = &self.s.gk.stats;
        let d = PyDict::new(py);
        for (k, v) in [
            ("packets", g.packets),
            ("preemptions", g.preemptions),
            ("failures", g.failures),
            ("overflows", g.overflows),
            ("retransmissions", g.retransmissions),
            ("forged", g.forged),
            ("malformed", g.malformed),
            ("replies", g.replies),
            ("subrequests", g.subrequests),
            ("torn_preemptions", g.torn_preemptions),
            ("cache_evictions", g.cache_evictions),
        ] {
            d.set_item(k, v)?;
        }
        Ok(d)
    }

    /// Tenant `t`'s retransmission counters.
    fn client_stats<'py>(&self, py: Python<'py>, t: usize) -> PyResult<Bound<'py, PyDict>> {
        let c = &self.s.tenants[t].client.stats;
        let d = PyDict::new(py);
        for (k, v) in [
            ("sent", c.sent),
            ("retransmitted", c.retransmitted),
            ("answered_by_switch", c.answered_by_switch),
            ("answered_by_goalkeeper", c.answered_by_goalkeeper),
            ("gave_up", c.gave_up),
        ] {
            d.set_item(k, v)?;
        }
        Ok(d)
    }

    /// Forged-uid packets the switch counted on a port.
    fn forged_on_port(&mut self, port: u16) -> u64 {
        self.s.forged_on_port(port)
    }

    /// Drops of the `inaas` program by reason name.
    fn drops(&self, reason: &str) -> u64 {
        self.s.drops(reason)
    }

    /// Hardware-rule violations in the `inaas` program (0 unless the program is wrong).
    fn violations(&self) -> u64 {
        self.s.violations()
    }

    /// The switch's counters as JSON (ports, drops by code, recirculations).
    fn counters_json(&self) -> PyResult<String> {
        serde_json::to_string(&self.s.counters()).map_err(|e| PyValueError::new_err(e.to_string()))
    }

    fn recirculations(&self) -> u64 {
        self.s.recirculations()
    }

    /// Frames lost on the tenants' links.
    fn lost_frames(&self) -> u64 {
        self.s.lost_frames
    }

    /// Tenant `t`'s switch port.
    fn tenant_port(&self, t: usize) -> u16 {
        self.s.tenants[t].port
    }

    #[getter]
    fn now_us(&self) -> u64 {
        self.s.now_us
    }
    #[setter]
    fn set_loss(&mut self, p: f64) {
        self.s.loss = p;
    }
    #[getter]
    fn loss(&self) -> f64 {
        self.s.loss
    }
    #[setter]
    fn set_hop_us(&mut self, v: u64) {
        self.s.hop_us = v.max(1);
    }
    #[setter]
    fn set_host_us(&mut self, v: u64) {
        self.s.host_us = v;
    }

    /// Tenant `t` leads Paxos on its acceptors (segments 0-2, slots `base..base+slots`,
    /// whose leases it took); `learners` learners.
    #[pyo3(signature = (t, base, slots, learners=3))]
    fn paxos_start(&mut self, t: usize, base: u16, slots: u16, learners: usize) -> PyResult<()> {
        if t >= self.s.tenants.len() || slots == 0 || learners == 0 {
            return Err(PyValueError::new_err("no such tenant, or no slots or learners"));
        }
        let g = PaxosGroup::start(&mut self.s, t, Ring { base, slots }, learners);
        self.paxos.insert(t, g);
        Ok(())
    }

    /// A value (non-zero) to be chosen in tenant `t`'s log.
    fn paxos_propose(&mut self, t: usize, value: i32) -> PyResult<()> {
        let g = self.paxos.get_mut(&t).ok_or_else(|| PyValueError::new_err("paxos not started"))?;
        if value == 0 {
            return Err(PyValueError::new_err("0 is the no-op"));
        }
        g.proposer.propose(value);
        Ok(())
    }

    /// Drive tenant `t`'s Paxos; the decisions since the last call as (instance, µs).
    fn paxos_step(&mut self, t: usize) -> PyResult<Vec<(u64, u64)>> {
        let g = self.paxos.get_mut(&t).ok_or_else(|| PyValueError::new_err("paxos not started"))?;
        Ok(g.step(&mut self.s))
    }

    /// Every learner's delivered log, and the contradictions learners saw.
    fn paxos_logs(&self, t: usize) -> PyResult<(Vec<Vec<i32>>, Vec<String>)> {
        let g = self.paxos.get(&t).ok_or_else(|| PyValueError::new_err("paxos not started"))?;
        Ok((g.learners.iter().map(|l| l.log.clone()).collect(), g.violations.iter().map(|v| v.to_string()).collect()))
    }
}

/// Paxos with the acceptors in the switch under faults (crates/hostlib/src/inaas/paxos_run.rs).
#[pyfunction]
#[pyo3(signature = (seed=1, loss=0.0, dup=0.0, jitter_us=0, crash_at_us=None, zombie=false, values=40, slots=16))]
#[allow(clippy::too_many_arguments)]
fn paxos_run<'py>(
    py: Python<'py>,
    seed: u64,
    loss: f64,
    dup: f64,
    jitter_us: u64,
    crash_at_us: Option<u64>,
    zombie: bool,
    values: usize,
    slots: u16,
) -> PyResult<Bound<'py, PyDict>> {
    if !(0.0..1.0).contains(&loss) || !(0.0..1.0).contains(&dup) || slots == 0 || values == 0 {
        return Err(PyValueError::new_err("loss and dup in [0, 1), slots and values > 0"));
    }
    let o = run_paxos(&PaxosFaults { seed, loss, dup, jitter_us, crash_at_us, zombie, values, slots, learners: 3 });
    let d = PyDict::new(py);
    d.set_item("violations", o.violations.iter().map(|v| v.to_string()).collect::<Vec<_>>())?;
    d.set_item("logs", o.logs)?;
    d.set_item("kv", o.kv.iter().map(|m| m.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>()).collect::<Vec<_>>())?;
    d.set_item("proposed", o.proposed)?;
    d.set_item("must_deliver", o.must_deliver)?;
    d.set_item("latencies_us", o.latencies_us)?;
    d.set_item("took_over", o.took_over)?;
    d.set_item("finished", o.finished)?;
    d.set_item("simulated_us", o.simulated_us)?;
    Ok(d)
}

fn mac6(b: &[u8]) -> PyResult<EthernetAddress> {
    let a: [u8; 6] = b.try_into().map_err(|_| PyValueError::new_err("a MAC address is 6 bytes"))?;
    Ok(EthernetAddress(a))
}

/// One INaaS frame (the provider's packet assembly), for host processes on real ports.
#[pyfunction]
#[pyo3(signature = (src, dst, uid, seq, lease_us, segs, idxs, ops, keys, values, op=0, flags=0))]
#[allow(clippy::too_many_arguments)]
fn inaas_frame<'py>(
    py: Python<'py>,
    src: &[u8],
    dst: &[u8],
    uid: u32,
    seq: u32,
    lease_us: u32,
    segs: &[u8],
    idxs: &[u8],
    ops: &[u8],
    keys: &[u8],
    values: &[u8],
    op: u8,
    flags: u8,
) -> PyResult<Bound<'py, PyBytes>> {
    let it = items(segs, idxs, ops, keys, values)?;
    let f = build_frame(mac6(src)?, mac6(dst)?, uid, seq, lease_us, &it, operator(op)?, 0, flags)
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(PyBytes::new(py, &f))
}

/// An answer to a tenant (switch or goalkeeper): (uid, seq, flags, status u8 x 20 (0 no
/// item, 1 done, 2 miss), values i64 x 20), or None if the frame is not one.
#[pyfunction]
#[allow(clippy::type_complexity)]
fn inaas_reply<'py>(py: Python<'py>, frame: &[u8]) -> Option<(u32, u32, u8, Bound<'py, PyBytes>, Bound<'py, PyBytes>)> {
    let r = parse_reply(frame)?;
    let mut st = Vec::with_capacity(ITEMS);
    let mut vals = Vec::with_capacity(8 * ITEMS);
    for x in &r.results {
        let (s, v) = match x {
            None => (0u8, 0i64),
            Some(ItemResult::Done(v)) => (1, *v),
            Some(ItemResult::Miss) => (2, 0),
        };
        st.push(s);
        vals.extend_from_slice(&v.to_le_bytes());
    }
    Some((r.uid, r.seq, r.flags, PyBytes::new(py, &st), PyBytes::new(py, &vals)))
}

/// The goalkeeper as a host process drives it: frames in, frames out.
#[pyclass(module = "inswitch._native", unsendable)]
pub struct InaasGoalkeeper {
    g: Goalkeeper,
}

#[pymethods]
impl InaasGoalkeeper {
    #[new]
    fn new(mac: &[u8]) -> PyResult<Self> {
        Ok(InaasGoalkeeper { g: Goalkeeper::new(mac6(mac)?) })
    }
    fn register_tenant(&mut self, uid: u32, kind_name: &str, lease_us: u32) -> PyResult<()> {
        self.g.register_tenant(uid, TenantInfo { kind: kind(kind_name)?, lease_us });
        Ok(())
    }
    /// A frame the switch sent to the goalkeeper (at `now_us` on the caller's clock, for
    /// the grant log); returns the frames to send back.
    #[pyo3(signature = (frame, now_us=None))]
    fn on_frame<'py>(&mut self, py: Python<'py>, frame: &[u8], now_us: Option<u64>) -> Vec<Bound<'py, PyBytes>> {
        let now_us = now_us.unwrap_or(self.g.now_us());
        self.g.handle(now_us, frame);
        std::iter::from_fn(|| self.g.poll_transmit()).map(|f| PyBytes::new(py, &f)).collect()
    }
    /// µs per uid held by leases a later grant of their cell ended (pricing; with
    /// `open_grants`, the holds `controller.folded_holds` counts to the run's end).
    fn held_closed(&self) -> HashMap<u32, u64> {
        self.g.holds().held_us(0)
    }
    /// The leases still open, one per cell: (segment, index, uid, µs it came, term µs).
    fn open_grants(&self) -> Vec<(u8, u16, u32, u64, u32)> {
        self.g.holds().open().map(|g| (g.seg, g.idx, g.uid, g.at_us, g.term_us)).collect()
    }
    fn leases(&self, uid: u32) -> u64 {
        self.g.acquisitions().get(&uid).copied().unwrap_or(0)
    }
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let g = &self.g.stats;
        let d = PyDict::new(py);
        for (k, v) in
            [("packets", g.packets), ("preemptions", g.preemptions), ("failures", g.failures), ("forged", g.forged), ("replies", g.replies)]
        {
            d.set_item(k, v)?;
        }
        Ok(d)
    }
}

/// The Paxos tenant's hosts as one real process drives them (`tenants run --real`): the
/// proposer and its learners of `PaxosGroup`, frames in and out instead of a service.
///
/// With a proposer crash (`--paxos-crash-at`) the roles split over two processes: the
/// leader with no learners of its own (`learners=0`: its votes leave through
/// [`take_votes`](Self::take_votes), the learners' acknowledgements come back through
/// [`set_floor`](Self::set_floor)), and a backup (`lead=False`) that holds the learners
/// (votes in through [`on_votes`](Self::on_votes)) and whose proposer stays silent until
/// [`take_over`](Self::take_over): phase 1 with a ballot above every one its learners saw.
#[pyclass(module = "inswitch._native", unsendable)]
pub struct InaasPaxosHosts {
    proposer: Proposer,
    learners: Vec<Learner>,
    violations: Vec<String>,
    reported: usize,
    /// A backup that has not taken over: its proposer sends nothing.
    standby: bool,
    /// Votes for learners in another process (no local learners).
    outbox: Vec<Vote>,
    /// The highest ballot among the votes the learners got.
    seen: u32,
}

impl InaasPaxosHosts {
    fn floor(&self) -> u64 {
        self.learners.iter().map(|l| l.delivered()).min().unwrap_or(0)
    }
}

#[pymethods]
impl InaasPaxosHosts {
    /// Lead tenant `uid`'s acceptors in slots `base..base+slots` (whose leases the tenant
    /// took); `rto_us` for the proposer's retransmissions. `proposer_id` (1..=255) is the
    /// ballot's low byte; `lead=False` starts a backup (see the type's docs).
    #[new]
    #[pyo3(signature = (uid, mac, service_mac, base, slots, now_us, rto_us, learners=3, proposer_id=1, lead=true))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        uid: u32,
        mac: &[u8],
        service_mac: &[u8],
        base: u16,
        slots: u16,
        now_us: u64,
        rto_us: u64,
        learners: usize,
        proposer_id: u8,
        lead: bool,
    ) -> PyResult<Self> {
        if slots == 0 || (learners == 0 && !lead) {
            return Err(PyValueError::new_err("no slots, or a backup without learners"));
        }
        if proposer_id == 0 {
            return Err(PyValueError::new_err("proposer_id: 1..=255"));
        }
        let mut proposer = Proposer::new(proposer_id, Ring { base, slots }, uid, mac6(mac)?, mac6(service_mac)?);
        proposer.rto_us = rto_us;
        if lead {
            proposer.take_over(0, now_us);
        }
        Ok(InaasPaxosHosts {
            proposer,
            learners: (0..learners).map(|_| Learner::default()).collect(),
            violations: Vec::new(),
            reported: 0,
            standby: !lead,
            outbox: Vec::new(),
            seen: 0,
        })
    }

    /// Whether `frame` is a Paxos answer (for the proposer), not an ordinary INaaS reply.
    #[staticmethod]
    fn is_paxos(frame: &[u8]) -> bool {
        frame.len() > 14 && wire::inaas::is_paxos(frame[14])
    }

    /// A value (non-zero) to be chosen.
    fn propose(&mut self, value: i32) -> PyResult<()> {
        if value == 0 {
            return Err(PyValueError::new_err("0 is the no-op"));
        }
        self.proposer.propose(value);
        Ok(())
    }

    fn on_frame(&mut self, frame: &[u8], now_us: u64) {
        if !self.standby {
            self.proposer.handle(now_us, frame);
        }
    }

    /// Retransmissions and votes out (as `PaxosGroup::step`): the frames to send, and the
    /// decisions since the last call as (instance, µs from its first 2a).
    #[allow(clippy::type_complexity)]
    fn step<'py>(&mut self, py: Python<'py>, now_us: u64) -> (Vec<Bound<'py, PyBytes>>, Vec<(u64, u64)>) {
        if self.standby {
            return (Vec::new(), Vec::new());
        }
        self.proposer.handle_timeout(now_us);
        let mut frames: Vec<_> = std::iter::from_fn(|| self.proposer.poll_transmit()).map(|f| PyBytes::new(py, &f)).collect();
        while let Some(v) = self.proposer.poll_vote() {
            if self.learners.is_empty() {
                self.outbox.push(v);
            }
            for l in &mut self.learners {
                if let Err(e) = l.on_vote(v) {
                    self.violations.push(e.to_string());
                }
            }
        }
        if !self.learners.is_empty() {
            let floor = self.floor();
            self.proposer.on_floor(floor, now_us);
        }
        frames.extend(std::iter::from_fn(|| self.proposer.poll_transmit()).map(|f| PyBytes::new(py, &f)));
        let out = self.proposer.latencies[self.reported..].to_vec();
        self.reported = self.proposer.latencies.len();
        (frames, out)
    }

    /// Every learner's delivered log, and the contradictions learners saw.
    fn logs(&self) -> (Vec<Vec<i32>>, Vec<String>) {
        (self.learners.iter().map(|l| l.log.clone()).collect(), self.violations.clone())
    }

    /// The votes for learners elsewhere since the last call, [`VOTE_LEN`] bytes each.
    fn take_votes<'py>(&mut self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let b: Vec<u8> = self.outbox.drain(..).flat_map(|v| v.to_bytes()).collect();
        PyBytes::new(py, &b)
    }

    /// Relayed votes (as `take_votes` packs them) for learner `learner`. Returns how many
    /// were well-formed.
    fn on_votes(&mut self, learner: usize, data: &[u8]) -> PyResult<usize> {
        let l = self.learners.get_mut(learner).ok_or_else(|| PyValueError::new_err(format!("no learner {learner}")))?;
        let mut n = 0;
        for c in data.chunks(VOTE_LEN) {
            if let Some(v) = Vote::from_bytes(c) {
                self.seen = self.seen.max(v.ballot);
                if let Err(e) = l.on_vote(v) {
                    self.violations.push(e.to_string());
                }
                n += 1;
            }
        }
        Ok(n)
    }

    /// Every learner delivered everything below `floor` (the minimum of the remote
    /// learners' acknowledgements).
    fn set_floor(&mut self, floor: u64, now_us: u64) {
        if !self.standby {
            self.proposer.on_floor(floor, now_us);
        }
    }

    /// Instances each learner delivered (its acknowledgement).
    fn delivered(&self) -> Vec<u64> {
        self.learners.iter().map(|l| l.delivered()).collect()
    }

    /// No learner holds a decided instance above a gap, and all delivered as many.
    fn gap_free(&self) -> bool {
        self.learners.iter().all(|l| l.undelivered() == 0) && self.learners.windows(2).all(|w| w[0].delivered() == w[1].delivered())
    }

    /// The backup becomes leader: phase 1 on the window above its learners' delivered
    /// prefix, with a round above the highest ballot its learners saw (a refusal raises it
    /// again, `Proposer::handle`). No-op for a leader. Returns the ballot.
    fn take_over(&mut self, now_us: u64) -> u32 {
        if self.standby {
            self.standby = false;
            self.proposer.floor = self.floor();
            self.proposer.take_over(self.seen, now_us);
        }
        self.proposer.ballot()
    }

    /// The proposer's ballot (0: a backup before it took over).
    #[getter]
    fn ballot(&self) -> u32 {
        if self.standby {
            0
        } else {
            self.proposer.ballot()
        }
    }

    /// Phase 1 is over: the proposer leads.
    #[getter]
    fn leading(&self) -> bool {
        self.proposer.leading
    }

    /// The value this proposer saw decided for `inst`, if any.
    fn decided_value(&self, inst: u64) -> Option<i32> {
        self.proposer.decided.get(&inst).map(|d| d.1)
    }

    /// Values still waiting for an instance or a decision.
    fn pending(&self) -> usize {
        self.proposer.pending()
    }

    /// Defer to a higher ballot (`Proposer::defer`): a refusal by one makes the proposer
    /// step down and go quiet instead of taking over above it.
    #[getter]
    fn get_defer(&self) -> bool {
        self.proposer.defer
    }
    #[setter]
    fn set_defer(&mut self, defer: bool) {
        self.proposer.defer = defer;
    }

    /// Ignore refusals (`Proposer::stubborn`): keep the ballot and go on resending.
    #[getter]
    fn get_stubborn(&self) -> bool {
        self.proposer.stubborn
    }
    #[setter]
    fn set_stubborn(&mut self, stubborn: bool) {
        self.proposer.stubborn = stubborn;
    }

    /// A duel of ballots (`Proposer::backoff_us`): refused by a higher ballot, wait this long
    /// (doubling, with jitter), then take over above it; 0 (default): at once.
    #[getter]
    fn get_backoff_us(&self) -> u64 {
        self.proposer.backoff_us
    }
    #[setter]
    fn set_backoff_us(&mut self, us: u64) {
        self.proposer.backoff_us = us;
    }

    /// With `backoff_us`: defer after this many duel rounds (`Proposer::max_duels`; 0: never).
    #[getter]
    fn get_max_duels(&self) -> u64 {
        self.proposer.max_duels
    }
    #[setter]
    fn set_max_duels(&mut self, n: u64) {
        self.proposer.max_duels = n;
    }

    /// When the proposer has timed work (`Proposer::poll_timeout`, µs; None: none).
    fn poll_timeout(&self) -> Option<u64> {
        if self.standby {
            None
        } else {
            self.proposer.poll_timeout()
        }
    }

    /// The higher ballot the proposer stepped down to (with `defer`), if it did.
    #[getter]
    fn stepped_down(&self) -> Option<u32> {
        self.proposer.stepped_down
    }

    /// The proposer's counters: frames sent (first sends and retransmissions), resent,
    /// acceptors' refusals by a higher ballot, answers without a lease, phase-1 rounds.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = &self.proposer.stats;
        let d = PyDict::new(py);
        for (k, v) in [
            ("sent", s.sent),
            ("resent", s.resent),
            ("refused", s.refused),
            ("no_lease", s.no_lease),
            ("rounds", s.rounds),
            ("duels", s.duels),
        ] {
            d.set_item(k, v)?;
        }
        Ok(d)
    }

    /// Every (instance, ballot, value) the proposer saw decided.
    fn decisions(&self) -> Vec<(u64, u32, i32)> {
        self.proposer.decided.iter().map(|(i, (b, v))| (*i, *b, *v)).collect()
    }
}

/// Paxos acceptor `j` as a host process (`hostlib::inaas::paxos::HostAcceptor`): the
/// host-only baseline's acceptors in `tenants run --real`, with the switch acceptor's
/// semantics.
#[pyclass(module = "inswitch._native", unsendable)]
pub struct InaasPaxosAcceptor {
    inner: HostAcceptor,
}

#[pymethods]
impl InaasPaxosAcceptor {
    #[new]
    fn new(j: usize) -> PyResult<Self> {
        if j >= ACCEPTORS {
            return Err(PyValueError::new_err(format!("acceptor {j}: 0..{ACCEPTORS}")));
        }
        Ok(InaasPaxosAcceptor { inner: HostAcceptor::new(j) })
    }

    /// The answer (an INaaS header) to a Paxos request's INaaS header; None: not one.
    fn answer<'py>(&mut self, py: Python<'py>, req: &[u8]) -> Option<Bound<'py, PyBytes>> {
        self.inner.answer(req).map(|a| PyBytes::new(py, &a))
    }

    /// Counters: promised, voted, refused, stale, malformed.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = &self.inner.stats;
        let d = PyDict::new(py);
        for (k, v) in [("promised", s.promised), ("voted", s.voted), ("refused", s.refused), ("stale", s.stale), ("malformed", s.malformed)]
        {
            d.set_item(k, v)?;
        }
        Ok(d)
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<InaasPaxosHosts>()?;
    m.add_class::<InaasPaxosAcceptor>()?;
    m.add_function(wrap_pyfunction!(paxos_run, m)?)?;
    m.add_class::<InaasService>()?;
    m.add_class::<InaasGoalkeeper>()?;
    m.add_function(wrap_pyfunction!(inaas_frame, m)?)?;
    m.add_function(wrap_pyfunction!(inaas_reply, m)?)?;
    Ok(())
}
