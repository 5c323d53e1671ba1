//! The `hare` program on the switch model, checked against plain references: a HashMap
//! store behind the switch (no stale read after a PUT), a HashSet of offloaded keys (no
//! false hit or miss in the e-MAT after replacements), and counted drops for malformed
//! and hostile packets.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use pisa::control::{ControlOp, WriteOp};
use pisa::{FieldMatch, PacketBuf, PipeConfig, ProgramSet, ResourceReport, Switch, Target, TraceFilter, TraceSession, PORT_CPU};
use programs::forward::Forward;
use programs::hare::emat::{mat_name, Emat, EmatState};
use programs::hare::oostat::state;
use programs::hare::{Hare, HareConfig};
use proptest::prelude::*;
use wire::hare::{Op, Packet, Repr, FLAG_DONE, FLAG_HIT, PORT_CLIENT, PORT_SERVER};

mod hare_common;
use hare_common::{frame, mac};

const CLIENT: u8 = 1;
const SERVER: u8 = 2;
const P_CLIENT: u16 = 0;
const P_SERVER: u16 = 1;

fn msg(op: Op, key: &[u8], kf: usize, value: Vec<u8>, seq: u32) -> Repr {
    Repr { op, flags: 0, seq, hit_index: 0, aux: 0, status: 0, key: key.to_vec(), key_field: kf as u8, value }
}

fn parse(f: &[u8]) -> Repr {
    Repr::parse(&Packet::new_checked(&f[42..]).unwrap()).unwrap()
}

struct Rig {
    sw: Switch,
    set: Arc<ProgramSet>,
    cfg: HareConfig,
    emat: EmatState,
    now: u64,
}

impl Rig {
    fn new(cfg: HareConfig) -> Rig {
        let set = Arc::new(ProgramSet::new(vec![Arc::new(Forward::new()), Arc::new(Hare::with_config(cfg.clone()))]).unwrap());
        let sw = Switch::new(set.clone(), 4, 1, PipeConfig::default());
        let emat = EmatState::new(cfg.shape(), cfg.slots);
        let mut r = Rig { sw, set, cfg, emat, now: 1 };
        for (h, p) in [(CLIENT, P_CLIENT), (SERVER, P_SERVER)] {
            r.write(
                0,
                "l2_dmac",
                vec![FieldMatch::Exact { field: 0, value: mac(h).to_vec() }],
                "l2_forward",
                vec![(1, p.to_be_bytes().to_vec())],
            );
            r.write(0, "l2_smac", vec![FieldMatch::Exact { field: 0, value: mac(h).to_vec() }], "nop", vec![]);
        }
        r.write(1, "control_ports", vec![FieldMatch::Exact { field: 0, value: P_SERVER.to_be_bytes().to_vec() }], "allow_control", vec![]);
        r
    }
    fn id(&self, prog: usize, kind: &str, name: &str) -> u32 {
        let d = self.set.decl(prog);
        let ids = self.set.ids(prog);
        match kind {
            "table" => ids.tables[d.tables.iter().position(|t| t.name == name).unwrap()],
            "action" => ids.actions[d.actions.iter().position(|t| t.name == name).unwrap()],
            _ => unreachable!(),
        }
    }
    fn write(&mut self, prog: usize, table: &str, matches: Vec<FieldMatch>, action: &str, params: Vec<(u32, Vec<u8>)>) {
        let op = ControlOp::TableWrite {
            table_id: self.id(prog, "table", table),
            op: WriteOp::Insert,
            matches,
            priority: 0,
            action_id: self.id(prog, "action", action),
            params,
        };
        self.sw.control(&op).unwrap();
    }
    fn apply_emat(&mut self, ops: &[programs::hare::emat::EmatOp]) {
        let tids: Vec<u32> = (0..self.cfg.shape().mats()).map(|m| self.id(1, "table", &mat_name(m))).collect();
        let aid = self.id(1, "action", "set_index");
        for o in ops {
            self.sw.control(&Emat::control_op(o, &tids, aid)).unwrap();
        }
    }
    fn send(&mut self, port: u16, f: &[u8]) -> Vec<(u16, Vec<u8>)> {
        self.now += 1000;
        let mut v = vec![PacketBuf::from_slice(f, port)];
        self.sw.process(&mut v, self.now);
        self.sw.drain_all()
    }
    /// A control packet from the CPU; its reply comes back as a packet-in.
    fn cpu(&mut self, m: &Repr) -> Repr {
        self.now += 1000;
        self.sw.packet_out(&frame(0, 0, PORT_CLIENT, PORT_SERVER, m), None, self.now).unwrap();
        // An aging fetch takes a recirculated pass.
        for _ in 0..2 {
            self.now += 10;
            self.sw.tick(self.now);
        }
        let pins = self.sw.take_packet_ins();
        assert_eq!(pins.len(), 1, "control reply");
        let r = parse(pins[0].pkt.data());
        assert!(r.flags & FLAG_DONE != 0);
        r
    }
    fn set_state(&mut self, slot: u16, st: u8) {
        let mut m = msg(Op::StateSet, b"", 0, vec![], 0);
        m.hit_index = slot;
        m.status = st;
        self.cpu(&m);
    }
    /// The D-modifier: the server moves a value into a slot.
    fn datamv(&mut self, slot: u16, value: &[u8]) {
        let mut m = msg(Op::DataMvToSwitch, b"", self.cfg.key_bytes, value.to_vec(), 0);
        m.hit_index = slot;
        let out = self.send(P_SERVER, &frame(SERVER, 0xFE, PORT_SERVER, PORT_SERVER, &m));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0, P_SERVER, "data movement is acknowledged to its server");
        assert!(parse(&out[0].1).flags & FLAG_DONE != 0);
    }
    fn stat(&mut self, slot: u16, clear: bool) -> u32 {
        self.stat_with(slot, clear as u8)
    }
    /// Fetch a count by packet: status 0 fetch, 1 fetch and clear, 2 fetch and halve.
    fn stat_with(&mut self, slot: u16, status: u8) -> u32 {
        let mut m = msg(Op::StatFetch, b"", 0, vec![0; 4], 0);
        m.hit_index = slot;
        m.status = status;
        let r = self.cpu(&m);
        u32::from_be_bytes(r.value[..4].try_into().unwrap())
    }
    /// Offload (or replace into) `key` with its current value, through Steps 4–6.
    fn offload(&mut self, key: &[u8], value: &[u8], evict: Option<&[u8]>) -> usize {
        let (slot, ops) = match evict {
            Some(old) => {
                let slot = self.emat.slot_of(old).unwrap();
                self.set_state(slot, state::REPLACING);
                self.emat.replace(old, key).unwrap()
            }
            None => {
                let slot = self.emat.free_slot().unwrap();
                self.set_state(slot, state::REPLACING);
                (slot, self.emat.insert(key, slot).unwrap())
            }
        };
        self.apply_emat(&ops);
        self.datamv(slot, value);
        self.set_state(slot, state::VALID);
        ops.len()
    }
    fn drops(&self, reason: &str) -> u64 {
        let code = self.set.decl(1).drop_code(reason).unwrap();
        self.sw.counters().programs[1].drops[code.0 as usize]
    }
}

fn small() -> HareConfig {
    HareConfig { key_bytes: 6, value_bytes: 8, slots: 64, segment_bytes: Some(2) }
}

fn val(n: u32, vb: usize) -> Vec<u8> {
    let mut v = vec![0u8; vb];
    v[..4].copy_from_slice(&n.to_be_bytes());
    v[vb - 1] = 0xAB;
    v
}

#[test]
fn get_hit_is_answered_by_the_switch_and_counted() {
    let cfg = HareConfig::default();
    let kb = cfg.key_bytes;
    let mut r = Rig::new(cfg);
    let key = b"/data/iot/owner=alice/device=thermostat-7/site=hangzhou/measure=temp/range=2024-01".to_vec();
    let value: Vec<u8> = (0..64).collect();
    assert_eq!(r.offload(&key, &value, None), 2, "two MATs, one insert each");
    let out = r.send(P_CLIENT, &frame(CLIENT, SERVER, PORT_CLIENT, PORT_SERVER, &msg(Op::Get, &key, kb, vec![], 9)));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, P_CLIENT, "answered by the switch");
    let rep = parse(&out[0].1);
    assert_eq!((rep.op, rep.seq, rep.flags & FLAG_HIT), (Op::GetReply, 9, FLAG_HIT));
    assert_eq!(rep.key, key);
    assert_eq!(rep.value, value);
    // Addresses swapped, valid IPv4 checksum, UDP to the client's port.
    let ip = wire::Ipv4Packet::new_checked(&out[0].1[14..]).unwrap();
    assert!(ip.verify_checksum());
    assert_eq!(ip.dst_addr(), wire::Ipv4Address::new(10, 0, 0, CLIENT));
    assert_eq!(u16::from_be_bytes([out[0].1[36], out[0].1[37]]), PORT_CLIENT);
    // A miss (a key differing in its last byte, in the second MAT's segment) goes to the server.
    let mut other = key.clone();
    *other.last_mut().unwrap() ^= 1;
    let out = r.send(P_CLIENT, &frame(CLIENT, SERVER, PORT_CLIENT, PORT_SERVER, &msg(Op::Get, &other, kb, vec![], 10)));
    assert_eq!(out[0].0, P_SERVER);
    assert_eq!(parse(&out[0].1).op, Op::Get);
    // OO-Stat counted the one hit; fetch-and-clear by packet.
    let slot = r.emat.slot_of(&key).unwrap();
    assert_eq!(r.stat(slot, true), 1);
    assert_eq!(r.stat(slot, false), 0);
}

/// A GET hit traced: `HareProgram`'s control runs in both trace modes (its `HareApp` hooks
/// are generic over the mode), so the traced packet shows the e-MAT tables hit and OO-Stat's
/// count for the slot going from 1 to 2 (the untraced GET before it counted the first hit),
/// and both GETs are answered by the switch with the same value.
#[test]
fn a_traced_get_hit_shows_the_emat_hits_and_the_oo_stat_count() {
    let cfg = small();
    let (kb, vb) = (cfg.key_bytes, cfg.value_bytes);
    let mut r = Rig::new(cfg);
    let key = b"k-0042".to_vec();
    let value = val(42, vb);
    r.offload(&key, &value, None);
    let slot = r.emat.slot_of(&key).unwrap();
    let get = |seq| frame(CLIENT, SERVER, PORT_CLIENT, PORT_SERVER, &msg(Op::Get, &key, kb, vec![], seq));
    let untraced = r.send(P_CLIENT, &get(1));
    r.sw.trace_arm(Some(TraceSession { filter: TraceFilter::parse(&format!("udp dst {PORT_SERVER}")).unwrap(), limit: 10 }));
    let traced = r.send(P_CLIENT, &get(2));
    for out in [&untraced, &traced] {
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0, P_CLIENT, "answered by the switch");
        assert_eq!(parse(&out[0].1).value, value);
    }
    let recs: Vec<serde_json::Value> = r.sw.trace_take(u64::MAX, 0).records.iter().map(|x| x.to_json(&r.set)).collect();
    assert_eq!(recs.len(), 1, "only the GET sent while armed is traced");
    let ev = |kind: &str| -> Vec<serde_json::Value> {
        recs[0]["events"].as_array().unwrap().iter().filter(|e| e["event"] == kind).cloned().collect()
    };
    for m in 0..r.cfg.shape().mats() {
        let name = mat_name(m);
        assert!(ev("table").iter().any(|e| e["table"] == name.as_str() && e["hit"] == true), "{name} hit: {:#?}", recs[0]);
    }
    let count: Vec<_> = ev("register").into_iter().filter(|e| e["register"] == "oo_stat").collect();
    assert_eq!(count.len(), 1, "one OO-Stat update");
    assert_eq!((&count[0]["index"], &count[0]["before"], &count[0]["after"]), (&slot.into(), &1.into(), &2.into()));
}

/// Aging by packet (status 2): the reply carries the count, the counter is left with half
/// of it (rounded down, as the host's `c // 2`), later hits counted whole; the packet takes
/// a second pass, counted.
#[test]
fn aging_fetch_halves_the_count_by_packet() {
    let cfg = small();
    let kb = cfg.key_bytes;
    let mut r = Rig::new(cfg);
    let key = b"abcdef".to_vec();
    r.offload(&key, &val(3, 8), None);
    let slot = r.emat.slot_of(&key).unwrap();
    let get = |r: &mut Rig, n: u32| {
        for i in 0..n {
            let out = r.send(P_CLIENT, &frame(CLIENT, SERVER, PORT_CLIENT, PORT_SERVER, &msg(Op::Get, &key, kb, vec![], i)));
            assert_eq!(out[0].0, P_CLIENT, "a hit");
        }
    };
    let mut expect = 0u32; // a reference count kept beside the switch
    for (hits, status) in [(7, 2), (0, 2), (4, 0), (5, 2), (1, 2), (0, 2), (0, 0)] {
        get(&mut r, hits);
        expect += hits;
        let before = r.sw.counters().recirculations;
        assert_eq!(r.stat_with(slot, status), expect);
        if status == 2 {
            expect /= 2;
            assert_eq!(r.sw.counters().recirculations, before + 1, "aging takes a second pass");
        }
    }
    assert_eq!(expect, 1, "7 -> 3 -> 1, +4 +5 = 10 -> 5, +1 = 6 -> 3 -> 1");
}

/// A ToR that routes: clients beyond a neighbour router (the spine, on port 2) address
/// their frames to this switch's router MAC, and `forward` routes them to the server
/// (next hop's MAC, router MAC as source) before Hare answers. A hit goes back to that
/// neighbour: destination the MAC the request arrived from, source the router MAC, out of
/// the ingress port, with a fresh TTL; a miss is routed on. A request from a host of the
/// rack (not routed) is answered as before: MACs swapped.
const P_SPINE: u16 = 2;
const SPINE: u8 = 0x33;
const ROUTER: u8 = 0xFE;
const FAR: u8 = 7; // a client under another leaf

fn routed(r: &mut Rig) {
    r.write(0, "l2_dmac", vec![FieldMatch::Exact { field: 0, value: mac(ROUTER).to_vec() }], "l3_route", vec![]);
    r.write(
        0,
        "ipv4_lpm",
        vec![FieldMatch::Lpm { field: 0, value: vec![10, 0, 0, SERVER], prefix_len: 32 }],
        "set_nexthop",
        vec![(1, P_SERVER.to_be_bytes().to_vec()), (2, mac(SERVER).to_vec()), (3, mac(ROUTER).to_vec())],
    );
}

/// A frame from host `FAR` as it reaches the ToR over the spine: from the spine's MAC to
/// the router's, TTL 62 after two hops.
fn via_spine(m: &Repr) -> Vec<u8> {
    let mut f = frame(FAR, SERVER, PORT_CLIENT, PORT_SERVER, m);
    f[0..6].copy_from_slice(&mac(ROUTER));
    f[6..12].copy_from_slice(&mac(SPINE));
    f[22] = 62;
    f[24..26].fill(0);
    let c = wire::checksum::sum(&f[14..34]);
    f[24..26].copy_from_slice(&(!c).to_be_bytes());
    f
}

fn macs_ttl(f: &[u8]) -> ([u8; 6], [u8; 6], u8) {
    assert!(wire::Ipv4Packet::new_checked(&f[14..]).unwrap().verify_checksum());
    (f[0..6].try_into().unwrap(), f[6..12].try_into().unwrap(), f[22])
}

#[test]
fn a_routed_get_hit_goes_back_to_the_neighbour_it_came_from() {
    let cfg = small();
    let (kb, vb) = (cfg.key_bytes, cfg.value_bytes);
    let mut r = Rig::new(cfg);
    routed(&mut r);
    let key = b"k-0007".to_vec();
    let value = val(7, vb);
    r.offload(&key, &value, None);
    let out = r.send(P_SPINE, &via_spine(&msg(Op::Get, &key, kb, vec![], 5)));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, P_SPINE, "out of the ingress port");
    let rep = parse(&out[0].1);
    assert_eq!((rep.op, rep.seq, rep.flags & FLAG_HIT, rep.value), (Op::GetReply, 5, FLAG_HIT, value.clone()));
    assert_eq!(macs_ttl(&out[0].1), (mac(SPINE), mac(ROUTER), 64), "to the spine, from the router MAC, fresh TTL");
    let ip = wire::Ipv4Packet::new_checked(&out[0].1[14..]).unwrap();
    assert_eq!((ip.src_addr(), ip.dst_addr()), (wire::Ipv4Address::new(10, 0, 0, SERVER), wire::Ipv4Address::new(10, 0, 0, FAR)));
    assert_eq!(u16::from_be_bytes([out[0].1[36], out[0].1[37]]), PORT_CLIENT);
    // A miss is routed to the server: its MAC, from the router's, TTL decremented.
    let out = r.send(P_SPINE, &via_spine(&msg(Op::Get, b"k-miss", kb, vec![], 6)));
    assert_eq!(out[0].0, P_SERVER);
    assert_eq!(macs_ttl(&out[0].1), (mac(SERVER), mac(ROUTER), 61));
    assert_eq!(parse(&out[0].1).op, Op::Get);
    // Un-routed, from a host of the rack: as before (MACs swapped, out of its port).
    let out = r.send(P_CLIENT, &frame(CLIENT, SERVER, PORT_CLIENT, PORT_SERVER, &msg(Op::Get, &key, kb, vec![], 8)));
    assert_eq!(out[0].0, P_CLIENT);
    assert_eq!(macs_ttl(&out[0].1), (mac(CLIENT), mac(SERVER), 64));
    assert_eq!(parse(&out[0].1).value, value);
}

/// An aging fetch (two passes) that arrived routed: the second pass answers with the
/// addresses the first one arrived with, not those routing wrote.
#[test]
fn a_routed_aging_fetch_is_answered_to_its_neighbour() {
    let mut r = Rig::new(small());
    routed(&mut r);
    r.write(1, "control_ports", vec![FieldMatch::Exact { field: 0, value: P_SPINE.to_be_bytes().to_vec() }], "allow_control", vec![]);
    r.offload(b"abcdef", &val(3, 8), None);
    let slot = r.emat.slot_of(b"abcdef").unwrap();
    let mut m = msg(Op::StatFetch, b"", 0, vec![0; 4], 0);
    m.hit_index = slot;
    m.status = 2;
    let f = via_spine(&m);
    r.now += 1000;
    let mut v = vec![PacketBuf::from_slice(&f, P_SPINE)];
    r.sw.process(&mut v, r.now);
    let mut out = r.sw.drain_all();
    for _ in 0..2 {
        r.now += 10;
        r.sw.tick(r.now);
        out.extend(r.sw.drain_all());
    }
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, P_SPINE);
    assert!(parse(&out[0].1).flags & FLAG_DONE != 0);
    assert_eq!(macs_ttl(&out[0].1), (mac(SPINE), mac(ROUTER), 64));
}

#[test]
fn replacing_objects_are_not_served() {
    let cfg = small();
    let mut r = Rig::new(cfg.clone());
    r.offload(b"abcdef", &val(1, 8), None);
    let slot = r.emat.slot_of(b"abcdef").unwrap();
    r.set_state(slot, state::REPLACING);
    let out = r.send(P_CLIENT, &frame(CLIENT, SERVER, PORT_CLIENT, PORT_SERVER, &msg(Op::Get, b"abcdef", 6, vec![], 1)));
    assert_eq!(out[0].0, P_SERVER, "a replacing object goes to its server");
    assert_eq!(r.stat(slot, false), 0);
}

/// A client issuing GETs and PUTs at random, a server holding a HashMap, and the
/// controller replacing offloaded keys at random in between: every GET returns the
/// latest written value.
#[test]
fn no_stale_read_after_put() {
    let cfg = small();
    let vb = cfg.value_bytes;
    let mut r = Rig::new(cfg);
    let keys: Vec<Vec<u8>> = (0..24u8).map(|i| vec![b'k', i % 3, i / 3, 0, i, 1]).collect();
    let mut store: HashMap<Vec<u8>, Vec<u8>> = keys.iter().map(|k| (k.clone(), val(0, vb))).collect();
    let mut rng = 0x9E3779B97F4A7C15u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for k in keys.iter().take(8) {
        r.offload(k, &store[k].clone(), None);
    }
    let (mut hits, mut gets) = (0, 0);
    for step in 0..3000u32 {
        let k = keys[(next() % keys.len() as u64) as usize].clone();
        match next() % 10 {
            0..=5 => {
                gets += 1;
                let out = r.send(P_CLIENT, &frame(CLIENT, SERVER, PORT_CLIENT, PORT_SERVER, &msg(Op::Get, &k, 6, vec![], step)));
                assert_eq!(out.len(), 1);
                let reply = if out[0].0 == P_CLIENT {
                    hits += 1;
                    parse(&out[0].1)
                } else {
                    // The server answers from its store.
                    let q = parse(&out[0].1);
                    let rep = msg(Op::GetReply, &q.key, 6, store[&q.key].clone(), q.seq);
                    let back = r.send(P_SERVER, &frame(SERVER, CLIENT, PORT_SERVER, PORT_CLIENT, &rep));
                    parse(&back[0].1)
                };
                assert_eq!(reply.value, store[&k], "stale read of {k:?} at step {step}");
            }
            6..=8 => {
                let v = val(step + 1, vb);
                let out = r.send(P_CLIENT, &frame(CLIENT, SERVER, PORT_CLIENT, PORT_SERVER, &msg(Op::Put, &k, 6, v.clone(), step)));
                assert_eq!(out[0].0, P_SERVER, "PUTs are written through");
                store.insert(k.clone(), v.clone());
                let back = r.send(P_SERVER, &frame(SERVER, CLIENT, PORT_SERVER, PORT_CLIENT, &msg(Op::PutReply, &k, 6, v, step)));
                assert_eq!(back[0].0, P_CLIENT);
            }
            _ => {
                // Replace a random offloaded key by a random non-offloaded one.
                if r.emat.slot_of(&k).is_none() {
                    let victims: Vec<_> = keys.iter().filter(|x| r.emat.slot_of(x).is_some()).cloned().collect();
                    let old = victims[(next() % victims.len() as u64) as usize].clone();
                    let ops = r.offload(&k, &store[&k].clone(), Some(&old));
                    assert!(ops <= 2 * 3);
                }
            }
        }
    }
    assert!(hits > gets / 5, "the switch answered {hits} of {gets} GETs");
}

#[test]
fn malformed_and_hostile_packets_are_counted_drops() {
    let cfg = small();
    let mut r = Rig::new(cfg);
    r.offload(b"abcdef", &val(1, 8), None);
    let good = frame(CLIENT, SERVER, PORT_CLIENT, PORT_SERVER, &msg(Op::Get, b"abcdef", 6, vec![], 1));
    // Truncated inside the Hare header.
    assert!(r.send(P_CLIENT, &good[..50]).is_empty());
    // Key field claims more bytes than the packet holds.
    let mut t = good.clone();
    t[42 + 3] = 200;
    assert!(r.send(P_CLIENT, &t).is_empty());
    assert_eq!(r.drops("malformed"), 2);
    // Unknown op.
    let mut u = good.clone();
    u[42] = 77;
    assert!(r.send(P_CLIENT, &u).is_empty());
    assert_eq!(r.drops("hare_unknown_op"), 1);
    // Key field of another width.
    let w = frame(CLIENT, SERVER, PORT_CLIENT, PORT_SERVER, &msg(Op::Get, b"abcdef", 8, vec![], 1));
    assert!(r.send(P_CLIENT, &w).is_empty());
    assert_eq!(r.drops("hare_key_field"), 1);
    // A client may not set states or move data.
    let mut m = msg(Op::StateSet, b"", 0, vec![], 0);
    m.status = state::VALID;
    assert!(r.send(P_CLIENT, &frame(CLIENT, SERVER, PORT_CLIENT, PORT_SERVER, &m)).is_empty());
    assert_eq!(r.drops("hare_control_denied"), 1);
    // Slot out of range from an allowed server.
    let mut m = msg(Op::DataMvToSwitch, b"", 6, val(5, 8), 0);
    m.hit_index = 64;
    assert!(r.send(P_SERVER, &frame(SERVER, 0xFE, PORT_SERVER, PORT_SERVER, &m)).is_empty());
    assert_eq!(r.drops("hare_bad_slot"), 1);
    // The switch still serves.
    let out = r.send(P_CLIENT, &good);
    assert_eq!(out[0].0, P_CLIENT);
    let _ = PORT_CPU;
}

#[test]
fn default_program_fits_tofino1_with_forward() {
    let f = Forward::new();
    let h = Hare::new();
    use pisa::Program;
    let rep = ResourceReport::new(&[f.decl(), h.decl()], &Target::tofino1());
    assert!(rep.fits, "{:?}", rep.problems);
    assert_eq!(h.config().shape().segments, vec![127, 1]);
    // 256-byte keys need more than the tofino1 parser reaches: the report says so.
    let big = Hare::with_config(HareConfig { key_bytes: 200, value_bytes: 64, slots: 1024, segment_bytes: None });
    let rep = ResourceReport::new(&[f.decl(), big.decl()], &Target::tofino1());
    assert!(!rep.fits);
    assert!(rep.problems.iter().any(|p| p.contains("parser")), "{:?}", rep.problems);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    /// On the switch itself: after random replacements a GET is answered by the switch
    /// exactly when its key is offloaded, with that key's value; each replacement costs
    /// at most 2×M table writes.
    #[test]
    fn emat_on_the_switch_has_no_false_hit_or_miss(
        steps in proptest::collection::vec((any::<prop::sample::Index>(), proptest::collection::vec(0u8..2, 6)), 1..25),
        probes in proptest::collection::vec(proptest::collection::vec(0u8..2, 6), 1..16),
    ) {
        let cfg = small();
        let mut r = Rig::new(cfg);
        let mut set: HashSet<Vec<u8>> = HashSet::new();
        let value_of = |k: &[u8]| { let mut v = k.to_vec(); v.extend_from_slice(&[7, 7]); v };
        for i in 0..6u8 {
            let k = vec![i % 2, 0, i / 2, 1, 0, i % 2];
            if set.insert(k.clone()) { r.offload(&k, &value_of(&k), None); }
        }
        for (which, new) in steps {
            if set.contains(&new) { continue; }
            let mut olds: Vec<_> = set.iter().cloned().collect();
            olds.sort();
            let old = which.get(&olds).clone();
            let before = r.emat.ops_total;
            r.offload(&new, &value_of(&new), Some(&old));
            prop_assert!(r.emat.ops_total - before <= 6);
            set.remove(&old);
            set.insert(new);
        }
        for k in set.iter().chain(probes.iter()) {
            let out = r.send(P_CLIENT, &frame(CLIENT, SERVER, PORT_CLIENT, PORT_SERVER, &msg(Op::Get, k, 6, vec![], 0)));
            let hit = out[0].0 == P_CLIENT;
            prop_assert_eq!(hit, set.contains(k), "key {:?}", k);
            if hit { prop_assert_eq!(parse(&out[0].1).value, value_of(k)); }
        }
    }
}
