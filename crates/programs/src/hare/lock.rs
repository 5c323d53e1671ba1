//! `hare_lock`: the lock manager of Hare §V (NetLock-style), with Hare's offloading.
//!
//! Offloaded locks are found through an e-MAT on their lock id. Each has, in consecutive
//! stages, the queue position of its head waiter (`lock_head`), its holder state and queue
//! length (`lock_state`), the waiters' modes (`lock_excl`, one bit per position) and a
//! fixed-size waiting queue of [`QUEUE`] requests (`lock_queue_ip`, `lock_queue_tag`: one
//! register cell per position, `slot * QUEUE + position`), every register action a
//! declared stateful-ALU instruction (NetLock's split; `docs/pisa-rules.md`).
//!
//! The state as moved (the lock server's layout): `lo` = holders (bits 0..16) | mode (bits
//! 16..18: 0 free, 1 shared, 2 exclusive); `hi` = head (bits 0..3) | length (bits 3..7) |
//! exclusive-waiter mask (bits 8..16, one bit per queue position). A queue cell: `lo` =
//! client IPv4 address, `hi` = client id (bits 16..32) | request seq (bits 0..16).
//!
//! How the switch grants, queues and hands a lock over, and how lock state moves between
//! switch and server: docs/hare.md, "The lock manager on the switch".

use pisa::decl::TableSpec;
use pisa::salu::common::{Read, Write};
use pisa::{ActionId, DropCode, DualCell, Gress, MatchKind, Pass, ProgramBuilder, Table, TraceMode, PORT_RECIRC};
use pisa::{Cmp, Cond, Op as AluOp, OutputSource, Pred, Salu, SaluOutput, SaluProgram, Src, Update};
use wire::hare::{Op, Packet, HEADER_LEN, PORT_CLIENT};

use super::app::{DataMv, HareApp, QueryHit};
use super::kv::Packer;
use super::oostat::{state, StateManager};
use super::{back_to_sender, HareConfig, HareProgram, L2_L4_LEN};

/// Waiting requests per offloaded lock.
pub const QUEUE: u32 = 8;
/// Clone session whose replica is the recirculation port (set by the control plane).
pub const GRANT_SESSION: u16 = 91;
/// Flag on a release ack whose clone must become the next waiter's grant.
pub const FLAG_GRANT_NEXT: u8 = 0x04;
/// Grant status: granted / retry later.
pub const GRANTED: u8 = 0;
pub const RETRY: u8 = 1;
/// Lock modes in requests (`status` of an ACQUIRE).
pub const SHARED: u8 = 0;
pub const EXCLUSIVE: u8 = 1;

const MODE_FREE: u32 = 0;
const MODE_SHARED: u32 = 1;
const MODE_EXCL: u32 = 2;

/// Holder state `h` in `lock_state`: 0 free, `1..X` that many shared holders, `X` held
/// exclusively (shared holders stay below it, as the 16-bit holder count did).
const X: u32 = 1 << 16;
/// `lock_state.lo` is `h + len * LEN_ONE` (`len` the waiters queued).
const LEN_ONE: u32 = 1 << 20;
/// `lo` below this: fewer than [`QUEUE`] waiters (`h` stays below `LEN_ONE`).
const FULL: u32 = QUEUE << 20;
/// Bridged byte 1 of a grant pass (byte 0 is the aging pass's); byte 2 the head position
/// it pops and, in bit 3, whether that waiter is exclusive.
const GRANT_PASS: u8 = 2;

/// ACQUIRE on `lock_state`, operands (limit, delta): (`X`, 1) for a shared request, (1,
/// `X`) for an exclusive one. `lo < limit` says at once that nobody waits and the lock is
/// compatible (free, or shared for a shared request): granted, `h` grows by `delta`.
/// Otherwise, with fewer than [`QUEUE`] waiters, the request is queued (`len` + 1). The
/// old `lo` is returned; the stage after recomputes the decision and the position from it.
#[derive(Clone, Copy)]
struct Acquire;
impl SaluProgram<DualCell, (u32, u32), u32> for Acquire {
    const SALU: Salu = Salu {
        conds: &[Cond::new(Src::Lo, Cmp::LtU, Src::PhvLo), Cond::new(Src::Lo, Cmp::LtU, Src::K(FULL as i32))],
        lo: &[Update::new(Pred::C0, Src::Lo, AluOp::Add, Src::PhvHi), Update::new(Pred::C1, Src::Lo, AluOp::Add, Src::K(LEN_ONE as i32))],
        hi: &[Update::new(Pred::C0, Src::Hi, AluOp::Add, Src::PhvHi)],
        out: &[SaluOutput::always(OutputSource::OldLo)],
    };
}

/// RELEASE on `lock_state`: one holder leaves (the exclusive one, or one of the shared;
/// nothing on a free lock). `hi` mirrors `h` so that two conditions on it suffice. Returns
/// the new `lo`: whether the head waiter may have the lock is decided after the stage
/// that holds the waiters' modes, and taken by a recirculated pass ([`Grant`]).
#[derive(Clone, Copy)]
struct Release;
impl SaluProgram<DualCell, (), u32> for Release {
    const SALU: Salu = Salu {
        conds: &[Cond::new(Src::Hi, Cmp::GeU, Src::K(X as i32)), Cond::new(Src::Hi, Cmp::Eq, Src::K(0))],
        lo: &[Update::new(Pred::C0, Src::Lo, AluOp::Sub, Src::K(X as i32)), Update::new(Pred::C1.not(), Src::Lo, AluOp::Sub, Src::K(1))],
        hi: &[Update::set(Pred::C0, Src::K(0)), Update::new(Pred::C1.not(), Src::Hi, AluOp::Sub, Src::K(1))],
        out: &[SaluOutput::always(OutputSource::NewLo)],
    };
}

/// The head waiter taken off the queue and made a holder (operands `delta - LEN_ONE`,
/// `delta`, with `delta` 1 or `X`), or, with operands (0, 0), a read. Returns the new `lo`.
#[derive(Clone, Copy)]
struct Grant;
impl SaluProgram<DualCell, (u32, u32), u32> for Grant {
    const SALU: Salu = Salu {
        conds: &[],
        lo: &[Update::always(Src::Lo, AluOp::Add, Src::PhvLo)],
        hi: &[Update::always(Src::Hi, AluOp::Add, Src::PhvHi)],
        out: &[SaluOutput::always(OutputSource::NewLo)],
    };
}

/// `lock_head`: compare-and-advance. The head moves on (modulo [`QUEUE`]) only if it is
/// still the position the packet read, so that two passes granting the same waiter grant it
/// once. Non-zero output: it moved.
#[derive(Clone, Copy)]
struct Pop;
impl SaluProgram<u8, u8, u8> for Pop {
    const SALU: Salu = Salu {
        conds: &[Cond::new(Src::Lo, Cmp::Eq, Src::PhvLo), Cond::new(Src::Lo, Cmp::Eq, Src::K(QUEUE as i32 - 1))],
        lo: &[Update::set(Pred::C0.and(Pred::C1), Src::K(0)), Update::new(Pred::C0, Src::Lo, AluOp::Add, Src::K(1))],
        hi: &[],
        out: &[SaluOutput::new(Pred::C0, OutputSource::Predicate)],
    };
}

/// `lock_excl`: mark a queue position's waiter exclusive / shared (operand: the position's
/// bit).
#[derive(Clone, Copy)]
struct MarkExcl;
impl SaluProgram<u8, u8, ()> for MarkExcl {
    const SALU: Salu = Salu { conds: &[], lo: &[Update::always(Src::Lo, AluOp::Or, Src::PhvLo)], hi: &[], out: &[] };
}
#[derive(Clone, Copy)]
struct MarkShared;
impl SaluProgram<u8, u8, ()> for MarkShared {
    const SALU: Salu = Salu { conds: &[], lo: &[Update::always(Src::Lo, AluOp::AndNot, Src::PhvLo)], hi: &[], out: &[] };
}

/// Overwrite both halves of the lock state.
#[derive(Clone, Copy)]
struct WritePair;
impl SaluProgram<DualCell, DualCell, ()> for WritePair {
    const SALU: Salu =
        Salu { conds: &[], lo: &[Update::set(Pred::ALWAYS, Src::PhvLo)], hi: &[Update::set(Pred::ALWAYS, Src::PhvHi)], out: &[] };
}

/// The holder state `h` of (holders, mode) as the lock's server keeps them.
fn encode_holders(holders: u32, mode: u32) -> u32 {
    match mode {
        _ if holders == 0 => 0,
        MODE_FREE => 0,
        MODE_SHARED => holders.min(X - 1),
        _ => X,
    }
}

/// (holders, mode) of a holder state `h`.
fn decode_holders(h: u32) -> (u32, u32) {
    match h {
        0 => (0, MODE_FREE),
        X => (1, MODE_EXCL),
        n => (n, MODE_SHARED),
    }
}

/// The bit of queue position `pos` (on Tofino a table of eight constant entries: a PHV
/// shift takes a constant amount).
fn pos_bit(pos: u32) -> u32 {
    1 << (pos % QUEUE)
}

/// Whether a head waiter whose mode bit is `excl` may have a lock whose holder state is
/// now `h` (after a release or a grant): a free lock to anyone, a shared one to a shared
/// waiter. The release body of old in one line, checked against it in the tests.
fn head_may_have(h: u32, excl: bool) -> bool {
    h == 0 || (h < X && !excl)
}

/// What a lock switch is built for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockConfig {
    /// Lock id size (bytes).
    pub key_bytes: usize,
    /// Locks that can be offloaded at once.
    pub slots: u32,
}

impl Default for LockConfig {
    fn default() -> Self {
        LockConfig { key_bytes: 4, slots: 4096 }
    }
}

/// A lock id is matched by one MAT; the value field carries 8 bytes (a state or a queue cell).
impl From<LockConfig> for HareConfig {
    fn from(c: LockConfig) -> HareConfig {
        HareConfig { key_bytes: c.key_bytes, value_bytes: 8, slots: c.slots, segment_bytes: Some(c.key_bytes) }
    }
}

/// The lock manager program: the generic Hare program around [`LockApp`].
pub type HareLock = HareProgram<LockApp>;

/// The lock manager as a Hare application (K3): lock state and queues, grants by the switch.
pub struct LockApp {
    key_bytes: usize,
    head_read: pisa::SaluAction<u8, (), u32, Read>,
    head_pop: pisa::SaluAction<u8, u8, u8, Pop>,
    head_write: pisa::SaluAction<u8, u8, (), Write>,
    acquire: pisa::SaluAction<DualCell, (u32, u32), u32, Acquire>,
    release: pisa::SaluAction<DualCell, (), u32, Release>,
    grant: pisa::SaluAction<DualCell, (u32, u32), u32, Grant>,
    state_write: pisa::SaluAction<DualCell, DualCell, (), WritePair>,
    excl_read: pisa::SaluAction<u8, (), u32, Read>,
    mark_excl: pisa::SaluAction<u8, u8, (), MarkExcl>,
    mark_shared: pisa::SaluAction<u8, u8, (), MarkShared>,
    excl_write: pisa::SaluAction<u8, u8, (), Write>,
    qip_read: pisa::SaluAction<u32, (), u32, Read>,
    qip_write: pisa::SaluAction<u32, u32, (), Write>,
    qtag_read: pisa::SaluAction<u32, (), u32, Read>,
    qtag_write: pisa::SaluAction<u32, u32, (), Write>,
    lock_hosts: Table,
    a_host: ActionId,
    d_waiting: DropCode,
    d_no_host: DropCode,
    d_grant_moved: DropCode,
    d_grant_taken: DropCode,
}

impl HareApp for LockApp {
    const NAME: &'static str = "hare_lock";
    const DOC: &'static str = "Hare lock manager: NetLock-style queues of 8 per offloaded lock, grants by the switch";
    const DROP_PREFIX: &'static str = "lock";
    const METADATA_BITS: u32 = 32 + 32;

    fn default_config() -> HareConfig {
        LockConfig::default().into()
    }

    fn check_config(cfg: &HareConfig) {
        assert!((1..=127).contains(&cfg.key_bytes) && cfg.value_bytes == 8 && cfg.slots * QUEUE <= 1 << 20);
    }

    fn define_appdata(b: &mut ProgramBuilder, cfg: &HareConfig, packer: &mut Packer) -> Self {
        b.max_recirculations(Some(QUEUE));
        let st1 = packer.take();
        let (st2, st3) = (st1 + 1, st1 + 2);
        let lh = b.register::<u8>("lock_head", Gress::Ingress, st1, cfg.slots, "queue position of the head waiter (0..8)");
        let head_read = b.register_action_salu(lh, "read", Read);
        let head_pop = b.register_action_salu(lh, "pop", Pop);
        let head_write = b.register_action_salu(lh, "write", Write);
        let ls = b.register::<DualCell>(
            "lock_state",
            Gress::Ingress,
            st2,
            cfg.slots,
            "holder state h (0 free, n shared holders, 65536 exclusive) plus 2^20 per waiter (lo); h (hi)",
        );
        b.cell_fields(&ls, &[("holder_state", 20), ("queue_length", 4), ("unused", 8), ("holder_state_copy", 32)]);
        let acquire = b.register_action_salu(ls, "acquire", Acquire);
        let release = b.register_action_salu(ls, "release", Release);
        let grant = b.register_action_salu(ls, "grant", Grant);
        let state_write = b.register_action_salu(ls, "write", WritePair);
        let le = b.register::<u8>("lock_excl", Gress::Ingress, st3, cfg.slots, "exclusive waiters: one bit per queue position");
        let excl_read = b.register_action_salu(le, "read", Read);
        let mark_excl = b.register_action_salu(le, "mark_exclusive", MarkExcl);
        let mark_shared = b.register_action_salu(le, "mark_shared", MarkShared);
        let excl_write = b.register_action_salu(le, "write", Write);
        let qi = b.register::<u32>("lock_queue_ip", Gress::Ingress, st3, cfg.slots * QUEUE, "waiting requests: client IPv4 address");
        let qip_read = b.register_action_salu(qi, "read", Read);
        let qip_write = b.register_action_salu(qi, "write", Write);
        let qt = b.register::<u32>(
            "lock_queue_tag",
            Gress::Ingress,
            st3,
            cfg.slots * QUEUE,
            "waiting requests: client id (high 16 bits) and request seq (low 16)",
        );
        let qtag_read = b.register_action_salu(qt, "read", Read);
        let qtag_write = b.register_action_salu(qt, "write", Write);
        let a_host = b.action("set_host", &[("port", 9), ("mac", 48)], "where a client is");
        let a_nohost = b.action("unknown_host", &[], "a client the control plane has not described");
        let lock_hosts = b.table(TableSpec {
            name: "lock_hosts",
            doc: "client address -> port and MAC, to send a waiter its grant",
            gress: Gress::Ingress,
            stage: st3,
            size: 1024,
            keys: &[("hdr.ipv4.dst_addr", 32, MatchKind::Exact)],
            actions: &[a_host, a_nohost],
            default_action: (a_nohost, &[]),
            const_default: false,
        });
        let d_waiting = b.drop_reason("lock_waiting");
        let d_no_host = b.drop_reason("lock_no_host");
        let d_grant_moved = b.drop_reason("lock_grant_moved");
        let d_grant_taken = b.drop_reason("lock_grant_taken");
        b.note("lock state is split as NetLock does, one stateful ALU instruction each: lock_head (the head's queue position, advanced by compare-and-set), lock_state (holder state and queue length, which decide grant / queue / full for an acquire), lock_excl (the waiters' modes, one bit per position), the queue cells");
        b.note("a release that lets the head waiter have the lock clones its ack to the recirculation port; that pass takes the waiter off the queue and grants it, and when the lock stays shared and the next waiter is shared, clones itself again: one recirculation per waiter granted from the queue");
        LockApp {
            key_bytes: cfg.key_bytes,
            head_read,
            head_pop,
            head_write,
            acquire,
            release,
            grant,
            state_write,
            excl_read,
            mark_excl,
            mark_shared,
            excl_write,
            qip_read,
            qip_write,
            qtag_read,
            qtag_write,
            lock_hosts,
            a_host,
            d_waiting,
            d_no_host,
            d_grant_moved,
            d_grant_taken,
        }
    }

    fn is_query(op: Op) -> bool {
        matches!(op, Op::Acquire | Op::Release)
    }

    fn query_ok(_cfg: &HareConfig, value_len: usize) -> bool {
        value_len == 8
    }

    fn intercept<M: TraceMode>(&self, pass: &mut Pass<'_, M>, op: Op, flags: u8, states: &StateManager) -> bool {
        if matches!(op, Op::ReleaseAck | Op::Grant)
            && flags & FLAG_GRANT_NEXT != 0
            && pass.ingress_port() == PORT_RECIRC
            && pass.bridged()[1] == GRANT_PASS
        {
            self.grant_next(pass, states);
            return true;
        }
        false
    }

    fn apply_queryhit<M: TraceMode>(&self, pass: &mut Pass<'_, M>, _cfg: &HareConfig, op: Op, hit: &QueryHit<'_>) {
        let slot = hit.slot as u32;
        if pass.execute(&hit.states.check, slot, ()) != state::VALID {
            return; // moving: the lock's server decides
        }
        pass.execute(&hit.oo.count, slot, ());
        let (mode, aux, seq) = {
            let p = Packet::new_unchecked(&pass.hdr()[L2_L4_LEN..]);
            (p.status(), p.aux(), p.seq())
        };
        let voff = hit.voff;
        let end = voff + 8;
        let head = pass.execute(&self.head_read, slot, ());
        match op {
            Op::Acquire => {
                let excl = mode == EXCLUSIVE;
                let (limit, delta) = if excl { (1, X) } else { (X, 1) };
                let old = pass.execute(&self.acquire, slot, (limit, delta));
                let o = old.get();
                if o < limit {
                    let h = pass.hdr_mut();
                    let mut p = Packet::new_unchecked(&mut h[L2_L4_LEN..]);
                    p.set_op(Op::Grant);
                    p.set_status(GRANTED);
                    back_to_sender(pass, end);
                } else if o < FULL {
                    // The tail: head plus the waiters before this one.
                    let pos = (head + (old >> 20)) % QUEUE;
                    let bit = pos.map(|p| pos_bit(p) as u8);
                    if excl {
                        pass.execute(&self.mark_excl, slot, bit);
                    } else {
                        pass.execute(&self.mark_shared, slot, bit);
                    }
                    let ip = {
                        let h = pass.hdr();
                        u32::from_be_bytes([h[26], h[27], h[28], h[29]])
                    };
                    let i = pos + slot * QUEUE;
                    pass.execute(&self.qip_write, i, ip);
                    pass.execute(&self.qtag_write, i, ((aux as u32) << 16) | (seq & 0xFFFF));
                    pass.drop(self.d_waiting);
                } else {
                    let h = pass.hdr_mut();
                    let mut p = Packet::new_unchecked(&mut h[L2_L4_LEN..]);
                    p.set_op(Op::Grant);
                    p.set_status(RETRY);
                    back_to_sender(pass, end);
                }
            }
            Op::Release => {
                let new = pass.execute(&self.release, slot, ());
                let mask = pass.execute(&self.excl_read, slot, ());
                let i = head + slot * QUEUE;
                let cell = DualCell::new(pass.execute(&self.qip_read, i, ()).get(), pass.execute(&self.qtag_read, i, ()).get());
                let h = pass.hdr_mut();
                let mut p = Packet::new_unchecked(&mut h[L2_L4_LEN..]);
                p.set_op(Op::ReleaseAck);
                p.set_status(GRANTED);
                let (n, head) = (new.get(), head.get());
                let excl = mask.get() & pos_bit(head) != 0;
                if n >= LEN_ONE && head_may_have(n % LEN_ONE, excl) {
                    self.clone_grant(pass, slot, head, excl, cell, voff);
                }
                back_to_sender(pass, end);
            }
            _ => {}
        }
    }

    /// `aux` selects a queue cell (0..QUEUE) or a half of the lock state (QUEUE, QUEUE + 1),
    /// in the layout the lock's server reads and writes (`lockapp.LockServer`): `lo` =
    /// holders | mode << 16, `hi` = head | length << 3 | exclusive-waiter mask << 8.
    fn apply_datamv<M: TraceMode>(&self, pass: &mut Pass<'_, M>, _cfg: &HareConfig, op: Op, dm: &DataMv) -> bool {
        if dm.vlen != 8 || dm.aux as u32 > QUEUE + 1 {
            return false;
        }
        let (slot, a, voff, end) = (dm.slot as u32, dm.aux as u32, dm.voff, dm.voff + 8);
        let to_switch = op == Op::DataMvToSwitch;
        if a >= QUEUE {
            if to_switch {
                let v = Self::pair_from(&pass.hdr()[voff..end]);
                let h = encode_holders(v.lo & 0xFFFF, (v.lo >> 16) & 3);
                let (head, len, mask) = (v.hi & 7, ((v.hi >> 3) & 15).min(QUEUE), (v.hi >> 8) & 0xFF);
                pass.execute(&self.head_write, slot, head as u8);
                pass.execute(&self.state_write, slot, DualCell::new(h + len * LEN_ONE, h));
                pass.execute(&self.excl_write, slot, mask as u8);
            } else {
                let head = pass.execute(&self.head_read, slot, ()).get();
                let lo = pass.execute(&self.grant, slot, (0, 0)).get();
                let mask = pass.execute(&self.excl_read, slot, ()).get();
                let (holders, mode) = decode_holders(lo % LEN_ONE);
                let len = lo >> 20;
                // Only the waiters' bits: positions left by granted waiters keep theirs.
                let queued = (0..len).fold(0, |m, k| m | pos_bit(head + k));
                let half = if a == QUEUE { holders | (mode << 16) } else { head | (len << 3) | ((mask & queued) << 8) };
                pass.hdr_mut()[voff + 4..end].copy_from_slice(&half.to_be_bytes());
            }
        } else {
            let i = slot * QUEUE + a;
            if to_switch {
                let v = Self::pair_from(&pass.hdr()[voff..end]);
                pass.execute(&self.qip_write, i, v.lo);
                pass.execute(&self.qtag_write, i, v.hi);
            } else {
                let v = DualCell::new(pass.execute(&self.qip_read, i, ()).get(), pass.execute(&self.qtag_read, i, ()).get());
                Self::pair_into(v, &mut pass.hdr_mut()[voff..end]);
            }
        }
        true
    }
}

impl LockApp {
    fn pair_from(b: &[u8]) -> DualCell {
        DualCell::new(u32::from_be_bytes([b[4], b[5], b[6], b[7]]), u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn pair_into(p: DualCell, b: &mut [u8]) {
        b[..4].copy_from_slice(&p.hi.to_be_bytes());
        b[4..8].copy_from_slice(&p.lo.to_be_bytes());
    }

    /// Send a copy of this packet round to grant the waiter at queue position `pos` of
    /// `slot` (its cell `cell`, exclusive or not): the value carries the cell, `hit_index`
    /// the slot, the bridged metadata the position and mode. The packet itself goes on.
    fn clone_grant<M: TraceMode>(&self, pass: &mut Pass<'_, M>, slot: u32, pos: u32, excl: bool, cell: DualCell, voff: usize) {
        let h = pass.hdr_mut();
        Self::pair_into(cell, &mut h[voff..voff + 8]);
        h[L2_L4_LEN + wire::hare::field::FLAGS] |= FLAG_GRANT_NEXT;
        Packet::new_unchecked(&mut h[L2_L4_LEN..]).set_hit_index(slot as u16);
        let b = pass.bridged_mut();
        b[1] = GRANT_PASS;
        b[2] = pos as u8 | (excl as u8) << 3;
        pass.clone_ingress(GRANT_SESSION);
    }

    /// The pass that grants a waiter the pass before found may have the lock: the clone of
    /// a release ack (or of the previous shared grant) becomes the waiter's grant. The
    /// waiter is taken off the queue only if the head is still where that pass saw it (a
    /// second pass for the same waiter finds it moved and is dropped), and only while the
    /// slot is valid (a moving lock's server grants from the state it gets). The state
    /// could only have become more permissive in between: no other waiter leaves the queue
    /// before this one, and no request is granted past a waiting one. If the lock stays
    /// shared and the next waiter is shared too, this grant is cloned around again for it,
    /// carrying its cell; the waiter this one is sent to ignores the cell and the flag.
    fn grant_next<M: TraceMode>(&self, pass: &mut Pass<'_, M>, states: &StateManager) {
        let kb = self.key_bytes;
        let voff = L2_L4_LEN + HEADER_LEN + kb;
        let cell = Self::pair_from(&pass.hdr()[voff..voff + 8]);
        let slot = Packet::new_unchecked(&pass.hdr()[L2_L4_LEN..]).hit_index() as u32;
        let b = pass.bridged()[2];
        let (pos, excl) = ((b & 7) as u32, b & 8 != 0);
        if pass.execute(&states.check, slot, ()) != state::VALID {
            pass.drop(self.d_grant_moved);
            return;
        }
        if pass.execute(&self.head_pop, slot, pos as u8) == 0 {
            pass.drop(self.d_grant_taken);
            return;
        }
        let delta = if excl { X } else { 1 };
        let new = pass.execute(&self.grant, slot, (delta.wrapping_sub(LEN_ONE), delta)).get();
        let mask = pass.execute(&self.excl_read, slot, ()).get();
        let npos = (pos + 1) % QUEUE;
        let i = slot * QUEUE + npos;
        let ncell = DualCell::new(pass.execute(&self.qip_read, i, ()).get(), pass.execute(&self.qtag_read, i, ()).get());
        let nexcl = mask & pos_bit(npos) != 0;
        let next = new >= LEN_ONE && head_may_have(new % LEN_ONE, nexcl);
        let ip = cell.lo.to_be_bytes();
        let r = pass.apply(&self.lock_hosts, &ip);
        if !r.hit || r.action != self.a_host {
            pass.drop(self.d_no_host);
            return;
        }
        let (port, mac) = (r.param(0) as u16, r.param(1));
        let h = pass.hdr_mut();
        h[0..6].copy_from_slice(&mac.to_be_bytes()[2..]);
        h[30..34].copy_from_slice(&ip);
        h[36..38].copy_from_slice(&PORT_CLIENT.to_be_bytes());
        {
            let mut ipv = wire::Ipv4Packet::new_unchecked(&mut h[14..34]);
            ipv.fill_checksum();
        }
        let mut p = Packet::new_unchecked(&mut h[L2_L4_LEN..]);
        p.set_op(Op::Grant);
        p.set_flags(0);
        p.set_status(GRANTED);
        p.set_aux((cell.hi >> 16) as u16);
        h[L2_L4_LEN + wire::hare::field::SEQ..][..4].copy_from_slice(&(cell.hi & 0xFFFF).to_be_bytes());
        if next {
            self.clone_grant(pass, slot, npos, nexcl, ncell, voff);
        }
        pass.forward(port);
    }
}
