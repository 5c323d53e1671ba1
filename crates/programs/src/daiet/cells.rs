//! The per-tree hash table of the paper: key and value register arrays with one-element
//! buckets, and the index stack of used cells.
//!
//! A 16-byte key is four 32-bit register arrays (a Tofino 1 stateful ALU reads and
//! returns 32 bits), compared and claimed in four consecutive stages: the first array
//! claims an empty cell or compares; each later one follows the decision of the one
//! before. The whole key is compared, so a different key with the same hash is never
//! added to a stored one (the public DAIET code's first defect): it collides and goes to
//! the spillover bucket. Keys never contain a zero byte on this path (see
//! `wire::daiet::key_is_fixed`), so a zero first word marks an empty cell.

use pisa::{Cmp, Cond, Op, OutputSource, Pred, Salu, SaluOutput, SaluProgram, Src, Update};

/// Read a cell and clear it (the flush); index stack: push returns the slot to write,
/// write stores a cell index; read a cell.
pub use pisa::salu::common::{FetchInc as Push, Read, Take, Write};

/// The key word was written into an empty cell.
pub const CLAIM: u32 = 1;
/// The key word equals the stored one.
pub const MATCH: u32 = 2;
/// A different key is stored.
pub const COLLIDE: u32 = 3;

/// First key word: claim an empty cell or compare. Conditions: c0 the cell differs from
/// the word, c1 the cell is occupied; the output is the predicate, which is CLAIM (c0
/// only: an empty cell, key words are never 0), MATCH (c1 only) or COLLIDE (both).
#[derive(Clone, Copy)]
pub struct ClaimOrMatch;
impl SaluProgram<u32, u32, u32> for ClaimOrMatch {
    const SALU: Salu = Salu {
        conds: &[Cond::new(Src::Lo, Cmp::Ne, Src::PhvLo), Cond::new(Src::Lo, Cmp::Ne, Src::K(0))],
        lo: &[Update::set(Pred::C0.and(Pred::C1.not()), Src::PhvLo)],
        hi: &[],
        out: &[SaluOutput::always(OutputSource::Predicate)],
    };
}

/// Later key words: `(word, decision so far)`; a claim writes (the cell is empty: the
/// words of a key are written and cleared together), otherwise the word is compared and
/// the decision carried on (a match stays a match only while the words are equal; a
/// collision stays a collision and leaves the cell as it is). Every pair of the pass runs
/// it, whatever the earlier words decided. Conditions: c0 the decision so far is CLAIM, c1
/// the cell differs from the word; the decision passed on is computed by the high update
/// ALUs (a scratch result on this 32-bit cell) and output.
#[derive(Clone, Copy)]
pub struct Follow;
impl SaluProgram<u32, (u32, u32), u32> for Follow {
    const SALU: Salu = Salu {
        conds: &[Cond::new(Src::PhvHi, Cmp::Eq, Src::K(CLAIM as i32)), Cond::new(Src::Lo, Cmp::Ne, Src::PhvLo)],
        lo: &[Update::set(Pred::C0, Src::PhvLo)],
        hi: &[Update::set(Pred::C1.and(Pred::C0.not()), Src::K(COLLIDE as i32)), Update::set(Pred::ALWAYS, Src::PhvHi)],
        out: &[SaluOutput::always(OutputSource::NewHi)],
    };
}

/// Value update: `(value, decision)`; a claimed cell takes the value, a matched one
/// aggregates it with `op`, a collision leaves the cell as it is (its pair goes to the
/// spillover bucket).
const AGGREGATE_CONDS: &[Cond] =
    &[Cond::new(Src::PhvHi, Cmp::Eq, Src::K(CLAIM as i32)), Cond::new(Src::PhvHi, Cmp::Eq, Src::K(MATCH as i32))];
macro_rules! aggregate {
    ($op:expr) => {
        Salu {
            conds: AGGREGATE_CONDS,
            lo: &[Update::set(Pred::C0, Src::PhvLo), Update::new(Pred::C1, Src::Lo, $op, Src::PhvLo)],
            hi: &[],
            out: &[],
        }
    };
}
#[derive(Clone, Copy)]
pub struct Sum;
impl SaluProgram<u32, (u32, u32), ()> for Sum {
    const SALU: Salu = aggregate!(Op::Add);
}
#[derive(Clone, Copy)]
pub struct Min;
impl SaluProgram<u32, (u32, u32), ()> for Min {
    const SALU: Salu = aggregate!(Op::MinU);
}
#[derive(Clone, Copy)]
pub struct Max;
impl SaluProgram<u32, (u32, u32), ()> for Max {
    const SALU: Salu = aggregate!(Op::MaxU);
}

/// Index stack top: pop returns the old top (0: empty; else the slot is top - 1).
#[derive(Clone, Copy)]
pub struct Pop;
impl SaluProgram<u32, (), u32> for Pop {
    const SALU: Salu = Salu {
        conds: &[Cond::new(Src::Lo, Cmp::Ne, Src::K(0))],
        lo: &[Update::new(Pred::C0, Src::Lo, Op::Sub, Src::K(1))],
        hi: &[],
        out: &[SaluOutput::always(OutputSource::OldLo)],
    };
}
