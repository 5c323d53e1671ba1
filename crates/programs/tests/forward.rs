//! The `forward` program on the switch model: L2 switching, flooding, IPv4 routing,
//! counters, and arbitrary bytes on a port.

use std::sync::Arc;

use pisa::control::{ControlOp, ControlReply, Replica, WriteOp};
use pisa::{DropCode, FieldMatch, PacketBuf, PipeConfig, ProgramSet, ResourceReport, Switch, Target};
use programs::forward::Forward;
use proptest::prelude::*;
use wire::ethernet::EthernetFrame;
use wire::ipv4::Ipv4Packet;

fn mac(i: u8) -> [u8; 6] {
    [2, 0, 0, 0, 0, i]
}

struct Rig {
    sw: Switch,
    set: Arc<ProgramSet>,
}

impl Rig {
    fn new(ports: u16) -> Rig {
        let set = Arc::new(ProgramSet::new(vec![Arc::new(Forward::new())]).unwrap());
        let mut sw = Switch::new(set.clone(), ports, 1, PipeConfig::default());
        sw.control(&ControlOp::McastGroupWrite {
            op: WriteOp::Insert,
            group: 1,
            replicas: (0..ports).map(|p| Replica { port: p, rid: 0 }).collect(),
        })
        .unwrap();
        Rig { sw, set }
    }
    fn id(&self, kind: &str, name: &str) -> u32 {
        let d = self.set.decl(0);
        let ids = self.set.ids(0);
        match kind {
            "table" => ids.tables[d.tables.iter().position(|t| t.name == name).unwrap()],
            "action" => ids.actions[d.actions.iter().position(|t| t.name == name).unwrap()],
            "register" => ids.registers[d.registers.iter().position(|t| t.name == name).unwrap()],
            _ => unreachable!(),
        }
    }
    fn entry(&mut self, table: &str, m: FieldMatch, action: &str, params: Vec<Vec<u8>>) {
        let op = ControlOp::TableWrite {
            table_id: self.id("table", table),
            op: WriteOp::Insert,
            matches: vec![m],
            priority: 0,
            action_id: self.id("action", action),
            params: params.into_iter().enumerate().map(|(i, p)| (i as u32 + 1, p)).collect(),
        };
        self.sw.control(&op).unwrap();
    }
    fn host(&mut self, i: u8, port: u16) {
        self.entry("l2_dmac", FieldMatch::Exact { field: 0, value: mac(i).to_vec() }, "l2_forward", vec![port.to_be_bytes().to_vec()]);
        self.entry("l2_smac", FieldMatch::Exact { field: 0, value: mac(i).to_vec() }, "nop", vec![]);
    }
    fn send(&mut self, port: u16, frame: &[u8]) -> Vec<(u16, Vec<u8>)> {
        let mut v = vec![PacketBuf::from_slice(frame, port)];
        self.sw.process(&mut v, 1);
        self.sw.drain_all()
    }
    fn counter(&mut self, reg: &str, port: u32) -> (u32, u32) {
        let id = self.id("register", reg);
        match self.sw.control(&ControlOp::RegisterRead { register_id: id, index: Some(port) }).unwrap() {
            ControlReply::RegisterCells(v) => (v[0].1 as u32, (v[0].1 >> 32) as u32),
            _ => unreachable!(),
        }
    }
}

fn eth(dst: [u8; 6], src: [u8; 6], et: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&et.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

fn ipv4(src: [u8; 4], dst: [u8; 4], ttl: u8, payload_len: usize) -> Vec<u8> {
    let mut h = vec![0u8; 20 + payload_len];
    h[0] = 0x45;
    h[2..4].copy_from_slice(&((20 + payload_len) as u16).to_be_bytes());
    h[8] = ttl;
    h[9] = 17;
    h[12..16].copy_from_slice(&src);
    h[16..20].copy_from_slice(&dst);
    let mut p = Ipv4Packet::new_unchecked(&mut h[..]);
    p.fill_checksum();
    h
}

#[test]
fn l2_unicast_and_flood_with_source_pruning() {
    let mut r = Rig::new(4);
    for i in 0..4 {
        r.host(i, i as u16);
    }
    let f = eth(mac(2), mac(0), 0x0800, &[0u8; 46]);
    let out = r.send(0, &f);
    assert_eq!(out, vec![(2, f.clone())], "unicast to the learned port, unchanged");
    let b = eth([0xFF; 6], mac(1), 0x0806, &[0u8; 46]);
    let mut ports: Vec<_> = r.send(1, &b).into_iter().map(|o| o.0).collect();
    ports.sort();
    assert_eq!(ports, vec![0, 2, 3], "broadcast floods to all ports but the source");
    // Unknown unicast floods too (default action).
    let u = eth(mac(9), mac(3), 0x0800, &[0u8; 46]);
    assert_eq!(r.send(3, &u).len(), 3);
    // Counters: port 0 received one frame of 60 bytes, port 2 sent three frames.
    assert_eq!(r.counter("rx_port_counters", 0), (1, 60));
    assert_eq!(r.counter("tx_port_counters", 2).0, 3);
}

#[test]
fn ipv4_routing_rewrites_macs_decrements_ttl_and_keeps_checksum_valid() {
    let mut r = Rig::new(3);
    let router = [2, 0, 0, 0, 0, 0xFE];
    r.entry("l2_dmac", FieldMatch::Exact { field: 0, value: router.to_vec() }, "l3_route", vec![]);
    r.entry(
        "ipv4_lpm",
        FieldMatch::Lpm { field: 0, value: vec![10, 1, 0, 0], prefix_len: 16 },
        "set_nexthop",
        vec![vec![2], mac(0x22).to_vec(), router.to_vec()],
    );
    r.entry(
        "ipv4_lpm",
        FieldMatch::Lpm { field: 0, value: vec![10, 1, 7, 0], prefix_len: 24 },
        "set_nexthop",
        vec![vec![1], mac(0x11).to_vec(), router.to_vec()],
    );
    let f = eth(router, mac(5), 0x0800, &ipv4([10, 0, 0, 5], [10, 1, 2, 3], 64, 26));
    let out = r.send(0, &f);
    assert_eq!(out.len(), 1);
    let (port, bytes) = &out[0];
    assert_eq!(*port, 2, "the /16 route");
    let e = EthernetFrame::new_checked(&bytes[..]).unwrap();
    assert_eq!(e.dst_addr().0, mac(0x22));
    assert_eq!(e.src_addr().0, router);
    let ip = Ipv4Packet::new_checked(e.payload()).unwrap();
    assert_eq!(ip.ttl(), 63);
    assert!(ip.verify_checksum(), "incremental checksum update is correct");
    // Longest prefix wins.
    let f = eth(router, mac(5), 0x0800, &ipv4([10, 0, 0, 5], [10, 1, 7, 9], 64, 26));
    assert_eq!(r.send(0, &f)[0].0, 1);
    // TTL 1 expires; no route drops; both counted by their own reasons.
    let f = eth(router, mac(5), 0x0800, &ipv4([10, 0, 0, 5], [10, 1, 2, 3], 1, 26));
    assert!(r.send(0, &f).is_empty());
    let f = eth(router, mac(5), 0x0800, &ipv4([10, 0, 0, 5], [192, 168, 0, 1], 64, 26));
    assert!(r.send(0, &f).is_empty());
    let c = r.sw.counters();
    let reasons = &r.set.decl(0).drop_reasons;
    let code = |name: &str| DropCode::FIRST_PROGRAM as usize + reasons.iter().position(|n| n == name).unwrap();
    assert_eq!(c.programs[0].drops[code("ttl_expired")], 1);
    assert_eq!(c.programs[0].drops[code("no_ipv4_route")], 1);
}

fn udp(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
    let mut h = ipv4(src, dst, 64, 26);
    h[20..22].copy_from_slice(&sport.to_be_bytes());
    h[22..24].copy_from_slice(&dport.to_be_bytes());
    h
}

/// CRC-32 (ISO-HDLC), bit by bit: the reference the selector's hash unit is checked against.
fn crc32(data: &[u8]) -> u32 {
    let mut c = 0xFFFF_FFFFu32;
    for &b in data {
        c ^= b as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 { (c >> 1) ^ 0xEDB8_8320 } else { c >> 1 };
        }
    }
    !c
}

impl Rig {
    fn profile_id(&self, name: &str) -> u32 {
        let d = self.set.decl(0);
        self.set.ids(0).action_profiles[d.action_profiles.iter().position(|p| p.name == name).unwrap()]
    }
    fn member(&mut self, id: u32, port: u8, dmac: [u8; 6], smac: [u8; 6]) {
        let op = ControlOp::ProfileMemberWrite {
            profile_id: self.profile_id("ecmp_selector"),
            op: WriteOp::Insert,
            member_id: id,
            action_id: self.id("action", "set_nexthop"),
            params: vec![(1, vec![port]), (2, dmac.to_vec()), (3, smac.to_vec())],
        };
        self.sw.control(&op).unwrap();
    }
}

/// ECMP through the action selector: a group spreads flows over its members by the CRC-32
/// of the 5-tuple (checked against the reference CRC here, flow by flow), every packet of a
/// flow takes the same member, a member entry is a single path, and the control plane
/// refuses what P4Runtime refuses (dangling members, deleting what is in use, direct
/// actions in an indirect table).
#[test]
fn ecmp_selector_spreads_flows_by_five_tuple_and_keeps_each_flow_on_one_path() {
    use pisa::IndirectRef;
    let mut r = Rig::new(5);
    let router = [2, 0, 0, 0, 0, 0xFE];
    r.entry("l2_dmac", FieldMatch::Exact { field: 0, value: router.to_vec() }, "l3_route", vec![]);
    for (id, port) in [(1u32, 1u8), (2, 2), (3, 3), (4, 4)] {
        r.member(id, port, mac(0x30 + port), router);
    }
    let pid = r.profile_id("ecmp_selector");
    let group = |op, members: Vec<(u32, u32)>| ControlOp::ProfileGroupWrite { profile_id: pid, op, group_id: 9, members };
    r.sw.control(&group(WriteOp::Insert, vec![(1, 1), (2, 1), (3, 1), (4, 1)])).unwrap();
    let ecmp = r.id("table", "ipv4_ecmp");
    let route = |target, prefix: [u8; 4], len| ControlOp::TableWriteIndirect {
        table_id: ecmp,
        op: WriteOp::Insert,
        matches: vec![FieldMatch::Lpm { field: 0, value: prefix.to_vec(), prefix_len: len }],
        priority: 0,
        target,
    };
    r.sw.control(&route(IndirectRef::Group(9), [10, 2, 0, 0], 16)).unwrap();
    r.sw.control(&route(IndirectRef::Member(3), [10, 3, 0, 0], 16)).unwrap();
    let mut per_port = [0usize; 5];
    for flow in 0..400u16 {
        let (src, sport, dport) = ([10, 0, (flow >> 8) as u8, flow as u8], 1000 + flow, 4791);
        let f = eth(router, mac(5), 0x0800, &udp(src, [10, 2, 0, 7], sport, dport));
        let mut key = Vec::new();
        key.extend_from_slice(&src);
        key.extend_from_slice(&[10, 2, 0, 7, 17]);
        key.extend_from_slice(&sport.to_be_bytes());
        key.extend_from_slice(&dport.to_be_bytes());
        let want = 1 + (crc32(&key) % 4) as u16;
        for _ in 0..3 {
            let out = r.send(0, &f);
            assert_eq!(out.len(), 1);
            assert_eq!(out[0].0, want, "flow {flow} takes the member its hash picks, every time");
            assert_eq!(&out[0].1[0..6], &mac(0x30 + want as u8));
        }
        per_port[want as usize] += 1;
    }
    assert!(per_port[1..].iter().all(|&n| n > 60), "400 flows over 4 paths: {per_port:?}");
    // A member route is one path whatever the flow.
    for sport in 0..20 {
        let f = eth(router, mac(5), 0x0800, &udp([10, 0, 0, 1], [10, 3, 0, 1], sport, 80));
        assert_eq!(r.send(0, &f)[0].0, 3);
    }
    // ipv4_lpm wins over ipv4_ecmp (it is looked up first).
    r.entry(
        "ipv4_lpm",
        FieldMatch::Lpm { field: 0, value: vec![10, 2, 0, 0], prefix_len: 24 },
        "set_nexthop",
        vec![vec![0], mac(9).to_vec(), router.to_vec()],
    );
    assert_eq!(r.send(0, &eth(router, mac(5), 0x0800, &udp([10, 0, 0, 1], [10, 2, 0, 7], 1, 2)))[0].0, 0);
    // Refusals.
    assert!(r.sw.control(&group(WriteOp::Modify, vec![(1, 1), (77, 1)])).is_err(), "a group of a missing member");
    let del_member = ControlOp::ProfileMemberWrite { profile_id: pid, op: WriteOp::Delete, member_id: 3, action_id: 0, params: vec![] };
    assert!(r.sw.control(&del_member).is_err(), "member 3 is in group 9 and a route points at it");
    assert!(r.sw.control(&group(WriteOp::Delete, vec![])).is_err(), "a route points at group 9");
    assert!(r.sw.control(&route(IndirectRef::Group(10), [10, 4, 0, 0], 16)).is_err(), "no group 10");
    let direct = ControlOp::TableWrite {
        table_id: ecmp,
        op: WriteOp::Insert,
        matches: vec![FieldMatch::Lpm { field: 0, value: vec![10, 5, 0, 0], prefix_len: 16 }],
        priority: 0,
        action_id: r.id("action", "drop"),
        params: vec![],
    };
    assert!(r.sw.control(&direct).is_err(), "ipv4_ecmp entries point at members or groups");
    // After member 3 leaves the group, every flow takes one of the others.
    r.sw.control(&group(WriteOp::Modify, vec![(1, 1), (2, 1), (4, 1)])).unwrap();
    let ControlReply::ProfileEntries { members, groups } = r.sw.control(&ControlOp::ProfileRead { profile_id: pid }).unwrap() else {
        panic!("profile read")
    };
    assert_eq!(members.len(), 4);
    assert_eq!(groups, vec![(9, vec![(1, 1), (2, 1), (4, 1)])]);
    for flow in 0..50u16 {
        let f = eth(router, mac(5), 0x0800, &udp([10, 9, 0, flow as u8], [10, 2, 1, 7], 2000 + flow, 53));
        assert!([1, 2, 4].contains(&r.send(0, &f)[0].0));
    }
}

#[test]
fn runts_are_dropped_as_malformed_and_forwarding_continues() {
    let mut r = Rig::new(2);
    r.host(1, 1);
    for len in 0..14 {
        assert!(r.send(0, &vec![0xAB; len]).is_empty());
    }
    let c = r.sw.counters();
    assert_eq!(c.drops[DropCode::MALFORMED.0 as usize], 14);
    let f = eth(mac(1), mac(0), 0x0800, &[0u8; 46]);
    assert_eq!(r.send(0, &f).len(), 1);
}

#[test]
fn resource_report_for_forward_on_tofino1() {
    let f = Forward::new();
    let rep = ResourceReport::new(&[pisa::Program::decl(&f)], &Target::tofino1());
    assert!(rep.fits, "{:?}", rep.problems);
    assert_eq!(rep.stages_used, 3);
    assert_eq!(rep.stateful_alus_total, 2);
    assert_eq!(rep.parse_depth_bytes, 38);
    // Two 512-cell pair registers: 512 / 2 per word -> 1 data RAM + 1 spare each.
    assert_eq!(rep.registers.iter().map(|r| r.sram_blocks).sum::<u32>(), 4);
    assert_eq!(rep.register_bits_total, 2 * 512 * 64);
    // Two 4096-entry 48-bit exact tables: 4 RAMs each; the LPM table 2 TCAM blocks.
    assert_eq!(rep.tables.iter().find(|t| t.name == "forward.l2_dmac").unwrap().sram_blocks, 4);
    assert_eq!(rep.tcam_blocks_total, 4);
    assert_eq!(rep.table_entries_total, 4096 + 4096 + 1024 + 1024);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    /// Arbitrary bytes never panic the switch, and every frame is accounted for: forwarded
    /// (to at most every other port) or dropped with a counted reason.
    #[test]
    fn arbitrary_frames_are_forwarded_or_counted(frames in proptest::collection::vec((0u16..4, proptest::collection::vec(any::<u8>(), 0..200)), 1..20)) {
        let mut r = Rig::new(4);
        r.host(1, 1);
        r.host(2, 2);
        let mut v: Vec<PacketBuf> = frames.iter().map(|(p, b)| PacketBuf::from_slice(b, *p)).collect();
        r.sw.process(&mut v, 1);
        let out = r.sw.drain_all();
        let c = r.sw.counters();
        prop_assert_eq!(c.programs[0].ingress_passes, frames.len() as u64);
        prop_assert!(out.len() as u64 <= 3 * frames.len() as u64);
        let violations: u64 = c.programs[0].violations.iter().sum();
        prop_assert_eq!(violations, 0);
        let short = frames.iter().filter(|(_, b)| b.len() < 14).count() as u64;
        prop_assert_eq!(c.drops[DropCode::MALFORMED.0 as usize], short);
    }
}
