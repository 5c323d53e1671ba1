//! Saturating 32-bit arithmetic (INaaS §IV-D "Quantization and overflow") and the stateless
//! compute primitive's operators 0–9 (§IV-C).
//!
//! Values are two's-complement 32-bit integers in `[-MAX, MAX]`: an overflowing result is
//! set to `MAX` or `-MAX` (the paper's predefined MAX_INT / MIN_INT) and reported, so the
//! goalkeeper can complete it exactly. `i32::MIN` is never a value: it is [`MISS`], what a
//! register action returns when it did not run (key mismatch).

use wire::inaas::Operator;

/// Largest value; `-VALUE_MAX` is the smallest.
pub const VALUE_MAX: i32 = i32::MAX;
/// What a keyed register action returns when the key does not match: never a value.
pub const MISS: i32 = i32::MIN;

/// `a + b`, saturated to `[-MAX, MAX]`; `true` when it saturated.
#[inline]
pub fn sat_add(a: i32, b: i32) -> (i32, bool) {
    let exact = a as i64 + b as i64;
    clamp(exact)
}

/// `a - b`, saturated; `true` when it saturated.
#[inline]
pub fn sat_sub(a: i32, b: i32) -> (i32, bool) {
    clamp(a as i64 - b as i64)
}

#[inline]
fn clamp(x: i64) -> (i32, bool) {
    if x > VALUE_MAX as i64 {
        (VALUE_MAX, true)
    } else if x < -(VALUE_MAX as i64) {
        (-VALUE_MAX, true)
    } else {
        (x as i32, false)
    }
}

/// The compute primitive: `value := op(value, param)`, the parameter being the item's key
/// field. Returns the result and whether it overflowed (add and sub only). Shifts take
/// the low 5 bits of the parameter, as a barrel shifter does; NOT ignores the parameter.
#[inline]
pub fn compute(op: Operator, value: i32, param: u32) -> (i32, bool) {
    let p = param as i32;
    match op {
        Operator::Add => sat_add(value, p),
        Operator::Sub => sat_sub(value, p),
        Operator::Shl => ((value as u32).wrapping_shl(param & 31) as i32, false),
        Operator::Shr => ((value as u32).wrapping_shr(param & 31) as i32, false),
        Operator::And => (value & p, false),
        Operator::Or => (value | p, false),
        Operator::Xor => (value ^ p, false),
        Operator::Not => (!value, false),
        Operator::Max => (value.max(p), false),
        Operator::Min => (value.min(p), false),
    }
}

/// The exact result the goalkeeper completes an overflowed compute with.
pub fn compute_exact(op: Operator, value: i32, param: u32) -> i64 {
    match op {
        Operator::Add => value as i64 + param as i32 as i64,
        Operator::Sub => value as i64 - param as i32 as i64,
        _ => compute(op, value, param).0 as i64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saturates_both_ways() {
        assert_eq!(sat_add(VALUE_MAX - 1, 5), (VALUE_MAX, true));
        assert_eq!(sat_add(-VALUE_MAX + 1, -5), (-VALUE_MAX, true));
        assert_eq!(sat_add(3, -5), (-2, false));
        assert_eq!(sat_sub(-VALUE_MAX, 1), (-VALUE_MAX, true));
        assert_eq!(compute(Operator::Shl, 1, 33), (2, false));
        assert_eq!(compute(Operator::Not, 0, 7), (-1, false));
        assert_eq!(compute_exact(Operator::Add, VALUE_MAX, 10), VALUE_MAX as i64 + 10);
    }
}
