//! Arbitrary frames, on arbitrary ports, through a whole switch running `forward` with a
//! few table entries and a flood group: nothing may panic, and every frame is accounted for.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use pisa::control::{ControlOp, Replica, WriteOp};
use pisa::{FieldMatch, PacketBuf, PipeConfig, ProgramSet, Switch};

fn switch() -> Switch {
    let set = Arc::new(ProgramSet::new(vec![Arc::new(programs::forward::Forward::new())]).unwrap());
    let d = set.decl(0).clone();
    let ids = set.ids(0).clone();
    let t = |n: &str| ids.tables[d.tables.iter().position(|x| x.name == n).unwrap()];
    let a = |n: &str| ids.actions[d.actions.iter().position(|x| x.name == n).unwrap()];
    let mut sw = Switch::new(set, 4, 2, PipeConfig::default());
    sw.control(&ControlOp::McastGroupWrite { op: WriteOp::Insert, group: 1, replicas: (0..4).map(|p| Replica { port: p, rid: 0 }).collect() }).unwrap();
    for i in 0..4u8 {
        let m = vec![FieldMatch::Exact { field: 0, value: vec![2, 0, 0, 0, 0, i] }];
        sw.control(&ControlOp::TableWrite { table_id: t("l2_dmac"), op: WriteOp::Insert, matches: m, priority: 0, action_id: a("l2_forward"), params: vec![(1, vec![i])] }).unwrap();
    }
    let router = vec![2, 0, 0, 0, 0, 0xFE];
    sw.control(&ControlOp::TableWrite { table_id: t("l2_dmac"), op: WriteOp::Insert, matches: vec![FieldMatch::Exact { field: 0, value: router.clone() }], priority: 0, action_id: a("l3_route"), params: vec![] }).unwrap();
    let route = vec![FieldMatch::Lpm { field: 0, value: vec![10, 0, 0, 0], prefix_len: 8 }];
    sw.control(&ControlOp::TableWrite { table_id: t("ipv4_lpm"), op: WriteOp::Insert, matches: route, priority: 0, action_id: a("set_nexthop"), params: vec![(1, vec![3]), (2, vec![2, 0, 0, 0, 0, 3]), (3, router)] }).unwrap();
    sw
}

thread_local! {
    // One switch for the whole run (building one per input is slower than the input).
    static SW: std::cell::RefCell<Switch> = std::cell::RefCell::new(switch());
}

fuzz_target!(|data: &[u8]| SW.with(|sw| run(&mut sw.borrow_mut(), data)));

fn run(sw: &mut Switch, data: &[u8]) {
    let before = sw.counters();
    // Split the input into frames: [port byte][len byte][len bytes]...
    let mut frames = Vec::new();
    let mut rest = data;
    while rest.len() >= 2 && frames.len() < 32 {
        let port = (rest[0] % 4) as u16;
        let len = (rest[1] as usize).min(rest.len() - 2);
        frames.push(PacketBuf::from_slice(&rest[2..2 + len], port));
        rest = &rest[2 + len..];
    }
    let n = frames.len() as u64;
    sw.process(&mut frames, 1);
    let out = sw.drain_all();
    let c = sw.counters();
    assert_eq!(c.programs[0].ingress_passes - before.programs[0].ingress_passes, n);
    assert!(out.len() as u64 <= 3 * n);
    assert_eq!(c.programs[0].violations.iter().sum::<u64>(), 0);
}
