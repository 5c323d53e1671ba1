//! A program's register arrays live back to back in one memory (see
//! `pass::ProgramState`): an index beyond one array is a violation and never reaches the
//! next array's cells, and the control plane reads and writes each array alone.

use std::sync::Arc;

use pisa::control::{ControlOp, ControlReply};
use pisa::*;

struct Two {
    decl: ProgramDecl,
    a: RegisterAction<u32, u32, u32>,
    b: RegisterAction<u32, u32, u32>,
}

fn add(c: u32, x: u32) -> (u32, u32) {
    let n = c.wrapping_add(x);
    (n, n)
}

impl Program for Two {
    fn decl(&self) -> &ProgramDecl {
        &self.decl
    }
    fn ingress(&self, p: &mut Pass<'_>) {
        // Byte 0: which array; byte 1: the index (4 is one past the end of either).
        let (which, index) = (p.hdr()[0], p.hdr()[1] as u32);
        p.forward(1);
        let a = if which == 0 { &self.a } else { &self.b };
        p.prefetch(a, index);
        p.execute(a, index, 1);
    }
    fn egress(&self, _: &mut Pass<'_>) {}
}

fn two() -> Two {
    let mut b = ProgramBuilder::new("two", "test program");
    b.parser(64, &[("h", 512)]);
    // Same stage, declared one after the other: adjacent in the program's register memory.
    let ra = b.register::<u32>("a", Gress::Ingress, 0, 4, "");
    let a = b.register_action(ra, "add", add);
    let rb = b.register::<u32>("b", Gress::Ingress, 0, 4, "");
    let bb = b.register_action(rb, "add", add);
    Two { decl: b.build().unwrap(), a, b: bb }
}

fn cells(sw: &mut Switch, set: &ProgramSet, reg: usize) -> Vec<u64> {
    match sw.control(&ControlOp::RegisterRead { register_id: set.ids(0).registers[reg], index: None }).unwrap() {
        ControlReply::RegisterCells(v) => v.into_iter().map(|c| c.1).collect(),
        _ => unreachable!(),
    }
}

#[test]
fn arrays_stay_apart_in_one_register_memory() {
    let set = Arc::new(ProgramSet::new(vec![Arc::new(two())]).unwrap());
    let mut sw = Switch::new(set.clone(), 4, 1, PipeConfig::default());
    let frame = |which: u8, index: u8| {
        let mut b = vec![0u8; 60];
        b[0] = which;
        b[1] = index;
        PacketBuf::from_slice(&b, 0)
    };
    let mut v = vec![frame(0, 3), frame(1, 0), frame(0, 4), frame(1, 4), frame(1, 200)];
    sw.process(&mut v, 1_000);
    assert_eq!(sw.drain_all().len(), 2, "the two legal accesses are forwarded");
    let c = sw.counters();
    assert_eq!(c.programs[0].violations[Violation::IndexOutOfRange.index()], 3);
    assert_eq!(cells(&mut sw, &set, 0), vec![0, 0, 0, 1], "a[4] did not reach b[0]");
    assert_eq!(cells(&mut sw, &set, 1), vec![1, 0, 0, 0], "b[4] and b[200] reached nothing");

    // Control-plane writes of a whole array fill that array only.
    sw.control(&ControlOp::RegisterWrite { register_id: set.ids(0).registers[0], index: None, value: 7 }).unwrap();
    assert_eq!(cells(&mut sw, &set, 0), vec![7; 4]);
    assert_eq!(cells(&mut sw, &set, 1), vec![1, 0, 0, 0]);
    assert!(sw.control(&ControlOp::RegisterWrite { register_id: set.ids(0).registers[0], index: Some(4), value: 1 }).is_err());
    assert_eq!(cells(&mut sw, &set, 1), vec![1, 0, 0, 0]);
}
