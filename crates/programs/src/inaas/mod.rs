//! `inaas`: the multi-tenant in-network service of the INaaS paper (§IV, Algorithm 1,
//! Figure 2). One header carries 20 items; segment `j` of switch memory serves item `j`.
//!
//! Layout (20 segments, tofino2 or unbounded; `forward` has stages 0–2 besides):
//! - ingress stage 0: `tenants` (exact: ingress port, uid → tenant slot, longest lease)
//! - ingress stage 1: `goalkeeper` (the goalkeeper host's port), `forged_uid` (register,
//!   per port: packets whose uid is not registered on the port they came in on)
//! - ingress stages 2–6: `lease_deadline_0` … `lease_deadline_19`, four per stage
//! - ingress stages 7–11: `lease_0` … `lease_19` (the holder's uid), four per stage
//! - ingress stages 12–16: `kv_0` … `kv_19` (key, value), four per stage
//! - (`inaas_paxos`) egress stages 17–19: the acceptors
//! - egress stage 1: `tenant_usage` (ALU operations, packets) and `tenant_events`
//!   (mismatching accesses, leases taken), per tenant slot: the ledger's source
//!
//! On tofino1 (12 stages) a pass serves 13 segments, the same arrays packed in stages 2–11
//! ([`lease::Layout`]); items 13–19 fail.
//!
//! What a packet goes through (tenants, leases, Paxos and Bloom packets): docs/inaas.md,
//! "The switch program, per packet".

pub mod arith;
pub mod bloom;
pub mod failure;
pub mod lease;
pub mod paxos;
pub mod primitives;

use pisa::decl::TableSpec;
use pisa::salu::common::{AddPair, Inc};
use pisa::TraceMode;
use pisa::{
    ActionId, DropCode, DualCell, Gress, MatchKind, Pass, Program, ProgramBuilder, ProgramDecl, RegisterAction, Table, PORT_RECIRC,
};
use wire::inaas::{
    flags, is_bloom, is_paxos, Bitmap, InaasPacket, Operator, ETHERTYPE, HEADER_LEN, ITEMS, OP_DONE, OP_PAXOS_1A, PAXOS_TAG_ITEM,
};

use arith::MISS;
use failure::{bridged, Outcome};
use lease::{
    deadline, DeadlineProbe, DeadlineTake, HolderCheck, HolderTake, Layout, LeaseCommit, ACQUIRED, BUSY, MAX_LEASE_US, MAX_UID,
    SEGMENT_SIZE,
};
use paxos::{
    round_word, vote_value, Accept, Advance, Clear, ClearInstance, Prepare, RoundOut, VoteOut, VoteRead, VoteWrite, ACCEPTORS, NO_VOTE,
    REFUSED, STALE,
};
use primitives::{dec, dec_evicted, enc, reduce_status, Exchange, Read, Reduce, Write, COLLECT, EVICT, KEY_ONLY};

/// Tenant slots (rows of the usage registers, entries of `tenants`).
pub const TENANT_SLOTS: u32 = 1024;
/// Ports covered by `forged_uid`.
pub const PORTS: u32 = 512;
/// Bytes the parser reaches: Ethernet and the INaaS header.
pub const PARSE_DEPTH: u32 = 14 + HEADER_LEN as u32;

type DeadlineTakeAction = pisa::SaluAction<u32, (u32, u32), u32, DeadlineTake>;
type DeadlineProbeAction = pisa::SaluAction<u32, u32, u32, DeadlineProbe>;
type HolderTakeAction = pisa::SaluAction<u32, u32, u32, HolderTake>;
type HolderCheckAction = pisa::SaluAction<u32, (), u32, HolderCheck>;
type CommitAction = pisa::SaluAction<u32, u32, u32, LeaseCommit>;
type ExchangeAction = pisa::SaluAction<DualCell, (u32, u32), u32, Exchange>;
type ReadAction = pisa::SaluAction<DualCell, (u32, u32), u32, Read>;
type WriteAction = pisa::SaluAction<DualCell, (u32, u32), u32, Write>;
type ReduceAction = RegisterAction<DualCell, (u32, i32), u32, Reduce>;

/// The register actions of one memory segment.
struct Segment {
    take: DeadlineTakeAction,
    probe: DeadlineProbeAction,
    hold: HolderTakeAction,
    holder: HolderCheckAction,
    commit: CommitAction,
    exchange: ExchangeAction,
    read: ReadAction,
    write: WriteAction,
    reduce: ReduceAction,
}

/// One acceptor's arrays (segment `j < ACCEPTORS`), see [`paxos`].
struct Acceptor {
    advance: pisa::SaluAction<u32, (bool, u32), u32, Advance>,
    clear_instance: pisa::SaluAction<u32, (), (), ClearInstance>,
    prepare: pisa::SaluAction<DualCell, u32, RoundOut, Prepare>,
    accept: pisa::SaluAction<DualCell, u32, RoundOut, Accept>,
    clear_round: pisa::SaluAction<DualCell, (), (), Clear>,
    read: pisa::SaluAction<DualCell, u32, VoteOut, VoteRead>,
    write: pisa::SaluAction<DualCell, (u32, i32), (), VoteWrite>,
    clear_vote: pisa::SaluAction<DualCell, (), (), Clear>,
}

/// The primitive an item asks for, from its flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Prim {
    None,
    Read,
    Write,
    Swap,
    Reduce,
    /// Read and reduce: read a finished aggregate and free the cell.
    Collect,
}

fn prim(read: bool, write: bool, reduce: bool) -> Option<Prim> {
    Some(match (read, write, reduce) {
        (false, false, false) => Prim::None,
        (true, false, false) => Prim::Read,
        (false, true, false) => Prim::Write,
        (true, true, false) => Prim::Swap,
        (false, false, true) => Prim::Reduce,
        (true, false, true) => Prim::Collect,
        _ => return None,
    })
}

/// Does a preempting item install its own pair (else the cell is left empty)?
fn installs(p: Prim) -> bool {
    matches!(p, Prim::Write | Prim::Swap | Prim::Reduce)
}

pub struct Inaas {
    decl: ProgramDecl,
    layout: Layout,
    segments: Vec<Segment>,
    acceptors: Vec<Acceptor>,
    bloom: Vec<bloom::BloomArray>,
    tenants: Table,
    goalkeeper: Table,
    a_set_tenant: ActionId,
    a_set_goalkeeper: ActionId,
    forged: pisa::SaluAction<u32, (), (), Inc>,
    usage: pisa::SaluAction<DualCell, (u32, u32), (), AddPair>,
    events: pisa::SaluAction<DualCell, (u32, u32), (), AddPair>,
    d_forged: DropCode,
    d_no_goalkeeper: DropCode,
}

impl Inaas {
    /// The service of the paper, without Paxos acceptors: fits tofino1 beside `forward`.
    pub fn new() -> Inaas {
        Self::build(false, Layout::default())
    }

    /// With the Paxos acceptors of [`paxos`] (program `inaas_paxos`). Their nine arrays
    /// take the three stages after the 20 segments' (17-19; ingress and egress share a
    /// stage's ALUs), and two of them return two words: this variant fits tofino2, not
    /// tofino1 (docs/inaas.md).
    pub fn with_paxos() -> Inaas {
        Self::build(true, Layout::default())
    }

    /// As many segments as `t`'s stages hold (20 on tofino2 and unbounded, 13 on tofino1;
    /// with the acceptors, three stages fewer for segments), see [`Layout::for_target`].
    pub fn for_target(with_paxos: bool, t: &pisa::Target) -> Inaas {
        Self::build(with_paxos, Layout::for_target(t, if with_paxos { 3 } else { 0 }))
    }

    /// Segments a pass serves (items beyond them fail).
    pub fn segments(&self) -> usize {
        self.layout.segments
    }

    fn build(with_paxos: bool, layout: Layout) -> Inaas {
        let n = layout.segments;
        let (name, doc) = if with_paxos {
            ("inaas_paxos", "INaaS with Paxos acceptors in the tenants' leased registers (tofino2)")
        } else {
            ("inaas", "INaaS: multi-tenant read/write/reduce/compute on 20 leased memory segments (Algorithm 1)")
        };
        let mut b = ProgramBuilder::new(name, doc);
        b.parser(PARSE_DEPTH, &[("ethernet", 112), ("inaas", HEADER_LEN as u32 * 8)])
            .metadata_bits(20 * 32 + 3 * 20 + 64)
            .bridged_bytes(bridged::LEN)
            .classify(pisa::ClassifyRule::ethertype(ETHERTYPE))
            .max_recirculations(Some(1))
            .note("one uid per packet, not one per item: 20 x 32-bit uids do not fit the 256-byte parser beside the 20 items")
            .note(
                "a Tofino 1 stateful ALU returns 32 bits, so a preempted register's 64-bit swap takes one recirculation (value, then key)",
            )
            .note("32768 cells per segment: the paper's 40k x 64-bit, four per stage, need 84 SRAM blocks of the 80 a stage has")
            .note("leases hold a deadline on the switch clock and T is capped per tenant, so packets cannot forge a preemption")
            .note(&format!(
                "{n} of the 20 items' segments per pass (deadline, holder and key-value arrays, four per stage); items beyond them fail"
            ));

        let a_set_tenant = b.action("set_tenant", &[("slot", 16), ("max_lease_us", 32)], "a registered tenant on this port");
        let a_forged = b.action("forged_uid", &[], "the uid is not registered on this port");
        let tenants = b.table(TableSpec {
            name: "tenants",
            doc: "tenant registry: (ingress port, uid) -> usage slot and longest lease; filled by the controller",
            gress: Gress::Ingress,
            stage: 0,
            size: TENANT_SLOTS,
            keys: &[("ig_intr_md.ingress_port", 16, MatchKind::Exact), ("hdr.inaas.uid", 32, MatchKind::Exact)],
            actions: &[a_set_tenant, a_forged],
            default_action: (a_forged, &[]),
            const_default: true,
        });
        let a_set_goalkeeper = b.action("set_goalkeeper", &[("port", 9)], "the goalkeeper host's port");
        let a_no_goalkeeper = b.action("no_goalkeeper", &[], "no goalkeeper configured: packets it should take are dropped");
        let goalkeeper = b.table(TableSpec {
            name: "goalkeeper",
            doc: "the goalkeeper's port (one entry, key 0)",
            gress: Gress::Ingress,
            stage: 1,
            size: 1,
            keys: &[("meta.zero", 8, MatchKind::Exact)],
            actions: &[a_set_goalkeeper, a_no_goalkeeper],
            default_action: (a_no_goalkeeper, &[]),
            const_default: true,
        });
        let fr = b.register::<u32>("forged_uid", Gress::Ingress, 1, PORTS, "packets per ingress port whose uid is not registered there");
        let forged = b.register_action_salu(fr, "count", Inc);

        let mut segments = Vec::with_capacity(n);
        let mut deadlines = Vec::with_capacity(n);
        for j in 0..n {
            let dr = b.register::<u32>(
                &format!("lease_deadline_{j}"),
                Gress::Ingress,
                layout.deadline_stage(j),
                SEGMENT_SIZE,
                "lease deadline in switch µs (0: free)",
            );
            b.cell_fields(&dr, &[("deadline_us", 32)]);
            deadlines.push((b.register_action_salu(dr, "take", DeadlineTake), b.register_action_salu(dr, "probe", DeadlineProbe)));
        }
        let mut holders = Vec::with_capacity(n);
        for j in 0..n {
            let hr = b.register::<u32>(
                &format!("lease_{j}"),
                Gress::Ingress,
                layout.holder_stage(j),
                SEGMENT_SIZE,
                "uid of the lease's holder (bit 31: busy, being moved)",
            );
            b.cell_fields(&hr, &[("holder_uid", 32)]);
            holders.push((
                b.register_action_salu(hr, "take", HolderTake),
                b.register_action_salu(hr, "check", HolderCheck),
                b.register_action_salu(hr, "commit", LeaseCommit),
            ));
        }
        for (j, ((take, probe), (hold, holder, commit))) in deadlines.into_iter().zip(holders).enumerate() {
            let kr = b.register::<DualCell>(
                &format!("kv_{j}"),
                Gress::Ingress,
                layout.kv_stage(j),
                SEGMENT_SIZE,
                "key (lo) and value (hi, offset binary: value XOR 2^31, never 0)",
            );
            b.cell_fields(&kr, &[("key", 32), ("value", 32)]);
            let exchange = b.register_action_salu(kr, "exchange", Exchange);
            let read = b.register_action_salu(kr, "read", Read);
            let write = b.register_action_salu(kr, "write", Write);
            let reduce = b.register_action_body(kr, "reduce", Reduce);
            segments.push(Segment { take, probe, hold, holder, commit, exchange, read, write, reduce });
        }
        let instance_stage = layout.end_stage();
        let mut acceptors = Vec::with_capacity(ACCEPTORS);
        for j in 0..if with_paxos { ACCEPTORS } else { 0 } {
            let ir = b.register::<u32>(
                &format!("paxos_instance_{j}"),
                Gress::Egress,
                instance_stage,
                SEGMENT_SIZE,
                "acceptor j: the newest instance tag the slot served",
            );
            let rr = b.register::<DualCell>(
                &format!("paxos_round_{j}"),
                Gress::Egress,
                instance_stage + 1,
                SEGMENT_SIZE,
                "acceptor j under segment j's lease: promised round (lo), voted round (hi)",
            );
            b.cell_fields(&rr, &[("rnd", 32), ("vrnd", 32)]);
            let vr = b.register::<DualCell>(
                &format!("paxos_vote_{j}"),
                Gress::Egress,
                instance_stage + 2,
                SEGMENT_SIZE,
                "acceptor j: instance tag (lo), voted value (hi)",
            );
            b.cell_fields(&vr, &[("instance_tag", 32), ("value", 32)]);
            acceptors.push(Acceptor {
                advance: b.register_action_salu(ir, "advance", Advance),
                clear_instance: b.register_action_salu(ir, "clear", ClearInstance),
                prepare: b.register_action_salu(rr, "prepare", Prepare),
                accept: b.register_action_salu(rr, "accept", Accept),
                clear_round: b.register_action_salu(rr, "clear", Clear),
                read: b.register_action_salu(vr, "read", VoteRead),
                write: b.register_action_salu(vr, "write", VoteWrite),
                clear_vote: b.register_action_salu(vr, "clear", Clear),
            });
        }
        let bloom = bloom::declare(&mut b);
        let ur =
            b.register::<DualCell>("tenant_usage", Gress::Egress, 1, TENANT_SLOTS, "per tenant slot: ALU operations (lo), packets (hi)");
        b.cell_fields(&ur, &[("alu_ops", 32), ("packets", 32)]);
        let usage = b.register_action_salu(ur, "add", AddPair);
        let er = b.register::<DualCell>(
            "tenant_events",
            Gress::Egress,
            1,
            TENANT_SLOTS,
            "per tenant slot: mismatching accesses (lo), leases taken (hi)",
        );
        b.cell_fields(&er, &[("mismatches", 32), ("leases_taken", 32)]);
        let events = b.register_action_salu(er, "add", AddPair);
        let d_forged = b.drop_reason("inaas_forged_uid");
        let d_no_goalkeeper = b.drop_reason("inaas_no_goalkeeper");
        let decl = b.build().expect("inaas declaration is valid");
        Inaas {
            decl,
            layout,
            segments,
            acceptors,
            bloom,
            tenants,
            goalkeeper,
            a_set_tenant,
            a_set_goalkeeper,
            forged,
            usage,
            events,
            d_forged,
            d_no_goalkeeper,
        }
    }

    /// The primitive of every item, from the flags alone (`None`: a forbidden combination).
    fn prims(v: &InaasPacket<&[u8]>) -> Option<[Prim; ITEMS]> {
        let (r, w, red) = (v.bitmap(Bitmap::Read), v.bitmap(Bitmap::Write), v.bitmap(Bitmap::Reduce));
        let mut prims = [Prim::None; ITEMS];
        for (j, slot) in prims.iter_mut().enumerate() {
            let bit = 1 << j;
            *slot = prim(r & bit != 0, w & bit != 0, red & bit != 0)?;
        }
        Some(prims)
    }

    /// Stateless checks before any memory access; `None` drops the packet as malformed.
    fn check(&self, v: &InaasPacket<&[u8]>) -> Option<[Prim; ITEMS]> {
        let op = v.op();
        if is_paxos(op) {
            // Without acceptors a Paxos packet is malformed (dropped, counted).
            return if self.acceptors.is_empty() { None } else { Self::check_paxos(v) };
        }
        if is_bloom(op) {
            return bloom::check(v);
        }
        if Operator::from_u8(op).is_none() && op != OP_DONE {
            return None;
        }
        let valid = v.bitmap(Bitmap::Valid);
        let (r, w, red, comp) = (v.bitmap(Bitmap::Read), v.bitmap(Bitmap::Write), v.bitmap(Bitmap::Reduce), v.bitmap(Bitmap::Compute));
        if (r | w | red | comp) & !valid != 0 {
            return None;
        }
        if comp != 0 && Operator::from_u8(op).is_none() {
            return None;
        }
        let mut prims = [Prim::None; ITEMS];
        for (j, slot) in prims.iter_mut().enumerate() {
            let bit = 1 << j;
            let p = prim(r & bit != 0, w & bit != 0, red & bit != 0)?;
            if p != Prim::None {
                let (key, value) = (v.key(j), v.value(j));
                if v.idx(j) as u32 >= SEGMENT_SIZE || value == MISS {
                    return None;
                }
                let bad = match p {
                    Prim::Read | Prim::Swap | Prim::Collect => key == 0,
                    Prim::Write => key == 0 && value != 0,
                    Prim::Reduce => key & 0xFFFF == 0,
                    Prim::None => false,
                };
                if bad {
                    return None;
                }
            }
            *slot = p;
        }
        Some(prims)
    }

    /// A Paxos packet: only read items, only in acceptor segments, at least one; ballots in
    /// 1..2^31; an instance tag.
    fn check_paxos(v: &InaasPacket<&[u8]>) -> Option<[Prim; ITEMS]> {
        let valid = v.bitmap(Bitmap::Valid);
        let others = v.bitmap(Bitmap::Write) | v.bitmap(Bitmap::Reduce) | v.bitmap(Bitmap::Compute);
        if valid == 0 || valid & !((1 << ACCEPTORS) - 1) != 0 || v.bitmap(Bitmap::Read) != valid || others != 0 {
            return None;
        }
        if v.key(PAXOS_TAG_ITEM) == 0 {
            return None;
        }
        let mut prims = [Prim::None; ITEMS];
        for (j, slot) in prims.iter_mut().enumerate().take(ACCEPTORS) {
            if valid & 1 << j != 0 {
                let b = v.key(j);
                if b == 0 || b >= REFUSED || v.idx(j) as u32 >= SEGMENT_SIZE || v.value(j) == MISS {
                    return None;
                }
                *slot = Prim::Read;
            }
        }
        Some(prims)
    }

    /// The lease check of Algorithm 1 for the items in `want` (segments only): the
    /// deadline arrays (take, or probe), then the holder arrays, the action chosen by the
    /// deadline's output. Per item: the holder (== uid when the packet's tenant holds it), 0
    /// while the register is being moved (or, probing, free or expired), or
    /// `ACQUIRED | previous holder` when this packet took it (then marked [`BUSY`]).
    fn leases<M: TraceMode>(&self, pass: &mut Pass<'_, M>, want: u32, uid: u32, lease_t: Option<u32>) -> [u32; ITEMS] {
        let now = (pass.now_ns() / 1_000) as u32;
        let v = InaasPacket::new_unchecked(&pass.hdr()[14..]);
        let idx: [u32; ITEMS] = std::array::from_fn(|j| v.idx(j) as u32);
        let n = self.segments.len();
        let mut gone = [false; ITEMS];
        for j in 0..n {
            if want & 1 << j != 0 {
                let seg = &self.segments[j];
                gone[j] = match lease_t {
                    Some(t) => pass.execute(&seg.take, idx[j], (now, deadline(now, t))),
                    None => pass.execute(&seg.probe, idx[j], now),
                }
                .get()
                    != 0;
            }
        }
        let mut held = [0u32; ITEMS];
        for j in 0..n {
            if want & 1 << j == 0 {
                continue;
            }
            let seg = &self.segments[j];
            held[j] = match (gone[j], lease_t) {
                (true, None) => 0,
                (true, Some(_)) => ACQUIRED | pass.execute(&seg.hold, idx[j], uid | BUSY).get() & MAX_UID,
                (false, _) => pass.execute(&seg.holder, idx[j], ()).get(),
            };
        }
        held
    }

    /// Probe (never take) the leases of the first `n` items' segments, as Paxos and Bloom
    /// packets do: an item whose register this tenant does not hold fails (a mismatch if
    /// another holds it); each held one costs `ops` ALU operations.
    fn probe_leases<M: TraceMode>(&self, pass: &mut Pass<'_, M>, prims: &[Prim; ITEMS], uid: u32, n: usize, ops: u8) -> Outcome {
        let mut out = Outcome::default();
        let want = prims.iter().take(n).enumerate().filter(|(_, p)| **p != Prim::None).fold(0u32, |w, (j, _)| w | 1 << j);
        let held = self.leases(pass, want, uid, None);
        for (j, held) in held.iter().enumerate().take(n) {
            if want & 1 << j == 0 {
                continue;
            }
            let held = *held;
            if held != uid {
                out.failed |= 1 << j;
                if held != 0 {
                    out.mismatches += 1;
                }
            } else {
                out.alu_ops += ops;
            }
        }
        out
    }

    /// Paxos in ingress: probe the leases; the acceptors run in egress. Always answered
    /// to the sender.
    #[allow(clippy::too_many_arguments)]
    fn paxos_ingress<M: TraceMode>(&self, pass: &mut Pass<'_, M>, prims: &[Prim; ITEMS], uid: u32, port: u16, gk: u16, slot: u16, fl: u8) {
        let out = self.probe_leases(pass, prims, uid, ACCEPTORS, 3);
        InaasPacket::new_unchecked(&mut pass.hdr_mut()[14..]).set_bitmap(Bitmap::Failed, out.failed);
        self.bridge(pass, slot, port, gk, &out);
        pass.bridged_mut()[bridged::PAXOS] = 1;
        let h = pass.hdr_mut();
        crate::reply::swap_macs(h);
        h[15] = fl & !flags::RETRANS | flags::REPLY;
        pass.forward(port);
    }

    /// Paxos in egress: each leased acceptor decides (stage 2) and reads or writes its
    /// vote (stage 3); refusals become failed items carrying the promise in the key.
    fn paxos_egress<M: TraceMode>(&self, pass: &mut Pass<'_, M>) {
        let v = InaasPacket::new_unchecked(&pass.hdr()[14..]);
        let phase1 = v.op() == OP_PAXOS_1A;
        let live = v.bitmap(Bitmap::Valid) & !v.bitmap(Bitmap::Failed);
        let tag = v.key(PAXOS_TAG_ITEM);
        let mut items = [(0u32, 0u32, 0i32); ACCEPTORS];
        for (j, it) in items.iter_mut().enumerate() {
            *it = (v.idx(j) as u32, v.key(j), v.value(j));
        }
        // Stage 17 (with 20 segments): the slot's instance; 18: every acceptor decides; 19: the votes.
        let mut stale = 0u32;
        for (j, (acc, it)) in self.acceptors.iter().zip(&items).enumerate() {
            if live & 1 << j != 0 {
                let s = pass.execute(&acc.advance, it.0, (!phase1, tag)).get();
                if s & STALE != 0 {
                    stale |= 1 << j;
                }
            }
        }
        let live = live & !stale;
        let mut decided = [None; ACCEPTORS];
        for (j, d) in decided.iter_mut().enumerate() {
            if live & 1 << j != 0 {
                let (idx, ballot, _) = items[j];
                let a = &self.acceptors[j];
                let r = if phase1 { pass.execute(&a.prepare, idx, ballot) } else { pass.execute(&a.accept, idx, ballot) };
                *d = Some(r.map(round_word));
            }
        }
        let mut refused = 0u32;
        let mut out = [(0u32, None::<i32>); ACCEPTORS];
        for j in 0..ACCEPTORS {
            let Some(r) = decided[j] else { continue };
            let (idx, _, value) = items[j];
            let a = &self.acceptors[j];
            let vote = if phase1 {
                Some(vote_value(pass.execute(&a.read, idx, tag).get()))
            } else {
                // The vote stage writes only where the round stage accepted.
                let accepted = r.map(|r| r & REFUSED == 0);
                if accepted.get() {
                    pass.execute(&a.write, idx, accepted.map(|_| (tag, value)));
                }
                None
            };
            let r = r.get();
            if r & REFUSED != 0 {
                refused |= 1 << j;
                out[j] = (r & !REFUSED, None);
            } else {
                out[j] = (r, vote);
            }
        }
        let mut p = InaasPacket::new_unchecked(&mut pass.hdr_mut()[14..]);
        for j in 0..ACCEPTORS {
            if stale & 1 << j != 0 {
                // Refused with promise 0: the proposer's instance is behind the ring.
                p.set_key(j, 0);
            }
        }
        let refused = refused | stale;
        for (j, (k, vote)) in out.iter().enumerate() {
            if live & 1 << j == 0 {
                continue;
            }
            match vote {
                // 1b: (vrnd, value) if the cell voted for this instance, else (0, 0).
                Some(NO_VOTE) => {
                    p.set_key(j, 0);
                    p.set_value(j, 0);
                }
                Some(val) => {
                    p.set_key(j, *k);
                    p.set_value(j, *val);
                }
                None => p.set_key(j, *k),
            }
        }
        let failed = p.bitmap(Bitmap::Failed);
        p.set_bitmap(Bitmap::Failed, failed | refused);
    }

    fn first_pass<M: TraceMode>(&self, pass: &mut Pass<'_, M>) {
        let port = pass.ingress_port();
        let v = InaasPacket::new_unchecked(&pass.hdr()[14..]);
        let Some(prims) = self.check(&v) else {
            pass.drop(DropCode::MALFORMED);
            return;
        };
        let uid = v.uid();
        let fl = v.flags();
        let op = Operator::from_u8(v.op());
        let compute = v.bitmap(Bitmap::Compute);
        let mut items = [(0u16, 0u32, 0i32); ITEMS];
        for (j, it) in items.iter_mut().enumerate() {
            *it = (v.idx(j), v.key(j), v.value(j));
        }
        let req_t = v.time_limit();

        // Stage 0: who is this? Stage 1: where is the goalkeeper?
        let t = pass.apply_u64(&self.tenants, (port as u64) << 32 | uid as u64);
        let g = pass.apply_u64(&self.goalkeeper, 0);
        let gk = if g.action == self.a_set_goalkeeper { Some(g.param(0) as u16) } else { None };
        if t.action != self.a_set_tenant {
            if (port as u32) < PORTS {
                pass.execute(&self.forged, port as u32, ());
            }
            pass.hdr_mut()[14 + 1] = fl | flags::FORGED | flags::GOALKEEPER;
            match gk {
                Some(p) => pass.forward(p),
                None => pass.drop(self.d_forged),
            }
            return;
        }
        let slot = t.param(0) as u16;
        let lease_t = req_t.min(t.param(1) as u32).min(MAX_LEASE_US);
        let Some(gk) = gk else {
            pass.drop(self.d_no_goalkeeper);
            return;
        };
        if is_paxos(v_op(pass)) {
            self.paxos_ingress(pass, &prims, uid, port, gk, slot, fl);
            return;
        }
        if is_bloom(v_op(pass)) {
            self.bloom_ingress(pass, &prims, uid, port, gk, slot, fl);
            return;
        }
        let mut out = Outcome::default();
        if fl & flags::RETRANS != 0 {
            // Algorithm 1: a retransmission goes to the goalkeeper, memory untouched.
            pass.hdr_mut()[15] = fl | flags::GOALKEEPER;
            self.bridge(pass, slot, port, gk, &out);
            pass.forward(gk);
            return;
        }
        // The lease check per item that touches memory (deadline, then holder arrays); an
        // item beyond the segments a pass has fails.
        let n = self.segments.len();
        let want = prims.iter().enumerate().filter(|(_, p)| **p != Prim::None).fold(0u32, |w, (j, _)| w | 1 << j);
        let here = ((1u64 << n) - 1) as u32;
        out.failed = want & !here;
        let held = self.leases(pass, want & here, uid, Some(lease_t));
        for (j, held) in held.iter().enumerate().take(n) {
            if want & 1 << j == 0 {
                continue;
            }
            let held = *held;
            if held & ACQUIRED != 0 {
                out.preempted |= 1 << j;
                out.acquisitions += 1;
            } else if held != uid {
                // Another tenant's register (a mismatch, counted), or one being moved (0).
                out.failed |= 1 << j;
                if held != 0 {
                    out.mismatches += 1;
                }
            }
        }
        // The key-value arrays: the primitives, then compute.
        for j in 0..n {
            let bit = 1u32 << j;
            let (idx, key, value) = items[j];
            let seg = &self.segments[j];
            if out.failed & bit != 0 {
                continue;
            }
            let mut value_out = value;
            if out.preempted & bit != 0 {
                let install = if installs(prims[j]) { value } else { 0 };
                // The value half, whatever the key (Read's evict mode); the key half next pass.
                value_out = dec_evicted(pass.execute(&seg.read, idx as u32, (EVICT, enc(install))).get());
                out.alu_ops += 1;
            } else {
                match prims[j] {
                    Prim::None => {}
                    Prim::Read | Prim::Collect | Prim::Swap => {
                        let got = match prims[j] {
                            Prim::Swap => pass.execute(&seg.exchange, idx as u32, (key, enc(value))),
                            Prim::Collect => pass.execute(&seg.reduce, idx as u32, (key, COLLECT)),
                            _ => pass.execute(&seg.read, idx as u32, (key, 0)),
                        }
                        .map(dec);
                        out.alu_ops += 1;
                        if got == MISS {
                            out.failed |= bit;
                            out.mismatches += 1;
                        } else {
                            value_out = got.get();
                        }
                    }
                    Prim::Write => {
                        pass.execute(&seg.write, idx as u32, (key, enc(value)));
                        out.alu_ops += 1;
                    }
                    Prim::Reduce => {
                        let s = pass.execute(&seg.reduce, idx as u32, (key, value));
                        out.alu_ops += 1;
                        match s.get() {
                            reduce_status::MISMATCH => {
                                out.failed |= bit;
                                out.mismatches += 1;
                            }
                            reduce_status::OVERFLOW => out.overflow |= bit,
                            _ => {}
                        }
                    }
                }
            }
            if compute & bit != 0 && out.failed & bit == 0 {
                if let Some(op) = op {
                    let (r, over) = arith::compute(op, value_out, key);
                    out.alu_ops += 1;
                    if over {
                        // Keep the operand, not the saturated result: the goalkeeper
                        // completes it exactly from the operand.
                        out.overflow |= bit;
                    } else {
                        value_out = r;
                    }
                }
            }
            if value_out != value {
                InaasPacket::new_unchecked(&mut pass.hdr_mut()[14..]).set_value(j, value_out);
            }
        }

        let mut p = InaasPacket::new_unchecked(&mut pass.hdr_mut()[14..]);
        if compute != 0 && out.overflow & compute == 0 {
            // Paper: op 15 marks a finished compute. With an overflow the operator stays,
            // for the goalkeeper to finish it.
            p.set_op(OP_DONE);
        }
        p.set_bitmap(Bitmap::Failed, out.failed);
        p.set_bitmap(Bitmap::Preempted, out.preempted);
        p.set_bitmap(Bitmap::Overflow, out.overflow);
        self.bridge(pass, slot, port, gk, &out);
        if out.preempted != 0 {
            pass.recirculate();
        } else if out.needs_goalkeeper() {
            pass.hdr_mut()[15] = fl | flags::GOALKEEPER;
            pass.forward(gk);
        } else {
            // Answer the sender: swap the Ethernet addresses, back out of its port.
            let h = pass.hdr_mut();
            crate::reply::swap_macs(h);
            h[15] = fl | flags::REPLY;
            pass.forward(port);
        }
    }

    /// The second pass of a preemption: the key half of the swap, if the lease is still ours
    /// (then the lease's busy mark is cleared).
    fn second_pass<M: TraceMode>(&self, pass: &mut Pass<'_, M>) {
        let br = *pass.bridged();
        let gk = u16::from_be_bytes([br[bridged::GOALKEEPER], br[bridged::GOALKEEPER + 1]]);
        let v = InaasPacket::new_unchecked(&pass.hdr()[14..]);
        // Checked on the first pass; since then the switch itself rewrote the values.
        let Some(prims) = Self::prims(&v) else {
            pass.drop(DropCode::MALFORMED);
            return;
        };
        let uid = v.uid();
        let preempted = v.bitmap(Bitmap::Preempted);
        let mut failed = v.bitmap(Bitmap::Failed);
        let mut items = [(0u16, 0u32); ITEMS];
        for (j, it) in items.iter_mut().enumerate() {
            *it = (v.idx(j), v.key(j));
        }
        let mut clear = 0u8;
        let mut holders = [0u32; ITEMS];
        for j in 0..self.segments.len() {
            if preempted & 1 << j != 0 {
                holders[j] = pass.execute(&self.segments[j].commit, items[j].0 as u32, uid).get();
            }
        }
        let mut alu = 0u8;
        for j in 0..self.segments.len() {
            let bit = 1 << j;
            if preempted & bit == 0 {
                continue;
            }
            if holders[j] != uid {
                // Preempted again between the passes: leave the key to whoever holds it
                // now; the goalkeeper completes this item.
                failed |= bit;
                continue;
            }
            if j < self.acceptors.len() {
                clear |= 1 << j;
            }
            let install = if installs(prims[j]) { items[j].1 } else { 0 };
            let old_key = pass.execute(&self.segments[j].write, items[j].0 as u32, (install, KEY_ONLY)).get();
            alu += 1;
            InaasPacket::new_unchecked(&mut pass.hdr_mut()[14..]).set_key(j, old_key);
        }
        let mut p = InaasPacket::new_unchecked(&mut pass.hdr_mut()[14..]);
        p.set_bitmap(Bitmap::Failed, failed);
        let fl = p.flags();
        p.set_flags(fl | flags::GOALKEEPER);
        let b = pass.bridged_mut();
        b[bridged::ALU_OPS] = b[bridged::ALU_OPS].wrapping_add(alu);
        b[bridged::CLEAR] = clear;
        pass.forward(gk);
    }

    fn bridge<M: TraceMode>(&self, pass: &mut Pass<'_, M>, slot: u16, port: u16, gk: u16, out: &Outcome) {
        let b = pass.bridged_mut();
        b[bridged::VALID] = 1;
        b[bridged::SLOT..bridged::SLOT + 2].copy_from_slice(&slot.to_be_bytes());
        b[bridged::PORT..bridged::PORT + 2].copy_from_slice(&port.to_be_bytes());
        b[bridged::GOALKEEPER..bridged::GOALKEEPER + 2].copy_from_slice(&gk.to_be_bytes());
        b[bridged::ALU_OPS] = out.alu_ops;
        b[bridged::MISMATCHES] = out.mismatches;
        b[bridged::ACQUISITIONS] = out.acquisitions;
    }
}

fn v_op<M: TraceMode>(pass: &Pass<'_, M>) -> u8 {
    pass.hdr()[14]
}

impl Default for Inaas {
    fn default() -> Self {
        Self::new()
    }
}

impl Program for Inaas {
    fn decl(&self) -> &ProgramDecl {
        &self.decl
    }
    pisa::controls_by_trace_mode!(ingress, egress);
}

/// The control blocks, once, for both trace modes (see `Program::ingress_untraced`).
impl Inaas {
    #[inline(always)]
    fn ingress_control<M: TraceMode>(&self, pass: &mut Pass<'_, M>) {
        if pass.hdr().len() < PARSE_DEPTH as usize {
            pass.drop(DropCode::MALFORMED);
            return;
        }
        let fl = pass.hdr()[15];
        if fl & flags::GK_REPLY != 0 {
            // The goalkeeper's answer to a tenant: forwarded like any frame.
            return;
        }
        if pass.recirculations() > 0 && pass.ingress_port() == PORT_RECIRC {
            self.second_pass(pass);
        } else {
            self.first_pass(pass);
        }
    }

    #[inline(always)]
    fn egress_control<M: TraceMode>(&self, pass: &mut Pass<'_, M>) {
        let b = *pass.bridged();
        if b[bridged::VALID] != 1 {
            return;
        }
        let slot = u16::from_be_bytes([b[bridged::SLOT], b[bridged::SLOT + 1]]) as u32;
        if slot >= TENANT_SLOTS {
            return;
        }
        if b[bridged::BLOOM] != bloom::kind::NONE {
            self.bloom_egress(pass, b[bridged::BLOOM]);
        }
        pass.execute(&self.usage, slot, (b[bridged::ALU_OPS] as u32, 1));
        pass.execute(&self.events, slot, (b[bridged::MISMATCHES] as u32, b[bridged::ACQUISITIONS] as u32));
        if b[bridged::PAXOS] == 1 {
            self.paxos_egress(pass);
        } else if b[bridged::CLEAR] != 0 {
            // A lease on an acceptor cell changed hands: the old holder's votes go.
            let idx: [u32; ACCEPTORS] = std::array::from_fn(|j| InaasPacket::new_unchecked(&pass.hdr()[14..]).idx(j) as u32);
            for (j, i) in idx.iter().enumerate() {
                if b[bridged::CLEAR] & 1 << j != 0 {
                    pass.execute(&self.acceptors[j].clear_instance, *i, ());
                }
            }
            for (j, i) in idx.iter().enumerate() {
                if b[bridged::CLEAR] & 1 << j != 0 {
                    pass.execute(&self.acceptors[j].clear_round, *i, ());
                }
            }
            for (j, i) in idx.iter().enumerate() {
                if b[bridged::CLEAR] & 1 << j != 0 {
                    pass.execute(&self.acceptors[j].clear_vote, *i, ());
                }
            }
        }
    }
}
