//! OO-Stat (precise per-object counters for offloaded objects, read and cleared by
//! packets: Hare §IV-C, Tech 2) and the state manager (one state per slot, so objects
//! being replaced are not served inconsistently: §IV-D).

use pisa::salu::common::{CountSat, Read, Take};
use pisa::{Cmp, Cond, Gress, Op, OutputSource, Pred, ProgramBuilder, Salu, SaluOutput, SaluProgram, Src, Update};

/// State-manager states of a slot.
pub mod state {
    /// No object.
    pub const EMPTY: u8 = 0;
    /// Offloaded and consistent: hits are answered by the switch.
    pub const VALID: u8 = 1;
    /// A write is in flight (write-through): hits go to the server until its reply.
    pub const INVALID: u8 = 2;
    /// Taking part in a replacement (Steps 4–6): queries go to the server.
    pub const REPLACING: u8 = 3;
}

/// Store the operand, return it.
#[derive(Clone, Copy)]
pub struct Set;
impl SaluProgram<u8, u8, u8> for Set {
    const SALU: Salu =
        Salu { conds: &[], lo: &[Update::set(Pred::ALWAYS, Src::PhvLo)], hi: &[], out: &[SaluOutput::always(OutputSource::NewLo)] };
}
/// A PUT passes: a valid copy becomes invalid; other states stay. Returns the old state.
#[derive(Clone, Copy)]
pub struct Invalidate;
impl SaluProgram<u8, (), u8> for Invalidate {
    const SALU: Salu = Salu {
        conds: &[Cond::new(Src::Lo, Cmp::Eq, Src::K(state::VALID as i32))],
        lo: &[Update::set(Pred::C0, Src::K(state::INVALID as i32))],
        hi: &[],
        out: &[SaluOutput::always(OutputSource::OldLo)],
    };
}
/// The server's PUT reply passes: the refreshed copy is valid again (unless replacing).
#[derive(Clone, Copy)]
pub struct Revalidate;
impl SaluProgram<u8, (), u8> for Revalidate {
    const SALU: Salu = Salu {
        conds: &[Cond::new(Src::Lo, Cmp::Eq, Src::K(state::INVALID as i32))],
        lo: &[Update::set(Pred::C0, Src::K(state::VALID as i32))],
        hi: &[],
        out: &[SaluOutput::always(OutputSource::OldLo)],
    };
}
/// The second half of the aging of a count (`fetch` returned `c` in the pass before):
/// take away `c - c / 2` (the operand, computed from `c` on the packet's metadata), so the
/// counter holds `c / 2` plus the hits counted since. A stateful ALU has no shift; the
/// subtraction keeps the hits between the two passes, which a write of `c / 2` would lose.
#[derive(Clone, Copy)]
pub struct Age;
impl SaluProgram<u32, u32, ()> for Age {
    const SALU: Salu = Salu { conds: &[], lo: &[Update::always(Src::Lo, Op::SatSub, Src::PhvLo)], hi: &[], out: &[] };
}

/// The amount [`Age`] takes from a count `c` fetched in the pass before.
#[inline]
pub fn age_by(c: u32) -> u32 {
    c - c / 2
}

/// The state manager's register and its actions.
pub struct StateManager {
    /// Built-ins for an application's query-hit processing (K3): read the slot's state,
    /// invalidate it (a write passed), revalidate it (the write's new data is in).
    pub check: pisa::SaluAction<u8, (), u8, Read>,
    pub(crate) set: pisa::SaluAction<u8, u8, u8, Set>,
    pub invalidate: pisa::SaluAction<u8, (), u8, Invalidate>,
    pub revalidate: pisa::SaluAction<u8, (), u8, Revalidate>,
}

impl StateManager {
    pub fn declare(b: &mut ProgramBuilder, stage: u8, slots: u32) -> StateManager {
        StateManager::declare_named(b, "obj_state", stage, slots)
    }

    /// The same under another register name.
    pub fn declare_named(b: &mut ProgramBuilder, name: &str, stage: u8, slots: u32) -> StateManager {
        let r = b.register::<u8>(name, Gress::Ingress, stage, slots, "state: empty / valid / invalid (write in flight) / replacing");
        StateManager {
            check: b.register_action_salu(r, "check", Read),
            set: b.register_action_salu(r, "set", Set),
            invalidate: b.register_action_salu(r, "invalidate", Invalidate),
            revalidate: b.register_action_salu(r, "revalidate", Revalidate),
        }
    }
}

/// OO-Stat: one 32-bit counter per slot.
pub struct OoStat {
    /// Built-in for an application's query-hit processing (K3): count a hit.
    pub count: pisa::SaluAction<u32, (), u32, CountSat>,
    pub(crate) fetch: pisa::SaluAction<u32, (), u32, Read>,
    pub(crate) fetch_clear: pisa::SaluAction<u32, (), u32, Take>,
    /// Aging (fetch, then [`Age`] in a recirculated pass).
    pub(crate) age: pisa::SaluAction<u32, u32, (), Age>,
}

impl OoStat {
    pub fn declare(b: &mut ProgramBuilder, stage: u8, slots: u32) -> OoStat {
        let r = b.register::<u32>("oo_stat", Gress::Ingress, stage, slots, "OO-Stat: queries per offloaded object since the last clear");
        OoStat {
            count: b.register_action_salu(r, "count", CountSat),
            fetch: b.register_action_salu(r, "fetch", Read),
            fetch_clear: b.register_action_salu(r, "fetch_clear", Take),
            age: b.register_action_salu(r, "age", Age),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fetch then age halves a count (rounding down, as `c >> 1`), and hits counted between
    /// the two passes are kept whole.
    #[test]
    fn age_after_fetch_halves_and_keeps_later_hits() {
        for c in [0u32, 1, 2, 3, 7, 1000, u32::MAX - 1, u32::MAX] {
            for hits in [0u32, 1, 5] {
                // The counter saturates (`CountSat`): hits beyond u32::MAX are not counted.
                let now = c.saturating_add(hits);
                let (after, ()) = Age.run(now, age_by(c));
                assert_eq!(after as u64, (c >> 1) as u64 + (now - c) as u64, "c {c} hits {hits}");
            }
        }
    }
}
