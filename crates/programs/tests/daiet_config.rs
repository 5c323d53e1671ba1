//! A tree configuration the switch cannot use (partition not a power of two, beyond the
//! arrays, a tree slot beyond the per-tree registers) drops the tree's packets, counted as
//! `daiet_bad_tree_config`, and touches no register; the same packet under a valid
//! configuration at the edge of the arrays is aggregated exactly.

use pisa::control::WriteOp;
use pisa::{DropCode, PacketBuf, Switch};
use programs::daiet::{TreeConfig, CELLS, MAX_TREES};
use wire::daiet::Op;

mod common;
use common::daiet_net::*;

const TREE: u16 = 7;
const CHILD: u8 = 1;
const PARENT: u8 = 3;

fn with_partition(tree_idx: u16, part_base: u32, part_size: u32) -> TreeConfig {
    tree(PARENT as u16, tree_idx, part_base, part_size, Op::Sum, 1, 0)
}

/// Run the switch until no packet recirculates: its `daiet_bad_tree_config` drops and the
/// frames that left.
fn settle(sw: &mut Switch, set: &pisa::ProgramSet) -> (u64, usize) {
    for t in 1..20 {
        if sw.pipes()[0].pending() == 0 {
            break;
        }
        sw.tick(t);
    }
    let out = sw.drain_all().len();
    let decl = set.decl(1);
    let code = DropCode::FIRST_PROGRAM as usize + decl.drop_reasons.iter().position(|r| r == "daiet_bad_tree_config").unwrap();
    (sw.counters().programs[1].drops[code], out)
}

/// Ten pairs of distinct keys from the child through a switch with tree `cfg`: the
/// `daiet_bad_tree_config` drops, the frames that left, and the sum of every value cell.
fn run(cfg: TreeConfig) -> (u64, usize, u64) {
    let set = set();
    let mut sw = switch(4, &[(CHILD, CHILD as u16), (PARENT, PARENT as u16)], &[(TREE, cfg)]);
    let pairs: Vec<(Vec<u8>, u32)> = (0..10).map(|i| (format!("key{i}").into_bytes(), i + 1)).collect();
    let frame = daiet_data_frame(TREE, CHILD, PARENT, 0, 0, 0, &pairs);
    sw.process(&mut vec![PacketBuf::from_slice(&frame, CHILD as u16)], 0);
    let (drops, out) = settle(&mut sw, &set);
    let decl = set.decl(1);
    let state = sw.pipes()[0].state(1);
    let values: u64 = decl
        .registers
        .iter()
        .enumerate()
        .filter(|(_, r)| r.name.starts_with("value_"))
        .map(|(i, _)| state.register(i).iter().sum::<u64>())
        .sum();
    (drops, out, values)
}

#[test]
fn an_unusable_tree_config_is_a_counted_drop_and_a_usable_one_aggregates() {
    let total: u64 = (1..=10).sum();
    // At the edge: the last 1024 cells, the last tree slot. The packet is acknowledged.
    assert_eq!(run(with_partition(MAX_TREES as u16 - 1, CELLS - 1024, 1024)), (0, 1, total));
    assert_eq!(run(with_partition(0, 0, CELLS)), (0, 1, total));
    let bad = [
        with_partition(0, 0, 3),                   // not a power of two
        with_partition(0, 0, 0),                   // empty
        with_partition(MAX_TREES as u16, 0, 1024), // no such tree slot
        with_partition(0, CELLS - 512, 1024),      // beyond the arrays
        with_partition(0, CELLS, 1),               // starts after them
        with_partition(0, u32::MAX - 511, 1024),   // its end overflows 32 bits
        with_partition(0, 1 << 31, 1 << 31),       // the same, both halves
    ];
    for (i, cfg) in bad.into_iter().enumerate() {
        assert_eq!(run(cfg), (1, 0, 0), "config {i}: {cfg:?}");
    }
}

/// Sum of the value cells `cells` of every slice.
fn values_in(sw: &Switch, cells: std::ops::Range<u32>) -> u64 {
    let decl = set().decl(1).clone();
    let state = sw.pipes()[0].state(1);
    decl.registers
        .iter()
        .enumerate()
        .filter(|(_, r)| r.name.starts_with("value_"))
        .map(|(i, _)| state.register(i)[cells.start as usize..cells.end as usize].iter().sum::<u64>())
        .sum()
}

/// A ten-pair packet (three passes) whose tree entry is rewritten to `modified` after its
/// first pass: the tree's cells in `[0, 1024)` hold what the first pass aggregated, and the
/// rest follows the new entry from the very next pass. Returns the switch, its
/// `daiet_bad_tree_config` drops and the frames that left.
fn modified_in_flight(pairs: &[(Vec<u8>, u32)], modified: TreeConfig) -> (Switch, u64, usize) {
    let set = set();
    let first = with_partition(0, 0, 1024);
    let mut sw = switch(4, &[(CHILD, CHILD as u16), (PARENT, PARENT as u16)], &[(TREE, first)]);
    let frame = daiet_data_frame(TREE, CHILD, PARENT, 0, 0, 0, pairs);
    sw.process(&mut vec![PacketBuf::from_slice(&frame, CHILD as u16)], 0);
    assert_eq!(sw.pipes()[0].pending(), 1, "the packet recirculates after its first pass");
    write_tree(&mut sw, &set, TREE, &modified, WriteOp::Modify);
    let (drops, out) = settle(&mut sw, &set);
    (sw, drops, out)
}

/// The tree table is applied on every pass and its entries' decoded values are rewritten
/// with every control-plane write: an entry modified while a packet is in its passes is
/// seen by the packet's very next pass (new partition, new op, or a configuration that is
/// now unusable), never the value decoded from the old parameters.
#[test]
fn a_tree_modified_in_flight_is_seen_by_the_next_pass() {
    let pairs: Vec<(Vec<u8>, u32)> = (0..10).map(|i| (format!("key{i}").into_bytes(), i + 1)).collect();
    // Another partition: the first pass's four pairs stay in the old one, the six of the
    // next two passes go to the new one; the packet completes and is acknowledged.
    let (sw, drops, out) = modified_in_flight(&pairs, with_partition(0, 4096, 1024));
    assert_eq!((drops, out), (0, 1));
    assert_eq!(values_in(&sw, 0..1024), 1 + 2 + 3 + 4);
    assert_eq!(values_in(&sw, 4096..5120), (5..=10).sum::<u64>());
    assert_eq!(values_in(&sw, 0..CELLS), (1..=10).sum::<u64>());
    // Now unusable (partition beyond the arrays): the next pass is a counted drop and
    // touches no register.
    let (sw, drops, out) = modified_in_flight(&pairs, with_partition(0, CELLS - 512, 1024));
    assert_eq!((drops, out), (1, 0));
    assert_eq!(values_in(&sw, 0..CELLS), 1 + 2 + 3 + 4);
    // Another op: one key at positions 0 and 4 (the same slice, the same cell): summed
    // under the old op, the second pass takes the maximum under the new one.
    let mut dup = pairs.clone();
    dup[0] = (b"same".to_vec(), 5);
    dup[4] = (b"same".to_vec(), 3);
    let max = tree(PARENT as u16, 0, 0, 1024, Op::Max, 1, 0);
    let (sw, drops, out) = modified_in_flight(&dup, max);
    assert_eq!((drops, out), (0, 1));
    let others: u64 = dup.iter().enumerate().filter(|(i, _)| *i != 0 && *i != 4).map(|(_, p)| p.1 as u64).sum();
    assert_eq!(values_in(&sw, 0..1024), 5 + others, "max(5, 3) under the new op, not 5 + 3");
    // And unmodified, the same packet sums: 5 + 3.
    let (sw, _, _) = modified_in_flight(&dup, with_partition(0, 0, 1024));
    assert_eq!(values_in(&sw, 0..1024), 8 + others);
}
