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

/// Three conditions: one more than a Tofino 1 stateful ALU has, within Tofino 2's four.
#[derive(Clone, Copy)]
struct Between;
impl SaluProgram<u32, (u32, u32), u32> for Between {
    const SALU: Salu = Salu {
        conds: &[
            Cond::new(Src::Lo, Cmp::GeU, Src::PhvLo),
            Cond::new(Src::Lo, Cmp::LeU, Src::PhvHi),
            Cond::new(Src::Lo, Cmp::Ne, Src::K(0)),
        ],
        lo: &[Update::new(Pred::C0.and(Pred::C1).and(Pred::C2), Src::Lo, Op::Add, Src::K(1))],
        hi: &[],
        out: &[SaluOutput::always(OutputSource::Predicate)],
    };
}

struct Alu(ProgramDecl);
impl Program for Alu {
    fn decl(&self) -> &ProgramDecl {
        &self.0
    }
    fn ingress(&self, _: &mut Pass<'_>) {}
}

fn alu_program(declared: bool) -> Arc<dyn Program> {
    let mut b = ProgramBuilder::new("alu", "test program: one register action");
    b.parser(64, &[("probe", 512)]);
    let r = b.register::<u32>("window", Gress::Ingress, 0, 16, "");
    if declared {
        b.register_action_salu(r, "between", Between);
    } else {
        b.register_action(r, "read", read);
    }
    Arc::new(Alu(b.build().unwrap()))
}

#[test]
fn a_register_action_beyond_the_stateful_alu_is_refused_by_name() {
    let e = ProgramSet::load_on(vec![alu_program(true)], &Target::tofino1()).err().expect("three conditions on Tofino 1");
    let msg = e.to_string();
    assert!(msg.contains("alu.window.between") && msg.contains("3 conditions") && msg.contains("2 condition units"), "{msg}");
    assert!(ProgramSet::load_on(vec![alu_program(true)], &Target::tofino2()).is_ok(), "Tofino 2 has four");
}

#[test]
fn a_rust_body_is_reported_as_an_unchecked_alu() {
    let set = ProgramSet::new(vec![alu_program(false)]).unwrap();
    let r = ResourceReport::new(&[set.decl(0)], &Target::tofino1());
    assert_eq!(r.unchecked_alus, vec!["alu.window.read".to_string()]);
    assert!(!r.registers[0].actions[0].checked);
    let set = ProgramSet::new(vec![alu_program(true)]).unwrap();
    let r = ResourceReport::new(&[set.decl(0)], &Target::tofino2());
    assert!(r.unchecked_alus.is_empty() && r.registers[0].actions[0].checked && r.registers[0].actions[0].conditions == 3);
}

#[test]
fn an_instruction_naming_what_the_action_lacks_is_a_declaration_error() {
    #[derive(Clone, Copy)]
    struct ReadsHi;
    impl SaluProgram<u32, (), u32> for ReadsHi {
        const SALU: Salu = Salu { conds: &[], lo: &[], hi: &[], out: &[SaluOutput::always(OutputSource::OldHi)] };
    }
    let mut b = ProgramBuilder::new("bad", "");
    let r = b.register::<u32>("r", Gress::Ingress, 0, 16, "");
    b.register_action_salu(r, "hi", ReadsHi);
    let e = b.build().expect_err("a 32-bit cell has no high half");
    let msg = format!("{e:?}");
    assert!(msg.contains("`r.hi`") && msg.contains("high half of a 32-bit cell"), "{msg}");
}
