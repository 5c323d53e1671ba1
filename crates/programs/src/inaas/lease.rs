//! Memory segments and their leases (INaaS Figure 2, Algorithm 1 stages 2 on).
//!
//! Switch memory is up to 20 segments; segment `j` serves item `j` of every packet. A
//! segment is three register arrays of [`SEGMENT_SIZE`] cells: `lease_deadline_j` (the
//! holder's deadline, 32 bits), `lease_j` (the holder's uid, 32 bits) and `kv_j` (key low,
//! value high, see [`primitives`](super::primitives)), in that stage order: the deadline's
//! output chooses the holder's action, whose output gates the key-value access. The arrays
//! are packed four per stage from stage 2 ([`Layout`]); how many segments a pass serves
//! follows from the target's stages ([`Layout::for_target`]): 20 on tofino2 and unbounded,
//! 13 on tofino1. An item beyond them fails (the goalkeeper's business).
//!
//! A lease is taken when the register is free (deadline 0) or its holder's time is up. The
//! paper stores the holder's timestamp and lets the *arriving* packet's T and timestamp
//! decide; then any packet with a small T or a forged timestamp preempts everyone. Here the
//! deadline array holds the holder's deadline (acquisition time + the holder's own T,
//! capped per tenant by the controller), and time is the switch's clock (µs, wrapping,
//! compared as a 32-bit signed difference: `pisa::Cmp::GtW`). The paper's policies map
//! directly: short T for throughput-sensitive tenants, a deadline far ahead ("a clock that
//! runs faster") for the accuracy-sensitive Bloom filter, which is then never preempted.
//! Taking a lease never hands the old holder's data to the new one: the key-value stage
//! moves the old contents out to the goalkeeper (see `mod.rs`). Why two arrays and not one
//! pair: docs/pisa-rules.md ("how the converted ones were made to fit").

use pisa::{Cmp, Cond, OutputSource, Pred, Salu, SaluOutput, SaluProgram, Src, Target, Update};

/// Most segments (items per packet).
pub const SEGMENTS: usize = wire::inaas::ITEMS;
/// Stateful ALUs a stage has (Tofino 1 and 2): the arrays are packed this many per stage.
pub const SALUS_PER_STAGE: usize = 4;
/// Register arrays (one stateful ALU each) per segment: deadline, holder, key-value.
pub const ARRAYS_PER_SEGMENT: usize = 3;
/// First stage of the segments' arrays (stages 0-1 hold the tenant and goalkeeper tables,
/// `forged_uid`, the Bloom arrays and the usage counters).
pub const LEASE_STAGE: u8 = 2;
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

/// Where a pass's segments are: `segments` of them, their arrays packed
/// [`SALUS_PER_STAGE`] per stage from [`LEASE_STAGE`] in the order all deadlines, all
/// holders, all key-value arrays. With at least four segments, segment `j`'s three arrays
/// are in three different stages, in that order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub segments: usize,
}

impl Default for Layout {
    fn default() -> Self {
        Layout { segments: SEGMENTS }
    }
}

impl Layout {
    /// Fewest segments a layout takes (so a segment's arrays are in different stages).
    pub const MIN_SEGMENTS: usize = SALUS_PER_STAGE;

    /// `segments` segments (clamped to `MIN_SEGMENTS..=SEGMENTS`).
    pub fn new(segments: usize) -> Layout {
        Layout { segments: segments.clamp(Self::MIN_SEGMENTS, SEGMENTS) }
    }

    /// The most segments whose arrays fit the target's stages, leaving `tail` stages after
    /// them (the Paxos acceptors' three); every segment on a target without a stage limit.
    pub fn for_target(t: &Target, tail: u32) -> Layout {
        if pisa::target::is_unlimited(t.stages) {
            return Layout::default();
        }
        let stages = t.stages.saturating_sub(LEASE_STAGE as u32 + tail) as usize;
        Layout::new(stages * SALUS_PER_STAGE / ARRAYS_PER_SEGMENT)
    }

    const fn stage_of(self, slot: usize) -> u8 {
        LEASE_STAGE + (slot / SALUS_PER_STAGE) as u8
    }

    /// Stage of segment `j`'s deadline array.
    pub const fn deadline_stage(self, j: usize) -> u8 {
        self.stage_of(j)
    }

    /// Stage of segment `j`'s holder array.
    pub const fn holder_stage(self, j: usize) -> u8 {
        self.stage_of(self.segments + j)
    }

    /// Stage of segment `j`'s key-value array.
    pub const fn kv_stage(self, j: usize) -> u8 {
        self.stage_of(2 * self.segments + j)
    }

    /// The first stage after the segments' arrays.
    pub const fn end_stage(self) -> u8 {
        self.stage_of(ARRAYS_PER_SEGMENT * self.segments - 1) + 1
    }
}

/// The deadline a lease taken at `now` for `t` µs gets: never 0, which marks a free
/// register (one µs later in the one case in 2^32 where the sum is 0).
#[inline(always)]
pub const fn deadline(now: u32, t: u32) -> u32 {
    let d = now.wrapping_add(t);
    if d == 0 {
        1
    } else {
        d
    }
}

/// c0: free (deadline 0); c1: expired, the clock past the deadline as a wrapping 32-bit
/// signed difference (`(now - deadline) as i32 > 0`).
const FREE_OR_EXPIRED_CONDS: &[Cond] = &[Cond::new(Src::Lo, Cmp::Eq, Src::K(0)), Cond::new(Src::PhvLo, Cmp::GtW, Src::Lo)];
const FREE_OR_EXPIRED: Pred = Pred::C0.or(Pred::C1);

/// Deadline array, a packet that may take the lease: operands (now, [`deadline`]). If the
/// register is free or expired, write the new deadline. Output: the predicate word, nonzero
/// when the packet took the lease (then the holder array's [`HolderTake`] runs, else
/// [`HolderCheck`]).
#[derive(Clone, Copy)]
pub struct DeadlineTake;

impl SaluProgram<u32, (u32, u32), u32> for DeadlineTake {
    const SALU: Salu = Salu {
        conds: FREE_OR_EXPIRED_CONDS,
        lo: &[Update::set(FREE_OR_EXPIRED, Src::PhvHi)],
        hi: &[],
        out: &[SaluOutput::new(FREE_OR_EXPIRED, OutputSource::Predicate)],
    };
}

/// Deadline array, a packet that only looks (Paxos, Bloom): operand now. Output nonzero when
/// the register is free or expired (answered 0, as one being moved, and left alone), so
/// an acceptor's state exists only under a lease taken (and its cells cleared) beforehand.
#[derive(Clone, Copy)]
pub struct DeadlineProbe;

impl SaluProgram<u32, u32, u32> for DeadlineProbe {
    const SALU: Salu =
        Salu { conds: FREE_OR_EXPIRED_CONDS, lo: &[], hi: &[], out: &[SaluOutput::new(FREE_OR_EXPIRED, OutputSource::Predicate)] };
}

/// Holder array, after [`DeadlineTake`] took: operand `uid | BUSY`; returns the previous
/// holder (the program reports `ACQUIRED | previous & MAX_UID`).
#[derive(Clone, Copy)]
pub struct HolderTake;

impl SaluProgram<u32, u32, u32> for HolderTake {
    const SALU: Salu =
        Salu { conds: &[], lo: &[Update::set(Pred::ALWAYS, Src::PhvLo)], hi: &[], out: &[SaluOutput::always(OutputSource::OldLo)] };
}

/// Holder array, the lease held (not free, not expired): the holder, or 0 while it is
/// [`BUSY`] (being moved; c0: bit 31 clear, the holder read as signed is not negative).
#[derive(Clone, Copy)]
pub struct HolderCheck;

impl SaluProgram<u32, (), u32> for HolderCheck {
    const SALU: Salu = Salu {
        conds: &[Cond::new(Src::Lo, Cmp::GeS, Src::K(0))],
        lo: &[],
        hi: &[],
        out: &[SaluOutput::new(Pred::C0, OutputSource::OldLo)],
    };
}

/// Second pass of a preemption, on the holder array: if the packet's tenant still holds the
/// lease it took (c0: the holder is `uid | BUSY`), clear the mark. Returns the holder
/// after: the uid when the commit took, otherwise what is there (another holder, busy mark
/// included: in either case not the packet's uid, which is below 2^31).
#[derive(Clone, Copy)]
pub struct LeaseCommit;

impl SaluProgram<u32, u32, u32> for LeaseCommit {
    const SALU: Salu = Salu {
        // lo - uid - 2^31 == 0 (BUSY is bit 31; the constant takes a register-file row).
        conds: &[Cond::linear(Src::Lo, Src::PhvLo, BUSY as i32, Cmp::Eq)],
        lo: &[Update::set(Pred::C0, Src::PhvLo)],
        hi: &[],
        out: &[SaluOutput::always(OutputSource::NewLo)],
    };
}

/// Longest lease T a packet may ask for (2^30 µs, about 18 minutes): deadlines are compared
/// as signed 32-bit differences.
pub const MAX_LEASE_US: u32 = 1 << 30;

/// The lease check before issue 19's split: one Rust body on a (holder, deadline) pair.
/// Kept only as the reference the split is tested (below) and timed (example
/// `inaas_lease_alu_cost`) against.
#[doc(hidden)]
pub mod legacy {
    use super::{ACQUIRED, BUSY, MAX_UID};
    use pisa::DualCell;

    /// Set in the uid operand to look without taking.
    pub const PROBE: u32 = 1 << 31;

    pub fn check(cell: DualCell, uid: u32, now: u32, t: u32) -> (DualCell, u32) {
        let expired = (now.wrapping_sub(cell.hi) as i32) > 0;
        let (probe, uid) = (uid & PROBE != 0, uid & MAX_UID);
        if (cell.lo == 0 || expired) && probe {
            (cell, 0)
        } else if cell.lo == 0 || expired {
            (DualCell::new(uid | BUSY, now.wrapping_add(t)), ACQUIRED | (cell.lo & MAX_UID))
        } else if cell.lo & BUSY != 0 {
            (cell, 0)
        } else {
            (cell, cell.lo)
        }
    }

    pub fn commit(cell: DualCell, uid: u32) -> (DualCell, u32) {
        if cell.lo == uid | BUSY {
            (DualCell::new(uid, cell.hi), uid)
        } else {
            (cell, cell.lo)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::legacy::{check as old_check, commit as old_commit, PROBE};
    use super::*;
    use pisa::DualCell;

    /// The split check as the program runs it: the deadline array's action, then the holder
    /// array's, chosen by the first's output. Cells are (deadline, holder).
    fn split_check((dl, holder): (u32, u32), uid: u32, now: u32, t: u32, probe: bool) -> ((u32, u32), u32) {
        if probe {
            let (dl, gone) = DeadlineProbe.run(dl, now);
            if gone != 0 {
                return ((dl, holder), 0);
            }
            let (holder, h) = HolderCheck.run(holder, ());
            return ((dl, holder), h);
        }
        let (dl, took) = DeadlineTake.run(dl, (now, deadline(now, t)));
        if took != 0 {
            let (holder, prev) = HolderTake.run(holder, uid | BUSY);
            ((dl, holder), ACQUIRED | prev & MAX_UID)
        } else {
            let (holder, h) = HolderCheck.run(holder, ());
            ((dl, holder), h)
        }
    }

    #[test]
    fn free_expired_and_held() {
        let l = Layout::default();
        let (c, o) = split_check((0, 0), 7, 100, 50, false);
        assert_eq!((c, o), ((150, 7 | BUSY), ACQUIRED));
        assert_eq!(split_check(c, 7, 101, 50, false).1, 0, "busy until the second pass");
        let (h, o) = LeaseCommit.run(c.1, 7);
        assert_eq!((h, o), (7, 7));
        let c = (c.0, h);
        let (c2, o) = split_check(c, 9, 150, 1, false);
        assert_eq!((c2, o), (c, 7), "held by 7 until 150");
        let (c3, o) = split_check(c, 9, 151, 10, false);
        assert_eq!((c3, o), ((161, 9 | BUSY), ACQUIRED | 7));
        // A long lease is not preempted by a short one, whatever the newcomer's T.
        let long = split_check((0, 0), 3, 0, MAX_LEASE_US, false).0;
        let long = (long.0, LeaseCommit.run(long.1, 3).0);
        assert_eq!(split_check(long, 9, 1_000_000, 0, false).1, 3);
        assert_eq!(LeaseCommit.run(long.1, 9).1, 3, "not 9's to commit");
        // A probe never takes a lease, and sees its own.
        assert_eq!(split_check((0, 0), 7, 0, 50, true), ((0, 0), 0));
        assert_eq!(split_check(c, 7, 100, 50, true), (c, 7));
        // Across the clock's wrap: taken at 2^32 - 10 for 20 µs, held until 10.
        let (w, _) = split_check((0, 0), 5, u32::MAX - 9, 20, false);
        assert_eq!(split_check(w, 6, 3, 1, false).1, 0, "still held (busy) after the wrap");
        assert_eq!(split_check(w, 6, 11, 1, false).1, ACQUIRED | 5, "expired after the wrap");
        // Stages: deadlines, then holders, then key-value arrays, four per stage.
        assert_eq!((l.deadline_stage(19), l.holder_stage(0), l.holder_stage(19), l.kv_stage(0), l.kv_stage(19)), (6, 7, 11, 12, 16));
        assert_eq!(l.end_stage(), 17);
        let t1 = Layout::for_target(&Target::tofino1(), 0);
        assert_eq!((t1.segments, t1.kv_stage(t1.segments - 1)), (13, 11));
        assert_eq!(Layout::for_target(&Target::tofino2(), 3), Layout::default());
        assert_eq!(Layout::for_target(&Target::unbounded(), 3), Layout::default());
        for n in Layout::MIN_SEGMENTS..=SEGMENTS {
            let l = Layout::new(n);
            for j in 0..n {
                assert!(l.deadline_stage(j) < l.holder_stage(j) && l.holder_stage(j) < l.kv_stage(j), "{n} segments, segment {j}");
            }
        }
    }

    /// A small deterministic generator (splitmix64).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u32 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            (z ^ (z >> 31)) as u32
        }
        fn near(&mut self, x: u32) -> u32 {
            x.wrapping_add(self.next() % 9).wrapping_sub(4)
        }
    }

    /// The split instructions against the old body over random cells, clocks, leases and
    /// uids (with the clock near the deadline, near the signed wrap, and anywhere), and
    /// the second pass's commit. States map as: old (holder, deadline) with a holder has
    /// the same deadline (never 0: [`deadline`]); a free old cell is (0, 0) in both.
    #[test]
    fn split_lease_matches_the_old_body() {
        let mut r = Rng(0x1ea5e);
        let mut took = 0;
        for i in 0..200_000 {
            let uid = 1 + r.next() % 5;
            let holder = match r.next() % 4 {
                0 => 0,
                1 => (1 + r.next() % 5) | BUSY,
                _ => 1 + r.next() % 5,
            };
            let dl = if holder == 0 {
                0
            } else {
                match r.next() % 3 {
                    0 => r.near(1 << 31),
                    1 => r.near(0),
                    _ => r.next(),
                }
                .max(1)
            };
            let now = match r.next() % 4 {
                0 => r.near(dl),
                1 => r.near(dl ^ 1 << 31),
                2 => r.near(0),
                _ => r.next(),
            };
            let t = if i % 2 == 0 { r.next() % 64 } else { r.next() % (MAX_LEASE_US + 1) };
            if now.wrapping_add(t) == 0 {
                continue; // the one deadline stored one µs later (see `deadline`)
            }
            let probe = r.next().is_multiple_of(4);
            let old = old_check(DualCell::new(holder, dl), uid | if probe { PROBE } else { 0 }, now, t);
            let new = split_check((dl, holder), uid, now, t, probe);
            assert_eq!(
                (new.0 .1, new.0 .0, new.1),
                (old.0.lo, old.0.hi, old.1),
                "holder {holder:#x} deadline {dl:#x} uid {uid} now {now:#x} t {t} probe {probe}"
            );
            took += (old.1 & ACQUIRED != 0) as u32;
            // The second pass's commit, by this uid or another.
            let who = if r.next().is_multiple_of(2) { uid } else { 1 + r.next() % 5 };
            let (h, o) = LeaseCommit.run(new.0 .1, who);
            assert_eq!((h, o), (old_commit(old.0, who).0.lo, old_commit(old.0, who).1));
        }
        assert!(took > 10_000, "takes exercised: {took}");
        assert_eq!(deadline(u32::MAX, 1), 1);
    }
}
