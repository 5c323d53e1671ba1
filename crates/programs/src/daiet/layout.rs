//! Where things are in a DAIET frame as the switch parses it, and the metadata a packet
//! carries across its passes.

use wire::daiet::{field, HEADER_LEN, MAX_PAIRS, PAIR_LEN};
use wire::L2_L4_LEN;

// The DAIET header's fields as offsets in the frame: wire's layout after the L2-L4 headers.
pub const TREE: usize = L2_L4_LEN + field::TREE;
pub const FLAGS: usize = L2_L4_LEN + field::FLAGS;
pub const OP: usize = L2_L4_LEN + field::OP;
pub const SENDER: usize = L2_L4_LEN + field::SENDER;
pub const SEQ: usize = L2_L4_LEN + field::SEQ;
pub const NUM_PAIRS: usize = L2_L4_LEN + field::NUM_PAIRS;
/// First pair.
pub const PAIRS: usize = L2_L4_LEN + HEADER_LEN;
/// Header bytes the parser reaches: up to the tenth pair (256, Tofino 1's parse depth).
pub const PARSE_DEPTH: usize = PAIRS + MAX_PAIRS * PAIR_LEN;

/// Offset of pair `k`.
#[inline]
pub fn pair_at(k: usize) -> usize {
    PAIRS + k * PAIR_LEN
}

/// Phases of a packet's passes (bridged metadata byte 0).
pub const PH_FRESH: u8 = 0;
/// Fresh phase, `Bridged::cursor`: the packet was not the expected one and asks
/// `seq_state.check` in this pass (see [`super::exactly_once`]).
pub const CHECK_PASS: u8 = 1;
/// Admitted; one pair per pass.
pub const PH_DATA: u8 = 1;
/// The END that completed the tree: walks the index stack and flushes the cells.
pub const PH_WALK: u8 = 2;
/// A packet that filled a buffer of the spillover bucket: reads-and-clears its slots, one
/// per pass, and leaves for the parent with them.
pub const PH_DRAIN: u8 = 3;

/// Data phase, `Bridged::pending`: bits 0-15 the pairs that stay in the packet and go on
/// to the parent (the bucket was busy; all of them for a VARLEN packet) ...
pub const KEPT_PAIRS: u32 = 0xFFFF;
/// ... the packet is counted among the bucket's storers.
pub const STORING: u32 = 1 << 16;
/// ... the packet filled a bucket buffer and drains it once its own pairs are stored ...
pub const DRAIN: u32 = 1 << 17;
/// ... which buffer (bits 18-21).
pub const DRAIN_BUF_SHIFT: u32 = 18;
/// ... and its store found the buffer after the new head free: it tells the ring so in its
/// next pass (`bucket::AFTER_MOVE`).
pub const RESOLVE: u32 = 1 << 22;
/// Drain phase, `Bridged::pending`: bit 0 the walker still has to tell the ring (see
/// [`RESOLVE`]; in its first pass); bits 4-31 the drained buffer's move number
/// (`bucket::moves_of`), read in its first pass.
pub const D_RESOLVE: u32 = 1;

/// Bridged metadata carried across recirculations (16 bytes), as a Tofino program would
/// carry a bridged header on its recirculated packets. Kept as its bytes (the fields read
/// and written in place, in the machine's byte order: the bytes are this program's own, no
/// other program, host or controller reads them), so that loading it at the start of a
/// pass and storing it at the end are one 16-byte copy each, not one move per field.
///
/// Fields: `phase` (byte 0); `cursor` (1): next pair to process (data) or pairs collected
/// so far (walk); `spill` (2-3): data: pairs that collided and wait for a slot in the
/// spillover bucket (one per pass), walk: the slice being drained, then the bucket (see
/// `flush`), drain: the bucket buffer (bits 8-11) and the next slot; `pending` (4-7):
/// data: [`KEPT_PAIRS`] pairs and the [`STORING`], [`DRAIN`], [`RESOLVE`] flags, walk: a popped
/// cell to read (+1; 0 none), drain: [`D_RESOLVE`] and the buffer's move number; `port` (8-9): the port the child's packet came in by (its ACK goes back
/// there); `child` (10-11) and `child_seq` (12-15): the child's sender id and sequence
/// number (for its ACK).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bridged([u8; 16]);

macro_rules! field {
    ($get:ident, $set:ident, $t:ty, $at:expr) => {
        #[inline(always)]
        pub fn $get(&self) -> $t {
            const N: usize = std::mem::size_of::<$t>();
            let mut b = [0u8; N];
            b.copy_from_slice(&self.0[$at..$at + N]);
            <$t>::from_ne_bytes(b)
        }
        #[inline(always)]
        pub fn $set(&mut self, v: $t) {
            const N: usize = std::mem::size_of::<$t>();
            self.0[$at..$at + N].copy_from_slice(&v.to_ne_bytes());
        }
    };
}

impl Bridged {
    #[inline(always)]
    pub fn load(b: &[u8; 16]) -> Bridged {
        Bridged(*b)
    }
    #[inline(always)]
    pub fn store(&self, b: &mut [u8; 16]) {
        *b = self.0;
    }
    /// A data packet just admitted: its port, sender and sequence number, the rest zero.
    #[inline(always)]
    pub fn admitted(port: u16, child: u16, child_seq: u32) -> Bridged {
        let mut b = Bridged::default();
        b.set_phase(PH_DATA);
        b.set_port(port);
        b.set_child(child);
        b.set_child_seq(child_seq);
        b
    }
    field!(phase, set_phase, u8, 0);
    field!(cursor, set_cursor, u8, 1);
    field!(spill, set_spill, u16, 2);
    field!(pending, set_pending, u32, 4);
    field!(port, set_port, u16, 8);
    field!(child, set_child, u16, 10);
    field!(child_seq, set_child_seq, u32, 12);
}

/// The reply rewrite every program shares (see [`crate::reply`]); a DAIET frame's IPv4
/// header has no options (checked on the first pass).
pub use crate::reply::fix_lengths;

/// Turn the frame's headers into a reply to where it came from: MACs, IPv4 addresses and
/// UDP ports swapped. A header region shorter than Ethernet + IPv4 + UDP is left alone.
#[inline]
pub fn swap_addresses(h: &mut [u8]) {
    crate::reply::swap_addresses(h, 34);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field keeps its value beside the others set to their extremes (no field
    /// overlaps another), and survives a store and a load.
    #[test]
    fn bridged_fields_are_separate_and_round_trip() {
        let mut b = Bridged::default();
        b.set_phase(0xFF);
        b.set_cursor(0xFE);
        b.set_spill(0xFFFD);
        b.set_pending(0xFFFF_FFFC);
        b.set_port(0xFFFB);
        b.set_child(0xFFFA);
        b.set_child_seq(0xFFFF_FFF9);
        let mut bytes = [0u8; 16];
        b.store(&mut bytes);
        let c = Bridged::load(&bytes);
        assert_eq!(c, b);
        assert_eq!(
            (c.phase(), c.cursor(), c.spill(), c.pending(), c.port(), c.child(), c.child_seq()),
            (0xFF, 0xFE, 0xFFFD, 0xFFFF_FFFC, 0xFFFB, 0xFFFA, 0xFFFF_FFF9)
        );
        let mut d = c;
        d.set_spill(1);
        d.set_child(0);
        assert_eq!(
            (d.phase(), d.cursor(), d.spill(), d.pending(), d.port(), d.child(), d.child_seq()),
            (0xFF, 0xFE, 1, 0xFFFF_FFFC, 0xFFFB, 0, 0xFFFF_FFF9)
        );
        let a = Bridged::admitted(7, 3, 0x0102_0304);
        assert_eq!(
            (a.phase(), a.cursor(), a.spill(), a.pending(), a.port(), a.child(), a.child_seq()),
            (PH_DATA, 0, 0, 0, 7, 3, 0x0102_0304)
        );
    }
}
