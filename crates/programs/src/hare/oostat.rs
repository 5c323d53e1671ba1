//! OO-Stat (precise per-object counters for offloaded objects, read and cleared by
//! packets: Hare §IV-C, Tech 2) and the state manager (one state per slot, so objects
//! being replaced are not served inconsistently: §IV-D).

use pisa::{Gress, ProgramBuilder, RegisterAction};

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

fn read_u8(c: u8, _: ()) -> (u8, u8) {
    (c, c)
}
fn set_u8(_: u8, v: u8) -> (u8, u8) {
    (v, v)
}
/// A PUT passes: a valid copy becomes invalid; other states stay. Returns the old state.
fn invalidate(c: u8, _: ()) -> (u8, u8) {
    (if c == state::VALID { state::INVALID } else { c }, c)
}
/// The server's PUT reply passes: the refreshed copy is valid again (unless replacing).
fn revalidate(c: u8, _: ()) -> (u8, u8) {
    (if c == state::INVALID { state::VALID } else { c }, c)
}

fn count(c: u32, _: ()) -> (u32, u32) {
    let n = c.saturating_add(1);
    (n, n)
}
fn fetch(c: u32, _: ()) -> (u32, u32) {
    (c, c)
}
fn fetch_clear(c: u32, _: ()) -> (u32, u32) {
    (0, c)
}
/// Read and halve: the periodic aging of the statistics (the paper halves counts every 1 s).
fn fetch_halve(c: u32, _: ()) -> (u32, u32) {
    (c >> 1, c)
}

/// The state manager's register and its actions.
pub struct StateManager {
    /// Built-ins for an application's query-hit processing (K3): read the slot's state,
    /// invalidate it (a write passed), revalidate it (the write's new data is in).
    pub check: RegisterAction<u8, (), u8>,
    pub(crate) set: RegisterAction<u8, u8, u8>,
    pub invalidate: RegisterAction<u8, (), u8>,
    pub revalidate: RegisterAction<u8, (), u8>,
}

impl StateManager {
    pub fn declare(b: &mut ProgramBuilder, stage: u8, slots: u32) -> StateManager {
        StateManager::declare_named(b, "obj_state", stage, slots)
    }

    /// The same under another register name.
    pub fn declare_named(b: &mut ProgramBuilder, name: &str, stage: u8, slots: u32) -> StateManager {
        let r = b.register::<u8>(name, Gress::Ingress, stage, slots, "state: empty / valid / invalid (write in flight) / replacing");
        StateManager {
            check: b.register_action(r, "check", read_u8),
            set: b.register_action(r, "set", set_u8),
            invalidate: b.register_action(r, "invalidate", invalidate),
            revalidate: b.register_action(r, "revalidate", revalidate),
        }
    }
}

/// OO-Stat: one 32-bit counter per slot.
pub struct OoStat {
    /// Built-in for an application's query-hit processing (K3): count a hit.
    pub count: RegisterAction<u32, (), u32>,
    pub(crate) fetch: RegisterAction<u32, (), u32>,
    pub(crate) fetch_clear: RegisterAction<u32, (), u32>,
    pub(crate) fetch_halve: RegisterAction<u32, (), u32>,
}

impl OoStat {
    pub fn declare(b: &mut ProgramBuilder, stage: u8, slots: u32) -> OoStat {
        let r = b.register::<u32>("oo_stat", Gress::Ingress, stage, slots, "OO-Stat: queries per offloaded object since the last clear");
        OoStat {
            count: b.register_action(r, "count", count),
            fetch: b.register_action(r, "fetch", fetch),
            fetch_clear: b.register_action(r, "fetch_clear", fetch_clear),
            fetch_halve: b.register_action(r, "fetch_halve", fetch_halve),
        }
    }
}
