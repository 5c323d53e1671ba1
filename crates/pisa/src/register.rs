//! Register arrays and register actions (Tofino's `Register` and `RegisterAction`).
//!
//! A register array lives in one stage and one gress and has one stateful ALU. A packet
//! may run one of the array's register actions on one index per pass: a read-modify-write
//! of one cell that can return one value. The action body is a plain `fn`, or a unit
//! struct implementing [`SaluBody`] (no captured state either way), which is what a
//! stateful ALU is: it takes the cell's value and the operands the
//! packet brings and returns the cell's new value and its output, nothing else. Keep
//! bodies to what a stateful ALU can do (two comparisons, two updates per 32-bit half, one
//! output); the model cannot check the body's arithmetic, only its shape and how often it
//! runs.

use std::marker::PhantomData;

use crate::base::ObjRef;

/// A value a register cell can hold. Cells are stored as `u64` bit patterns.
pub trait Cell: Copy + Default + Send + Sync + 'static {
    /// Width in bits (1, 8, 16, 32, or 64 for a [`DualCell`]).
    const BITS: u32;
    fn from_bits(v: u64) -> Self;
    fn to_bits(self) -> u64;
}

/// A value a register action takes from or returns to the packet: its width is counted.
pub trait SaluValue: 'static {
    const BITS: u32;
}

macro_rules! uint_cell {
    ($t:ty, $bits:expr) => {
        impl Cell for $t {
            const BITS: u32 = $bits;
            #[inline(always)]
            fn from_bits(v: u64) -> Self {
                v as $t
            }
            #[inline(always)]
            fn to_bits(self) -> u64 {
                self as u64
            }
        }
        impl SaluValue for $t {
            const BITS: u32 = $bits;
        }
    };
}
uint_cell!(u8, 8);
uint_cell!(u16, 16);
uint_cell!(u32, 32);

impl Cell for bool {
    const BITS: u32 = 1;
    #[inline(always)]
    fn from_bits(v: u64) -> Self {
        v & 1 != 0
    }
    #[inline(always)]
    fn to_bits(self) -> u64 {
        self as u64
    }
}
impl SaluValue for bool {
    const BITS: u32 = 1;
}
impl SaluValue for () {
    const BITS: u32 = 0;
}
impl SaluValue for i32 {
    const BITS: u32 = 32;
}
impl SaluValue for u64 {
    const BITS: u32 = 64;
}

/// A 64-bit register cell of two 32-bit halves, `lo` and `hi`: what a stateful ALU in
/// Tofino's dual-width mode reads and writes as one cell (each half with its own
/// comparison and update). Not a key-value pair.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DualCell {
    pub lo: u32,
    pub hi: u32,
}

impl DualCell {
    pub const fn new(lo: u32, hi: u32) -> DualCell {
        DualCell { lo, hi }
    }
}

impl Cell for DualCell {
    const BITS: u32 = 64;
    #[inline(always)]
    fn from_bits(v: u64) -> Self {
        DualCell { lo: v as u32, hi: (v >> 32) as u32 }
    }
    #[inline(always)]
    fn to_bits(self) -> u64 {
        ((self.hi as u64) << 32) | self.lo as u64
    }
}
impl SaluValue for DualCell {
    const BITS: u32 = 64;
}

impl<A: SaluValue, B: SaluValue> SaluValue for (A, B) {
    const BITS: u32 = A::BITS + B::BITS;
}

/// Handle to a register array of cells `T`, returned by the program builder.
pub struct Register<T: Cell> {
    pub(crate) obj: ObjRef,
    pub(crate) idx: u16,
    pub(crate) size: u32,
    /// Where its cells start in the program's register memory (all arrays back to back,
    /// in declaration order: see `pass::ProgramState`), so a pass reaches a cell with one
    /// addition instead of through a table of arrays.
    pub(crate) offset: u64,
    _t: PhantomData<fn() -> T>,
}

impl<T: Cell> Clone for Register<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: Cell> Copy for Register<T> {}

impl<T: Cell> Register<T> {
    pub(crate) fn new(obj: ObjRef, idx: u16, size: u32, offset: u64) -> Self {
        Register { obj, idx, size, offset, _t: PhantomData }
    }
    /// Number of cells.
    pub fn size(&self) -> u32 {
        self.size
    }
    /// Index of this array in its program's register list (control-plane order).
    pub fn index(&self) -> usize {
        self.idx as usize
    }
}

/// The body of a register action: old cell value and packet operand in, new cell value
/// and output out. (By value, so the cell stays in registers across the call.)
pub type SaluFn<T, I, O> = fn(T, I) -> (T, O);

/// What a register action's stateful ALU computes. A plain [`SaluFn`] is one (called
/// through a pointer); a unit struct implementing this trait is another, and the compiler
/// can inline it into the pass, which matters for actions run on every packet:
///
/// ```ignore
/// #[derive(Clone, Copy)]
/// struct Count;
/// impl SaluBody<DualCell, u32, ()> for Count {
///     fn run(self, c: DualCell, bytes: u32) -> (DualCell, ()) {
///         (DualCell::new(c.lo.wrapping_add(1), c.hi.wrapping_add(bytes)), ())
///     }
/// }
/// ```
pub trait SaluBody<T, I, O>: Copy + Send + Sync + 'static {
    fn run(self, cell: T, input: I) -> (T, O);
}

impl<T: 'static, I: 'static, O: 'static> SaluBody<T, I, O> for SaluFn<T, I, O> {
    #[inline(always)]
    fn run(self, cell: T, input: I) -> (T, O) {
        self(cell, input)
    }
}

/// Handle to one register action of a register array: what the stateful ALU does when a
/// packet executes it. `B` is the body: a `fn` by default, or a zero-sized [`SaluBody`].
pub struct RegisterAction<T: Cell, I, O, B = SaluFn<T, I, O>> {
    pub(crate) reg: Register<T>,
    pub(crate) body: B,
    _io: PhantomData<fn(I) -> O>,
}

impl<T: Cell, I, O, B: Copy> Clone for RegisterAction<T, I, O, B> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: Cell, I, O, B: Copy> Copy for RegisterAction<T, I, O, B> {}

impl<T: Cell, I, O, B> RegisterAction<T, I, O, B> {
    pub(crate) fn new(reg: Register<T>, body: B) -> Self {
        RegisterAction { reg, body, _io: PhantomData }
    }
    pub fn register(&self) -> Register<T> {
        self.reg
    }
}
