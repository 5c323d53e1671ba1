//! pisa: a model of a PISA (RMT, Tofino-class) switch.
//!
//! - [`decl`]: what a program declares (parser, registers, tables, hash units, digests,
//!   packet generators), built with [`decl::ProgramBuilder`].
//! - [`pass`]: one packet's pass through a control block, with the hardware rules enforced.
//! - [`program`]: the [`program::Program`] trait and program sets sharing one pipeline.
//! - [`pipe`]: ingress, traffic manager and egress of one pipe; [`switch`]: all pipes in
//!   one thread.
//! - [`salu`]: what a stateful ALU computes, as a declared instruction the loader checks.
//! - [`target`] and [`resources`]: target limits and the resource report.
//! - [`control`]: control-plane operations (what P4Runtime maps to).
//! - [`base`]: the shared vocabulary (drop codes, object positions, control errors); it
//!   depends on no other module, which keeps the modules above it free of import cycles.
//!
//! Sans-IO: nothing here opens a socket, spawns a thread or reads a clock.
// No unsafe code, except the one cache hint in `pass::prefetch_hint`, the CRC-32C
// instruction in `hash` and the view of a pass in the other trace mode in `Pass::retype`
// (allowed there).
#![deny(unsafe_code)]

pub mod base;
pub mod control;
pub mod counters;
pub mod decl;
pub mod hash;
pub mod lanes;
pub mod packet;
pub mod pass;
pub mod pipe;
pub mod program;
pub mod register;
pub mod resources;
pub mod salu;
pub mod selector;
pub mod staged;
pub mod switch;
pub mod table;
pub mod target;
pub mod tm;
pub mod trace;

pub use base::{ActionId, ControlError, DropCode, Gress, MatchKind};
pub use control::{CloneSession, ControlOp, ControlReply, Replica, WriteOp};
pub use decl::{ClassifyRule, Digest, HashUnit, Memory, MemoryKind, ProgramBuilder, ProgramDecl, Table, TableSpec};
pub use hash::HashAlgo;
pub use lanes::{HashLanes, LanesError, RegisterLanes};
pub use packet::{BufPool, PacketBuf, PortId, PORT_CPU, PORT_NONE, PORT_PKTGEN, PORT_RECIRC};
pub use pass::{Pass, TraceMode, Traced, Untraced, Violation};
pub use pipe::{Handoff, Pipe, PipeConfig, PortMap};
pub use program::{Program, ProgramSet};
pub use register::{Cell, DualCell, Register, RegisterAction, SaluBody, SaluFn};
pub use resources::ResourceReport;
pub use salu::{Cmp, Cond, Declared, Op, OutputSource, Pred, Salu, SaluAction, SaluLanes, SaluOutput, SaluProgram, Src, Update};
pub use selector::{ActionProfileDecl, ActionSelector, IndirectRef};
pub use staged::{Staged, StagedArg};
pub use switch::Switch;
pub use table::{FieldMatch, TableResult};
pub use target::Target;
pub use trace::{TraceFilter, TraceSession, TraceTake};
