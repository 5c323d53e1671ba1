//! A program set is checked against its target when it is loaded, before any packet.

use std::sync::Arc;

use pisa::program::SetError;
use pisa::*;

fn read(c: u32, _: ()) -> (u32, u32) {
    (c, c)
}

/// `salus` register arrays in ingress stage 0 and one in stage `last`.
struct Shape {
    decl: ProgramDecl,
}

impl Shape {
    fn new(salus: usize, last: u8) -> Shape {
        let mut b = ProgramBuilder::new("shape", "test program: objects placed for the load check");
        b.parser(64, &[("probe", 512)]);
        for i in 0..salus {
            let r = b.register::<u32>(&format!("r{i}"), Gress::Ingress, 0, 16, "");
            b.register_action(r, "read", read);
        }
        let r = b.register::<u32>("deep", Gress::Ingress, last, 16, "");
        b.register_action(r, "read", read);
        Shape { decl: b.build().unwrap() }
    }
}

impl Program for Shape {
    fn decl(&self) -> &ProgramDecl {
        &self.decl
    }
    fn ingress(&self, _: &mut Pass<'_>) {}
}

fn load(salus: usize, last: u8) -> Result<ProgramSet, SetError> {
    ProgramSet::load_on(vec![Arc::new(Shape::new(salus, last))], &Target::tofino1())
}

#[test]
fn a_program_that_fits_loads() {
    let t = Target::tofino1();
    assert!(load(t.salus_per_stage as usize, t.stages as u8 - 1).is_ok());
}

#[test]
fn too_many_objects_in_a_stage_are_refused_by_name() {
    let t = Target::tofino1();
    let e = load(t.salus_per_stage as usize + 1, 1).err().expect("one stateful ALU too many");
    let msg = e.to_string();
    assert!(msg.contains("tofino1") && msg.contains("stage 0") && msg.contains("stateful ALUs"), "{msg}");
    let last = format!("shape.r{}", t.salus_per_stage);
    assert!(msg.contains(&last), "the message names the objects of the stage: {msg}");
}

#[test]
fn a_stage_beyond_the_pipeline_is_refused_by_name() {
    let t = Target::tofino1();
    let e = load(1, t.stages as u8).err().expect("one stage too deep");
    let msg = e.to_string();
    assert!(msg.contains("shape.deep") && msg.contains(&format!("the target has {}", t.stages)), "{msg}");
    // The same set loads without a target's limits (the model's own), as before.
    assert!(ProgramSet::new(vec![Arc::new(Shape::new(1, t.stages as u8))]).is_ok());
}
