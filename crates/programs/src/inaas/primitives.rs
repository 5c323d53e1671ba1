//! The four primitives on a segment's key-value register (INaaS §IV-C, Algorithm 1 stages
//! 7–11): read, write, reduce, and the stateless compute (in [`arith`](super::arith)).
//!
//! The cell is a pair: key in the low half, value in the high half. A Tofino 1 stateful ALU
//! returns one 32-bit word, so each action returns one: the value (or [`MISS`]), the old
//! key, or a status. That is why Algorithm 1's 64-bit swap of a preempted register is split
//! in two passes ([`Exchange`] with `evict` then [`Write`] of the key only), see `mod.rs`. The
//! array has the Tofino maximum of four register actions.

use pisa::{Cmp, Cond, Out, OutSrc, Pair, Pred, Salu, SaluBody, SaluProgram, Src, Update};

use super::arith::{sat_add, MISS};

/// Read-and-write (swap), Algorithm 1's `read_j = write_j = 1`: if the cell is free or
/// holds the packet's key, put the packet's pair in and return the old value; otherwise
/// return [`MISS`] and change nothing. With `evict` (first pass of a preemption) the value
/// half is exchanged whatever the key: the old value goes out, the new one in, the key
/// stays until the second pass.
#[derive(Clone, Copy)]
pub struct Exchange;

impl SaluBody<Pair, (bool, (u32, i32)), i32> for Exchange {
    #[inline(always)]
    fn run(self, cell: Pair, (evict, (key, value)): (bool, (u32, i32))) -> (Pair, i32) {
        if evict {
            (Pair::new(cell.lo, value as u32), cell.hi as i32)
        } else if cell.lo == 0 || cell.lo == key {
            (Pair::new(key, value as u32), if cell.lo == 0 { 0 } else { cell.hi as i32 })
        } else {
            (cell, MISS)
        }
    }
}

/// Read: the value if the cell holds the packet's key, else [`MISS`]. With `clear` (the
/// "collect" of an aggregation: read and reduce flags together) a matching cell is also
/// freed, so the next round starts empty.
#[derive(Clone, Copy)]
pub struct Read;

impl SaluBody<Pair, (bool, u32), i32> for Read {
    #[inline(always)]
    fn run(self, cell: Pair, (clear, key): (bool, u32)) -> (Pair, i32) {
        if cell.lo == key && key != 0 {
            (if clear { Pair::new(0, 0) } else { cell }, cell.hi as i32)
        } else {
            (cell, MISS)
        }
    }
}

/// Write: put the packet's pair in and return the old key. The second pass of a
/// preemption writes the key half only: it passes [`MISS`] as the value (c0), which no
/// packet's value is (`check` refuses it), so the value that went in on the first pass
/// stays. A stateful ALU takes two PHV operands; the key-only mode rides in the value
/// operand instead of a third (one condition, one constant in the register file).
#[derive(Clone, Copy)]
pub struct Write;

impl SaluProgram<Pair, (u32, i32), u32> for Write {
    const SALU: Salu = Salu {
        conds: &[Cond::new(Src::PhvHi, Cmp::Eq, Src::K(MISS))],
        lo: &[Update::set(Pred::ALWAYS, Src::PhvLo)],
        hi: &[Update::set(Pred::C0.not(), Src::PhvHi)],
        out: &[Out::always(OutSrc::OldLo)],
    };
}

/// The value operand of [`Write`] that writes the key half only.
pub const KEY_ONLY: i32 = MISS;

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
#[derive(Clone, Copy)]
pub struct Reduce;

impl SaluBody<Pair, (u32, i32), u32> for Reduce {
    #[inline(always)]
    fn run(self, cell: Pair, (key, value): (u32, i32)) -> (Pair, u32) {
        if cell.lo != 0 && (cell.lo >> 16) != (key >> 16) {
            return (cell, reduce_status::MISMATCH);
        }
        if cell.lo & key & 0xFFFF != 0 {
            return (cell, reduce_status::DUPLICATE);
        }
        let old = if cell.lo == 0 { 0 } else { cell.hi as i32 };
        let (sum, over) = sat_add(old, value);
        if over {
            return (cell, reduce_status::OVERFLOW);
        }
        (Pair::new(cell.lo | key, sum as u32), reduce_status::OK)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inaas::arith::VALUE_MAX;

    #[test]
    fn keyed_actions() {
        let c = Pair::new(5, 10);
        assert_eq!(Read.run(c, (false, 5)), (c, 10));
        assert_eq!(Read.run(c, (false, 6)), (c, MISS));
        assert_eq!(Read.run(c, (true, 5)), (Pair::new(0, 0), 10));
        assert_eq!(Exchange.run(c, (false, (6, 1))), (c, MISS));
        assert_eq!(Exchange.run(c, (false, (5, 1))), (Pair::new(5, 1), 10));
        assert_eq!(Exchange.run(c, (true, (6, 1))), (Pair::new(5, 1), 10));
        assert_eq!(Write.run(c, (6, KEY_ONLY)), (Pair::new(6, 10), 5));
        assert_eq!(Write.run(c, (6, 1)), (Pair::new(6, 1), 5));
        assert_eq!(Write.run(c, (0, 0)), (Pair::new(0, 0), 5));
    }

    #[test]
    fn reduce_bitmap_duplicate_overflow() {
        let k = |key: u32, w: u32| key << 16 | 1 << w;
        let (c, s) = Reduce.run(Pair::default(), (k(3, 0), 5));
        assert_eq!((c, s), (Pair::new(k(3, 0), 5), reduce_status::OK));
        let (c, s) = Reduce.run(c, (k(3, 1), 7));
        assert_eq!((c.hi as i32, s), (12, reduce_status::OK));
        assert_eq!(Reduce.run(c, (k(3, 1), 7)).1, reduce_status::DUPLICATE);
        assert_eq!(Reduce.run(c, (k(4, 2), 7)).1, reduce_status::MISMATCH);
        let (c2, s) = Reduce.run(c, (k(3, 2), VALUE_MAX));
        assert_eq!((c2, s), (c, reduce_status::OVERFLOW), "refused, register still exact");
        let (c, s) = Reduce.run(c, (k(3, 3), -1));
        assert_eq!((c.hi as i32, s), (11, reduce_status::OK));
        assert_eq!(c.lo & 0xFFFF, 0b1011);
    }
}
