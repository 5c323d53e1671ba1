//! The flush: when the last child's END arrives, the END packet walks the tree's index
//! stack, one used cell per pass (pop the stack, read-and-clear the four key words and
//! the value, append the pair to the packet), then the spillover bucket's remaining pairs,
//! one slot per pass. Every ten pairs the packet is cloned to the recirculation port — the
//! original leaves for the parent with its pairs, the clone keeps walking with none — so
//! the switch creates no packet. When all is read, the rest of the pairs leave, then the
//! END goes to the parent (carrying the switch's last sequence number) and a truncated
//! clone acknowledges the child's END. The tree's cells, index stacks and bucket are empty
//! afterwards.

use pisa::{Pass, TraceMode};
use wire::daiet::{flags, MAX_PAIRS, SLICES};

use super::bucket::*;
use super::layout::*;
use super::{ack_session, Daiet, Tree, MAX_WAIT_PASSES, WALK_SESSION};

// During the walk `Bridged::spill` holds the slice whose stack is being drained; then
// `SLICES`: ask the bucket's busy counter whether a drain or a packet's stores are under way
// (ask again while they are); then `W_TAKE`: take the ring's head buffer; then
// `W_BUCKET | buffer << 8 | count << 4 | next slot`;
// then `W_DONE`. `Bridged::pending` holds the cell popped in the pass before:
// slice << 24 | (cell + 1), or 0; while the walker asks the bucket (`spill == SLICES`; no
// cell is pending then), the passes it has waited (bounded by `MAX_WAIT_PASSES`).
const W_BUCKET: u16 = 0x8000;
const W_DONE: u16 = 0x4000;
const W_TAKE: u16 = SLICES as u16 + 1;

impl Daiet {
    pub(super) fn walk_pass<M: TraceMode>(&self, pass: &mut Pass<'_, M>, t: &Tree<'_>, br: &mut Bridged) {
        if !self.empty_after_copy_left(pass, br) {
            return;
        }
        if br.spill() == W_DONE {
            if br.cursor() > 0 {
                // The last pairs, then the END in the next pass.
                self.send_on(pass, t, 0);
                pass.clone_ingress(WALK_SESSION);
                br.set_cursor(MAX_PAIRS as u8);
                return;
            }
            // Done: acknowledge the child's END, END to the parent, the tree is reset.
            pass.execute(&self.complete, t.sender_base() + br.child() as u32, ());
            pass.execute(&self.ends_reset, t.tree_idx() as u32, ());
            self.send_on(pass, t, flags::END);
            pass.clone_ingress(ack_session(br.port()));
            return;
        }
        if br.spill() as usize >= SLICES {
            if br.spill() as usize == SLICES && br.pending() >= MAX_WAIT_PASSES {
                self.give_up_walk(pass, t, br);
                return;
            }
            self.walk_bucket(pass, t, br);
            return;
        }
        // Stages 2-6: read and clear the cell popped in the pass before.
        if br.pending() != 0 {
            let s = (br.pending() >> 24) as usize % SLICES;
            let idx = (br.pending() & 0x00FF_FFFF) - 1;
            let sl = &self.slices[s];
            let mut words = [0u32; 5];
            for (w, word) in words.iter_mut().take(4).enumerate() {
                *word = pass.execute(&sl.key_take[w], idx, ()).get();
            }
            words[4] = pass.execute(&sl.v_take, idx, ()).get();
            if !self.append_pair(pass, br, &words) {
                return;
            }
            br.set_pending(0);
        }
        // Stages 7-8: pop the next used cell of the slice being drained.
        let s = br.spill() as usize;
        let sl = &self.slices[s];
        let top = pass.execute(&sl.pop, t.tree_idx() as u32, ());
        if top > 0 {
            let cell = pass.execute(&sl.stack_read, t.part_base() + (top - 1) % t.part_size(), ()).get();
            br.set_pending(((s as u32) << 24) | (cell + 1));
        } else {
            br.set_spill(br.spill() + 1);
        }
        if br.cursor() as usize == MAX_PAIRS {
            // A packet's worth: on to the parent; a clone keeps walking.
            self.send_on(pass, t, 0);
            pass.clone_ingress(WALK_SESSION);
            return;
        }
        pass.recirculate();
    }

    /// The walker waited `MAX_WAIT_PASSES` for the bucket's drains and stores: a packet they
    /// count was lost in the switch (or the registers were rewritten), so they never end.
    /// Give up in a pass of its own, since the in-flight count (stage 1) comes before the
    /// bucket's ring (stage 9): undo the END's in-flight count so the sender's
    /// retransmission is answered (as a duplicate: its pairs were taken in), reset the
    /// children count, the switch's numbering and the bucket's counters (cells and index
    /// stacks are empty: the walk took them), and drop the END, counted. Without the
    /// switch's END the reducer's stream stays incomplete and it falls back.
    fn give_up_walk<M: TraceMode>(&self, pass: &mut Pass<'_, M>, t: &Tree<'_>, br: &mut Bridged) {
        pass.execute(&self.complete, t.sender_base() + br.child() as u32, ());
        pass.execute(&self.ends_reset, t.tree_idx() as u32, ());
        pass.execute(&self.out_last, t.tree_idx() as u32, ());
        pass.execute(&self.spill_take, t.tree_idx() as u32, ());
        pass.execute(&self.busy_reset, t.tree_idx() as u32, ());
        pass.drop(self.d_wait);
    }

    /// The bucket part of the walk: one slot per pass.
    fn walk_bucket<M: TraceMode>(&self, pass: &mut Pass<'_, M>, t: &Tree<'_>, br: &mut Bridged) {
        let (buf, n, slot) = if br.spill() as usize == SLICES {
            // Stage 11: a drain or a packet's stores under way? Then ask again, counted (the
            // give-up is a pass of its own, see `give_up_walk`).
            if pass.execute(&self.busy_check, t.tree_idx() as u32, ()).get() != IDLE {
                br.set_pending(br.pending() + 1);
            } else {
                br.set_spill(W_TAKE);
            }
            pass.recirculate();
            return;
        } else if br.spill() == W_TAKE {
            // Stage 9: nothing is under way any more (nothing can start: every child's
            // packets are done), so the ring hands over its head buffer's pairs.
            let (buf, n) = head_of(pass.execute(&self.spill_take, t.tree_idx() as u32, ()).get());
            if n == 0 {
                br.set_spill(W_DONE);
                pass.recirculate();
                return;
            }
            (buf, n, 0)
        } else {
            ((br.spill() as u32 >> 8) & 0xF, (br.spill() as u32 >> 4) & 0xF, br.spill() as u32 & 0xF)
        };
        let send = br.cursor() as usize + 1 == MAX_PAIRS;
        let seq = if send { pass.execute(&self.out_next, t.tree_idx() as u32, ()).get() } else { 0 };
        // Stages 10-11: read and clear the slot.
        let words = self.take_bucket_slot(pass, bucket_index(t.tree_idx(), buf, slot));
        if !self.append_pair(pass, br, &words) {
            return;
        }
        br.set_spill(if slot + 1 == n { W_DONE } else { W_BUCKET | (buf << 8 | n << 4 | (slot + 1)) as u16 });
        if send {
            self.send_with(pass, t, seq, 0);
            pass.clone_ingress(WALK_SESSION);
        } else {
            pass.recirculate();
        }
    }
}
