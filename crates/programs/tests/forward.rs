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
    assert_eq!(rep.stages_used, 2);
    assert_eq!(rep.stateful_alus_total, 2);
    assert_eq!(rep.parse_depth_bytes, 34);
    // Two 512-cell pair registers: 512 / 2 per word -> 1 data RAM + 1 spare each.
    assert_eq!(rep.registers.iter().map(|r| r.sram_blocks).sum::<u32>(), 4);
    assert_eq!(rep.register_bits_total, 2 * 512 * 64);
    // Two 4096-entry 48-bit exact tables: 4 RAMs each; the LPM table 2 TCAM blocks.
    assert_eq!(rep.tables.iter().find(|t| t.name == "forward.l2_dmac").unwrap().sram_blocks, 4);
    assert_eq!(rep.tcam_blocks_total, 2);
    assert_eq!(rep.table_entries_total, 4096 + 4096 + 1024);
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
