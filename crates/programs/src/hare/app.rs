//! K3 on the switch (§IV-D): what an application supplies to the generic Hare program
//! ([`super::HareProgram`]). The framework parses queries, runs the e-MAT hit check,
//! owns the state manager, OO-Stat and the control-packet dispatch (statistics, states,
//! permissions, replies); the application declares its data (`define_appdata`), processes
//! a query that hit (`apply_queryhit`) and applies data-movement packets (`parse_datamv` /
//! `apply_datamv`).

use pisa::{Pass, ProgramBuilder, TraceMode};
use wire::hare::Op;

use super::kv::Packer;
use super::oostat::{OoStat, StateManager};
use super::HareConfig;

/// A query whose object is offloaded: where it is, and the framework's per-slot state.
pub struct QueryHit<'a> {
    pub slot: u16,
    /// Header offset of the value field, and the value length the query carries.
    pub voff: usize,
    pub value_len: usize,
    pub states: &'a StateManager,
    pub oo: &'a OoStat,
}

/// A Hare application's switch side.
pub trait HareApp: Send + Sync + Sized + 'static {
    /// The program's name and one-line description.
    const NAME: &'static str;
    const DOC: &'static str;
    /// Prefix of the program's drop reasons (`{prefix}_unknown_op`, ...; malformed packets count as the switch's `malformed`).
    const DROP_PREFIX: &'static str;
    /// Per-packet metadata the application needs beside the framework's.
    const METADATA_BITS: u32;

    /// The configuration `new()` builds.
    fn default_config() -> HareConfig;

    /// Panics on a configuration the application cannot be built for.
    fn check_config(_cfg: &HareConfig) {}

    /// `define_appdata`: the application's register arrays and tables, placed by `packer`
    /// (which starts beside OO-Stat), and anything else it declares (recirculation, notes).
    fn define_appdata(b: &mut ProgramBuilder, cfg: &HareConfig, packer: &mut Packer) -> Self;

    /// `parse_query`: whether `op` is one of the application's queries, and whether a query
    /// carrying a `value_len`-byte value is well formed (else dropped as a bad key field).
    fn is_query(_op: Op) -> bool {
        true
    }
    fn query_ok(_cfg: &HareConfig, _value_len: usize) -> bool {
        true
    }

    /// A packet the application handles before the framework's dispatch (e.g. its own
    /// recirculated packets, which may check a slot's state in `states`); `true` if it did.
    fn intercept<M: TraceMode>(&self, _pass: &mut Pass<'_, M>, _op: Op, _flags: u8, _states: &StateManager) -> bool {
        false
    }

    /// `apply_queryhit`: process query `op` whose object hit the e-MAT.
    fn apply_queryhit<M: TraceMode>(&self, pass: &mut Pass<'_, M>, cfg: &HareConfig, op: Op, hit: &QueryHit<'_>);

    /// `parse_datamv` / `apply_datamv`: a data-movement packet for `slot` (`aux` as the
    /// application uses it) whose value (`vlen` bytes at `voff`) is application data;
    /// `false` if it is malformed (dropped, counted).
    fn apply_datamv<M: TraceMode>(&self, pass: &mut Pass<'_, M>, cfg: &HareConfig, op: Op, dm: &DataMv) -> bool;
}

/// A data-movement packet's fields.
pub struct DataMv {
    pub slot: u16,
    pub aux: u16,
    pub voff: usize,
    pub vlen: usize,
}
