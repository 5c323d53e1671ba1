//! Paxos acceptors in the tenant's leased registers (P4xos's acceptor, as the INaaS paper
//! cites it for its Paxos tenant). Segments `0..ACCEPTORS` each hold one acceptor: for a
//! register index (the instance's slot) the tenant holds a lease on in segment `j`, the
//! acceptor's state is cell `idx` of two egress arrays beside the segment:
//!
//! - `paxos_instance_j`: the newest instance tag the slot served: a request for an older
//!   instance of the ring is refused untouched (that instance was delivered by every
//!   learner before the slot moved on, and a stale proposer must not overwrite the votes
//!   of the newer one);
//! - `paxos_round_j`: the promised round `rnd` (lo) and the voted round `vrnd` (hi);
//! - `paxos_vote_j`: the instance tag (lo, instance + 1: slots are reused as a ring) and
//!   the voted value (hi).
//!
//! P4xos keeps rnd, vrnd and value in three arrays; here rnd and vrnd share one 64-bit cell
//! (a Tofino 1 stateful ALU updates both halves of a pair, returns 32 bits), and the value
//! shares one with the instance tag, so one pass reads and writes everything an acceptor
//! has: the first stage after the segments' arrays (17 with 20 segments) refuses a stale
//! instance, the next decides (promise or accept, by comparing the ballot with rnd), the
//! third uses that outcome to write or read the vote. One access per array per pass.
//!
//! Taking a lease on a cell clears both arrays' cells there (the previous holder's votes
//! are not the new holder's), on the packet's second pass; a Paxos packet never takes a
//! lease itself (it probes, see [`DeadlineProbe`](super::lease::DeadlineProbe)), so the acceptors'
//! state only exists under a lease the tenant took with an ordinary write first.

use pisa::{Cmp, Cond, OutputSource, Pred, Salu, SaluOutput, SaluProgram, Src, Update};

/// Acceptors per tenant: segments 0, 1, 2 (a majority is two).
pub const ACCEPTORS: usize = 3;
// The instance arrays' egress stage is the first after the segments' arrays
// (`lease::Layout::end_stage`: 17 with 20 segments; a stage's ALUs serve ingress and egress
// alike); the round arrays are in the next one, the vote arrays in the one after, so the
// acceptors need tofino2's 20 stages.
/// Set in [`Advance`]'s output (its condition 0) for a request of an older instance than
/// the slot's.
pub const STALE: u32 = 1;

/// The slot's instance, operands (advance, tag): refuse an older one (c0: tag below the
/// cell; output bit [`STALE`]); with `advance` (c1, phase 2a) move the slot to a newer one.
#[derive(Clone, Copy)]
pub struct Advance;

impl SaluProgram<u32, (bool, u32), u32> for Advance {
    const SALU: Salu = Salu {
        conds: &[Cond::new(Src::PhvHi, Cmp::LtU, Src::Lo), Cond::new(Src::PhvLo, Cmp::Ne, Src::K(0))],
        lo: &[Update::set(Pred::C1.and(Pred::C0.not()), Src::PhvHi)],
        hi: &[],
        out: &[SaluOutput::new(Pred::C0, OutputSource::Predicate)],
    };
}

/// Empty an instance cell (a lease changed hands).
#[derive(Clone, Copy)]
pub struct ClearInstance;

impl SaluProgram<u32, (), ()> for ClearInstance {
    const SALU: Salu = Salu { conds: &[], lo: &[Update::set(Pred::ALWAYS, Src::K(0))], hi: &[], out: &[] };
}
/// Set in a round decision (see [`round_word`]) when the acceptor refused (the ballot is
/// below its promise); the low 31 bits are then the promise. Ballots are below 2^31.
pub const REFUSED: u32 = 1 << 31;
/// A vote read's value (see [`vote_value`]) when the cell holds no vote for the asked
/// instance.
pub const NO_VOTE: i32 = i32::MIN;

/// A round action's two output words: (vrnd or the ballot when the acceptor agreed,
/// the promise when it refused). A refusal's promise is above the ballot, so never 0.
pub type RoundOut = (u32, u32);

/// The round decision as one word: the first output, or `REFUSED | promise` (the next
/// stage's action picks one of the two words by the second).
#[inline(always)]
pub fn round_word((agreed, promise): RoundOut) -> u32 {
    if promise != 0 {
        REFUSED | promise
    } else {
        agreed
    }
}

/// Phase 1a: promise `ballot` if it is at least the promise (c0); outputs (vrnd, 0) or
/// (0, rnd). Two output words: Tofino 2's stateful ALU has four, Tofino 1's one.
#[derive(Clone, Copy)]
pub struct Prepare;

impl SaluProgram<pisa::DualCell, u32, RoundOut> for Prepare {
    const SALU: Salu = Salu {
        conds: &[Cond::new(Src::PhvLo, Cmp::GeU, Src::Lo)],
        lo: &[Update::set(Pred::C0, Src::PhvLo)],
        hi: &[],
        out: &[SaluOutput::new(Pred::C0, OutputSource::OldHi), SaluOutput::new(Pred::C0.not(), OutputSource::OldLo)],
    };
}

/// Phase 2a: accept at `ballot` if it is at least the promise (c0: rnd = vrnd = ballot);
/// outputs (ballot, 0) or (0, rnd).
#[derive(Clone, Copy)]
pub struct Accept;

impl SaluProgram<pisa::DualCell, u32, RoundOut> for Accept {
    const SALU: Salu = Salu {
        conds: &[Cond::new(Src::PhvLo, Cmp::GeU, Src::Lo)],
        lo: &[Update::set(Pred::C0, Src::PhvLo)],
        hi: &[Update::set(Pred::C0, Src::PhvLo)],
        out: &[SaluOutput::new(Pred::C0, OutputSource::PhvLo), SaluOutput::new(Pred::C0.not(), OutputSource::OldLo)],
    };
}

/// Empty a cell (a lease changed hands).
#[derive(Clone, Copy)]
pub struct Clear;

impl SaluProgram<pisa::DualCell, (), ()> for Clear {
    const SALU: Salu =
        Salu { conds: &[], lo: &[Update::set(Pred::ALWAYS, Src::K(0))], hi: &[Update::set(Pred::ALWAYS, Src::K(0))], out: &[] };
}

/// A vote read's two output words: (the value, nonzero when the cell holds a vote for
/// the asked instance).
pub type VoteOut = (i32, u32);

/// The vote as one value: the value, or [`NO_VOTE`].
#[inline(always)]
pub fn vote_value((value, voted): VoteOut) -> i32 {
    if voted != 0 {
        value
    } else {
        NO_VOTE
    }
}

/// Phase 1b's vote for instance `tag`: c0 the cell holds `tag`, c1 `tag` is not 0 (an
/// empty cell holds 0); both: (value, conditions), else (0, 0).
#[derive(Clone, Copy)]
pub struct VoteRead;

impl SaluProgram<pisa::DualCell, u32, VoteOut> for VoteRead {
    const SALU: Salu = Salu {
        conds: &[Cond::new(Src::Lo, Cmp::Eq, Src::PhvLo), Cond::new(Src::PhvLo, Cmp::Ne, Src::K(0))],
        lo: &[],
        hi: &[],
        out: &[
            SaluOutput::new(Pred::C0.and(Pred::C1), OutputSource::OldHi),
            SaluOutput::new(Pred::C0.and(Pred::C1), OutputSource::Predicate),
        ],
    };
}

/// Phase 2a's vote: store (tag, value). Run only when the round array accepted (the
/// stage-13 output gates the stage-14 action): a stateful ALU takes two PHV operands, so
/// the decision cannot ride along as a third.
#[derive(Clone, Copy)]
pub struct VoteWrite;

impl SaluProgram<pisa::DualCell, (u32, i32), ()> for VoteWrite {
    const SALU: Salu =
        Salu { conds: &[], lo: &[Update::set(Pred::ALWAYS, Src::PhvLo)], hi: &[Update::set(Pred::ALWAYS, Src::PhvHi)], out: &[] };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promise_accept_refuse() {
        use pisa::DualCell;
        let prep = |c, b| {
            let (c, o) = Prepare.run(c, b);
            (c, round_word(o))
        };
        let acc = |c, b| {
            let (c, o) = Accept.run(c, b);
            (c, round_word(o))
        };
        let c = DualCell::default();
        let (c, o) = prep(c, 5);
        assert_eq!((c, o), (DualCell::new(5, 0), 0));
        assert_eq!(acc(c, 4), (c, REFUSED | 5), "below the promise");
        let (c, o) = acc(c, 5);
        assert_eq!((c, o), (DualCell::new(5, 5), 5));
        assert_eq!(prep(c, 3).1, REFUSED | 5);
        let (c, o) = prep(c, 9);
        assert_eq!((c, o), (DualCell::new(9, 5), 5), "the promise moves, the vote stays");
        assert_eq!(Clear.run(c, ()).0, DualCell::default());
        let v = VoteWrite.run(DualCell::default(), (7, -3)).0;
        assert_eq!(vote_value(VoteRead.run(v, 7).1), -3);
        assert_eq!(vote_value(VoteRead.run(v, 8).1), NO_VOTE, "another instance of the ring");
        assert_eq!(vote_value(VoteRead.run(DualCell::new(0, 4), 0).1), NO_VOTE, "an empty cell");
        assert_eq!(Advance.run(5, (true, 4)).1 & STALE, STALE, "an older instance of the ring");
        assert_eq!(Advance.run(5, (true, 6)), (6, 0));
        assert_eq!(Advance.run(5, (false, 6)), (5, 0), "a prepare does not move the slot");
        assert_eq!(ClearInstance.run(9, ()).0, 0);
    }
}
