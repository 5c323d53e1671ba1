//! Per-register timers (NetSHa §3.7): answers never wait in a register longer than a bound.
//!
//! The switch cannot create packets. A declared packet generator (Tofino has one) emits a
//! small NetSHa packet every `period`; each one visits the next register in turn (`sweep`
//! cursor). The `born` array holds, per register, the time it was claimed (µs, `lo`) and
//! its owner's tag (`hi`). A generator packet that finds a register claimed at least
//! `timeout` ago recirculates once and, on its second pass, releases the register (a
//! compare-and-swap on the owner, so a register replaced meanwhile is left alone) and
//! carries all of its answers to the agent. Every answer therefore reaches the agent
//! within `timeout + registers × period` (+ one pass) of entering a register.

use pisa::{Cmp, Cond, DualCell, Op, OutputSource, Pred, Salu, SaluOutput, SaluProgram, Src, Update};

/// Time in the `born` array: microseconds, wrapping at 2^32 (71 minutes), compared with
/// wrapping subtraction.
#[inline]
pub fn now_us(now_ns: u64) -> u32 {
    (now_ns / 1_000) as u32
}

/// The `born` array's register actions (one per pass, chosen by the packet's path).
///
/// [`BornSet`] stores `(now, tag)` (a claim; `(0, 0)` a release). [`BornOwner`] returns the
/// owner's tag (the replacement register's query, once Algorithm 2 chose it). The timer's
/// test "claimed at least `timeout` ago", `now - claim >= timeout` in wrapping µs, is three
/// operands (the claim time, now, the timeout): an earlier stage computes the deadline
/// `d = now - timeout` into PHV, and the register half is compared with `d` and `now`: the
/// register has *not* expired when its claim time lies in the circular interval
/// `(d, now]`, which is `d < claim <= now` when that interval does not wrap ([`BornAge`])
/// and `claim > d || claim <= now` when it does ([`BornAgeWrapped`]; a gateway in that
/// earlier stage compares `d` with `now` and picks the action). Either returns the owner's
/// tag if expired (0 for a free register, whose tag is 0), else 0.
#[derive(Clone, Copy)]
pub struct BornSet;

impl SaluProgram<DualCell, DualCell, ()> for BornSet {
    const SALU: Salu =
        Salu { conds: &[], lo: &[Update::set(Pred::ALWAYS, Src::PhvLo)], hi: &[Update::set(Pred::ALWAYS, Src::PhvHi)], out: &[] };
}

/// The owner's tag (see [`BornSet`]).
#[derive(Clone, Copy)]
pub struct BornOwner;

impl SaluProgram<DualCell, (), u32> for BornOwner {
    const SALU: Salu = Salu { conds: &[], lo: &[], hi: &[], out: &[SaluOutput::always(OutputSource::OldHi)] };
}

/// Expiry test, `(deadline, now)` in, deadline <= now (see [`BornSet`]). c0: claim >
/// deadline, c1: claim <= now; alive when both hold.
#[derive(Clone, Copy)]
pub struct BornAge;

impl SaluProgram<DualCell, (u32, u32), u32> for BornAge {
    const SALU: Salu = Salu {
        conds: &[Cond::new(Src::Lo, Cmp::GtU, Src::PhvLo), Cond::new(Src::Lo, Cmp::LeU, Src::PhvHi)],
        lo: &[],
        hi: &[],
        out: &[SaluOutput::new(Pred::C0.and(Pred::C1).not(), OutputSource::OldHi)],
    };
}

/// Expiry test when the interval wraps (deadline > now): alive when either holds.
#[derive(Clone, Copy)]
pub struct BornAgeWrapped;

impl SaluProgram<DualCell, (u32, u32), u32> for BornAgeWrapped {
    const SALU: Salu = Salu {
        conds: &[Cond::new(Src::Lo, Cmp::GtU, Src::PhvLo), Cond::new(Src::Lo, Cmp::LeU, Src::PhvHi)],
        lo: &[],
        hi: &[],
        out: &[SaluOutput::new(Pred::C0.or(Pred::C1).not(), OutputSource::OldHi)],
    };
}

/// The operand of the expiry test at `now_us`: the deadline `now - timeout` (wrapping) and
/// now, and whether the interval wraps (which action runs: [`BornAgeWrapped`] if so).
#[inline]
pub fn age_operand(now_us: u32, timeout_us: u32) -> ((u32, u32), bool) {
    let d = now_us.wrapping_sub(timeout_us);
    ((d, now_us), d > now_us)
}

/// The sweep cursor: out the register to visit, advance modulo R (operand).
#[derive(Clone, Copy)]
pub struct SweepAlu;

/// Conditions: c0 the cursor is at the last register, c1 beyond it (R shrank); the output
/// (the cursor, at most R - 1) comes from the high update ALUs.
impl SaluProgram<u32, u32, u32> for SweepAlu {
    const SALU: Salu = Salu {
        conds: &[Cond::linear(Src::Lo, Src::PhvLo, 1, Cmp::GeU), Cond::new(Src::Lo, Cmp::GeU, Src::PhvLo)],
        lo: &[Update::set(Pred::C0, Src::K(0)), Update::always(Src::Lo, Op::Add, Src::K(1))],
        hi: &[Update::new(Pred::C1, Src::PhvLo, Op::SatSub, Src::K(1)), Update::set(Pred::ALWAYS, Src::Lo)],
        out: &[SaluOutput::always(OutputSource::NewHi)],
    };
}

/// Whether a register claimed at `born_us` has expired at `now_us`.
#[inline]
pub fn expired(born: DualCell, now_us: u32, timeout_us: u32) -> bool {
    born.hi != 0 && now_us.wrapping_sub(born.lo) >= timeout_us
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The two declared tests together are exactly [`expired`], wrap-around included.
    #[test]
    fn age_actions_are_the_expiry_test() {
        let edges = [0u32, 1, 2, 5, 999, 1000, 1001, 0x7FFF_FFFF, 0x8000_0000, u32::MAX - 1000, u32::MAX - 1, u32::MAX];
        for &now in &edges {
            for &timeout in &[0u32, 1, 2, 1000, 0x8000_0000, u32::MAX] {
                for &dl in &[0u32, 1, 2, 999, 1000, 1001, 0x8000_0000, u32::MAX] {
                    for born in [now.wrapping_sub(dl), now.wrapping_add(dl)] {
                        for tag in [0u32, 7] {
                            let cell = DualCell::new(born, tag);
                            let (opnd, wrapped) = age_operand(now, timeout);
                            let (c, out) = if wrapped { BornAgeWrapped.run(cell, opnd) } else { BornAge.run(cell, opnd) };
                            let want = if expired(cell, now, timeout) { tag } else { 0 };
                            assert_eq!((c, out), (cell, want), "now {now} timeout {timeout} born {born} tag {tag}");
                        }
                    }
                }
            }
        }
        let (c, ()) = BornSet.run(DualCell::new(1, 2), DualCell::new(5, 9));
        assert_eq!(c, DualCell::new(5, 9));
        assert_eq!(BornOwner.run(c, ()), (c, 9));
    }
}
