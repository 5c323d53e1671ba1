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
//!   port, and in its second pass the clone becomes the waiter's grant (addressed through
//!   `lock_hosts`). One waiter is granted per release; shared waiters behind it are granted
//!   by the following releases.
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
use pisa::{
    ActionId, DropCode, Gress, MatchKind, Pair, Pass, Program, ProgramBuilder, ProgramDecl, RegisterAction, SaluBody, Table, PORT_CPU,
    PORT_RECIRC,
};
use wire::hare::{Op, Packet, FLAG_DONE, HEADER_LEN, PORT_CLIENT, PORT_SERVER};

use super::emat::{Emat, EmatShape};
use super::oostat::{state, OoStat, StateManager};
use super::{back_to_sender, L4_END};

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

/// RELEASE on the lock state: one holder leaves; the head waiter gets the lock when it
/// becomes free (or stays shared for a shared waiter).
#[derive(Clone, Copy)]
struct Release;
impl SaluBody<Pair, (), u32> for Release {
    fn run(self, c: Pair, _: ()) -> (Pair, u32) {
        let (holders, mode, head, len, mask) = unpack(c);
        let holders = holders.saturating_sub(1);
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
fn write_pair(_: Pair, v: Pair) -> (Pair, ()) {
    (v, ())
}
fn read_u32(c: u32, _: ()) -> (u32, u32) {
    (c, c)
}
fn write_u32(_: u32, v: u32) -> (u32, ()) {
    (v, ())
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

/// The lock-manager program.
pub struct HareLock {
    decl: ProgramDecl,
    cfg: LockConfig,
    emat: Emat,
    control_ports: Table,
    a_allow: ActionId,
    states: StateManager,
    oo: OoStat,
    acquire: RegisterAction<Pair, u32, u32, Acquire>,
    release: RegisterAction<Pair, (), u32, Release>,
    state_read: RegisterAction<Pair, u32, u32>,
    state_write: RegisterAction<Pair, Pair, ()>,
    qip_read: RegisterAction<u32, (), u32>,
    qip_write: RegisterAction<u32, u32, ()>,
    qtag_read: RegisterAction<u32, (), u32>,
    qtag_write: RegisterAction<u32, u32, ()>,
    lock_hosts: Table,
    a_host: ActionId,
    d_malformed: DropCode,
    d_unknown_op: DropCode,
    d_key_field: DropCode,
    d_control_denied: DropCode,
    d_bad_slot: DropCode,
    d_waiting: DropCode,
    d_no_host: DropCode,
}

impl HareLock {
    pub fn new() -> HareLock {
        HareLock::with_config(LockConfig::default())
    }

    pub fn with_config(cfg: LockConfig) -> HareLock {
        assert!((1..=127).contains(&cfg.key_bytes) && cfg.slots >= 1 && cfg.slots * QUEUE <= 1 << 20 && cfg.slots <= 1 << 16);
        let mut b =
            ProgramBuilder::new("hare_lock", "Hare lock manager: NetLock-style queues of 8 per offloaded lock, grants by the switch");
        let value = 8usize;
        b.parser(
            (L4_END + HEADER_LEN + cfg.key_bytes + value) as u32,
            &[("ethernet", 112), ("ipv4", 160), ("udp", 64), ("hare", HEADER_LEN as u32 * 8)],
        )
        .metadata_bits(16 + 32 + 32)
        .max_recirculations(Some(1))
        .classify(pisa::ClassifyRule {
            ethertype: Some(0x0800),
            ip_protocol: Some(17),
            udp_dst_port: Some((PORT_SERVER, PORT_CLIENT)),
            ..Default::default()
        });
        let first = super::FIRST_STAGE;
        let shape = EmatShape::new(cfg.key_bytes, cfg.key_bytes);
        let emat = Emat::declare(&mut b, shape, first, cfg.slots);
        let st = first + 1;
        let a_allow = b.action("allow_control", &[], "this port may move lock state");
        let a_deny = b.action("deny_control", &[], "control packets from this port are dropped");
        let control_ports = b.table(TableSpec {
            name: "control_ports",
            doc: "ports of lock servers allowed to move lock state and set states",
            gress: Gress::Ingress,
            stage: st,
            size: 64,
            keys: &[("ig_intr_md.ingress_port", 9, MatchKind::Exact)],
            actions: &[a_allow, a_deny],
            default_action: (a_deny, &[]),
            const_default: false,
        });
        let states = StateManager::declare(&mut b, st, cfg.slots);
        let oo = OoStat::declare(&mut b, st + 1, cfg.slots);
        let ls = b.register::<Pair>(
            "lock_state",
            Gress::Ingress,
            st + 1,
            cfg.slots,
            "holders and mode (lo); queue head, length, exclusive-waiter mask (hi)",
        );
        let acquire = b.register_action_body(ls, "acquire", Acquire);
        let release = b.register_action_body(ls, "release", Release);
        let state_read = b.register_action(ls, "read_half", read_half);
        let state_write = b.register_action(ls, "write", write_pair);
        let qi = b.register::<u32>("lock_queue_ip", Gress::Ingress, st + 2, cfg.slots * QUEUE, "waiting requests: client IPv4 address");
        let qip_read = b.register_action(qi, "read", read_u32);
        let qip_write = b.register_action(qi, "write", write_u32);
        let qt = b.register::<u32>(
            "lock_queue_tag",
            Gress::Ingress,
            st + 2,
            cfg.slots * QUEUE,
            "waiting requests: client id (high 16 bits) and request seq (low 16)",
        );
        let qtag_read = b.register_action(qt, "read", read_u32);
        let qtag_write = b.register_action(qt, "write", write_u32);
        let a_host = b.action("set_host", &[("port", 9), ("mac", 48)], "where a client is");
        let a_nohost = b.action("unknown_host", &[], "a client the control plane has not described");
        let lock_hosts = b.table(TableSpec {
            name: "lock_hosts",
            doc: "client address -> port and MAC, to send a waiter its grant",
            gress: Gress::Ingress,
            stage: st + 2,
            size: 1024,
            keys: &[("hdr.ipv4.dst_addr", 32, MatchKind::Exact)],
            actions: &[a_host, a_nohost],
            default_action: (a_nohost, &[]),
            const_default: false,
        });
        let d_malformed = b.drop_reason("lock_malformed");
        let d_unknown_op = b.drop_reason("lock_unknown_op");
        let d_key_field = b.drop_reason("lock_key_field");
        let d_control_denied = b.drop_reason("lock_control_denied");
        let d_bad_slot = b.drop_reason("lock_bad_slot");
        let d_waiting = b.drop_reason("lock_waiting");
        let d_no_host = b.drop_reason("lock_no_host");
        b.note("lock_state's acquire and release bodies decide grant / queue / full and pop the head in one read-modify-write; a Tofino stateful ALU does at most two comparisons per half, so on hardware this state is split over more arrays and stages, as NetLock does");
        b.note("one waiter is granted per release (by a recirculated clone of the release ack)");
        let decl = b.build().expect("hare_lock declaration is valid");
        HareLock {
            decl,
            cfg,
            emat,
            control_ports,
            a_allow,
            states,
            oo,
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
            d_malformed,
            d_unknown_op,
            d_key_field,
            d_control_denied,
            d_bad_slot,
            d_waiting,
            d_no_host,
        }
    }

    fn pair_from(b: &[u8]) -> Pair {
        Pair::new(u32::from_be_bytes([b[4], b[5], b[6], b[7]]), u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn pair_into(p: Pair, b: &mut [u8]) {
        b[..4].copy_from_slice(&p.hi.to_be_bytes());
        b[4..8].copy_from_slice(&p.lo.to_be_bytes());
    }

    /// The second pass of a release that freed the lock for a waiter: the clone of the
    /// release ack becomes the waiter's grant.
    fn grant_next(&self, pass: &mut Pass<'_>) {
        let kb = self.cfg.key_bytes;
        let voff = L4_END + HEADER_LEN + kb;
        let cell = Self::pair_from(&pass.hdr()[voff..voff + 8]);
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
        let mut p = Packet::new_unchecked(&mut h[L4_END..]);
        p.set_op(Op::Grant);
        p.set_flags(0);
        p.set_status(GRANTED);
        p.set_aux((cell.hi >> 16) as u16);
        h[L4_END + 4..L4_END + 8].copy_from_slice(&(cell.hi & 0xFFFF).to_be_bytes());
        pass.forward(port);
    }

    fn query(&self, pass: &mut Pass<'_>, op: Op) {
        let kb = self.cfg.key_bytes;
        let (key_len, kf, vlen, mode, aux, seq) = {
            let p = Packet::new_unchecked(&pass.hdr()[L4_END..]);
            (p.key_len(), p.key_field() as usize, p.value_len() as usize, p.status(), p.aux(), p.seq())
        };
        if kf != kb || vlen != 8 {
            pass.drop(self.d_key_field);
            return;
        }
        let mut key = [0u8; 128];
        key[..kb].copy_from_slice(&pass.hdr()[L4_END + HEADER_LEN..L4_END + HEADER_LEN + kb]);
        let Some(slot) = self.emat.lookup(pass, key_len, &key[..kb]) else { return };
        if slot as u32 >= self.cfg.slots || pass.execute(&self.states.check, slot as u32, ()) != state::VALID {
            return; // not offloaded (or moving): the lock's server decides
        }
        pass.execute(&self.oo.count, slot as u32, ());
        let voff = L4_END + HEADER_LEN + kb;
        let end = voff + 8;
        match op {
            Op::Acquire => {
                let out = pass.execute(&self.acquire, slot as u32, (mode == EXCLUSIVE) as u32);
                match out & !0xFF {
                    OUT_GRANT => {
                        let h = pass.hdr_mut();
                        let mut p = Packet::new_unchecked(&mut h[L4_END..]);
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
                        let mut p = Packet::new_unchecked(&mut h[L4_END..]);
                        p.set_op(Op::Grant);
                        p.set_status(RETRY);
                        back_to_sender(pass, end);
                    }
                }
            }
            Op::Release => {
                let out = pass.execute(&self.release, slot as u32, ());
                let h = pass.hdr_mut();
                let mut p = Packet::new_unchecked(&mut h[L4_END..]);
                p.set_op(Op::ReleaseAck);
                p.set_status(GRANTED);
                if out & !0xFF == OUT_NEXT {
                    let i = slot as u32 * QUEUE + (out & 0xFF);
                    let cell = Pair::new(pass.execute(&self.qip_read, i, ()), pass.execute(&self.qtag_read, i, ()));
                    let h = pass.hdr_mut();
                    Self::pair_into(cell, &mut h[voff..end]);
                    h[L4_END + 1] |= FLAG_GRANT_NEXT;
                    pass.clone_ingress(GRANT_SESSION);
                }
                back_to_sender(pass, end);
            }
            _ => {}
        }
    }

    fn control(&self, pass: &mut Pass<'_>, op: Op) {
        let port = pass.ingress_port();
        let allowed = port == PORT_CPU || pass.apply_u64(&self.control_ports, port as u64).action == self.a_allow;
        if !allowed {
            pass.drop(self.d_control_denied);
            return;
        }
        let (slot, status, kf, vlen, aux) = {
            let p = Packet::new_unchecked(&pass.hdr()[L4_END..]);
            (p.hit_index(), p.status(), p.key_field() as usize, p.value_len() as usize, p.aux())
        };
        if slot as u32 >= self.cfg.slots {
            pass.drop(self.d_bad_slot);
            return;
        }
        let voff = L4_END + HEADER_LEN + kf;
        let end = voff + vlen;
        match op {
            Op::StatFetch if vlen == 4 => {
                let c = match status {
                    1 => pass.execute(&self.oo.fetch_clear, slot as u32, ()),
                    2 => pass.execute(&self.oo.fetch_halve, slot as u32, ()),
                    _ => pass.execute(&self.oo.fetch, slot as u32, ()),
                };
                pass.hdr_mut()[voff..voff + 4].copy_from_slice(&c.to_be_bytes());
            }
            Op::StateSet if status <= state::REPLACING => {
                pass.execute(&self.states.set, slot as u32, status);
            }
            // aux < QUEUE: one queue cell; aux = QUEUE: the lock state (to the switch: both
            // halves; to the server: the low half, and aux = QUEUE + 1 the high half, since a
            // stateful ALU returns 32 bits).
            Op::DataMvToSwitch | Op::DataMvToServer if vlen == 8 && (aux as u32) <= QUEUE + 1 => {
                let to_switch = op == Op::DataMvToSwitch;
                let a = aux as u32;
                if a >= QUEUE {
                    if to_switch {
                        let v = Self::pair_from(&pass.hdr()[voff..end]);
                        pass.execute(&self.state_write, slot as u32, v);
                    } else {
                        let half = pass.execute(&self.state_read, slot as u32, a - QUEUE);
                        pass.hdr_mut()[voff + 4..end].copy_from_slice(&half.to_be_bytes());
                    }
                } else {
                    let i = slot as u32 * QUEUE + a;
                    if to_switch {
                        let v = Self::pair_from(&pass.hdr()[voff..end]);
                        pass.execute(&self.qip_write, i, v.lo);
                        pass.execute(&self.qtag_write, i, v.hi);
                    } else {
                        let v = Pair::new(pass.execute(&self.qip_read, i, ()), pass.execute(&self.qtag_read, i, ()));
                        Self::pair_into(v, &mut pass.hdr_mut()[voff..end]);
                    }
                }
            }
            Op::StatFetch | Op::StateSet | Op::DataMvToSwitch | Op::DataMvToServer => {
                pass.drop(self.d_malformed);
                return;
            }
            _ => {
                pass.drop(self.d_unknown_op);
                return;
            }
        }
        pass.hdr_mut()[L4_END + 1] |= FLAG_DONE;
        back_to_sender(pass, end);
    }
}

impl Default for HareLock {
    fn default() -> Self {
        Self::new()
    }
}

impl Program for HareLock {
    fn decl(&self) -> &ProgramDecl {
        &self.decl
    }

    fn ingress(&self, pass: &mut Pass<'_>) {
        let hdr = pass.hdr();
        if hdr.len() < L4_END + HEADER_LEN || hdr[14] != 0x45 {
            pass.drop(self.d_malformed);
            return;
        }
        let (op, flags) = match Packet::new_checked(&hdr[L4_END..]) {
            Ok(p) => (p.op(), p.flags()),
            Err(_) => {
                pass.drop(self.d_malformed);
                return;
            }
        };
        match op {
            None => pass.drop(self.d_unknown_op),
            Some(Op::ReleaseAck) if flags & FLAG_GRANT_NEXT != 0 && pass.ingress_port() == PORT_RECIRC => self.grant_next(pass),
            Some(op) if op.is_control() => {
                if flags & FLAG_DONE == 0 {
                    self.control(pass, op)
                }
            }
            Some(op @ (Op::Acquire | Op::Release)) => self.query(pass, op),
            Some(_) => {}
        }
    }
}
