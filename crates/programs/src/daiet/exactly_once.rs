//! The exactly-once check: per (tree, sender) the next expected sequence number and how
//! many of the sender's admitted packets are still in the pipeline (recirculating through
//! their pairs).
//!
//! - `seq == expected`: admitted (expected + 1, in flight + 1), so a sender's packets
//!   follow each other through the pipeline without waiting. An END is admitted only when
//!   none of the sender's packets is in flight (until then it recirculates and asks
//!   again), so the flush never starts before the sender's last pair is in the table.
//! - `seq < expected`: already admitted, never added again. Acknowledged only when nothing
//!   of the sender is in flight (so an ACK never runs ahead of the aggregation); otherwise
//!   dropped, and the sender's retransmission is acknowledged later.
//! - `seq > expected`: a packet before it was lost: dropped and counted; Go-Back-N resends.
//!
//! The body takes three comparisons and the END bit, one more than a Tofino stateful ALU's
//! two conditions; a compiler would split it over the pair's two halves (a note in the
//! resource report says so).

use pisa::{Cmp, Cond, Op, Pair, Pred, Salu, SaluBody, SaluProgram, Src, Update};

/// `admit` outputs.
pub const ADMIT: u32 = 1;
/// Already aggregated: acknowledge, do not add again.
pub const DUPLICATE: u32 = 2;
/// A packet before it is missing: drop (the sender's Go-Back-N fills the gap).
pub const GAP: u32 = 3;
/// A copy of an admitted packet while the sender still has packets in flight: drop it.
pub const BUSY: u32 = 4;
/// The expected END while the sender still has packets in flight: not admitted yet; the
/// END recirculates and asks again (a child switch cannot resend it).
pub const WAIT: u32 = 5;

/// `admit` mode bits: the packet is an END.
pub const MODE_END: u8 = 1;
/// `admit` mode bits: the packet is done in this pass (not left in flight).
pub const MODE_ONE_PASS: u8 = 2;

/// `seq_state` cell: `lo` the next expected sequence number, `hi` packets in flight.
/// Operand: `(seq, mode bits)`.
#[derive(Clone, Copy)]
pub struct Admit;
impl SaluBody<Pair, (u32, u8), u32> for Admit {
    #[inline(always)]
    fn run(self, c: Pair, (seq, mode): (u32, u8)) -> (Pair, u32) {
        if seq == c.lo {
            if mode & MODE_END != 0 && c.hi != 0 {
                (c, WAIT)
            } else if mode & MODE_ONE_PASS != 0 {
                (Pair::new(c.lo.wrapping_add(1), c.hi), ADMIT)
            } else {
                (Pair::new(c.lo.wrapping_add(1), c.hi + 1), ADMIT)
            }
        } else if seq < c.lo {
            if c.hi != 0 {
                (c, BUSY)
            } else {
                (c, DUPLICATE)
            }
        } else {
            (c, GAP)
        }
    }
}

/// An admitted packet is done.
#[derive(Clone, Copy)]
pub struct Complete;
impl SaluProgram<Pair, (), ()> for Complete {
    const SALU: Salu = Salu {
        conds: &[Cond::new(Src::Hi, Cmp::Ne, Src::K(0))],
        lo: &[],
        hi: &[Update::new(Pred::C0, Src::Hi, Op::Sub, Src::K(1))],
        out: &[],
    };
}
