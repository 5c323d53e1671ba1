//! The best-effort replacement counter (NetSHa §3.6, Figure 7): replacements are allowed
//! while fewer than H = λ × #registers have happened; after that, answers of queries
//! without a register are forwarded unreduced. The counter goes back to 0 when a register
//! becomes available (the timer releases one). λ = 0 is the bypass-forwarding (BF)
//! mechanism of Fig. 20.

use pisa::{Cmp, Cond, Op, OutputSource, Pred, Salu, SaluOutput, SaluProgram, Src, Update};

/// Ask for one replacement (operand: H); out 1 if granted.
pub const OP_GRANT: u32 = 0;
/// A register became available.
pub const OP_RESET: u32 = 1;

/// H for λ and R (rounded down, as an integer threshold must be).
pub fn threshold(lambda: f64, registers: u32) -> u32 {
    (lambda.max(0.0) * registers as f64).floor() as u32
}

#[derive(Clone, Copy)]
pub struct BestEffortAlu;

/// Conditions: c0 RESET, c1 below the threshold; the grant (1 or 0) comes from the high
/// update ALUs.
impl SaluProgram<u32, (u32, u32), u32> for BestEffortAlu {
    const SALU: Salu = Salu {
        conds: &[Cond::new(Src::PhvLo, Cmp::Eq, Src::K(OP_RESET as i32)), Cond::new(Src::Lo, Cmp::LtU, Src::PhvHi)],
        lo: &[Update::set(Pred::C0, Src::K(0)), Update::new(Pred::C1, Src::Lo, Op::Add, Src::K(1))],
        hi: &[Update::set(Pred::C1.and(Pred::C0.not()), Src::K(1)), Update::set(Pred::ALWAYS, Src::K(0))],
        out: &[SaluOutput::always(OutputSource::NewHi)],
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_up_to_h_then_resets() {
        let h = threshold(0.04, 100);
        assert_eq!(h, 4);
        let mut c = 0;
        let mut granted = 0;
        for _ in 0..10 {
            let (n, g) = BestEffortAlu.run(c, (OP_GRANT, h));
            c = n;
            granted += g;
        }
        assert_eq!(granted, 4);
        assert_eq!(BestEffortAlu.run(c, (OP_RESET, h)).0, 0);
        assert_eq!(BestEffortAlu.run(0, (OP_GRANT, 0)).1, 0, "λ = 0 never replaces");
    }
}
