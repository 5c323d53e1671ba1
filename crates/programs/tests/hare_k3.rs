//! K3 on the switch: a third application, written here only as a `HareApp` (its data and
//! its query-hit and data-movement processing), runs on the generic `HareProgram`. The
//! framework must find its offloaded keys (against a HashMap of what was offloaded),
//! count their hits in OO-Stat (against a counter), serve nothing while a slot is being
//! replaced, and drop malformed data movement under the application's prefix.

use std::collections::HashMap;
use std::sync::Arc;

use pisa::control::{ControlOp, WriteOp};
use pisa::{FieldMatch, Gress, PacketBuf, Pass, PipeConfig, ProgramBuilder, ProgramSet, RegisterAction, Switch, TraceMode};
use programs::forward::Forward;
use programs::hare::app::{DataMv, HareApp, QueryHit};
use programs::hare::emat::{mat_name, Emat, EmatState};
use programs::hare::kv::Packer;
use programs::hare::oostat::state;
use programs::hare::{HareConfig, HareProgram};
use wire::hare::{Op, Packet, Repr, FLAG_DONE, FLAG_HIT, HEADER_LEN, PORT_CLIENT, PORT_SERVER};
use wire::L2_L4_LEN;

mod hare_common;
use hare_common::{frame, mac};

fn get(c: u32, _: ()) -> (u32, u32) {
    (c, c)
}
fn put(_: u32, v: u32) -> (u32, ()) {
    (v, ())
}

/// Tags a GET for an offloaded key with the key's 4-byte word and lets it go on to its
/// server (e.g. a version or shard hint).
struct Tagger {
    get: RegisterAction<u32, (), u32>,
    put: RegisterAction<u32, u32, ()>,
}

impl HareApp for Tagger {
    const NAME: &'static str = "tagger";
    const DOC: &'static str = "test application: tags queries for offloaded keys";
    const DROP_PREFIX: &'static str = "tagger";
    const METADATA_BITS: u32 = 32;

    fn default_config() -> HareConfig {
        HareConfig { key_bytes: 6, value_bytes: 4, slots: 64, segment_bytes: Some(2) }
    }

    fn define_appdata(b: &mut ProgramBuilder, cfg: &HareConfig, packer: &mut Packer) -> Self {
        let r = b.register::<u32>("word", Gress::Ingress, packer.take(), cfg.slots, "each offloaded key's word");
        Tagger { get: b.register_action(r, "get", get), put: b.register_action(r, "put", put) }
    }

    fn apply_queryhit<M: TraceMode>(&self, pass: &mut Pass<'_, M>, cfg: &HareConfig, op: Op, hit: &QueryHit<'_>) {
        if op != Op::Get || hit.value_len != 4 || pass.execute(&hit.states.check, hit.slot as u32, ()) != state::VALID {
            return;
        }
        pass.execute(&hit.oo.count, hit.slot as u32, ());
        let w = pass.execute(&self.get, hit.slot as u32, ());
        let h = pass.hdr_mut();
        h[L2_L4_LEN + HEADER_LEN + cfg.key_bytes..][..4].copy_from_slice(&w.get().to_be_bytes());
        h[L2_L4_LEN + 1] |= FLAG_HIT;
    }

    fn apply_datamv<M: TraceMode>(&self, pass: &mut Pass<'_, M>, _cfg: &HareConfig, op: Op, dm: &DataMv) -> bool {
        if dm.vlen != 4 {
            return false;
        }
        if op == Op::DataMvToSwitch {
            let v = u32::from_be_bytes(pass.hdr()[dm.voff..dm.voff + 4].try_into().unwrap());
            pass.execute(&self.put, dm.slot as u32, v);
        } else {
            let w = pass.execute(&self.get, dm.slot as u32, ());
            pass.hdr_mut()[dm.voff..dm.voff + 4].copy_from_slice(&w.get().to_be_bytes());
        }
        true
    }
}

fn msg(op: Op, key: &[u8], kf: usize, value: Vec<u8>, slot: u16, status: u8) -> Repr {
    Repr { op, flags: 0, seq: 1, hit_index: slot, aux: 0, status, key: key.to_vec(), key_field: kf as u8, value }
}

fn parse(f: &[u8]) -> Repr {
    Repr::parse(&Packet::new_checked(&f[42..]).unwrap()).unwrap()
}

#[test]
fn a_third_application_runs_on_the_generic_program() {
    let cfg = Tagger::default_config();
    let kb = cfg.key_bytes;
    let prog = HareProgram::<Tagger>::new();
    let set = Arc::new(ProgramSet::new(vec![Arc::new(Forward::new()), Arc::new(prog)]).unwrap());
    let mut sw = Switch::new(set.clone(), 4, 1, PipeConfig::default());
    let id = |prog: usize, table: bool, name: &str| {
        let (d, ids) = (set.decl(prog), set.ids(prog));
        if table {
            ids.tables[d.tables.iter().position(|t| t.name == name).unwrap()]
        } else {
            ids.actions[d.actions.iter().position(|t| t.name == name).unwrap()]
        }
    };
    let write = |sw: &mut Switch, prog: usize, table: &str, value: Vec<u8>, action: &str, params: Vec<(u32, Vec<u8>)>| {
        let op = ControlOp::TableWrite {
            table_id: id(prog, true, table),
            op: WriteOp::Insert,
            matches: vec![FieldMatch::Exact { field: 0, value }],
            priority: 0,
            action_id: id(prog, false, action),
            params,
        };
        sw.control(&op).unwrap();
    };
    for (h, p) in [(1u8, 0u16), (2, 1)] {
        write(&mut sw, 0, "l2_dmac", mac(h).to_vec(), "l2_forward", vec![(1, p.to_be_bytes().to_vec())]);
        write(&mut sw, 0, "l2_smac", mac(h).to_vec(), "nop", vec![]);
    }
    write(&mut sw, 1, "control_ports", 1u16.to_be_bytes().to_vec(), "allow_control", vec![]);
    let mut now = 1u64;
    let mut send = |sw: &mut Switch, port: u16, f: Vec<u8>| {
        now += 1000;
        let mut v = vec![PacketBuf::from_slice(&f, port)];
        sw.process(&mut v, now);
        sw.drain_all()
    };
    let tids: Vec<u32> = (0..cfg.shape().mats()).map(|m| id(1, true, &mat_name(m))).collect();
    let aid = id(1, false, "set_index");
    let mut emat = EmatState::new(cfg.shape(), cfg.slots);
    // Offload 10 keys (framework steps, application data by DataMvToSwitch from the server).
    let keys: Vec<Vec<u8>> = (0..20u32).map(|i| format!("k{i:05}").into_bytes()).collect();
    let mut offloaded: HashMap<Vec<u8>, (u16, u32)> = HashMap::new();
    for (i, k) in keys.iter().take(10).enumerate() {
        let slot = emat.free_slot().unwrap();
        for o in emat.insert(k, slot).unwrap() {
            sw.control(&Emat::control_op(&o, &tids, aid)).unwrap();
        }
        let word = 0xA000 + i as u32;
        let out = send(
            &mut sw,
            1,
            frame(2, 2, PORT_SERVER, PORT_SERVER, &msg(Op::DataMvToSwitch, b"", kb, word.to_be_bytes().to_vec(), slot, 0)),
        );
        assert_eq!(out.len(), 1);
        assert!(parse(&out[0].1).flags & FLAG_DONE != 0);
        let out = send(&mut sw, 1, frame(2, 2, PORT_SERVER, PORT_SERVER, &msg(Op::StateSet, b"", 0, vec![], slot, state::VALID)));
        assert_eq!(out.len(), 1);
        offloaded.insert(k.clone(), (slot, word));
    }
    // GETs: offloaded keys arrive at the server tagged with their word, others untouched.
    let mut hits: HashMap<u16, u32> = HashMap::new();
    for n in 0..200usize {
        let k = &keys[(n * 7) % keys.len()];
        let out = send(&mut sw, 0, frame(1, 2, PORT_CLIENT, PORT_SERVER, &msg(Op::Get, k, kb, vec![0; 4], 0, 0)));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0, 1, "on to the server");
        let r = parse(&out[0].1);
        match offloaded.get(k) {
            Some(&(slot, word)) => {
                assert!(r.flags & FLAG_HIT != 0);
                assert_eq!(r.value, word.to_be_bytes());
                *hits.entry(slot).or_default() += 1;
            }
            None => assert!(r.flags & FLAG_HIT == 0 && r.value == [0; 4]),
        }
    }
    // OO-Stat, fetched from the server port, equals the hits counted here.
    for &(slot, _) in offloaded.values() {
        let out = send(&mut sw, 1, frame(2, 2, PORT_SERVER, PORT_SERVER, &msg(Op::StatFetch, b"", 0, vec![0; 4], slot, 0)));
        let c = u32::from_be_bytes(parse(&out[0].1).value[..4].try_into().unwrap());
        assert_eq!(c, hits.get(&slot).copied().unwrap_or(0));
    }
    // A slot being replaced (state manager) is not served; its data comes back by packet.
    let (slot, word) = offloaded[&keys[0]];
    send(&mut sw, 1, frame(2, 2, PORT_SERVER, PORT_SERVER, &msg(Op::StateSet, b"", 0, vec![], slot, state::REPLACING)));
    let out = send(&mut sw, 0, frame(1, 2, PORT_CLIENT, PORT_SERVER, &msg(Op::Get, &keys[0], kb, vec![0; 4], 0, 0)));
    assert!(parse(&out[0].1).flags & FLAG_HIT == 0);
    let out = send(&mut sw, 1, frame(2, 2, PORT_SERVER, PORT_SERVER, &msg(Op::DataMvToServer, b"", kb, vec![0; 4], slot, 0)));
    assert_eq!(parse(&out[0].1).value, word.to_be_bytes());
    // Malformed data movement is the application's to judge, counted as malformed.
    let out = send(&mut sw, 1, frame(2, 2, PORT_SERVER, PORT_SERVER, &msg(Op::DataMvToSwitch, b"", kb, vec![0; 3], slot, 0)));
    assert!(out.is_empty());
    let d = set.decl(1);
    let code = d.drop_code("malformed").unwrap();
    assert_eq!(sw.counters().programs[1].drops[code.0 as usize], 1);
}
