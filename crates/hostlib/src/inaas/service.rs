//! The in-process INaaS service: one switch (`forward` + `inaas`), the goalkeeper, the
//! controller's tenant registry and any number of tenants, on simulated time. Frames are
//! real frames through the real switch model; time advances in events (a link hop takes
//! `hop_us`, a host spends `host_us` per packet). Loss is injected on the tenants' links
//! (both directions); the goalkeeper's link is lossless, as it is cabled to the switch.
//!
//! Host-only baselines run through the same switch: frames to a *server* port (EtherType
//! [`BASELINE_ETHERTYPE`]) are switched at L2 to that server, which answers after its
//! service time; what the server computes is the caller's (the adapters in Python).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;

use pisa::control::{ControlOp, ControlReply, Replica, WriteOp};
use pisa::{FieldMatch, PacketBuf, PipeConfig, ProgramSet, Switch};
use programs::inaas::{lease::MAX_UID, TENANT_SLOTS};
use wire::ethernet::EthernetAddress;
use wire::inaas::Operator;

use super::assembly::{Assembler, FrameError, ItemReq};
use super::client::{Completion, TenantClient};
use super::goalkeeper::{Goalkeeper, TenantInfo};
use super::Kind;

/// EtherType of the host-only baseline's frames (plain L2 to a server).
pub const BASELINE_ETHERTYPE: u16 = 0x88B7;

fn mac(i: u16) -> EthernetAddress {
    EthernetAddress([2, 0x1A, 0xA5, 0, (i >> 8) as u8, i as u8])
}

/// A tenant as the controller registered it.
pub struct Tenant {
    pub uid: u32,
    pub slot: u16,
    pub port: u16,
    pub kind: Kind,
    pub lease_us: u32,
    pub subscription: bool,
    pub client: TenantClient,
    pub done: Vec<Completion>,
    /// Baseline frames answered by servers: (sent at, answered at, frame).
    pub baseline_done: Vec<(u64, u64, Vec<u8>)>,
    /// Paxos answers of the switch (raw frames, for a host-side proposer).
    pub paxos_in: Vec<Vec<u8>>,
}

/// Ledger inputs the switch itself counted for one tenant slot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SwitchUsage {
    pub alu_ops: u64,
    pub packets: u64,
    pub mismatches: u64,
    pub leases: u64,
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// A frame reaches the switch on a port.
    ToSwitch(u16, Vec<u8>),
    /// A frame reaches the host on a port.
    ToHost(u16, Vec<u8>),
}

pub struct Service {
    sw: Switch,
    set: Arc<ProgramSet>,
    pub gk: Goalkeeper,
    pub gk_port: u16,
    pub tenants: Vec<Tenant>,
    servers: HashMap<u16, u64>,
    server_busy: HashMap<u16, u64>,
    /// Port -> (tenant index) for tenant ports; several tenants may share a host port.
    port_tenants: HashMap<u16, Vec<usize>>,
    events: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    ev_seq: u64,
    pub now_us: u64,
    pub hop_us: u64,
    pub host_us: u64,
    gk_busy_until: u64,
    pub loss: f64,
    /// Probability that a tenant's frame is delivered twice (both directions).
    pub dup: f64,
    /// Extra random delay (0..=jitter_us) per tenant frame: reordering.
    pub jitter_us: u64,
    rng: u64,
    next_port: u16,
    pub lost_frames: u64,
    ports: u16,
    uid_state: u64,
    next_slot: u16,
}

impl Service {
    /// A switch with `ports` ports; the goalkeeper on port 0.
    pub fn new(ports: u16, seed: u64) -> Service {
        Self::with_program(ports, seed, programs::inaas::Inaas::with_paxos())
    }

    /// As [`Service::new`], with this build of the program (e.g. one built for a target,
    /// whose passes serve fewer segments: items beyond them fail, the goalkeeper's).
    pub fn with_program(ports: u16, seed: u64, inaas: programs::inaas::Inaas) -> Service {
        let set = Arc::new(
            ProgramSet::new(vec![Arc::new(programs::forward::Forward::new()), Arc::new(inaas)]).expect("forward + inaas load together"),
        );
        let mut sw = Switch::new(set.clone(), ports, 1, PipeConfig::default());
        sw.control(&ControlOp::McastGroupWrite {
            op: WriteOp::Insert,
            group: 1,
            replicas: (0..ports).map(|p| Replica { port: p, rid: 0 }).collect(),
        })
        .expect("flood group");
        let mut s = Service {
            sw,
            set,
            gk: Goalkeeper::new(mac(0)),
            gk_port: 0,
            tenants: Vec::new(),
            servers: HashMap::new(),
            server_busy: HashMap::new(),
            port_tenants: HashMap::new(),
            events: BinaryHeap::new(),
            ev_seq: 0,
            now_us: 1,
            hop_us: 1,
            host_us: 2,
            gk_busy_until: 0,
            loss: 0.0,
            dup: 0.0,
            jitter_us: 0,
            rng: seed | 1,
            next_port: 1,
            lost_frames: 0,
            ports,
            uid_state: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
            next_slot: 0,
        };
        s.l2(mac(0), 0);
        s.entry(1, "goalkeeper", vec![FieldMatch::Exact { field: 0, value: vec![0] }], "set_goalkeeper", vec![0u16.to_be_bytes().to_vec()]);
        s
    }

    fn id(&self, prog: usize, kind: &str, name: &str) -> u32 {
        let d = self.set.decl(prog);
        let ids = self.set.ids(prog);
        match kind {
            "table" => ids.tables[d.tables.iter().position(|t| t.name == name).expect("table")],
            "action" => ids.actions[d.actions.iter().position(|t| t.name == name).expect("action")],
            _ => ids.registers[d.registers.iter().position(|t| t.name == name).expect("register")],
        }
    }

    fn entry(&mut self, prog: usize, table: &str, matches: Vec<FieldMatch>, action: &str, params: Vec<Vec<u8>>) {
        let op = ControlOp::TableWrite {
            table_id: self.id(prog, "table", table),
            op: WriteOp::Insert,
            matches,
            priority: 0,
            action_id: self.id(prog, "action", action),
            params: params.into_iter().enumerate().map(|(i, p)| (i as u32 + 1, p)).collect(),
        };
        self.sw.control(&op).expect("table entry");
    }

    fn l2(&mut self, m: EthernetAddress, port: u16) {
        self.entry(
            0,
            "l2_dmac",
            vec![FieldMatch::Exact { field: 0, value: m.0.to_vec() }],
            "l2_forward",
            vec![port.to_be_bytes().to_vec()],
        );
        self.entry(0, "l2_smac", vec![FieldMatch::Exact { field: 0, value: m.0.to_vec() }], "nop", vec![]);
    }

    fn rand(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    /// A fresh port (a new host).
    pub fn new_port(&mut self) -> u16 {
        let p = self.next_port;
        assert!(p < self.ports, "out of switch ports");
        self.next_port += 1;
        p
    }

    /// The controller registers a tenant on a host port: a uid the tenant never sees
    /// (random, below 2^31, unique), its slot, its lease policy. Returns the tenant index.
    pub fn add_tenant(&mut self, port: u16, kind: Kind, lease_us: u32, max_lease_us: u32, subscription: bool, rto_us: u64) -> usize {
        assert!((self.next_slot as u32) < TENANT_SLOTS);
        let uid = loop {
            self.uid_state = self.uid_state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let u = ((self.uid_state >> 33) as u32) & MAX_UID;
            if u != 0 && self.tenants.iter().all(|t| t.uid != u) {
                break u;
            }
        };
        let slot = self.next_slot;
        self.next_slot += 1;
        let tmac = mac(0x100 + self.tenants.len() as u16);
        for p in [port, self.gk_port] {
            self.entry(
                1,
                "tenants",
                vec![
                    FieldMatch::Exact { field: 0, value: p.to_be_bytes().to_vec() },
                    FieldMatch::Exact { field: 1, value: uid.to_be_bytes().to_vec() },
                ],
                "set_tenant",
                vec![slot.to_be_bytes().to_vec(), max_lease_us.to_be_bytes().to_vec()],
            );
        }
        self.l2(tmac, port);
        self.gk.register_tenant(uid, TenantInfo { kind, lease_us });
        let client = TenantClient::new(Assembler::new(uid, tmac, self.gk.mac(), lease_us), rto_us, 8);
        self.tenants.push(Tenant {
            uid,
            slot,
            port,
            kind,
            lease_us,
            subscription,
            client,
            done: Vec::new(),
            baseline_done: Vec::new(),
            paxos_in: Vec::new(),
        });
        self.port_tenants.entry(port).or_default().push(self.tenants.len() - 1);
        self.tenants.len() - 1
    }

    /// Another host of tenant `of` (a worker of the same job): same uid, slot and policy,
    /// its own port and request state. Returns its index.
    pub fn add_member(&mut self, of: usize, port: u16) -> usize {
        let (uid, slot, kind, lease_us, subscription) = {
            let t = &self.tenants[of];
            (t.uid, t.slot, t.kind, t.lease_us, t.subscription)
        };
        let max_lease = lease_us;
        let idx = self.tenants.len() as u16;
        let tmac = mac(0x100 + idx);
        if port != self.tenants[of].port {
            self.entry(
                1,
                "tenants",
                vec![
                    FieldMatch::Exact { field: 0, value: port.to_be_bytes().to_vec() },
                    FieldMatch::Exact { field: 1, value: uid.to_be_bytes().to_vec() },
                ],
                "set_tenant",
                vec![slot.to_be_bytes().to_vec(), max_lease.to_be_bytes().to_vec()],
            );
        }
        self.l2(tmac, port);
        let rto = self.tenants[of].client.rto_us;
        let client = TenantClient::new(Assembler::new(uid, tmac, self.gk.mac(), lease_us), rto, 8);
        self.tenants.push(Tenant {
            uid,
            slot,
            port,
            kind,
            lease_us,
            subscription,
            client,
            done: Vec::new(),
            baseline_done: Vec::new(),
            paxos_in: Vec::new(),
        });
        self.port_tenants.entry(port).or_default().push(self.tenants.len() - 1);
        self.tenants.len() - 1
    }

    /// A host-only server on its own port; `service_us` per frame. Returns its port.
    pub fn add_server(&mut self, service_us: u64) -> u16 {
        let p = self.new_port();
        self.servers.insert(p, service_us);
        self.l2(mac(0x8000 + p), p);
        p
    }

    /// Submit a request for tenant `t`.
    pub fn submit(&mut self, t: usize, items: &[ItemReq], op: Operator) -> Result<u32, FrameError> {
        let now = self.now_us;
        let seq = self.tenants[t].client.send(items, op, now)?;
        self.flush_tenant(t);
        Ok(seq)
    }

    /// Send a baseline frame (payload only) from tenant `t` to server `port`.
    pub fn submit_baseline(&mut self, t: usize, server_port: u16, payload: &[u8]) {
        let mut f = Vec::with_capacity(14 + 8 + payload.len());
        f.extend_from_slice(&mac(0x8000 + server_port).0);
        f.extend_from_slice(&self.tenants[t].client.asm.mac.0);
        f.extend_from_slice(&BASELINE_ETHERTYPE.to_be_bytes());
        f.extend_from_slice(&self.now_us.to_be_bytes());
        f.extend_from_slice(payload);
        let port = self.tenants[t].port;
        self.send_from_host(port, f);
    }

    /// A raw frame from a host port (attackers, malformed traffic).
    pub fn inject_raw(&mut self, port: u16, frame: Vec<u8>) {
        self.push(self.now_us + self.hop_us, Ev::ToSwitch(port, frame));
    }

    fn push(&mut self, at: u64, ev: Ev) {
        self.ev_seq += 1;
        self.events.push(Reverse((at, self.ev_seq, ev)));
    }

    fn lossy(&mut self) -> bool {
        self.loss > 0.0 && (self.rand() % 1_000_000) < (self.loss * 1e6) as u64
    }

    /// Arrival times of a tenant link's frame: none (lost), one, or two (duplicated),
    /// each delayed by up to `jitter_us` more than a hop.
    fn faulty(&mut self) -> Vec<u64> {
        if self.lossy() {
            self.lost_frames += 1;
            return Vec::new();
        }
        let copies = if self.dup > 0.0 && (self.rand() % 1_000_000) < (self.dup * 1e6) as u64 { 2 } else { 1 };
        (0..copies)
            .map(|_| {
                let j = if self.jitter_us > 0 { self.rand() % (self.jitter_us + 1) } else { 0 };
                self.now_us + self.hop_us + j
            })
            .collect()
    }

    fn send_from_host(&mut self, port: u16, frame: Vec<u8>) {
        if port == self.gk_port {
            self.push(self.now_us + self.hop_us, Ev::ToSwitch(port, frame));
            return;
        }
        for at in self.faulty() {
            self.push(at, Ev::ToSwitch(port, frame.clone()));
        }
    }

    /// A frame from tenant `t`'s host, through its (faulty) link.
    pub fn send_raw(&mut self, t: usize, frame: Vec<u8>) {
        let port = self.tenants[t].port;
        self.send_from_host(port, frame);
    }

    fn flush_tenant(&mut self, t: usize) {
        let port = self.tenants[t].port;
        while let Some(f) = self.tenants[t].client.poll_transmit() {
            self.send_from_host(port, f);
        }
    }

    /// Run until nothing is in flight or `max_us` of simulated time passed.
    pub fn run(&mut self, max_us: u64) {
        let end = self.now_us + max_us;
        loop {
            let next_ev = self.events.peek().map(|Reverse((t, _, _))| *t);
            let next_rto = self.tenants.iter().filter_map(|t| t.client.poll_timeout()).min();
            let next = match (next_ev, next_rto) {
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) => a,
                (None, Some(b)) => b,
                (None, None) => break,
            };
            if next > end {
                self.now_us = end;
                break;
            }
            self.now_us = self.now_us.max(next);
            // Everything due now reaches the switch as one batch.
            let mut rx = Vec::new();
            while let Some(Reverse((t, _, _))) = self.events.peek() {
                if *t > self.now_us {
                    break;
                }
                let Reverse((_, _, ev)) = self.events.pop().expect("peeked");
                match ev {
                    Ev::ToSwitch(port, f) => rx.push(PacketBuf::from_slice(&f, port)),
                    Ev::ToHost(port, f) => self.at_host(port, f),
                }
            }
            if !rx.is_empty() {
                self.sw.process(&mut rx, self.now_us * 1_000);
                // Everything the switch has for this instant leaves now (recirculations and
                // queues included): the model's time is the hop, not the egress rate.
                let mut out = self.sw.drain_all();
                for _ in 0..64 {
                    self.sw.tick(self.now_us * 1_000);
                    let more = self.sw.drain_all();
                    let waiting: usize = self.sw.pipes().iter().map(|p| p.pending()).sum();
                    if more.is_empty() && waiting == 0 {
                        break;
                    }
                    out.extend(more);
                }
                for (port, f) in out {
                    if port == self.gk_port || self.servers.contains_key(&port) {
                        self.push(self.now_us + self.hop_us, Ev::ToHost(port, f));
                        continue;
                    }
                    for at in self.faulty() {
                        self.push(at, Ev::ToHost(port, f.clone()));
                    }
                }
            }
            let now = self.now_us;
            for t in 0..self.tenants.len() {
                let gave_up = self.tenants[t].client.handle_timeout(now);
                self.tenants[t].done.extend(gave_up);
                self.flush_tenant(t);
            }
        }
    }

    /// Run for exactly `us` of simulated time (idle time passes too).
    pub fn run_for(&mut self, us: u64) {
        let end = self.now_us + us;
        self.run(us);
        self.now_us = self.now_us.max(end);
    }

    fn at_host(&mut self, port: u16, f: Vec<u8>) {
        if port == self.gk_port {
            self.gk.handle(self.now_us, &f);
            let start = self.gk_busy_until.max(self.now_us);
            self.gk_busy_until = start + self.host_us;
            while let Some(o) = self.gk.poll_transmit() {
                self.push(self.gk_busy_until + self.hop_us, Ev::ToSwitch(self.gk_port, o));
            }
            return;
        }
        if let Some(&svc) = self.servers.get(&port) {
            // Echo back to the sender after the service time (FIFO server).
            let busy = self.servers_busy(port, svc);
            if f.len() >= 14 {
                let mut r = f.clone();
                r[0..6].copy_from_slice(&f[6..12]);
                r[6..12].copy_from_slice(&f[0..6]);
                self.push(busy + self.hop_us, Ev::ToSwitch(port, r));
            }
            return;
        }
        let Some(list) = self.port_tenants.get(&port).cloned() else { return };
        let now = self.now_us;
        if f.len() >= 22 && u16::from_be_bytes([f[12], f[13]]) == BASELINE_ETHERTYPE {
            for t in list {
                if f[0..6] == self.tenants[t].client.asm.mac.0 {
                    let sent = u64::from_be_bytes(f[14..22].try_into().expect("8 bytes"));
                    self.tenants[t].baseline_done.push((sent, now, f[22..].to_vec()));
                }
            }
            return;
        }
        let paxos = f.len() > 14 && wire::inaas::is_paxos(f[14]);
        for t in list {
            if f.len() >= 6 && f[0..6] == self.tenants[t].client.asm.mac.0 {
                if paxos {
                    self.tenants[t].paxos_in.push(f.clone());
                    continue;
                }
                if let Some(c) = self.tenants[t].client.handle(now, &f) {
                    self.tenants[t].done.push(c);
                }
            }
        }
    }

    /// When a FIFO server finishes a frame that arrives now.
    fn servers_busy(&mut self, port: u16, svc: u64) -> u64 {
        let start = self.server_busy.get(&port).copied().unwrap_or(0).max(self.now_us);
        let done = start + svc;
        self.server_busy.insert(port, done);
        done
    }

    /// What the switch counted for a tenant (its usage registers).
    pub fn switch_usage(&mut self, t: usize) -> SwitchUsage {
        let slot = self.tenants[t].slot as u32;
        let u = self.read_reg("tenant_usage", slot);
        let e = self.read_reg("tenant_events", slot);
        SwitchUsage { alu_ops: u & 0xFFFF_FFFF, packets: u >> 32, mismatches: e & 0xFFFF_FFFF, leases: e >> 32 }
    }

    /// Forged-uid packets the switch counted on a port.
    pub fn forged_on_port(&mut self, port: u16) -> u64 {
        self.read_reg("forged_uid", port as u32)
    }

    /// One register cell of the `inaas` program.
    pub fn read_reg(&mut self, name: &str, index: u32) -> u64 {
        let id = self.id(1, "register", name);
        match self.sw.control(&ControlOp::RegisterRead { register_id: id, index: Some(index) }) {
            Ok(ControlReply::RegisterCells(v)) => v.first().map(|c| c.1).unwrap_or(0),
            _ => 0,
        }
    }

    /// Drops of the `inaas` program by its reason name.
    pub fn drops(&self, reason: &str) -> u64 {
        let Some(code) = self.set.decl(1).drop_code(reason) else { return 0 };
        self.sw.counters().programs[1].drops.get(code.0 as usize).copied().unwrap_or(0)
    }

    /// Rule violations counted in the `inaas` program (must stay 0).
    pub fn violations(&self) -> u64 {
        self.sw.counters().programs[1].violations.iter().sum()
    }

    /// The switch's own counters (ports, drops by reason, recirculations).
    pub fn counters(&self) -> pisa::counters::Counters {
        self.sw.counters()
    }

    /// Recirculations the switch made.
    pub fn recirculations(&self) -> u64 {
        self.sw.counters().recirculations
    }
}
