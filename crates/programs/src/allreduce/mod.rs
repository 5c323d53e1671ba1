//! `allreduce`: SwitchML-style in-network aggregation of fixed-size vectors of 32-bit
//! integers (Sapio et al., NSDI'21, Algorithm 3 "switch logic with packet loss recovery"),
//! the machine-learning use DAIET names (§2) and INaaS's DML tenant.
//!
//! Layout (tofino1; `forward` uses stages 0–1 besides):
//! - ingress stage 0: `jobs` (exact: (ingress port, job id) → pool base, slots, workers,
//!   seen base, group, worker range = first worker << 16 | port workers), one entry per
//!   port of the job's workers: a packet is admitted to a job only from the ports the
//!   controller gave the job, so a host elsewhere that learns a live job id cannot add to
//!   that job's sums
//! - ingress stage 1: a gateway admits only the worker ids the port's entry allows
//!   (`worker - first_worker < port_workers`, the subtraction done by stage 0's action:
//!   a host's workers have contiguous ids), then `seen` (u8 per (slot, worker): bit `ver`
//!   = contributed to copy `ver`)
//! - ingress stage 2: `count` (per (slot, copy): contributions so far, mod n)
//! - ingress stages 3–10: `pool_0` … `pool_31` (per (slot, copy)), four per stage
//! - egress stage 1: `worker_addr` (exact: replica id → the worker's MAC, IPv4, UDP port,
//!   and the switch's source addresses), so each multicast copy of a result reaches its
//!   worker's socket.
//!
//! `MAX` packets (flag [`flags::MAX`]) aggregate with an unsigned maximum instead of the
//! sum: the hosts' exponent round (see `hostlib::allreduce`).
//!
//! What a packet does to its slot, and why a result is never overwritten while a worker may
//! still ask for it: docs/allreduce.md, "Switch: `programs::allreduce`".

use pisa::decl::TableSpec;
use pisa::salu::common::Read;
use pisa::TraceMode;
use pisa::{ActionId, DropCode, Gress, MatchKind, Pass, Program, ProgramBuilder, ProgramDecl, Table};
use pisa::{Cmp, Cond, Op, OutputSource, Pred, Salu, SaluOutput, SaluProgram, Src, Update};
use wire::allreduce::{field, flags, ELEMS, PACKET_LEN, UDP_PORT};

use crate::reply::{fix_lengths, swap_addresses};
use wire::L2_L4_LEN as UDP_IPV4_LEN;

/// Slots (each with two copies) shared by the jobs of one switch.
pub const POOL_SLOTS: u32 = 16384;
/// Cells of each pool array and of `count`: two copies per slot.
pub const POOL_CELLS: u32 = 2 * POOL_SLOTS;
/// Seen-cells: a job of `n` workers and `s` slots takes `n * s` of them.
pub const SEEN_CELLS: u32 = 1 << 19;
/// Entries of `worker_addr` (replica ids).
pub const MAX_REPLICAS: u32 = 4096;
/// Entries of `jobs`, one per (job, worker port): a job has at most one port per worker
/// and each worker takes a replica id, so any jobs `worker_addr` holds fit here.
pub const JOB_PORTS: u32 = MAX_REPLICAS;
/// First stage of the pool arrays.
const POOL_STAGE: u8 = 3;
/// Pool arrays per stage (a Tofino 1 stage's stateful ALUs).
const LANES: usize = 4;
/// Bytes the parser reaches.
pub const PARSE_DEPTH: u32 = (UDP_IPV4_LEN + PACKET_LEN) as u32;
/// Where the allreduce payload starts in the frame (IPv4 without options).
const AT: usize = UDP_IPV4_LEN;

/// `seen` cell update: bit `ver` (0 or 1, checked before) set, the other copy's bit
/// cleared; returns whether bit `ver` was set before (a retransmission). The cell only
/// ever holds 0, 1 or 2, so "bit set" is "cell == ver + 1": c0 ver is 0, c1 the cell
/// equals ver + 1.
#[derive(Clone, Copy)]
struct Seen;
impl SaluProgram<u8, u8, bool> for Seen {
    const SALU: Salu = Salu {
        conds: &[Cond::new(Src::PhvLo, Cmp::Eq, Src::K(0)), Cond::linear(Src::Lo, Src::PhvLo, -1, Cmp::Eq)],
        lo: &[Update::set(Pred::C0, Src::K(1)), Update::set(Pred::ALWAYS, Src::K(2))],
        hi: &[],
        out: &[SaluOutput::new(Pred::C1, OutputSource::Predicate)],
    };
}

/// `count` update of a new contribution. Input: n. The count goes to `(c + 1) mod n`; the
/// output is the condition word: [`FIRST`] (c0: the count was 0 before, the first
/// contribution to this use of the copy) and [`COMPLETE`] (c1: `c + 1 >= n`, the count
/// wrapped to 0 and the copy is complete). A retransmission reads the count with
/// [`Read`] instead (the register's second action, chosen by the stage-1 `seen` output).
#[derive(Clone, Copy)]
struct Count;
/// Set in [`Count`]'s output: the first contribution to this use of the copy.
const FIRST: u32 = 1;
/// Set in [`Count`]'s output: the copy is complete.
const COMPLETE: u32 = 2;
impl SaluProgram<u32, u32, u32> for Count {
    const SALU: Salu = Salu {
        conds: &[Cond::new(Src::Lo, Cmp::Eq, Src::K(0)), Cond::linear(Src::Lo, Src::PhvLo, 1, Cmp::GeU)],
        lo: &[Update::set(Pred::C1, Src::K(0)), Update::always(Src::Lo, Op::Add, Src::K(1))],
        hi: &[],
        out: &[SaluOutput::always(OutputSource::Predicate)],
    };
}

/// What a pool cell does with the packet's value (PHV operand 0; the value is operand 1).
mod pool_op {
    /// Leave the cell, return it.
    pub const READ: u8 = 0;
    /// Overwrite with the value (the first contribution).
    pub const FIRST: u8 = 1;
    /// Combine with the value: add (wrapping) in [`super::PoolSum`], unsigned maximum in
    /// [`super::PoolMax`].
    pub const COMBINE: u8 = 2;
}

/// Pool cell update of a summing job: c0 the first contribution (the cell takes the
/// value), c1 a later one (the cell adds it); neither: a read. Returns the cell after.
#[derive(Clone, Copy)]
struct PoolSum;
impl SaluProgram<u32, (u8, u32), u32> for PoolSum {
    const SALU: Salu = Salu {
        conds: &[
            Cond::new(Src::PhvLo, Cmp::Eq, Src::K(pool_op::FIRST as i32)),
            Cond::new(Src::PhvLo, Cmp::Eq, Src::K(pool_op::COMBINE as i32)),
        ],
        lo: &[Update::set(Pred::C0, Src::PhvHi), Update::new(Pred::C1, Src::Lo, Op::Add, Src::PhvHi)],
        hi: &[],
        out: &[SaluOutput::always(OutputSource::NewLo)],
    };
}

/// The same for a `MAX` job: the second update is an unsigned maximum. A second register
/// action on each pool array (Tofino 1 has two update ALUs per half: the first
/// contribution, the sum and the maximum are three), chosen by the packet's flag.
#[derive(Clone, Copy)]
struct PoolMax;
impl SaluProgram<u32, (u8, u32), u32> for PoolMax {
    const SALU: Salu = Salu {
        conds: &[
            Cond::new(Src::PhvLo, Cmp::Eq, Src::K(pool_op::FIRST as i32)),
            Cond::new(Src::PhvLo, Cmp::Eq, Src::K(pool_op::COMBINE as i32)),
        ],
        lo: &[Update::set(Pred::C0, Src::PhvHi), Update::new(Pred::C1, Src::Lo, Op::MaxU, Src::PhvHi)],
        hi: &[],
        out: &[SaluOutput::always(OutputSource::NewLo)],
    };
}

type PoolLanes<P> = pisa::SaluLanes<u32, (u8, u32), u32, P, LANES>;

pub struct Allreduce {
    decl: ProgramDecl,
    jobs: Table,
    a_set_job: ActionId,
    worker_addr: Table,
    a_set_addr: ActionId,
    seen: pisa::SaluAction<u8, u8, bool, Seen>,
    count: pisa::SaluAction<u32, u32, u32, Count>,
    count_read: pisa::SaluAction<u32, (), u32, Read>,
    pool_sum: Vec<PoolLanes<PoolSum>>,
    pool_max: Vec<PoolLanes<PoolMax>>,
    d_absorbed: DropCode,
    d_unknown_job: DropCode,
    d_out_of_range: DropCode,
    d_not_on_port: DropCode,
    d_no_addr: DropCode,
}

/// Bridged byte: this packet is a result being multicast (egress rewrites its address).
const BR_MCAST: usize = 0;

impl Allreduce {
    pub fn new() -> Allreduce {
        let mut b = ProgramBuilder::new(
            "allreduce",
            "SwitchML-style aggregation: 32 x 32-bit integers per packet summed in a job's pool of slots, shadow copies, exactly once, result multicast",
        );
        b.parser(PARSE_DEPTH, &[("ethernet", 112), ("ipv4", 160), ("udp", 64), ("allreduce", PACKET_LEN as u32 * 8)])
            // + 2 x 16: the worker id relative to the port's first and the port's count,
            // written by stage 0's action for stage 1's check.
            .metadata_bits(64 + 2 * 32 + 16 + 2 * 16)
            .bridged_bytes(1)
            .classify(pisa::ClassifyRule::udp_port(UDP_PORT))
            .note("a counter per (slot, copy) and a seen-cell per (slot, worker), not a 32-bit bitmap: no limit on workers but the seen array (n x s cells per job)")
            .note("32 elements per pass (one register array each, four per stage, stages 3-10); SwitchML's 64 would need a second pass")
            .note("sums wrap at 2^32: the hosts pick each chunk's scale so n workers' values cannot overflow");

        let a_set_job = b.action(
            "set_job",
            &[
                ("pool_base", 32),
                ("slots", 16),
                ("workers", 16),
                ("seen_base", 32),
                ("group", 16),
                ("worker_range", 32),
            ],
            "the job's partition: first slot, slots, workers, first seen-cell, multicast group; the worker ids allowed from this port, first_worker << 16 | port_workers: ids first_worker .. first_worker + port_workers",
        );
        let a_no_job = b.action("no_job", &[], "unknown job, or not from one of its workers' ports: drop");
        let jobs = b.table(TableSpec {
            name: "jobs",
            doc: "(ingress port, job id) -> memory partition, multicast group and the port's worker ids, one entry per worker port of the job; filled by the controller",
            gress: Gress::Ingress,
            stage: 0,
            size: JOB_PORTS,
            keys: &[("ig_intr_md.ingress_port", 16, MatchKind::Exact), ("hdr.allreduce.job", 16, MatchKind::Exact)],
            actions: &[a_set_job, a_no_job],
            default_action: (a_no_job, &[]),
            const_default: true,
        });
        let sr = b.register::<u8>("seen", Gress::Ingress, 1, SEEN_CELLS, "per (slot, worker): bit ver = contributed to copy ver");
        let seen = b.register_action_salu(sr, "mark", Seen);
        let cr = b.register::<u32>("count", Gress::Ingress, 2, POOL_CELLS, "per (slot, copy): contributions so far, mod n");
        let count = b.register_action_salu(cr, "count", Count);
        let count_read = b.register_action_salu(cr, "read", Read);
        let (mut sums, mut maxes) = (Vec::with_capacity(ELEMS), Vec::with_capacity(ELEMS));
        for e in 0..ELEMS {
            let stage = POOL_STAGE + (e / LANES) as u8;
            let r =
                b.register::<u32>(&format!("pool_{e}"), Gress::Ingress, stage, POOL_CELLS, "per (slot, copy): element e of the aggregate");
            sums.push(b.register_action_salu(r, "sum", PoolSum));
            maxes.push(b.register_action_salu(r, "max", PoolMax));
        }
        let pool_sum = sums.chunks(LANES).map(|c| PoolLanes::new([c[0], c[1], c[2], c[3]]).expect("four pool arrays per stage")).collect();
        let pool_max = maxes.chunks(LANES).map(|c| PoolLanes::new([c[0], c[1], c[2], c[3]]).expect("four pool arrays per stage")).collect();
        let a_set_addr = b.action(
            "set_addr",
            &[("mac", 48), ("ip", 32), ("port", 16), ("src_mac", 48), ("src_ip", 32)],
            "the worker behind this replica id, and the source the switch's results come from",
        );
        let a_no_addr = b.action("no_addr", &[], "unknown replica: drop");
        let worker_addr = b.table(TableSpec {
            name: "worker_addr",
            doc: "replica id -> the worker's addresses, for the multicast copies of a result",
            gress: Gress::Egress,
            stage: 1,
            size: MAX_REPLICAS,
            keys: &[("eg_intr_md.rid", 16, MatchKind::Exact)],
            actions: &[a_set_addr, a_no_addr],
            default_action: (a_no_addr, &[]),
            const_default: true,
        });
        let d_absorbed = b.drop_reason("allreduce_absorbed");
        let d_unknown_job = b.drop_reason("allreduce_unknown_job");
        let d_out_of_range = b.drop_reason("allreduce_out_of_range");
        let d_not_on_port = b.drop_reason("allreduce_worker_not_on_port");
        let d_no_addr = b.drop_reason("allreduce_no_worker_addr");
        let decl = b.build().expect("allreduce declaration is valid");
        Allreduce {
            decl,
            jobs,
            a_set_job,
            worker_addr,
            a_set_addr,
            seen,
            count,
            count_read,
            pool_sum,
            pool_max,
            d_absorbed,
            d_unknown_job,
            d_out_of_range,
            d_not_on_port,
            d_no_addr,
        }
    }
}

impl Default for Allreduce {
    fn default() -> Self {
        Self::new()
    }
}

fn get_u16(h: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([h[at], h[at + 1]])
}

impl Program for Allreduce {
    fn decl(&self) -> &ProgramDecl {
        &self.decl
    }
    pisa::controls_by_trace_mode!(ingress, egress);
}

/// The control blocks, once, for both trace modes (see `Program::ingress_untraced`).
impl Allreduce {
    #[inline(always)]
    fn ingress_control<M: TraceMode>(&self, pass: &mut Pass<'_, M>) {
        let h = pass.hdr();
        // Not IPv4/UDP, IPv4 with options or a short frame: the fixed offsets do not hold.
        if h.len() < PARSE_DEPTH as usize || !wire::is_ipv4_udp(h) {
            pass.drop(DropCode::MALFORMED);
            return;
        }
        let fl = h[AT + field::FLAGS];
        let ver = h[AT + field::VER];
        if fl & !flags::ALL != 0 || fl & flags::RESULT != 0 || ver > 1 {
            pass.drop(DropCode::MALFORMED);
            return;
        }
        let (job, worker, slot) = (get_u16(h, AT + field::JOB), get_u16(h, AT + field::WORKER) as u32, get_u16(h, AT + field::SLOT) as u32);
        let mut values = [0u32; ELEMS];
        for (i, v) in values.iter_mut().enumerate() {
            let at = AT + field::VALUES + 4 * i;
            *v = u32::from_be_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
        }

        // Stage 0: the job's partition, if this port is one of its workers'.
        let port = pass.ingress_port();
        let t = pass.apply_u64(&self.jobs, (port as u64) << 16 | job as u64);
        if t.action != self.a_set_job {
            pass.drop(self.d_unknown_job);
            return;
        }
        let (pool_base, slots, workers, seen_base, group) =
            (t.param(0) as u32, t.param(1) as u32, t.param(2) as u32, t.param(3) as u32, t.param(4) as u16);
        // One 32-bit parameter, not two: an action has at most MAX_ACTION_PARAMS (6).
        let (first_worker, port_workers) = ((t.param(5) >> 16) as u16, t.param(5) as u16);
        // Stage 0's action computes the worker id relative to the port's first (its own
        // action data with a header field, one 16-bit subtract; below the first it wraps
        // high) and copies the port's count to metadata; stage 1's gateway compares the two
        // before `seen`, so an id that is not this port's neither marks another worker's
        // seen-cell nor adds to the sums.
        let rel = (worker as u16).wrapping_sub(first_worker);
        if slot >= slots || worker >= workers {
            pass.drop(self.d_out_of_range);
            return;
        }
        if rel >= port_workers {
            pass.drop(self.d_not_on_port);
            return;
        }
        let cell = (pool_base + slot) * 2 + ver as u32;

        // Stage 1: has this worker contributed to this copy? Stage 2: count.
        let seen = pass.execute(&self.seen, seen_base + slot * workers + worker, ver);
        // Stage 2: a new contribution counts, a retransmission reads (two actions of the
        // array, chosen by the stage-1 output).
        let (complete, first) = if seen.get() {
            let c = pass.execute(&self.count_read, cell, seen.map(|_| ()));
            (c.get() == 0, false)
        } else {
            let c = pass.execute(&self.count, cell, seen.map(|_| workers)).get();
            (c & COMPLETE != 0, c & FIRST != 0)
        };
        // From here on (stages 3-10) the stage-1 and stage-2 outputs may be used.
        let seen = seen.get();
        let op = match (seen, first) {
            (true, _) => pool_op::READ,
            (false, true) => pool_op::FIRST,
            (false, false) => pool_op::COMBINE,
        };
        if seen && !complete {
            // A retransmission to an incomplete copy: nothing to do, absorbed.
            pass.drop(self.d_absorbed);
            return;
        }
        let max = fl & flags::MAX != 0;
        let mut out = [0u32; ELEMS];
        for s in 0..ELEMS / LANES {
            let input = |i| (op, values[s * LANES + i]);
            let o = if max {
                pass.execute_lanes(&self.pool_max[s], 0xF, [cell; LANES], input)
            } else {
                pass.execute_lanes(&self.pool_sum[s], 0xF, [cell; LANES], input)
            };
            out[s * LANES..(s + 1) * LANES].copy_from_slice(&o);
        }
        if !complete {
            // Stages 3–10 ran for a contribution to an incomplete copy: absorbed.
            pass.drop(self.d_absorbed);
            return;
        }
        let h = pass.hdr_mut();
        for (i, v) in out.iter().enumerate() {
            let at = AT + field::VALUES + 4 * i;
            h[at..at + 4].copy_from_slice(&v.to_be_bytes());
        }
        h[AT + field::FLAGS] = fl | flags::RESULT;
        if seen {
            // A worker that missed the result: to it alone, back where it came from.
            swap_addresses(h, UDP_IPV4_LEN - 8);
            let len = pass.packet_len();
            fix_lengths(pass.hdr_mut(), len);
            pass.forward(port);
        } else {
            pass.bridged_mut()[BR_MCAST] = 1;
            pass.multicast(group, None);
        }
    }

    #[inline(always)]
    fn egress_control<M: TraceMode>(&self, pass: &mut Pass<'_, M>) {
        if pass.bridged()[BR_MCAST] != 1 {
            return;
        }
        let r = pass.apply_u64(&self.worker_addr, pass.replication_id() as u64);
        if r.action != self.a_set_addr {
            pass.drop(self.d_no_addr);
            return;
        }
        let (mac, ip, port, src_mac, src_ip) = (r.param(0), r.param(1) as u32, r.param(2) as u16, r.param(3), r.param(4) as u32);
        let h = pass.hdr_mut();
        // Each copy to its worker, from the switch's own addresses: the completing worker's,
        // kept, would make its own copy a "martian" (a local source) its kernel drops.
        h[0..6].copy_from_slice(&mac.to_be_bytes()[2..]);
        h[6..12].copy_from_slice(&src_mac.to_be_bytes()[2..]);
        h[26..30].copy_from_slice(&src_ip.to_be_bytes());
        h[30..34].copy_from_slice(&ip.to_be_bytes());
        h[34..36].copy_from_slice(&UDP_PORT.to_be_bytes());
        h[36..38].copy_from_slice(&port.to_be_bytes());
        let len = pass.packet_len();
        fix_lengths(pass.hdr_mut(), len);
    }
}
