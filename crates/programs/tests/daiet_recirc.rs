//! DAIET owns its recirculated passes (`ProgramBuilder::owns_recirculated_passes`): on a
//! recirculated pass the packet stays with DAIET and `forward`'s tables are not applied.
//! Checked here against the same DAIET without the declaration (every pass through
//! `forward` first, as before): the same frames leave, the same registers, counters and
//! digests result, and only `forward`'s pass count differs, by the recirculations.

use std::collections::HashMap;
use std::sync::Arc;

use pisa::{DropCode, PacketBuf, Pass, Program, ProgramBuilder, ProgramDecl, ProgramSet, Switch};
use programs::daiet::Daiet;
use programs::forward::Forward;
use wire::daiet::{flags, Op};

mod common;
use common::daiet_net::*;
use common::*;

const PARENT: u8 = 15;
const TREE: u16 = 100;
const CHILDREN: u8 = 12;

/// DAIET exactly as it is, but declared without `owns_recirculated_passes`: the switch then
/// classifies every recirculated pass again and runs `forward` on it first.
struct Plain {
    inner: Daiet,
    decl: ProgramDecl,
}

impl Plain {
    fn new() -> Plain {
        let inner = Daiet::new();
        let mut decl = inner.decl().clone();
        decl.owns_recirculated_passes = false;
        Plain { inner, decl }
    }
}

impl Program for Plain {
    fn decl(&self) -> &ProgramDecl {
        &self.decl
    }
    fn ingress(&self, pass: &mut Pass<'_>) {
        self.inner.ingress(pass)
    }
    fn egress(&self, pass: &mut Pass<'_>) {
        self.inner.egress(pass)
    }
}

fn plain_set() -> Arc<ProgramSet> {
    Arc::new(ProgramSet::new(vec![Arc::new(Forward::new()), Arc::new(Plain::new())]).unwrap())
}

fn daiet_frame(child: u8, seq: u32, fl: u8, pairs: &[(Vec<u8>, u32)]) -> Vec<u8> {
    daiet_data_frame(TREE, child, PARENT, child as u16, seq, fl, pairs)
}

/// What a run left behind.
struct Trace {
    frames: Vec<(u16, Vec<u8>)>,
    counters: pisa::counters::Counters,
    /// Every register cell of both programs.
    registers: Vec<Vec<u64>>,
    digests: Vec<(u8, u16, Vec<u8>)>,
    /// Frames sent into the switch (first passes).
    sent: u64,
}

/// Twelve children, a two-cell partition (most pairs collide: the spillover bucket fills and
/// is drained, and at times busy), rounds of one ten-pair packet per child in one batch (their passes
/// interleave), an ordinary frame and an ACK-flagged frame in each batch (first passes
/// only: `forward` decides them); in the last batch each child's END rides behind its last
/// data packet (it waits, recirculating, for it), and the last END walks the cells.
fn run(sw: &mut Switch, rounds: u32) -> (Trace, HashMap<Vec<u8>, u64>) {
    let mut r = Rng(11);
    let mut want: HashMap<Vec<u8>, u64> = HashMap::new();
    let mut frames = Vec::new();
    let mut sent = 0;
    for round in 0..rounds {
        let mut batch = Vec::new();
        for c in 1..=CHILDREN {
            let ps: Vec<(Vec<u8>, u32)> =
                (0..10).map(|_| (format!("k{}", r.next() % 37).into_bytes(), 1 + (r.next() % 9) as u32)).collect();
            for (k, v) in &ps {
                *want.entry(k.clone()).or_default() += *v as u64;
            }
            batch.push(PacketBuf::from_slice(&daiet_frame(c, round, 0, &ps), c as u16));
            if round + 1 == rounds {
                batch.push(PacketBuf::from_slice(&daiet_frame(c, round + 1, flags::END, &[]), c as u16));
            }
        }
        batch.push(PacketBuf::from_slice(&frame(1, 7, PARENT, 9, b"ordinary"), 1));
        batch.push(PacketBuf::from_slice(&daiet_frame(2, 0, flags::ACK, &[]), 2));
        sent += batch.len() as u64;
        sw.process(&mut batch, round as u64);
        for _ in 0..10_000 {
            if sw.pipes()[0].pending() == 0 {
                break;
            }
            sw.tick(round as u64);
        }
        assert_eq!(sw.pipes()[0].pending(), 0, "every pass ended");
        frames.extend(sw.drain_all());
    }
    let registers = (0..2)
        .flat_map(|p| {
            let n = sw.pipes()[0].set().decl(p).registers.len();
            (0..n).map(move |i| (p, i))
        })
        .map(|(p, i)| sw.pipes()[0].state(p).register(i).to_vec())
        .collect();
    let digests = sw.take_digests().into_iter().map(|d| (d.program, d.digest, d.data.to_vec())).collect();
    (Trace { frames, counters: sw.counters(), registers, digests, sent }, want)
}

fn network(set: Arc<ProgramSet>) -> Switch {
    let l2: Vec<(u8, u16)> = (1..=CHILDREN).map(|c| (c, c as u16)).chain([(PARENT, PARENT as u16)]).collect();
    let trees = [(TREE, tree(PARENT as u16, 0, 0, 2, Op::Sum, CHILDREN as u16, 250))];
    switch_of(set, 16, &l2, &trees)
}

#[test]
fn recirculated_daiet_passes_without_forward_give_the_same_result() {
    let (own, want) = run(&mut network(set()), 12);
    let (plain, _) = run(&mut network(plain_set()), 12);
    let (co, cp) = (&own.counters, &plain.counters);

    // The paths that recirculate were all taken: data passes, drains, the END's wait and walk.
    assert!(co.recirculations > 100, "recirculations {}", co.recirculations);
    assert!(co.clones > 12, "ACK clones of packets that filled or overflowed the bucket, walk clones: {}", co.clones);
    let to_parent = own.frames.iter().filter(|(p, _)| *p == PARENT as u16).count();
    assert!(to_parent > 10, "drained buckets and the walk's packets: {to_parent}");
    let s = set();
    let overflow = s.decl(1).registers.iter().position(|r| r.name == "spill_overflow").unwrap() + s.decl(0).registers.len();
    assert!(own.registers[overflow][0] > 0, "some colliding pairs found the bucket busy and went on in their packet");

    // Same frames out, in the same order, byte for byte.
    assert_eq!(own.frames.len(), plain.frames.len());
    assert!(own.frames == plain.frames, "the frames that left differ");
    // Same state and the same switch-wide counts.
    assert!(own.registers == plain.registers, "register state differs");
    assert_eq!(own.digests, plain.digests, "forward's MAC-learning digests");
    assert_eq!(co.drops, cp.drops);
    assert_eq!(co.recirculations, cp.recirculations);
    assert_eq!(co.clones, cp.clones);
    for (a, b) in co.ports.iter().zip(&cp.ports) {
        assert_eq!((a.rx_packets, a.tx_packets, a.tx_bytes), (b.rx_packets, b.tx_packets, b.tx_bytes));
    }
    // DAIET's own passes, drops and violations are the same.
    let (d, dp) = (&co.programs[1], &cp.programs[1]);
    assert_eq!(
        (d.ingress_passes, d.egress_passes, &d.drops, &d.violations),
        (dp.ingress_passes, dp.egress_passes, &dp.drops, &dp.violations)
    );
    assert!(d.violations.iter().all(|&v| v == 0));
    // `forward` still runs on every first pass (and every egress pass), not on recirculated ones.
    let (f, fp) = (&co.programs[0], &cp.programs[0]);
    assert_eq!(f.ingress_passes, own.sent, "forward once per frame received");
    assert_eq!(fp.ingress_passes, plain.sent + cp.recirculations, "before: forward on every pass");
    assert_eq!(f.egress_passes, fp.egress_passes);
    assert_eq!(co.drops[DropCode::NO_ROUTE.0 as usize], 0, "every recirculated pass chose its route");
    assert!(co.drops.iter().all(|&n| n == 0), "nothing dropped: {:?}", co.drops);

    // And the aggregate at the parent is the reference's (the computation without a switch).
    let mut got: HashMap<Vec<u8>, u64> = HashMap::new();
    let mut ends = 0;
    for (port, f) in &own.frames {
        let Some((_, _, payload)) = unframe(f) else { continue };
        let Ok(p) = wire::daiet::Packet::new_checked(payload) else { continue };
        if *port != PARENT as u16 || p.flags() & flags::FROM_SWITCH == 0 {
            continue;
        }
        if p.flags() & flags::END != 0 {
            ends += 1;
        }
        for (k, v) in p.pairs() {
            *got.entry(k.to_vec()).or_default() += v as u64;
        }
    }
    assert_eq!(ends, 1, "one END to the parent");
    assert_eq!(got, want);
}

/// The one route that used to come from `forward` on a recirculated pass: an END waiting
/// (recirculating) for its sender's packet in flight whose tree is removed meanwhile. DAIET
/// now decides it: a counted `daiet_tree_removed_in_flight` drop, like the admitted packet
/// beside it (the sender resends; the reducer's gap detection covers the rest).
#[test]
fn a_waiting_end_whose_tree_is_removed_is_a_counted_drop() {
    let set = set();
    let mut sw = network(set.clone());
    let ps: Vec<(Vec<u8>, u32)> = (0..10).map(|i| (format!("w{i}").into_bytes(), 1)).collect();
    let mut batch =
        vec![PacketBuf::from_slice(&daiet_frame(1, 0, 0, &ps), 1), PacketBuf::from_slice(&daiet_frame(1, 1, flags::END, &[]), 1)];
    sw.process(&mut batch, 0);
    assert_eq!(sw.pipes()[0].pending(), 2, "the data packet and the waiting END recirculate");
    remove_tree(&mut sw, &set, TREE);
    for _ in 0..100 {
        if sw.pipes()[0].pending() == 0 {
            break;
        }
        sw.tick(1);
    }
    assert!(sw.drain_all().is_empty(), "nothing left the switch");
    let code =
        DropCode::FIRST_PROGRAM as usize + set.decl(1).drop_reasons.iter().position(|r| r == "daiet_tree_removed_in_flight").unwrap();
    let c = sw.counters();
    assert_eq!(c.programs[1].drops[code], 2);
    assert_eq!(c.drops[DropCode::NO_ROUTE.0 as usize], 0);
}

#[test]
fn the_declaration_is_shown_and_only_for_an_application() {
    let d = Daiet::new();
    assert!(d.decl().owns_recirculated_passes);
    assert!(d.decl().notes.iter().any(|n| n.starts_with("owns its recirculated passes")));
    assert!(!Forward::new().decl().owns_recirculated_passes);
    let r = pisa::ResourceReport::new(&[d.decl()], &pisa::Target::tofino1());
    assert!(r.programs[0].notes.iter().any(|n| n.starts_with("owns its recirculated passes")));
    // The base program (no classification rules) cannot declare it.
    let mut b = ProgramBuilder::new("base", "a base program");
    b.owns_recirculated_passes();
    assert!(b.build().is_err());
}
