//! The four primitives on a segment's key-value register (INaaS §IV-C, Algorithm 1 stages
//! 7–11): read, write, reduce, and the stateless compute (in [`arith`](super::arith)).
//!
//! The cell is a pair: key in the low half, value in the high half as offset binary
//! ([`enc`]: the value XOR 2^31), so no value is stored as 0 and an action's one output
//! word can be 0 for a miss ([`dec`] turns it into [`MISS`]). A cell the program never
//! wrote holds 0; every cell is first reached through a preemption (a lease is taken before
//! any access), whose first pass reads it with the predicate forced ([`dec_evicted`]).
//!
//! A Tofino 1 stateful ALU returns one 32-bit word, so Algorithm 1's 64-bit swap of a
//! preempted register takes two passes: [`Read`] in its evict mode moves the value half,
//! [`Write`] in its key-only mode the key half (see `mod.rs`). The array has the Tofino
//! maximum of four register actions: [`Exchange`], [`Read`] (read, or the value half of an
//! eviction), [`Write`] (write, or the key half of an eviction), [`Reduce`] (reduce, or
//! collect).

use pisa::{Cmp, Cond, DualCell, OutputSource, Pred, Salu, SaluBody, SaluOutput, SaluProgram, Src, Update};

use super::arith::{sat_add, MISS};

/// Offset binary: how a value is stored in (and given to) the value half. Never 0 for a
/// value (a value is never [`MISS`]).
#[inline(always)]
pub const fn enc(v: i32) -> u32 {
    v as u32 ^ 1 << 31
}

/// The value of an output word: [`MISS`] for 0 (the action's predicate did not hold).
#[inline(always)]
pub const fn dec(w: u32) -> i32 {
    (w ^ 1 << 31) as i32
}

/// The value of an output word whose predicate always holds (the value half of an
/// eviction): 0 is a cell the program never wrote, whose value is 0.
#[inline(always)]
pub const fn dec_evicted(w: u32) -> i32 {
    if w == 0 {
        0
    } else {
        dec(w)
    }
}

/// Read-and-write (swap), Algorithm 1's `read_j = write_j = 1`, operands (key, [`enc`]
/// value): if the cell is free (c0) or holds the packet's key (c1), put the packet's pair
/// in and return the old value half; otherwise return 0 (a miss) and change nothing. A
/// free cell's value half is `enc(0)`: whatever empties a cell writes 0 as its value.
#[derive(Clone, Copy)]
pub struct Exchange;

const FREE_OR_HIT: Pred = Pred::C0.or(Pred::C1);

impl SaluProgram<DualCell, (u32, u32), u32> for Exchange {
    const SALU: Salu = Salu {
        conds: &[Cond::new(Src::Lo, Cmp::Eq, Src::K(0)), Cond::new(Src::Lo, Cmp::Eq, Src::PhvLo)],
        lo: &[Update::set(FREE_OR_HIT, Src::PhvLo)],
        hi: &[Update::set(FREE_OR_HIT, Src::PhvHi)],
        out: &[SaluOutput::new(FREE_OR_HIT, OutputSource::OldHi)],
    };
}

/// Read, operands (key, [`enc`] value): the value half if the cell holds the key (c0), else
/// 0. A read's key is never 0 (the program's check), so key 0 (c1) is the evict mode, the
/// first pass of a preemption: the value half is exchanged whatever the key (the old one
/// out, the operand in); the key stays until the second pass ([`Write`], key only).
#[derive(Clone, Copy)]
pub struct Read;

impl SaluProgram<DualCell, (u32, u32), u32> for Read {
    const SALU: Salu = Salu {
        conds: &[Cond::new(Src::Lo, Cmp::Eq, Src::PhvLo), Cond::new(Src::PhvLo, Cmp::Eq, Src::K(0))],
        lo: &[],
        hi: &[Update::set(Pred::C1, Src::PhvHi)],
        out: &[SaluOutput::new(Pred::C0.or(Pred::C1), OutputSource::OldHi)],
    };
}

/// The key operand of [`Read`] that evicts.
pub const EVICT: u32 = 0;

/// Write, operands (key, [`enc`] value): put the packet's pair in and return the old key.
/// The second pass of a preemption writes the key half only: it passes [`KEY_ONLY`]
/// (`enc(MISS)`, which no packet's value is: the program's check refuses it) as the value
/// (c0), so the value that went in on the first pass stays. A stateful ALU takes two PHV
/// operands; the key-only mode rides in the value operand instead of a third.
#[derive(Clone, Copy)]
pub struct Write;

impl SaluProgram<DualCell, (u32, u32), u32> for Write {
    const SALU: Salu = Salu {
        conds: &[Cond::new(Src::PhvHi, Cmp::Eq, Src::K(0))],
        lo: &[Update::set(Pred::ALWAYS, Src::PhvLo)],
        hi: &[Update::set(Pred::C0.not(), Src::PhvHi)],
        out: &[SaluOutput::always(OutputSource::OldLo)],
    };
}

/// The value operand of [`Write`] that writes the key half only.
pub const KEY_ONLY: u32 = enc(MISS);

/// Outcome of a reduce.
pub mod reduce_status {
    /// Added.
    pub const OK: u32 = 0;
    /// The cell holds another 16-bit key: nothing changed (a failure).
    pub const MISMATCH: u32 = 1;
    /// This worker's bit is already in the bitmap (a retransmission): nothing changed.
    pub const DUPLICATE: u32 = 2;
    /// The sum would saturate: nothing changed (the register stays exact and the
    /// worker's bit unset); the contribution goes to the goalkeeper, which adds it exactly.
    pub const OVERFLOW: u32 = 3;
}

/// Reduce (§IV-C): key = 16-bit key (high half) | 16-bit worker bitmap (low half). If the
/// cell is free or holds the same 16-bit key and the worker has not contributed yet, add
/// the value (saturating) and OR the bitmap in. Returns a [`reduce_status`].
///
/// With the value [`MISS`] (never a packet's value), collect instead: a read that frees a
/// matching cell (the key must be the whole key and bitmap), returning the value half or 0
/// (a miss, see [`dec`]). Collect shares this action because the array's fourth action
/// slot went to the eviction ([`Read`]'s evict mode); both stay one Rust body (an
/// unchecked ALU, see docs/pisa-rules.md).
#[derive(Clone, Copy)]
pub struct Reduce;

/// The value operand of [`Reduce`] that collects.
pub const COLLECT: i32 = MISS;

impl SaluBody<DualCell, (u32, i32), u32> for Reduce {
    #[inline(always)]
    fn run(self, cell: DualCell, (key, value): (u32, i32)) -> (DualCell, u32) {
        if value == COLLECT {
            return if cell.lo == key && key != 0 { (DualCell::new(0, enc(0)), cell.hi) } else { (cell, 0) };
        }
        if cell.lo != 0 && (cell.lo >> 16) != (key >> 16) {
            return (cell, reduce_status::MISMATCH);
        }
        if cell.lo & key & 0xFFFF != 0 {
            return (cell, reduce_status::DUPLICATE);
        }
        let old = if cell.lo == 0 { 0 } else { dec(cell.hi) };
        let (sum, over) = sat_add(old, value);
        if over {
            return (cell, reduce_status::OVERFLOW);
        }
        (DualCell::new(cell.lo | key, enc(sum)), reduce_status::OK)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inaas::arith::VALUE_MAX;

    #[test]
    fn keyed_actions() {
        let c = DualCell::new(5, enc(10));
        let read = |c, k| {
            let (c, w) = Read.run(c, (k, 0));
            (c, dec(w))
        };
        assert_eq!(read(c, 5), (c, 10));
        assert_eq!(read(c, 6), (c, MISS));
        assert_eq!(read(DualCell::new(5, enc(0)), 5).1, 0, "a value 0 is not a miss");
        assert_eq!(read(DualCell::new(0, enc(0)), 6).1, MISS, "a free cell holds no key");
        let swap = |c, k, v| {
            let (c, w) = Exchange.run(c, (k, enc(v)));
            (c, dec(w))
        };
        assert_eq!(swap(c, 6, 1), (c, MISS));
        assert_eq!(swap(c, 5, 1), (DualCell::new(5, enc(1)), 10));
        assert_eq!(swap(DualCell::new(0, enc(0)), 6, 1), (DualCell::new(6, enc(1)), 0), "a free cell");
        // A preemption: the value half whatever the key, then the key half.
        let (c1, w) = Read.run(c, (EVICT, enc(1)));
        assert_eq!((c1, dec_evicted(w)), (DualCell::new(5, enc(1)), 10));
        assert_eq!(dec_evicted(Read.run(DualCell::default(), (EVICT, enc(0))).1), 0, "a cell never written");
        assert_eq!(Write.run(c1, (6, KEY_ONLY)), (DualCell::new(6, enc(1)), 5));
        assert_eq!(Write.run(c, (6, enc(1))), (DualCell::new(6, enc(1)), 5));
        assert_eq!(Write.run(c, (0, enc(0))), (DualCell::new(0, enc(0)), 5));
        // Collect: read and free a matching cell.
        assert_eq!(Reduce.run(c, (6, COLLECT)), (c, 0));
        let (c2, w) = Reduce.run(c, (5, COLLECT));
        assert_eq!((c2, dec(w)), (DualCell::new(0, enc(0)), 10));
    }

    #[test]
    fn reduce_bitmap_duplicate_overflow() {
        let k = |key: u32, w: u32| key << 16 | 1 << w;
        let (c, s) = Reduce.run(DualCell::default(), (k(3, 0), 5));
        assert_eq!((c, s), (DualCell::new(k(3, 0), enc(5)), reduce_status::OK));
        let (c, s) = Reduce.run(c, (k(3, 1), 7));
        assert_eq!((dec(c.hi), s), (12, reduce_status::OK));
        assert_eq!(Reduce.run(c, (k(3, 1), 7)).1, reduce_status::DUPLICATE);
        assert_eq!(Reduce.run(c, (k(4, 2), 7)).1, reduce_status::MISMATCH);
        let (c2, s) = Reduce.run(c, (k(3, 2), VALUE_MAX));
        assert_eq!((c2, s), (c, reduce_status::OVERFLOW), "refused, register still exact");
        let (c, s) = Reduce.run(c, (k(3, 3), -1));
        assert_eq!((dec(c.hi), s), (11, reduce_status::OK));
        assert_eq!(c.lo & 0xFFFF, 0b1011);
    }
}
