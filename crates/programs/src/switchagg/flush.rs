//! Flushing a tree to its parent when every child has sent EoT (SwitchAgg §3: "Flushing
//! aggregation results to the next hop"; Table 3's BPE-Flush).
//!
//! The switch cannot create packets, so the last EoT packet does the work: it
//! recirculates, and each pass drains bucket words of the tree's regions (FPE groups 0-7,
//! then BPE groups 0-7), one word per item, taking a word only if its pairs fit in what is
//! left of the frame. A pass that fills the frame sends the packet to the parent and a copy
//! of it around again (clone session [`super::FLUSH_SESSION`], whose replica is the
//! recirculation port) to read on from the word that did not fit; the pass that reads the
//! last word sends the packet with EoT and no copy.
//! A pass that used its items with room left in the frame (and is not the last) sends
//! nothing: the packet recirculates with its pairs, so the parent gets full packets and a
//! sparse table costs passes, not part-filled packets.
//!
//! The cursor travels in bridged metadata: `[0]` marker, `[1]` engine memory, `[2..6]`
//! word within the tree's region, `[6]` set when the pairs in the packet were already
//! sent (a copy's; clear when they travel on), `[8..10]`/`[10..14]` child and sequence number the ACK clone answers.

use pisa::Pass;
use pisa::TraceMode;
use wire::switchagg::{flags, HEADER_LEN, PAIR_OVERHEAD};

use super::hash_table::drain_within;
use super::payload_analyzer::{slot_len, GROUPS};
use super::{configuration, reliability, SwitchAgg, MAX_FRAME};

/// The smallest pair: a frame with less room than this is full.
const SMALLEST_PAIR: usize = PAIR_OVERHEAD + 1;

pub(crate) fn stash_ack(br: &mut [u8], child: u16, seq: u32) {
    br[8..10].copy_from_slice(&child.to_be_bytes());
    br[10..14].copy_from_slice(&seq.to_be_bytes());
}

/// Where the next flush pass reads on (engine memory `mem`, word `word`), and whether the
/// pairs the packet carries were already sent (a copy's) or travel on with it.
fn stash_cursor(br: &mut [u8], mem: usize, word: u32, sent: bool) {
    br[1] = mem as u8;
    br[2..6].copy_from_slice(&word.to_be_bytes());
    br[6] = sent as u8;
}

pub(crate) fn unstash_ack(br: &[u8]) -> (u16, u32) {
    (u16::from_be_bytes([br[8], br[9]]), u32::from_be_bytes([br[10], br[11], br[12], br[13]]))
}

pub(crate) fn flush_pass<M: TraceMode>(p: &SwitchAgg, pass: &mut Pass<'_, M>) {
    let Some((at, end)) = SwitchAgg::locate(pass.hdr()) else {
        pass.drop(pisa::DropCode::MALFORMED);
        return;
    };
    let tree_id = u16::from_be_bytes([pass.hdr()[at + 2], pass.hdr()[at + 3]]);
    let Some(tree) = p.tree(pass, tree_id) else {
        pass.drop(p.d_unknown_tree);
        return;
    };
    let br = *pass.bridged();
    let mut mem = br[1] as usize;
    let mut word = u32::from_be_bytes([br[2], br[3], br[4], br[5]]);
    let (mut n, mut wr) = if br[6] == 0 {
        let h = pass.hdr();
        (u16::from_be_bytes([h[at + 12], h[at + 13]]), end)
    } else {
        (0u16, at + HEADER_LEN)
    };
    // Room for a packet's worth of pairs; the lengths are set to what was read below.
    if !pass.resize_hdr(MAX_FRAME.max(wr)) {
        return;
    }
    let n_mem = p.fpe.len() + p.bpe.len();
    let mut items = 0u32;
    // Set when the next word's pairs (or the smallest pair) no longer fit the frame.
    let mut full = false;
    let mut buf = [0u8; 8 * (PAIR_OVERHEAD + 64)];
    while mem < n_mem {
        let m = if mem < p.fpe.len() { p.fpe[mem] } else { p.bpe[mem - p.fpe.len()] };
        let g = mem % GROUPS;
        let Some((base, per)) = configuration::region(m.words(), tree.region, tree.regions) else {
            (mem, word) = (mem + 1, 0);
            continue;
        };
        if word >= per {
            (mem, word) = (mem + 1, 0);
            continue;
        }
        if MAX_FRAME - wr < SMALLEST_PAIR {
            full = true;
            break;
        }
        if items >= super::ITEMS_PER_PASS {
            break;
        }
        if items > 0 && !pass.next_item() {
            return;
        }
        items += 1;
        let (sl, room) = (slot_len(g), MAX_FRAME - wr);
        let (taken, got, len) = pass.access(&m, base + word, |w| {
            let (mut k, mut len) = (0u16, 0usize);
            let taken = drain_within(w, sl, PAIR_OVERHEAD, room, |key, v| {
                len += wire::switchagg::emit_pair(&mut buf[len..], key, v);
                k += 1;
            });
            (taken, k, len)
        });
        if !taken {
            if wr == at + HEADER_LEN {
                // A bucket (at most 8 slots of 64 bytes) always fits an empty frame; were
                // it not so, the flush would go round forever.
                pass.drop(pisa::DropCode::MALFORMED);
                return;
            }
            // Left whole for the next packet: read again by the copy's pass.
            full = true;
            break;
        }
        pass.hdr_mut()[wr..wr + len].copy_from_slice(&buf[..len]);
        // The header region grows with what was read; the resize below fixes lengths.
        wr += len;
        n += got;
        word += 1;
    }
    let done = mem >= n_mem;
    if !done && !full {
        // This pass's words are read and the frame has room: go around again with the
        // pairs rather than send the parent a part-filled packet (a sparse table would
        // otherwise cost one packet per pass to the reducer).
        pass.hdr_mut()[at + 12..at + 14].copy_from_slice(&n.to_be_bytes());
        if !reliability::set_agg_len(pass, at, wr - at) {
            return;
        }
        stash_cursor(pass.bridged_mut(), mem, word, false);
        pass.recirculate();
        return;
    }
    let up = pass.execute(&p.up_seq, tree.region, ());
    pass.execute(&p.pairs_out, tree.region, n as u32);
    {
        let h = pass.hdr_mut();
        h[at + 1] = if done { flags::EOT } else { 0 };
        h[at + 6..at + 8].copy_from_slice(&tree.up_child.to_be_bytes());
        h[at + 8..at + 12].copy_from_slice(&up.get().to_be_bytes());
        h[at + 12..at + 14].copy_from_slice(&n.to_be_bytes());
    }
    if !reliability::set_agg_len(pass, at, wr - at) {
        return;
    }
    pass.forward(tree.parent_port);
    if !done {
        stash_cursor(pass.bridged_mut(), mem, word, true);
        pass.clone_ingress(super::FLUSH_SESSION);
    }
}
