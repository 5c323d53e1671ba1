//! Register selection (NetSHa §3.5, Algorithm 2, Figure 6) as a switch can do it.
//!
//! Algorithm 2 scans every register for the query's ID, the first empty one and the one
//! with the largest weight. A pipeline cannot scan: §4 maps a query by hash(QID); here it
//! maps to a *set* of `ways` (1 or 2) candidate registers and Algorithm 2 runs over them
//! ([`WaySelectAlu`], [`WeightHeavier`]): the query's own register (hit), the first empty one
//! (claim), or, all occupied, the heaviest is replaced (if the best-effort counter allows,
//! §3.6; otherwise bypass, the answer goes on unreduced). [`SelectAlu`] is the one-way
//! compare-and-swap the ways' ALU applies per way.
//!
//! The `qid` array holds QID + 1 (0 = empty, so zeroed memory is free registers; QID
//! 0xFFFFFFFF is therefore not reducible and is bypassed). Its stateful ALU writes `new`
//! when the cell holds `expected`, or when it is empty and `new` is not: with `expected`
//! = empty that is lookup-or-claim; with `expected` = a victim it is the claim that
//! completes a replacement (a compare-and-swap, so two claimants cannot both win); with
//! `new` = empty it is the timer's release.

use pisa::{Cmp, Cond, DualCell, Op, OutputSource, Pred, Salu, SaluBody, SaluOutput, SaluProgram, Src, Update};

/// An empty register's tag.
pub const FREE: u32 = 0;

/// The tag of a query ID in the `qid` array (`None` for the one ID it cannot hold).
#[inline]
pub fn tag(qid: u32) -> Option<u32> {
    qid.checked_add(1)
}

/// `qid` array stateful ALU: `DualCell { lo: new, hi: expected }` in, old tag out.
#[derive(Clone, Copy)]
pub struct SelectAlu;

impl SaluBody<u32, DualCell, u32> for SelectAlu {
    #[inline(always)]
    fn run(self, cell: u32, x: DualCell) -> (u32, u32) {
        let (new, expected) = (x.lo, x.hi);
        if cell == expected || (cell == FREE && new != FREE) {
            (new, cell)
        } else {
            (cell, cell)
        }
    }
}

/// What the register lookup found for a query.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Selected {
    /// The query's own register.
    Hit,
    /// A free register (or the replaced one), now the query's.
    Claimed,
    /// Another query's register; its tag.
    Occupied(u32),
}

/// Interpret the old tag returned for a lookup of `my` with `expected`.
#[inline]
pub fn outcome(old: u32, my: u32, expected: u32) -> Selected {
    if old == my {
        Selected::Hit
    } else if old == FREE || old == expected {
        Selected::Claimed
    } else {
        Selected::Occupied(old)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_claim_replace_release() {
        let me = tag(7).unwrap();
        let other = tag(9).unwrap();
        let (c, old) = SelectAlu.run(FREE, DualCell::new(me, FREE));
        assert_eq!((c, outcome(old, me, FREE)), (me, Selected::Claimed));
        let (c, old) = SelectAlu.run(c, DualCell::new(me, FREE));
        assert_eq!((c, outcome(old, me, FREE)), (me, Selected::Hit));
        let (c, old) = SelectAlu.run(c, DualCell::new(other, FREE));
        assert_eq!((c, outcome(old, other, FREE)), (me, Selected::Occupied(me)));
        // Replacement: compare-and-swap on the victim.
        let (c, old) = SelectAlu.run(c, DualCell::new(other, me));
        assert_eq!((c, outcome(old, other, me)), (other, Selected::Claimed));
        // A second claimant for the same victim loses.
        let (c2, old) = SelectAlu.run(c, DualCell::new(tag(11).unwrap(), me));
        assert_eq!((c2, outcome(old, tag(11).unwrap(), me)), (other, Selected::Occupied(other)));
        // Release only if still the expected owner.
        assert_eq!(SelectAlu.run(c, DualCell::new(FREE, me)).0, other);
        assert_eq!(SelectAlu.run(c, DualCell::new(FREE, other)).0, FREE);
    }
}

// ---- Algorithm 2 over W candidate registers (set-associative) --------------------------
//
// The scan of Algorithm 2 needs every register; what a pipeline can do is hash(QID) to a
// *set* of W candidate registers (W = `ways`, 1 or 2) whose owner tags share one 64-bit
// cell of the `qid` array (lo = way 0, hi = way 1), so one stateful-ALU access sees all
// candidates: the query's own register (hit), else the first empty one (claim), else all
// are occupied and the replacement register is the candidate that carried the most data
// pairs (Algorithm 2's weight), chosen by the `weight` array in the next stage.

/// `qid` lookup: hit, else claim the first free way.
pub const WAY_LOOKUP: u32 = 0;
/// `qid` compare-and-swap on one way (`| way << 4`): as [`SelectAlu`] on that way's tag.
pub const WAY_CAS: u32 = 1;

/// `qid` probe: hit or not, never claims.
pub const WAY_PROBE: u32 = 2;

/// What a lookup found, in the ALU's output: kind | way << 4.
pub const KIND_HIT: u32 = 0;
pub const KIND_CLAIMED: u32 = 1;
pub const KIND_OCCUPIED: u32 = 2;

fn way_tag(c: DualCell, w: u32) -> u32 {
    if w == 0 {
        c.lo
    } else {
        c.hi
    }
}

fn with_way(c: DualCell, w: u32, v: u32) -> DualCell {
    if w == 0 {
        DualCell::new(v, c.hi)
    } else {
        DualCell::new(c.lo, v)
    }
}

/// `qid` array stateful ALU over a set of `ways` tags: input (DualCell { lo: new, hi:
/// expected }, op | way << 4 | ways << 8).
#[derive(Clone, Copy)]
pub struct WaySelectAlu;

impl SaluBody<DualCell, (DualCell, u32), u32> for WaySelectAlu {
    #[inline(always)]
    fn run(self, cell: DualCell, (x, ctl): (DualCell, u32)) -> (DualCell, u32) {
        let (new, expected) = (x.lo, x.hi);
        let ways = ((ctl >> 8) & 0xF).clamp(1, 2);
        if ctl & 0xF == WAY_CAS {
            let w = (ctl >> 4) & 1;
            let old = way_tag(cell, w);
            if old == expected || (old == FREE && new != FREE) {
                return (with_way(cell, w, new), old);
            }
            return (cell, old);
        }
        for w in 0..ways {
            if way_tag(cell, w) == new {
                return (cell, KIND_HIT | w << 4);
            }
        }
        if ctl & 0xF == WAY_PROBE {
            return (cell, KIND_OCCUPIED);
        }
        for w in 0..ways {
            if way_tag(cell, w) == FREE {
                return (with_way(cell, w, new), KIND_CLAIMED | w << 4);
            }
        }
        (cell, KIND_OCCUPIED)
    }
}

/// The `qid` array's register actions. [`WaySelectAlu`] above is Algorithm 2's choice
/// over the set as one function (the reference the tests hold these to); the switch runs
/// it as four declared instructions chosen by the packet's path:
///
/// - lookup ([`QidLookup2`]; [`QidLookup1`] with one way): hit in either way, else claim
///   the first free way. Two ways need four conditions (two tags equal to the query's,
///   two free): Tofino 2's stateful ALU has four condition units, Tofino 1's two, so a
///   program built for two-condition ALUs ([`NetshaConfig::salu_conditions`]) keeps each
///   way in an array of its own ([`QidCheck`], [`QidClaim`], [`QidCasWay`]);
/// - probe ([`QidProbe`]): hit or not, never claims;
/// - compare-and-swap on way 0 or way 1 ([`QidCas0`], [`QidCas1`]): operand `DualCell { lo:
///   new, hi: expected }`, the way's tag becomes `new` when it is `expected` or free (a
///   free way given `new` = free stays free), the old tag out.
///
/// Lookup and probe return the condition word ([`OutputSource::Predicate`]); [`decode_lookup`]
/// and [`decode_probe`] map it to what was found (a gateway's job on the hardware).
///
/// [`NetshaConfig::salu_conditions`]: super::NetshaConfig::salu_conditions
#[derive(Clone, Copy)]
pub struct QidLookup2;

/// c0: way 0 is the query's, c1: way 1 is, c2: way 0 is free, c3: way 1 is free.
const LOOKUP2: Salu = Salu {
    conds: &[
        Cond::new(Src::Lo, Cmp::Eq, Src::PhvLo),
        Cond::new(Src::Hi, Cmp::Eq, Src::PhvLo),
        Cond::new(Src::Lo, Cmp::Eq, Src::K(FREE as i32)),
        Cond::new(Src::Hi, Cmp::Eq, Src::K(FREE as i32)),
    ],
    lo: &[Update::set(Pred::C0.not().and(Pred::C1.not()).and(Pred::C2), Src::PhvLo)],
    hi: &[Update::set(Pred::C0.not().and(Pred::C1.not()).and(Pred::C2.not()).and(Pred::C3), Src::PhvLo)],
    out: &[SaluOutput::always(OutputSource::Predicate)],
};

impl SaluProgram<DualCell, u32, u32> for QidLookup2 {
    const SALU: Salu = LOOKUP2;
}

/// The two-way lookup on two-condition ALUs (Tofino 1): each way's tags in a 32-bit array
/// of their own, way 1 (`qid_1`) in the stage before way 0 (`qid_0`). Way 1 is checked
/// first ([`QidCheck`]: hit, free; never claims); way 0's action is chosen by that word:
/// [`QidCheck`] again when way 1 is the query's (so a query found in both ways still hits
/// way 0, as the scan would), else [`QidClaim`] (claim way 0 when free). [`split_flags`]
/// puts the two words together as [`QidLookup2`]'s condition word, so [`decode_lookup`]
/// reads both forms. When that word says "claim way 1" (way 0 taken, way 1 free), way 1's
/// stage is already behind the packet: the claim is a compare-and-swap ([`QidCasWay`],
/// free -> the query's tag) on the next pass, one counted recirculation.
#[derive(Clone, Copy)]
pub struct QidCheck;

/// c0: the way is the query's, c1: it is free.
impl SaluProgram<u32, u32, u32> for QidCheck {
    const SALU: Salu = Salu {
        conds: &[Cond::new(Src::Lo, Cmp::Eq, Src::PhvLo), Cond::new(Src::Lo, Cmp::Eq, Src::K(FREE as i32))],
        lo: &[],
        hi: &[],
        out: &[SaluOutput::always(OutputSource::Predicate)],
    };
}

/// Way 0's lookup when way 1 is not the query's: as [`QidCheck`], and a free way becomes
/// the query's.
#[derive(Clone, Copy)]
pub struct QidClaim;

/// One way's lookup on the low word: c0 the way is the query's, c1 it is free; a free way
/// becomes the query's. [`QidClaim`] runs it on a 32-bit way, [`QidLookup1`] on a cell.
const CLAIM_WAY: Salu = Salu {
    conds: &[Cond::new(Src::Lo, Cmp::Eq, Src::PhvLo), Cond::new(Src::Lo, Cmp::Eq, Src::K(FREE as i32))],
    lo: &[Update::set(Pred::C0.not().and(Pred::C1), Src::PhvLo)],
    hi: &[],
    out: &[SaluOutput::always(OutputSource::Predicate)],
};

impl SaluProgram<u32, u32, u32> for QidClaim {
    const SALU: Salu = CLAIM_WAY;
}

/// Compare-and-swap on one way's 32-bit tag array: as [`QidCas0`] on its own cell.
#[derive(Clone, Copy)]
pub struct QidCasWay;

impl SaluProgram<u32, DualCell, u32> for QidCasWay {
    const SALU: Salu = Salu {
        conds: &[Cond::new(Src::Lo, Cmp::Eq, Src::PhvHi), Cond::new(Src::Lo, Cmp::Eq, Src::K(FREE as i32))],
        lo: &[Update::set(Pred::C0.or(Pred::C1), Src::PhvLo)],
        hi: &[],
        out: &[SaluOutput::always(OutputSource::OldLo)],
    };
}

/// Way 0's and way 1's words ([`QidCheck`] / [`QidClaim`]: bit 0 the query's, bit 1
/// free) as [`QidLookup2`]'s condition word (c0, c1 the query's in way 0, 1; c2, c3
/// free).
#[inline]
pub fn split_flags(way0: u32, way1: u32) -> u32 {
    (way0 & 1) | (way1 & 1) << 1 | (way0 >> 1 & 1) << 2 | (way1 >> 1 & 1) << 3
}

/// One way: c0 the way is the query's, c1 it is free.
#[derive(Clone, Copy)]
pub struct QidLookup1;

impl SaluProgram<DualCell, u32, u32> for QidLookup1 {
    const SALU: Salu = CLAIM_WAY;
}

/// c0: way 0 is the query's, c1: way 1 is (with one way, way 1's tag stays free, never a
/// query's).
#[derive(Clone, Copy)]
pub struct QidProbe;

impl SaluProgram<DualCell, u32, u32> for QidProbe {
    const SALU: Salu = Salu {
        conds: &[Cond::new(Src::Lo, Cmp::Eq, Src::PhvLo), Cond::new(Src::Hi, Cmp::Eq, Src::PhvLo)],
        lo: &[],
        hi: &[],
        out: &[SaluOutput::always(OutputSource::Predicate)],
    };
}

/// Compare-and-swap on way 0's tag: c0 it is the expected one, c1 it is free.
#[derive(Clone, Copy)]
pub struct QidCas0;

impl SaluProgram<DualCell, DualCell, u32> for QidCas0 {
    const SALU: Salu = Salu {
        conds: &[Cond::new(Src::Lo, Cmp::Eq, Src::PhvHi), Cond::new(Src::Lo, Cmp::Eq, Src::K(FREE as i32))],
        lo: &[Update::set(Pred::C0.or(Pred::C1), Src::PhvLo)],
        hi: &[],
        out: &[SaluOutput::always(OutputSource::OldLo)],
    };
}

/// Compare-and-swap on way 1's tag.
#[derive(Clone, Copy)]
pub struct QidCas1;

impl SaluProgram<DualCell, DualCell, u32> for QidCas1 {
    const SALU: Salu = Salu {
        conds: &[Cond::new(Src::Hi, Cmp::Eq, Src::PhvHi), Cond::new(Src::Hi, Cmp::Eq, Src::K(FREE as i32))],
        lo: &[],
        hi: &[Update::set(Pred::C0.or(Pred::C1), Src::PhvLo)],
        out: &[SaluOutput::always(OutputSource::OldHi)],
    };
}

/// What a lookup's condition word says, as (kind, way) ([`KIND_HIT`], [`KIND_CLAIMED`],
/// [`KIND_OCCUPIED`]), for a set of `ways` ways.
#[inline]
pub fn decode_lookup(flags: u32, ways: u32) -> (u32, u32) {
    if ways == 1 {
        return if flags & 1 != 0 {
            (KIND_HIT, 0)
        } else if flags & 2 != 0 {
            (KIND_CLAIMED, 0)
        } else {
            (KIND_OCCUPIED, 0)
        };
    }
    if flags & 1 != 0 {
        (KIND_HIT, 0)
    } else if flags & 2 != 0 {
        (KIND_HIT, 1)
    } else if flags & 4 != 0 {
        (KIND_CLAIMED, 0)
    } else if flags & 8 != 0 {
        (KIND_CLAIMED, 1)
    } else {
        (KIND_OCCUPIED, 0)
    }
}

/// What a probe's condition word says: `Some(way)` on a hit.
#[inline]
pub fn decode_probe(flags: u32) -> Option<u32> {
    if flags & 1 != 0 {
        Some(0)
    } else if flags & 2 != 0 {
        Some(1)
    } else {
        None
    }
}

/// Algorithm 2's weights: data pairs each way's register has carried since its claim, one
/// 32-bit array per way (`weight_0` in the stage after `qid`, `weight_1` in the next), so
/// the choice of the heaviest compares one register half with a PHV operand (a condition
/// unit cannot compare the two halves of one cell): `weight_0` returns way 0's weight
/// ([`WeightRead`]), and `weight_1` returns whether way 1's is larger ([`WeightHeavier`];
/// way 0 on a tie, as the scan keeps the first maximum). A hit adds one to its way's
/// weight ([`WeightAdd`], saturating), a claim sets it to 1 and a release to 0
/// ([`WeightSet`]).
#[derive(Clone, Copy)]
pub struct WeightAdd;

impl SaluProgram<u32, (), ()> for WeightAdd {
    const SALU: Salu = Salu { conds: &[], lo: &[Update::always(Src::Lo, Op::SatAdd, Src::K(1))], hi: &[], out: &[] };
}

/// A way's weight becomes the operand (1 on a claim, 0 on a release).
#[derive(Clone, Copy)]
pub struct WeightSet;

impl SaluProgram<u32, u32, ()> for WeightSet {
    const SALU: Salu = Salu { conds: &[], lo: &[Update::set(Pred::ALWAYS, Src::PhvLo)], hi: &[], out: &[] };
}

/// Way 0's weight, for [`WeightHeavier`] in the next stage.
pub use pisa::salu::common::Read as WeightRead;

/// Whether way 1's weight exceeds way 0's (the operand): the way to replace.
#[derive(Clone, Copy)]
pub struct WeightHeavier;

impl SaluProgram<u32, u32, u32> for WeightHeavier {
    const SALU: Salu = Salu {
        conds: &[Cond::new(Src::Lo, Cmp::GtU, Src::PhvLo)],
        lo: &[],
        hi: &[],
        out: &[SaluOutput::new(Pred::C0, OutputSource::Predicate)],
    };
}

#[cfg(test)]
mod way_tests {
    use super::*;

    #[test]
    fn two_ways_hit_claim_first_free_then_occupied() {
        let (a, b, c) = (tag(1).unwrap(), tag(2).unwrap(), tag(3).unwrap());
        let look = |cell: DualCell, t: u32| WaySelectAlu.run(cell, (DualCell::new(t, FREE), WAY_LOOKUP | 2 << 8));
        let (cell, o) = look(DualCell::new(FREE, FREE), a);
        assert_eq!(o, KIND_CLAIMED);
        let (cell, o) = look(cell, b);
        assert_eq!(o, KIND_CLAIMED | 1 << 4);
        assert_eq!(look(cell, b).1, KIND_HIT | 1 << 4);
        assert_eq!(look(cell, a).1, KIND_HIT);
        assert_eq!(look(cell, c), (cell, KIND_OCCUPIED));
        // One way only: the second query finds it occupied.
        let one = WaySelectAlu.run(DualCell::new(a, FREE), (DualCell::new(b, FREE), WAY_LOOKUP | 1 << 8));
        assert_eq!(one.1, KIND_OCCUPIED);
        // Replacement of way 1 by compare-and-swap; a second claimant loses.
        let (cell2, old) = WaySelectAlu.run(cell, (DualCell::new(c, b), WAY_CAS | 1 << 4));
        assert_eq!((cell2, old), (DualCell::new(a, c), b));
        let (_, old) = WaySelectAlu.run(cell2, (DualCell::new(tag(4).unwrap(), b), WAY_CAS | 1 << 4));
        assert_eq!(old, c);
        // Release of way 0 only if still its owner.
        assert_eq!(WaySelectAlu.run(cell2, (DualCell::new(FREE, a), WAY_CAS)).0, DualCell::new(FREE, c));
    }

    #[test]
    fn weight_chooses_the_heaviest() {
        // Way 0's weight in one array, way 1's in the next; the same sequence as the
        // Algorithm 2 scan sees.
        let (mut w0, mut w1) = (0u32, 0u32);
        w0 = WeightSet.run(w0, 1).0;
        w1 = WeightSet.run(w1, 1).0;
        for _ in 0..2 {
            w1 = WeightAdd.run(w1, ()).0;
        }
        w0 = WeightAdd.run(w0, ()).0;
        assert_eq!((w0, w1), (2, 3));
        let choose = |w0: u32, w1: u32| WeightHeavier.run(w1, WeightRead.run(w0, ()).1).1;
        assert_eq!(choose(w0, w1), 1);
        assert_eq!(choose(3, 3), 0, "tie: the first");
        assert_eq!(choose(4, 3), 0);
        assert_eq!(choose(u32::MAX, 0), 0);
        assert_eq!(choose(0, u32::MAX), 1);
        assert_eq!(WeightAdd.run(u32::MAX, ()).0, u32::MAX, "saturates");
        assert_eq!(WeightSet.run(w1, 0).0, 0);
    }
}

#[cfg(test)]
mod qid_tests {
    use super::*;

    /// The two-array lookup as the program runs it on Tofino 1: way 1 checked (stage 0),
    /// way 0 checked or claimed by that word (stage 1), and a claim of way 1 as a
    /// compare-and-swap on the next pass (nothing else touched the cell in between).
    /// Returns the cell afterwards and what was found (kind | way << 4).
    fn split_lookup(cell: DualCell, my: u32) -> (DualCell, u32) {
        let (hi, f1) = QidCheck.run(cell.hi, my);
        assert_eq!(hi, cell.hi, "the check never writes");
        let (lo, f0) = if f1 & 1 != 0 { QidCheck.run(cell.lo, my) } else { QidClaim.run(cell.lo, my) };
        assert_eq!(split_flags(f0, f1), QidLookup2.run(cell, my).1, "the same four facts");
        let (kind, way) = decode_lookup(split_flags(f0, f1), 2);
        if (kind, way) == (KIND_CLAIMED, 1) {
            let (hi, old) = QidCasWay.run(hi, DualCell::new(my, FREE));
            assert_eq!(outcome(old, my, FREE), Selected::Claimed);
            return (DualCell::new(lo, hi), kind | way << 4);
        }
        (DualCell::new(lo, hi), kind | way << 4)
    }

    /// The declared actions (the one-cell ones and Tofino 1's two arrays) are
    /// [`WaySelectAlu`], over every cell of tags from a small alphabet (free, the query's,
    /// two others).
    #[test]
    fn declared_qid_actions_are_algorithm_2() {
        let vals = [FREE, 1, 2, 3];
        let my = 1;
        for &lo in &vals {
            for &hi in &vals {
                for ways in 1..=2u32 {
                    // With one way, way 1 is never used: its tag stays free.
                    if ways == 1 && hi != FREE {
                        continue;
                    }
                    let cell = DualCell::new(lo, hi);
                    let (want_cell, want) = WaySelectAlu.run(cell, (DualCell::new(my, FREE), WAY_LOOKUP | ways << 8));
                    let (c, flags) = if ways == 2 { QidLookup2.run(cell, my) } else { QidLookup1.run(cell, my) };
                    let (kind, way) = decode_lookup(flags, ways);
                    assert_eq!((c, kind | way << 4), (want_cell, want), "lookup {cell:?} ways {ways}");
                    if ways == 2 {
                        assert_eq!(split_lookup(cell, my), (want_cell, want), "split lookup {cell:?}");
                        let probe1 = QidCheck.run(hi, my).1;
                        let probe0 = QidCheck.run(lo, my).1;
                        let (_, want) = WaySelectAlu.run(cell, (DualCell::new(my, FREE), WAY_PROBE | 2 << 8));
                        let got = decode_probe(split_flags(probe0, probe1)).map_or(KIND_OCCUPIED, |w| KIND_HIT | w << 4);
                        assert_eq!(got, want, "split probe {cell:?}");
                    }
                    let (_, want) = WaySelectAlu.run(cell, (DualCell::new(my, FREE), WAY_PROBE | ways << 8));
                    let (c, flags) = QidProbe.run(cell, my);
                    assert_eq!(c, cell);
                    let got = decode_probe(flags).map_or(KIND_OCCUPIED, |w| KIND_HIT | w << 4);
                    assert_eq!(got, want, "probe {cell:?}");
                    for &new in &vals {
                        for &exp in &vals {
                            let x = DualCell::new(new, exp);
                            assert_eq!(QidCas0.run(cell, x), WaySelectAlu.run(cell, (x, WAY_CAS)), "cas0 {cell:?} {x:?}");
                            assert_eq!(QidCas1.run(cell, x), WaySelectAlu.run(cell, (x, WAY_CAS | 1 << 4)), "cas1 {cell:?} {x:?}");
                            // The split arrays' compare-and-swap, on either way's cell.
                            let (c0, o0) = QidCasWay.run(lo, x);
                            let (c1, o1) = QidCasWay.run(hi, x);
                            assert_eq!((DualCell::new(c0, hi), o0), WaySelectAlu.run(cell, (x, WAY_CAS)), "split cas0 {cell:?} {x:?}");
                            assert_eq!(
                                (DualCell::new(lo, c1), o1),
                                WaySelectAlu.run(cell, (x, WAY_CAS | 1 << 4)),
                                "split cas1 {cell:?} {x:?}"
                            );
                        }
                    }
                }
            }
        }
    }
}
