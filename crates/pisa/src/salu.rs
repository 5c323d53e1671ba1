//! What a stateful ALU computes, in a form the model can inspect: [`Salu`].
//!
//! A register action declared with a [`Salu`] (see [`SaluProgram`] and
//! [`crate::ProgramBuilder::register_action_salu`]) is the hardware's instruction word, not
//! Rust: condition units comparing a linear combination of a register half, a PHV operand
//! and a constant against zero; up to two update expressions per 32-bit half chosen by a
//! predicate over the conditions; output words chosen the same way. The loader checks it
//! against the target (conditions, updates per half, outputs, operand widths, constants:
//! [`check`]) and `inswitch resources` reports what each action uses. The form is a
//! `const`, so [`eval`] is specialised per action by the compiler: no interpretation is
//! left at run time. Register actions declared with a plain `fn` or [`crate::SaluBody`]
//! remain possible but are reported as an *unchecked ALU*. See `docs/pisa-rules.md`.

use serde::{Deserialize, Serialize};

use crate::register::{Cell, DualCell};
use crate::target::{is_unlimited, Target};

/// One operand of a condition or update: a half of the cell as it was before the action,
/// one of the two PHV operands the packet brings, or a constant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Src {
    Lo,
    Hi,
    PhvLo,
    PhvHi,
    K(i32),
}

/// Comparison of a condition's value against zero (unsigned or signed operands).
///
/// The `*W` forms compare the difference as the ALU's 32-bit adder produces it: `a - b + k`
/// wrapped to 32 bits, then read as signed. That is the test of a wrapping clock
/// (`(now - deadline) as i32 > 0`), which an exact comparison misjudges near the wrap.
/// The other forms compare the exact difference of the operands (widened unsigned or signed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cmp {
    Eq,
    Ne,
    LtU,
    LeU,
    GtU,
    GeU,
    LtS,
    LeS,
    GtS,
    GeS,
    LtW,
    LeW,
    GtW,
    GeW,
}

/// A condition unit: `a - b + k  cmp  0`. At most one register half and one PHV operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cond {
    pub a: Src,
    pub b: Src,
    pub k: i32,
    pub cmp: Cmp,
}

impl Cond {
    /// `a cmp b`.
    pub const fn new(a: Src, cmp: Cmp, b: Src) -> Cond {
        Cond { a, b, k: 0, cmp }
    }
    /// `a - b + k cmp 0`.
    pub const fn linear(a: Src, b: Src, k: i32, cmp: Cmp) -> Cond {
        Cond { a, b, k, cmp }
    }
}

/// A predicate: a truth table over the condition outputs (bit `i` of the table is the value
/// when the conditions, read as bits `c0 | c1 << 1 | ...`, equal `i`), as the ALU's
/// predicate selector is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pred(pub u16);

impl Pred {
    pub const ALWAYS: Pred = Pred(0xFFFF);
    pub const NEVER: Pred = Pred(0);
    pub const C0: Pred = Pred(0xAAAA);
    pub const C1: Pred = Pred(0xCCCC);
    pub const C2: Pred = Pred(0xF0F0);
    pub const C3: Pred = Pred(0xFF00);
    pub const fn not(self) -> Pred {
        Pred(!self.0)
    }
    pub const fn and(self, o: Pred) -> Pred {
        Pred(self.0 & o.0)
    }
    pub const fn or(self, o: Pred) -> Pred {
        Pred(self.0 | o.0)
    }
    /// Highest condition this predicate depends on, plus one.
    pub const fn conds_used(self) -> usize {
        let mut n = 4;
        while n > 0 {
            // Independent of condition n-1: the table equals itself shifted by that bit.
            let s = 1u32 << (n - 1);
            let mut i = 0;
            let mut depends = false;
            while i < 16 {
                if i & s == 0 && ((self.0 >> i) & 1) != ((self.0 >> (i | s)) & 1) {
                    depends = true;
                }
                i += 1;
            }
            if depends {
                return n;
            }
            n -= 1;
        }
        0
    }
}

/// An update ALU's operation on its two operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// `a` (b is ignored).
    A,
    Add,
    /// `a - b`.
    Sub,
    /// Unsigned saturating add and subtract (at the half's width).
    SatAdd,
    SatSub,
    MinU,
    MaxU,
    And,
    Or,
    Xor,
    /// `a & !b`.
    AndNot,
}

/// One update ALU of a half: when `when` holds, the half becomes `a op b`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Update {
    pub when: Pred,
    pub a: Src,
    pub op: Op,
    pub b: Src,
}

impl Update {
    pub const fn new(when: Pred, a: Src, op: Op, b: Src) -> Update {
        Update { when, a, op, b }
    }
    /// `a op b` on every packet.
    pub const fn always(a: Src, op: Op, b: Src) -> Update {
        Update { when: Pred::ALWAYS, a, op, b }
    }
    /// The half becomes `a` when `when` holds.
    pub const fn set(when: Pred, a: Src) -> Update {
        Update { when, a, op: Op::A, b: Src::K(0) }
    }
}

/// What a stateful ALU output word ([`SaluOutput`]) carries. On a cell narrower than 64
/// bits `NewHi` is the high update ALUs' scratch result (not stored).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputSource {
    OldLo,
    OldHi,
    NewLo,
    NewHi,
    PhvLo,
    PhvHi,
    /// The condition outputs as a number, condition `i` in bit `i` (Tofino's `predicate`
    /// output carries the same information one-hot; a gateway or table maps either to the
    /// program's codes).
    Predicate,
}

/// An output word of a stateful ALU: `src` when `when` holds, else 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SaluOutput {
    pub when: Pred,
    pub src: OutputSource,
}

impl SaluOutput {
    pub const fn new(when: Pred, src: OutputSource) -> SaluOutput {
        SaluOutput { when, src }
    }
    pub const fn always(src: OutputSource) -> SaluOutput {
        SaluOutput { when: Pred::ALWAYS, src }
    }
}

/// A stateful ALU instruction (one register action). Updates of a half are tried in order;
/// the first whose predicate holds writes the half, none keeps it.
#[derive(Clone, Copy, Debug)]
pub struct Salu {
    pub conds: &'static [Cond],
    pub lo: &'static [Update],
    pub hi: &'static [Update],
    pub out: &'static [SaluOutput],
}

impl Salu {
    /// What this instruction uses, as recorded in the declaration and the resource report.
    pub fn to_decl(&self) -> SaluDecl {
        SaluDecl { conds: self.conds.to_vec(), lo: self.lo.to_vec(), hi: self.hi.to_vec(), out: self.out.to_vec() }
    }
}

/// A [`Salu`] as the declaration holds it (owned, serializable).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SaluDecl {
    pub conds: Vec<Cond>,
    pub lo: Vec<Update>,
    pub hi: Vec<Update>,
    pub out: Vec<SaluOutput>,
}

/// A register action whose body is a declared [`Salu`]: a unit struct naming the
/// instruction. `T` the cell, `I` the PHV operands (at most two), `O` the output word.
pub trait SaluProgram<T: Cell, I: SaluIn, O: SaluOut>: Copy + Send + Sync + 'static {
    const SALU: Salu;
    /// The instruction on one cell (for tests and host-side models of the same state).
    #[inline(always)]
    fn run(self, cell: T, input: I) -> (T, O) {
        let (c, w) = eval_words(&Self::SALU, cell, input.phv());
        (c, O::from_words(w))
    }
}

/// A register action whose body is the declared instruction `P`.
pub type SaluAction<T, I, O, P> = crate::register::RegisterAction<T, I, O, Declared<P>>;
/// Lanes of register actions whose body is the declared instruction `P`.
pub type SaluLanes<T, I, O, P, const N: usize> = crate::lanes::RegisterLanes<T, I, O, Declared<P>, N>;

/// The body a [`SaluProgram`] runs as (see [`crate::SaluBody`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct Declared<P>(pub P);

/// PHV operands of a declared register action: none, one, or two of at most 32 bits each.
pub trait SaluIn: Copy + 'static {
    const OPERANDS: u32;
    /// Width of the widest operand.
    const BITS: u32;
    fn phv(self) -> [u32; 2];
}

/// One PHV operand.
pub trait SaluScalar: Copy + 'static {
    const BITS: u32;
    fn word(self) -> u32;
}

macro_rules! scalar {
    ($t:ty, $bits:expr) => {
        impl SaluScalar for $t {
            const BITS: u32 = $bits;
            #[inline(always)]
            fn word(self) -> u32 {
                self as u32
            }
        }
        impl SaluIn for $t {
            const OPERANDS: u32 = 1;
            const BITS: u32 = $bits;
            #[inline(always)]
            fn phv(self) -> [u32; 2] {
                [self as u32, 0]
            }
        }
    };
}
scalar!(u8, 8);
scalar!(u16, 16);
scalar!(u32, 32);
scalar!(i32, 32);
scalar!(bool, 1);

impl SaluIn for () {
    const OPERANDS: u32 = 0;
    const BITS: u32 = 0;
    #[inline(always)]
    fn phv(self) -> [u32; 2] {
        [0, 0]
    }
}
impl<A: SaluScalar, B: SaluScalar> SaluIn for (A, B) {
    const OPERANDS: u32 = 2;
    const BITS: u32 = if A::BITS > B::BITS { A::BITS } else { B::BITS };
    #[inline(always)]
    fn phv(self) -> [u32; 2] {
        [self.0.word(), self.1.word()]
    }
}
impl SaluIn for DualCell {
    const OPERANDS: u32 = 2;
    const BITS: u32 = 32;
    #[inline(always)]
    fn phv(self) -> [u32; 2] {
        [self.lo, self.hi]
    }
}

/// The output words of a declared register action, as the program receives them.
pub trait SaluOut: Copy + Default + 'static {
    /// Output words (0 to [`MAX_OUT_WORDS`]; a tuple of two scalars takes two).
    const WORDS: u32;
    fn from_word(w: u32) -> Self;
    /// From the output words in declaration order.
    #[inline(always)]
    fn from_words(w: [u32; MAX_OUT_WORDS]) -> Self {
        Self::from_word(w[0])
    }
}

/// Most output words an instruction can declare in the model (Tofino 2's stateful ALU has
/// four; the target says how many it offers).
pub const MAX_OUT_WORDS: usize = 4;
impl SaluOut for () {
    const WORDS: u32 = 0;
    #[inline(always)]
    fn from_word(_: u32) -> Self {}
}
macro_rules! out_word {
    ($t:ty) => {
        impl SaluOut for $t {
            const WORDS: u32 = 1;
            #[inline(always)]
            fn from_word(w: u32) -> Self {
                w as $t
            }
        }
    };
}
out_word!(u8);
out_word!(u16);
out_word!(u32);
out_word!(i32);
impl SaluOut for bool {
    const WORDS: u32 = 1;
    #[inline(always)]
    fn from_word(w: u32) -> Self {
        w != 0
    }
}
/// Two output words (Tofino 2 and later; refused on a target with one).
impl<A: SaluOut + SaluScalar, B: SaluOut + SaluScalar> SaluOut for (A, B) {
    const WORDS: u32 = 2;
    #[inline(always)]
    fn from_word(w: u32) -> Self {
        (A::from_word(w), B::default())
    }
    #[inline(always)]
    fn from_words(w: [u32; MAX_OUT_WORDS]) -> Self {
        (A::from_word(w[0]), B::from_word(w[1]))
    }
}

#[inline(always)]
const fn half_mask(bits: u32) -> u32 {
    if bits >= 32 {
        u32::MAX
    } else {
        (1u32 << bits) - 1
    }
}

#[inline(always)]
fn src(s: Src, lo: u32, hi: u32, phv: [u32; 2]) -> u32 {
    match s {
        Src::Lo => lo,
        Src::Hi => hi,
        Src::PhvLo => phv[0],
        Src::PhvHi => phv[1],
        Src::K(k) => k as u32,
    }
}

#[inline(always)]
fn wide(v: u32, signed: bool) -> i64 {
    if signed {
        v as i32 as i64
    } else {
        v as i64
    }
}

#[inline(always)]
fn alu(op: Op, a: u32, b: u32, mask: u32) -> u32 {
    let (a, b) = (a & mask, b & mask);
    match op {
        Op::A => a,
        Op::Add => a.wrapping_add(b),
        Op::Sub => a.wrapping_sub(b),
        Op::SatAdd => a.saturating_add(b).min(mask),
        Op::SatSub => a.saturating_sub(b),
        Op::MinU => a.min(b),
        Op::MaxU => a.max(b),
        Op::And => a & b,
        Op::Or => a | b,
        Op::Xor => a ^ b,
        Op::AndNot => a & !b,
    }
}

/// Run instruction `s` on a cell: the new cell and the first output word (see
/// [`eval_words`]).
#[inline(always)]
pub fn eval<T: Cell>(s: &Salu, cell: T, phv: [u32; 2]) -> (T, u32) {
    let (c, w) = eval_words(s, cell, phv);
    (c, w[0])
}

/// Run instruction `s` on a cell: the new cell and the output words (0 for those not
/// declared). Called with a `const` instruction and inlined, the compiler folds every
/// `match` on it away.
#[inline(always)]
pub fn eval_words<T: Cell>(s: &Salu, cell: T, phv: [u32; 2]) -> (T, [u32; MAX_OUT_WORDS]) {
    let mask = half_mask(T::BITS);
    let bits = cell.to_bits();
    let (lo, hi) = (bits as u32 & mask, (bits >> 32) as u32);
    let mut flags = 0usize;
    let mut i = 0;
    while i < s.conds.len() {
        let c = s.conds[i];
        let (a, b) = (src(c.a, lo, hi, phv), src(c.b, lo, hi, phv));
        let v = if matches!(c.cmp, Cmp::LtW | Cmp::LeW | Cmp::GtW | Cmp::GeW) {
            a.wrapping_sub(b).wrapping_add(c.k as u32) as i32 as i64
        } else {
            let signed = matches!(c.cmp, Cmp::LtS | Cmp::LeS | Cmp::GtS | Cmp::GeS);
            wide(a, signed) - wide(b, signed) + c.k as i64
        };
        let t = match c.cmp {
            Cmp::Eq => v == 0,
            Cmp::Ne => v != 0,
            Cmp::LtU | Cmp::LtS | Cmp::LtW => v < 0,
            Cmp::LeU | Cmp::LeS | Cmp::LeW => v <= 0,
            Cmp::GtU | Cmp::GtS | Cmp::GtW => v > 0,
            Cmp::GeU | Cmp::GeS | Cmp::GeW => v >= 0,
        };
        flags |= (t as usize) << i;
        i += 1;
    }
    let holds = |p: Pred| (p.0 >> flags) & 1 != 0;
    let update = |ups: &[Update], old: u32| -> u32 {
        for u in ups {
            if holds(u.when) {
                return alu(u.op, src(u.a, lo, hi, phv), src(u.b, lo, hi, phv), mask);
            }
        }
        old
    };
    let new_lo = update(s.lo, lo) & mask;
    let new_hi = update(s.hi, hi);
    let mut out = [0u32; MAX_OUT_WORDS];
    let mut i = 0;
    while i < s.out.len() && i < MAX_OUT_WORDS {
        let o = s.out[i];
        if holds(o.when) {
            out[i] = match o.src {
                OutputSource::OldLo => lo,
                OutputSource::OldHi => hi,
                OutputSource::NewLo => new_lo,
                OutputSource::NewHi => new_hi,
                OutputSource::PhvLo => phv[0],
                OutputSource::PhvHi => phv[1],
                OutputSource::Predicate => flags as u32,
            };
        }
        i += 1;
    }
    (T::from_bits(new_lo as u64 | (new_hi as u64) << 32), out)
}

impl<T: Cell, I: SaluIn, O: SaluOut, P: SaluProgram<T, I, O>> crate::register::SaluBody<T, I, O> for Declared<P> {
    #[inline(always)]
    fn run(self, cell: T, input: I) -> (T, O) {
        SaluProgram::run(self.0, cell, input)
    }
}

/// Instructions many programs use, said once.
pub mod common {
    use super::{Op, OutputSource, Pred, Salu, SaluIn, SaluOut, SaluOutput, SaluProgram, Src, Update};
    use crate::register::{Cell, DualCell, SaluValue};

    const INC: &[Update] = &[Update::always(Src::Lo, Op::Add, Src::K(1))];
    const OLD: &[SaluOutput] = &[SaluOutput::always(OutputSource::OldLo)];

    /// Count: the low half plus one (wrapping at the cell's width).
    #[derive(Clone, Copy, Debug)]
    pub struct Inc;
    impl<T: Cell> SaluProgram<T, (), ()> for Inc {
        const SALU: Salu = Salu { conds: &[], lo: INC, hi: &[], out: &[] };
    }

    /// Return the low half, then count it on (a sequence number, a stack top).
    #[derive(Clone, Copy, Debug)]
    pub struct FetchInc;
    impl<T: Cell, O: SaluOut + SaluValue> SaluProgram<T, (), O> for FetchInc {
        const SALU: Salu = Salu { conds: &[], lo: INC, hi: &[], out: OLD };
    }

    /// Add the operand to the low half.
    #[derive(Clone, Copy, Debug)]
    pub struct Add;
    impl<T: Cell> SaluProgram<T, u32, ()> for Add {
        const SALU: Salu = Salu { conds: &[], lo: &[Update::always(Src::Lo, Op::Add, Src::PhvLo)], hi: &[], out: &[] };
    }

    /// Add the two operands to the two halves of a 64-bit cell.
    #[derive(Clone, Copy, Debug)]
    pub struct AddPair;
    const ADD_PAIR: Salu = Salu {
        conds: &[],
        lo: &[Update::always(Src::Lo, Op::Add, Src::PhvLo)],
        hi: &[Update::always(Src::Hi, Op::Add, Src::PhvHi)],
        out: &[],
    };
    impl SaluProgram<DualCell, (u32, u32), ()> for AddPair {
        const SALU: Salu = ADD_PAIR;
    }
    impl SaluProgram<DualCell, DualCell, ()> for AddPair {
        const SALU: Salu = ADD_PAIR;
    }

    /// Return the low half.
    #[derive(Clone, Copy, Debug)]
    pub struct Read;
    impl<T: Cell, O: SaluOut + SaluValue> SaluProgram<T, (), O> for Read {
        const SALU: Salu = Salu { conds: &[], lo: &[], hi: &[], out: OLD };
    }

    /// Overwrite the low half with the operand.
    #[derive(Clone, Copy, Debug)]
    pub struct Write;
    impl<T: Cell, I: SaluIn + SaluValue + super::SaluScalar> SaluProgram<T, I, ()> for Write {
        const SALU: Salu = Salu { conds: &[], lo: &[Update::set(Pred::ALWAYS, Src::PhvLo)], hi: &[], out: &[] };
    }

    /// Count, saturating at the cell's width; return the count after.
    #[derive(Clone, Copy, Debug)]
    pub struct CountSat;
    impl<T: Cell, O: SaluOut + SaluValue> SaluProgram<T, (), O> for CountSat {
        const SALU: Salu = Salu {
            conds: &[],
            lo: &[Update::always(Src::Lo, Op::SatAdd, Src::K(1))],
            hi: &[],
            out: &[SaluOutput::always(OutputSource::NewLo)],
        };
    }

    /// Whether the low half equals the operand (the cell unchanged).
    #[derive(Clone, Copy, Debug)]
    pub struct Equals;
    impl<T: Cell> SaluProgram<T, u32, bool> for Equals {
        const SALU: Salu = Salu {
            conds: &[super::Cond::new(Src::Lo, super::Cmp::Eq, Src::PhvLo)],
            lo: &[],
            hi: &[],
            out: &[SaluOutput::new(Pred::C0, OutputSource::Predicate)],
        };
    }

    /// Return the low half and clear it.
    #[derive(Clone, Copy, Debug)]
    pub struct Take;
    impl<T: Cell, O: SaluOut + SaluValue> SaluProgram<T, (), O> for Take {
        const SALU: Salu = Salu { conds: &[], lo: &[Update::set(Pred::ALWAYS, Src::K(0))], hi: &[], out: OLD };
    }
}

fn srcs(d: &SaluDecl) -> impl Iterator<Item = Src> + '_ {
    let c = d.conds.iter().flat_map(|c| [c.a, c.b]);
    let u = d.lo.iter().chain(&d.hi).flat_map(|u| [u.a, u.b]);
    let o = d.out.iter().filter_map(|o| match o.src {
        OutputSource::OldHi => Some(Src::Hi),
        OutputSource::PhvLo => Some(Src::PhvLo),
        OutputSource::PhvHi => Some(Src::PhvHi),
        _ => None,
    });
    c.chain(u).chain(o)
}

/// Errors of an instruction independent of the target: it names a half the cell does not
/// have, an operand the packet does not bring, or a condition it does not declare.
pub fn check_shape(d: &SaluDecl, cell_bits: u32, operands: u32, out_words: u32) -> Vec<String> {
    let mut e = Vec::new();
    // A narrow cell has no high half to read; its high update ALUs still compute (a
    // scratch result only an output can take, as a compiler uses them).
    let reads_hi = srcs(d).any(|s| s == Src::Hi) || d.out.iter().any(|o| o.src == OutputSource::OldHi);
    if cell_bits < 64 && reads_hi {
        e.push(format!("reads the high half of a {cell_bits}-bit cell"));
    }
    for (s, n) in [(Src::PhvLo, 1), (Src::PhvHi, 2)] {
        if operands < n && srcs(d).any(|x| x == s) {
            e.push(format!("uses PHV operand {} but the action takes {operands}", n - 1));
        }
    }
    let preds = d.lo.iter().chain(&d.hi).map(|u| u.when).chain(d.out.iter().map(|o| o.when));
    if let Some(n) = preds.map(|p| p.conds_used()).max().filter(|&n| n > d.conds.len()) {
        e.push(format!("a predicate reads condition {} of {}", n - 1, d.conds.len()));
    }
    for c in &d.conds {
        let regs = [c.a, c.b].iter().filter(|s| matches!(s, Src::Lo | Src::Hi)).count();
        let phvs = [c.a, c.b].iter().filter(|s| matches!(s, Src::PhvLo | Src::PhvHi)).count();
        if regs > 1 || phvs > 1 {
            e.push("a condition combines two register halves or two PHV operands (one of each at most)".into());
        }
    }
    if d.out.len() > MAX_OUT_WORDS {
        e.push(format!("declares {} output words, the model has {MAX_OUT_WORDS}", d.out.len()));
    }
    if d.out.len() as u32 > out_words {
        e.push(format!("declares {} output words, the action returns {out_words}", d.out.len()));
    }
    e
}

/// Limits of the target's stateful ALU that `d` exceeds, each in words. `in_bits`: width
/// of the widest PHV operand.
pub fn check(d: &SaluDecl, in_bits: u32, t: &Target) -> Vec<String> {
    let mut e = Vec::new();
    let over = |used: usize, limit: u32| !is_unlimited(limit) && used as u64 > limit as u64;
    if over(d.conds.len(), t.salu_conditions) {
        e.push(format!("{} conditions, the stateful ALU has {} condition units", d.conds.len(), t.salu_conditions));
    }
    for (h, ups) in [("lo", &d.lo), ("hi", &d.hi)] {
        if over(ups.len(), t.salu_updates_per_half) {
            e.push(format!("{} updates of the {h} half, at most {}", ups.len(), t.salu_updates_per_half));
        }
    }
    if over(d.out.len(), t.salu_output_words) {
        e.push(format!("{} output words, at most {}", d.out.len(), t.salu_output_words));
    }
    if !is_unlimited(t.salu_phv_bits) && in_bits > t.salu_phv_bits {
        e.push(format!("{in_bits}-bit PHV operand, at most {}", t.salu_phv_bits));
    }
    // Constants outside the instruction's inline range take a register-file row.
    let (lo, hi) = t.salu_inline_const;
    let mut big: Vec<i32> = srcs(d)
        .filter_map(|s| if let Src::K(k) = s { Some(k) } else { None })
        .chain(d.conds.iter().map(|c| c.k))
        .filter(|&k| k < lo || k > hi)
        .collect();
    big.sort_unstable();
    big.dedup();
    if over(big.len(), t.salu_regfile_rows) {
        e.push(format!("{} constants outside {lo}..={hi}, the register file has {} rows", big.len(), t.salu_regfile_rows));
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: Salu = Salu {
        conds: &[Cond::new(Src::Lo, Cmp::LtU, Src::PhvLo)],
        lo: &[Update::set(Pred::C0, Src::PhvLo)],
        hi: &[],
        out: &[SaluOutput::always(OutputSource::OldLo)],
    };

    #[test]
    fn eval_follows_the_instruction() {
        assert_eq!(eval(&MAX, 5u32, [9, 0]), (9, 5));
        assert_eq!(eval(&MAX, 12u32, [9, 0]), (12, 12));
        // Narrow cells wrap at their width.
        const INC: Salu = Salu {
            conds: &[],
            lo: &[Update::always(Src::Lo, Op::Add, Src::K(1))],
            hi: &[],
            out: &[SaluOutput::always(OutputSource::NewLo)],
        };
        assert_eq!(eval(&INC, 255u8, [0, 0]), (0u8, 0));
        // Pairs: halves independent, the second update taken when the first does not hold.
        const TWO: Salu = Salu {
            conds: &[Cond::new(Src::Hi, Cmp::Eq, Src::PhvHi)],
            lo: &[Update::new(Pred::C0, Src::Lo, Op::Add, Src::PhvLo), Update::set(Pred::C0.not(), Src::PhvLo)],
            hi: &[Update::set(Pred::ALWAYS, Src::PhvHi)],
            out: &[SaluOutput::new(Pred::C0, OutputSource::Predicate)],
        };
        assert_eq!(eval(&TWO, DualCell::new(3, 7), [4, 7]), (DualCell::new(7, 7), 1));
        assert_eq!(eval(&TWO, DualCell::new(3, 7), [4, 8]), (DualCell::new(4, 8), 0));
    }

    #[test]
    fn two_output_words() {
        // Tofino 2: the old low half when the operand is at least it, else the old high.
        const TWO: Salu = Salu {
            conds: &[Cond::new(Src::PhvLo, Cmp::GeU, Src::Lo)],
            lo: &[Update::set(Pred::C0, Src::PhvLo)],
            hi: &[],
            out: &[SaluOutput::new(Pred::C0, OutputSource::OldLo), SaluOutput::new(Pred::C0.not(), OutputSource::OldHi)],
        };
        assert_eq!(eval_words(&TWO, DualCell::new(3, 7), [5, 0]), (DualCell::new(5, 7), [3, 0, 0, 0]));
        assert_eq!(eval_words(&TWO, DualCell::new(9, 7), [5, 0]), (DualCell::new(9, 7), [0, 7, 0, 0]));
        assert_eq!(<(u32, u32) as SaluOut>::from_words([3, 4, 0, 0]), (3, 4));
        let e = check(&TWO.to_decl(), 32, &Target::tofino1()).join("; ");
        assert!(e.contains("2 output words"), "{e}");
        assert!(check(&TWO.to_decl(), 32, &Target::tofino2()).is_empty());
        assert!(check_shape(&TWO.to_decl(), 64, 1, 1).iter().any(|m| m.contains("2 output words")));
    }

    #[test]
    fn wrapping_compare_is_the_32_bit_difference() {
        // A deadline just before the wrap and a clock just after it: 0x10 - 0xFFFF_FFF0 is
        // 0x20 in 32 bits (expired), while the exact difference is negative.
        const EXPIRED: Salu = Salu {
            conds: &[Cond::new(Src::PhvLo, Cmp::GtW, Src::Lo)],
            lo: &[],
            hi: &[],
            out: &[SaluOutput::always(OutputSource::Predicate)],
        };
        const EXACT: Salu = Salu {
            conds: &[Cond::new(Src::PhvLo, Cmp::GtS, Src::Lo)],
            lo: &[],
            hi: &[],
            out: &[SaluOutput::always(OutputSource::Predicate)],
        };
        assert_eq!(eval(&EXPIRED, 0xFFFF_FFF0u32, [0x10, 0]).1, 1);
        assert_eq!(eval(&EXACT, 0xFFFF_FFF0u32, [0x10, 0]).1, 1, "signed exact: -16 < 16");
        // Across the signed wrap (2^31) the exact signed compare is wrong, the wrapping one not.
        let (d, now) = (0x7FFF_FFF0u32, 0x8000_0010u32);
        assert_eq!(eval(&EXPIRED, d, [now, 0]).1, 1);
        assert_eq!(eval(&EXACT, d, [now, 0]).1, 0, "exact signed: now reads as negative");
        // Not yet: the deadline ahead of the clock, across the wrap.
        assert_eq!(eval(&EXPIRED, 0x10u32, [0xFFFF_FFF0, 0]).1, 0);
        assert_eq!(eval(&EXPIRED, 5u32, [5, 0]).1, 0, "equal is not after");
        // The constant takes part in the same 32-bit sum (0x20 - 0x20 == 0); the other forms.
        for (cmp, k, want) in [(Cmp::GeW, 0, 1), (Cmp::LtW, 0, 0), (Cmp::LeW, -0x20, 1), (Cmp::GtW, -0x20, 0)] {
            let conds: &'static [Cond] = Box::leak(Box::new([Cond::linear(Src::PhvLo, Src::Lo, k, cmp)]));
            const OUT: &[SaluOutput] = &[SaluOutput::always(OutputSource::Predicate)];
            let s = Salu { conds, lo: &[], hi: &[], out: OUT };
            assert_eq!(eval(&s, 0xFFFF_FFF0u32, [0x10, 0]).1, want, "{cmp:?} k={k}");
        }
    }

    #[test]
    fn predicates_know_their_conditions() {
        assert_eq!(Pred::ALWAYS.conds_used(), 0);
        assert_eq!(Pred::C0.conds_used(), 1);
        assert_eq!(Pred::C0.and(Pred::C1.not()).conds_used(), 2);
        assert_eq!(Pred::C3.conds_used(), 4);
    }

    #[test]
    fn limits_are_the_targets() {
        let three = SaluDecl {
            conds: vec![Cond::new(Src::Lo, Cmp::Eq, Src::PhvLo); 3],
            lo: vec![Update::always(Src::Lo, Op::Add, Src::K(1)); 3],
            hi: vec![],
            out: vec![SaluOutput::always(OutputSource::OldLo); 2],
        };
        let e = check(&three, 32, &Target::tofino1()).join("; ");
        assert!(e.contains("3 conditions") && e.contains("3 updates of the lo half") && e.contains("2 output words"), "{e}");
        assert!(check(&MAX.to_decl(), 32, &Target::tofino1()).is_empty());
        let k = SaluDecl {
            conds: vec![],
            lo: (0..5).map(|i| Update::always(Src::Lo, Op::Add, Src::K(100 + i))).collect(),
            hi: vec![],
            out: vec![],
        };
        assert!(check(&k, 32, &Target::tofino1()).iter().any(|m| m.contains("register file")));
        assert!(check(&three, 32, &Target::unbounded()).is_empty());
        assert!(check_shape(&MAX.to_decl(), 32, 0, 1).iter().any(|m| m.contains("PHV operand 0")));
    }
}
