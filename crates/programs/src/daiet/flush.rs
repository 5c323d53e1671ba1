//! The flush: when the last child's END arrives, the END packet walks the tree's index
//! stack, one used cell per pass (pop the stack, read-and-clear the four key words and
//! the value, append the pair to the packet). Every ten pairs the packet is cloned to the
//! recirculation port — the original leaves for the parent with its pairs, the clone
//! keeps walking with none — so the switch creates no packet. At the empty stack the END
//! goes to the parent (carrying the switch's last sequence number) and a truncated clone
//! acknowledges the child's END.

use pisa::Pass;
use wire::daiet::{flags, MAX_PAIRS};

use super::layout::*;
use super::{ack_session, Daiet, TreeConfig, WALK_SESSION};

/// `Bridged::spill` during the walk: the stack was seen empty.
const STACK_EMPTY: u16 = 1;

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
        if br.spill == STACK_EMPTY && br.pending == 0 {
            // Done: acknowledge the child's END, END to the parent, the tree is reset.
            pass.execute(&self.complete, t.sender_base + br.child as u32, ());
            pass.execute(&self.ends_reset, t.tree_idx as u32, ());
            self.send_on(pass, t, flags::END);
            pass.clone_ingress(ack_session(br.port));
            return;
        }
        let top = pass.execute(&self.pop, t.tree_idx as u32, ());
        let next = if top > 0 { pass.execute(&self.stack_read, t.part_base + (top - 1) % t.part_size, ()) + 1 } else { 0 };
        if br.pending != 0 {
            let idx = br.pending - 1;
            let mut words = [0u32; 4];
            for (i, w) in words.iter_mut().enumerate() {
                *w = pass.execute(&self.key_take[i], idx, ());
            }
            let v = pass.execute(&self.v_take, idx, ());
            let c = br.cursor as usize;
            if !pass.resize_hdr(pair_at(c + 1)) {
                return;
            }
            let h = pass.hdr_mut();
            let at = pair_at(c);
            for (i, w) in words.iter().enumerate() {
                h[at + 4 * i..at + 4 * i + 4].copy_from_slice(&w.to_be_bytes());
            }
            h[at + 16..at + 20].copy_from_slice(&v.to_be_bytes());
            h[NUM_PAIRS] = (c + 1) as u8;
            br.cursor += 1;
        }
        br.pending = next;
        if next == 0 {
            br.spill = STACK_EMPTY;
        }
        let c = br.cursor as usize;
        if c == MAX_PAIRS || (next == 0 && c > 0) {
            self.send_on(pass, t, 0);
            pass.clone_ingress(WALK_SESSION);
            br.cursor = MAX_PAIRS as u8;
            return;
        }
        pass.recirculate();
    }
}
