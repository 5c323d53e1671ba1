//! The NetCache and DySO baselines on the switch model, against a HashMap store: hits
//! answered with the latest value, write-through PUTs (no stale read), NetCache's hot-key
//! report sent once, DySO's one-row-per-key limit, and what fits tofino1.

use std::collections::HashMap;
use std::sync::Arc;

use pisa::control::{CloneSession, ControlOp, Replica, WriteOp};
use pisa::{FieldMatch, PacketBuf, PipeConfig, Program, ProgramSet, ResourceReport, Switch, Target, PORT_CPU};
use programs::forward::Forward;
use programs::hare::dyso::{Dyso, DysoConfig};
use programs::hare::netcache::{NetCache, NetCacheConfig, REPORT_SESSION};
use programs::hare::oostat::state;
use wire::hare::{Op, Packet, Repr, FLAG_HIT, PORT_CLIENT, PORT_SERVER};

mod hare_common;
use hare_common::{frame, mac};

const P_CLIENT: u16 = 0;
const P_SERVER: u16 = 1;

fn msg(op: Op, key: &[u8], kf: usize, value: Vec<u8>) -> Repr {
    Repr { op, flags: 0, seq: 1, hit_index: 0, aux: 0, status: 0, key: key.to_vec(), key_field: kf as u8, value }
}

fn parse(f: &[u8]) -> Repr {
    Repr::parse(&Packet::new_checked(&f[42..]).unwrap()).unwrap()
}

struct Rig {
    sw: Switch,
    set: Arc<ProgramSet>,
    now: u64,
}

impl Rig {
    fn new(p: Arc<dyn Program>) -> Rig {
        let set = Arc::new(ProgramSet::new(vec![Arc::new(Forward::new()), p]).unwrap());
        let sw = Switch::new(set.clone(), 4, 1, PipeConfig::default());
        let mut r = Rig { sw, set, now: 1 };
        for (h, port) in [(1u8, P_CLIENT), (2u8, P_SERVER)] {
            r.write(
                0,
                "l2_dmac",
                vec![FieldMatch::Exact { field: 0, value: mac(h).to_vec() }],
                "l2_forward",
                vec![(1, port.to_be_bytes().to_vec())],
            );
            r.write(0, "l2_smac", vec![FieldMatch::Exact { field: 0, value: mac(h).to_vec() }], "nop", vec![]);
        }
        r
    }
    fn id(&self, prog: usize, kind: &str, name: &str) -> u32 {
        let d = self.set.decl(prog);
        let ids = self.set.ids(prog);
        match kind {
            "table" => ids.tables[d.tables.iter().position(|t| t.name == name).unwrap()],
            "action" => ids.actions[d.actions.iter().position(|t| t.name == name).unwrap()],
            "register" => ids.registers[d.registers.iter().position(|t| t.name == name).unwrap()],
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
    fn reg(&mut self, name: &str, index: u32, value: u64) {
        let id = self.id(1, "register", name);
        self.sw.control(&ControlOp::RegisterWrite { register_id: id, index: Some(index), value }).unwrap();
    }
    fn send(&mut self, port: u16, f: &[u8]) -> Vec<(u16, Vec<u8>)> {
        self.now += 1000;
        let mut v = vec![PacketBuf::from_slice(f, port)];
        self.sw.process(&mut v, self.now);
        self.sw.drain_all()
    }
    /// GET from the client; the server answers misses from `store`.
    fn get(&mut self, key: &[u8], kf: usize, store: &HashMap<Vec<u8>, Vec<u8>>) -> (bool, Vec<u8>) {
        let out = self.send(P_CLIENT, &frame(1, 2, PORT_CLIENT, PORT_SERVER, &msg(Op::Get, key, kf, vec![])));
        assert_eq!(out.len(), 1);
        if out[0].0 == P_CLIENT {
            let r = parse(&out[0].1);
            assert!(r.flags & FLAG_HIT != 0);
            return (true, r.value);
        }
        let back = self.send(P_SERVER, &frame(2, 1, PORT_SERVER, PORT_CLIENT, &msg(Op::GetReply, key, kf, store[key].clone())));
        (false, parse(&back[0].1).value)
    }
    fn put(&mut self, key: &[u8], kf: usize, v: &[u8]) {
        let out = self.send(P_CLIENT, &frame(1, 2, PORT_CLIENT, PORT_SERVER, &msg(Op::Put, key, kf, v.to_vec())));
        assert_eq!(out[0].0, P_SERVER);
        self.send(P_SERVER, &frame(2, 1, PORT_SERVER, PORT_CLIENT, &msg(Op::PutReply, key, kf, v.to_vec())));
    }
}

fn key(i: u32, kb: usize) -> Vec<u8> {
    let mut k = format!("user{i:08}").into_bytes();
    k.resize(kb, b'.');
    k
}

fn value(i: u32, vb: usize) -> Vec<u8> {
    let mut v = vec![0x5A; vb];
    v[..4].copy_from_slice(&i.to_be_bytes());
    v
}

#[test]
fn netcache_reports_hot_keys_once_and_writes_through() {
    let cfg = NetCacheConfig { key_bytes: 16, value_bytes: 8, slots: 64, report_threshold: 8 };
    let mut r = Rig::new(Arc::new(NetCache::with_config(cfg.clone())));
    r.sw.control(&ControlOp::CloneSessionWrite {
        op: WriteOp::Insert,
        session: REPORT_SESSION,
        session_cfg: CloneSession { replicas: vec![Replica { port: PORT_CPU, rid: 0 }], truncate_len: 0 },
    })
    .unwrap();
    let mut store: HashMap<Vec<u8>, Vec<u8>> = (0..10).map(|i| (key(i, 16), value(i, 8))).collect();
    for _ in 0..20 {
        let (hit, v) = r.get(&key(3, 16), 16, &store);
        assert!(!hit);
        assert_eq!(v, store[&key(3, 16)]);
    }
    let reports = r.sw.take_packet_ins();
    assert_eq!(reports.len(), 1, "reported once (count-min reached the threshold, Bloom filter dedups)");
    let rep = parse(reports[0].pkt.data());
    assert_eq!(rep.key, key(3, 16));
    // The controller caches it through the control plane: table entry, value words, valid.
    let k = key(3, 16);
    r.write(
        1,
        "cache",
        vec![FieldMatch::Exact { field: 0, value: vec![16] }, FieldMatch::Exact { field: 1, value: k.clone() }],
        "cache_hit",
        vec![(1, vec![0, 5])],
    );
    let v = store[&k].clone();
    for i in 0..2 {
        r.reg(&format!("value_{i}"), 5, u32::from_be_bytes(v[4 * i..4 * i + 4].try_into().unwrap()) as u64);
    }
    r.reg("obj_state", 5, state::VALID as u64);
    assert_eq!(r.get(&k, 16, &store), (true, v));
    // Write-through: after a PUT the next GET sees the new value, from the switch again.
    for n in 0..5 {
        let nv = value(100 + n, 8);
        r.put(&k, 16, &nv);
        store.insert(k.clone(), nv.clone());
        assert_eq!(r.get(&k, 16, &store), (true, nv));
    }
    // A PUT whose reply has not come back yet: served by the server, not the old copy.
    r.send(P_CLIENT, &frame(1, 2, PORT_CLIENT, PORT_SERVER, &msg(Op::Put, &k, 16, value(7, 8))));
    store.insert(k.clone(), value(7, 8));
    assert_eq!(r.get(&k, 16, &store), (false, value(7, 8)));
}

#[test]
fn dyso_offloads_by_packets_one_row_per_key() {
    let cfg = DysoConfig { key_bytes: 16, value_bytes: 8, rows: 4, columns: 1 };
    let d = Dyso::with_config(cfg.clone());
    let rows: Vec<u32> = (0..40).map(|i| d.row_of(16, &key(i, 16))).collect();
    let mut r = Rig::new(Arc::new(d));
    let mut store: HashMap<Vec<u8>, Vec<u8>> = (0..40).map(|i| (key(i, 16), value(i, 8))).collect();
    // Offload keys 0.. by packets from the CPU; a later key in a taken row evicts the earlier.
    let mut cached: HashMap<u32, u32> = HashMap::new();
    for i in 0..12u32 {
        let mut m = msg(Op::DataMvToSwitch, &key(i, 16), 16, value(i, 8));
        m.aux = 0;
        r.now += 1000;
        r.sw.packet_out(&frame(0, 0, PORT_CLIENT, PORT_SERVER, &m), None, r.now).unwrap();
        assert_eq!(r.sw.take_packet_ins().len(), 1, "acknowledged");
        cached.insert(rows[i as usize], i);
    }
    for i in 0..12u32 {
        let (hit, v) = r.get(&key(i, 16), 16, &store);
        assert_eq!(v, store[&key(i, 16)]);
        assert_eq!(hit, cached[&rows[i as usize]] == i, "key {i}: only the last key of its row is cached");
    }
    assert!(cached.len() <= 4);
    // Write-through on a cached key.
    let k = key(cached[&rows[11]], 16);
    r.put(&k, 16, &value(999, 8));
    store.insert(k.clone(), value(999, 8));
    assert_eq!(r.get(&k, 16, &store), (true, value(999, 8)));
}

#[test]
fn baselines_against_tofino1() {
    let f = Forward::new();
    let t = Target::tofino1();
    let nc = NetCache::new();
    assert!(ResourceReport::new(&[f.decl(), nc.decl()], &t).fits);
    let dy = Dyso::new();
    assert!(ResourceReport::new(&[f.decl(), dy.decl()], &t).fits);
    // 80-byte keys and values: one r-MAT column takes 20 + 1 + 20 ALUs (11 stages); two do not fit.
    let one = Dyso::with_config(DysoConfig { key_bytes: 80, value_bytes: 80, rows: 8192, columns: 1 });
    let rep = ResourceReport::new(&[f.decl(), one.decl()], &t);
    assert!(rep.fits, "{:?}", rep.problems);
    let two = Dyso::with_config(DysoConfig { key_bytes: 80, value_bytes: 80, rows: 8192, columns: 2 });
    assert!(!ResourceReport::new(&[f.decl(), two.decl()], &t).fits);
    // NetCache cannot match a 128-byte key with its length in one stage.
    let big = NetCache::with_config(NetCacheConfig { key_bytes: 128, value_bytes: 64, slots: 1024, report_threshold: 384 });
    assert!(!ResourceReport::new(&[f.decl(), big.decl()], &t).fits);
}
