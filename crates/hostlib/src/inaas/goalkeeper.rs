//! The goalkeeper (INaaS §IV-B, §IV-D): the provider's host beside the switch that takes
//! every packet the switch could not finish (failures, preemptions, overflows,
//! retransmissions, forged uids) and completes it, so tenants always get correct results.
//!
//! - Preemption: the switch moved the old holder's pair out in the packet. The goalkeeper
//!   knows who held the register (it sees every lease taken: each one comes here), so the
//!   old pair goes to the old holder's spill (aggregates) or shadow (state that must not
//!   be lost), never back to the new holder. The lease count per tenant, and every grant
//!   ([`Grant`]: cell, holder, when it came here, its term), folded into [`Holds`] as it
//!   comes, are the pricing model's register-occupancy record (§IV-F).
//! - A reduce the switch refused (register not the tenant's, another key, saturation) is
//!   added to the tenant's spill for that aggregate, once per worker bit.
//! - A collect the switch could not answer is completed from the spill, plus what the
//!   switch still holds, fetched with one packet of the goalkeeper's own.
//! - A compute that saturated is completed exactly (64-bit trailer in the answer).
//! - A retransmission is sent into the switch again on the tenant's behalf (its reduce
//!   contributions are deduplicated by the worker bitmaps), and the answer relayed.
//! - Forged uids are logged and counted.
//!
//! Sans-IO: frames in, frames out, no clock of its own (the caller says when a frame came,
//! [`Goalkeeper::handle`], for the grant log).

use std::collections::{HashMap, VecDeque};

use programs::inaas::lease::MAX_LEASE_US;

use wire::ethernet::{EtherType, EthernetAddress, EthernetFrame};
use wire::inaas::{flags, Bitmap, InaasPacket, Operator, ETHERTYPE, HEADER_LEN, ITEMS, OP_DONE};

use super::assembly::{build_frame, ItemReq, Op};
use super::{arith_exact, Kind};

/// Counters the goalkeeper keeps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GkStats {
    pub packets: u64,
    pub preemptions: u64,
    pub failures: u64,
    pub overflows: u64,
    pub retransmissions: u64,
    pub forged: u64,
    pub malformed: u64,
    pub replies: u64,
    pub subrequests: u64,
    /// Preempted again between the two passes of a preemption (key half not moved).
    pub torn_preemptions: u64,
    /// Old pairs of latency-sensitive caches dropped on preemption (the store has them).
    pub cache_evictions: u64,
}

/// A partial aggregate the switch could not hold.
///
/// `bitmap`/`sum`: contributions certainly not in the switch (refused there, or moved out
/// with a preempted register). `maybe`/`maybe_values`: retransmitted contributions whose
/// first copy may or may not have reached the switch (its answer was lost); they are
/// never sent into the switch again (a copy could land in a fresh register after the
/// first was moved out, and count twice) and are settled when the aggregate is collected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Spill {
    pub bitmap: u16,
    pub sum: i64,
    pub maybe: u16,
    pub maybe_values: [i64; 16],
}

impl Spill {
    fn maybe_sum(&self) -> i64 {
        (0..16).filter(|w| self.maybe & 1 << w != 0).map(|w| self.maybe_values[w]).sum()
    }
}

#[derive(Clone, Debug)]
struct Pending {
    tenant_mac: EthernetAddress,
    seq: u32,
    uid: u32,
    valid: u32,
    results: [Option<Option<i64>>; ITEMS],
    /// Added to the switch's answer for item j (spilled part of a collect).
    add: [i64; ITEMS],
    /// If the switch misses item j: a second key to read and its addend (the retransmitted
    /// contributions were not in the switch after all), or, with key 0, the answer itself.
    alt: [Option<(u32, i64)>; ITEMS],
    /// The tenant's own key per item (a collect's full key).
    keys: [u32; ITEMS],
    idxs: [u16; ITEMS],
    sub_items: u32,
}

/// One lease the switch granted, as the goalkeeper learnt of it (the packet that took it).
/// The switch does not stamp its clock into the packet, so `at_us` is when the frame came
/// here, on the caller's clock; `term_us` is the lease length T the switch used, as far as
/// the goalkeeper knows it: the packet's T capped by the tenant's registered T and the
/// switch's longest lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    pub seg: u8,
    pub idx: u16,
    pub uid: u32,
    pub at_us: u64,
    pub term_us: u32,
}

/// Register occupancy measured from the grants (§IV-F pricing), folded as they come so
/// its memory is one entry per cell and per holder however long the goalkeeper runs (a
/// log of every grant grew by 24 bytes each). A lease is held from its grant until the
/// earliest of its deadline (grant + term), the next grant of the same cell (the switch
/// grants only a free or expired cell, so the next grant ends the lease before it) and
/// the run's end. Grants of one cell come in time order: the caller's clock is monotonic.
#[derive(Clone, Debug, Default)]
pub struct Holds {
    /// The last grant of each cell: its hold is still open.
    open: HashMap<(u8, u16), Grant>,
    /// µs held by leases a later grant of their cell closed, per uid.
    closed_us: HashMap<u32, u64>,
    /// Grants per uid.
    granted: HashMap<u32, u64>,
    /// Grants that came before the lease they ended had reached its deadline.
    early: u64,
}

impl Holds {
    pub fn grant(&mut self, g: Grant) {
        if let Some(prev) = self.open.insert((g.seg, g.idx), g) {
            let deadline = prev.at_us + u64::from(prev.term_us);
            let end = deadline.min(g.at_us.max(prev.at_us));
            self.early += u64::from(end < deadline);
            *self.closed_us.entry(prev.uid).or_default() += end - prev.at_us;
        }
        self.closed_us.entry(g.uid).or_default();
        *self.granted.entry(g.uid).or_default() += 1;
    }
    /// µs each uid held registers, the open leases counted to `run_end_us`.
    pub fn held_us(&self, run_end_us: u64) -> HashMap<u32, u64> {
        let mut out = self.closed_us.clone();
        for g in self.open.values() {
            let end = (g.at_us + u64::from(g.term_us)).min(run_end_us);
            *out.entry(g.uid).or_default() += end.saturating_sub(g.at_us);
        }
        out
    }
    /// Grants per uid.
    pub fn granted(&self) -> &HashMap<u32, u64> {
        &self.granted
    }
    /// Grants that ended their cell's lease before its deadline.
    pub fn early(&self) -> u64 {
        self.early
    }
    /// The leases still open, one per cell.
    pub fn open(&self) -> impl Iterator<Item = &Grant> {
        self.open.values()
    }
}

/// Who the goalkeeper serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TenantInfo {
    pub kind: Kind,
    pub lease_us: u32,
}

pub struct Goalkeeper {
    mac: EthernetAddress,
    tenants: HashMap<u32, TenantInfo>,
    /// (segment, index) -> holder, as the switch's leases were taken.
    holders: HashMap<(u8, u16), u32>,
    spill: HashMap<(u32, u8, u16, u16), Spill>,
    shadow: HashMap<(u32, u8, u16), (u32, i32)>,
    acquisitions: HashMap<u32, u64>,
    holds: Holds,
    /// When the frame being handled came (the caller's clock, µs).
    now_us: u64,
    forged_by_mac: HashMap<[u8; 6], u64>,
    pending: HashMap<u32, Pending>,
    next_seq: u32,
    pub stats: GkStats,
    out: VecDeque<Vec<u8>>,
}

/// A result being built: `None` not decided, `Some(None)` miss, `Some(Some(v))` done.
type Res = Option<Option<i64>>;

/// A read the goalkeeper asks the switch for, to finish a collect.
#[derive(Clone, Copy, Debug)]
struct Sub {
    j: usize,
    key: u32,
    add: i64,
    alt: Option<(u32, i64)>,
}

impl Goalkeeper {
    pub fn new(mac: EthernetAddress) -> Self {
        Goalkeeper {
            mac,
            tenants: HashMap::new(),
            holders: HashMap::new(),
            spill: HashMap::new(),
            shadow: HashMap::new(),
            acquisitions: HashMap::new(),
            holds: Holds::default(),
            now_us: 0,
            forged_by_mac: HashMap::new(),
            pending: HashMap::new(),
            next_seq: 1,
            stats: GkStats::default(),
            out: VecDeque::new(),
        }
    }

    pub fn mac(&self) -> EthernetAddress {
        self.mac
    }
    /// The controller tells the goalkeeper about a tenant.
    pub fn register_tenant(&mut self, uid: u32, info: TenantInfo) {
        self.tenants.insert(uid, info);
    }
    /// Leases each tenant took, as seen here (one packet per lease).
    pub fn acquisitions(&self) -> &HashMap<u32, u64> {
        &self.acquisitions
    }
    /// The register holds measured from every lease granted (pricing).
    pub fn holds(&self) -> &Holds {
        &self.holds
    }
    /// Who holds (segment, index), as far as the goalkeeper was told.
    pub fn holder(&self, seg: u8, idx: u16) -> Option<u32> {
        self.holders.get(&(seg, idx)).copied()
    }
    /// Forged-uid packets per source MAC.
    pub fn forged_by_mac(&self) -> &HashMap<[u8; 6], u64> {
        &self.forged_by_mac
    }
    /// A tenant's spilled part of aggregate (segment, index, key16).
    pub fn spill(&self, uid: u32, seg: u8, idx: u16, key16: u16) -> Option<Spill> {
        self.spill.get(&(uid, seg, idx, key16)).copied()
    }
    /// Old pairs kept for a tenant whose state must survive preemption.
    pub fn shadow(&self, uid: u32, seg: u8, idx: u16) -> Option<(u32, i32)> {
        self.shadow.get(&(uid, seg, idx)).copied()
    }
    /// The next frame to send into the switch.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.out.pop_front()
    }

    /// The time last given to [`handle`](Self::handle).
    pub fn now_us(&self) -> u64 {
        self.now_us
    }

    /// Contributions `key`'s bits with total `value`, certainly not in the switch.
    fn spill_add(&mut self, uid: u32, seg: u8, idx: u16, key: u32, value: i64) {
        let e = self.spill.entry((uid, seg, idx, (key >> 16) as u16)).or_default();
        let bits = key as u16 & !e.bitmap;
        if bits != 0 {
            e.bitmap |= bits;
            e.sum += value;
            // A retransmitted contribution now known for certain: no longer a maybe.
            e.maybe &= !bits;
        }
    }

    /// A retransmitted contribution (one worker bit).
    fn spill_maybe(&mut self, uid: u32, seg: u8, idx: u16, key: u32, value: i64) {
        let e = self.spill.entry((uid, seg, idx, (key >> 16) as u16)).or_default();
        let bit = key as u16;
        if bit.count_ones() == 1 && (e.bitmap | e.maybe) & bit == 0 {
            e.maybe |= bit;
            e.maybe_values[bit.trailing_zeros() as usize] = value;
        }
    }

    /// A frame from the switch that came at `now_us` (the caller's clock): grants it
    /// reports are logged with that time.
    pub fn handle(&mut self, now_us: u64, frame: &[u8]) {
        self.now_us = now_us;
        self.stats.packets += 1;
        let Ok(eth) = EthernetFrame::new_checked(frame) else {
            self.stats.malformed += 1;
            return;
        };
        if eth.ethertype() != EtherType::Unknown(ETHERTYPE) || frame.len() < 14 + HEADER_LEN {
            self.stats.malformed += 1;
            return;
        }
        let src = eth.src_addr();
        let dst = eth.dst_addr();
        let p = InaasPacket::new_unchecked(&frame[14..]);
        let fl = p.flags();
        if fl & flags::FORGED != 0 {
            self.stats.forged += 1;
            *self.forged_by_mac.entry(src.0).or_default() += 1;
            return;
        }
        let uid = p.uid();
        // One of our own requests, answered or failed?
        let own = (fl & flags::REPLY != 0 && dst == self.mac) || (fl & flags::GOALKEEPER != 0 && src == self.mac);
        if own {
            if let Some(pd) = self.pending.remove(&p.seq()) {
                if pd.uid == uid {
                    let res = self.complete(&p, false).0;
                    self.finish_sub(pd, &p, res);
                    return;
                }
                self.pending.insert(p.seq(), pd);
            }
            self.stats.malformed += 1;
            return;
        }
        if fl & flags::GOALKEEPER == 0 || !self.tenants.contains_key(&uid) {
            self.stats.malformed += 1;
            return;
        }
        if fl & flags::RETRANS != 0 {
            self.stats.retransmissions += 1;
            self.retransmission(src, &p);
            return;
        }
        let (res, subs) = self.complete(&p, true);
        if subs.is_empty() {
            self.reply(src, &p, res);
        } else {
            let mut pd = Pending {
                tenant_mac: src,
                seq: p.seq(),
                uid,
                valid: p.bitmap(Bitmap::Valid),
                results: res,
                add: [0; ITEMS],
                alt: [None; ITEMS],
                keys: [0; ITEMS],
                idxs: [0; ITEMS],
                sub_items: 0,
            };
            for j in 0..ITEMS {
                pd.keys[j] = p.key(j);
                pd.idxs[j] = p.idx(j);
            }
            let items: Vec<ItemReq> = subs
                .iter()
                .map(|sb| {
                    pd.add[sb.j] = sb.add;
                    pd.alt[sb.j] = sb.alt;
                    pd.sub_items |= 1 << sb.j;
                    ItemReq { seg: sb.j, idx: p.idx(sb.j), op: Op::Read { key: sb.key } }
                })
                .collect();
            self.send_sub(pd, &items, Operator::Add);
        }
    }

    fn send_sub(&mut self, pd: Pending, items: &[ItemReq], op: Operator) {
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1).max(1);
        let lease = self.tenants.get(&pd.uid).map(|t| t.lease_us).unwrap_or(0);
        if let Ok(f) = build_frame(self.mac, self.mac, pd.uid, seq, lease, items, op, 0, 0) {
            self.stats.subrequests += 1;
            self.out.push_back(f);
            self.pending.insert(seq, pd);
        }
    }

    /// Complete what the switch left undone in `p`. With `may_ask`, collects that need the
    /// switch's part are returned as (item, key to read, spilled sum to add).
    // `j` is the segment: it indexes the packet's fields as well as the arrays.
    #[allow(clippy::needless_range_loop)]
    fn complete(&mut self, p: &InaasPacket<&[u8]>, may_ask: bool) -> ([Res; ITEMS], Vec<Sub>) {
        let uid = p.uid();
        let kind = self.tenants.get(&uid).map(|t| t.kind).unwrap_or(Kind::Kv);
        let valid = p.bitmap(Bitmap::Valid);
        let (rd, wr, red, comp) = (p.bitmap(Bitmap::Read), p.bitmap(Bitmap::Write), p.bitmap(Bitmap::Reduce), p.bitmap(Bitmap::Compute));
        let (failed, preempted, overflow) = (p.bitmap(Bitmap::Failed), p.bitmap(Bitmap::Preempted), p.bitmap(Bitmap::Overflow));
        let op = Operator::from_u8(p.op());
        let mut res: [Res; ITEMS] = [None; ITEMS];
        let mut subs = Vec::new();
        for j in 0..ITEMS {
            let bit = 1u32 << j;
            if valid & bit == 0 {
                continue;
            }
            let (idx, key, value) = (p.idx(j), p.key(j), p.value(j));
            let (r, w, d, c) = (rd & bit != 0, wr & bit != 0, red & bit != 0, comp & bit != 0);
            let seg = j as u8;
            if preempted & bit != 0 {
                self.stats.preemptions += 1;
                *self.acquisitions.entry(uid).or_default() += 1;
                let registered = self.tenants.get(&uid).map_or(MAX_LEASE_US, |t| t.lease_us);
                let term_us = p.time_limit().min(registered).min(MAX_LEASE_US);
                self.holds.grant(Grant { seg, idx, uid, at_us: self.now_us, term_us });
                let old = self.holders.insert((seg, idx), uid);
                if failed & bit != 0 {
                    // Torn: the key half stayed; the value half (the old holder's) is here.
                    self.stats.torn_preemptions += 1;
                    res[j] = Some(None);
                    continue;
                }
                if let Some(o) = old {
                    if key != 0 || value != 0 {
                        match self.tenants.get(&o).map(|t| t.kind).unwrap_or(Kind::Kv) {
                            Kind::Reduce => self.spill_add(o, seg, idx, key, value as i64),
                            Kind::Kv => self.stats.cache_evictions += 1,
                            Kind::Bloom | Kind::Paxos => {
                                self.shadow.insert((o, seg, idx), (key, value));
                            }
                        }
                    }
                }
                // The new holder's own primitive went in (write, swap, reduce) or found
                // nothing of its own (read: a miss).
                res[j] = match (r, w, d) {
                    (false, true, false) | (false, false, true) => Some(Some(0)),
                    (true, true, false) => Some(Some(0)),
                    // A read that took the lease: the packet now carries the old holder's
                    // key, not the one asked for, so the answer is a miss (asked again, the
                    // read finds the lease its own and the goalkeeper can complete it).
                    _ => Some(None),
                };
                continue;
            }
            if failed & bit != 0 {
                self.stats.failures += 1;
                if (r, w, d) == (true, false, false) {
                    res[j] = self.read_completion(j, uid, kind, idx, key, may_ask, &mut subs);
                    continue;
                }
                res[j] = Some(match (r, w, d) {
                    (false, false, true) => {
                        self.spill_add(uid, seg, idx, key, value as i64);
                        Some(0)
                    }
                    (false, true, false) if kind != Kind::Kv => {
                        self.shadow.insert((uid, seg, idx), (key, value));
                        Some(0)
                    }
                    _ => None,
                });
                continue;
            }
            if overflow & bit != 0 {
                self.stats.overflows += 1;
                if d {
                    self.spill_add(uid, seg, idx, key, value as i64);
                    res[j] = Some(Some(0));
                } else if c {
                    res[j] = Some(op.map(|o| arith_exact(o, value, key)));
                } else {
                    res[j] = Some(Some(value as i64));
                }
                continue;
            }
            res[j] = Some(Some(value as i64));
        }
        (res, subs)
    }

    /// The answer to a read the switch could not give: a collect from the spill (and, if
    /// the switch holds the rest, one read of it queued in `subs`: then `None`), a pair
    /// from the shadow, or a miss (`Some(None)`).
    #[allow(clippy::too_many_arguments)]
    fn read_completion(&self, j: usize, uid: u32, kind: Kind, idx: u16, key: u32, may_ask: bool, subs: &mut Vec<Sub>) -> Res {
        let seg = j as u8;
        let key16 = (key >> 16) as u16;
        let want = key as u16;
        let k = |bits: u16| (key16 as u32) << 16 | bits as u32;
        match self.spill.get(&(uid, seg, idx, key16)).copied() {
            Some(s) if kind == Kind::Reduce && (s.bitmap | s.maybe) & !want == 0 => {
                let rest = want & !s.bitmap;
                if rest == 0 {
                    return Some(Some(s.sum));
                }
                let without = rest & !s.maybe;
                if !may_ask {
                    return Some(None);
                }
                // First guess: the retransmitted ones are in the switch; else they are not.
                let alt = if s.maybe == 0 {
                    None
                } else if without == 0 {
                    Some((0, s.sum + s.maybe_sum()))
                } else {
                    Some((k(without), s.sum + s.maybe_sum()))
                };
                subs.push(Sub { j, key: k(rest), add: s.sum, alt });
                None
            }
            _ => Some(self.shadow_value(uid, seg, idx, key, kind)),
        }
    }

    fn shadow_value(&self, uid: u32, seg: u8, idx: u16, key: u32, kind: Kind) -> Option<i64> {
        if kind == Kind::Kv || kind == Kind::Reduce {
            return None;
        }
        match self.shadow.get(&(uid, seg, idx)) {
            Some(&(k, v)) if k == key => Some(v as i64),
            _ => None,
        }
    }

    fn retransmission(&mut self, src: EthernetAddress, p: &InaasPacket<&[u8]>) {
        let uid = p.uid();
        let valid = p.bitmap(Bitmap::Valid);
        let mut pd = Pending {
            tenant_mac: src,
            seq: p.seq(),
            uid,
            valid,
            results: [None; ITEMS],
            add: [0; ITEMS],
            alt: [None; ITEMS],
            keys: [0; ITEMS],
            idxs: [0; ITEMS],
            sub_items: 0,
        };
        for j in 0..ITEMS {
            pd.keys[j] = p.key(j);
            pd.idxs[j] = p.idx(j);
        }
        let (rd, wr, red, comp) = (p.bitmap(Bitmap::Read), p.bitmap(Bitmap::Write), p.bitmap(Bitmap::Reduce), p.bitmap(Bitmap::Compute));
        let mut items = Vec::new();
        for j in 0..ITEMS {
            let bit = 1u32 << j;
            if valid & bit == 0 {
                continue;
            }
            let (idx, key, value) = (p.idx(j), p.key(j), p.value(j));
            let op = match (rd & bit != 0, wr & bit != 0, red & bit != 0, comp & bit != 0) {
                (false, false, true, _) => {
                    // Kept here, never sent into the switch again (see `Spill`).
                    self.spill_maybe(uid, j as u8, idx, key, value as i64);
                    pd.results[j] = Some(Some(0));
                    continue;
                }
                (true, false, false, _) => Op::Read { key },
                (false, true, false, _) => Op::Write { key, value },
                (true, true, false, _) => Op::Swap { key, value },
                (false, false, false, true) => Op::Compute { value, param: key },
                _ => {
                    pd.results[j] = Some(None);
                    continue;
                }
            };
            pd.sub_items |= bit;
            items.push(ItemReq { seg: j, idx, op });
        }
        if items.is_empty() {
            let res = pd.results;
            self.reply_with(pd.tenant_mac, pd.seq, pd.uid, pd.valid, p.op(), res);
        } else {
            let op = Operator::from_u8(p.op()).unwrap_or(Operator::Add);
            // A reduce item carries exactly one worker bit; the rebuilt key has it too.
            self.send_sub(pd, &items, op);
        }
    }

    #[allow(clippy::needless_range_loop)]
    fn finish_sub(&mut self, mut pd: Pending, p: &InaasPacket<&[u8]>, res: [Res; ITEMS]) {
        let kind = self.tenants.get(&pd.uid).map(|t| t.kind).unwrap_or(Kind::Kv);
        let mut again = Vec::new();
        for j in 0..ITEMS {
            if pd.sub_items & 1 << j == 0 {
                continue;
            }
            pd.sub_items &= !(1 << j);
            pd.results[j] = match (res[j], pd.alt[j].take()) {
                (Some(Some(v)), _) => Some(Some(v + pd.add[j])),
                (_, Some((0, total))) => Some(Some(total)),
                (_, Some((key, add))) => {
                    again.push((j, key, add));
                    None
                }
                // The switch's part may have come here meanwhile (the lease ran out and
                // was taken, by this very request perhaps): look again.
                _ => Some(self.read_completion(j, pd.uid, kind, pd.idxs[j], pd.keys[j], false, &mut Vec::new()).flatten()),
            };
        }
        if again.is_empty() {
            self.reply_with(pd.tenant_mac, pd.seq, pd.uid, pd.valid, p.op(), pd.results);
        } else {
            let items: Vec<ItemReq> = again
                .iter()
                .map(|&(j, key, add)| {
                    pd.add[j] = add;
                    pd.sub_items |= 1 << j;
                    ItemReq { seg: j, idx: pd.idxs[j], op: Op::Read { key } }
                })
                .collect();
            self.send_sub(pd, &items, Operator::Add);
        }
    }

    fn reply(&mut self, to: EthernetAddress, p: &InaasPacket<&[u8]>, res: [Res; ITEMS]) {
        self.reply_with(to, p.seq(), p.uid(), p.bitmap(Bitmap::Valid), p.op(), res);
    }

    /// The answer to a tenant: its items, failed bits for misses, exact values in a trailer.
    fn reply_with(&mut self, to: EthernetAddress, seq: u32, uid: u32, valid: u32, op: u8, res: [Res; ITEMS]) {
        let mut buf = vec![0u8; 14 + HEADER_LEN + 8 * ITEMS];
        buf[0..6].copy_from_slice(&to.0);
        buf[6..12].copy_from_slice(&self.mac.0);
        buf[12..14].copy_from_slice(&ETHERTYPE.to_be_bytes());
        let mut failed = 0;
        {
            let mut q = InaasPacket::new_unchecked(&mut buf[14..]);
            q.set_op(if op == OP_DONE { OP_DONE } else { op });
            q.set_flags(flags::GK_REPLY | flags::EXACT);
            q.set_seq(seq);
            q.set_uid(uid);
            q.set_bitmap(Bitmap::Valid, valid);
            for (j, r) in res.iter().enumerate() {
                if valid & 1 << j == 0 {
                    continue;
                }
                match r {
                    Some(Some(v)) => q.set_value(j, (*v).clamp(-(i32::MAX as i64), i32::MAX as i64) as i32),
                    _ => failed |= 1 << j,
                }
            }
            q.set_bitmap(Bitmap::Failed, failed);
        }
        for (j, r) in res.iter().enumerate() {
            if let Some(Some(v)) = r {
                let at = 14 + HEADER_LEN + 8 * j;
                buf[at..at + 8].copy_from_slice(&v.to_be_bytes());
            }
        }
        self.stats.replies += 1;
        self.out.push_back(buf);
    }
}
