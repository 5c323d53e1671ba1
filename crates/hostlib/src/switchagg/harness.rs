//! An in-memory rack for SwitchAgg: mappers, switches and reducers exchanging real frames
//! through `pisa::Switch` instances, in virtual time, deterministic for a seed. It is what
//! the tests and the experiments (`_native.switchagg_run`) drive; it is not the production
//! sender and receiver (those are the hosts' exactly-once library, `hostlib::aggregation`).
//!
//! - The controller's part is done here by control-plane operations: one tree per reducer
//!   (`tree_config`: parent port, children, operation, memory region), ACK clone sessions
//!   per child port, the flush session.
//! - A mapper sends each tree's pairs in packets of at most 1500 bytes, numbered per tree,
//!   with a window; it retransmits from the first unacknowledged packet after a timeout
//!   (go-back-N) and ends each tree with EoT.
//! - Links from mappers can lose, duplicate and reorder frames, seeded (the same fault
//!   kinds as `ports::fault::FaultPort`, applied in memory).
//! - A reducer combines what reaches it with the tree's operation and checks that each
//!   sender's sequence numbers arrive in order.

use std::collections::HashMap;
use std::sync::Arc;
use wire::L2_L4_LEN;

use pisa::control::{CloneSession, ControlOp, ControlReply, Replica, WriteOp};
use pisa::{FieldMatch, PacketBuf, PipeConfig, PortId, Program, ProgramSet, Switch, PORT_RECIRC};
use wire::switchagg::{self as sa, flags, AggPacket, Operation, HEADER_LEN, PAIR_OVERHEAD};

use programs::forward::Forward;
use programs::switchagg::{reg, Config, SwitchAgg, ACK_RID, ACK_SESSION_BASE, FLUSH_SESSION, MAX_FRAME};

/// Most pair bytes one packet carries.
pub const MAX_PAIR_BYTES: usize = MAX_FRAME - L2_L4_LEN - HEADER_LEN;

/// Faults on the links between mappers and their switch (both directions).
#[derive(Clone, Copy, Debug, Default)]
pub struct Faults {
    pub seed: u64,
    pub loss: f64,
    pub duplicate: f64,
    pub reorder: f64,
}

/// Where the switches sit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Topology {
    /// Every mapper and reducer on one switch.
    Single,
    /// `hops` switches in a line: the mappers on the first, the reducers on the last.
    Chain(usize),
    /// Mappers spread over `tors` top-of-rack switches under one aggregation switch with
    /// the reducers.
    TwoLevel(usize),
}

/// A job: the pairs of each mapper, the number of reducers (trees) and the operation.
pub struct Job {
    pub mappers: Vec<Vec<(Vec<u8>, u32)>>,
    pub trees: usize,
    pub op: Operation,
}

/// The reducer of `key` among `trees` (the MapReduce partition function).
pub fn partition(key: &[u8], trees: usize) -> usize {
    // FNV-1a: independent of the switch's CRC hashes.
    let mut h: u32 = 0x811C_9DC5;
    for &b in key {
        h = (h ^ b as u32).wrapping_mul(0x0100_0193);
    }
    (h % trees.max(1) as u32) as usize
}

/// The result of a run.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Per tree: key → combined value, as the reducer computed it.
    pub result: Vec<HashMap<Vec<u8>, u32>>,
    /// Pairs and pair bytes (key, value and their lengths) the mappers sent, once each.
    pub pairs_in: u64,
    pub pair_bytes_in: u64,
    /// Frames and bytes the mappers put on the wire (retransmissions included).
    pub mapper_packets: u64,
    pub mapper_bytes: u64,
    /// What reached the reducers.
    pub pairs_out: u64,
    pub pair_bytes_out: u64,
    pub reducer_packets: u64,
    pub reducer_bytes: u64,
    /// Pairs evicted from FPEs to the BPE and from the BPE to the next hop, all switches.
    pub fpe_evictions: u64,
    pub bpe_evictions: u64,
    /// FPE evictions per key-length group.
    pub fpe_evictions_by_group: [u64; 8],
    /// Per switch (leaves first, the top last): the pairs its `pairs_in` and `pairs_out`
    /// counters saw, every tree together.
    pub switch_pairs: Vec<(u64, u64)>,
    pub recirculations: u64,
    pub retransmissions: u64,
    /// Frames the fault model lost, duplicated, reordered.
    pub faults: [u64; 3],
    /// Out-of-order or repeated sequence numbers seen by the reducers (0 when correct).
    pub reducer_seq_errors: u64,
    /// Drops at the switches by reason name (all switches).
    pub drops: HashMap<String, u64>,
    /// Every tree's EoT reached its reducer before the time limit.
    pub complete: bool,
    /// Virtual time, ns.
    pub time_ns: u64,
}

impl Outcome {
    /// 1 − pair bytes out / pair bytes in: the traffic reduction of the paper's Fig. 2 and 9.
    pub fn reduction_ratio(&self) -> f64 {
        if self.pair_bytes_in == 0 {
            0.0
        } else {
            1.0 - self.pair_bytes_out as f64 / self.pair_bytes_in as f64
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    Switch(usize, PortId),
    Mapper(usize),
    Reducer(usize),
}

struct Node {
    sw: Switch,
    set: Arc<ProgramSet>,
}

fn mac(host: u8) -> [u8; 6] {
    [2, 0, 0, 0, 0, host]
}

/// Build one aggregation frame.
#[allow(clippy::too_many_arguments)]
pub fn frame(src: u8, dst: u8, tree: u16, op: Operation, child: u16, seq: u32, fl: u8, pairs: &[(Vec<u8>, u32)]) -> Vec<u8> {
    let r = sa::AggRepr { flags: fl, tree_id: tree, op, child_id: child, seq, pairs: pairs.to_vec() };
    let n = r.buffer_len();
    let mut b = vec![0u8; L2_L4_LEN + n];
    b[0..6].copy_from_slice(&mac(dst));
    b[6..12].copy_from_slice(&mac(src));
    b[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip = &mut b[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&((20 + 8 + n) as u16).to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&[10, 0, 0, src]);
    ip[16..20].copy_from_slice(&[10, 0, 0, dst]);
    let mut p = wire::Ipv4Packet::new_unchecked(&mut b[14..34]);
    p.fill_checksum();
    b[34..36].copy_from_slice(&40000u16.to_be_bytes());
    b[36..38].copy_from_slice(&sa::UDP_PORT.to_be_bytes());
    b[38..40].copy_from_slice(&((8 + n) as u16).to_be_bytes());
    r.emit(&mut b[L2_L4_LEN..]).expect("pairs of 1..=255-byte keys");
    b
}

/// Split pairs into packets of at most [`MAX_PAIR_BYTES`] pair bytes.
pub fn packetize(pairs: &[(Vec<u8>, u32)]) -> Vec<Vec<(Vec<u8>, u32)>> {
    packetize_owned(pairs.to_vec())
}

/// [`packetize`], taking the pairs.
pub fn packetize_owned(pairs: Vec<(Vec<u8>, u32)>) -> Vec<Vec<(Vec<u8>, u32)>> {
    let mut out = vec![Vec::new()];
    let mut used = 0;
    for (k, v) in pairs {
        let n = PAIR_OVERHEAD + k.len();
        if used + n > MAX_PAIR_BYTES {
            out.push(Vec::new());
            used = 0;
        }
        out.last_mut().unwrap().push((k, v));
        used += n;
    }
    out
}

/// Pairs of one packet.
type Batch = Vec<(Vec<u8>, u32)>;

struct Sender {
    /// Per tree: packets (pairs), next to send, first unacknowledged, when the window
    /// was last (re)started.
    packets: Vec<Vec<Batch>>,
    next: Vec<u32>,
    base: Vec<u32>,
    sent_at: Vec<u64>,
    child: u16,
    attach: (usize, PortId),
}

/// Seeded link faults (xorshift64*).
struct Link {
    rng: u64,
    f: Faults,
    held: Vec<(End, Vec<u8>)>,
}

impl Link {
    fn draw(&mut self) -> f64 {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The rack: switches, links, hosts.
pub struct Rack {
    nodes: Vec<Node>,
    links: HashMap<(usize, PortId), End>,
    trees: usize,
    op: Operation,
    senders: Vec<Sender>,
    link: Link,
    out: Outcome,
    /// Reducer side: next expected sequence number per (tree, child) and EoT seen.
    expect: HashMap<(usize, u16), u32>,
    eot: Vec<bool>,
    window: u32,
    rto_ns: u64,
}

const STEP_NS: u64 = 1_000;

impl Rack {
    /// Build the rack for `job` on `topo` with engines of `cfg`.
    pub fn new(job: &Job, topo: Topology, cfg: Config, faults: Faults) -> Rack {
        let m = job.mappers.len();
        let trees = job.trees.max(1);
        // (switch, its mappers) and the chain of switches above.
        let mut nodes = Vec::new();
        let mut links = HashMap::new();
        let mut senders = Vec::new();
        let new_node = |ports: usize| {
            let progs: Vec<Arc<dyn Program>> = vec![Arc::new(Forward::new()), Arc::new(SwitchAgg::with_config(cfg))];
            let set = Arc::new(ProgramSet::new(progs).expect("forward + switchagg load together"));
            let pc = PipeConfig { queue_capacity: 1 << 16, egress_budget: 1 << 16, recirc_capacity: 1 << 12, ..PipeConfig::default() };
            Node { sw: Switch::new(set.clone(), ports as u16, 1, pc), set }
        };
        // Leaves: mappers attach here. Each entry: (node, number of mappers on it).
        let leaves: Vec<usize> = match topo {
            Topology::TwoLevel(t) => {
                let t = t.clamp(1, m.max(1));
                (0..t).map(|j| (m * (j + 1)) / t - (m * j) / t).collect()
            }
            _ => vec![m],
        };
        let mut mapper = 0;
        for (j, &count) in leaves.iter().enumerate() {
            nodes.push(new_node(count + trees + 1));
            for c in 0..count {
                links.insert((j, c as PortId), End::Mapper(mapper));
                senders.push(Sender {
                    packets: Vec::new(),
                    next: vec![0; trees],
                    base: vec![0; trees],
                    sent_at: vec![0; trees],
                    child: c as u16,
                    attach: (j, c as PortId),
                });
                mapper += 1;
            }
        }
        // (node, number of children) of every switch, and its parent's side.
        let mut levels: Vec<(usize, u16, u16)> = leaves.iter().enumerate().map(|(j, &c)| (j, c as u16, j as u16)).collect();
        match topo {
            Topology::Single => {}
            Topology::Chain(h) => {
                for k in 1..h.max(1) {
                    let id = nodes.len();
                    nodes.push(new_node(1 + trees + 1));
                    // The previous switch's uplink (its port `children`) to this one's port 0.
                    let (prev, prev_children, _) = levels[k - 1];
                    links.insert((prev, prev_children), End::Switch(id, 0));
                    links.insert((id, 0), End::Switch(prev, prev_children));
                    levels.push((id, 1, 0));
                }
            }
            Topology::TwoLevel(_) => {
                let id = nodes.len();
                let t = leaves.len();
                nodes.push(new_node(t + trees + 1));
                for (j, &c) in leaves.iter().enumerate() {
                    links.insert((j, c as PortId), End::Switch(id, j as PortId));
                    links.insert((id, j as PortId), End::Switch(j, c as PortId));
                }
                levels.push((id, t as u16, 0));
            }
        }
        let top = levels.last().unwrap().0;
        let top_children = levels.last().unwrap().1;
        for t in 0..trees {
            links.insert((top, top_children + t as PortId), End::Reducer(t));
        }
        let mut rack = Rack {
            nodes,
            links,
            trees,
            op: job.op,
            senders,
            link: Link { rng: faults.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1, f: faults, held: Vec::new() },
            out: Outcome { result: vec![HashMap::new(); trees], ..Default::default() },
            expect: HashMap::new(),
            eot: vec![false; trees],
            window: 64,
            rto_ns: 50 * STEP_NS,
        };
        // Configure every switch: its trees' parent ports and children (the controller).
        let is_top = |id: usize| id == top;
        for &(id, children, _) in &levels {
            let up_port = children; // uplink or first reducer port
            let up_child = match topo {
                Topology::TwoLevel(_) if !is_top(id) => id as u16,
                _ => 0,
            };
            for t in 0..trees {
                let parent = if is_top(id) { up_port + t as PortId } else { up_port };
                rack.configure(id, t as u16, parent, children, t as u8, trees as u8, up_child);
            }
            for p in 0..children {
                rack.clone_session(id, ACK_SESSION_BASE + p, p, ACK_RID);
            }
            rack.clone_session(id, FLUSH_SESSION, PORT_RECIRC, 0);
        }
        for (i, pairs) in job.mappers.iter().enumerate() {
            let mut per_tree: Vec<Vec<(Vec<u8>, u32)>> = vec![Vec::new(); trees];
            for (k, v) in pairs {
                per_tree[partition(k, trees)].push((k.clone(), *v));
                rack.out.pairs_in += 1;
                rack.out.pair_bytes_in += (PAIR_OVERHEAD + k.len()) as u64;
            }
            rack.senders[i].packets = per_tree.into_iter().map(packetize_owned).collect();
        }
        rack
    }

    #[allow(clippy::too_many_arguments)]
    fn configure(&mut self, id: usize, tree: u16, parent: PortId, children: u16, region: u8, regions: u8, up_child: u16) {
        let op = self.op;
        let node = &mut self.nodes[id];
        configure_tree(&mut node.sw, &node.set, tree, parent, children, op, region, regions, up_child);
    }

    fn clone_session(&mut self, id: usize, session: u16, port: PortId, rid: u16) {
        add_clone_session(&mut self.nodes[id].sw, session, port, rid);
    }

    /// A register's cells, summed cell by cell over every switch.
    fn register_cells(&mut self, idx: usize) -> Vec<u64> {
        let mut s = Vec::new();
        for n in &mut self.nodes {
            let rid = n.set.ids(1).registers[idx];
            if let Ok(ControlReply::RegisterCells(v)) = n.sw.control(&ControlOp::RegisterRead { register_id: rid, index: None }) {
                s.resize(s.len().max(v.len()), 0);
                for (i, c) in v.iter().enumerate() {
                    s[i] += c.1;
                }
            }
        }
        s
    }

    /// A frame from a mapper or to it crosses the faulty link.
    fn through_link(&mut self, to: End, bytes: Vec<u8>, deliver: &mut Vec<(End, Vec<u8>)>) {
        let (l, d, r) = (self.link.draw(), self.link.draw(), self.link.draw());
        let f = self.link.f;
        if l < f.loss {
            self.out.faults[0] += 1;
            return;
        }
        let copies = if d < f.duplicate {
            self.out.faults[1] += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            if r < f.reorder {
                self.out.faults[2] += 1;
                self.link.held.push((to, bytes.clone()));
            } else {
                deliver.push((to, bytes.clone()));
            }
        }
    }

    fn mapper_send(&mut self, now: u64, deliver: &mut Vec<(End, Vec<u8>)>) {
        for i in 0..self.senders.len() {
            for t in 0..self.trees {
                let s = &mut self.senders[i];
                let total = s.packets[t].len() as u32;
                if s.base[t] >= total {
                    continue;
                }
                if s.next[t] > s.base[t] && now >= s.sent_at[t] + self.rto_ns {
                    // Timeout: go back to the first unacknowledged packet.
                    self.out.retransmissions += (s.next[t] - s.base[t]) as u64;
                    s.next[t] = s.base[t];
                }
                let mut frames = Vec::new();
                while s.next[t] < total && s.next[t] < s.base[t] + self.window {
                    let q = s.next[t];
                    let fl = if q + 1 == total { flags::EOT } else { 0 };
                    frames.push(frame(1 + i as u8, 200 + t as u8, t as u16, self.op, s.child, q, fl, &s.packets[t][q as usize]));
                    if s.next[t] == s.base[t] {
                        s.sent_at[t] = now;
                    }
                    s.next[t] += 1;
                }
                let (sw, port) = s.attach;
                for f in frames {
                    self.out.mapper_packets += 1;
                    self.out.mapper_bytes += f.len() as u64;
                    self.through_link(End::Switch(sw, port), f, deliver);
                }
            }
        }
    }

    fn mapper_receive(&mut self, i: usize, bytes: &[u8], now: u64) {
        let Some(p) = bytes.get(L2_L4_LEN..).and_then(|b| AggPacket::new_checked(b).ok()) else { return };
        let s = &mut self.senders[i];
        if p.flags() & flags::ACK == 0 || p.child_id() != s.child {
            return;
        }
        let t = p.tree_id() as usize;
        if t < self.trees && p.seq() >= s.base[t] && p.seq() < s.next[t] {
            s.base[t] = p.seq() + 1;
            s.sent_at[t] = now;
        }
    }

    fn reducer_receive(&mut self, t: usize, bytes: &[u8]) {
        self.out.reducer_packets += 1;
        self.out.reducer_bytes += bytes.len() as u64;
        let Some(p) = bytes.get(L2_L4_LEN..).and_then(|b| AggPacket::new_checked(b).ok()) else { return };
        let e = self.expect.entry((t, p.child_id())).or_insert(0);
        if p.seq() != *e {
            self.out.reducer_seq_errors += 1;
        }
        *e = p.seq().wrapping_add(1);
        let r = &mut self.out.result[t];
        for (k, v) in p.pairs().flatten() {
            self.out.pairs_out += 1;
            self.out.pair_bytes_out += (PAIR_OVERHEAD + k.len()) as u64;
            match r.get_mut(k) {
                Some(x) => *x = self.op.apply(*x, v),
                None => {
                    r.insert(k.to_vec(), v);
                }
            }
        }
        if p.eot() && t < self.trees {
            self.eot[t] = true;
        }
    }

    /// Run until every reducer has its tree's EoT (or `max_steps` steps pass).
    pub fn run(mut self, max_steps: u64) -> Outcome {
        let mut now = 0;
        let mut deliver: Vec<(End, Vec<u8>)> = Vec::new();
        for _ in 0..max_steps {
            now += STEP_NS;
            self.mapper_send(now, &mut deliver);
            // Held (reordered) frames go after this step's others.
            let held = std::mem::take(&mut self.link.held);
            deliver.extend(held);
            // Switch inputs, then a settle loop until nothing moves within this step.
            let mut rounds = 0;
            loop {
                let mut inputs: Vec<Vec<PacketBuf>> = (0..self.nodes.len()).map(|_| Vec::new()).collect();
                for (to, bytes) in deliver.drain(..) {
                    match to {
                        End::Switch(id, port) => inputs[id].push(PacketBuf::from_slice(&bytes, port)),
                        End::Mapper(i) => self.mapper_receive(i, &bytes, now),
                        End::Reducer(t) => self.reducer_receive(t, &bytes),
                    }
                }
                let mut moved = false;
                let mut outs = Vec::new();
                for (id, mut inp) in inputs.into_iter().enumerate() {
                    let node = &mut self.nodes[id];
                    if inp.is_empty() {
                        node.sw.tick(now);
                    } else {
                        node.sw.process(&mut inp, now);
                    }
                    for (port, bytes) in node.sw.drain_all() {
                        outs.push((id, port, bytes));
                    }
                }
                for (id, port, bytes) in outs {
                    moved = true;
                    match self.links.get(&(id, port)).copied() {
                        Some(End::Mapper(i)) => self.through_link(End::Mapper(i), bytes, &mut deliver),
                        Some(e) => deliver.push((e, bytes)),
                        None => {}
                    }
                }
                let recirc = self.nodes.iter().any(|n| n.sw.pipes().iter().any(|p| p.pending() > 0));
                rounds += 1;
                if (!moved && !recirc && deliver.is_empty()) || rounds > 1_000_000 {
                    break;
                }
            }
            if self.eot.iter().all(|&e| e) {
                self.out.complete = true;
                break;
            }
        }
        self.out.time_ns = now;
        let fpe = self.register_cells(reg::FPE_EVICTIONS);
        for (g, &k) in fpe.iter().enumerate().take(8) {
            self.out.fpe_evictions_by_group[g] = k;
        }
        self.out.fpe_evictions = fpe.iter().sum();
        self.out.bpe_evictions = self.register_cells(reg::BPE_EVICTIONS).iter().sum();
        for id in 0..self.nodes.len() {
            let sum = |n: &mut Node, idx: usize| -> u64 {
                let rid = n.set.ids(1).registers[idx];
                match n.sw.control(&ControlOp::RegisterRead { register_id: rid, index: None }) {
                    Ok(ControlReply::RegisterCells(v)) => v.iter().map(|c| c.1).sum(),
                    _ => 0,
                }
            };
            let n = &mut self.nodes[id];
            let pairs = (sum(n, reg::PAIRS_IN), sum(n, reg::PAIRS_OUT));
            self.out.switch_pairs.push(pairs);
        }
        for n in &self.nodes {
            let c = n.sw.counters();
            self.out.recirculations += c.recirculations;
            for (pi, pc) in c.programs.iter().enumerate() {
                let decl = n.set.decl(pi);
                for v in pisa::Violation::ALL {
                    let k = pc.violations[v.index()];
                    if k > 0 {
                        *self.out.drops.entry(format!("violation_{}", v.name())).or_insert(0) += k;
                    }
                }
                for (code, &k) in pc.drops.iter().enumerate() {
                    if k > 0 {
                        let dc = pisa::DropCode(code as u8);
                        let name = match dc.builtin_name() {
                            Some(n) => n.to_string(),
                            None => decl
                                .drop_reasons
                                .get(code.wrapping_sub(pisa::DropCode::FIRST_PROGRAM as usize))
                                .cloned()
                                .unwrap_or_else(|| format!("drop_{code}")),
                        };
                        *self.out.drops.entry(name).or_insert(0) += k;
                    }
                }
            }
        }
        self.out
    }
}

/// The controller's write of one tree into `tree_config` (program 1 of `set`).
#[allow(clippy::too_many_arguments)]
pub fn tree_config_op(
    set: &ProgramSet,
    tree: u16,
    parent: PortId,
    children: u16,
    op: Operation,
    region: u8,
    regions: u8,
    up_child: u16,
) -> ControlOp {
    let ids = set.ids(1);
    ControlOp::TableWrite {
        table_id: ids.tables[0],
        op: WriteOp::Insert,
        matches: vec![FieldMatch::Exact { field: 0, value: tree.to_be_bytes().to_vec() }],
        priority: 0,
        action_id: ids.actions[0],
        params: vec![
            (1, parent.to_be_bytes().to_vec()),
            (2, children.to_be_bytes().to_vec()),
            (3, vec![op.code()]),
            (4, vec![region]),
            (5, vec![regions]),
            (6, up_child.to_be_bytes().to_vec()),
        ],
    }
}

/// A clone session with one replica.
pub fn clone_session_op(session: u16, port: PortId, rid: u16) -> ControlOp {
    ControlOp::CloneSessionWrite {
        op: WriteOp::Insert,
        session,
        session_cfg: CloneSession { replicas: vec![Replica { port, rid }], truncate_len: 0 },
    }
}

/// [`tree_config_op`] applied to `sw`.
#[allow(clippy::too_many_arguments)]
pub fn configure_tree(
    sw: &mut Switch,
    set: &ProgramSet,
    tree: u16,
    parent: PortId,
    children: u16,
    op: Operation,
    region: u8,
    regions: u8,
    up_child: u16,
) {
    sw.control(&tree_config_op(set, tree, parent, children, op, region, regions, up_child)).expect("tree_config entry");
}

/// [`clone_session_op`] applied to `sw`.
pub fn add_clone_session(sw: &mut Switch, session: u16, port: PortId, rid: u16) {
    sw.control(&clone_session_op(session, port, rid)).expect("clone session");
}

/// One switch running `forward` and `switchagg`, `children` child ports (0..children) and
/// one tree whose parent is port `children`, configured as the controller would.
pub fn single_switch(cfg: Config, children: u16, op: Operation) -> (Switch, Arc<ProgramSet>) {
    let progs: Vec<Arc<dyn Program>> = vec![Arc::new(Forward::new()), Arc::new(SwitchAgg::with_config(cfg))];
    let set = Arc::new(ProgramSet::new(progs).expect("forward + switchagg load together"));
    let pc = PipeConfig { queue_capacity: 1 << 16, egress_budget: 1 << 16, recirc_capacity: 1 << 12, ..PipeConfig::default() };
    let mut sw = Switch::new(set.clone(), children + 2, 1, pc);
    configure_tree(&mut sw, &set, 0, children, children, op, 0, 1, 0);
    for p in 0..children {
        add_clone_session(&mut sw, ACK_SESSION_BASE + p, p, ACK_RID);
    }
    add_clone_session(&mut sw, FLUSH_SESSION, PORT_RECIRC, 0);
    (sw, set)
}

/// Aggregate `job` on the switches of `topo` and return what the reducers got.
pub fn run(job: &Job, topo: Topology, cfg: Config, faults: Faults) -> Outcome {
    Rack::new(job, topo, cfg, faults).run(2_000_000)
}

/// The same aggregation without a switch: what every reducer must end with.
pub fn reference(job: &Job) -> Vec<HashMap<Vec<u8>, u32>> {
    let mut r = vec![HashMap::new(); job.trees.max(1)];
    for pairs in &job.mappers {
        for (k, v) in pairs {
            let m: &mut HashMap<Vec<u8>, u32> = &mut r[partition(k, job.trees)];
            match m.get_mut(k) {
                Some(x) => *x = job.op.apply(*x, *v),
                None => {
                    m.insert(k.clone(), *v);
                }
            }
        }
    }
    r
}
