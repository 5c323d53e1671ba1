//! A DAIET switch for the in-memory network: `forward,daiet` with L2 entries, trees and
//! clone sessions installed as the controller does; one-switch networks and tree configs.

use std::sync::Arc;

use pisa::control::{CloneSession, ControlOp, Replica, WriteOp};
use pisa::{FieldMatch, PipeConfig, ProgramSet, Switch, PORT_RECIRC};
use programs::daiet::{Daiet, TreeConfig, ACK_FRAME_LEN, ACK_SESSION_BASE, WALK_SESSION};
use programs::forward::Forward;
use wire::daiet::Op;

use super::*;

// ---- switches -------------------------------------------------------------------------

pub fn set() -> Arc<ProgramSet> {
    Arc::new(ProgramSet::new(vec![Arc::new(Forward::new()), Arc::new(Daiet::new())]).unwrap())
}

/// A switch with `ports` ports: L2 entries `host -> port`, trees, clone sessions.
pub fn switch(ports: u16, l2: &[(u8, u16)], trees: &[(u16, TreeConfig)]) -> Switch {
    switch_of(set(), ports, l2, trees)
}

/// [`switch`] over a given `forward,daiet`-shaped program set (program 0 the base, 1 DAIET).
pub fn switch_of(set: Arc<ProgramSet>, ports: u16, l2: &[(u8, u16)], trees: &[(u16, TreeConfig)]) -> Switch {
    switch_with(set, ports, l2, trees, PipeConfig::default())
}

/// [`switch_of`] with a given pipe configuration (queue sizes, recirculation bandwidth).
pub fn switch_with(set: Arc<ProgramSet>, ports: u16, l2: &[(u8, u16)], trees: &[(u16, TreeConfig)], cfg: PipeConfig) -> Switch {
    let mut sw = Switch::new(set.clone(), ports, 1, cfg);
    install_l2(&mut sw, &set, l2);
    for (id, cfg) in trees {
        install_tree(&mut sw, &set, *id, cfg);
    }
    for p in 0..ports {
        let session_cfg = CloneSession { replicas: vec![Replica { port: p, rid: 0 }], truncate_len: ACK_FRAME_LEN };
        sw.control(&ControlOp::CloneSessionWrite { op: WriteOp::Insert, session: ACK_SESSION_BASE + p, session_cfg }).unwrap();
    }
    let session_cfg = CloneSession { replicas: vec![Replica { port: PORT_RECIRC, rid: 0 }], truncate_len: 0 };
    sw.control(&ControlOp::CloneSessionWrite { op: WriteOp::Insert, session: WALK_SESSION, session_cfg }).unwrap();
    sw
}

/// Install tree `id`'s `daiet_trees` entry, as the controller does.
pub fn install_tree(sw: &mut Switch, set: &ProgramSet, id: u16, cfg: &TreeConfig) {
    write_tree(sw, set, id, cfg, WriteOp::Insert);
}

/// Insert or modify (`op`) tree `id`'s `daiet_trees` entry, as the controller does.
pub fn write_tree(sw: &mut Switch, set: &ProgramSet, id: u16, cfg: &TreeConfig, op: WriteOp) {
    let (tt, ta) = ids(set, 1, "daiet_trees", "set_tree");
    let params =
        cfg.params().iter().zip(TreeConfig::PARAMS).enumerate().map(|(i, (v, (_, bits)))| (i as u32 + 1, be_bytes(*v, bits))).collect();
    sw.control(&ControlOp::TableWrite {
        table_id: tt,
        op,
        matches: vec![FieldMatch::Exact { field: 0, value: id.to_be_bytes().to_vec() }],
        priority: 0,
        action_id: ta,
        params,
    })
    .unwrap();
}

/// Remove tree `id`'s `daiet_trees` entry, as the controller does.
pub fn remove_tree(sw: &mut Switch, set: &ProgramSet, id: u16) {
    let (tt, _) = ids(set, 1, "daiet_trees", "set_tree");
    sw.control(&ControlOp::TableWrite {
        table_id: tt,
        op: WriteOp::Delete,
        matches: vec![FieldMatch::Exact { field: 0, value: id.to_be_bytes().to_vec() }],
        priority: 0,
        action_id: 0,
        params: vec![],
    })
    .unwrap();
}

/// A DAIET frame of tree `tree` from host `from` to host `to`: sender, sequence number,
/// flags and fixed-size pairs.
pub fn daiet_data_frame(tree: u16, from: u8, to: u8, sender: u16, seq: u32, fl: u8, pairs: &[(Vec<u8>, u32)]) -> Vec<u8> {
    let repr = wire::daiet::Repr { tree_id: tree, flags: fl, sender, seq, num_pairs: pairs.len() as u8, ..Default::default() };
    let mut p = repr.to_vec();
    for (k, v) in pairs {
        wire::daiet::emit_fixed_pair(&mut p, k, *v);
    }
    frame(from, MAPPER_PORT, to, wire::daiet::UDP_PORT, &p)
}

pub fn tree(parent_port: u16, tree_idx: u16, part_base: u32, part_size: u32, op: Op, children: u16, switch_id: u16) -> TreeConfig {
    TreeConfig {
        parent_port,
        tree_idx,
        part_base,
        part_size,
        sender_base: tree_idx as u32 * 256,
        op,
        children,
        switch_id,
        max_senders: 256,
    }
}

/// One switch: mappers on ports 1..=M (hosts 1..=M), reducers after them.
pub fn one_switch_net(job: &Job, trees: &[(u16, TreeConfig)], seed: u64, f: Faults) -> Net {
    let (hosts, l2, ports) = job_hosts(job);
    Net::one_switch(switch(ports, &l2, trees), &hosts, seed, f)
}

pub fn trees_for(job: &Job, part_size: u32) -> Vec<(u16, TreeConfig)> {
    job.reducers
        .iter()
        .enumerate()
        .map(|(i, &(h, id))| (id, tree(h as u16, i as u16, i as u32 * part_size, part_size, job.op, job.mappers.len() as u16, 250)))
        .collect()
}

pub fn total_pairs(job: &Job) -> u64 {
    job.pairs.iter().map(|p| p.len() as u64).sum()
}
