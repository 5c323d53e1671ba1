//! Switches on a path from the servers to the agent (§3.8, Figure 8), in memory: the
//! harness the tests, the Python experiments and the benchmark drive.
//!
//! Switch 0 has the servers on ports 1..=S; every switch sends toward the agent on port 0,
//! which is port 1 of the next switch or, for the last one, the agent. Each switch runs
//! `forward` and, unless it is a plain forwarding switch (`None`), its own NetSHa program.
//! Time is virtual (ns, given by the caller), so runs are deterministic.

use std::sync::Arc;

use pisa::control::{CloneSession, ControlOp, ControlReply, Replica, WriteOp};
use pisa::counters::Counters;
use pisa::{FieldMatch, PacketBuf, PipeConfig, Program, ProgramSet, Switch, PORT_RECIRC};
use wire::netsha as nw;

use super::{answer_event, emit_event, Netsha, NetshaConfig};
use crate::forward::Forward;

/// The agent's addresses.
pub const AGENT_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0xAA];
pub const AGENT_IP: [u8; 4] = [10, 0, 0, 100];
pub const AGENT_PORT: u16 = 7001;
pub const SERVER_PORT: u16 = 7000;

/// A server's MAC and IP (server `i` from 0).
pub fn server_mac(i: usize) -> [u8; 6] {
    [2, 0, 0, 0, 1, i as u8]
}

/// An answer packet from server `i` to the agent: Ethernet, IPv4 with the NetSHa ToS bit
/// (or without it: ordinary traffic), UDP, NetSHa payload.
pub fn answer_frame(server: usize, payload: &[u8], netsha_bit: bool) -> Vec<u8> {
    let mut v = vec![0u8; wire::L2_L4_LEN + payload.len()];
    v[0..6].copy_from_slice(&AGENT_MAC);
    v[6..12].copy_from_slice(&server_mac(server));
    v[12..14].copy_from_slice(&[0x08, 0x00]);
    let mut ip = wire::Ipv4Packet::new_unchecked(&mut v[14..34]);
    ip.set_version(4);
    ip.set_header_len(20);
    ip.set_tos(if netsha_bit { nw::TOS_BIT } else { 0 });
    ip.set_total_len((20 + 8 + payload.len()) as u16);
    ip.set_hop_limit(64);
    ip.set_next_header(wire::IpProtocol::Udp);
    ip.set_src_addr(wire::Ipv4Address([10, 0, 1, server as u8]));
    ip.set_dst_addr(wire::Ipv4Address(AGENT_IP));
    ip.fill_checksum();
    v[34..36].copy_from_slice(&SERVER_PORT.to_be_bytes());
    v[36..38].copy_from_slice(&AGENT_PORT.to_be_bytes());
    v[38..40].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    v[wire::L2_L4_LEN..].copy_from_slice(payload);
    v
}

/// A query packet from the agent toward the servers: Ethernet (broadcast), IPv4 with the
/// NetSHa ToS bit, UDP to [`nw::QUERY_PORT`], `payload` (a [`nw::QueryRepr`] emitted).
pub fn query_frame(payload: &[u8]) -> Vec<u8> {
    let mut v = vec![0u8; wire::L2_L4_LEN + payload.len()];
    v[0..6].copy_from_slice(&[0xFF; 6]);
    v[6..12].copy_from_slice(&AGENT_MAC);
    v[12..14].copy_from_slice(&[0x08, 0x00]);
    let mut ip = wire::Ipv4Packet::new_unchecked(&mut v[14..34]);
    ip.set_version(4);
    ip.set_header_len(20);
    ip.set_tos(nw::TOS_BIT);
    ip.set_total_len((20 + 8 + payload.len()) as u16);
    ip.set_hop_limit(64);
    ip.set_next_header(wire::IpProtocol::Udp);
    ip.set_src_addr(wire::Ipv4Address(AGENT_IP));
    ip.set_dst_addr(wire::Ipv4Address([10, 0, 1, 255]));
    ip.fill_checksum();
    v[34..36].copy_from_slice(&AGENT_PORT.to_be_bytes());
    v[36..38].copy_from_slice(&nw::QUERY_PORT.to_be_bytes());
    v[38..40].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    v[wire::L2_L4_LEN..].copy_from_slice(payload);
    v
}

/// Encode answers of several queries as one NetSHa payload.
pub fn payload(blocks: &[(u32, Vec<(u32, f64)>)]) -> Vec<u8> {
    let r = nw::NetshaRepr { queries: blocks.iter().map(|(q, a)| nw::QueryAnswers { qid: *q, answers: a.clone() }).collect() };
    let mut buf = vec![0u8; r.buffer_len()];
    r.emit(&mut buf).expect("a valid payload");
    buf
}

/// The NetSHa answers of a frame the agent received (`None` if not a valid NetSHa frame).
pub fn parse_frame(frame: &[u8]) -> Option<nw::NetshaRepr> {
    if frame.len() < super::MIN_LEN || frame[15] & nw::TOS_BIT == 0 {
        return None;
    }
    let udp_len = u16::from_be_bytes([frame[38], frame[39]]) as usize;
    let end = 34 + udp_len;
    if end > frame.len() || udp_len < 8 {
        return None;
    }
    nw::NetshaRepr::parse(&nw::NetshaPacket::new_checked(&frame[wire::L2_L4_LEN..end]).ok()?).ok()
}

struct Hop {
    sw: Switch,
    set: Arc<ProgramSet>,
    netsha: Option<usize>,
}

/// A path of switches from the servers to the agent.
pub struct SwitchPath {
    hops: Vec<Hop>,
    servers: usize,
    /// Frames the agent received.
    pub agent_rx: Vec<Vec<u8>>,
}

fn id_of(set: &ProgramSet, prog: usize, kind: &str, name: &str) -> u32 {
    let d = set.decl(prog);
    let ids = set.ids(prog);
    match kind {
        "table" => ids.tables[d.tables.iter().position(|t| t.name == name).expect("table")],
        "action" => ids.actions[d.actions.iter().position(|t| t.name == name).expect("action")],
        _ => ids.registers[d.registers.iter().position(|t| t.name == name).expect("register")],
    }
}

fn table_insert(sw: &mut Switch, set: &ProgramSet, prog: usize, table: &str, key: Vec<u8>, action: &str, params: Vec<Vec<u8>>) {
    let op = ControlOp::TableWrite {
        table_id: id_of(set, prog, "table", table),
        op: WriteOp::Insert,
        matches: vec![FieldMatch::Exact { field: 0, value: key }],
        priority: 0,
        action_id: id_of(set, prog, "action", action),
        params: params.into_iter().enumerate().map(|(i, p)| (i as u32 + 1, p)).collect(),
    };
    sw.control(&op).expect("table entry");
}

impl SwitchPath {
    /// `hops[i]`: the NetSHa configuration of switch i, or `None` for forwarding only.
    pub fn new(hops: &[Option<NetshaConfig>], servers: usize) -> SwitchPath {
        assert!(!hops.is_empty() && (1..250).contains(&servers));
        let hops = hops
            .iter()
            .enumerate()
            .map(|(i, cfg)| {
                let mut progs: Vec<Arc<dyn Program>> = vec![Arc::new(Forward::new())];
                if let Some(c) = cfg {
                    progs.push(Arc::new(Netsha::with_config(c.clone())));
                }
                let set = Arc::new(ProgramSet::new(progs).expect("program set"));
                let ports = if i == 0 { servers as u16 + 1 } else { 2 };
                let pc = PipeConfig { queue_capacity: 1 << 16, ..PipeConfig::default() };
                let mut sw = Switch::new(set.clone(), ports, 1, pc);
                sw.control(&ControlOp::McastGroupWrite {
                    op: WriteOp::Insert,
                    group: 1,
                    replicas: (0..ports).map(|p| Replica { port: p, rid: 0 }).collect(),
                })
                .expect("flood group");
                table_insert(&mut sw, &set, 0, "l2_dmac", AGENT_MAC.to_vec(), "l2_forward", vec![0u16.to_be_bytes().to_vec()]);
                let netsha = cfg.as_ref().map(|_| 1);
                if netsha.is_some() {
                    // The split's mirror: copies go back into ingress.
                    sw.control(&ControlOp::CloneSessionWrite {
                        op: WriteOp::Insert,
                        session: super::SPLIT_SESSION,
                        session_cfg: CloneSession { replicas: vec![Replica { port: PORT_RECIRC, rid: 0 }], truncate_len: 0 },
                    })
                    .expect("split clone session");
                    // Query server selection: every server, replica id = server index.
                    if i == 0 {
                        sw.control(&ControlOp::McastGroupWrite {
                            op: WriteOp::Insert,
                            group: super::SELECT_GROUP,
                            replicas: (0..servers as u16).map(|s| Replica { port: s + 1, rid: s }).collect(),
                        })
                        .expect("query group");
                    }
                    table_insert(
                        &mut sw,
                        &set,
                        1,
                        "agent",
                        vec![0],
                        "to_agent",
                        vec![0u16.to_be_bytes().to_vec(), AGENT_MAC.to_vec(), AGENT_IP.to_vec(), AGENT_PORT.to_be_bytes().to_vec()],
                    );
                }
                Hop { sw, set, netsha }
            })
            .collect();
        SwitchPath { hops, servers, agent_rx: Vec::new() }
    }

    pub fn servers(&self) -> usize {
        self.servers
    }

    pub fn switches(&self) -> usize {
        self.hops.len()
    }

    /// Carry what switch `from` sent on port 0 down the path, at time `now`.
    fn carry(&mut self, from: usize, now: u64) {
        let mut i = from;
        loop {
            self.drain_recirculation(i, now);
            let out: Vec<Vec<u8>> = self.hops[i].sw.drain_all().into_iter().filter(|(p, _)| *p == 0).map(|(_, b)| b).collect();
            if i + 1 == self.hops.len() {
                self.agent_rx.extend(out);
                return;
            }
            let mut v: Vec<PacketBuf> = out.iter().map(|b| PacketBuf::from_slice(b, 1)).collect();
            self.hops[i + 1].sw.process(&mut v, now);
            i += 1;
        }
    }

    /// Let switch `i` finish the packets it is still going around with (one pass per
    /// call, as the recirculation port admits them), bounded.
    fn drain_recirculation(&mut self, i: usize, now: u64) {
        for _ in 0..1024 {
            if self.hops[i].sw.pipes().iter().map(|p| p.pending()).sum::<usize>() == 0 {
                return;
            }
            self.hops[i].sw.tick(now);
        }
    }

    /// Server `server` sends `frames` at `now` (ns). They arrive a few at a time, and the
    /// switches finish their recirculations between arrivals (a recirculation takes far
    /// less than a packet's inter-arrival time at the agent's port).
    pub fn send(&mut self, server: usize, frames: &[Vec<u8>], now: u64) {
        for chunk in frames.chunks(4) {
            let mut v: Vec<PacketBuf> = chunk.iter().map(|b| PacketBuf::from_slice(b, server as u16 + 1)).collect();
            self.hops[0].sw.process(&mut v, now);
            self.carry(0, now);
        }
    }

    /// Servers answer at the same time (the paper's testbed: every server answers its part
    /// of the wave in parallel): `frames[s]` are server `s`'s packets, in its sending order.
    /// The switch receives one packet from each server that still has one, together, so
    /// their passes (one answer per pass, recirculating) interleave in the pipeline as they
    /// would on hardware, and Algorithm 1 sees the servers' sorted lists merged rather than
    /// one after another.
    pub fn send_concurrent(&mut self, frames: &[Vec<Vec<u8>>], now: u64) {
        let rounds = frames.iter().map(|f| f.len()).max().unwrap_or(0);
        for r in 0..rounds {
            let mut v: Vec<PacketBuf> =
                frames.iter().enumerate().filter_map(|(s, f)| f.get(r).map(|b| PacketBuf::from_slice(b, s as u16 + 1))).collect();
            self.hops[0].sw.process(&mut v, now);
            self.carry(0, now);
        }
    }

    /// Advance every switch's clock to `now` (recirculations, timer packets).
    pub fn tick(&mut self, now: u64) {
        for i in 0..self.hops.len() {
            self.hops[i].sw.tick(now);
            self.carry(i, now);
        }
    }

    /// Run until every switch is idle or `until` (ns) passes, in steps of `step` ns.
    pub fn settle(&mut self, from: u64, until: u64, step: u64) -> u64 {
        let mut t = from;
        while t < until {
            t += step.max(1);
            self.tick(t);
        }
        t
    }

    /// The controller makes switch `hop` forward NetSHa packets without reducing them
    /// (its `role` entry: `forward_only`).
    pub fn set_forward_only(&mut self, hop: usize) -> Result<(), String> {
        let h = &mut self.hops[hop];
        let Some(p) = h.netsha else { return Err(format!("switch {hop} runs no netsha program")) };
        let op = ControlOp::TableWrite {
            table_id: id_of(&h.set, p, "table", "role"),
            op: WriteOp::Insert,
            matches: vec![FieldMatch::Exact { field: 0, value: vec![0] }],
            priority: 0,
            action_id: id_of(&h.set, p, "action", "forward_only"),
            params: vec![],
        };
        h.sw.control(&op).map(|_| ()).map_err(|e| format!("{e:?}"))
    }

    /// The controller's `server_addr` entry on switch 0: replicas to server `rid` leave
    /// addressed to `dmac`/`dip` from `smac`, as plain UDP (a server behind other switches).
    pub fn set_server_addr(&mut self, rid: u16, dmac: [u8; 6], smac: [u8; 6], dip: [u8; 4]) -> Result<(), String> {
        let h = &mut self.hops[0];
        let Some(p) = h.netsha else { return Err("switch 0 runs no netsha program".into()) };
        let op = ControlOp::TableWrite {
            table_id: id_of(&h.set, p, "table", "server_addr"),
            op: WriteOp::Insert,
            matches: vec![FieldMatch::Exact { field: 0, value: rid.to_be_bytes().to_vec() }],
            priority: 0,
            action_id: id_of(&h.set, p, "action", "to_server"),
            params: vec![(1, dmac.to_vec()), (2, smac.to_vec()), (3, dip.to_vec())],
        };
        h.sw.control(&op).map(|_| ()).map_err(|e| format!("{e:?}"))
    }

    /// The controller's entry of a selection table (switch 0, the servers' switch): bucket
    /// `key` of LSH table `table` is held by the servers in `bitmap`.
    pub fn install_selection(&mut self, table: usize, key: u64, bitmap: u32) -> Result<(), String> {
        let hop = &mut self.hops[0];
        let Some(p) = hop.netsha else { return Err("switch 0 runs no netsha program".into()) };
        let name = format!("select_{table}");
        let d = hop.set.decl(p);
        let Some(ti) = d.tables.iter().position(|t| t.name == name) else { return Err(format!("no table {name}")) };
        let op = ControlOp::TableWrite {
            table_id: hop.set.ids(p).tables[ti],
            op: WriteOp::Insert,
            matches: vec![FieldMatch::Exact { field: 0, value: key.to_be_bytes().to_vec() }],
            priority: 0,
            action_id: id_of(&hop.set, p, "action", "servers"),
            params: vec![(1, bitmap.to_be_bytes().to_vec())],
        };
        hop.sw.control(&op).map(|_| ()).map_err(|e| format!("{e:?}"))
    }

    /// The agent sends a query packet (`payload`: a [`nw::QueryRepr`] emitted) into switch 0
    /// at `now`; returns the frames that left toward the servers, as (server, frame).
    pub fn send_query(&mut self, payload: &[u8], now: u64) -> Vec<(usize, Vec<u8>)> {
        self.send_query_frame(&query_frame(payload), now)
    }

    /// As [`send_query`](Self::send_query), any frame.
    pub fn send_query_frame(&mut self, frame: &[u8], now: u64) -> Vec<(usize, Vec<u8>)> {
        let mut v = vec![PacketBuf::from_slice(frame, 0)];
        self.hops[0].sw.process(&mut v, now);
        self.drain_recirculation(0, now);
        let mut out = Vec::new();
        let mut up = Vec::new();
        for (port, b) in self.hops[0].sw.drain_all() {
            if port == 0 {
                up.push(b);
            } else {
                out.push((port as usize - 1, b));
            }
        }
        // Anything switch 0 had for the agent meanwhile goes on down the path.
        if self.hops.len() == 1 {
            self.agent_rx.extend(up);
        } else if !up.is_empty() {
            let mut v: Vec<PacketBuf> = up.iter().map(|b| PacketBuf::from_slice(b, 1)).collect();
            self.hops[1].sw.process(&mut v, now);
            self.carry(1, now);
        }
        out
    }

    /// Frames the agent received since the last call.
    pub fn take_agent_rx(&mut self) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.agent_rx)
    }

    pub fn counters(&self, hop: usize) -> Counters {
        self.hops[hop].sw.counters()
    }

    /// Drops by reason name (the switch's own and the program's) blamed on the NetSHa
    /// program of switch `hop`.
    pub fn netsha_drops(&self, hop: usize) -> Vec<(String, u64)> {
        let Some(p) = self.hops[hop].netsha else { return vec![] };
        let c = self.counters(hop);
        let decl = self.hops[hop].set.decl(p);
        (0..pisa::DropCode::MAX as u8)
            .filter_map(|code| Some((decl.drop_name(pisa::DropCode(code))?.to_string(), c.programs[p].drops[code as usize])))
            .collect()
    }

    fn read(&mut self, hop: usize, reg: &str) -> Vec<u64> {
        let Some(p) = self.hops[hop].netsha else { return vec![] };
        let id = id_of(&self.hops[hop].set, p, "register", reg);
        match self.hops[hop].sw.control(&ControlOp::RegisterRead { register_id: id, index: None }) {
            Ok(ControlReply::RegisterCells(v)) => v.into_iter().map(|(_, x)| x).collect(),
            _ => vec![],
        }
    }

    /// The NetSHa event counters of switch `hop` by name (answers sent and cleared by
    /// cause as `sent_<cause>` and `cleared_<cause>`).
    pub fn netsha_events(&mut self, hop: usize) -> Vec<(String, u64)> {
        let mut v: Vec<(String, u64)> =
            self.read(hop, "answer_events").into_iter().zip(answer_event::NAMES).map(|(x, n)| (n.to_string(), x & 0xFFFF_FFFF)).collect();
        for (x, n) in self.read(hop, "query_events").into_iter().zip(super::query_event::NAMES) {
            v.push((format!("queries_{n}"), x & 0xFFFF_FFFF));
            v.push((format!("servers_{n}"), x >> 32));
        }
        for (x, n) in self.read(hop, "emit_events").into_iter().zip(emit_event::NAMES) {
            v.push((format!("sent_{n}"), x & 0xFFFF_FFFF));
            v.push((format!("cleared_{n}"), x >> 32));
        }
        v
    }
}
