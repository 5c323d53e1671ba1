//! SortReduce (NetSHa Algorithm 1): the per-register state and what one answer does to it.
//!
//! The state of logical register r is one 64-bit cell (a paired stateful ALU):
//! `lo` = held answers (bits 0–15) | commits pending (bits 16–23) | tombstone (bit 31),
//! `hi` = r.k, the answers sent so far. r.T lives in its own array ([`ThresholdAlu`]) one
//! stage earlier, because the drop test `a.d >= r.T` must be known before the state moves.
//!
//! Phase 1 (r.k < K): insert; when the register fills, send the p GA answers (r.k += p),
//! or, when fewer than p are still owed, the final flush: send K − r.k and clear the rest.
//! Phase 2 (r.k >= K): drop answers at or beyond r.T, insert the others, send all n when
//! full. r.T is the largest distance sent. It is known only after the slots (the last
//! stages) are read, so the pass that sends writes it on its next pass (a counted
//! recirculation, a "commit"); until every commit has landed, phase 2 does not drop
//! (`pending`), so a stale r.T can never drop an answer.
//!
//! [`Reduction::Paper`] clears the rest at the final flush as Algorithm 1 does, which can
//! lose a true top-K answer (an answer cleared there can be better than an answer sent in
//! an earlier batch). [`Reduction::Exact`] also sends, at the final flush, every held
//! answer below the r.T of the earlier batches (or all of them while a commit is pending):
//! those, and only those, may still be in the top K. [`Reduction::Off`] aggregates only.

use pisa::{Cmp, Cond, Op, Out, OutSrc, Pair, Pred, Salu, SaluBody, SaluProgram, Src, Update};

/// Which answers the final flush of Algorithm 1 keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduction {
    /// Algorithm 1 as written.
    Paper,
    /// Never changes the agent's top K.
    Exact,
    /// No reduction: registers aggregate and send every answer (Fig. 16 "Baseline+agg").
    Off,
}

impl Reduction {
    pub fn name(self) -> &'static str {
        match self {
            Reduction::Paper => "paper",
            Reduction::Exact => "exact",
            Reduction::Off => "off",
        }
    }
    pub fn by_name(s: &str) -> Option<Reduction> {
        match s {
            "paper" => Some(Reduction::Paper),
            "exact" => Some(Reduction::Exact),
            "off" | "none" => Some(Reduction::Off),
            _ => None,
        }
    }
}

/// State register action: read only.
pub const OP_READ: u32 = 0;
/// Insert one answer (bit 8 of the op: the answer is at or beyond r.T).
pub const OP_INSERT: u32 = 1;
/// Insert into a register just claimed (its old state is ignored).
pub const OP_INSERT_FRESH: u32 = 2;
/// One commit of r.T landed.
pub const OP_COMMIT: u32 = 3;
/// The register is being replaced: refuse answers until the new owner claims it.
pub const OP_TOMB: u32 = 4;
/// Released: back to zero.
pub const OP_RESET: u32 = 5;
/// Drop test only, state unchanged: `Step::Drop` where an insert would drop the answer,
/// else `Step::Tomb` (the caller forwards it unreduced). For a packet with no room left
/// for a register's output.
pub const OP_DROP_ONLY: u32 = 6;
/// Flag in the op: the answer's distance is >= r.T.
pub const GE_T: u32 = 1 << 8;

const TOMB: u32 = 1 << 31;

/// n, p and K packed into one operand, as constants a compiler would bake into the ALU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    pub n: u32,
    pub p: u32,
    pub k: u32,
    pub reduce: bool,
}

impl Params {
    pub fn pack(self) -> u32 {
        self.n | (self.p << 8) | (self.k.min(0x7FFF) << 16) | ((self.reduce as u32) << 31)
    }
    pub fn unpack(v: u32) -> Params {
        Params { n: v & 0xFF, p: (v >> 8) & 0xFF, k: (v >> 16) & 0x7FFF, reduce: v >> 31 != 0 }
    }
    pub fn q(self) -> u32 {
        self.n - self.p
    }
}

/// What one answer does to its register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// The register is being replaced: the answer goes on unreduced.
    Tomb,
    /// Phase 2, at or beyond r.T: dropped.
    Drop,
    /// Inserted; the register still has room.
    Insert,
    /// Phase 1, full: the p GA answers are sent.
    EmitGa,
    /// Phase 1, full, fewer than p owed: send the best `m` (and, exact, what may matter).
    FinalFlush { m: u32 },
    /// Phase 2, full: all n are sent.
    EmitAll,
}

impl Step {
    /// Whether the sent answers must raise r.T (a commit pass follows).
    pub fn commits(self, reduce: bool) -> bool {
        reduce && matches!(self, Step::EmitGa | Step::FinalFlush { .. })
    }
}

#[inline]
pub fn held(s: Pair) -> u32 {
    s.lo & 0xFFFF
}
#[inline]
pub fn pending(s: Pair) -> u32 {
    (s.lo >> 16) & 0xFF
}
#[inline]
pub fn is_tomb(s: Pair) -> bool {
    s.lo & TOMB != 0
}
#[inline]
fn state(held: u32, pending: u32, sent: u32) -> Pair {
    Pair::new(held | (pending.min(0xFF) << 16), sent)
}

/// Algorithm 1's decision for one answer, and the register's next state. The stateful ALU
/// and the packet both evaluate it (the ALU returns the old state, the packet recomputes
/// the decision from it), so they always agree.
#[inline]
pub fn step(old: Pair, fresh: bool, ge_t: bool, prm: Params) -> (Pair, Step) {
    let s = if fresh { Pair::new(0, 0) } else { old };
    if is_tomb(s) {
        return (s, Step::Tomb);
    }
    let (cnt, pend, k) = (held(s), pending(s), s.hi);
    let phase2 = prm.reduce && k >= prm.k;
    if phase2 && pend == 0 && ge_t {
        return (s, Step::Drop);
    }
    if cnt + 1 < prm.n {
        return (state(cnt + 1, pend, k), Step::Insert);
    }
    if phase2 {
        return (state(0, pend, k), Step::EmitAll);
    }
    if !prm.reduce {
        // Aggregation only: every full register sends all of its answers.
        return (state(0, 0, k), Step::EmitAll);
    }
    if prm.k - k >= prm.p {
        (state(prm.q(), pend + 1, k + prm.p), Step::EmitGa)
    } else {
        (state(0, pend + 1, prm.k), Step::FinalFlush { m: prm.k - k })
    }
}

/// The decision as the 32 bits a stateful ALU returns: kind (bits 0–2), m (bits 3–17),
/// a commit is pending (bit 31).
pub fn encode_step(st: Step, pending: u32) -> u32 {
    let (kind, m) = match st {
        Step::Tomb => (0, 0),
        Step::Drop => (1, 0),
        Step::Insert => (2, 0),
        Step::EmitGa => (3, 0),
        Step::FinalFlush { m } => (4, m),
        Step::EmitAll => (5, 0),
    };
    kind | (m.min(0x7FFF) << 3) | (((pending > 0) as u32) << 31)
}

/// The inverse of [`encode_step`]: the decision and whether a commit was pending.
pub fn decode_step(v: u32) -> (Step, bool) {
    let st = match v & 7 {
        0 => Step::Tomb,
        1 => Step::Drop,
        2 => Step::Insert,
        3 => Step::EmitGa,
        4 => Step::FinalFlush { m: (v >> 3) & 0x7FFF },
        _ => Step::EmitAll,
    };
    (st, v >> 31 != 0)
}

/// The state register's stateful ALU: `(op, packed params)` in; for inserts, the decision
/// ([`encode_step`]) out.
#[derive(Clone, Copy)]
pub struct StateAlu;

impl SaluBody<Pair, (u32, u32), u32> for StateAlu {
    #[inline(always)]
    fn run(self, s: Pair, (op, prm): (u32, u32)) -> (Pair, u32) {
        let ins = |fresh: bool| {
            let (n, st) = step(s, fresh, op & GE_T != 0, Params::unpack(prm));
            let pend = if fresh { 0 } else { pending(s) };
            (n, encode_step(st, pend))
        };
        let new = match op & 0xFF {
            OP_INSERT => return ins(false),
            OP_INSERT_FRESH => return ins(true),
            OP_DROP_ONLY => {
                let (_, st) = step(s, false, op & GE_T != 0, Params::unpack(prm));
                let st = if st == Step::Drop { Step::Drop } else { Step::Tomb };
                return (s, encode_step(st, pending(s)));
            }
            OP_COMMIT => {
                let c = state(held(s), pending(s).saturating_sub(1), s.hi);
                Pair::new(c.lo | (s.lo & TOMB), c.hi)
            }
            OP_TOMB => Pair::new(s.lo | TOMB, s.hi),
            OP_RESET => Pair::new(0, 0),
            _ => s,
        };
        (new, 0)
    }
}

/// r.T: read, reset, or raise to a sent distance (a max: commits may land in any order).
#[derive(Clone, Copy)]
pub struct ThresholdAlu;

/// Threshold ops.
pub const T_READ: u32 = 0;
pub const T_RESET: u32 = 1;
pub const T_MAX: u32 = 2;

impl SaluProgram<u32, (u32, u32), u32> for ThresholdAlu {
    const SALU: Salu = Salu {
        conds: &[Cond::new(Src::PhvLo, Cmp::Eq, Src::K(T_RESET as i32)), Cond::new(Src::PhvLo, Cmp::Eq, Src::K(T_MAX as i32))],
        lo: &[Update::set(Pred::C0, Src::K(0)), Update::new(Pred::C1, Src::Lo, Op::MaxU, Src::PhvHi)],
        hi: &[],
        out: &[Out::always(OutSrc::OldLo)],
    };
}

/// Which answers a final flush sends. `old` are the register's n − 1 answers (worst
/// first, as the slots hold them), `c` the answer that filled it; `t_prev` r.T before
/// this flush and `pending` the commits still in flight. Returns a mask over `old` and
/// whether `c` is sent. Paper: the best `m`. Exact: also every answer below `t_prev` (all
/// of them if a commit is pending, since `t_prev` may then be stale).
pub fn final_flush_select(old: &[u32], c: u32, m: u32, t_prev: u32, pending: u32, mode: Reduction) -> (u64, bool) {
    let n_old = old.len() as u32;
    let mut mask = 0u64;
    for (i, &s) in old.iter().enumerate() {
        // Better answers: the old ones after it, and c if strictly better.
        let rank = (n_old - 1 - i as u32) + (c < s) as u32;
        let keep = rank < m || (mode == Reduction::Exact && (pending > 0 || s < t_prev));
        if keep {
            mask |= 1 << i;
        }
    }
    let rank_c = old.iter().filter(|&&s| s <= c).count() as u32;
    let keep_c = rank_c < m || (mode == Reduction::Exact && (pending > 0 || c < t_prev));
    (mask, keep_c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_round_trip() {
        let p = Params { n: 12, p: 8, k: 50, reduce: true };
        assert_eq!(Params::unpack(p.pack()), p);
    }

    #[test]
    fn algorithm_1_phases() {
        let prm = Params { n: 3, p: 2, k: 3, reduce: true };
        let (s, st) = step(Pair::new(0, 0), true, false, prm);
        assert_eq!((held(s), st), (1, Step::Insert));
        let (s, _) = step(s, false, false, prm);
        let (s, st) = step(s, false, false, prm);
        assert_eq!(st, Step::EmitGa);
        assert_eq!((held(s), pending(s), s.hi), (1, 1, 2));
        let (s, _) = step(s, false, false, prm);
        let (s, st) = step(s, false, false, prm);
        assert_eq!(st, Step::FinalFlush { m: 1 });
        assert_eq!((held(s), pending(s), s.hi), (0, 2, 3));
        // Phase 2 with commits pending: no drop.
        assert_eq!(step(s, false, true, prm).1, Step::Insert);
        let s = StateAlu.run(StateAlu.run(s, (OP_COMMIT, prm.pack())).0, (OP_COMMIT, prm.pack())).0;
        assert_eq!(decode_step(StateAlu.run(s, (OP_INSERT | GE_T, prm.pack())).1), (Step::Drop, false));
        for st in [Step::Tomb, Step::Drop, Step::Insert, Step::EmitGa, Step::FinalFlush { m: 37 }, Step::EmitAll] {
            assert_eq!(decode_step(encode_step(st, 2)), (st, true));
        }
        assert_eq!(step(s, false, true, prm).1, Step::Drop);
        assert_eq!(step(s, false, false, prm).1, Step::Insert);
    }
}
