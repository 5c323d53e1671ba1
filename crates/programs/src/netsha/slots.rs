//! The answer slots of the logical registers and `Slot_Sort` (NetSHa §3.4, §4, Figure 9).
//!
//! Each of the n = p + q slots of a logical register is one physical register array
//! (`slot_0` … `slot_{n-1}`, each in its own stage), indexed by hash(QID), so a packet can
//! touch every slot of its logical register in one pass, once each.
//!
//! A slot holds one answer in two arrays: `slot_d_i`, the distance as a 32-bit
//! order-preserving code ([`encode_distance`], 0 = empty), and `slot_id_i`, the data id,
//! one stage later. A stateful ALU returns at most 32 bits, so the compare-and-swap runs
//! on the distance, and the id array follows the swap decision (known from the distance
//! ALU's output) in the next stage; slot i+1's distance runs in that same stage, so n
//! slots take n + 1 stages. The wire keeps the paper's 8-byte distance; a register keeps
//! 32 bits of it.
//!
//! Layout: the slots are kept sorted **worst first in stage order** (`slot_0` holds the
//! worst answer), filled from `slot_0`, empty slots at the end. `Slot_Sort` is then a
//! pipelined insertion, one compare-and-swap per slot: the incoming answer is carried
//! through the stages; a slot keeps the worse of (its answer, the carried one) and passes
//! the better one on. This is the paper's bubble-sort insertion walked in the direction
//! the pipeline goes, and it has the property Algorithm 1 needs: the p GA answers (the
//! best) are the last p slots, so sending them clears exactly those slots and leaves the
//! q PA answers in place, in order.

use pisa::{Cmp, Cond, DualCell, Op, OutputSource, Pred, Salu, SaluOutput, SaluProgram, Src, Update};

/// An empty slot.
pub const EMPTY: DualCell = DualCell::new(0, 0);

/// Slot register action operand: insert (compare-and-swap with the carried answer).
pub const OP_INSERT: u32 = 0;
/// Slot register action operand: take the answer out and leave the slot empty.
pub const OP_TAKE: u32 = 1;

/// The 32-bit code of a distance: order-preserving (d1 < d2 implies code(d1) <= code(d2),
/// and the codes of f32-representable distances are distinct), never 0. Distances are the
/// IEEE-754 single-precision bits plus one, which orders non-negative numbers. Negative
/// and NaN distances are rejected by the parser before they reach a register.
#[inline]
pub fn encode_distance(d: f64) -> u32 {
    (d as f32).to_bits().saturating_add(1)
}

/// The distance a code stands for (exact for distances computed in f32, as the servers do).
#[inline]
pub fn decode_distance(code: u32) -> f64 {
    f32::from_bits(code.saturating_sub(1)) as f64
}

/// Whether a distance may enter a register (finite or +inf, not negative, not NaN).
#[inline]
pub fn valid_distance(d: f64) -> bool {
    d >= 0.0
}

/// Id array operand: the swap happened, store the carried id and pass the old one on.
pub const OP_SWAP: u32 = 2;

/// The stateful ALU of a slot's distance: `(carried code, op)` in, the code passed on out.
/// Insert keeps the worse answer (larger code) and outputs the better one; take outputs
/// the stored code and empties the slot. The carried answer was swapped in exactly when
/// the output differs from it.
#[derive(Clone, Copy)]
pub struct SlotDistanceAlu;

/// Conditions: c0 the op is TAKE, c1 the carried distance is larger; the output (the
/// smaller distance, or the stored one on TAKE) comes from the high update ALUs.
impl SaluProgram<u32, (u32, u32), u32> for SlotDistanceAlu {
    const SALU: Salu = Salu {
        conds: &[Cond::new(Src::PhvHi, Cmp::Eq, Src::K(OP_TAKE as i32)), Cond::new(Src::PhvLo, Cmp::GtU, Src::Lo)],
        lo: &[Update::set(Pred::C0, Src::K(0)), Update::set(Pred::C1, Src::PhvLo)],
        hi: &[Update::set(Pred::C0, Src::Lo), Update::new(Pred::ALWAYS, Src::Lo, Op::MinU, Src::PhvLo)],
        out: &[SaluOutput::always(OutputSource::NewHi)],
    };
}

/// The stateful ALU of a slot's data id: swap (store the carried id, out the old), take
/// (out the old, store 0).
#[derive(Clone, Copy)]
pub struct SlotIdAlu;

/// Conditions: c0 SWAP, c1 TAKE; the output (the stored id on SWAP and TAKE, else the
/// carried one) comes from the high update ALUs.
impl SaluProgram<u32, (u32, u32), u32> for SlotIdAlu {
    const SALU: Salu = Salu {
        conds: &[Cond::new(Src::PhvHi, Cmp::Eq, Src::K(OP_SWAP as i32)), Cond::new(Src::PhvHi, Cmp::Eq, Src::K(OP_TAKE as i32))],
        lo: &[Update::set(Pred::C0, Src::PhvLo), Update::set(Pred::C1, Src::K(0))],
        hi: &[Update::set(Pred::C0.or(Pred::C1), Src::Lo), Update::set(Pred::ALWAYS, Src::PhvLo)],
        out: &[SaluOutput::always(OutputSource::NewHi)],
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_preserve_order() {
        let ds = [0.0, 1e-30, 0.5, 0.5000001, 1.0, 3.25, 1e9, f64::INFINITY];
        for w in ds.windows(2) {
            assert!(encode_distance(w[0]) < encode_distance(w[1]), "{w:?}");
        }
        assert!(encode_distance(0.0) > 0);
        for d in [0.0f32, 0.75, 12.5, 1e-3] {
            assert_eq!(decode_distance(encode_distance(d as f64)), d as f64);
        }
    }

    #[test]
    fn insertion_keeps_slots_sorted_worst_first() {
        let mut d = [0u32; 5];
        let mut ids = [0u32; 5];
        for (i, x) in [3.0, 1.0, 4.0, 1.5, 2.0].iter().enumerate() {
            let (mut cd, mut cid) = (encode_distance(*x), i as u32);
            for j in 0..5 {
                let (n, out) = SlotDistanceAlu.run(d[j], (cd, OP_INSERT));
                let op = if out != cd { OP_SWAP } else { OP_INSERT };
                d[j] = n;
                cd = out;
                let (n, out) = SlotIdAlu.run(ids[j], (cid, op));
                ids[j] = n;
                cid = out;
            }
            assert_eq!(cd, 0, "a register with room passes nothing on");
        }
        let got: Vec<f64> = d.iter().map(|s| decode_distance(*s)).collect();
        assert_eq!(got, vec![4.0, 3.0, 2.0, 1.5, 1.0]);
        assert_eq!(ids, [2, 0, 4, 3, 1], "ids follow their distances");
    }
}
