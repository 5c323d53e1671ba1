//! The spillover bucket: pairs that collided with a different stored key are not
//! aggregated here. They stay in the packet that brought them (as many as fit in one
//! packet, the paper's bucket size) and go on to the parent at once, numbered by the
//! switch, so they are "the first to be sent to the next node" and may still be
//! aggregated there. VARLEN packets (keys the 16-byte cells cannot hold) go on the same
//! way, whole.

use pisa::Pass;
use wire::daiet::{flags, PAIR_LEN};

use super::layout::*;
use super::{ack_session, Daiet, TreeConfig};

impl Daiet {
    /// The last pass of an admitted data packet (or non-final END).
    pub(super) fn finish_data(&self, pass: &mut Pass<'_>, t: &TreeConfig, br: &mut Bridged) {
        if br.spill == 0 {
            // Everything aggregated: the packet itself becomes the child's ACK.
            self.ack_in_place(pass, br.child, br.child_seq, br.port);
            return;
        }
        if pass.hdr()[FLAGS] & flags::VARLEN == 0 {
            // Keep only the colliding pairs (the deparser emits the valid pair headers).
            let np = pass.hdr()[NUM_PAIRS] as usize;
            let h = pass.hdr_mut();
            let mut w = 0;
            for k in 0..np {
                if br.spill & (1 << k) != 0 {
                    if w != k {
                        h.copy_within(pair_at(k)..pair_at(k) + PAIR_LEN, pair_at(w));
                    }
                    w += 1;
                }
            }
            h[NUM_PAIRS] = w as u8;
            if !pass.resize_hdr(pair_at(w)) {
                return;
            }
        }
        self.send_on(pass, t, 0);
        pass.clone_ingress(ack_session(br.port));
    }

    /// Number the packet in the switch's stream towards the parent and send it there.
    pub(super) fn send_on(&self, pass: &mut Pass<'_>, t: &TreeConfig, end: u8) {
        let seq = if end != 0 {
            pass.execute(&self.out_last, t.tree_idx as u32, ())
        } else {
            pass.execute(&self.out_next, t.tree_idx as u32, ())
        };
        let len = pass.packet_len();
        let h = pass.hdr_mut();
        h[FLAGS] = (h[FLAGS] & flags::VARLEN) | flags::FROM_SWITCH | end;
        h[SENDER..SENDER + 2].copy_from_slice(&t.switch_id.to_be_bytes());
        h[SEQ..SEQ + 4].copy_from_slice(&seq.to_be_bytes());
        fix_lengths(h, len);
        pass.forward(t.parent_port);
    }
}
