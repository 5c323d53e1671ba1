//! A pipe: ingress, traffic manager and egress for the ports mapped to it, with its own
//! register state (as on a real multi-pipe switch).
//!
//! Sans-IO: a pipe is driven with batches of received packets and the current time and
//! produces packets per egress port, PacketIn messages and digests. It never reads a
//! clock, opens a socket or spawns a thread; the driver in `ports` (threads and real
//! ports) and the single-threaded [`crate::switch::Switch`] (tests, benchmarks,
//! simulation) both drive this same code.
//!
//! Multi-pipe: a packet's ingress runs in the pipe of its ingress port, its egress in the
//! pipe of its egress port. Ingress output goes into a [`Handoff`] with one vector per
//! destination pipe; the driver passes each vector to that pipe's [`Pipe::enqueue`].

use std::sync::Arc;

use crate::base::{ControlError, DropCode, Gress};
use crate::control::{ControlOp, ControlReply, Replica, WriteOp};
use crate::counters::Counters;
use crate::packet::{BufPool, PacketBuf, PacketMeta, PortId, PORT_CPU, PORT_PKTGEN, PORT_RECIRC};
use crate::pass::{DigestMsg, Pass, PassEnv, ProgramState, TraceMode, Traced, Untraced, Violation};
use crate::program::{id_prefix, Program, ProgramSet};
use crate::table::params_from_bytes;
use crate::tm::TrafficManager;
// Re-exported: drivers configure and feed a pipe with these.
pub use crate::tm::{Handoff, PacketIn, PipeConfig, PortMap};

struct PktGen {
    program: usize,
    name: String,
    period_ns: u64,
    next_ns: Option<u64>,
    packet: Vec<u8>,
}

/// One program as the packet path sees it: the program and its state in this pipe side
/// by side, so a pass indexes one vector once and does not go through the program set's
/// `Arc` for them.
struct ProgSlot {
    program: Arc<dyn Program>,
    state: ProgramState,
}

/// One pipe of the switch.
pub struct Pipe {
    id: u8,
    set: Arc<ProgramSet>,
    progs: Vec<ProgSlot>,
    /// The base program (copied from the set for the packet path).
    base: Option<u8>,
    /// Whether any program has classification rules (if not, the parser has nothing to do).
    classifies: bool,
    /// Time and digests, shared by all passes.
    env: PassEnv,
    pktgens: Vec<PktGen>,
    /// What the open passes of a batch loop keep between two batches (see [`Passes`]).
    spare: PassStore,
    tm: TrafficManager,
}

impl Pipe {
    pub fn new(id: u8, set: Arc<ProgramSet>, map: PortMap, cfg: PipeConfig) -> Pipe {
        let progs = set
            .programs()
            .iter()
            .enumerate()
            .map(|(i, p)| ProgSlot { program: p.clone(), state: ProgramState::new(p.decl(), i as u8) })
            .collect();
        let classifies = set.programs().iter().any(|p| !p.decl().classify.is_empty());
        let pktgens = set
            .programs()
            .iter()
            .enumerate()
            .flat_map(|(i, p)| {
                p.decl().packet_generators.iter().map(move |g| PktGen {
                    program: i,
                    name: g.name.clone(),
                    period_ns: g.period_ns,
                    next_ns: None,
                    packet: g.packet.clone(),
                })
            })
            .collect();
        Pipe {
            id,
            progs,
            base: set.base(),
            classifies,
            env: PassEnv::new(cfg.digest_capacity),
            pktgens,
            spare: PassStore::default(),
            tm: TrafficManager::new(id, map, cfg, set.len()),
            set,
        }
    }

    pub fn id(&self) -> u8 {
        self.id
    }
    pub fn set(&self) -> &Arc<ProgramSet> {
        &self.set
    }
    pub fn port_map(&self) -> &PortMap {
        &self.tm.map
    }
    pub fn counters(&self) -> &Counters {
        &self.tm.counters
    }
    pub fn pool(&mut self) -> &mut BufPool {
        &mut self.tm.pool
    }
    pub fn state(&self, program: usize) -> &ProgramState {
        &self.progs[program].state
    }
    pub fn state_mut(&mut self, program: usize) -> &mut ProgramState {
        &mut self.progs[program].state
    }
    pub fn config(&self) -> &PipeConfig {
        &self.tm.cfg
    }

    /// Packets waiting in this pipe's queues (egress, recirculation).
    pub fn pending(&self) -> usize {
        // The queues of this pipe's ports, counted in place (drivers poll this between
        // calls: no list of ports is built for it).
        let mine = self.tm.queues.iter().enumerate().filter(|&(p, _)| self.tm.map.pipe_of(p as PortId) == Some(self.id));
        self.tm.recirc.len() + self.tm.recirc_due_left + mine.map(|(_, q)| q.len()).sum::<usize>()
    }

    /// When the pipe next has work without new input (packet generator, shaped queue).
    pub fn next_deadline(&self) -> Option<u64> {
        let g = self.pktgens.iter().filter(|g| g.period_ns > 0).filter_map(|g| g.next_ns).min();
        let q = if self.tm.cfg.port_rate_bps.is_some() {
            self.tm.queues.iter().filter(|q| !q.is_empty()).map(|q| q.next_free_ns()).min()
        } else {
            None
        };
        // Recirculations held back by the recirculation port's rate.
        let r = (self.tm.cfg.recirc_rate().is_some() && !self.tm.recirc.is_empty()).then(|| self.tm.recirc_port.next_free_ns());
        let q = match (q, r) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match (g, q) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    // ---- ingress ------------------------------------------------------------------------

    /// Run ingress on received packets (draining `rx`), on packets due to recirculate and
    /// on generated packets; results go to this pipe's queues or to `out` by destination pipe.
    pub fn ingress(&mut self, rx: &mut Vec<PacketBuf>, now: u64, out: &mut Handoff) {
        self.env.now_ns = now;
        self.tm.counters.batches += 1;
        if !self.pktgens.is_empty() {
            self.run_pktgens(now, out);
        }
        let n = self.recirc_admitted(now);
        if n == 0 && rx.is_empty() {
            return;
        }
        // One test per call: while no trace session is armed, the batch loops run with the
        // trace hooks compiled out (no hook could record anything).
        if self.env.trace.borrow().is_some() {
            self.ingress_loops::<Traced>(rx, n, out)
        } else {
            self.ingress_loops::<Untraced>(rx, n, out)
        }
    }

    /// The batch loops of [`Pipe::ingress`]: the first `n` recirculated packets waiting,
    /// then `rx`, in trace mode `M`.
    fn ingress_loops<M: TraceMode>(&mut self, rx: &mut Vec<PacketBuf>, n: usize, out: &mut Handoff) {
        let Pipe { progs, env, tm, set, base, classifies, spare, .. } = self;
        let set: &ProgramSet = set;
        let mut passes = Passes::<M>::open(progs, *base, Gress::Ingress, env, spare);
        // The first `n` waiting packets, in order; what they recirculate goes behind the
        // rest of the queue.
        let mut due = std::mem::take(&mut tm.recirc_due);
        if n == tm.recirc.len() {
            std::mem::swap(&mut due, &mut tm.recirc);
        } else {
            due.extend(tm.recirc.drain(..n));
        }
        tm.recirc_due_left = due.len();
        if !due.is_empty() {
            let job = Job::Recirculated { due: due.drain(..).peekable(), owner: None };
            let mut batch = Batch { passes: &mut passes, tm: &mut *tm, set, classifies: *classifies, out: &mut *out, job };
            // Runs of packets kept by one program, in order: one virtual call per run.
            while let Some(program) = batch.next_recirculated_run() {
                dispatch(program, &mut batch);
            }
        }
        tm.recirc_due = due;
        if !rx.is_empty() {
            let program = passes.base_program();
            let job = Job::Received { rx: rx.drain(..) };
            dispatch(program, &mut Batch { passes: &mut passes, tm: &mut *tm, set, classifies: *classifies, out, job });
        }
        passes.close(&mut tm.counters, spare);
        if !tm.traced_drops.is_empty() {
            flush_traced_drops(env, tm);
        }
    }

    // ---- packet traces ----------------------------------------------------------------------

    /// Arm a trace session (replacing any), or disarm with None (records not taken are
    /// dropped; packets in flight with an id record nothing more).
    pub fn trace_arm(&mut self, session: Option<crate::trace::TraceSession>) {
        let pipes = self.tm.map.pipes();
        *self.env.trace.borrow_mut() = session.map(|s| Box::new(crate::trace::Tracer::new(s, self.id, pipes)));
        self.tm.traced_drops.clear();
    }

    /// The records complete at `now`: no copy queued in this pipe and no event for
    /// `quiet_ns` (0 with an idle pipeline: everything recorded so far).
    pub fn trace_take(&mut self, now: u64, quiet_ns: u64) -> crate::trace::TraceTake {
        if !self.tm.traced_drops.is_empty() {
            flush_traced_drops(&self.env, &mut self.tm);
        }
        let tm = &self.tm;
        let queued: Vec<u16> = tm
            .recirc
            .iter()
            .chain(tm.queues.iter().flat_map(|q| q.q.iter().chain(q.fresh.iter())))
            .map(|p| p.meta.trace)
            .filter(|&t| t != 0)
            .collect();
        match self.env.trace.borrow_mut().as_mut() {
            Some(t) => t.take(now, quiet_ns, &queued),
            None => crate::trace::TraceTake::default(),
        }
    }

    /// How many waiting recirculations run now: at most a batch, and at the recirculation
    /// port's line rate (the rest wait; see [`PipeConfig::recirc_rate_bps`]).
    #[inline]
    fn recirc_admitted(&mut self, now: u64) -> usize {
        let tm = &mut self.tm;
        let n = tm.recirc.len().min(tm.cfg.recirc_per_batch);
        let Some(rate) = tm.cfg.recirc_rate() else {
            tm.counters.recirc_bytes += tm.recirc[..n].iter().map(|p| p.len() as u64).sum::<u64>();
            return n;
        };
        let mut k = 0;
        while k < n && tm.recirc_port.admit(now, Some(rate), tm.recirc[k].len()) {
            tm.counters.recirc_bytes += tm.recirc[k].len() as u64;
            k += 1;
        }
        if k < n {
            tm.counters.recirc_rate_waits += 1;
        }
        k
    }

    fn run_pktgens(&mut self, now: u64, out: &mut Handoff) {
        for i in 0..self.pktgens.len() {
            let g = &mut self.pktgens[i];
            if g.period_ns == 0 {
                continue;
            }
            let next = *g.next_ns.get_or_insert(now + g.period_ns);
            if now < next {
                continue;
            }
            // One packet per period; if the driver fell behind, do not burst to catch up.
            g.next_ns = Some(if now - next >= g.period_ns { now + g.period_ns } else { next + g.period_ns });
            let mut pkt = self.tm.pool.get();
            if !pkt.copy_from(&self.pktgens[i].packet) {
                self.tm.pool.put(pkt);
                continue;
            }
            pkt.port = PORT_PKTGEN;
            pkt.ts_ns = now;
            pkt.meta = PacketMeta::new(PORT_PKTGEN);
            self.tm.counters.pktgen_packets += 1;
            self.ingress_one(pkt, out);
        }
    }

    /// Ingress of a single packet (generated, or a PacketOut).
    fn ingress_one(&mut self, pkt: PacketBuf, out: &mut Handoff) {
        let Pipe { progs, env, tm, set, base, classifies, spare, .. } = self;
        let mut passes = Passes::<Traced>::open(progs, *base, Gress::Ingress, env, spare);
        // One packet: through the trait object (with the trace hooks: not a loop).
        let program = passes.base_program();
        ingress_packet(&mut passes, program, tm, set, *classifies, pkt, out);
        passes.close(&mut tm.counters, spare);
        if !tm.traced_drops.is_empty() {
            flush_traced_drops(env, tm);
        }
    }

    // ---- traffic manager ------------------------------------------------------------------

    /// Put packets from any pipe's ingress into this pipe's egress queues.
    pub fn enqueue(&mut self, items: &mut Vec<PacketBuf>) {
        for it in items.drain(..) {
            self.tm.enqueue_one(it);
        }
    }

    // ---- egress ---------------------------------------------------------------------------

    /// Dequeue from this pipe's ports and run egress; frames to send go to `tx[port]`,
    /// egress clones to `out`.
    pub fn egress(&mut self, now: u64, tx: &mut [Vec<PacketBuf>], out: &mut Handoff) {
        self.env.now_ns = now;
        let Pipe { progs, env, tm, base, spare, set, classifies, .. } = self;
        // Nothing queued (every port's queue, this pipe's or not): no pass to open.
        // (`draining` is zero outside this loop.)
        if tm.queues.iter().all(|q| q.fresh.is_empty() && q.q.is_empty()) {
            return;
        }
        // As in ingress: the trace hooks compiled out while no trace session is armed.
        if env.trace.borrow().is_some() {
            let mut passes = Passes::<Traced>::open(progs, *base, Gress::Egress, env, spare);
            let program = passes.base_program();
            let job = Job::Egress { now, tx };
            dispatch(program, &mut Batch { passes: &mut passes, tm: &mut *tm, set, classifies: *classifies, out, job });
            passes.close(&mut tm.counters, spare);
        } else {
            let mut passes = Passes::<Untraced>::open(progs, *base, Gress::Egress, env, spare);
            let program = passes.base_program();
            let job = Job::Egress { now, tx };
            dispatch(program, &mut Batch { passes: &mut passes, tm: &mut *tm, set, classifies: *classifies, out, job });
            passes.close(&mut tm.counters, spare);
        }
        if !tm.traced_drops.is_empty() {
            flush_traced_drops(env, tm);
        }
    }

    // ---- controller packets -------------------------------------------------------------------

    /// A PacketOut: with an egress port it goes straight to that port's queue (bypassing
    /// ingress, as the usual packet-out header does); without one it enters ingress from
    /// the CPU port.
    pub fn packet_out(&mut self, bytes: &[u8], egress: Option<PortId>, now: u64, out: &mut Handoff) -> Result<(), ControlError> {
        self.env.now_ns = now;
        let mut pkt = self.tm.pool.get();
        if !pkt.copy_from(bytes) {
            self.tm.pool.put(pkt);
            return Err(ControlError::InvalidArgument(format!(
                "packet of {} bytes exceeds the buffer size {}",
                bytes.len(),
                self.tm.cfg.buf_capacity
            )));
        }
        pkt.port = PORT_CPU;
        pkt.ts_ns = now;
        pkt.meta = PacketMeta::new(PORT_CPU);
        self.tm.counters.packet_out += 1;
        match egress {
            Some(p) => {
                if self.tm.map.pipe_of(p).is_none() {
                    self.tm.pool.put(pkt);
                    return Err(ControlError::InvalidArgument(format!("no port {p}")));
                }
                pkt.meta.egress_port = p;
                self.tm.route(pkt, Some(0), out);
            }
            None => self.ingress_one(pkt, out),
        }
        Ok(())
    }

    /// Move PacketIn messages out (oldest first).
    pub fn take_packet_ins(&mut self, out: &mut Vec<PacketIn>) {
        out.extend(self.tm.cpu.drain(..));
    }

    /// Move digests out (oldest first).
    pub fn take_digests(&mut self, out: &mut Vec<DigestMsg>) {
        let d = self.env.digests.get_mut();
        self.tm.counters.digests += d.len() as u64;
        out.append(d);
    }

    /// Drop packets this pipe's ingress sent towards another pipe that the traffic
    /// manager could not take (its ring to that pipe was full): counted as
    /// [`DropCode::PIPE_RING_FULL`] drops at their egress ports, buffers back to the pool.
    pub fn drop_crossing(&mut self, items: impl Iterator<Item = PacketBuf>) {
        for pkt in items {
            self.tm.trace_drop(&pkt, DropCode::PIPE_RING_FULL, None);
            self.tm.counters.ports[pkt.meta.egress_port as usize].queue_drops += 1;
            self.tm.counters.drops[DropCode::PIPE_RING_FULL.0 as usize] += 1;
            self.tm.pool.put(pkt);
        }
    }

    /// Return a buffer to this pipe's pool (after transmission).
    #[inline]
    pub fn recycle(&mut self, pkt: PacketBuf) {
        self.tm.pool.put(pkt);
    }

    // ---- control plane -----------------------------------------------------------------------

    /// Apply a control-plane operation.
    pub fn control(&mut self, op: &ControlOp) -> Result<ControlReply, ControlError> {
        let set = self.set.clone();
        let table = |id: u32| set.resolve(id, id_prefix::TABLE).ok_or_else(|| ControlError::NotFound(format!("no table with id {id:#x}")));
        let action_of = |prog: u8, table_idx: usize, id: u32| -> Result<u16, ControlError> {
            let a = set
                .resolve(id, id_prefix::ACTION)
                .filter(|a| a.program == prog)
                .ok_or_else(|| ControlError::NotFound(format!("no action with id {id:#x} in this program")))?;
            let t = &set.decl(prog as usize).tables[table_idx];
            if !t.actions.contains(&a.index) {
                return Err(ControlError::InvalidArgument(format!(
                    "action {} is not an action of table {}",
                    set.decl(prog as usize).actions[a.index as usize].name,
                    t.name
                )));
            }
            Ok(a.index)
        };
        match op {
            ControlOp::TableWrite { table_id, op, matches, priority, action_id, params } => {
                let t = table(*table_id)?;
                if let Some(p) = profile_of(&set, t.program, t.index) {
                    return Err(ControlError::InvalidArgument(format!(
                        "table {} is implemented by action profile {}: its entries point at members or groups",
                        set.decl(t.program as usize).tables[t.index as usize].name,
                        set.decl(t.program as usize).action_profiles[p].name
                    )));
                }
                let st = &mut self.progs[t.program as usize].state.read_only.tables[t.index as usize];
                let (key, mask) = st.normalize(matches)?;
                match op {
                    WriteOp::Delete => st.delete(&key, &mask, *priority)?,
                    WriteOp::Insert | WriteOp::Modify => {
                        let a = action_of(t.program, t.index as usize, *action_id)?;
                        let p = params_from_bytes(&set.decl(t.program as usize).actions[a as usize], params)?;
                        self.progs[t.program as usize].state.read_only.tables[t.index as usize].write(
                            key,
                            mask,
                            *priority,
                            crate::base::ActionId(a),
                            &p,
                            *op == WriteOp::Modify,
                        )?;
                    }
                }
                Ok(ControlReply::Done)
            }
            ControlOp::TableSetDefault { table_id, action_id, params } => {
                let t = table(*table_id)?;
                let a = action_of(t.program, t.index as usize, *action_id)?;
                let p = params_from_bytes(&set.decl(t.program as usize).actions[a as usize], params)?;
                self.progs[t.program as usize].state.read_only.tables[t.index as usize].set_default(crate::base::ActionId(a), &p)?;
                Ok(ControlReply::Done)
            }
            ControlOp::TableResetDefault { table_id } => {
                let t = table(*table_id)?;
                self.progs[t.program as usize].state.read_only.tables[t.index as usize].reset_default();
                Ok(ControlReply::Done)
            }
            ControlOp::TableClear { table_id } => {
                let t = table(*table_id)?;
                self.progs[t.program as usize].state.read_only.tables[t.index as usize].clear();
                Ok(ControlReply::Done)
            }
            ControlOp::TableRead { table_id } => {
                let t = table(*table_id)?;
                let decl = set.decl(t.program as usize);
                let st = &self.progs[t.program as usize].state.read_only.tables[t.index as usize];
                let entries =
                    st.entries(
                        |a| if crate::selector::is_ref(a) { 1 } else { decl.actions.get(a.0 as usize).map_or(0, |a| a.params.len()) },
                    );
                let (da, dp) = st.default_action();
                let np = decl.actions.get(da.0 as usize).map_or(0, |a| a.params.len());
                Ok(ControlReply::TableEntries { entries, default_action: da.0, default_params: dp[..np].to_vec() })
            }
            ControlOp::TableWriteIndirect { table_id, op, matches, priority, target } => {
                let t = table(*table_id)?;
                let prog = &mut self.progs[t.program as usize].state.read_only;
                let p = profile_of(&set, t.program, t.index).ok_or_else(|| {
                    ControlError::InvalidArgument(format!(
                        "table {} has no action profile: its entries take an action",
                        set.decl(t.program as usize).tables[t.index as usize].name
                    ))
                })?;
                let st = &prog.tables[t.index as usize];
                let (key, mask) = st.normalize(matches)?;
                if *op == WriteOp::Delete {
                    prog.tables[t.index as usize].delete(&key, &mask, *priority)?;
                } else {
                    prog.profiles[p].check_ref(*target)?;
                    let (a, params) = target.stored();
                    prog.tables[t.index as usize].write(key, mask, *priority, a, &params, *op == WriteOp::Modify)?;
                }
                Ok(ControlReply::Done)
            }
            ControlOp::ProfileMemberWrite { profile_id, op, member_id, action_id, params } => {
                let p = set
                    .resolve(*profile_id, id_prefix::ACTION_PROFILE)
                    .ok_or_else(|| ControlError::NotFound(format!("no action profile with id {profile_id:#x}")))?;
                let decl = set.decl(p.program as usize);
                let pd = &decl.action_profiles[p.index as usize];
                let (a, values) = if *op == WriteOp::Delete {
                    (crate::decl::ActionId(0), Vec::new())
                } else {
                    // A member's action must be an action of (every) table the profile implements.
                    let mut a = 0;
                    for &ti in &pd.tables {
                        a = action_of(p.program, ti as usize, *action_id)?;
                    }
                    (crate::decl::ActionId(a), params_from_bytes(&decl.actions[a as usize], params)?)
                };
                let read_only = &mut self.progs[p.program as usize].state.read_only;
                let in_use = *op == WriteOp::Delete && profile_in_use(read_only, pd, crate::selector::IndirectRef::Member(*member_id));
                read_only.profiles[p.index as usize].write_member(*op, *member_id, a, &values, in_use)?;
                Ok(ControlReply::Done)
            }
            ControlOp::ProfileGroupWrite { profile_id, op, group_id, members } => {
                let p = set
                    .resolve(*profile_id, id_prefix::ACTION_PROFILE)
                    .ok_or_else(|| ControlError::NotFound(format!("no action profile with id {profile_id:#x}")))?;
                let pd = &set.decl(p.program as usize).action_profiles[p.index as usize];
                let read_only = &mut self.progs[p.program as usize].state.read_only;
                let in_use = *op == WriteOp::Delete && profile_in_use(read_only, pd, crate::selector::IndirectRef::Group(*group_id));
                read_only.profiles[p.index as usize].write_group(*op, *group_id, members, in_use)?;
                Ok(ControlReply::Done)
            }
            ControlOp::ProfileRead { profile_id } => {
                let p = set
                    .resolve(*profile_id, id_prefix::ACTION_PROFILE)
                    .ok_or_else(|| ControlError::NotFound(format!("no action profile with id {profile_id:#x}")))?;
                let decl = set.decl(p.program as usize);
                let st = &self.progs[p.program as usize].state.read_only.profiles[p.index as usize];
                let members = st
                    .members()
                    .into_iter()
                    .map(|(id, a, mut v)| {
                        v.truncate(decl.actions.get(a.0 as usize).map_or(0, |a| a.params.len()));
                        (id, a, v)
                    })
                    .collect();
                Ok(ControlReply::ProfileEntries { members, groups: st.groups() })
            }
            ControlOp::RegisterRead { register_id, index } => {
                let r = set
                    .resolve(*register_id, id_prefix::REGISTER)
                    .ok_or_else(|| ControlError::NotFound(format!("no register with id {register_id:#x}")))?;
                let cells = self.progs[r.program as usize]
                    .state
                    .register_get(r.index as usize)
                    .ok_or_else(|| ControlError::NotFound(format!("no register with id {register_id:#x}")))?;
                match index {
                    Some(i) => {
                        let v =
                            cells.get(*i as usize).ok_or_else(|| ControlError::OutOfRange(format!("index {i} >= size {}", cells.len())))?;
                        Ok(ControlReply::RegisterCells(vec![(*i, *v)]))
                    }
                    None => Ok(ControlReply::RegisterCells(cells.iter().enumerate().map(|(i, v)| (i as u32, *v)).collect())),
                }
            }
            ControlOp::RegisterWrite { register_id, index, value } => {
                let r = set
                    .resolve(*register_id, id_prefix::REGISTER)
                    .ok_or_else(|| ControlError::NotFound(format!("no register with id {register_id:#x}")))?;
                let bits = set.decl(r.program as usize).registers[r.index as usize].cell_bits;
                if bits < 64 && *value >> bits != 0 {
                    return Err(ControlError::InvalidArgument(format!("value {value:#x} does not fit in a {bits}-bit cell")));
                }
                let cells = self.progs[r.program as usize]
                    .state
                    .register_get_mut(r.index as usize)
                    .ok_or_else(|| ControlError::NotFound(format!("no register with id {register_id:#x}")))?;
                match index {
                    Some(i) => {
                        let n = cells.len();
                        *cells.get_mut(*i as usize).ok_or_else(|| ControlError::OutOfRange(format!("index {i} >= size {n}")))? = *value;
                    }
                    None => cells.fill(*value),
                }
                Ok(ControlReply::Done)
            }
            ControlOp::McastGroupWrite { op, group, replicas } => {
                self.check_replicas(replicas)?;
                self.tm.pre.write_group(*op, *group, replicas.clone())?;
                Ok(ControlReply::Done)
            }
            ControlOp::McastGroupRead { group } => {
                let v: Vec<_> = self.tm.pre.groups().filter(|(g, _)| group.is_none_or(|x| x == *g)).map(|(g, r)| (g, r.clone())).collect();
                if group.is_some() && v.is_empty() {
                    return Err(ControlError::NotFound(format!("multicast group {}", group.unwrap_or(0))));
                }
                Ok(ControlReply::McastGroups(v))
            }
            ControlOp::CloneSessionWrite { op, session, session_cfg } => {
                self.check_replicas(&session_cfg.replicas)?;
                self.tm.pre.write_session(*op, *session, session_cfg.clone())?;
                Ok(ControlReply::Done)
            }
            ControlOp::CloneSessionRead { session } => {
                let v: Vec<_> =
                    self.tm.pre.sessions().filter(|(s, _)| session.is_none_or(|x| x == *s)).map(|(s, c)| (s, c.clone())).collect();
                if session.is_some() && v.is_empty() {
                    return Err(ControlError::NotFound(format!("clone session {}", session.unwrap_or(0))));
                }
                Ok(ControlReply::CloneSessions(v))
            }
            ControlOp::DigestConfig { digest_id, enabled } => {
                let d = set
                    .resolve(*digest_id, id_prefix::DIGEST)
                    .ok_or_else(|| ControlError::NotFound(format!("no digest with id {digest_id:#x}")))?;
                self.progs[d.program as usize].state.read_only.digest_enabled[d.index as usize] = *enabled;
                Ok(ControlReply::Done)
            }
            ControlOp::PktGenConfig { program, name, period_ns } => {
                let pi = set.index_of(program).ok_or_else(|| ControlError::NotFound(format!("no program {program}")))?;
                let g = self
                    .pktgens
                    .iter_mut()
                    .find(|g| g.program == pi && g.name == *name)
                    .ok_or_else(|| ControlError::NotFound(format!("no packet generator {program}.{name}")))?;
                g.period_ns = *period_ns;
                g.next_ns = None;
                Ok(ControlReply::Done)
            }
        }
    }

    fn check_replicas(&self, replicas: &[Replica]) -> Result<(), ControlError> {
        for r in replicas {
            if r.port != PORT_RECIRC && r.port != PORT_CPU && self.tm.map.pipe_of(r.port).is_none() {
                return Err(ControlError::InvalidArgument(format!("replica port {} does not exist", r.port)));
            }
        }
        Ok(())
    }
}

/// One batch loop of a pipe, run by [`Program::run_batch`] of the program it is
/// dispatched to. The loop is compiled once per program type with that program's control
/// block inlined, so a batch crosses one virtual call instead of one per packet and pass
/// (the call, its prologue and epilogue and the caller's spills). Everything the pipe does
/// per packet is in the loop, unchanged: each pass with its guard (stage order, one access
/// per object), violations, drops, recirculations and the traffic manager. Another program
/// of the set (an application beside the base program) is called through its trait object
/// inside the loop. Opaque: only the pipe makes and runs one.
pub struct Batch<'b, 'a, M = Traced> {
    passes: &'b mut Passes<'a, M>,
    tm: &'b mut TrafficManager,
    set: &'b ProgramSet,
    classifies: bool,
    out: &'b mut Handoff,
    job: Job<'b>,
}

/// What a [`Batch`] loops over.
enum Job<'b> {
    /// Received packets: ingress with the base program.
    Received { rx: std::vec::Drain<'b, PacketBuf> },
    /// The recirculated packets due now, in order. A run is the leading packets kept by
    /// `owner` (see [`recirc_owner`]), dispatched to that program; with `owner` None, the
    /// leading packets no program keeps, through ingress with the base program.
    Recirculated { due: std::iter::Peekable<std::vec::Drain<'b, PacketBuf>>, owner: Option<u8> },
    /// Egress of this pipe's queues with the base program.
    Egress { now: u64, tx: &'b mut [Vec<PacketBuf>] },
}

/// What [`Program::run_batch`] returns: only this crate makes one, so an override of it
/// can do nothing but fail; the pipe's loop always runs as written here.
pub struct BatchRan(());

/// Run `batch` with `program`: one virtual call for the whole loop (None: a set without a
/// base program).
fn dispatch<M: TraceMode>(program: Option<&dyn Program>, batch: &mut Batch<'_, '_, M>) {
    #[cfg(test)]
    tests::DISPATCHES.with(|d| d.set(d.get() + 1));
    let BatchRan(()) = match program {
        Some(p) => M::run_batch(p, batch),
        None => batch.run::<dyn Program>(None),
    };
}

impl<'a, M: TraceMode> Batch<'_, 'a, M> {
    /// The loop, with `program` (the one dispatched to) called directly.
    pub(crate) fn run<P: Program + ?Sized>(&mut self, program: Option<&P>) -> BatchRan {
        // Plain locals for the loops, not fields behind `self`.
        let Batch { passes, tm, set, classifies, out, job } = self;
        let (passes, tm, set, classifies, out): (&mut Passes<'_, M>, &mut TrafficManager, &ProgramSet, bool, &mut Handoff) =
            (passes, tm, set, *classifies, out);
        match job {
            Job::Received { rx } => {
                for mut pkt in rx {
                    let port = pkt.port;
                    if let Some(c) = tm.counters.ports.get_mut(port as usize) {
                        c.rx_packets += 1;
                        c.rx_bytes += pkt.len() as u64;
                    }
                    pkt.meta.reset(port);
                    if M::TRACE_HOOKS {
                        trace_start(passes.env, set, classifies, &mut pkt);
                    }
                    ingress_packet(passes, program, tm, set, classifies, pkt, out);
                }
            }
            Job::Recirculated { due, owner: Some(o) } => {
                let o = *o;
                let program = program.expect("a run of kept packets is dispatched to their program");
                while let Some(mut pkt) = due.next_if(|p| p.meta.owner == o) {
                    recirculated_meta(&mut pkt, tm);
                    passes.arrive(o, &pkt);
                    let blame = passes.other(&mut pkt, o, &mut tm.counters, Ingress(program)).or(Some(o));
                    after_ingress(tm, pkt, blame, || set.recirc_limit(o as usize), out);
                }
            }
            Job::Recirculated { due, owner: None } => {
                let base = passes.base_id();
                while let Some(mut pkt) = due.next_if(|p| recirc_owner(set, base, p).is_none()) {
                    recirculated_meta(&mut pkt, tm);
                    ingress_packet(passes, program, tm, set, classifies, pkt, out);
                }
            }
            Job::Egress { now, tx } => egress_loop(program, passes, tm, *now, tx, out),
        }
        BatchRan(())
    }

    /// The next run of a [`Job::Recirculated`]: its owner set, and the program to
    /// dispatch it to (None inside: a set without a base program); None when no packet is
    /// left.
    fn next_recirculated_run(&mut self) -> Option<Option<&'a dyn Program>> {
        let Job::Recirculated { due, owner } = &mut self.job else { return None };
        let first = due.peek()?;
        *owner = recirc_owner(self.set, self.passes.base_id(), first);
        Some(match *owner {
            Some(o) => Some(self.passes.program(o)),
            None => self.passes.base_program(),
        })
    }
}

/// Egress of this pipe's queues: per port, the backlog, then what arrived since, within
/// the egress budget and the port's shaper; frames to send go to `tx[port]`. The base
/// program `base` is called directly (None: the set has none).
#[inline(always)]
fn egress_loop<P: Program + ?Sized, M: TraceMode>(
    base: Option<&P>,
    passes: &mut Passes<'_, M>,
    tm: &mut TrafficManager,
    now: u64,
    tx: &mut [Vec<PacketBuf>],
    out: &mut Handoff,
) {
    let shaped = tm.cfg.port_rate_bps.is_some();
    // The port number indexes the queues, the transmit vectors and the counters alike.
    #[allow(clippy::needless_range_loop)]
    for port in 0..tm.queues.len() {
        if tm.queues[port].is_empty() || tm.map.pipe_of(port as PortId) != Some(tm.id) {
            continue;
        }
        let txq = &mut tx[port];
        // Sent-frame counters are added once per port: packets are what the port's
        // transmit vector gained, bytes are summed as they go.
        let (sent_before, mut sent_bytes) = (txq.len(), 0u64);
        let mut left = tm.cfg.egress_budget;
        'port: while left > 0 {
            let q = &mut tm.queues[port];
            // The backlog first, one packet at a time. (The queue is re-read for every
            // packet: an egress clone may join this very queue.)
            if !q.q.is_empty() {
                // Without shaping every head packet may leave: skip the shaper's look.
                if shaped {
                    let Some(head) = q.q.front() else { break };
                    if !q.admit(now, tm.cfg.port_rate_bps, head.len()) {
                        break;
                    }
                }
                let Some(pkt) = q.q.pop_front() else { break };
                left -= 1;
                send(passes, base, tm, pkt, out, port, 0, txq, &mut sent_bytes);
                continue;
            }
            if q.fresh.is_empty() {
                break;
            }
            // Then what arrived since, as a batch.
            let mut fresh = std::mem::take(&mut q.fresh);
            let mut batch = fresh.drain(..);
            let mut blocked = false;
            while left > 0 {
                if shaped {
                    let Some(head) = batch.as_slice().first() else { break };
                    if !tm.queues[port].admit(now, tm.cfg.port_rate_bps, head.len()) {
                        blocked = true;
                        break;
                    }
                }
                let Some(pkt) = batch.next() else { break };
                left -= 1;
                // The rest of the batch is still queued, for any clone queued meanwhile.
                send(passes, base, tm, pkt, out, port, batch.len(), txq, &mut sent_bytes);
            }
            // What could not be sent stays queued, ahead of anything queued meanwhile.
            let q = &mut tm.queues[port];
            if batch.len() > 0 {
                q.q.extend(batch);
                q.q.extend(q.fresh.drain(..));
            } else {
                drop(batch);
            }
            if q.fresh.is_empty() {
                q.fresh = fresh; // keep the allocation
            }
            if blocked {
                break 'port;
            }
        }
        let c = &mut tm.counters.ports[port];
        c.tx_packets += (txq.len() - sent_before) as u64;
        c.tx_bytes += sent_bytes;
    }
}

/// What [`Passes`] keeps between two batch loops, so that opening them allocates nothing:
/// the buffers the open passes hold between packets (zero-capacity, never sent; see
/// [`Pass::load`]) and the allocation of the vector of open passes (always empty here).
#[derive(Default)]
struct PassStore {
    held: Vec<PacketBuf>,
    slots: Vec<SlotSpace>,
}

/// Room for one open pass: the size and alignment of `(Pass, &dyn Program)`, without its
/// borrows (the store outlives every batch loop, and the pipe moves between threads).
#[repr(C, align(8))]
struct SlotSpace([u8; std::mem::size_of::<(Pass<'static>, &'static dyn Program)>()]);

/// An empty vector with `v`'s allocation, of another element type of the same size and
/// alignment (the standard library collects a mapped `vec::IntoIter` in place; the map never
/// runs, the vector being empty).
fn recycle_vec<T, U>(mut v: Vec<T>) -> Vec<U> {
    const { assert!(std::mem::size_of::<T>() == std::mem::size_of::<U>() && std::mem::align_of::<T>() == std::mem::align_of::<U>()) };
    v.clear();
    v.into_iter().map(|_| unreachable!("the vector is empty")).collect()
}

/// The control block a pass runs: a program's ingress or egress. A trait rather than a
/// closure so that the call is forced inline into the batch loop (with the program's own
/// `#[inline(always)]` control blocks, the whole pass is then one piece of code).
trait Control {
    fn run<M: TraceMode>(&self, pass: &mut Pass<'_, M>);
}

/// A program's ingress control.
struct Ingress<'p, P: ?Sized>(&'p P);
/// A program's egress control.
struct Egress<'p, P: ?Sized>(&'p P);

impl<P: Program + ?Sized> Control for Ingress<'_, P> {
    #[inline(always)]
    fn run<M: TraceMode>(&self, pass: &mut Pass<'_, M>) {
        M::ingress(self.0, pass)
    }
}

impl<P: Program + ?Sized> Control for Egress<'_, P> {
    #[inline(always)]
    fn run<M: TraceMode>(&self, pass: &mut Pass<'_, M>) {
        M::egress(self.0, pass)
    }
}

/// The passes of a batch loop. Every program's pass stays open for the whole loop and
/// packets are moved through it (see [`Pass::load`]): per packet that is a pointer swap and
/// a fresh guard instead of building a pass, and each program's trait object is looked up
/// once. The base program runs on every packet; an application owning the packet runs in
/// its own open pass, on its own state, beside the base program's.
///
/// The control block a pass runs is the caller's closure: inside a [`Batch`] loop the
/// program the loop was dispatched to is called directly (its `ingress`/`egress` inlined),
/// any other program through its trait object.
struct Passes<'a, M> {
    gress: Gress,
    env: &'a PassEnv,
    /// One open pass per program, in the set's order.
    open: Vec<(Pass<'a, M>, &'a dyn Program)>,
    base: Option<u8>,
    /// Passes run through the base program's pass, added to its counters on close.
    count: u64,
}

impl<'a, M: TraceMode> Passes<'a, M> {
    /// `spare` holds what the open passes hold between packets (one zero-capacity buffer
    /// per program, never sent) and the vector's allocation; `close` gives them back.
    fn open(progs: &'a mut [ProgSlot], base: Option<u8>, gress: Gress, env: &'a PassEnv, spare: &mut PassStore) -> Self {
        let mut open: Vec<(Pass<'a, M>, &'a dyn Program)> = recycle_vec(std::mem::take(&mut spare.slots));
        open.extend(progs.iter_mut().map(|slot| {
            let held = spare.held.pop().unwrap_or_else(|| PacketBuf::with_capacity(0));
            (Pass::new(held, &mut slot.state, gress, env), &*slot.program)
        }));
        let base = base.filter(|&b| (b as usize) < open.len());
        Passes { gress, env, open, base, count: 0 }
    }

    /// Program `prog`'s pass over `pkt` (the packet is swapped in and out), running
    /// `control` (the program's ingress or egress); the program's index if the packet is
    /// now to be dropped.
    #[inline(always)]
    fn run(&mut self, pkt: &mut PacketBuf, prog: u8, counters: &mut Counters, control: impl Control) -> Option<u8> {
        let pass = &mut self.open[prog as usize].0;
        pass.load(pkt);
        control.run(pass);
        let v = pass.unload(pkt);
        if let Some(kind) = v {
            // (Inside the rare branch: a violation-free pass tests nothing more.)
            if M::TRACE_HOOKS && pkt.meta.trace != 0 {
                pass.trace_violation(kind);
            }
        }
        count_violation(pkt, prog, v, counters)
    }

    /// The base program's pass over `pkt` (`control`: its ingress or egress); the
    /// program's index if it dropped the packet.
    #[inline(always)]
    fn base(&mut self, pkt: &mut PacketBuf, counters: &mut Counters, control: impl Control) -> Option<u8> {
        let b = self.base?;
        self.count += 1;
        self.run(pkt, b, counters, control)
    }

    fn base_id(&self) -> Option<u8> {
        self.base
    }

    /// Program `prog`'s next pass is over `pkt` as it is now: keep its Ethernet addresses
    /// for it (before the base program's pass rewrites them; see `Pass::arrival_macs`).
    #[inline(always)]
    fn arrive(&mut self, prog: u8, pkt: &PacketBuf) {
        self.open[prog as usize].0.set_arrival(pkt);
    }

    /// Program `prog`, to call through its trait object.
    #[inline(always)]
    fn program(&self, prog: u8) -> &'a dyn Program {
        self.open[prog as usize].1
    }

    /// The base program, if the set has one.
    fn base_program(&self) -> Option<&'a dyn Program> {
        self.base.map(|b| self.program(b))
    }

    /// Program `prog`'s pass (not the base program) over `pkt` (`control`: its ingress or
    /// egress), counted here.
    #[inline(always)]
    fn other(&mut self, pkt: &mut PacketBuf, prog: u8, counters: &mut Counters, control: impl Control) -> Option<u8> {
        let c = &mut counters.programs[prog as usize];
        match self.gress {
            Gress::Ingress => c.ingress_passes += 1,
            Gress::Egress => c.egress_passes += 1,
        }
        self.run(pkt, prog, counters, control)
    }

    /// Count the base pass's passes and put the held buffers back into `spare`.
    fn close(mut self, counters: &mut Counters, spare: &mut PassStore) {
        if let Some(b) = self.base {
            let c = &mut counters.programs[b as usize];
            match self.gress {
                Gress::Ingress => c.ingress_passes += self.count,
                Gress::Egress => c.egress_passes += self.count,
            }
        }
        spare.held.extend(self.open.drain(..).map(|(pass, _)| pass.finish().0));
        spare.slots = recycle_vec(self.open);
    }
}

/// After program `prog`'s pass: count its violation, if any (the packet is then dropped),
/// and return `prog` if the packet is now to be dropped (who to blame for the drop).
#[inline(always)]
fn count_violation(pkt: &mut PacketBuf, prog: u8, v: Option<Violation>, counters: &mut Counters) -> Option<u8> {
    if let Some(v) = v {
        counters.programs[prog as usize].violations[v.index()] += 1;
        pkt.meta.drop = Some(DropCode::VIOLATION);
    }
    pkt.meta.drop.map(|_| prog)
}

/// Ingress of one packet: the base program (`base`, called directly; None: the set has
/// none), then the owning application (if another program, through its trait object), then
/// the traffic manager.
#[inline(always)]
fn ingress_packet<P: Program + ?Sized, M: TraceMode>(
    passes: &mut Passes<'_, M>,
    base: Option<&P>,
    tm: &mut TrafficManager,
    set: &ProgramSet,
    classifies: bool,
    mut pkt: PacketBuf,
    out: &mut Handoff,
) {
    let owner = if classifies { set.classify(pkt.data()) } else { None };
    pkt.meta.owner = owner.unwrap_or(0xFF);
    let base_id = passes.base_id();
    if let Some(o) = owner.filter(|&o| Some(o) != base_id) {
        passes.arrive(o, &pkt);
    }
    let mut blame = match base {
        Some(b) => passes.base(&mut pkt, &mut tm.counters, Ingress(b)),
        None => None,
    };
    if let Some(o) = owner {
        if Some(o) != base_id && pkt.meta.drop != Some(DropCode::VIOLATION) {
            let app = passes.program(o);
            let b = passes.other(&mut pkt, o, &mut tm.counters, Ingress(app));
            blame = b.or(blame);
        }
    } else if base_id.is_none() {
        pkt.meta.drop = Some(DropCode::NO_PROGRAM);
    }
    let limit_of = owner.or(base_id).unwrap_or(0) as usize;
    if M::TRACE_HOOKS && pkt.meta.trace != 0 {
        trace_ingress_result(passes.env, tm, &pkt, blame);
    }
    after_ingress(tm, pkt, blame, || set.recirc_limit(limit_of), out);
}

/// A received frame: traced if the armed session's filter takes it (out of line: runs
/// only while a session is armed).
#[cold]
#[inline(never)]
fn trace_start(env: &PassEnv, set: &ProgramSet, classifies: bool, pkt: &mut PacketBuf) {
    let mut t = env.trace.borrow_mut();
    let Some(t) = t.as_mut() else { return };
    let owner = if classifies { set.classify(pkt.data()) } else { None };
    pkt.meta.trace = t.start(pkt.data(), pkt.port, owner, env.now_ns);
}

/// What ingress decided for a traced packet, with the replication engine's ports.
#[cold]
#[inline(never)]
fn trace_ingress_result(env: &PassEnv, tm: &TrafficManager, pkt: &PacketBuf, blame: Option<u8>) {
    let m = &pkt.meta;
    let ports = |r: Option<&[crate::control::Replica]>| r.map(|r| r.iter().map(|r| r.port).collect::<Vec<_>>()).unwrap_or_default();
    let mcast = (m.mcast_grp != 0)
        .then(|| (m.mcast_grp, ports(tm.pre.group(m.mcast_grp)).into_iter().filter(|&p| p != m.mcast_prune_port).collect()));
    let clone = (m.clone_session != 0).then(|| (m.clone_session, ports(tm.pre.session(m.clone_session).map(|s| s.replicas.as_slice()))));
    let ev = crate::trace::Event::IngressResult { egress_port: m.egress_port, mcast, clone, drop: m.drop.map(|c| (c, blame)) };
    env.record(m.trace, ev);
}

/// Drops the traffic manager made of traced packets, into their records.
#[cold]
#[inline(never)]
fn flush_traced_drops(env: &PassEnv, tm: &mut TrafficManager) {
    for (id, code, program) in tm.traced_drops.drain(..) {
        env.record(id, crate::trace::Event::Drop { code, program });
    }
}

/// What the traffic manager does with a packet after its ingress passes. The common cases,
/// unicast to a port of this pipe or a recirculation, with no mirror, are decided here;
/// `dispose_ingress` makes the same decisions for them, only later. `recirc_limit` (the
/// owning program's) is looked up only when needed.
#[inline(always)]
fn after_ingress(tm: &mut TrafficManager, pkt: PacketBuf, blame: Option<u8>, recirc_limit: impl Fn() -> Option<u32>, out: &mut Handoff) {
    let m = &pkt.meta;
    // One branch for the three (all usually hold).
    if (m.clone_session | m.mcast_grp) == 0 && m.drop.is_none() {
        if m.egress_port < PORT_CPU && tm.map.pipe_of(m.egress_port) == Some(tm.id) {
            tm.enqueue_one(pkt);
            return;
        }
        // A recirculation (a program looping over a packet's items): straight to the
        // traffic manager's recirculation port, which checks the limit and the queue and
        // counts, as `dispose_ingress` would (through `route`) after finding nothing else to do.
        if m.egress_port == PORT_RECIRC {
            tm.recirculate(pkt, recirc_limit());
            return;
        }
    }
    tm.dispose_ingress(pkt, blame, recirc_limit(), out);
}

/// A recirculated packet's new pass: the intrinsic metadata starts over except what a
/// recirculated packet carries (its count and bridged bytes; its owner, which only a
/// program owning its recirculated passes keeps, see [`recirc_owner`]). It no longer waits
/// in the recirculation queue.
#[inline(always)]
fn recirculated_meta(pkt: &mut PacketBuf, tm: &mut TrafficManager) {
    tm.recirc_due_left -= 1;
    let m = pkt.meta;
    pkt.meta = PacketMeta {
        recirculations: m.recirculations.saturating_add(1),
        bridged: m.bridged,
        owner: m.owner,
        trace: m.trace,
        ..PacketMeta::new(PORT_RECIRC)
    };
    tm.counters.recirculations += 1;
}

/// The program keeping a recirculated packet: its owner if that program owns its
/// recirculated passes (`ProgramDecl::owns_recirculated_passes`) and is not the base
/// program. Such a packet stays with that program (no classification) and the base
/// program's tables are not applied: the program decides the route, and the traffic
/// manager acts on it as in [`ingress_packet`]. Any other recirculated packet (None) goes
/// through [`ingress_packet`] like a received one.
#[inline(always)]
fn recirc_owner(set: &ProgramSet, base: Option<u8>, pkt: &PacketBuf) -> Option<u8> {
    let kept = pkt.meta.owner;
    (set.owns_recirculated_passes(kept as usize) && Some(kept) != base).then_some(kept)
}

/// Egress of one packet dequeued from `port`; unless it is dropped, onto the port's
/// transmit vector, its bytes counted in `sent_bytes`. `draining`: packets taken out of
/// the port's queue with it and not yet sent (see [`PortQueue`]).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn send<P: Program + ?Sized, M: TraceMode>(
    passes: &mut Passes<'_, M>,
    base: Option<&P>,
    tm: &mut TrafficManager,
    pkt: PacketBuf,
    out: &mut Handoff,
    port: usize,
    draining: usize,
    txq: &mut Vec<PacketBuf>,
    sent_bytes: &mut u64,
) {
    let Some(mut pkt) = egress_packet(passes, base, tm, pkt, out, port, draining) else { return };
    let t = pkt.meta.truncate_len as usize;
    if t > 0 && pkt.len() > t {
        pkt.set_len(t);
    }
    *sent_bytes += pkt.len() as u64;
    pkt.port = port as PortId;
    txq.push(pkt);
}

/// Egress passes of one packet (the base program `base`, called directly, then its owner
/// through its trait object) and its egress clone; the packet to send, or None if it was
/// dropped (counted and recycled here).
#[inline(always)]
fn egress_packet<P: Program + ?Sized, M: TraceMode>(
    passes: &mut Passes<'_, M>,
    base: Option<&P>,
    tm: &mut TrafficManager,
    mut pkt: PacketBuf,
    out: &mut Handoff,
    port: usize,
    draining: usize,
) -> Option<PacketBuf> {
    let owner = pkt.meta.owner;
    let mut blame = match base {
        Some(b) => passes.base(&mut pkt, &mut tm.counters, Egress(b)),
        None => None,
    };
    if owner != 0xFF && Some(owner) != passes.base_id() && pkt.meta.drop != Some(DropCode::VIOLATION) {
        let app = passes.program(owner);
        let b = passes.other(&mut pkt, owner, &mut tm.counters, Egress(app));
        blame = b.or(blame);
    }
    if pkt.meta.e2e_clone_session != 0 && pkt.meta.drop != Some(DropCode::VIOLATION) {
        let s = pkt.meta.e2e_clone_session;
        // A copy may join this very queue: it must see the packets still waiting.
        tm.queues[port].draining = draining;
        tm.clone_to_session(&pkt, s, out);
        tm.queues[port].draining = 0;
    }
    if M::TRACE_HOOKS && pkt.meta.trace != 0 {
        trace_egress_result(passes.env, &pkt, blame);
    }
    if let Some(code) = pkt.meta.drop {
        tm.count_drop(code, blame);
        tm.pool.put(pkt);
        return None;
    }
    Some(pkt)
}

/// A traced copy after its egress passes: dropped, or sent (its length as it leaves).
#[cold]
#[inline(never)]
fn trace_egress_result(env: &PassEnv, pkt: &PacketBuf, blame: Option<u8>) {
    let m = &pkt.meta;
    let ev = match m.drop {
        Some(code) => crate::trace::Event::Drop { code, program: blame },
        None => {
            let t = m.truncate_len as usize;
            let len = if t > 0 && pkt.len() > t { t } else { pkt.len() };
            crate::trace::Event::Transmit { port: m.egress_port, len: len as u32 }
        }
    };
    env.record(m.trace, ev);
}

/// The action profile implementing table `index` of program `program`, if any.
fn profile_of(set: &ProgramSet, program: u8, index: u16) -> Option<usize> {
    set.decl(program as usize).action_profiles.iter().position(|p| p.tables.contains(&index))
}

/// Whether an entry of a table implemented by `pd` points at `r`.
fn profile_in_use(
    read_only: &crate::pass::ProgramReadOnly,
    pd: &crate::selector::ActionProfileDecl,
    r: crate::selector::IndirectRef,
) -> bool {
    pd.tables.iter().any(|&t| {
        read_only.tables[t as usize].entries(|_| 1).iter().any(|e| crate::selector::IndirectRef::of_stored(e.action, &e.params) == Some(r))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::CloneSession;
    use crate::decl::{ClassifyRule, Digest, ProgramBuilder, ProgramDecl};
    use crate::register::{RegisterAction, SaluBody};

    thread_local! {
        /// Batch loops dispatched to a program ([`dispatch`]) on this thread.
        pub(super) static DISPATCHES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    fn dispatches() -> usize {
        DISPATCHES.with(|d| d.get())
    }

    thread_local! {
        /// Ingress passes of the test's base program on this thread, untraced and traced.
        static BASE_PASSES: std::cell::Cell<[usize; 2]> = const { std::cell::Cell::new([0; 2]) };
    }

    fn base_passes() -> [usize; 2] {
        BASE_PASSES.with(|c| c.get())
    }

    /// The vector of open passes is not allocated per batch: its allocation goes from the
    /// store to the open passes and back, the same memory each time.
    #[test]
    fn pass_store_keeps_one_allocation() {
        let mut store = PassStore::default();
        store.slots.reserve(3);
        let (ptr, cap) = (store.slots.as_ptr() as usize, store.slots.capacity());
        for _ in 0..3 {
            let open: Vec<(Pass<'_>, &dyn Program)> = recycle_vec(std::mem::take(&mut store.slots));
            assert_eq!((open.as_ptr() as usize, open.capacity()), (ptr, cap));
            store.slots = recycle_vec(open);
        }
        assert_eq!((store.slots.as_ptr() as usize, store.slots.capacity()), (ptr, cap));
    }

    #[derive(Clone, Copy)]
    struct AddOld;
    impl SaluBody<u32, u32, u32> for AddOld {
        fn run(self, c: u32, v: u32) -> (u32, u32) {
            (c.wrapping_add(v), c)
        }
    }

    /// Header bytes of the test frames: what each program does with a packet.
    const OP: usize = 0; // base program's operation (`Base::ingress`); 9: the application's violation
    const OUT: usize = 1; // port to forward to
    const LOOPS: usize = 2; // recirculations wanted
    const ID: usize = 4;
    const VALUE: usize = 5; // the application's register operand
    const INDEX: usize = 6; // the application's register index
    const APP_ETHERTYPE: u16 = 0x88B5;

    /// The base program: per operation a forward, drop, violation, ingress clone,
    /// recirculation, multicast, PacketIn or digest; egress counts per port, tags the copy
    /// and mirrors packets of operation 8.
    struct Base {
        decl: ProgramDecl,
        seen: RegisterAction<u32, u32, u32, AddOld>,
        tx: RegisterAction<u32, u32, u32, AddOld>,
        digest: Digest,
    }

    /// The base program's control blocks, written once for both trace modes (the
    /// application below has only the traced instance: the default `ingress_untraced`).
    impl Program for Base {
        fn decl(&self) -> &ProgramDecl {
            &self.decl
        }
        fn ingress(&self, p: &mut Pass<'_>) {
            self.ingress_control(p)
        }
        fn ingress_untraced(&self, p: &mut Pass<'_, Untraced>) {
            self.ingress_control(p)
        }
        fn egress(&self, p: &mut Pass<'_>) {
            self.egress_control(p)
        }
        fn egress_untraced(&self, p: &mut Pass<'_, Untraced>) {
            self.egress_control(p)
        }
    }

    impl Base {
        fn ingress_control<M: TraceMode>(&self, p: &mut Pass<'_, M>) {
            BASE_PASSES.with(|c| {
                let mut n = c.get();
                n[M::TRACE_HOOKS as usize] += 1;
                c.set(n)
            });
            let h = p.hdr();
            let (op, out, loops, id) = (h[OP], h[OUT], h[LOOPS], h[ID]);
            let old = p.execute(&self.seen, (id % 4) as u32, 1).get();
            p.forward(out as u16);
            match op % 8 {
                0 => {}
                1 => p.drop(DropCode::PROGRAM),
                2 => {
                    p.execute(&self.seen, 0, 1); // the same array twice: a violation
                }
                3 => p.clone_ingress(1),
                4 if p.recirculations() < loops => p.recirculate(),
                4 => {}
                5 => p.multicast(1, Some(p.ingress_port())),
                6 => p.to_cpu(),
                _ => p.digest(&self.digest, &[id, old as u8]),
            }
        }
        fn egress_control<M: TraceMode>(&self, p: &mut Pass<'_, M>) {
            let n = p.execute(&self.tx, p.egress_port() as u32 % 4, 1).get();
            let (rid, clone) = (p.replication_id() as u8, p.is_clone());
            let h = p.hdr_mut();
            (h[3], h[8], h[9]) = (rid, n as u8, clone as u8);
            if h[OP] == 8 && !clone {
                p.clone_egress(2);
            }
        }
    }

    /// An application (its EtherType) owning its recirculated passes: adds to a register on
    /// every pass, recirculates as asked (some beyond its limit), forwards; operation 9 is a
    /// violation. Its egress marks the packet.
    struct App {
        decl: ProgramDecl,
        acc: RegisterAction<u32, u32, u32, AddOld>,
    }

    impl Program for App {
        fn decl(&self) -> &ProgramDecl {
            &self.decl
        }
        fn ingress(&self, p: &mut Pass<'_>) {
            let h = p.hdr();
            let (op, out, loops, v, i) = (h[OP], h[OUT], h[LOOPS], h[VALUE], h[INDEX]);
            if op == 9 {
                p.execute(&self.acc, 0, 1);
                p.execute(&self.acc, 0, 1);
                return;
            }
            let old = p.execute(&self.acc, (i % 8) as u32, v as u32).get();
            p.hdr_mut()[7] = old as u8;
            if p.recirculations() < loops {
                p.recirculate();
            } else {
                p.forward(out as u16);
            }
        }
        fn egress(&self, p: &mut Pass<'_>) {
            let r = p.recirculations();
            p.hdr_mut()[10] ^= 0x5A ^ r;
        }
    }

    /// A one-pipe pipe of four ports running the application (index 0) beside the base
    /// program (index 1), with a multicast group, two clone sessions and the digest on.
    fn rig(cfg: PipeConfig) -> Pipe {
        let mut b = ProgramBuilder::new("base", "");
        b.parser(16, &[("h", 128)]).max_recirculations(Some(3));
        let seen = b.register::<u32>("seen", Gress::Ingress, 0, 4, "");
        let seen = b.register_action_body(seen, "add", AddOld);
        let tx = b.register::<u32>("tx", Gress::Egress, 0, 4, "");
        let tx = b.register_action_body(tx, "add", AddOld);
        let digest = b.digest("d", &[("id", 8), ("old", 8)], "");
        let base = Base { decl: b.build().expect("valid"), seen, tx, digest };
        let mut b = ProgramBuilder::new("app", "");
        b.parser(16, &[("h", 128)]).max_recirculations(Some(4)).owns_recirculated_passes();
        b.classify(ClassifyRule { ethertype: Some(APP_ETHERTYPE), ..Default::default() });
        let acc = b.register::<u32>("acc", Gress::Ingress, 1, 8, "");
        let acc = b.register_action_body(acc, "add", AddOld);
        let app = App { decl: b.build().expect("valid"), acc };
        let set = Arc::new(ProgramSet::new(vec![Arc::new(app), Arc::new(base)]).expect("valid set"));
        let mut pipe = Pipe::new(0, set.clone(), PortMap::contiguous(4, 1), cfg);
        let replicas = (0..4).map(|port| Replica { port, rid: port + 1 }).collect();
        pipe.control(&ControlOp::McastGroupWrite { op: WriteOp::Insert, group: 1, replicas }).expect("group");
        for (session, port) in [(1, 2), (2, 3)] {
            let session_cfg = CloneSession { replicas: vec![Replica { port, rid: 8 + session }], truncate_len: 0 };
            pipe.control(&ControlOp::CloneSessionWrite { op: WriteOp::Insert, session, session_cfg }).expect("session");
        }
        pipe.control(&ControlOp::DigestConfig { digest_id: set.ids(1).digests[0], enabled: true }).expect("digest");
        pipe
    }

    fn frame(pipe: &mut Pipe, port: PortId, app: bool, bytes: [u8; 7]) -> PacketBuf {
        let mut f = [0u8; 24];
        f[..7].copy_from_slice(&bytes);
        let et = if app { APP_ETHERTYPE } else { 0x0800 };
        f[12..14].copy_from_slice(&et.to_be_bytes());
        let mut pkt = pipe.pool().get();
        assert!(pkt.copy_from(&f));
        pkt.port = port;
        pkt
    }

    /// The ingress of the code before batch dispatch: one virtual call per packet and pass
    /// (`P = dyn Program`), each recirculated packet dispatched on its own owner, with the
    /// trace hooks always compiled in (as before the untraced instance).
    fn reference_ingress(pipe: &mut Pipe, rx: &mut Vec<PacketBuf>, now: u64, out: &mut Handoff) {
        pipe.env.now_ns = now;
        pipe.tm.counters.batches += 1;
        let n = pipe.recirc_admitted(now);
        if n == 0 && rx.is_empty() {
            return;
        }
        let Pipe { progs, env, tm, set, base, classifies, spare, .. } = pipe;
        let mut passes = Passes::<Traced>::open(progs, *base, Gress::Ingress, env, spare);
        let base_program = passes.base_program();
        let mut due = std::mem::take(&mut tm.recirc_due);
        due.extend(tm.recirc.drain(..n));
        tm.recirc_due_left = due.len();
        for mut pkt in due.drain(..) {
            recirculated_meta(&mut pkt, tm);
            let kept = pkt.meta.owner;
            if !set.owns_recirculated_passes(kept as usize) || Some(kept) == passes.base_id() {
                ingress_packet(&mut passes, base_program, tm, set, *classifies, pkt, out);
            } else {
                let app = passes.program(kept);
                passes.arrive(kept, &pkt);
                let blame = passes.other(&mut pkt, kept, &mut tm.counters, Ingress(app)).or(Some(kept));
                after_ingress(tm, pkt, blame, || set.recirc_limit(kept as usize), out);
            }
        }
        tm.recirc_due = due;
        for mut pkt in rx.drain(..) {
            let port = pkt.port;
            let c = &mut tm.counters.ports[port as usize];
            c.rx_packets += 1;
            c.rx_bytes += pkt.len() as u64;
            pkt.meta.reset(port);
            if env.trace.borrow().is_some() {
                trace_start(env, set, *classifies, &mut pkt);
            }
            ingress_packet(&mut passes, base_program, tm, set, *classifies, pkt, out);
        }
        passes.close(&mut tm.counters, spare);
        if !tm.traced_drops.is_empty() {
            flush_traced_drops(env, tm);
        }
    }

    /// The egress loop with one virtual call per pass (`P = dyn Program`).
    fn reference_egress(pipe: &mut Pipe, now: u64, tx: &mut [Vec<PacketBuf>], out: &mut Handoff) {
        pipe.env.now_ns = now;
        let Pipe { progs, env, tm, base, spare, .. } = pipe;
        if tm.queues.iter().all(|q| q.fresh.is_empty() && q.q.is_empty()) {
            return;
        }
        let mut passes = Passes::<Traced>::open(progs, *base, Gress::Egress, env, spare);
        let base_program = passes.base_program();
        egress_loop::<dyn Program, Traced>(base_program, &mut passes, tm, now, tx, out);
        passes.close(&mut tm.counters, spare);
        if !tm.traced_drops.is_empty() {
            flush_traced_drops(env, tm);
        }
    }

    /// Everything a run leaves behind: frames sent per call (port and bytes), PacketIns,
    /// digests, counters and both programs' registers.
    #[derive(Clone, Debug, PartialEq)]
    struct Outcome {
        /// The trace records taken after the run (their `Debug` text), with a session armed.
        traces: Vec<String>,
        sent: Vec<(usize, PortId, Vec<u8>)>,
        packet_ins: Vec<Vec<u8>>,
        digests: Vec<(u8, Vec<u8>)>,
        counters: serde_json::Value,
        regs: Vec<Vec<u64>>,
    }

    /// Seeded mixed traffic (every operation of both programs, recirculations past the
    /// limits, a small recirculation share, queue capacity and egress budget so that the
    /// due list is cut, queues fill and backlogs form) through `pipe`, the batch path or
    /// the reference path; with a trace session armed on `trace` (a filter) if given.
    fn mixed_run(reference: bool, trace: Option<&str>) -> Outcome {
        let cfg = PipeConfig { queue_capacity: 12, recirc_capacity: 40, recirc_per_batch: 7, egress_budget: 9, ..PipeConfig::default() };
        let mut pipe = rig(cfg);
        if let Some(f) = trace {
            let filter = crate::trace::TraceFilter::parse(f).expect("filter");
            pipe.trace_arm(Some(crate::trace::TraceSession { filter, limit: 60 }));
        }
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut out = Handoff::new(1);
        let mut tx: Vec<Vec<PacketBuf>> = (0..4).map(|_| Vec::new()).collect();
        let mut o = Outcome {
            traces: Vec::new(),
            sent: Vec::new(),
            packet_ins: Vec::new(),
            digests: Vec::new(),
            counters: serde_json::Value::Null,
            regs: Vec::new(),
        };
        for call in 0..400usize {
            let mut rx: Vec<PacketBuf> = (0..next() % 40)
                .map(|_| {
                    let r = next();
                    let bytes = [(r % 10) as u8, (r >> 8) as u8 % 4, (r >> 16) as u8 % 6, call as u8, (r >> 24) as u8, (r >> 32) as u8, 0];
                    frame(&mut pipe, (r >> 40) as u16 % 4, (r >> 48) % 3 == 0, bytes)
                })
                .collect();
            let now = call as u64 * 1000;
            if reference {
                reference_ingress(&mut pipe, &mut rx, now, &mut out);
            } else {
                pipe.ingress(&mut rx, now, &mut out);
            }
            for _ in 0..2 {
                let mut v = std::mem::take(&mut out.per_pipe[0]);
                pipe.enqueue(&mut v);
                if reference {
                    reference_egress(&mut pipe, now, &mut tx, &mut out);
                } else {
                    pipe.egress(now, &mut tx, &mut out);
                }
            }
            for (port, q) in tx.iter_mut().enumerate() {
                for pkt in q.drain(..) {
                    o.sent.push((call, port as PortId, pkt.data().to_vec()));
                    pipe.recycle(pkt);
                }
            }
        }
        let mut ins = Vec::new();
        pipe.take_packet_ins(&mut ins);
        o.packet_ins = ins.iter().map(|p| p.pkt.data().to_vec()).collect();
        let mut digests = Vec::new();
        pipe.take_digests(&mut digests);
        o.digests = digests.into_iter().map(|d| (d.program, d.data.to_vec())).collect();
        o.counters = serde_json::to_value(pipe.counters()).expect("counters");
        o.regs = (0..2).map(|i| pipe.state(i).regs.to_vec()).collect();
        o.traces = pipe.trace_take(u64::MAX / 2, 0).records.iter().map(|r| format!("{r:?}")).collect();
        o
    }

    /// The batch path (one virtual call per loop, the dispatched program's control blocks
    /// called directly) does exactly what one virtual call per packet and pass did, packet
    /// for packet: the same frames in the same order, PacketIns, digests, counters and
    /// registers, on traffic with drops, violations, recirculations (kept by their program
    /// and not), clones and multicast.
    #[test]
    fn batch_dispatch_equals_one_call_per_packet() {
        let before = base_passes();
        let batch = mixed_run(false, None);
        let after = base_passes();
        assert!(after[0] > before[0] && after[1] == before[1], "no trace armed: the untraced instance only");
        let reference = mixed_run(true, None);
        // The traffic reaches every path compared.
        let c = &batch.counters;
        for (what, v) in [
            ("sent", batch.sent.len() as u64),
            ("packet_ins", batch.packet_ins.len() as u64),
            ("digests", batch.digests.len() as u64),
            ("recirculations", c["recirculations"].as_u64().unwrap_or(0)),
            ("clones", c["clones"].as_u64().unwrap_or(0)),
            ("violations", c["programs"].as_array().map_or(0, |p| p.iter().map(|p| p["violations"][0].as_u64().unwrap_or(0)).sum())),
            ("app egress passes", c["programs"][0]["egress_passes"].as_u64().unwrap_or(0)),
            ("queue drops", c["ports"].as_array().map_or(0, |p| p.iter().map(|p| p["queue_drops"].as_u64().unwrap_or(0)).sum())),
        ] {
            assert!(v > 0, "no {what} in the mixed traffic: {c}");
        }
        assert_eq!(batch.sent.len(), reference.sent.len());
        for (i, (a, b)) in batch.sent.iter().zip(&reference.sent).enumerate() {
            assert_eq!(a, b, "frame {i}");
        }
        assert_eq!(batch, reference);
    }

    /// A batch crosses one virtual call: received packets, egress, and each run of
    /// recirculated packets kept by one program, whatever the number of packets.
    #[test]
    fn a_batch_crosses_one_virtual_call() {
        let mut pipe = rig(PipeConfig::default());
        let mut out = Handoff::new(1);
        let mut tx: Vec<Vec<PacketBuf>> = (0..4).map(|_| Vec::new()).collect();
        let mut rx: Vec<PacketBuf> = (0..32).map(|i| frame(&mut pipe, 0, false, [0, 1, 0, 0, i, 0, 0])).collect();
        let before = dispatches();
        pipe.ingress(&mut rx, 1, &mut out);
        assert_eq!(dispatches() - before, 1, "32 received packets, one call");
        let before = dispatches();
        pipe.egress(1, &mut tx, &mut out);
        assert_eq!(dispatches() - before, 1, "32 packets out, one call");
        assert_eq!(tx[1].len(), 32);
        // Recirculating: application, application, base, application (once each), then
        // one more received packet. Their next ingress runs the kept runs [app, app],
        // [base] (not kept: through the base program), [app], then the received packet.
        let mut rx = vec![
            frame(&mut pipe, 0, true, [0, 1, 1, 0, 1, 1, 0]),
            frame(&mut pipe, 0, true, [0, 1, 1, 0, 2, 1, 0]),
            frame(&mut pipe, 0, false, [4, 1, 1, 0, 3, 0, 0]),
            frame(&mut pipe, 0, true, [0, 1, 1, 0, 4, 1, 0]),
        ];
        pipe.ingress(&mut rx, 2, &mut out);
        assert_eq!(pipe.tm.recirc.len(), 4);
        let mut rx = vec![frame(&mut pipe, 0, false, [0, 1, 0, 0, 5, 0, 0])];
        let before = dispatches();
        pipe.ingress(&mut rx, 3, &mut out);
        assert_eq!(dispatches() - before, 4, "three runs of recirculated packets and the received ones");
        assert_eq!(pipe.tm.recirc.len(), 0);
        assert_eq!(pipe.counters().recirculations, 4);
    }

    /// With a trace session armed the batch loops run the traced instance (every pass
    /// through its hooks), and do the same as without one: the same frames, PacketIns,
    /// digests, counters and registers as the untraced batch loops and as the reference
    /// path; the records they make are those the reference path makes (the hooks in the
    /// same places with the same values), for packets of every kind.
    #[test]
    fn traced_and_untraced_batches_do_the_same() {
        let untraced = mixed_run(false, None);
        assert!(untraced.traces.is_empty());
        let before = base_passes();
        let traced = mixed_run(false, Some("any"));
        let after = base_passes();
        assert!(after[1] > before[1] && after[0] == before[0], "a trace armed: the traced instance only");
        let reference = mixed_run(true, Some("any"));
        assert_eq!(traced.traces.len(), 60, "the session's limit of packets recorded");
        for what in ["Pass {", "Register {", "Violation {", "IngressResult {", "Transmit {", "Drop {", "Digest {"] {
            assert!(traced.traces.iter().any(|r| r.contains(what)), "no {what} event recorded");
        }
        assert_eq!(traced.traces, reference.traces, "the records");
        let strip = |o: &Outcome| Outcome { traces: Vec::new(), ..o.clone() };
        assert_eq!(strip(&traced), untraced, "a trace changes nothing a packet sees");
        assert_eq!(strip(&traced), strip(&reference));
        // Armed with a filter no packet matches: the traced instance, nothing recorded.
        let none = mixed_run(false, Some("udp dst 1"));
        assert!(none.traces.is_empty());
        assert_eq!(none, untraced);
    }
}
