//! Values with the stage that produced them, so the pass can refuse a value used in the
//! stage it was produced in.
//!
//! On the hardware every object of a stage reads the packet's fields as they entered the
//! stage: an output produced in stage s (a register action's output, a hash unit's
//! result) reaches the fields only at the end of stage s, so it can be an index or an
//! operand from stage s+1 on. The pass hands such outputs out as [`Staged`] values that
//! remember the first position they may be used at; arithmetic on them keeps it (the
//! latest of the operands'), and an access given one too early is a
//! [`crate::pass::Violation::StageOrder`]. A plain number (header field, constant) may be
//! used anywhere. The check is one comparison per access, on a `u16` carried beside the
//! value: nothing is looked up. What a program takes out with [`Staged::get`] (to write a
//! header, decide a drop) is no longer tracked; see `docs/pisa-rules.md`.

use std::cmp::Ordering;
use std::ops;

/// A value and the first stage position (`gress << 8 | stage`) where it may be used as an
/// index or operand: its producer's position plus one, or 0 for a value that was in the
/// packet or the program from the start.
#[derive(Clone, Copy, Debug, Default)]
pub struct Staged<T> {
    value: T,
    after: u16,
}

impl<T> Staged<T> {
    /// A value usable at any stage (a header field, a constant).
    #[inline(always)]
    pub const fn now(value: T) -> Staged<T> {
        Staged { value, after: 0 }
    }
    /// A value produced by an object at position `pos`: usable from the next stage.
    #[inline(always)]
    pub(crate) const fn produced_at(value: T, pos: u16) -> Staged<T> {
        Staged { value, after: pos + 1 }
    }
    /// A value usable from position `pos` on, in that stage too (a hash unit's result: the
    /// stage's hash distribution feeds its own stateful ALUs' addresses).
    #[inline(always)]
    pub(crate) const fn usable_at(value: T, pos: u16) -> Staged<T> {
        Staged { value, after: pos }
    }
    /// The value itself, no longer tracked (for headers, decisions and counters: what the
    /// deparser and the traffic manager see after the last stage).
    #[inline(always)]
    pub fn get(self) -> T {
        self.value
    }
    /// The first position where the value may be used.
    #[inline(always)]
    pub fn after(&self) -> u16 {
        self.after
    }
    /// A value computed from this one (it depends on the same producer).
    #[inline(always)]
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Staged<U> {
        Staged { value: f(self.value), after: self.after }
    }
    /// A value computed from this one and `other` (it depends on both producers).
    #[inline(always)]
    pub fn zip<U, R>(self, other: impl StagedArg<U>, f: impl FnOnce(T, U) -> R) -> Staged<R> {
        let o = other.staged();
        Staged { value: f(self.value, o.value), after: self.after.max(o.after) }
    }
}

/// What an index or operand may be given as: a plain value, or a [`Staged`] one.
pub trait StagedArg<T> {
    fn staged(self) -> Staged<T>;
}
impl<T> StagedArg<T> for T {
    #[inline(always)]
    fn staged(self) -> Staged<T> {
        Staged::now(self)
    }
}
impl<T> StagedArg<T> for Staged<T> {
    #[inline(always)]
    fn staged(self) -> Staged<T> {
        self
    }
}

impl<T: PartialEq> PartialEq<T> for Staged<T> {
    #[inline(always)]
    fn eq(&self, other: &T) -> bool {
        self.value == *other
    }
}
impl<T: PartialEq> PartialEq for Staged<T> {
    #[inline(always)]
    fn eq(&self, other: &Staged<T>) -> bool {
        self.value == other.value
    }
}
impl<T: PartialOrd> PartialOrd<T> for Staged<T> {
    #[inline(always)]
    fn partial_cmp(&self, other: &T) -> Option<Ordering> {
        self.value.partial_cmp(other)
    }
}

macro_rules! staged_op {
    ($tr:ident, $f:ident) => {
        impl<T: ops::$tr<Output = T>> ops::$tr<T> for Staged<T> {
            type Output = Staged<T>;
            #[inline(always)]
            fn $f(self, rhs: T) -> Staged<T> {
                Staged { value: ops::$tr::$f(self.value, rhs), after: self.after }
            }
        }
        impl<T: ops::$tr<Output = T>> ops::$tr<Staged<T>> for Staged<T> {
            type Output = Staged<T>;
            #[inline(always)]
            fn $f(self, rhs: Staged<T>) -> Staged<T> {
                Staged { value: ops::$tr::$f(self.value, rhs.value), after: self.after.max(rhs.after) }
            }
        }
    };
}
staged_op!(Add, add);
staged_op!(Sub, sub);
staged_op!(Mul, mul);
staged_op!(Div, div);
staged_op!(Rem, rem);
staged_op!(BitAnd, bitand);
staged_op!(BitOr, bitor);
staged_op!(BitXor, bitxor);

macro_rules! staged_shift {
    ($($t:ty),*) => {$(
        impl ops::Shl<u32> for Staged<$t> {
            type Output = Staged<$t>;
            #[inline(always)]
            fn shl(self, rhs: u32) -> Staged<$t> {
                Staged { value: self.value << rhs, after: self.after }
            }
        }
        impl ops::Shr<u32> for Staged<$t> {
            type Output = Staged<$t>;
            #[inline(always)]
            fn shr(self, rhs: u32) -> Staged<$t> {
                Staged { value: self.value >> rhs, after: self.after }
            }
        }
    )*};
}
staged_shift!(u8, u16, u32, u64);

macro_rules! plain_lhs_op {
    ($tr:ident, $f:ident; $($t:ty),*) => {$(
        impl ops::$tr<Staged<$t>> for $t {
            type Output = Staged<$t>;
            #[inline(always)]
            fn $f(self, rhs: Staged<$t>) -> Staged<$t> {
                Staged { value: ops::$tr::$f(self, rhs.value), after: rhs.after }
            }
        }
    )*};
}
plain_lhs_op!(Add, add; u8, u16, u32, u64);
plain_lhs_op!(Sub, sub; u8, u16, u32, u64);
plain_lhs_op!(Mul, mul; u8, u16, u32, u64);
plain_lhs_op!(BitOr, bitor; u8, u16, u32, u64);
plain_lhs_op!(BitAnd, bitand; u8, u16, u32, u64);
