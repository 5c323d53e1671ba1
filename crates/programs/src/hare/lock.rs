//! `hare_lock`: the lock manager of Hare §V (NetLock-style), with Hare's offloading.
//!
//! Offloaded locks are found through an e-MAT on their lock id; each has its state in
//! `lock_state` and a fixed-size waiting queue of [`QUEUE`] requests in `lock_queue` (one
//! register cell per position, `slot * QUEUE + position`). The switch grants by packets:
//!
//! - ACQUIRE: granted at once when nothing waits and the lock is free (or shared and the
//!   request is shared): the request becomes the grant, back to the client. Otherwise the
//!   request is queued (the packet ends here, counted as `lock_waiting`) or, when the queue
//!   is full, answered with `status` 1 (retry).
//! - RELEASE: answered with a release ack; when it frees the lock for the head waiter, the
//!   waiter is taken off the queue in the same pass, the ack is cloned to the recirculation
//!   port (carrying the slot in `hit_index`), and in its second pass the clone becomes the
//!   waiter's grant (addressed through `lock_hosts`). When that grant leaves the lock
//!   shared and the next waiter is shared too, the same pass takes that waiter off the
//!   queue and clones the grant around again for it: all shared waiters at the head of the
//!   queue are granted together, one recirculation each (at most [`QUEUE`]), as the lock's
//!   server grants them (`lockapp.LockServer.release`).
//!
//! Lock state on the switch is dirty data: before a lock is evicted the control plane
//! moves it back with `DataMvToServer` packets (state and each queue cell), and moves it in
//! with `DataMvToSwitch` when offloading (`aux` selects a queue cell, or the state). While a slot is `REPLACING` its requests go to
//! the lock's server, which answers "retry" until the state has moved.
//!
//! `lock_state` cell: `lo` = holders (bits 0..16) | mode (bits 16..18: 0 free, 1 shared,
//! 2 exclusive); `hi` = head (bits 0..3) | length (bits 3..7) | exclusive-waiter mask
//! (bits 8..16, one bit per queue position). A queue cell: `lo` = client IPv4 address,
//! `hi` = client id (bits 16..32) | request seq (bits 0..16).

use pisa::decl::TableSpec;
use pisa::salu::common::{Read, Write};
use pisa::{ActionId, DropCode, Gress, MatchKind, Pair, Pass, ProgramBuilder, RegisterAction, SaluBody, Table, TraceMode, PORT_RECIRC};
use pisa::{Pred, Salu, SaluProgram, Src, Update};
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

/// What the state ALU decided.
const OUT_GRANT: u32 = 1 << 8;
const OUT_QUEUED: u32 = 2 << 8;
const OUT_FULL: u32 = 3 << 8;
const OUT_NONE: u32 = 4 << 8;
const OUT_NEXT: u32 = 5 << 8;

fn unpack(c: Pair) -> (u32, u32, u32, u32, u32) {
    (c.lo & 0xFFFF, (c.lo >> 16) & 3, c.hi & 7, (c.hi >> 3) & 15, (c.hi >> 8) & 0xFF)
}
fn pack(holders: u32, mode: u32, head: u32, len: u32, mask: u32) -> Pair {
    Pair::new(holders | (mode << 16), head | (len << 3) | (mask << 8))
}

/// ACQUIRE on the lock state: operand 1 for an exclusive request, 0 for shared.
#[derive(Clone, Copy)]
struct Acquire;
impl SaluBody<Pair, u32, u32> for Acquire {
    fn run(self, c: Pair, excl: u32) -> (Pair, u32) {
        let (holders, mode, head, len, mask) = unpack(c);
        let want = if excl != 0 { MODE_EXCL } else { MODE_SHARED };
        let free = holders == 0 || mode == MODE_FREE;
        if len == 0 && (free || (mode == MODE_SHARED && want == MODE_SHARED)) {
            return (pack(holders + 1, want, head, len, mask), OUT_GRANT);
        }
        if len < QUEUE {
            let pos = (head + len) % QUEUE;
            let mask = if excl != 0 { mask | (1 << pos) } else { mask & !(1 << pos) };
            return (pack(holders, mode, head, len + 1, mask), OUT_QUEUED | pos);
        }
        (c, OUT_FULL)
    }
}

/// RELEASE on the lock state (operand 0): one holder leaves; the head waiter gets the lock
/// when it becomes free (or stays shared for a shared waiter). Operand 1, a chained grant's
/// second pass: no holder leaves, the head waiter is granted on the same terms (so a
/// shared one joins the shared holders). One action for both: a register has four.
#[derive(Clone, Copy)]
struct Release;
impl SaluBody<Pair, u32, u32> for Release {
    fn run(self, c: Pair, chained: u32) -> (Pair, u32) {
        let (holders, mode, head, len, mask) = unpack(c);
        let holders = if chained != 0 { holders } else { holders.saturating_sub(1) };
        if len > 0 {
            let excl = mask & (1 << head) != 0;
            if holders == 0 || (!excl && mode == MODE_SHARED) {
                let m = if excl { MODE_EXCL } else { MODE_SHARED };
                return (pack(holders + 1, m, (head + 1) % QUEUE, len - 1, mask & !(1 << head)), OUT_NEXT | head);
            }
        }
        let mode = if holders == 0 { MODE_FREE } else { mode };
        (pack(holders, mode, head, len, mask), OUT_NONE)
    }
}

/// Read one 32-bit half (operand 0: lo, else hi): a stateful ALU returns 32 bits.
fn read_half(c: Pair, hi: u32) -> (Pair, u32) {
    (c, if hi != 0 { c.hi } else { c.lo })
}

/// Overwrite both halves of the lock state.
#[derive(Clone, Copy)]
struct WritePair;
impl SaluProgram<Pair, Pair, ()> for WritePair {
    const SALU: Salu =
        Salu { conds: &[], lo: &[Update::set(Pred::ALWAYS, Src::PhvLo)], hi: &[Update::set(Pred::ALWAYS, Src::PhvHi)], out: &[] };
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
    acquire: RegisterAction<Pair, u32, u32, Acquire>,
    release: RegisterAction<Pair, u32, u32, Release>,
    state_read: RegisterAction<Pair, u32, u32>,
    state_write: pisa::SaluAction<Pair, Pair, (), WritePair>,
    qip_read: pisa::SaluAction<u32, (), u32, Read>,
    qip_write: pisa::SaluAction<u32, u32, (), Write>,
    qtag_read: pisa::SaluAction<u32, (), u32, Read>,
    qtag_write: pisa::SaluAction<u32, u32, (), Write>,
    lock_hosts: Table,
    a_host: ActionId,
    d_waiting: DropCode,
    d_no_host: DropCode,
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
        let (st1, st2) = (packer.take(), packer.stage + 1);
        let ls = b.register::<Pair>(
            "lock_state",
            Gress::Ingress,
            st1,
            cfg.slots,
            "holders and mode (lo); queue head, length, exclusive-waiter mask (hi)",
        );
        b.cell_fields(
            &ls,
            &[
                ("holders", 16),
                ("mode", 2),
                ("unused", 14),
                ("queue_head", 3),
                ("queue_length", 4),
                ("unused_hi", 1),
                ("exclusive_waiters", 8),
                ("unused_top", 16),
            ],
        );
        let acquire = b.register_action_body(ls, "acquire", Acquire);
        let release = b.register_action_body(ls, "release", Release);
        let state_read = b.register_action(ls, "read_half", read_half);
        let state_write = b.register_action_salu(ls, "write", WritePair);
        let qi = b.register::<u32>("lock_queue_ip", Gress::Ingress, st2, cfg.slots * QUEUE, "waiting requests: client IPv4 address");
        let qip_read = b.register_action_salu(qi, "read", Read);
        let qip_write = b.register_action_salu(qi, "write", Write);
        let qt = b.register::<u32>(
            "lock_queue_tag",
            Gress::Ingress,
            st2,
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
            stage: st2,
            size: 1024,
            keys: &[("hdr.ipv4.dst_addr", 32, MatchKind::Exact)],
            actions: &[a_host, a_nohost],
            default_action: (a_nohost, &[]),
            const_default: false,
        });
        let d_waiting = b.drop_reason("lock_waiting");
        let d_no_host = b.drop_reason("lock_no_host");
        b.note("lock_state's acquire and release bodies decide grant / queue / full and pop the head in one read-modify-write; a Tofino stateful ALU does at most two comparisons per half, so on hardware this state is split over more arrays and stages, as NetLock does");
        b.note("a release grants the head waiter by a recirculated clone of its ack; the shared waiters behind it follow, one recirculation each");
        LockApp {
            key_bytes: cfg.key_bytes,
            acquire,
            release,
            state_read,
            state_write,
            qip_read,
            qip_write,
            qtag_read,
            qtag_write,
            lock_hosts,
            a_host,
            d_waiting,
            d_no_host,
        }
    }

    fn is_query(op: Op) -> bool {
        matches!(op, Op::Acquire | Op::Release)
    }

    fn query_ok(_cfg: &HareConfig, value_len: usize) -> bool {
        value_len == 8
    }

    fn intercept<M: TraceMode>(&self, pass: &mut Pass<'_, M>, op: Op, flags: u8, states: &StateManager) -> bool {
        if matches!(op, Op::ReleaseAck | Op::Grant) && flags & FLAG_GRANT_NEXT != 0 && pass.ingress_port() == PORT_RECIRC {
            self.grant_next(pass, states);
            return true;
        }
        false
    }

    fn apply_queryhit<M: TraceMode>(&self, pass: &mut Pass<'_, M>, _cfg: &HareConfig, op: Op, hit: &QueryHit<'_>) {
        let slot = hit.slot;
        if pass.execute(&hit.states.check, slot as u32, ()) != state::VALID {
            return; // moving: the lock's server decides
        }
        pass.execute(&hit.oo.count, slot as u32, ());
        let (mode, aux, seq) = {
            let p = Packet::new_unchecked(&pass.hdr()[L2_L4_LEN..]);
            (p.status(), p.aux(), p.seq())
        };
        let voff = hit.voff;
        let end = voff + 8;
        match op {
            Op::Acquire => {
                let out = pass.execute(&self.acquire, slot as u32, (mode == EXCLUSIVE) as u32);
                match (out & !0xFF).get() {
                    OUT_GRANT => {
                        let h = pass.hdr_mut();
                        let mut p = Packet::new_unchecked(&mut h[L2_L4_LEN..]);
                        p.set_op(Op::Grant);
                        p.set_status(GRANTED);
                        back_to_sender(pass, end);
                    }
                    OUT_QUEUED => {
                        let ip = {
                            let h = pass.hdr();
                            u32::from_be_bytes([h[26], h[27], h[28], h[29]])
                        };
                        let i = slot as u32 * QUEUE + (out & 0xFF);
                        pass.execute(&self.qip_write, i, ip);
                        pass.execute(&self.qtag_write, i, ((aux as u32) << 16) | (seq & 0xFFFF));
                        pass.drop(self.d_waiting);
                    }
                    _ => {
                        let h = pass.hdr_mut();
                        let mut p = Packet::new_unchecked(&mut h[L2_L4_LEN..]);
                        p.set_op(Op::Grant);
                        p.set_status(RETRY);
                        back_to_sender(pass, end);
                    }
                }
            }
            Op::Release => {
                let out = pass.execute(&self.release, slot as u32, 0);
                let h = pass.hdr_mut();
                let mut p = Packet::new_unchecked(&mut h[L2_L4_LEN..]);
                p.set_op(Op::ReleaseAck);
                p.set_status(GRANTED);
                if out & !0xFF == OUT_NEXT {
                    let i = slot as u32 * QUEUE + (out & 0xFF);
                    let cell = Pair::new(pass.execute(&self.qip_read, i, ()).get(), pass.execute(&self.qtag_read, i, ()).get());
                    let h = pass.hdr_mut();
                    Self::pair_into(cell, &mut h[voff..end]);
                    h[L2_L4_LEN + wire::hare::field::FLAGS] |= FLAG_GRANT_NEXT;
                    Packet::new_unchecked(&mut h[L2_L4_LEN..]).set_hit_index(slot);
                    pass.clone_ingress(GRANT_SESSION);
                }
                back_to_sender(pass, end);
            }
            _ => {}
        }
    }

    /// `aux` selects a queue cell (0..QUEUE) or a half of the lock state (QUEUE, QUEUE + 1).
    fn apply_datamv<M: TraceMode>(&self, pass: &mut Pass<'_, M>, _cfg: &HareConfig, op: Op, dm: &DataMv) -> bool {
        if dm.vlen != 8 || dm.aux as u32 > QUEUE + 1 {
            return false;
        }
        let (slot, a, voff, end) = (dm.slot as u32, dm.aux as u32, dm.voff, dm.voff + 8);
        let to_switch = op == Op::DataMvToSwitch;
        if a >= QUEUE {
            if to_switch {
                let v = Self::pair_from(&pass.hdr()[voff..end]);
                pass.execute(&self.state_write, slot, v);
            } else {
                let half = pass.execute(&self.state_read, slot, a - QUEUE).get();
                pass.hdr_mut()[voff + 4..end].copy_from_slice(&half.to_be_bytes());
            }
        } else {
            let i = slot * QUEUE + a;
            if to_switch {
                let v = Self::pair_from(&pass.hdr()[voff..end]);
                pass.execute(&self.qip_write, i, v.lo);
                pass.execute(&self.qtag_write, i, v.hi);
            } else {
                let v = Pair::new(pass.execute(&self.qip_read, i, ()).get(), pass.execute(&self.qtag_read, i, ()).get());
                Self::pair_into(v, &mut pass.hdr_mut()[voff..end]);
            }
        }
        true
    }
}

impl LockApp {
    fn pair_from(b: &[u8]) -> Pair {
        Pair::new(u32::from_be_bytes([b[4], b[5], b[6], b[7]]), u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn pair_into(p: Pair, b: &mut [u8]) {
        b[..4].copy_from_slice(&p.hi.to_be_bytes());
        b[4..8].copy_from_slice(&p.lo.to_be_bytes());
    }

    /// The second pass of a release that freed the lock for a waiter: the clone of the
    /// release ack (or of the previous shared grant) becomes the waiter's grant. If the
    /// lock is shared and the next waiter is shared too, it is taken off the queue and this
    /// grant is cloned around again, carrying that waiter's cell; the waiter it is sent to
    /// ignores the cell and the flag. A slot that is no longer valid (its lock moving)
    /// grants no more: the lock's server grants from the state it gets.
    fn grant_next<M: TraceMode>(&self, pass: &mut Pass<'_, M>, states: &StateManager) {
        let kb = self.key_bytes;
        let voff = L2_L4_LEN + HEADER_LEN + kb;
        let cell = Self::pair_from(&pass.hdr()[voff..voff + 8]);
        let slot = Packet::new_unchecked(&pass.hdr()[L2_L4_LEN..]).hit_index() as u32;
        let mut next = None;
        if pass.execute(&states.check, slot, ()) == state::VALID {
            let out = pass.execute(&self.release, slot, 1);
            if out & !0xFF == OUT_NEXT {
                let i = slot * QUEUE + (out & 0xFF);
                next = Some(Pair::new(pass.execute(&self.qip_read, i, ()).get(), pass.execute(&self.qtag_read, i, ()).get()));
            }
        }
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
        p.set_flags(if next.is_some() { FLAG_GRANT_NEXT } else { 0 });
        p.set_status(GRANTED);
        p.set_aux((cell.hi >> 16) as u16);
        h[L2_L4_LEN + wire::hare::field::SEQ..][..4].copy_from_slice(&(cell.hi & 0xFFFF).to_be_bytes());
        if let Some(n) = next {
            Self::pair_into(n, &mut h[voff..voff + 8]);
            pass.clone_ingress(GRANT_SESSION);
        }
        pass.forward(port);
    }
}
