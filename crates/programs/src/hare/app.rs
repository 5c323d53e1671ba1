//! K3 on the switch (§IV-D): what an application supplies to the generic Hare program
//! ([`super::HareProgram`]). The framework parses queries, runs the e-MAT hit check,
//! owns the state manager, OO-Stat and the control-packet dispatch (statistics, states,
//! permissions, replies); the application declares its data (`define_appdata`), processes
//! a query that hit (`apply_queryhit`) and applies data-movement packets (`parse_datamv` /
//! `apply_datamv`).

use pisa::{Pass, ProgramBuilder};
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

    /// `define_appdata`: the application's register arrays, placed by `packer` (which
    /// starts beside OO-Stat).
    fn define_appdata(b: &mut ProgramBuilder, cfg: &HareConfig, packer: &mut Packer) -> Self;

    /// `apply_queryhit`: process query `op` whose object hit the e-MAT.
    fn apply_queryhit(&self, pass: &mut Pass<'_>, cfg: &HareConfig, op: Op, hit: &QueryHit<'_>);

    /// `apply_datamv`: a data-movement packet for `slot` whose value (`vlen` bytes at
    /// `voff`) is the application's data; `false` if it is malformed (dropped, counted).
    fn apply_datamv(&self, pass: &mut Pass<'_>, cfg: &HareConfig, op: Op, slot: u16, voff: usize, vlen: usize) -> bool;
}
