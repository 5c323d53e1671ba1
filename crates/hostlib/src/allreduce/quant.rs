//! Float32 to 32-bit fixed point with a per-chunk scale the workers agree on.
//!
//! SwitchML's scheme: the switch sums integers, so each chunk of [`ELEMS`] floats is
//! scaled by a power of two chosen from the largest magnitude in that chunk *over all
//! workers*. Instead of SwitchML's piggybacking of the next chunk's exponent on the
//! current packet, the workers run one round first that aggregates each chunk's local
//! exponent with the switch's MAX (32 exponents per packet: 1/32 of the data round's
//! packets). With the agreed exponent `e` (every |x| < 2^e) and `n` workers, values are
//! scaled by `2^(30 - ceil(log2 n) - e)`, so each |q| <= 2^(30 - ceil(log2 n)) and any sum
//! of `n` of them stays within ±2^30: the switch's wrapping 32-bit sum cannot overflow.
//!
//! Overflow handling: a non-finite input (±inf, NaN) makes its chunk's exponent
//! [`NONFINITE`]; every worker then sends zeros for that chunk and reads the result as
//! NaN, which is what a float sum with a non-finite term is (as IEEE says for inf - inf,
//! and the same chunk marked on every worker). An all-zero chunk's exponent is [`ZERO`].

use wire::allreduce::ELEMS;

/// Exponent code of a chunk that is zero on every worker.
pub const ZERO: u32 = 0;
/// Exponent code of a chunk holding a non-finite value on some worker (largest, so MAX keeps it).
pub const NONFINITE: u32 = u32::MAX;
/// Bias of a finite exponent code (codes are unsigned for the switch's MAX).
const BIAS: i32 = 1024;

/// The exponent code of one chunk: `e + BIAS` with every |x| < 2^e, or [`ZERO`] /
/// [`NONFINITE`].
pub fn chunk_exponent(xs: &[f32]) -> u32 {
    let mut code = ZERO;
    for &x in xs {
        if !x.is_finite() {
            return NONFINITE;
        }
        if x != 0.0 {
            // |x| = m * 2^e with m in [0.5, 1): |x| < 2^e.
            let bits = x.abs().to_bits();
            let biased = (bits >> 23) as i32;
            let e = if biased == 0 {
                // Subnormal: 2^-149 * mantissa.
                let m = bits & 0x7F_FFFF;
                -149 + (32 - m.leading_zeros() as i32)
            } else {
                biased - 127 + 1
            };
            code = code.max((e + BIAS) as u32);
        }
    }
    code
}

/// The exponent code of every chunk of `xs` (the last chunk may be short).
pub fn exponents(xs: &[f32]) -> Vec<u32> {
    xs.chunks(ELEMS).map(chunk_exponent).collect()
}

/// `ceil(log2 n)` for `n >= 1`.
fn log2_ceil(n: u32) -> i32 {
    (32 - (n.max(1) - 1).leading_zeros()) as i32
}

/// The power of two a chunk with exponent `code` is multiplied by, for `n` workers
/// (None: the chunk carries zeros: all-zero or non-finite).
pub fn shift(code: u32, n: u32) -> Option<i32> {
    if code == ZERO || code == NONFINITE {
        return None;
    }
    Some(30 - log2_ceil(n) - (code as i32 - BIAS))
}

/// Quantize `xs` with the agreed per-chunk exponent codes.
pub fn quantize(xs: &[f32], codes: &[u32], n: u32) -> Vec<i32> {
    let mut out = Vec::with_capacity(xs.len());
    for (chunk, &code) in xs.chunks(ELEMS).zip(codes) {
        match shift(code, n) {
            None => out.extend(std::iter::repeat_n(0, chunk.len())),
            Some(s) => {
                let scale = 2f64.powi(s);
                // |x * scale| < 2^(30 - log2 n) when the code is at least this chunk's: the
                // clamp only guards a caller passing a smaller code.
                let lim = (1i64 << (30 - log2_ceil(n))) as f64;
                out.extend(chunk.iter().map(|&x| (x as f64 * scale).round().clamp(-lim, lim) as i32));
            }
        }
    }
    out
}

/// Turn aggregated integers back into floats (NaN for a non-finite chunk).
pub fn dequantize(qs: &[i32], codes: &[u32], n: u32) -> Vec<f32> {
    let mut out = Vec::with_capacity(qs.len());
    for (chunk, &code) in qs.chunks(ELEMS).zip(codes) {
        match shift(code, n) {
            None if code == NONFINITE => out.extend(std::iter::repeat_n(f32::NAN, chunk.len())),
            None => out.extend(std::iter::repeat_n(0.0, chunk.len())),
            Some(s) => {
                let scale = 2f64.powi(-s);
                out.extend(chunk.iter().map(|&q| (q as f64 * scale) as f32));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn exponent_bounds_the_chunk() {
        assert_eq!(chunk_exponent(&[0.0, -0.0]), ZERO);
        assert_eq!(chunk_exponent(&[1.0]) as i32 - BIAS, 1);
        assert_eq!(chunk_exponent(&[0.75, -0.5]) as i32 - BIAS, 0);
        assert_eq!(chunk_exponent(&[f32::from_bits(1)]) as i32 - BIAS, -148);
        assert_eq!(chunk_exponent(&[1.0, f32::INFINITY]), NONFINITE);
        assert_eq!(chunk_exponent(&[f32::NAN]), NONFINITE);
    }

    proptest! {
        #[test]
        fn sums_never_overflow_and_round_trip(n in 1u32..64, xs in proptest::collection::vec(-1e6f32..1e6, 1..100)) {
            let codes = exponents(&xs);
            let q = quantize(&xs, &codes, n);
            // n workers each at the largest magnitude: still within i32.
            let worst: i64 = q.iter().map(|&v| (v as i64).abs()).max().unwrap() * n as i64;
            prop_assert!(worst <= 1 << 30);
            let back = dequantize(&q, &codes, n);
            for (c, (xc, bc)) in xs.chunks(ELEMS).zip(back.chunks(ELEMS)).enumerate() {
                if let Some(s) = shift(codes[c], n) {
                    let tol = 2f64.powi(-s) * 0.5 + 1e-30;
                    for (x, b) in xc.iter().zip(bc) {
                        prop_assert!(((*x as f64) - (*b as f64)).abs() <= tol + (*x as f64).abs() * 1e-7);
                    }
                }
            }
        }
    }
}
