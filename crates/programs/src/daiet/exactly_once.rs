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
//! Three comparisons and the END bit are more than a Tofino stateful ALU's two condition
//! units, so the check is three instructions on the same cell, chosen by the packet (an
//! array has at most four actions; the fourth is [`Complete`]):
//! - a data packet runs [`Admit`] (`seq == expected`, `seq < expected`): admitted, older
//!   or a gap;
//! - an END runs [`AdmitEnd`] (`seq == expected`, nothing in flight): admitted, waiting,
//!   or not the expected one;
//! - a data packet older than expected, or an END not the expected one, recirculates once
//!   and runs [`Check`] (`seq < expected`, something in flight): duplicate, busy or gap.
//!   A duplicate thus costs one recirculation more than before; the answer is the one the
//!   single instruction gave one pass later (the expected number only grows, and an
//!   ACK is still given only when nothing of the sender is in flight).

use pisa::{Cmp, Cond, DualCell, Op, OutputSource, Pred, Salu, SaluOutput, SaluProgram, Src, Update};

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
/// Not the expected packet: recirculate once and ask [`Check`].
pub const ASK_AGAIN: u32 = 6;

// seq_state cell: `lo` the next expected sequence number, `hi` packets in flight.
const SEQ_IS_NEXT: Cond = Cond::new(Src::PhvLo, Cmp::Eq, Src::Lo);
const SEQ_IS_OLDER: Cond = Cond::new(Src::PhvLo, Cmp::LtU, Src::Lo);

/// A data packet. Operands: `(seq, in flight)`, the second 1 when the packet stays in
/// flight after this pass (more pairs than one pass takes), else 0. Output: the conditions
/// (bit 0 `seq == expected`: admitted, bit 1 `seq < expected`), see [`admit_code`].
#[derive(Clone, Copy)]
pub struct Admit;
impl SaluProgram<DualCell, (u32, u8), u32> for Admit {
    const SALU: Salu = Salu {
        conds: &[SEQ_IS_NEXT, SEQ_IS_OLDER],
        lo: &[Update::new(Pred::C0, Src::Lo, Op::Add, Src::K(1))],
        hi: &[Update::new(Pred::C0, Src::Hi, Op::Add, Src::PhvHi)],
        out: &[SaluOutput::always(OutputSource::Predicate)],
    };
}

/// An END (admitted as in flight: it walks the tables or completes in its next pass).
/// Operand: `seq`. Output: the conditions (bit 0 `seq == expected`, bit 1 nothing in
/// flight), see [`admit_end_code`].
#[derive(Clone, Copy)]
pub struct AdmitEnd;
const IDLE: Cond = Cond::new(Src::Hi, Cmp::Eq, Src::K(0));
impl SaluProgram<DualCell, u32, u32> for AdmitEnd {
    const SALU: Salu = Salu {
        conds: &[SEQ_IS_NEXT, IDLE],
        lo: &[Update::new(Pred::C0.and(Pred::C1), Src::Lo, Op::Add, Src::K(1))],
        hi: &[Update::new(Pred::C0.and(Pred::C1), Src::Hi, Op::Add, Src::K(1))],
        out: &[SaluOutput::always(OutputSource::Predicate)],
    };
}

/// The second pass of a packet that was not the expected one: the cell unchanged. Operand:
/// `seq`. Output: the conditions (bit 0 `seq < expected`, bit 1 something in flight), see
/// [`check_code`].
#[derive(Clone, Copy)]
pub struct Check;
impl SaluProgram<DualCell, u32, u32> for Check {
    const SALU: Salu = Salu {
        conds: &[SEQ_IS_OLDER, Cond::new(Src::Hi, Cmp::Ne, Src::K(0))],
        lo: &[],
        hi: &[],
        out: &[SaluOutput::always(OutputSource::Predicate)],
    };
}

/// [`Admit`]'s output as the program's code (a gateway's table in the next stage).
#[inline(always)]
pub fn admit_code(p: u32) -> u32 {
    match p & 3 {
        1 => ADMIT,
        2 => ASK_AGAIN,
        _ => GAP,
    }
}

/// [`AdmitEnd`]'s output as the program's code.
#[inline(always)]
pub fn admit_end_code(p: u32) -> u32 {
    match p & 3 {
        3 => ADMIT,
        1 => WAIT,
        _ => ASK_AGAIN,
    }
}

/// [`Check`]'s output as the program's code.
#[inline(always)]
pub fn check_code(p: u32) -> u32 {
    match p & 3 {
        1 => DUPLICATE,
        3 => BUSY,
        _ => GAP,
    }
}

/// An admitted packet is done.
#[derive(Clone, Copy)]
pub struct Complete;
impl SaluProgram<DualCell, (), ()> for Complete {
    const SALU: Salu = Salu {
        conds: &[Cond::new(Src::Hi, Cmp::Ne, Src::K(0))],
        lo: &[],
        hi: &[Update::new(Pred::C0, Src::Hi, Op::Sub, Src::K(1))],
        out: &[],
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The single check as it was written before it was split (three comparisons and the
    /// END bit in one body): the reference.
    fn reference(c: DualCell, seq: u32, end: bool, one_pass: bool) -> (DualCell, u32) {
        if seq == c.lo {
            if end && c.hi != 0 {
                (c, WAIT)
            } else if one_pass {
                (DualCell::new(c.lo.wrapping_add(1), c.hi), ADMIT)
            } else {
                (DualCell::new(c.lo.wrapping_add(1), c.hi + 1), ADMIT)
            }
        } else if seq < c.lo {
            (c, if c.hi != 0 { BUSY } else { DUPLICATE })
        } else {
            (c, GAP)
        }
    }

    /// The instructions as the program runs them: the first pass, and the check pass for a
    /// packet that was not the expected one (the cell unchanged in between).
    fn split(c: DualCell, seq: u32, end: bool, one_pass: bool) -> (DualCell, u32) {
        let (c, code) = if end {
            let (c, p) = AdmitEnd.run(c, seq);
            (c, admit_end_code(p))
        } else {
            let (c, p) = Admit.run(c, (seq, u8::from(!one_pass)));
            (c, admit_code(p))
        };
        if code != ASK_AGAIN {
            return (c, code);
        }
        let (c2, p) = Check.run(c, seq);
        assert_eq!(c2, c, "check leaves the cell");
        (c2, check_code(p))
    }

    #[test]
    fn the_split_check_answers_as_the_single_one() {
        let vals = [0u32, 1, 2, 7, 0x7FFF_FFFF, 0x8000_0000, u32::MAX - 1, u32::MAX];
        for &lo in &vals {
            for &hi in &[0u32, 1, 2, 9] {
                for &seq in &vals {
                    for end in [false, true] {
                        // An END is never one pass (it stays in flight).
                        for one_pass in [false, true].into_iter().filter(|&o| !(end && o)) {
                            let c = DualCell::new(lo, hi);
                            assert_eq!(split(c, seq, end, one_pass), reference(c, seq, end, one_pass), "{lo} {hi} {seq} {end} {one_pass}");
                        }
                    }
                }
            }
        }
    }
}
