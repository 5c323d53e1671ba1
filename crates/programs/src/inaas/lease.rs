//! Memory segments and their leases (INaaS Figure 2, Algorithm 1 stages 2–6).
//!
//! Switch memory is 20 segments; segment `j` serves item `j` of every packet. A segment is
//! two register arrays of [`SEGMENT_SIZE`] 64-bit cells: `lease_j` (uid in the low half,
//! timestamp in the high half) and `kv_j` (key low, value high, see
//! [`primitives`](super::primitives)). Four segments per stage: leases in stages 2–6,
//! key-value pairs in stages 7–11.
//!
//! A lease is taken when the register is free (uid 0) or its holder's time is up. The
//! paper stores the holder's timestamp and lets the *arriving* packet's T and timestamp
//! decide; then any packet with a small T or a forged timestamp preempts everyone. Here the
//! cell's high half holds the holder's deadline (acquisition time + the holder's own T,
//! capped per tenant by the controller), and time is the switch's clock (µs, wrapping,
//! compared as a signed difference). The paper's policies map directly: short T for
//! throughput-sensitive tenants, a deadline far ahead ("a clock that runs faster") for the
//! accuracy-sensitive Bloom filter, which is then never preempted. Taking a lease never
//! hands the old holder's data to the new one: the key-value stage moves the old contents
//! out to the goalkeeper (see `mod.rs`).

use pisa::{Cmp, Cond, Out, OutSrc, Pair, Pred, Salu, SaluBody, SaluProgram, Src, Update};

/// Segments (items per packet).
pub const SEGMENTS: usize = wire::inaas::ITEMS;
/// Segments per stage: one stateful ALU each, four per Tofino stage.
pub const SEGMENTS_PER_STAGE: usize = 4;
/// First stage of the lease registers.
pub const LEASE_STAGE: u8 = 2;
/// First stage of the key-value registers.
pub const KV_STAGE: u8 = LEASE_STAGE + (SEGMENTS / SEGMENTS_PER_STAGE) as u8;
/// Cells per register array. The paper has 40k; four 40k x 64-bit arrays need 84 SRAM
/// blocks in a stage that has 80, so 32k (68 blocks) is what fits tofino1.
pub const SEGMENT_SIZE: u32 = 32768;
/// Set in a lease action's output when the packet took the lease; the low 31 bits are
/// then the previous holder (0: the register was free). Uids are therefore below 2^31.
pub const ACQUIRED: u32 = 1 << 31;
/// Largest uid the controller hands out.
pub const MAX_UID: u32 = ACQUIRED - 1;

/// Marks a lease taken by a packet whose second pass (the key half of the swap) has not
/// run yet: the register is half-moved, no packet may use it, not even the holder's own.
pub const BUSY: u32 = 1 << 31;

/// Set in the lease check's uid operand to look without taking: a free or expired register
/// is then answered 0 (as one being moved) and left alone. Paxos packets probe, so that an
/// acceptor's state exists only under a lease taken (and its cells cleared) beforehand.
pub const PROBE: u32 = 1 << 31;

/// The lease check of Algorithm 1: operand (uid, now, T), uid possibly with [`PROBE`]. Output: the current holder
/// (== uid when the packet's tenant holds it), 0 while the register is being moved, or
/// `ACQUIRED | previous holder` when this packet took it (it is then marked [`BUSY`]).
#[derive(Clone, Copy)]
pub struct LeaseCheck;

impl SaluBody<Pair, (u32, (u32, u32)), u32> for LeaseCheck {
    #[inline(always)]
    fn run(self, cell: Pair, (uid, (now, t)): (u32, (u32, u32))) -> (Pair, u32) {
        let expired = (now.wrapping_sub(cell.hi) as i32) > 0;
        let (probe, uid) = (uid & PROBE != 0, uid & MAX_UID);
        if (cell.lo == 0 || expired) && probe {
            (cell, 0)
        } else if cell.lo == 0 || expired {
            (Pair::new(uid | BUSY, now.wrapping_add(t)), ACQUIRED | (cell.lo & MAX_UID))
        } else if cell.lo & BUSY != 0 {
            (cell, 0)
        } else {
            (cell, cell.lo)
        }
    }
}

/// Second pass of a preemption: if the packet's tenant still holds the lease it took
/// (c0: the low half is `uid | BUSY`), clear the mark. Returns the low half after: the uid
/// when the commit took, otherwise what is there (another holder, busy mark included: in
/// either case not the packet's uid, which is below 2^31).
#[derive(Clone, Copy)]
pub struct LeaseCommit;

impl SaluProgram<Pair, u32, u32> for LeaseCommit {
    const SALU: Salu = Salu {
        // lo - uid - 2^31 == 0 (BUSY is bit 31; the constant takes a register-file row).
        conds: &[Cond::lin(Src::Lo, Src::PhvLo, BUSY as i32, Cmp::Eq)],
        lo: &[Update::set(Pred::C0, Src::PhvLo)],
        hi: &[],
        out: &[Out::always(OutSrc::NewLo)],
    };
}

/// Longest lease T a packet may ask for (2^30 µs, about 18 minutes): deadlines are compared
/// as signed 32-bit differences.
pub const MAX_LEASE_US: u32 = 1 << 30;

/// Stage of segment `j`'s lease register.
pub const fn lease_stage(j: usize) -> u8 {
    LEASE_STAGE + (j / SEGMENTS_PER_STAGE) as u8
}

/// Stage of segment `j`'s key-value register.
pub const fn kv_stage(j: usize) -> u8 {
    KV_STAGE + (j / SEGMENTS_PER_STAGE) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_expired_and_held() {
        let (c, o) = LeaseCheck.run(Pair::new(0, 0), (7, (100, 50)));
        assert_eq!((c, o), (Pair::new(7 | BUSY, 150), ACQUIRED));
        assert_eq!(LeaseCheck.run(c, (7, (101, 50))).1, 0, "busy until the second pass");
        let (c, o) = LeaseCommit.run(c, 7);
        assert_eq!((c, o), (Pair::new(7, 150), 7));
        let (c2, o) = LeaseCheck.run(c, (9, (150, 1)));
        assert_eq!((c2, o), (c, 7), "held by 7 until 150");
        let (c3, o) = LeaseCheck.run(c, (9, (151, 10)));
        assert_eq!((c3, o), (Pair::new(9 | BUSY, 161), ACQUIRED | 7));
        // A long lease is not preempted by a short one, whatever the newcomer's T.
        let long = LeaseCommit.run(LeaseCheck.run(Pair::default(), (3, (0, MAX_LEASE_US))).0, 3).0;
        assert_eq!(LeaseCheck.run(long, (9, (1_000_000, 0))).1, 3);
        assert_eq!(LeaseCommit.run(long, 9).1, 3, "not 9's to commit");
        assert_eq!(kv_stage(19), 11);
        // A probe never takes a lease, and sees its own.
        assert_eq!(LeaseCheck.run(Pair::default(), (7 | PROBE, (0, 50))), (Pair::default(), 0));
        assert_eq!(LeaseCheck.run(c, (7 | PROBE, (100, 50))), (c, 7));
    }
}
