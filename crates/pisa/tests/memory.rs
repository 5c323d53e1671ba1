//! Block memories and payload-analyzer items (the FPGA additions): one access per memory
//! per item, items bounded by the declaration, indexes checked; Tofino reports refuse them.

use std::sync::Arc;

use pisa::*;

struct Items {
    decl: ProgramDecl,
    mem: Memory,
}

impl Program for Items {
    fn decl(&self) -> &ProgramDecl {
        &self.decl
    }
    // Byte 0: items to stream; byte 1: 1 = touch the memory twice in one item; byte 2: word.
    fn ingress(&self, p: &mut Pass<'_>) {
        let (n, twice, word) = (p.hdr()[0], p.hdr()[1], p.hdr()[2] as u32);
        p.forward(1);
        for i in 0..n {
            if i > 0 && !p.next_item() {
                return;
            }
            p.access(&self.mem, word, |w| w[0] = w[0].wrapping_add(1));
            if twice == 1 {
                p.access(&self.mem, word, |w| w[0] = w[0].wrapping_add(1));
            }
        }
    }
}

fn switch() -> (Switch, Arc<ProgramSet>) {
    let mut b = ProgramBuilder::new("items", "");
    b.parser(16, &[]).items_per_pass(4);
    let mem = b.memory("m", Gress::Ingress, 1, MemoryKind::Sram, 8, 32, "");
    let set = Arc::new(ProgramSet::new(vec![Arc::new(Items { decl: b.build().unwrap(), mem })]).unwrap());
    (Switch::new(set.clone(), 2, 1, PipeConfig::default()), set)
}

fn send(sw: &mut Switch, n: u8, twice: u8, word: u8) -> usize {
    let mut b = vec![0u8; 16];
    (b[0], b[1], b[2]) = (n, twice, word);
    let mut rx = vec![PacketBuf::from_slice(&b, 0)];
    sw.process(&mut rx, 1);
    sw.drain_all().len()
}

#[test]
fn items_restart_the_stages_within_their_bound() {
    let (mut sw, _) = switch();
    assert_eq!(send(&mut sw, 4, 0, 3), 1, "four items, one access each");
    assert_eq!(sw.pipes()[0].state(0).memory(0)[3 * 32], 4);
    assert_eq!(send(&mut sw, 5, 0, 3), 0, "a fifth item is beyond the declaration");
    assert_eq!(send(&mut sw, 1, 1, 3), 0, "two accesses in one item");
    assert_eq!(send(&mut sw, 1, 0, 8), 0, "word out of range");
    let v = &sw.counters().programs[0].violations;
    assert_eq!(v[Violation::DoubleAccess.index()], 2);
    assert_eq!(v[Violation::IndexOutOfRange.index()], 1);
}

#[test]
fn reports_refuse_memories_and_items_on_tofino() {
    let (_, set) = switch();
    let d = set.decl(0);
    let r = ResourceReport::new(&[d], &Target::tofino1());
    assert!(!r.fits);
    assert_eq!(r.problems.len(), 2, "{:?}", r.problems);
    let r = ResourceReport::new(&[d], &Target::switchagg_fpga());
    assert!(r.fits, "{:?}", r.problems);
    assert_eq!(r.memory_sram_bytes, 256);
    assert!(ResourceReport::new(&[d], &Target::unbounded()).fits);
}
