//! The spillover bucket in registers (DAIET §4, Algorithm 1 lines 13-15): per tree a queue
//! of pairs "with as many entries as the number of pairs that can fit in one packet"
//! ([`MAX_PAIRS`]), gathering the pairs that collided with a different stored key across
//! packets; when it is full its pairs go to the next node as one packet.
//!
//! Registers (tofino1 stages 9-11):
//! - `spill_state` (stage 9, per tree): the bucket's counter, see [`SpillState`].
//! - `spill_key0..3` (stage 10) and `spill_value` (stage 11): the pair slots, two halves of
//!   [`MAX_PAIRS`] per tree (double buffering: one half takes pairs while the other is
//!   being drained). Slot index: [`bucket_index`].
//! - `spill_overflow` (stage 11, per tree): pairs that found both halves busy and went on
//!   in their own packet unaggregated (still exact), counted.
//!
//! One register array is reached once per pass, so one pair per pass enters the bucket;
//! a packet with more colliding pairs keeps them marked in its bridged metadata and stores
//! one per following pass.

use pisa::SaluBody;
use wire::daiet::MAX_PAIRS;

use super::MAX_TREES;

/// Bucket slots per tree: two halves of a packet's worth of pairs.
pub const BUCKET_CELLS: u32 = MAX_TREES * 2 * MAX_PAIRS as u32;

/// The slot `slot` of half `half` of tree `tree_idx`'s bucket.
#[inline]
pub fn bucket_index(tree_idx: u16, half: u32, slot: u32) -> u32 {
    (tree_idx as u32 * 2 + (half & 1)) * MAX_PAIRS as u32 + slot
}

// `spill_state` cell: bits 0-3 `fill` (pairs in the active half), bit 4 the active half,
// bit 5 `draining` (the other half is being drained), bits 16-31 `storers` (packets that
// still have colliding pairs to store: the END's flush waits for them).
const FILL: u32 = 0xF;
const ACTIVE: u32 = 1 << 4;
const DRAINING: u32 = 1 << 5;
const STORER: u32 = 1 << 16;

/// Operand: store one colliding pair (with [`FIRST`] / [`MORE`]).
pub const OP_STORE: u8 = 0;
/// Operand: the drainer read the last slot of its half.
pub const OP_DRAINED: u8 = 1;
/// Operand: the END's flush takes the active half's pairs (the tree is done).
pub const OP_FLUSH: u8 = 2;
/// Store: the packet is not yet counted among the storers.
pub const FIRST: u8 = 4;
/// Store: the packet has more colliding pairs to store after this one.
pub const MORE: u8 = 8;

/// Output: the pair got slot `out & 0xF` of half `(out >> 4) & 1`.
pub const S_STORED: u32 = 1 << 8;
/// Output (with [`S_STORED`]): that slot filled the half: this packet drains it.
pub const S_DRAIN: u32 = 1 << 9;
/// Output of [`OP_DRAINED`]: the other half filled meanwhile: drain half `(out >> 4) & 1` too.
pub const S_CONTINUE: u32 = 1 << 10;
/// Output of [`OP_FLUSH`]: a drain or a packet's stores are still under way: ask again.
pub const S_WAIT: u32 = 1 << 11;
/// Output of [`OP_FLUSH`]: `out & 0xF` pairs in half `(out >> 4) & 1`.
pub const S_FLUSHED: u32 = 1 << 12;

/// The bucket's counter. Store: a free slot of the active half (or none: both halves are
/// busy, the pair goes on in its packet); the store that fills the half switches to the
/// other half and makes its packet the drainer, unless the other half is still being
/// drained (then the full half waits, and the drainer takes it on when done: `drained`).
/// Flush: the remaining pairs of the active half, once no drain and no store is under way.
///
/// More conditions than a Tofino 1 stateful ALU has (a note in the resource report says
/// so): a compiler would spread the fields over separate registers.
#[derive(Clone, Copy)]
pub struct SpillState;
impl SaluBody<u32, u8, u32> for SpillState {
    #[inline(always)]
    fn run(self, c: u32, op: u8) -> (u32, u32) {
        let fill = c & FILL;
        let active = (c & ACTIVE) >> 4;
        let full = fill >= MAX_PAIRS as u32;
        match op & 3 {
            OP_STORE => {
                // Counted among the storers while pairs are left to store.
                let stays = !full && op & MORE != 0;
                let mut c = c;
                if op & FIRST != 0 && stays {
                    c = c.wrapping_add(STORER);
                } else if op & FIRST == 0 && !stays && c >= STORER {
                    c -= STORER;
                }
                if full {
                    return (c, 0);
                }
                let out = S_STORED | (active << 4) | fill;
                if fill + 1 == MAX_PAIRS as u32 && c & DRAINING == 0 {
                    // Full: the other (empty) half takes the next pairs; this one drains.
                    ((c & !FILL) ^ ACTIVE | DRAINING, out | S_DRAIN)
                } else {
                    (c + 1, out)
                }
            }
            OP_DRAINED => {
                if full {
                    // The active half filled while the other one drained: swap again.
                    ((c & !FILL) ^ ACTIVE, S_CONTINUE | (active << 4))
                } else {
                    (c & !DRAINING, 0)
                }
            }
            OP_FLUSH => {
                if c & DRAINING != 0 || c >= STORER {
                    (c, S_WAIT)
                } else {
                    (0, S_FLUSHED | (active << 4) | fill) // the tree starts afresh
                }
            }
            _ => (c, 0),
        }
    }
}

/// A counter that adds its operand.
#[derive(Clone, Copy)]
pub struct AddN;
impl SaluBody<u32, u32, ()> for AddN {
    #[inline(always)]
    fn run(self, c: u32, n: u32) -> (u32, ()) {
        (c.wrapping_add(n), ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(c: u32, first: bool, more: bool) -> (u32, u32) {
        SpillState.run(c, OP_STORE | if first { FIRST } else { 0 } | if more { MORE } else { 0 })
    }

    #[test]
    fn a_full_half_swaps_and_drains_and_a_second_full_half_waits() {
        let mut c = 0;
        for i in 0..MAX_PAIRS as u32 {
            let (n, out) = store(c, true, false);
            c = n;
            assert_eq!(out & (S_STORED | 0x1F), S_STORED | i);
            assert_eq!(out & S_DRAIN != 0, i + 1 == MAX_PAIRS as u32);
        }
        // Half 1 takes the next pairs while half 0 drains.
        for i in 0..MAX_PAIRS as u32 {
            let (n, out) = store(c, true, false);
            c = n;
            assert_eq!(out, S_STORED | (1 << 4) | i, "no second drain while one is under way");
        }
        // Both busy: the pair stays in its packet.
        assert_eq!(store(c, true, false).1, 0);
        // The drainer of half 0 takes half 1 on; then half 0 takes pairs again.
        let (n, out) = SpillState.run(c, OP_DRAINED);
        c = n;
        assert_eq!(out, S_CONTINUE | (1 << 4));
        let (n, out) = store(c, true, false);
        assert_eq!(out, S_STORED);
        let (n, _) = store(n, true, false);
        let (n, out) = SpillState.run(n, OP_FLUSH);
        assert_eq!(out, S_WAIT, "the flush waits for the drain");
        let (n, out) = SpillState.run(n, OP_DRAINED);
        assert_eq!(out, 0);
        let (n, out) = SpillState.run(n, OP_FLUSH);
        assert_eq!(out, S_FLUSHED | 2);
        assert_eq!(n, 0);
    }

    #[test]
    fn storers_are_counted_until_their_last_pair() {
        let (c, _) = store(0, true, true);
        assert_eq!(SpillState.run(c, OP_FLUSH).1, S_WAIT);
        let (c, _) = store(c, false, true);
        let (c, _) = store(c, false, false);
        assert_eq!(SpillState.run(c, OP_FLUSH).1, S_FLUSHED | 3);
    }
}
