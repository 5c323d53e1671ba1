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
//! has: stage 12 refuses a stale instance, stage 13 decides (promise or accept, by comparing the ballot with rnd), stage 14 uses
//! that outcome to write or read the vote. One access per array per pass.
//!
//! Taking a lease on a cell clears both arrays' cells there (the previous holder's votes
//! are not the new holder's), on the packet's second pass; a Paxos packet never takes a
//! lease itself (it probes, see [`lease::PROBE`](super::lease::PROBE)), so the acceptors'
//! state only exists under a lease the tenant took with an ordinary write first.

use pisa::{Pair, SaluBody};

/// Acceptors per tenant: segments 0, 1, 2 (a majority is two).
pub const ACCEPTORS: usize = 3;
/// Egress stage of the instance arrays; the round arrays are in the next one, the vote
/// arrays in the one after. Stages 12-14: past the 12 that `inaas` fills (a stage's ALUs
/// serve ingress and egress alike), so the acceptors need tofino2.
pub const INSTANCE_STAGE: u8 = 12;
/// Output of [`Advance`] for a request of an older instance than the slot's.
pub const STALE: u32 = 1;

/// The slot's instance: refuse an older one (output [`STALE`]); with `advance` (phase 2a)
/// move the slot to a newer one.
#[derive(Clone, Copy)]
pub struct Advance;

impl SaluBody<u32, (bool, u32), u32> for Advance {
    #[inline(always)]
    fn run(self, cell: u32, (advance, tag): (bool, u32)) -> (u32, u32) {
        if tag < cell {
            (cell, STALE)
        } else if advance {
            (tag, 0)
        } else {
            (cell, 0)
        }
    }
}

/// Empty an instance cell (a lease changed hands).
#[derive(Clone, Copy)]
pub struct ClearInstance;

impl SaluBody<u32, (), u32> for ClearInstance {
    #[inline(always)]
    fn run(self, _: u32, _: ()) -> (u32, u32) {
        (0, 0)
    }
}
/// Set in a round action's output when the acceptor refused (the ballot is below its
/// promise); the low 31 bits are then the promise. Ballots are below 2^31.
pub const REFUSED: u32 = 1 << 31;
/// A vote read's output when the cell holds no vote for the asked instance.
pub const NO_VOTE: i32 = i32::MIN;

/// Phase 1a: promise `ballot` if it is at least the promise; output vrnd, or
/// `REFUSED | rnd`.
#[derive(Clone, Copy)]
pub struct Prepare;

impl SaluBody<Pair, u32, u32> for Prepare {
    #[inline(always)]
    fn run(self, cell: Pair, ballot: u32) -> (Pair, u32) {
        if ballot >= cell.lo {
            (Pair::new(ballot, cell.hi), cell.hi)
        } else {
            (cell, REFUSED | cell.lo)
        }
    }
}

/// Phase 2a: accept at `ballot` if it is at least the promise (rnd = vrnd = ballot);
/// output the ballot, or `REFUSED | rnd`.
#[derive(Clone, Copy)]
pub struct Accept;

impl SaluBody<Pair, u32, u32> for Accept {
    #[inline(always)]
    fn run(self, cell: Pair, ballot: u32) -> (Pair, u32) {
        if ballot >= cell.lo {
            (Pair::new(ballot, ballot), ballot)
        } else {
            (cell, REFUSED | cell.lo)
        }
    }
}

/// Empty a cell (a lease changed hands).
#[derive(Clone, Copy)]
pub struct Clear;

impl SaluBody<Pair, (), u32> for Clear {
    #[inline(always)]
    fn run(self, _: Pair, _: ()) -> (Pair, u32) {
        (Pair::new(0, 0), 0)
    }
}

/// Phase 1b's vote: the value voted for instance `tag`, or [`NO_VOTE`] (the cell holds an
/// older instance of the ring, or nothing).
#[derive(Clone, Copy)]
pub struct VoteRead;

impl SaluBody<Pair, u32, i32> for VoteRead {
    #[inline(always)]
    fn run(self, cell: Pair, tag: u32) -> (Pair, i32) {
        if cell.lo == tag && tag != 0 {
            (cell, cell.hi as i32)
        } else {
            (cell, NO_VOTE)
        }
    }
}

/// Phase 2a's vote: if the round array accepted, store (tag, value).
#[derive(Clone, Copy)]
pub struct VoteWrite;

impl SaluBody<Pair, (bool, (u32, i32)), u32> for VoteWrite {
    #[inline(always)]
    fn run(self, cell: Pair, (accepted, (tag, value)): (bool, (u32, i32))) -> (Pair, u32) {
        if accepted {
            (Pair::new(tag, value as u32), 0)
        } else {
            (cell, 0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promise_accept_refuse() {
        let c = Pair::default();
        let (c, o) = Prepare.run(c, 5);
        assert_eq!((c, o), (Pair::new(5, 0), 0));
        assert_eq!(Accept.run(c, 4), (c, REFUSED | 5), "below the promise");
        let (c, o) = Accept.run(c, 5);
        assert_eq!((c, o), (Pair::new(5, 5), 5));
        assert_eq!(Prepare.run(c, 3).1, REFUSED | 5);
        let (c, o) = Prepare.run(c, 9);
        assert_eq!((c, o), (Pair::new(9, 5), 5), "the promise moves, the vote stays");
        assert_eq!(Clear.run(c, ()).0, Pair::default());
        let v = VoteWrite.run(Pair::default(), (true, (7, -3))).0;
        assert_eq!(VoteRead.run(v, 7).1, -3);
        assert_eq!(VoteRead.run(v, 8).1, NO_VOTE, "another instance of the ring");
        assert_eq!(VoteWrite.run(v, (false, (8, 1))).0, v);
        assert_eq!(Advance.run(5, (true, 4)), (5, STALE), "an older instance of the ring");
        assert_eq!(Advance.run(5, (true, 6)), (6, 0));
        assert_eq!(Advance.run(5, (false, 6)), (5, 0), "a prepare does not move the slot");
    }
}
