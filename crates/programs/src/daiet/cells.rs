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

use pisa::SaluBody;

/// The key word was written into an empty cell.
pub const CLAIM: u32 = 1;
/// The key word equals the stored one.
pub const MATCH: u32 = 2;
/// A different key is stored.
pub const COLLIDE: u32 = 3;

/// First key word: claim an empty cell or compare.
#[derive(Clone, Copy)]
pub struct ClaimOrMatch;
impl SaluBody<u32, u32, u32> for ClaimOrMatch {
    #[inline(always)]
    fn run(self, c: u32, word: u32) -> (u32, u32) {
        if c == 0 {
            (word, CLAIM)
        } else if c == word {
            (c, MATCH)
        } else {
            (c, COLLIDE)
        }
    }
}

/// Later key words: `(word, decision so far)`; a claim writes (the cell is empty: the
/// words of a key are written and cleared together), otherwise the word is compared and
/// the decision carried on (a match stays a match only while the words are equal; a
/// collision stays a collision and leaves the cell as it is). Every pair of the pass runs
/// it, whatever the earlier words decided: two comparisons, one output, as a stateful ALU.
#[derive(Clone, Copy)]
pub struct Follow;
impl SaluBody<u32, (u32, u32), u32> for Follow {
    #[inline(always)]
    fn run(self, c: u32, (word, prev): (u32, u32)) -> (u32, u32) {
        if prev == CLAIM {
            (word, CLAIM)
        } else if c == word {
            (c, prev)
        } else {
            (c, COLLIDE)
        }
    }
}

/// Read a cell and clear it (the flush).
#[derive(Clone, Copy)]
pub struct Take;
impl SaluBody<u32, (), u32> for Take {
    #[inline(always)]
    fn run(self, c: u32, _: ()) -> (u32, u32) {
        (0, c)
    }
}

/// Value update: `(value, decision)`; a claimed cell takes the value, a matched one
/// aggregates it, a collision leaves the cell as it is (its pair goes to the spillover
/// bucket).
#[derive(Clone, Copy)]
pub struct Sum;
impl SaluBody<u32, (u32, u32), ()> for Sum {
    #[inline(always)]
    fn run(self, c: u32, (v, d): (u32, u32)) -> (u32, ()) {
        (
            if d == CLAIM {
                v
            } else if d == MATCH {
                c.wrapping_add(v)
            } else {
                c
            },
            (),
        )
    }
}
#[derive(Clone, Copy)]
pub struct Min;
impl SaluBody<u32, (u32, u32), ()> for Min {
    #[inline(always)]
    fn run(self, c: u32, (v, d): (u32, u32)) -> (u32, ()) {
        (
            if d == CLAIM {
                v
            } else if d == MATCH {
                c.min(v)
            } else {
                c
            },
            (),
        )
    }
}
#[derive(Clone, Copy)]
pub struct Max;
impl SaluBody<u32, (u32, u32), ()> for Max {
    #[inline(always)]
    fn run(self, c: u32, (v, d): (u32, u32)) -> (u32, ()) {
        (
            if d == CLAIM {
                v
            } else if d == MATCH {
                c.max(v)
            } else {
                c
            },
            (),
        )
    }
}

/// Index stack top: push returns the slot to write.
#[derive(Clone, Copy)]
pub struct Push;
impl SaluBody<u32, (), u32> for Push {
    #[inline(always)]
    fn run(self, c: u32, _: ()) -> (u32, u32) {
        (c.wrapping_add(1), c)
    }
}

/// Index stack top: pop returns the old top (0: empty; else the slot is top - 1).
#[derive(Clone, Copy)]
pub struct Pop;
impl SaluBody<u32, (), u32> for Pop {
    #[inline(always)]
    fn run(self, c: u32, _: ()) -> (u32, u32) {
        if c == 0 {
            (0, 0)
        } else {
            (c - 1, c)
        }
    }
}

/// Index stack slot: write a cell index.
#[derive(Clone, Copy)]
pub struct Write;
impl SaluBody<u32, u32, ()> for Write {
    #[inline(always)]
    fn run(self, _: u32, v: u32) -> (u32, ()) {
        (v, ())
    }
}

/// Read a cell.
#[derive(Clone, Copy)]
pub struct Read;
impl SaluBody<u32, (), u32> for Read {
    #[inline(always)]
    fn run(self, c: u32, _: ()) -> (u32, u32) {
        (c, c)
    }
}
