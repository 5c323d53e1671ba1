//! Every waiting loop of DAIET is bounded (`MAX_WAIT_PASSES`): an END waiting in
//! `seq_state` for its sender's packets in flight, and the flush walker waiting for the
//! spillover bucket's drains and stores, give up past the bound with a counted
//! `daiet_wait_exceeded` drop, so a packet lost inside the switch or a tree reconfigured
//! mid-job never leaves a packet recirculating forever. The switch keeps forwarding, the
//! tree is usable for the next job, and end to end the reducers' results still equal the
//! reference (by the hosts' fallback where the switch could not complete the tree).

use std::collections::HashMap;
use std::sync::Arc;

use hostlib::aggregation::Protocol;
use pisa::control::{ControlOp, ControlReply};
use pisa::{DropCode, PacketBuf, PipeConfig, ProgramSet, Switch};
use programs::daiet::{TreeConfig, MAX_WAIT_PASSES};
use wire::daiet::{flags, Op, UDP_PORT};

mod common;
use common::daiet_net::*;
use common::*;

const CHILD: u8 = 1;
const PARENT: u8 = 15;
const TREE: u16 = 100;

fn register_id(set: &ProgramSet, name: &str) -> u32 {
    let i = set.decl(1).registers.iter().position(|r| r.name == name).unwrap_or_else(|| panic!("register {name}"));
    set.ids(1).registers[i]
}

/// Cell `k` of DAIET's register `name`.
fn cell(sw: &mut Switch, set: &ProgramSet, name: &str, k: u32) -> u64 {
    match sw.control(&ControlOp::RegisterRead { register_id: register_id(set, name), index: Some(k) }).unwrap() {
        ControlReply::RegisterCells(v) => v[0].1,
        _ => unreachable!(),
    }
}

fn write_cell(sw: &mut Switch, set: &ProgramSet, name: &str, k: u32, value: u64) {
    sw.control(&ControlOp::RegisterWrite { register_id: register_id(set, name), index: Some(k), value }).unwrap();
}

/// DAIET's drops with reason `name`.
fn drops(sw: &Switch, set: &ProgramSet, name: &str) -> u64 {
    let code = DropCode::FIRST_PROGRAM as usize + set.decl(1).drop_reasons.iter().position(|r| r == name).unwrap();
    sw.counters().programs[1].drops[code]
}

fn violations(sw: &Switch) -> u64 {
    sw.counters().programs.iter().flat_map(|p| p.violations.iter()).sum()
}

fn data_frame(sender: u16, seq: u32, fl: u8, pairs: &[(Vec<u8>, u32)]) -> Vec<u8> {
    daiet_data_frame(TREE, CHILD, PARENT, sender, seq, fl, pairs)
}

/// Tick until nothing is in the pipe (at most `max` ticks); the ticks it took.
fn settle(sw: &mut Switch, max: u32) -> u32 {
    for i in 0..max {
        if sw.pipes()[0].pending() == 0 {
            return i;
        }
        sw.tick(0);
    }
    assert_eq!(sw.pipes()[0].pending(), 0, "nothing recirculates after {max} ticks");
    max
}

fn send(sw: &mut Switch, f: &[u8]) -> Vec<(u16, Vec<u8>)> {
    sw.process(&mut vec![PacketBuf::from_slice(f, CHILD as u16)], 0);
    settle(sw, 3 * MAX_WAIT_PASSES);
    sw.drain_all()
}

/// `(flags, seq, pairs)` of a DAIET frame.
fn parse(f: &[u8]) -> (u8, u32, Vec<(Vec<u8>, u32)>) {
    let (_, _, payload) = unframe(f).expect("a UDP frame");
    let p = wire::daiet::Packet::new_checked(payload).expect("a DAIET packet");
    (p.flags(), p.seq(), p.pairs().map(|(k, v)| (k.to_vec(), v)).collect())
}

fn net_switch(set: Arc<ProgramSet>, cfg: &TreeConfig) -> Switch {
    switch_of(set, 16, &[(CHILD, CHILD as u16), (PARENT, PARENT as u16)], &[(TREE, *cfg)])
}

/// The controller restores `seq_state` from a stale snapshot that says one of the sender's
/// packets is in flight (it never comes back). The sender's END waits in `seq_state`
/// (`WAIT`, recirculating) and gives up after `MAX_WAIT_PASSES` passes: a counted drop,
/// nothing left in the pipe, nothing sent; the switch keeps forwarding; the END held
/// nothing, so the cell is as it was; once the controller repairs the cell the resent END
/// is admitted and completes the tree.
#[test]
fn an_end_held_in_wait_past_the_bound_is_a_counted_drop() {
    let set = set();
    let cfg = tree(PARENT as u16, 0, 0, 16, Op::Sum, 1, 250);
    let mut sw = net_switch(set.clone(), &cfg);
    let before = cell(&mut sw, &set, "seq_state", cfg.sender_base);
    assert_eq!(before, 0);
    // next expected 1, one packet in flight.
    write_cell(&mut sw, &set, "seq_state", cfg.sender_base, (1 << 32) | 1);
    let r0 = sw.counters().recirculations;
    sw.process(&mut vec![PacketBuf::from_slice(&data_frame(0, 1, flags::END, &[]), CHILD as u16)], 0);
    let ticks = settle(&mut sw, 3 * MAX_WAIT_PASSES);
    assert!(sw.drain_all().is_empty(), "nothing left the switch");
    assert_eq!(drops(&sw, &set, "daiet_wait_exceeded"), 1);
    let recirculated = sw.counters().recirculations - r0;
    assert_eq!(recirculated, MAX_WAIT_PASSES as u64 - 1, "the first pass and MAX_WAIT_PASSES - 1 recirculations, each a WAIT");
    assert!(ticks >= MAX_WAIT_PASSES - 1, "one waiting pass per tick: {ticks}");
    assert_eq!(cell(&mut sw, &set, "seq_state", cfg.sender_base), (1 << 32) | 1, "the END held nothing: the cell is unchanged");
    assert_eq!(cell(&mut sw, &set, "ends_seen", 0), 0, "the END was not counted");
    // The switch keeps forwarding.
    let out = send(&mut sw, &frame(CHILD, 7, PARENT, 9, b"ordinary"));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, PARENT as u16);
    // The same END again gives up again (the count it waits on is stuck).
    assert!(send(&mut sw, &data_frame(0, 1, flags::END, &[])).is_empty());
    assert_eq!(drops(&sw, &set, "daiet_wait_exceeded"), 2);
    // Repaired by the controller: the resent END is admitted, flushes (END to the parent)
    // and is acknowledged.
    write_cell(&mut sw, &set, "seq_state", cfg.sender_base, 1);
    let out = send(&mut sw, &data_frame(0, 1, flags::END, &[]));
    let to_parent: Vec<_> = out.iter().filter(|(p, _)| *p == PARENT as u16).map(|(_, f)| parse(f)).collect();
    let to_child: Vec<_> = out.iter().filter(|(p, _)| *p == CHILD as u16).map(|(_, f)| parse(f)).collect();
    assert_eq!(to_parent.len(), 1);
    assert!(to_parent[0].0 & flags::END != 0);
    assert_eq!(to_child.len(), 1);
    assert_eq!((to_child[0].0 & flags::ACK, to_child[0].1), (flags::ACK, 1));
    assert_eq!(drops(&sw, &set, "daiet_wait_exceeded"), 2);
    assert_eq!(violations(&sw), 0);
}

/// A storer lost in the switch: a ten-pair packet whose pairs mostly collide (one cell
/// per slice) stores them in the spillover bucket one per pass after its last group; the
/// tree is removed for one batch while it does (it is dropped, counted) and re-added. The
/// bucket's count of storers now never comes back to zero, so the final END's flush walker
/// waits for it (`S_WAIT`) and gives up past the bound: a counted drop, in bounded passes.
/// It leaves the tree ready: its END's in-flight count undone (the resent END is
/// acknowledged as a duplicate), the children count, the switch's numbering and the bucket's
/// counter reset, cells and index stacks empty; the next job on the tree is exact.
#[test]
fn a_walker_waiting_for_a_lost_storer_gives_up_and_the_tree_is_reused() {
    let set = set();
    let cfg = tree(PARENT as u16, 0, 0, 1, Op::Sum, 1, 250);
    let mut sw = net_switch(set.clone(), &cfg);
    let ps: Vec<(Vec<u8>, u32)> = (0..10).map(|i| (format!("lost{i}").into_bytes(), 1 + i)).collect();
    sw.process(&mut vec![PacketBuf::from_slice(&data_frame(0, 0, 0, &ps), CHILD as u16)], 0);
    // Passes 1-3 take the three groups (pass 3 completes the packet in seq_state); passes 4
    // to 7 store the remaining colliding pairs.
    for _ in 0..3 {
        sw.tick(0);
    }
    assert_eq!(sw.pipes()[0].pending(), 1, "still storing");
    assert_eq!(cell(&mut sw, &set, "spill_busy", 0) >> 32, 1, "one storer under way");
    remove_tree(&mut sw, &set, TREE);
    settle(&mut sw, 10);
    install_tree(&mut sw, &set, TREE, &cfg);
    assert_eq!(drops(&sw, &set, "daiet_tree_removed_in_flight"), 1);
    assert!(sw.drain_all().is_empty(), "the packet never got its ACK");
    assert_eq!(cell(&mut sw, &set, "spill_busy", 0) >> 32, 1, "the lost storer is still counted");
    assert_eq!(cell(&mut sw, &set, "seq_state", cfg.sender_base), 1, "packet 0 admitted and completed");
    // The END: admitted, completes the tree, walks the four cells, then waits for the
    // bucket's storer, which never comes.
    let r0 = sw.counters().recirculations;
    let out = send(&mut sw, &data_frame(0, 1, flags::END, &[]));
    assert!(out.is_empty(), "no END to the parent, no ACK: {out:?}");
    assert_eq!(drops(&sw, &set, "daiet_wait_exceeded"), 1);
    let passes = sw.counters().recirculations - r0;
    assert!(passes <= MAX_WAIT_PASSES as u64 + 16, "bounded: {passes} recirculations");
    assert!(passes >= MAX_WAIT_PASSES as u64, "{passes} recirculations");
    // The tree is left consistent.
    assert_eq!(cell(&mut sw, &set, "seq_state", cfg.sender_base), 2, "END admitted, nothing in flight");
    assert_eq!(cell(&mut sw, &set, "ends_seen", 0), 0);
    assert_eq!(cell(&mut sw, &set, "out_seq", 0), 0);
    assert_eq!(cell(&mut sw, &set, "spill_ring", 0), 0);
    assert_eq!(cell(&mut sw, &set, "spill_busy", 0), 0);
    for s in 0..4 {
        assert_eq!(cell(&mut sw, &set, &format!("stack_top_{s}"), 0), 0);
        for w in 0..4 {
            assert_eq!(cell(&mut sw, &set, &format!("key{w}_{s}"), 0), 0);
        }
        assert_eq!(cell(&mut sw, &set, &format!("value_{s}"), 0), 0);
    }
    // The mapper resends its END: acknowledged (a duplicate), nothing else.
    let out = send(&mut sw, &data_frame(0, 1, flags::END, &[]));
    assert_eq!(out.len(), 1);
    let (fl, seq, _) = parse(&out[0].1);
    assert_eq!((out[0].0, fl & flags::ACK, seq), (CHILD as u16, flags::ACK, 1));
    // The next job on the tree: exact, numbered from 0, closed by the switch's END.
    let mut want: HashMap<Vec<u8>, u64> = HashMap::new();
    let mut got: HashMap<Vec<u8>, u64> = HashMap::new();
    let mut seqs = Vec::new();
    let mut r = Rng(5);
    let mut frames = Vec::new();
    for s in 2..20u32 {
        let ps: Vec<(Vec<u8>, u32)> = (0..10).map(|_| (format!("n{}", r.next() % 23).into_bytes(), (r.next() % 100) as u32)).collect();
        for (k, v) in &ps {
            *want.entry(k.clone()).or_default() += *v as u64;
        }
        frames.extend(send(&mut sw, &data_frame(0, s, 0, &ps)));
    }
    frames.extend(send(&mut sw, &data_frame(0, 20, flags::END, &[])));
    let mut end_seq = None;
    for (port, f) in frames {
        let (fl, seq, ps) = parse(&f);
        if port != PARENT as u16 {
            continue;
        }
        seqs.push(seq);
        if fl & flags::END != 0 {
            end_seq = Some(seq);
        }
        for (k, v) in ps {
            *got.entry(k).or_default() += v as u64;
        }
    }
    assert_eq!(got, want, "the next job is exact");
    seqs.sort_unstable();
    assert_eq!(end_seq, seqs.last().copied());
    assert_eq!(seqs, (0..seqs.len() as u32).collect::<Vec<_>>(), "numbered from 0 without a gap");
    assert_eq!(drops(&sw, &set, "daiet_wait_exceeded"), 1);
    assert_eq!(violations(&sw), 0);
}

fn job(per_mapper: usize, seed: u64) -> Job {
    let mut r = Rng(seed);
    let pairs = (0..3)
        .map(|_| (0..per_mapper).map(|_| (0u16, format!("w{}", r.next() % 400).into_bytes(), 1 + (r.next() % 5) as u32)).collect())
        .collect();
    Job { mappers: vec![1, 2, 3], pairs, reducers: vec![(10, TREE)], op: Op::Sum }
}

/// After a job: nothing in the switch, and more time adds no recirculation.
fn assert_quiet(net: &mut Net) {
    let sw = &mut net.switches[0];
    assert_eq!(sw.pipes()[0].pending(), 0, "no packet is left recirculating");
    let r = sw.counters().recirculations;
    for _ in 0..5 {
        net.run(Vec::new(), u64::MAX / 2, true);
    }
    assert_eq!(net.switches[0].counters().recirculations, r, "the recirculation counter stopped");
}

/// Reconfiguration mid-job, end to end (hostlib mappers and reducer over the in-memory
/// network): while packets are inside the switch (walkers, storers, ENDs waiting), the
/// controller removes the tree and installs it again one batch later. Packets in flight are
/// dropped (counted), so the counts other packets wait on never come back; within bounded
/// passes no packet is left recirculating and the reducer's result equals the reference,
/// by the hosts' fallback (asserted).
#[test]
fn tree_removed_and_readded_mid_job_leaves_no_packet_behind_and_stays_exact() {
    let set = set();
    // When: at a time (mid-stream), or once `n` children's ENDs are counted (the last
    // packets, ENDs waiting behind them, the flush).
    for (seed, at, ends) in [(3u64, 1_000_000u64, 0u64), (4, 200_000, 0), (5, 0, 1), (6, 0, 2), (7, 0, 3)] {
        let job = job(1500, seed);
        let trees = trees_for(&job, 4);
        let (hosts, l2, ports) = job_hosts(&job);
        // A few recirculated packets per batch: the tree is missing for one batch, so the
        // packets that pass in it are dropped and the others go on (as on hardware, where
        // the table changes at one moment while packets are in flight).
        let pipe = PipeConfig { recirc_per_batch: 4, ..PipeConfig::default() };
        let mut net = Net::one_switch(switch_with(set.clone(), ports, &l2, &trees, pipe), &hosts, seed, Faults::default());
        let (id, cfg) = trees[0];
        let mut done = 0;
        let mut hook = |now: u64, round: usize, sws: &mut [Switch]| {
            if done == 0
                && now >= at
                && round >= 1
                && sws[0].pipes()[0].pending() > 0
                && cell(&mut sws[0], &set, "ends_seen", cfg.tree_idx as u32) >= ends
            {
                remove_tree(&mut sws[0], &set, id);
                done = 1;
            } else if done == 1 {
                install_tree(&mut sws[0], &set, id, &cfg);
                done = 2;
            }
        };
        let out = run_job_hooked(&job, &mut net, None, Protocol::Daiet, UDP_PORT, &mut |_, _| {}, &mut hook);
        assert_eq!(done, 2, "seed {seed}: the tree was reconfigured mid-job");
        assert_eq!(out.results, reference(&job), "seed {seed}");
        assert!(out.fallback, "seed {seed}: packets lost inside the switch: the reducer falls back");
        let sw = &net.switches[0];
        assert!(drops(sw, &set, "daiet_tree_removed_in_flight") > 0, "seed {seed}");
        // Packets that others waited on were lost: those waiting gave up (without the bound
        // they would still recirculate: `assert_quiet` below). A removal once all three ENDs
        // are counted comes during the flush: the packets dropped may then include the
        // walker itself, and nothing is left to wait (seed 7 since the bucket's counter
        // became two arrays: its drains end on other passes than before).
        if ends < 3 {
            assert!(drops(sw, &set, "daiet_wait_exceeded") > 0, "seed {seed}");
        }
        assert_eq!(violations(sw), 0);
        eprintln!(
            "seed {seed}: removed in flight {}, wait exceeded {}, recirculations {}",
            drops(sw, &set, "daiet_tree_removed_in_flight"),
            drops(sw, &set, "daiet_wait_exceeded"),
            sw.counters().recirculations
        );
        assert_quiet(&mut net);
    }
}

/// A recirculation queue too small for the load drops recirculating packets (storers,
/// drain walkers, packets in flight) in the traffic manager, where the program cannot
/// undo their counts: the ENDs and the flush walker that wait on them give up past the
/// bound, nothing is left recirculating, and the result is exact (by fallback where the
/// switch could not complete the tree).
#[test]
fn a_full_recirculation_queue_leaves_no_packet_behind_and_stays_exact() {
    let set = set();
    for seed in [7u64, 8] {
        let job = job(1500, seed);
        let trees = trees_for(&job, 4);
        let (hosts, l2, ports) = job_hosts(&job);
        let pipe = PipeConfig { recirc_capacity: 24, ..PipeConfig::default() };
        let mut net = Net::one_switch(switch_with(set.clone(), ports, &l2, &trees, pipe), &hosts, seed, Faults::default());
        let out = run_job(&job, &mut net, None, Protocol::Daiet, UDP_PORT);
        assert_eq!(out.results, reference(&job), "seed {seed}");
        let sw = &net.switches[0];
        let c = sw.counters();
        assert!(c.total_drops() > 0, "seed {seed}: the queue overflowed");
        assert!(drops(sw, &set, "daiet_wait_exceeded") > 0, "seed {seed}: packets waited on lost ones and gave up");
        assert!(out.fallback, "seed {seed}: the switch could not complete the tree: the reducer falls back");
        assert_eq!(violations(sw), 0);
        eprintln!(
            "seed {seed}: fallback {}, drops {}, wait exceeded {}, recirculations {}",
            out.fallback,
            c.total_drops(),
            drops(sw, &set, "daiet_wait_exceeded"),
            c.recirculations
        );
        assert_quiet(&mut net);
    }
}

/// The bound and the new drop reason are declared, and the resource report shows them.
#[test]
fn the_bound_is_declared_and_shown() {
    let d = programs::daiet::Daiet::new();
    let decl = pisa::Program::decl(&d);
    assert!(decl.drop_reasons.iter().any(|r| r == "daiet_wait_exceeded"));
    let r = pisa::ResourceReport::new(&[decl], &pisa::Target::tofino1());
    let want = format!("MAX_WAIT_PASSES = {MAX_WAIT_PASSES}");
    assert!(r.programs[0].notes.iter().any(|n| n.contains(&want)), "a note states the bound");
}
