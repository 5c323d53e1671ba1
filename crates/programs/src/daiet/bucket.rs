//! The spillover bucket in registers (DAIET §4, Algorithm 1 lines 13-15): per tree a queue
//! of pairs "with as many entries as the number of pairs that can fit in one packet"
//! ([`MAX_PAIRS`]), gathering the pairs that collided with a different stored key across
//! packets; when it is full its pairs go to the next node as one packet.
//!
//! Registers (tofino1 stages 9-11):
//! - `spill_state` (stage 9, per tree): the bucket's counter, see [`SpillState`].
//! - `spill_key0..3` (stage 10) and `spill_value` (stage 11): the pair slots, [`BUFFERS`]
//!   buffers of [`MAX_PAIRS`] per tree (one takes pairs while full ones are drained).
//!   Slot index: [`bucket_index`].
//! - `spill_overflow` (stage 11, per tree): pairs that found the bucket busy (the head
//!   buffer full, waiting for the next one's drain) and went on in their own packet
//!   unaggregated (still exact), counted.
//!
//! One register array is reached once per pass, so one pair per pass enters the bucket;
//! a packet with more colliding pairs keeps them marked in its bridged metadata and stores
//! one per following pass.

use pisa::{Pair, SaluBody};
use wire::daiet::MAX_PAIRS;

use super::MAX_TREES;

/// Buffers of a packet's worth of pairs in each tree's bucket, used as a ring: one takes
/// the colliding pairs while full ones are drained, each by its own packet. Two would be
/// the textbook double buffer; a drain takes ten passes, during which every packet in the
/// pipeline may store a pair, so more buffers let more drains overlap (see `bucket_load`
/// in the tests for the measurement).
pub const BUFFERS: u32 = 16;

/// Bucket slots: per tree, [`BUFFERS`] buffers of [`MAX_PAIRS`].
pub const BUCKET_CELLS: u32 = MAX_TREES * BUFFERS * MAX_PAIRS as u32;

/// The slot `slot` of buffer `buf` of tree `tree_idx`'s bucket.
#[inline]
pub fn bucket_index(tree_idx: u16, buf: u32, slot: u32) -> u32 {
    (tree_idx as u32 * BUFFERS + buf % BUFFERS) * MAX_PAIRS as u32 + slot
}

// `spill_state` cell, lo: bits 0-3 `fill` (pairs in the head buffer), bits 4-7 `head` (the
// buffer taking pairs), bits 16-31 `busy` (a bit per buffer being drained); hi: `storers`
// (packets that still have colliding pairs to store: the END's flush waits for them).
const FILL: u32 = 0xF;
const HEAD_SHIFT: u32 = 4;
const BUSY_SHIFT: u32 = 16;

/// Operand: store one colliding pair (with [`FIRST`] / [`MORE`]).
pub const OP_STORE: u8 = 0;
/// Operand: the drainer of buffer `op >> 4` read its last slot.
pub const OP_DRAINED: u8 = 1;
/// Operand: the END's flush takes the head buffer's pairs (the tree is done).
pub const OP_FLUSH: u8 = 2;
/// Operand: a flush walker gave up waiting (`MAX_WAIT_PASSES`): the drains and stores it
/// waited for were lost, so the counter starts afresh (the slots need no clearing: a slot is
/// written before it is read).
pub const OP_ABANDON: u8 = 3;
/// Store: the packet is not yet counted among the storers.
pub const FIRST: u8 = 4;
/// Store: the packet has more colliding pairs to store after this one.
pub const MORE: u8 = 8;
/// Store: the packet already drains a buffer after its pairs (a packet drains one): a
/// store that fills the head buffer leaves it full and waiting, to be taken on by the
/// next drain that ends (this packet's own, at the latest).
pub const NO_DRAIN: u8 = 16;

/// Output: the pair got slot `out & 0xF` of buffer [`out_buf`].
pub const S_STORED: u32 = 1 << 8;
/// Output (with [`S_STORED`]): that slot filled the buffer: this packet drains it.
pub const S_DRAIN: u32 = 1 << 9;
/// Output of [`OP_DRAINED`]: the head buffer is full and was waiting: drain buffer
/// [`out_buf`] too.
pub const S_CONTINUE: u32 = 1 << 10;
/// Output of [`OP_FLUSH`]: a drain or a packet's stores are still under way: ask again.
pub const S_WAIT: u32 = 1 << 11;
/// Output of [`OP_FLUSH`]: `out & 0xF` pairs in buffer [`out_buf`].
pub const S_FLUSHED: u32 = 1 << 12;

/// The buffer an output names.
#[inline]
pub fn out_buf(out: u32) -> u32 {
    (out >> 4) & 0xF
}

/// The bucket's counter. Store: a free slot of the head buffer (or none: the head is full
/// and waits for the next buffer's drain; the pair goes on in its packet); the store that
/// fills the head moves the head on to the next buffer and makes its packet the drainer,
/// unless the next buffer is still being drained or the packet already drains one (then
/// the full head waits, and the next drainer to finish while the next buffer is free takes
/// it on: there is one, as some buffer is being drained). Flush: the head buffer's pairs,
/// once no drain and no store is under way; the cell is reset.
///
/// More conditions than a Tofino 1 stateful ALU has (a note in the resource report says
/// so): a compiler would spread the fields over separate registers.
#[derive(Clone, Copy)]
pub struct SpillState;
impl SaluBody<Pair, u8, u32> for SpillState {
    #[inline(always)]
    fn run(self, c: Pair, op: u8) -> (Pair, u32) {
        let fill = c.lo & FILL;
        let head = (c.lo >> HEAD_SHIFT) & 0xF;
        let busy = c.lo >> BUSY_SHIFT;
        let full = fill >= MAX_PAIRS as u32;
        let next = (head + 1) % BUFFERS;
        match op & 3 {
            OP_STORE => {
                // Counted among the storers while pairs are left to store.
                let stays = !full && op & MORE != 0;
                let mut storers = c.hi;
                if op & FIRST != 0 && stays {
                    storers = storers.wrapping_add(1);
                } else if op & FIRST == 0 && !stays {
                    storers = storers.saturating_sub(1);
                }
                if full {
                    return (Pair::new(c.lo, storers), 0);
                }
                let out = S_STORED | (head << 4) | fill;
                if fill + 1 == MAX_PAIRS as u32 && busy & (1 << next) == 0 && op & NO_DRAIN == 0 {
                    // Full: the next (empty) buffer takes the following pairs; this one drains.
                    let busy = busy | (1 << head);
                    (Pair::new((busy << BUSY_SHIFT) | (next << HEAD_SHIFT), storers), out | S_DRAIN)
                } else {
                    (Pair::new(c.lo + 1, storers), out)
                }
            }
            OP_DRAINED => {
                let done = (op as u32 >> 4) % BUFFERS;
                let busy = busy & !(1 << done);
                if full && busy & (1 << next) == 0 {
                    // The full head waited (for the next buffer, or for a drainer): this
                    // walker drains it now; the next buffer is the head.
                    let busy = busy | (1 << head);
                    (Pair::new((busy << BUSY_SHIFT) | (next << HEAD_SHIFT), c.hi), S_CONTINUE | (head << 4))
                } else {
                    (Pair::new((busy << BUSY_SHIFT) | (c.lo & 0xFFFF), c.hi), 0)
                }
            }
            OP_FLUSH => {
                if busy != 0 || c.hi != 0 {
                    (c, S_WAIT)
                } else {
                    (Pair::new(0, 0), S_FLUSHED | (head << 4) | fill) // the tree starts afresh
                }
            }
            _ => (Pair::new(0, 0), 0), // OP_ABANDON
        }
    }
}

/// A counter that adds its operand.
pub use pisa::salu::common::Add as AddN;

#[cfg(test)]
mod tests {
    use super::*;

    fn store(c: Pair, first: bool, more: bool) -> (Pair, u32) {
        SpillState.run(c, OP_STORE | if first { FIRST } else { 0 } | if more { MORE } else { 0 })
    }

    fn fill_buffer(mut c: Pair, buf: u32) -> Pair {
        for i in 0..MAX_PAIRS as u32 {
            let (n, out) = store(c, true, false);
            c = n;
            assert_eq!(out & (S_STORED | 0xFF), S_STORED | (buf << 4) | i);
        }
        c
    }

    #[test]
    fn full_buffers_drain_in_turn_and_a_full_ring_waits() {
        let mut c = Pair::new(0, 0);
        // Every buffer but the last fills and starts its own drain.
        for b in 0..BUFFERS - 1 {
            let (n, out) = store(c, true, false);
            assert_eq!(out & S_DRAIN, 0);
            c = n;
            for i in 1..MAX_PAIRS as u32 {
                let (n, out) = store(c, true, false);
                c = n;
                assert_eq!(out & (S_STORED | 0xFF), S_STORED | (b << 4) | i);
                assert_eq!(out & S_DRAIN != 0, i + 1 == MAX_PAIRS as u32, "buffer {b} slot {i}");
            }
        }
        // The last one fills while buffer 0 still drains: no drain, it waits.
        let last = BUFFERS - 1;
        let (n, out) = SpillState.run(fill_buffer(c, last), OP_STORE | FIRST);
        c = n;
        assert_eq!(out, 0, "the bucket is busy: the pair goes on in its packet");
        // A drain of another buffer does not free the head.
        let (n, out) = SpillState.run(c, OP_DRAINED | (3 << 4));
        c = n;
        assert_eq!(out, 0);
        // Buffer 0's drainer takes the full head on; buffer 0 takes pairs again.
        let (n, out) = SpillState.run(c, OP_DRAINED);
        c = n;
        assert_eq!(out, S_CONTINUE | (last << 4));
        let (n, out) = store(c, true, false);
        assert_eq!(out, S_STORED);
        let (n, _) = store(n, true, false);
        let (mut n, out) = SpillState.run(n, OP_FLUSH);
        assert_eq!(out, S_WAIT, "the flush waits for the drains");
        for b in (1..BUFFERS).filter(|&b| b != 3) {
            n = SpillState.run(n, OP_DRAINED | (b << 4) as u8).0;
        }
        let (n, out) = SpillState.run(n, OP_FLUSH);
        assert_eq!(out, S_FLUSHED | 2);
        assert_eq!((n.lo, n.hi), (0, 0));
    }

    #[test]
    fn a_packet_that_drains_one_buffer_leaves_a_second_full_one_waiting() {
        let mut c = Pair::new(0, 0);
        for _ in 0..MAX_PAIRS - 1 {
            c = store(c, true, false).0;
        }
        // Buffer 0 drains (busy); buffer 1 fills by a packet that drains buffer 0.
        c = store(c, true, false).0;
        for _ in 0..MAX_PAIRS - 1 {
            c = store(c, true, false).0;
        }
        let (c, out) = SpillState.run(c, OP_STORE | FIRST | NO_DRAIN);
        assert_eq!(out, S_STORED | (1 << 4) | 9, "stored, no second drain");
        assert_eq!(store(c, true, false).1, 0, "full and waiting");
        // The drain of buffer 0 ends: its walker takes buffer 1 on.
        let (c, out) = SpillState.run(c, OP_DRAINED);
        assert_eq!(out, S_CONTINUE | (1 << 4));
        assert_eq!(store(c, true, false).1, S_STORED | (2 << 4));
    }

    #[test]
    fn storers_are_counted_until_their_last_pair() {
        let (c, _) = store(Pair::new(0, 0), true, true);
        assert_eq!(SpillState.run(c, OP_FLUSH).1, S_WAIT);
        let (c, _) = store(c, false, true);
        let (c, _) = store(c, false, false);
        assert_eq!(SpillState.run(c, OP_FLUSH).1, S_FLUSHED | 3);
    }
}
