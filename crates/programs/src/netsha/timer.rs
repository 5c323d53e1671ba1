//! Per-register timers (NetSHa §3.7): answers never wait in a register longer than a bound.
//!
//! The switch cannot create packets. A declared packet generator (Tofino has one) emits a
//! small NetSHa packet every `period`; each one visits the next register in turn (`sweep`
//! cursor). The `born` array holds, per register, the time it was claimed (µs, `lo`) and
//! its owner's tag (`hi`). A generator packet that finds a register claimed at least
//! `timeout` ago recirculates once and, on its second pass, releases the register (a
//! compare-and-swap on the owner, so a register replaced meanwhile is left alone) and
//! carries all of its answers to the agent. Every answer therefore reaches the agent
//! within `timeout + registers × period` (+ one pass) of entering a register.

use pisa::{Cmp, Cond, Op, Out, OutSrc, Pair, Pred, Salu, SaluBody, SaluProgram, Src, Update};

/// Time in the `born` array: microseconds, wrapping at 2^32 (71 minutes), compared with
/// wrapping subtraction.
#[inline]
pub fn now_us(now_ns: u64) -> u32 {
    (now_ns / 1_000) as u32
}

/// `born` ops.
pub const OP_READ: u32 = 0;
pub const OP_SET: u32 = 1;
/// Read the owner tag (hi): the replacement register's query, once Algorithm 2 chose it.
pub const OP_OWNER: u32 = 2;

/// The `born` array's stateful ALU: `(Pair { op, timeout µs }, Pair { now µs, tag })` in.
/// Set stores `(now, tag)`; read returns the owner's tag if its register has expired, else 0.
#[derive(Clone, Copy)]
pub struct BornAlu;

impl SaluBody<Pair, (Pair, Pair), u32> for BornAlu {
    #[inline(always)]
    fn run(self, b: Pair, (op, v): (Pair, Pair)) -> (Pair, u32) {
        if op.lo == OP_SET {
            (v, 0)
        } else if op.lo == OP_OWNER || expired(b, v.lo, op.hi) {
            (b, b.hi)
        } else {
            (b, 0)
        }
    }
}

/// The sweep cursor: out the register to visit, advance modulo R (operand).
#[derive(Clone, Copy)]
pub struct SweepAlu;

/// Conditions: c0 the cursor is at the last register, c1 beyond it (R shrank); the output
/// (the cursor, at most R - 1) comes from the high update ALUs.
impl SaluProgram<u32, u32, u32> for SweepAlu {
    const SALU: Salu = Salu {
        conds: &[Cond::lin(Src::Lo, Src::PhvLo, 1, Cmp::GeU), Cond::new(Src::Lo, Cmp::GeU, Src::PhvLo)],
        lo: &[Update::set(Pred::C0, Src::K(0)), Update::always(Src::Lo, Op::Add, Src::K(1))],
        hi: &[Update::new(Pred::C1, Src::PhvLo, Op::SatSub, Src::K(1)), Update::set(Pred::ALWAYS, Src::Lo)],
        out: &[Out::always(OutSrc::NewHi)],
    };
}

/// Whether a register claimed at `born_us` has expired at `now_us`.
#[inline]
pub fn expired(born: Pair, now_us: u32, timeout_us: u32) -> bool {
    born.hi != 0 && now_us.wrapping_sub(born.lo) >= timeout_us
}
