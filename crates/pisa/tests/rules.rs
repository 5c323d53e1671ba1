//! The hardware rules and the traffic manager, exercised with a small test program whose
//! behaviour is chosen by the first byte of each packet.

use std::sync::Arc;

use pisa::control::{CloneSession, ControlOp, ControlReply, Replica, WriteOp};
use pisa::decl::TableSpec;
use pisa::program::id_prefix;
use pisa::*;

const OP_OK: u8 = 0;
const OP_TWICE: u8 = 1;
const OP_BACKWARDS: u8 = 2;
const OP_OUT_OF_RANGE: u8 = 3;
const OP_RECIRC: u8 = 4;
const OP_CLONE: u8 = 5;
const OP_CPU: u8 = 6;
const OP_DIGEST: u8 = 7;
const OP_WRONG_GRESS: u8 = 8;
const OP_MCAST: u8 = 9;
const OP_GROW: u8 = 10;
const OP_TABLE: u8 = 11;
const OP_TABLE_TWICE: u8 = 12;

struct Probe {
    decl: ProgramDecl,
    early: RegisterAction<u32, u32, u32>,
    late: RegisterAction<u32, u32, u32>,
    late_read: RegisterAction<u32, (), u32>,
    eg: RegisterAction<u32, u32, u32>,
    table: Table,
    a_set: ActionId,
    digest: Digest,
}

fn add(c: u32, x: u32) -> (u32, u32) {
    let n = c.wrapping_add(x);
    (n, n)
}
fn read(c: u32, _: ()) -> (u32, u32) {
    (c, c)
}

impl Probe {
    fn new() -> Probe {
        let mut b = ProgramBuilder::new("probe", "test program");
        b.parser(64, &[("probe", 512)]).max_recirculations(Some(3));
        let r0 = b.register::<u32>("early", Gress::Ingress, 0, 16, "");
        let early = b.register_action(r0, "add", add);
        let r1 = b.register::<u32>("late", Gress::Ingress, 2, 16, "");
        let late = b.register_action(r1, "add", add);
        let late_read = b.register_action(r1, "read", read);
        let r2 = b.register::<u32>("eg", Gress::Egress, 0, 16, "");
        let eg = b.register_action(r2, "add", add);
        let a_set = b.action("set_port", &[("port", 9)], "");
        let a_none = b.action("none", &[], "");
        let table = b.table(TableSpec {
            name: "t",
            doc: "",
            gress: Gress::Ingress,
            stage: 1,
            size: 4,
            keys: &[("k", 8, MatchKind::Exact)],
            actions: &[a_set, a_none],
            default_action: (a_none, &[]),
            const_default: false,
        });
        let digest = b.digest("d", &[("x", 32)], "");
        Probe { decl: b.build().unwrap(), early, late, late_read, eg, table, a_set, digest }
    }
}

impl Program for Probe {
    fn decl(&self) -> &ProgramDecl {
        &self.decl
    }
    fn ingress(&self, p: &mut Pass<'_>) {
        let op = p.hdr()[0];
        let out = p.hdr()[1] as u16;
        p.forward(out);
        match op {
            OP_OK => {
                p.execute(&self.early, 0, 1);
                p.execute(&self.late, 0, 1);
            }
            OP_TWICE => {
                p.execute(&self.late, 0, 1);
                p.execute(&self.late_read, 0, ());
            }
            OP_BACKWARDS => {
                p.execute(&self.late, 0, 1);
                p.execute(&self.early, 0, 1);
            }
            OP_OUT_OF_RANGE => {
                p.execute(&self.early, 16, 1);
            }
            OP_RECIRC => {
                p.execute(&self.early, 1, 1);
                p.recirculate();
            }
            OP_CLONE => p.clone_ingress(5),
            OP_CPU => p.to_cpu(),
            OP_DIGEST => p.digest(&self.digest, &[0xAA, 0xBB, 0xCC, 0xDD]),
            OP_WRONG_GRESS => {
                p.execute(&self.eg, 0, 1);
            }
            OP_MCAST => p.multicast(7, Some(p.ingress_port())),
            OP_GROW => {
                let ok = p.resize_hdr(48);
                assert!(ok);
                p.hdr_mut()[40] = 0x77;
            }
            OP_TABLE => {
                let k = p.hdr()[2];
                let r = p.apply(&self.table, &[k]);
                if r.action == self.a_set {
                    p.forward(r.param(0) as u16);
                }
            }
            OP_TABLE_TWICE => {
                p.apply(&self.table, &[0]);
                p.apply(&self.table, &[0]);
            }
            _ => p.drop(DropCode::PROGRAM),
        }
    }
    fn egress(&self, p: &mut Pass<'_>) {
        let port = p.egress_port() as u32;
        p.execute(&self.eg, port, 1);
    }
}

fn switch(ports: u16, pipes: u8) -> (Switch, Arc<ProgramSet>) {
    let set = Arc::new(ProgramSet::new(vec![Arc::new(Probe::new())]).unwrap());
    (Switch::new(set.clone(), ports, pipes, PipeConfig::default()), set)
}

fn frame(op: u8, out: u8, port: PortId) -> PacketBuf {
    let mut b = vec![0u8; 60];
    b[0] = op;
    b[1] = out;
    PacketBuf::from_slice(&b, port)
}

fn send(sw: &mut Switch, pkts: Vec<PacketBuf>) -> Vec<(PortId, Vec<u8>)> {
    let mut v = pkts;
    sw.process(&mut v, 1_000);
    sw.drain_all()
}

fn reg(sw: &mut Switch, set: &ProgramSet, idx: usize, cell: u32) -> u64 {
    match sw.control(&ControlOp::RegisterRead { register_id: set.ids(0).registers[idx], index: Some(cell) }).unwrap() {
        ControlReply::RegisterCells(v) => v[0].1,
        _ => unreachable!(),
    }
}

#[test]
fn legal_accesses_forward_and_count() {
    let (mut sw, set) = switch(4, 1);
    let out = send(&mut sw, vec![frame(OP_OK, 2, 0), frame(OP_OK, 3, 1)]);
    assert_eq!(out.iter().map(|o| o.0).collect::<Vec<_>>(), vec![2, 3]);
    assert_eq!(reg(&mut sw, &set, 0, 0), 2);
    assert_eq!(reg(&mut sw, &set, 1, 0), 2);
    assert_eq!(reg(&mut sw, &set, 2, 2), 1, "egress counter of port 2");
    assert_eq!(sw.counters().total_drops(), 0);
}

#[test]
fn violations_drop_and_are_counted_by_kind() {
    let (mut sw, set) = switch(4, 1);
    let out = send(
        &mut sw,
        vec![
            frame(OP_TWICE, 1, 0),
            frame(OP_BACKWARDS, 1, 0),
            frame(OP_OUT_OF_RANGE, 1, 0),
            frame(OP_WRONG_GRESS, 1, 0),
            frame(OP_TABLE_TWICE, 1, 0),
        ],
    );
    assert!(out.is_empty(), "every violating packet is dropped");
    let c = sw.counters();
    let v = &c.programs[0].violations;
    assert_eq!(v[Violation::DoubleAccess.index()], 2);
    assert_eq!(v[Violation::StageOrder.index()], 1);
    assert_eq!(v[Violation::IndexOutOfRange.index()], 1);
    assert_eq!(v[Violation::WrongGress.index()], 1);
    assert_eq!(c.drops[DropCode::VIOLATION.0 as usize], 5);
    // The legal first accesses of OP_TWICE and OP_BACKWARDS happened (state changes are per
    // access, as on hardware); the illegal ones did not.
    assert_eq!(reg(&mut sw, &set, 1, 0), 2);
    assert_eq!(reg(&mut sw, &set, 0, 0), 0);
    // The switch keeps forwarding after violations.
    let out = send(&mut sw, vec![frame(OP_OK, 1, 0)]);
    assert_eq!(out.len(), 1);
}

#[test]
fn recirculation_is_counted_and_bounded() {
    let (mut sw, set) = switch(2, 1);
    let out = send(&mut sw, vec![frame(OP_RECIRC, 1, 0)]);
    assert!(out.is_empty());
    for t in 0..10 {
        sw.tick(2_000 + t);
    }
    let c = sw.counters();
    // Three recirculations allowed: passes 0..=3 run, the fourth recirculation is refused.
    assert_eq!(c.recirculations, 3);
    assert_eq!(c.drops[DropCode::RECIRC_LIMIT.0 as usize], 1);
    assert_eq!(reg(&mut sw, &set, 0, 1), 4);
}

#[test]
fn clone_multicast_cpu_and_digest() {
    let (mut sw, set) = switch(4, 1);
    sw.control(&ControlOp::CloneSessionWrite {
        op: WriteOp::Insert,
        session: 5,
        session_cfg: CloneSession { replicas: vec![Replica { port: 3, rid: 9 }], truncate_len: 20 },
    })
    .unwrap();
    let out = send(&mut sw, vec![frame(OP_CLONE, 1, 0)]);
    let mut ports: Vec<_> = out.iter().map(|(p, b)| (*p, b.len())).collect();
    ports.sort();
    assert_eq!(ports, vec![(1, 60), (3, 20)], "original to 1, truncated clone to 3");

    sw.control(&ControlOp::McastGroupWrite {
        op: WriteOp::Insert,
        group: 7,
        replicas: (0..4).map(|p| Replica { port: p, rid: p }).collect(),
    })
    .unwrap();
    let out = send(&mut sw, vec![frame(OP_MCAST, 0, 2)]);
    let mut ports: Vec<_> = out.iter().map(|o| o.0).collect();
    ports.sort();
    assert_eq!(ports, vec![0, 1, 3], "replicated to every port but the source");

    let out = send(&mut sw, vec![frame(OP_CPU, 0, 1)]);
    assert!(out.is_empty());
    let pins = sw.take_packet_ins();
    assert_eq!(pins.len(), 1);
    assert_eq!(pins[0].ingress_port, 1);

    // Digests are delivered only once the controller enables them.
    send(&mut sw, vec![frame(OP_DIGEST, 0, 1)]);
    assert!(sw.take_digests().is_empty());
    sw.control(&ControlOp::DigestConfig { digest_id: set.ids(0).digests[0], enabled: true }).unwrap();
    send(&mut sw, vec![frame(OP_DIGEST, 0, 1)]);
    let d = sw.take_digests();
    assert_eq!(d.len(), 1);
    assert_eq!(&*d[0].data, &[0xAA, 0xBB, 0xCC, 0xDD]);
}

#[test]
fn header_can_grow_within_parse_depth() {
    let (mut sw, _) = switch(2, 1);
    let out = send(&mut sw, vec![frame(OP_GROW, 1, 0)]);
    assert_eq!(out.len(), 1);
    // 60-byte frame: 60 header bytes visible (depth 64) -> grown to... resize to 48 shrinks
    // the header region from 60 to 48; payload (0 bytes) follows.
    assert_eq!(out[0].1.len(), 48);
    assert_eq!(out[0].1[40], 0x77);
}

#[test]
fn tables_from_the_control_plane() {
    let (mut sw, set) = switch(4, 1);
    let tid = set.ids(0).tables[0];
    let set_port = set.ids(0).actions[0];
    let write = |sw: &mut Switch, op, k: u8, port: u8| {
        sw.control(&ControlOp::TableWrite {
            table_id: tid,
            op,
            matches: vec![FieldMatch::Exact { field: 0, value: vec![k] }],
            priority: 0,
            action_id: set_port,
            params: vec![(1, vec![port])],
        })
    };
    write(&mut sw, WriteOp::Insert, 7, 3).unwrap();
    assert!(matches!(write(&mut sw, WriteOp::Insert, 7, 3), Err(ControlError::AlreadyExists(_))));
    let mut f = frame(OP_TABLE, 1, 0);
    f.data_mut()[2] = 7;
    let out = send(&mut sw, vec![f]);
    assert_eq!(out[0].0, 3);
    write(&mut sw, WriteOp::Modify, 7, 2).unwrap();
    let mut f = frame(OP_TABLE, 1, 0);
    f.data_mut()[2] = 7;
    assert_eq!(send(&mut sw, vec![f])[0].0, 2);
    // Capacity is fixed: 4 entries.
    for k in 0..3 {
        write(&mut sw, WriteOp::Insert, k, 1).unwrap();
    }
    assert!(matches!(write(&mut sw, WriteOp::Insert, 100, 1), Err(ControlError::ResourceExhausted(_))));
    // Parameter wider than declared (9 bits) is refused.
    let r = sw.control(&ControlOp::TableWrite {
        table_id: tid,
        op: WriteOp::Modify,
        matches: vec![FieldMatch::Exact { field: 0, value: vec![7] }],
        priority: 0,
        action_id: set_port,
        params: vec![(1, vec![0x02, 0x00])],
    });
    assert!(matches!(r, Err(ControlError::InvalidArgument(_))), "{r:?}");
    // A priority on an exact table is refused.
    let r = sw.control(&ControlOp::TableWrite {
        table_id: tid,
        op: WriteOp::Insert,
        matches: vec![FieldMatch::Exact { field: 0, value: vec![9] }],
        priority: 5,
        action_id: set_port,
        params: vec![(1, vec![1])],
    });
    assert!(matches!(r, Err(ControlError::InvalidArgument(_))));
    write(&mut sw, WriteOp::Delete, 7, 0).unwrap();
    assert!(matches!(write(&mut sw, WriteOp::Delete, 7, 0), Err(ControlError::NotFound(_))));
    assert!(set.resolve(tid, id_prefix::TABLE).is_some());
    assert!(set.resolve(tid, id_prefix::ACTION).is_none(), "ids carry their kind");
}

#[test]
fn pipes_keep_their_own_registers_and_forward_across() {
    let (mut sw, set) = switch(4, 2);
    // Port 0 is in pipe 0, port 3 in pipe 1.
    let out = send(&mut sw, vec![frame(OP_OK, 3, 0), frame(OP_OK, 0, 3), frame(OP_OK, 0, 3)]);
    assert_eq!(out.len(), 3);
    let read_pipe = |sw: &mut Switch, pipe: usize| match sw
        .pipe_mut(pipe)
        .control(&ControlOp::RegisterRead { register_id: set.ids(0).registers[0], index: Some(0) })
        .unwrap()
    {
        ControlReply::RegisterCells(v) => v[0].1,
        _ => unreachable!(),
    };
    assert_eq!(read_pipe(&mut sw, 0), 1);
    assert_eq!(read_pipe(&mut sw, 1), 2);
    // Egress runs in the egress port's pipe.
    let eg = |sw: &mut Switch, pipe: usize, port: u32| match sw
        .pipe_mut(pipe)
        .control(&ControlOp::RegisterRead { register_id: set.ids(0).registers[2], index: Some(port) })
        .unwrap()
    {
        ControlReply::RegisterCells(v) => v[0].1,
        _ => unreachable!(),
    };
    assert_eq!(eg(&mut sw, 1, 3), 1);
    assert_eq!(eg(&mut sw, 0, 0), 2);
}

#[test]
fn queues_are_bounded() {
    let set = Arc::new(ProgramSet::new(vec![Arc::new(Probe::new())]).unwrap());
    let cfg = PipeConfig { queue_capacity: 8, egress_budget: 4, ..PipeConfig::default() };
    let mut sw = Switch::new(set, 2, 1, cfg);
    let pkts: Vec<_> = (0..20).map(|_| frame(OP_OK, 1, 0)).collect();
    let out = send(&mut sw, pkts);
    // Egress sends 4 per round; settle runs rounds only while handoffs exist, so 4 leave now,
    // 8 were queued, 12 dropped.
    let c = sw.counters();
    assert_eq!(c.ports[1].queue_drops, 12);
    assert_eq!(c.ports[1].queue_depth_max, 8);
    assert_eq!(out.len(), 4);
    sw.tick(10_000);
    assert_eq!(sw.drain_all().len(), 4);
}

#[test]
fn packet_generator_injects_periodically() {
    struct Gen(ProgramDecl);
    impl Program for Gen {
        fn decl(&self) -> &ProgramDecl {
            &self.0
        }
        fn ingress(&self, p: &mut Pass<'_>) {
            if p.ingress_port() == PORT_PKTGEN {
                p.forward(1);
            } else {
                p.drop(DropCode::PROGRAM);
            }
        }
    }
    let mut b = ProgramBuilder::new("gen", "");
    b.parser(14, &[]).packet_generator("tick", 1_000, vec![0u8; 64]);
    let set = Arc::new(ProgramSet::new(vec![Arc::new(Gen(b.build().unwrap()))]).unwrap());
    let mut sw = Switch::new(set, 2, 1, PipeConfig::default());
    assert_eq!(sw.next_deadline(), None);
    sw.tick(0); // arms the timer
    assert_eq!(sw.next_deadline(), Some(1_000));
    for t in 1..=10 {
        sw.tick(t * 1_000);
    }
    assert_eq!(sw.drain_all().len(), 10);
    assert_eq!(sw.counters().pktgen_packets, 10);
    sw.control(&ControlOp::PktGenConfig { program: "gen".into(), name: "tick".into(), period_ns: 0 }).unwrap();
    sw.tick(100_000);
    assert!(sw.drain_all().is_empty());
}

/// Egress clones into the port being served join its queue behind the packets still
/// waiting, count against its capacity with them, and leave in the same call if the budget
/// allows: the queue behaves as one FIFO however it is stored.
#[test]
fn egress_clones_queue_behind_waiting_packets() {
    struct Mirror(ProgramDecl);
    impl Program for Mirror {
        fn decl(&self) -> &ProgramDecl {
            &self.0
        }
        fn ingress(&self, p: &mut Pass<'_>) {
            p.forward(1);
        }
        fn egress(&self, p: &mut Pass<'_>) {
            // Packet 1 (first byte) mirrors itself, through a session with two copies to
            // its own port; copies carry their replication id in byte 1.
            if p.is_clone() {
                let rid = p.replication_id() as u8;
                p.hdr_mut()[1] = rid;
            } else if p.hdr()[0] == 1 {
                p.clone_egress(1);
            }
        }
    }
    let run = |budget: usize| {
        let mut b = ProgramBuilder::new("mirror", "");
        b.parser(14, &[]);
        let set = Arc::new(ProgramSet::new(vec![Arc::new(Mirror(b.build().unwrap()))]).unwrap());
        let cfg = PipeConfig { queue_capacity: 3, egress_budget: budget, ..PipeConfig::default() };
        let mut sw = Switch::new(set, 2, 1, cfg);
        let session = CloneSession { replicas: vec![Replica { port: 1, rid: 7 }, Replica { port: 1, rid: 8 }], truncate_len: 0 };
        sw.control(&ControlOp::CloneSessionWrite { op: WriteOp::Insert, session: 1, session_cfg: session }).unwrap();
        let pkts = (1..=3u8).map(|i| PacketBuf::from_slice(&[i, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], 0)).collect();
        let first: Vec<_> = send(&mut sw, pkts).into_iter().map(|(port, b)| (port, b[0], b[1])).collect();
        let c = sw.counters();
        sw.tick(2_000);
        let later: Vec<_> = sw.drain_all().into_iter().map(|(port, b)| (port, b[0], b[1])).collect();
        (first, later, c)
    };
    // Packet 1 leaves; packets 2 and 3 still wait, so of its two copies the first fills the
    // queue (3) and the second finds it full.
    let (first, later, c) = run(4);
    assert_eq!(first, vec![(1, 1, 0), (1, 2, 0), (1, 3, 0), (1, 1, 7)], "the copy leaves after the packets before it, in the same call");
    assert!(later.is_empty());
    assert_eq!(c.ports[1].queue_drops, 1);
    assert_eq!(c.ports[1].queue_depth_max, 3);
    assert_eq!(c.clones, 2);
    // With a budget of 3 the copy waits for the next call.
    let (first, later, c) = run(3);
    assert_eq!(first, vec![(1, 1, 0), (1, 2, 0), (1, 3, 0)]);
    assert_eq!(later, vec![(1, 1, 7)]);
    assert_eq!(c.ports[1].queue_drops, 1);
}

/// Packets left over by the budget stay ahead of later arrivals.
#[test]
fn leftovers_leave_before_later_packets() {
    let set = Arc::new(ProgramSet::new(vec![Arc::new(Probe::new())]).unwrap());
    let cfg = PipeConfig { queue_capacity: 16, egress_budget: 3, ..PipeConfig::default() };
    let mut sw = Switch::new(set, 2, 1, cfg);
    let batch = |from: u8| {
        (from..from + 5)
            .map(|i| {
                let mut f = frame(OP_OK, 1, 0);
                f.raw_mut()[2] = i;
                f
            })
            .collect::<Vec<_>>()
    };
    let ids = |v: Vec<(PortId, Vec<u8>)>| v.into_iter().map(|(_, b)| b[2]).collect::<Vec<_>>();
    assert_eq!(ids(send(&mut sw, batch(0))), vec![0, 1, 2]);
    assert_eq!(ids(send(&mut sw, batch(10))), vec![3, 4, 10]);
    assert_eq!(ids(send(&mut sw, vec![])), vec![11, 12, 13]);
    assert_eq!(ids(send(&mut sw, vec![])), vec![14]);
    assert_eq!(sw.counters().ports[1].queue_depth_max, 7);
}

/// The pass guard tracks up to 64 tables, register arrays and hash units per stage and gress,
/// and 64 digests per program; a declaration beyond that is refused.
#[test]
fn per_stage_and_digest_limits() {
    let mut b = ProgramBuilder::new("wide", "");
    for i in 0..decl::MAX_STAGE_OBJECTS {
        b.register::<u32>(&format!("r{i}"), Gress::Ingress, 3, 1, "");
    }
    b.register::<u32>("other_stage", Gress::Ingress, 4, 1, "");
    b.register::<u32>("other_gress", Gress::Egress, 3, 1, "");
    for i in 0..decl::MAX_DIGESTS {
        b.digest(&format!("d{i}"), &[("x", 8)], "");
    }
    assert!(b.build().is_ok());

    let mut b = ProgramBuilder::new("too_wide", "");
    for i in 0..=decl::MAX_STAGE_OBJECTS {
        b.register::<u32>(&format!("r{i}"), Gress::Ingress, 3, 1, "");
    }
    assert_eq!(b.build().unwrap_err().len(), 1);

    let mut b = ProgramBuilder::new("too_many_digests", "");
    for i in 0..=decl::MAX_DIGESTS {
        b.digest(&format!("d{i}"), &[("x", 8)], "");
    }
    assert_eq!(b.build().unwrap_err().len(), 1);
}

/// Same-stage dependency: two register arrays and a hash unit in stage 1, one array in
/// stage 2. What a register action of stage 1 produces may be an index or operand only
/// from stage 2 on; a hash result may address an array of its own stage (Tofino's hash
/// distribution feeds the stage's stateful ALUs).
struct Chain {
    decl: ProgramDecl,
    a_read: RegisterAction<u32, (), u32>,
    b_add: RegisterAction<u32, u32, u32>,
    c_add: RegisterAction<u32, u32, u32>,
    h: HashUnit,
}

const CH_NEXT_STAGE: u8 = 0;
const CH_INDEX: u8 = 1;
const CH_OPERAND: u8 = 2;
const CH_DERIVED: u8 = 3;
const CH_HASH: u8 = 4;
const CH_HEADER: u8 = 5;

impl Chain {
    fn new() -> Chain {
        let mut b = ProgramBuilder::new("chain", "test program: values across stages");
        b.parser(64, &[("probe", 512)]);
        let ra = b.register::<u32>("a", Gress::Ingress, 1, 16, "");
        let a_read = b.register_action(ra, "read", read);
        let rb = b.register::<u32>("b", Gress::Ingress, 1, 16, "");
        let b_add = b.register_action(rb, "add", add);
        let rc = b.register::<u32>("c", Gress::Ingress, 2, 16, "");
        let c_add = b.register_action(rc, "add", add);
        let h = b.hash_unit("h", Gress::Ingress, 1, HashAlgo::Crc32, 4);
        Chain { decl: b.build().unwrap(), a_read, b_add, c_add, h }
    }
}

impl Program for Chain {
    fn decl(&self) -> &ProgramDecl {
        &self.decl
    }
    fn ingress(&self, p: &mut Pass<'_>) {
        let op = p.hdr()[0];
        p.forward(1);
        match op {
            CH_NEXT_STAGE => {
                let v = p.execute(&self.a_read, 0, ());
                p.execute(&self.c_add, v, v);
            }
            CH_INDEX => {
                let v = p.execute(&self.a_read, 0, ());
                p.execute(&self.b_add, v, 1);
            }
            CH_OPERAND => {
                let v = p.execute(&self.a_read, 0, ());
                p.execute(&self.b_add, 0, v);
            }
            CH_DERIVED => {
                let v = p.execute(&self.a_read, 0, ());
                p.execute(&self.b_add, (v + 1) % 16, 1);
            }
            CH_HASH => {
                let i = p.hash(&self.h, &[7]);
                p.execute(&self.b_add, i, 1);
            }
            CH_HEADER => {
                let i = p.hdr()[1] as u32;
                p.execute(&self.a_read, i, ());
                p.execute(&self.b_add, i, 1);
            }
            _ => p.drop(DropCode::PROGRAM),
        }
    }
    fn egress(&self, _: &mut Pass<'_>) {}
}

#[test]
fn a_value_is_usable_from_the_stage_after_its_producer() {
    let set = Arc::new(ProgramSet::new(vec![Arc::new(Chain::new())]).unwrap());
    let mut sw = Switch::new(set.clone(), 4, 1, PipeConfig::default());
    // Cell a[0] holds 3: the values read from it are 3.
    sw.control(&ControlOp::RegisterWrite { register_id: set.ids(0).registers[0], index: Some(0), value: 3 }).unwrap();
    let legal = send(&mut sw, vec![frame(CH_NEXT_STAGE, 1, 0), frame(CH_HEADER, 5, 0), frame(CH_HASH, 1, 0)]);
    assert_eq!(legal.len(), 3, "a stage-1 output used in stage 2, a header field or a hash result in stage 1, are fine");
    assert_eq!(reg(&mut sw, &set, 2, 3), 3, "c[3] += 3");
    let h = (HashAlgo::Crc32.compute(&[7]) & 0xF) as usize;
    let mut want = vec![0u64; 16];
    want[5] += 1;
    want[h] += 1;
    let bad = send(&mut sw, vec![frame(CH_INDEX, 1, 0), frame(CH_OPERAND, 1, 0), frame(CH_DERIVED, 1, 0)]);
    assert!(bad.is_empty(), "each uses a stage-1 output in stage 1: dropped");
    let v = &sw.counters().programs[0].violations;
    assert_eq!(v[Violation::StageOrder.index()], 3, "{v:?}");
    assert_eq!(sw.counters().drops[DropCode::VIOLATION.0 as usize], 3);
    let b_cells: Vec<u64> = (0..16).map(|i| reg(&mut sw, &set, 1, i)).collect();
    assert_eq!(b_cells, want, "no violating access changed b");
}

#[test]
fn cell_fields_must_cover_the_cell() {
    let mut b = ProgramBuilder::new("fields", "");
    let r = b.register::<DualCell>("counters", Gress::Ingress, 0, 4, "");
    b.cell_fields(&r, &[("packets", 32), ("bytes", 32)]);
    let decl = b.build().expect("a split covering all 64 bits is valid");
    let names: Vec<_> = decl.registers[0].fields.iter().map(|f| (f.name.as_str(), f.bits)).collect();
    assert_eq!(names, [("packets", 32), ("bytes", 32)]);

    for bad in [&[("packets", 32)][..], &[("a", 32), ("b", 33)][..], &[("", 32), ("b", 32)][..], &[("a", 0), ("b", 64)][..]] {
        let mut b = ProgramBuilder::new("fields", "");
        let r = b.register::<DualCell>("counters", Gress::Ingress, 0, 4, "");
        b.cell_fields(&r, bad);
        assert!(b.build().is_err(), "{bad:?} must be refused");
    }
}
