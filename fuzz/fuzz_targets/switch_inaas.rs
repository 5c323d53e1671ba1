//! Arbitrary frames through a switch running `forward` + `inaas`, a registered tenant and a
//! goalkeeper port: half the frames carry the INaaS EtherType, so the program parses them.
//! Nothing may panic, no hardware rule may be broken, every frame is accounted for.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use pisa::control::{ControlOp, WriteOp};
use pisa::{FieldMatch, PacketBuf, PipeConfig, ProgramSet, Switch};

fn switch() -> Switch {
    let set = Arc::new(
        ProgramSet::new(vec![Arc::new(programs::forward::Forward::new()), Arc::new(programs::inaas::Inaas::new())]).unwrap(),
    );
    let d = set.decl(1).clone();
    let ids = set.ids(1).clone();
    let t = |n: &str| ids.tables[d.tables.iter().position(|x| x.name == n).unwrap()];
    let a = |n: &str| ids.actions[d.actions.iter().position(|x| x.name == n).unwrap()];
    let mut sw = Switch::new(set, 4, 1, PipeConfig::default());
    sw.control(&ControlOp::TableWrite {
        table_id: t("goalkeeper"),
        op: WriteOp::Insert,
        matches: vec![FieldMatch::Exact { field: 0, value: vec![0] }],
        priority: 0,
        action_id: a("set_goalkeeper"),
        params: vec![(1, vec![3])],
    })
    .unwrap();
    for port in 0..4u16 {
        let m = vec![
            FieldMatch::Exact { field: 0, value: port.to_be_bytes().to_vec() },
            FieldMatch::Exact { field: 1, value: 1u32.to_be_bytes().to_vec() },
        ];
        sw.control(&ControlOp::TableWrite {
            table_id: t("tenants"),
            op: WriteOp::Insert,
            matches: m,
            priority: 0,
            action_id: a("set_tenant"),
            params: vec![(1, vec![0, 1]), (2, 1000u32.to_be_bytes().to_vec())],
        })
        .unwrap();
    }
    sw
}

thread_local! {
    static SW: std::cell::RefCell<Switch> = std::cell::RefCell::new(switch());
}

fuzz_target!(|data: &[u8]| SW.with(|sw| run(&mut sw.borrow_mut(), data)));

fn run(sw: &mut Switch, data: &[u8]) {
    let before = sw.counters();
    // [port byte][len: 2 bytes][len bytes]...
    let mut frames = Vec::new();
    let mut rest = data;
    while rest.len() >= 3 && frames.len() < 16 {
        let port = (rest[0] % 4) as u16;
        let len = (u16::from_be_bytes([rest[1], rest[2]]) as usize % 600).min(rest.len() - 3);
        let mut f = rest[3..3 + len].to_vec();
        if rest[0] & 0x80 != 0 && f.len() >= 14 {
            f[12..14].copy_from_slice(&wire::inaas::ETHERTYPE.to_be_bytes());
        }
        frames.push(PacketBuf::from_slice(&f, port));
        rest = &rest[3 + len..];
    }
    let n = frames.len() as u64;
    sw.process(&mut frames, 1_000);
    for _ in 0..4 {
        sw.tick(1_000);
    }
    sw.drain_all();
    let c = sw.counters();
    assert!(c.programs[0].ingress_passes - before.programs[0].ingress_passes >= n);
    assert_eq!(c.programs[1].violations.iter().sum::<u64>(), 0);
}
