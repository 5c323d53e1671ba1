//! Register selection (NetSHa §3.5, Algorithm 2, Figure 6) as a switch can do it.
//!
//! Algorithm 2 scans every register for the query's ID, the first empty one and the one
//! with the largest weight. A pipeline cannot scan: §4 maps a query to its logical
//! register by hash(QID), so each query has exactly one candidate register, and the
//! weight-based choice among several candidates degenerates to "the one there is". What
//! remains of Algorithm 2 is its outcome for that register: the query's own register
//! (hit), an empty one (claim), or an occupied one (replace it, if the best-effort counter
//! allows, §3.6; otherwise bypass, the answer goes on unreduced).
//!
//! The `qid` array holds QID + 1 (0 = empty, so zeroed memory is free registers; QID
//! 0xFFFFFFFF is therefore not reducible and is bypassed). Its stateful ALU writes `new`
//! when the cell holds `expected`, or when it is empty and `new` is not: with `expected`
//! = empty that is lookup-or-claim; with `expected` = a victim it is the claim that
//! completes a replacement (a compare-and-swap, so two claimants cannot both win); with
//! `new` = empty it is the timer's release.

use pisa::{Pair, SaluBody};

/// An empty register's tag.
pub const FREE: u32 = 0;

/// The tag of a query ID in the `qid` array (`None` for the one ID it cannot hold).
#[inline]
pub fn tag(qid: u32) -> Option<u32> {
    qid.checked_add(1)
}

/// `qid` array stateful ALU: `Pair { lo: new, hi: expected }` in, old tag out.
#[derive(Clone, Copy)]
pub struct SelectAlu;

impl SaluBody<u32, Pair, u32> for SelectAlu {
    #[inline(always)]
    fn run(self, cell: u32, x: Pair) -> (u32, u32) {
        let (new, expected) = (x.lo, x.hi);
        if cell == expected || (cell == FREE && new != FREE) {
            (new, cell)
        } else {
            (cell, cell)
        }
    }
}

/// What the register lookup found for a query.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Selected {
    /// The query's own register.
    Hit,
    /// A free register (or the replaced one), now the query's.
    Claimed,
    /// Another query's register; its tag.
    Occupied(u32),
}

/// Interpret the old tag returned for a lookup of `my` with `expected`.
#[inline]
pub fn outcome(old: u32, my: u32, expected: u32) -> Selected {
    if old == my {
        Selected::Hit
    } else if old == FREE || old == expected {
        Selected::Claimed
    } else {
        Selected::Occupied(old)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_claim_replace_release() {
        let me = tag(7).unwrap();
        let other = tag(9).unwrap();
        let (c, old) = SelectAlu.run(FREE, Pair::new(me, FREE));
        assert_eq!((c, outcome(old, me, FREE)), (me, Selected::Claimed));
        let (c, old) = SelectAlu.run(c, Pair::new(me, FREE));
        assert_eq!((c, outcome(old, me, FREE)), (me, Selected::Hit));
        let (c, old) = SelectAlu.run(c, Pair::new(other, FREE));
        assert_eq!((c, outcome(old, other, FREE)), (me, Selected::Occupied(me)));
        // Replacement: compare-and-swap on the victim.
        let (c, old) = SelectAlu.run(c, Pair::new(other, me));
        assert_eq!((c, outcome(old, other, me)), (other, Selected::Claimed));
        // A second claimant for the same victim loses.
        let (c2, old) = SelectAlu.run(c, Pair::new(tag(11).unwrap(), me));
        assert_eq!((c2, outcome(old, tag(11).unwrap(), me)), (other, Selected::Occupied(other)));
        // Release only if still the expected owner.
        assert_eq!(SelectAlu.run(c, Pair::new(FREE, me)).0, other);
        assert_eq!(SelectAlu.run(c, Pair::new(FREE, other)).0, FREE);
    }
}
