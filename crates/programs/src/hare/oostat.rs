//! OO-Stat (precise per-object counters for offloaded objects, read and cleared by
//! packets: Hare §IV-C, Tech 2) and the state manager (one state per slot, so objects
//! being replaced are not served inconsistently: §IV-D).

use pisa::salu::common::{CountSat, Read, Take};
use pisa::{Cmp, Cond, Gress, Out, OutSrc, Pred, ProgramBuilder, RegisterAction, Salu, SaluProgram, Src, Update};

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
    const SALU: Salu = Salu { conds: &[], lo: &[Update::set(Pred::ALWAYS, Src::PhvLo)], hi: &[], out: &[Out::always(OutSrc::NewLo)] };
}
/// A PUT passes: a valid copy becomes invalid; other states stay. Returns the old state.
#[derive(Clone, Copy)]
pub struct Invalidate;
impl SaluProgram<u8, (), u8> for Invalidate {
    const SALU: Salu = Salu {
        conds: &[Cond::new(Src::Lo, Cmp::Eq, Src::K(state::VALID as i32))],
        lo: &[Update::set(Pred::C0, Src::K(state::INVALID as i32))],
        hi: &[],
        out: &[Out::always(OutSrc::OldLo)],
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
        out: &[Out::always(OutSrc::OldLo)],
    };
}
/// Read and halve: the periodic aging of the statistics (the paper halves counts every 1 s).
fn fetch_halve(c: u32, _: ()) -> (u32, u32) {
    (c >> 1, c)
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
    pub(crate) fetch_halve: RegisterAction<u32, (), u32>,
}

impl OoStat {
    pub fn declare(b: &mut ProgramBuilder, stage: u8, slots: u32) -> OoStat {
        let r = b.register::<u32>("oo_stat", Gress::Ingress, stage, slots, "OO-Stat: queries per offloaded object since the last clear");
        OoStat {
            count: b.register_action_salu(r, "count", CountSat),
            fetch: b.register_action_salu(r, "fetch", Read),
            fetch_clear: b.register_action_salu(r, "fetch_clear", Take),
            fetch_halve: b.register_action(r, "fetch_halve", fetch_halve),
        }
    }
}
