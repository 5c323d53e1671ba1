//! `Pass::prefetch` is a cache hint only: it changes no cell, reaches no object (the
//! stage order and once-per-pass rules still apply to the accesses themselves) and is
//! harmless at any index.

use std::sync::Arc;

use pisa::control::{ControlOp, ControlReply};
use pisa::*;

struct Hint {
    decl: ProgramDecl,
    early: RegisterAction<u32, u32, u32>,
    late: RegisterAction<u32, u32, u32>,
}

fn add(c: u32, x: u32) -> (u32, u32) {
    let n = c.wrapping_add(x);
    (n, n)
}

impl Program for Hint {
    fn decl(&self) -> &ProgramDecl {
        &self.decl
    }
    fn ingress(&self, p: &mut Pass<'_>) {
        let op = p.hdr()[0];
        p.forward(1);
        match op {
            // Hints for both arrays (and out of range) first, then the accesses in stage
            // order: legal, as without the hints.
            0 => {
                p.prefetch(&self.late, 3);
                p.prefetch(&self.early, 3);
                p.prefetch(&self.early, 1 << 30);
                p.execute(&self.early, 3, 1);
                p.execute(&self.late, 3, 1);
                p.prefetch(&self.early, 3); // after its stage: still no effect, no violation
            }
            // A hint does not make a backwards access legal.
            1 => {
                p.execute(&self.late, 0, 1);
                p.prefetch(&self.early, 0);
                p.execute(&self.early, 0, 1);
            }
            // Only hints: nothing changes.
            _ => {
                for i in 0..8 {
                    p.prefetch(&self.early, i);
                    p.prefetch(&self.late, i);
                }
            }
        }
    }
    fn egress(&self, _: &mut Pass<'_>) {}
}

fn hint() -> Hint {
    let mut b = ProgramBuilder::new("hint", "test program");
    b.parser(64, &[("h", 512)]);
    let r0 = b.register::<u32>("early", Gress::Ingress, 0, 8, "");
    let early = b.register_action(r0, "add", add);
    let r1 = b.register::<u32>("late", Gress::Ingress, 2, 8, "");
    let late = b.register_action(r1, "add", add);
    Hint { decl: b.build().unwrap(), early, late }
}

fn cells(sw: &mut Switch, set: &ProgramSet, reg: usize) -> Vec<u64> {
    match sw.control(&ControlOp::RegisterRead { register_id: set.ids(0).registers[reg], index: None }).unwrap() {
        ControlReply::RegisterCells(v) => v.into_iter().map(|c| c.1).collect(),
        _ => unreachable!(),
    }
}

#[test]
fn prefetch_is_a_hint_without_effect() {
    let set = Arc::new(ProgramSet::new(vec![Arc::new(hint())]).unwrap());
    let mut sw = Switch::new(set.clone(), 4, 1, PipeConfig::default());
    let frame = |op: u8| {
        let mut b = vec![0u8; 60];
        b[0] = op;
        PacketBuf::from_slice(&b, 0)
    };
    let mut v = vec![frame(2), frame(2)];
    sw.process(&mut v, 1_000);
    assert_eq!(sw.drain_all().len(), 2, "hints alone: forwarded");
    assert_eq!(cells(&mut sw, &set, 0), vec![0; 8]);
    assert_eq!(cells(&mut sw, &set, 1), vec![0; 8]);
    assert_eq!(sw.counters().total_drops(), 0);

    let mut v = vec![frame(0), frame(0)];
    sw.process(&mut v, 2_000);
    assert_eq!(sw.drain_all().len(), 2, "hints and legal accesses: forwarded");
    assert_eq!(cells(&mut sw, &set, 0), vec![0, 0, 0, 2, 0, 0, 0, 0]);
    assert_eq!(cells(&mut sw, &set, 1), vec![0, 0, 0, 2, 0, 0, 0, 0]);
    assert_eq!(sw.counters().total_drops(), 0);

    let mut v = vec![frame(1)];
    sw.process(&mut v, 3_000);
    assert!(sw.drain_all().is_empty(), "a backwards access is still a violation");
    let c = sw.counters();
    assert_eq!(c.programs[0].violations[Violation::StageOrder.index()], 1);
    assert_eq!(cells(&mut sw, &set, 0)[0], 0, "the illegal access did nothing");
    assert_eq!(cells(&mut sw, &set, 1)[0], 1, "the legal one did");
}
