//! The flush: when the last child's END arrives, the END packet walks the tree's index
//! stack, one used cell per pass (pop the stack, read-and-clear the four key words and
//! the value, append the pair to the packet). Every ten pairs the packet is cloned to the
//! recirculation port — the original leaves for the parent with its pairs, the clone
//! keeps walking with none — so the switch creates no packet. At the empty stack the END
//! goes to the parent (carrying the switch's last sequence number) and a truncated clone
//! acknowledges the child's END.

use pisa::Pass;
use wire::daiet::{flags, MAX_PAIRS, SLICES};

use super::layout::*;
use super::{ack_session, Daiet, TreeConfig, WALK_SESSION};

// During the walk `Bridged::spill` holds the slice whose stack is being drained (SLICES:
// all drained) and `Bridged::pending` the cell popped in the pass before: slice << 24 |
// (cell + 1), or 0.

impl Daiet {
    pub(super) fn walk_pass(&self, pass: &mut Pass<'_>, t: &TreeConfig, br: &mut Bridged) {
        if br.cursor as usize >= MAX_PAIRS {
            // The copy that left carried these pairs: start the next packet empty.
            pass.hdr_mut()[NUM_PAIRS] = 0;
            if !pass.resize_hdr(PAIRS) {
                return;
            }
            br.cursor = 0;
        }
        let drained = br.spill as usize >= SLICES;
        if drained && br.pending == 0 {
            // Done: acknowledge the child's END, END to the parent, the tree is reset.
            pass.execute(&self.complete, t.sender_base + br.child as u32, ());
            pass.execute(&self.ends_reset, t.tree_idx as u32, ());
            self.send_on(pass, t, flags::END);
            pass.clone_ingress(ack_session(br.port));
            return;
        }
        // Stages 2-6: read and clear the cell popped in the pass before.
        if br.pending != 0 {
            let s = (br.pending >> 24) as usize % SLICES;
            let idx = (br.pending & 0x00FF_FFFF) - 1;
            let sl = &self.slices[s];
            let mut words = [0u32; 4];
            for (w, word) in words.iter_mut().enumerate() {
                *word = pass.execute(&sl.key_take[w], idx, ());
            }
            let v = pass.execute(&sl.v_take, idx, ());
            let c = br.cursor as usize;
            if !pass.resize_hdr(pair_at(c + 1)) {
                return;
            }
            let h = pass.hdr_mut();
            let at = pair_at(c);
            for (w, word) in words.iter().enumerate() {
                h[at + 4 * w..at + 4 * w + 4].copy_from_slice(&word.to_be_bytes());
            }
            h[at + 16..at + 20].copy_from_slice(&v.to_be_bytes());
            h[NUM_PAIRS] = (c + 1) as u8;
            br.cursor += 1;
            br.pending = 0;
        }
        // Stages 7-8: pop the next used cell of the slice being drained.
        if !drained {
            let s = br.spill as usize;
            let sl = &self.slices[s];
            let top = pass.execute(&sl.pop, t.tree_idx as u32, ());
            if top > 0 {
                let cell = pass.execute(&sl.stack_read, t.part_base + (top - 1) % t.part_size, ());
                br.pending = ((s as u32) << 24) | (cell + 1);
            } else {
                br.spill += 1;
            }
        }
        let c = br.cursor as usize;
        let finished = br.spill as usize >= SLICES && br.pending == 0;
        if c == MAX_PAIRS || (finished && c > 0) {
            // A packet's worth (or the rest): on to the parent; a clone keeps walking.
            self.send_on(pass, t, 0);
            pass.clone_ingress(WALK_SESSION);
            br.cursor = MAX_PAIRS as u8;
            return;
        }
        pass.recirculate();
    }
}
