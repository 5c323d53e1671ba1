//! Where things are in a DAIET frame as the switch parses it, and the metadata a packet
//! carries across its passes.

use wire::daiet::{HEADER_LEN, MAX_PAIRS, PAIR_LEN};

/// Ethernet (14) + IPv4 without options (20) + UDP (8).
pub const D: usize = 42;
pub const TREE: usize = D;
pub const FLAGS: usize = D + 2;
pub const OP: usize = D + 3;
pub const SENDER: usize = D + 4;
pub const SEQ: usize = D + 8;
pub const NUM_PAIRS: usize = D + 12;
/// First pair.
pub const PAIRS: usize = D + HEADER_LEN;
/// Header bytes the parser reaches: up to the tenth pair (256, Tofino 1's parse depth).
pub const PARSE_DEPTH: usize = PAIRS + MAX_PAIRS * PAIR_LEN;

/// Offset of pair `k`.
#[inline]
pub fn pair_at(k: usize) -> usize {
    PAIRS + k * PAIR_LEN
}

/// Phases of a packet's passes (bridged metadata byte 0).
pub const PH_FRESH: u8 = 0;
/// Admitted; one pair per pass.
pub const PH_DATA: u8 = 1;
/// The END that completed the tree: walks the index stack and flushes the cells.
pub const PH_WALK: u8 = 2;
/// A packet that filled a buffer of the spillover bucket: reads-and-clears its slots, one
/// per pass, and leaves for the parent with them.
pub const PH_DRAIN: u8 = 3;

/// Data phase, `Bridged::pending`: bits 0-15 the pairs that stay in the packet and go on
/// to the parent (the bucket was busy, or a VARLEN packet)...
pub const KEPT: u32 = 0xFFFF;
/// ... all of them (VARLEN).
pub const KEPT_ALL: u32 = 0xFFFF;
/// ... the packet is counted among the bucket's storers.
pub const STORING: u32 = 1 << 16;
/// ... the packet filled a bucket buffer and drains it once its own pairs are stored ...
pub const DRAIN: u32 = 1 << 17;
/// ... which buffer (bits 18-21).
pub const DRAIN_BUF_SHIFT: u32 = 18;

/// Bridged metadata carried across recirculations (16 bytes), as a Tofino program would
/// carry a bridged header on its recirculated packets.
#[derive(Clone, Copy, Debug, Default)]
pub struct Bridged {
    pub phase: u8,
    /// Next pair to process (data) or pairs collected so far (walk).
    pub cursor: u8,
    /// Data: pairs that collided and wait for a slot in the spillover bucket (one per
    /// pass). Walk: the slice being drained, then the bucket (see `flush`). Drain: the
    /// bucket buffer (bits 8-11) and the next slot.
    pub spill: u16,
    /// Data: [`KEPT`] pairs and the [`STORING`], [`DRAIN`] flags. Walk: a popped cell to
    /// read (+1; 0 none).
    pub pending: u32,
    /// Port the child's packet came in by (its ACK goes back there).
    pub port: u16,
    /// The child's sender id and sequence number (for its ACK).
    pub child: u16,
    pub child_seq: u32,
}

impl Bridged {
    // The bytes are this program's own (no other program, host or controller reads them):
    // fields in the machine's byte order, so loading and storing them is plain moves, as
    // a compiler lays out a bridged header.
    #[inline(always)]
    pub fn load(b: &[u8; 16]) -> Bridged {
        Bridged {
            phase: b[0],
            cursor: b[1],
            spill: u16::from_ne_bytes([b[2], b[3]]),
            pending: u32::from_ne_bytes([b[4], b[5], b[6], b[7]]),
            port: u16::from_ne_bytes([b[8], b[9]]),
            child: u16::from_ne_bytes([b[10], b[11]]),
            child_seq: u32::from_ne_bytes([b[12], b[13], b[14], b[15]]),
        }
    }
    #[inline(always)]
    pub fn store(&self, b: &mut [u8; 16]) {
        b[0] = self.phase;
        b[1] = self.cursor;
        b[2..4].copy_from_slice(&self.spill.to_ne_bytes());
        b[4..8].copy_from_slice(&self.pending.to_ne_bytes());
        b[8..10].copy_from_slice(&self.port.to_ne_bytes());
        b[10..12].copy_from_slice(&self.child.to_ne_bytes());
        b[12..16].copy_from_slice(&self.child_seq.to_ne_bytes());
    }
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
