//! The spillover bucket at work (DAIET §4, Algorithm 1 lines 13-15: "store(spilloverBucket,
//! pair); if spilloverBucket is full then flushData(spilloverBucket)"); its registers and
//! counter are in [`super::bucket`].
//!
//! A pair's way through the bucket (store, busy, drain, acknowledgement): docs/wordcount.md,
//! "DAIET's spillover bucket", "A pair's way through the bucket".

use pisa::{Pass, TraceMode};
use wire::daiet::{flags, MAX_PAIRS, PAIR_LEN};

use super::bucket::*;
use super::layout::*;
use super::{ack_session, Daiet, Tree, WALK_SESSION};

impl Daiet {
    /// The end of a data pass (stages 9-11): one waiting colliding pair into the bucket,
    /// then the packet recirculates or, all of its pairs done, finishes.
    #[inline(always)]
    pub(super) fn data_tail<M: TraceMode>(&self, pass: &mut Pass<'_, M>, t: &Tree<'_>, br: &mut Bridged, np: usize) {
        // The common case, written out: no pair waiting for the bucket, none kept in the
        // packet, no drain to do. Then stages 9-11 have nothing to do and the packet
        // recirculates for its next pairs or, all done, becomes its ACK: what the general
        // path below decides for the same metadata, without its bookkeeping.
        if br.spill() == 0 && br.pending() & (KEPT_PAIRS | DRAIN) == 0 {
            if br.cursor() as usize >= np {
                self.ack_in_place(pass, br.child(), br.child_seq(), br.port());
            } else {
                pass.recirculate();
            }
            return;
        }
        self.data_tail_bucket(pass, t, br, np);
    }

    /// [`Self::data_tail`] with pairs waiting for the bucket, kept or a drain to start.
    #[inline(never)]
    fn data_tail_bucket<M: TraceMode>(&self, pass: &mut Pass<'_, M>, t: &Tree<'_>, br: &mut Bridged, np: usize) {
        // Stage 9: the bucket's ring.
        let tree = t.tree_idx() as u32;
        let mut store = None;
        let mut overflow = 0;
        // Stage 11's operands: the buffer whose drain this store starts, the storer change.
        let mut busy_op = None;
        if br.pending() & RESOLVE != 0 {
            // This packet's store moved the head in its pass before and found the buffer
            // after the new head free: it tells the ring so (the ring's one access this
            // pass: the pairs waiting store from the next).
            pass.execute(&self.spill_drained, tree, AFTER_MOVE);
            br.set_pending(br.pending() & !RESOLVE);
        } else if br.spill() != 0 {
            let p = br.spill().trailing_zeros() as usize;
            let rest = br.spill() & (br.spill() - 1);
            let first = br.pending() & STORING == 0;
            // A packet drains at most one buffer, so it takes no last slot once it drains one.
            let may = if br.pending() & DRAIN != 0 { NO_DRAIN } else { MAY_DRAIN };
            let s = stored(pass.execute(&self.spill_store, tree, may).get());
            busy_op = Some((s.filter(|s| s.drain).map(|s| s.buf), storers_change(first, rest != 0, s.is_some())));
            br.set_pending(br.pending() & !STORING);
            if let Some(s) = s {
                store = Some((p, bucket_index(t.tree_idx(), s.buf, s.slot)));
                br.set_spill(rest);
                if rest != 0 {
                    br.set_pending(br.pending() | STORING);
                }
                if s.drain {
                    br.set_pending(br.pending() | (DRAIN | (s.buf << DRAIN_BUF_SHIFT)));
                }
            } else if (br.cursor() as usize) >= np {
                // The bucket is busy (the head's last slot waits for the next buffer's
                // drain) and the packet has no pass left: the pairs waiting go on in the
                // packet. (With passes left they wait and try again: those passes cost
                // nothing extra.)
                overflow = br.spill().count_ones();
                br.set_pending(br.pending() | br.spill() as u32);
                br.set_spill(0);
            }
        }
        let done = br.cursor() as usize >= np && br.spill() == 0;
        let send_on = done && br.pending() & KEPT_PAIRS != 0 && br.pending() & DRAIN == 0;
        let seq = if send_on { pass.execute(&self.out_next, t.tree_idx() as u32, ()).get() } else { 0 };
        // Stages 10-11: the slot.
        if let Some((p, idx)) = store {
            let at = pair_at(p);
            let mut words = [0u32; 5];
            // The pair was parsed in an earlier stage (it collided), so it is there.
            if let Some(pair) = pass.hdr().get(at..at + PAIR_LEN) {
                for (w, word) in words.iter_mut().enumerate() {
                    *word = u32::from_be_bytes([pair[4 * w], pair[4 * w + 1], pair[4 * w + 2], pair[4 * w + 3]]);
                }
            }
            for (a, word) in self.spill_key_write.iter().zip(words) {
                pass.execute(a, idx, word);
            }
            pass.execute(&self.spill_value_write, idx, words[4]);
        }
        // Stage 11: the storer count and the busy bit of the buffer whose drain starts; such
        // a store learns whether the buffer after the new head is being drained: if not, its
        // next pass tells the ring (`bucket::AFTER_MOVE`).
        if let Some((start, change)) = busy_op {
            let mask = start.map_or(0, |b| 1 << b);
            let bits = pass.execute(&self.busy_store, tree, (mask, change)).get();
            if let Some(b) = start {
                if bits & (1 << ((b + 2) % BUFFERS)) == 0 {
                    br.set_pending(br.pending() | RESOLVE);
                }
            }
        }
        if overflow > 0 {
            pass.execute(&self.spill_overflow, tree, overflow);
        }
        if done {
            self.finish_data(pass, t, br, seq);
        } else {
            pass.recirculate();
        }
    }

    /// An admitted data packet (or non-final END) is done with its pairs.
    fn finish_data<M: TraceMode>(&self, pass: &mut Pass<'_, M>, t: &Tree<'_>, br: &mut Bridged, seq: u32) {
        let kept = (br.pending() & KEPT_PAIRS) as u16;
        let drain = br.pending() & DRAIN != 0;
        if kept == 0 && !drain {
            // Everything aggregated or in the bucket: the packet itself becomes the ACK.
            self.ack_in_place(pass, br.child(), br.child_seq(), br.port());
            return;
        }
        let mut w = pass.hdr()[NUM_PAIRS] as usize;
        if pass.hdr()[FLAGS] & flags::VARLEN == 0 {
            // Keep only the pairs that go on (the deparser emits the valid pair headers).
            let np = w;
            let h = pass.hdr_mut();
            w = 0;
            for k in 0..np {
                if kept & (1 << k) != 0 {
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
        // The child's ACK goes back as a truncated clone (egress rewrites it).
        pass.clone_ingress(ack_session(br.port()));
        if drain {
            // flushData: this packet drains the buffer it filled, after its kept pairs.
            let buf = (br.pending() >> DRAIN_BUF_SHIFT) & 0xF;
            br.set_phase(PH_DRAIN);
            br.set_cursor(w as u8);
            br.set_spill((buf << 8) as u16);
            br.set_pending(if br.pending() & RESOLVE != 0 { D_RESOLVE } else { 0 });
            pass.recirculate();
        } else {
            self.send_with(pass, t, seq, 0);
        }
    }

    /// One pass of the drain walker: read-and-clear one slot of the buffer being drained.
    pub(super) fn drain_pass<M: TraceMode>(&self, pass: &mut Pass<'_, M>, t: &Tree<'_>, br: &mut Bridged) {
        if !self.empty_after_copy_left(pass, br) {
            return;
        }
        let buf = (br.spill() >> 8) as u32 & 0xF;
        let slot = br.spill() as u32 & 0xF;
        let last = slot + 1 == MAX_PAIRS as u32;
        let tree = t.tree_idx() as u32;
        // Stage 9: the ring. The first pass reads the position, which gives the buffer's
        // move number (and tells the ring that the buffer after the head is free if this
        // packet's store, in its last data pass, found it so); the last (the drain ends)
        // tells it so if this buffer is the one after the head.
        let pend = br.pending();
        if slot == 0 {
            let ops = if pend & D_RESOLVE != 0 { AFTER_MOVE } else { PEEK };
            let pos = pass.execute(&self.spill_drained, tree, ops).get();
            br.set_pending(moves_of(pos, buf) << 4);
        } else if last {
            pass.execute(&self.spill_drained, tree, drained(pend >> 4));
        }
        let c = br.cursor() as usize + 1;
        let send = c == MAX_PAIRS || last;
        let seq = if send { pass.execute(&self.out_next, tree, ()).get() } else { 0 };
        // Stages 10-11: the slot; after the last, the buffer is no longer busy.
        let words = self.take_bucket_slot(pass, bucket_index(t.tree_idx(), buf, slot));
        if last {
            pass.execute(&self.busy_drained, tree, 1 << buf);
        }
        if !self.append_pair(pass, br, &words) {
            return;
        }
        br.set_spill(((buf << 8) | (slot + 1)) as u16);
        if !send {
            pass.recirculate();
            return;
        }
        self.send_with(pass, t, seq, 0);
        if !last {
            // The original leaves with ten pairs; a clone walks on.
            pass.clone_ingress(WALK_SESSION);
            br.set_cursor(MAX_PAIRS as u8);
        }
    }

    /// A walker (END flush or bucket drain) whose copy has just left for the parent with
    /// ten pairs starts its next packet empty. False if the packet could not be resized
    /// (the pass then ends; the model counts the failed resize as a violation).
    pub(super) fn empty_after_copy_left<M: TraceMode>(&self, pass: &mut Pass<'_, M>, br: &mut Bridged) -> bool {
        if br.cursor() as usize >= MAX_PAIRS {
            pass.hdr_mut()[NUM_PAIRS] = 0;
            if !pass.resize_hdr(PAIRS) {
                return false;
            }
            br.set_cursor(0);
        }
        true
    }

    /// Read and clear bucket slot `idx` (stages 10-11): its four key words and its value.
    pub(super) fn take_bucket_slot<M: TraceMode>(&self, pass: &mut Pass<'_, M>, idx: u32) -> [u32; 5] {
        let mut words = [0u32; 5];
        for (w, word) in words.iter_mut().take(4).enumerate() {
            *word = pass.execute(&self.spill_key_take[w], idx, ()).get();
        }
        words[4] = pass.execute(&self.spill_value_take, idx, ()).get();
        words
    }

    /// Append a pair (four key words, value) after the packet's `br.cursor` pairs.
    pub(super) fn append_pair<M: TraceMode>(&self, pass: &mut Pass<'_, M>, br: &mut Bridged, words: &[u32; 5]) -> bool {
        let c = br.cursor() as usize;
        if !pass.resize_hdr(pair_at(c + 1)) {
            return false;
        }
        let h = pass.hdr_mut();
        let at = pair_at(c);
        for (w, word) in words.iter().enumerate() {
            h[at + 4 * w..at + 4 * w + 4].copy_from_slice(&word.to_be_bytes());
        }
        h[NUM_PAIRS] = (c + 1) as u8;
        br.set_cursor(br.cursor() + 1);
        true
    }

    /// Number the packet in the switch's stream towards the parent and send it there.
    pub(super) fn send_on<M: TraceMode>(&self, pass: &mut Pass<'_, M>, t: &Tree<'_>, end: u8) {
        let seq = if end != 0 {
            pass.execute(&self.out_last, t.tree_idx() as u32, ())
        } else {
            pass.execute(&self.out_next, t.tree_idx() as u32, ())
        };
        self.send_with(pass, t, seq.get(), end);
    }

    /// Send the packet to the parent with the switch's sequence number `seq` (taken from
    /// `out_seq` earlier in the pass, stage 9).
    pub(super) fn send_with<M: TraceMode>(&self, pass: &mut Pass<'_, M>, t: &Tree<'_>, seq: u32, end: u8) {
        let len = pass.packet_len();
        let h = pass.hdr_mut();
        h[FLAGS] = (h[FLAGS] & flags::VARLEN) | flags::FROM_SWITCH | end;
        h[SENDER..SENDER + 2].copy_from_slice(&t.switch_id().to_be_bytes());
        h[SEQ..SEQ + 4].copy_from_slice(&seq.to_be_bytes());
        fix_lengths(h, len);
        pass.forward(t.parent_port());
    }
}
