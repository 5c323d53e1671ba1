//! `forward`: the base program every switch runs. L2 switching on a static MAC table
//! (filled by the control plane; misses flood through a multicast group), IPv4 LPM
//! routing for multi-switch topologies, per-port packet and byte counters in register
//! arrays, and a MAC-learning digest for unknown source addresses.
//!
//! Layout (tofino1):
//! - ingress stage 0: `rx_port_counters` (register), `l2_smac`, `l2_dmac` (exact)
//! - ingress stage 1: `ipv4_lpm` (LPM) with TTL decrement and incremental checksum
//! - ingress stage 2, on an `ipv4_lpm` miss: `ipv4_ecmp` (LPM) implemented by the action
//!   selector `ecmp_selector`: a route points at a member (one next hop) or a group (ECMP),
//!   whose member is picked by a CRC-32 of the 5-tuple, so a flow keeps its path
//! - egress stage 0: `tx_port_counters` (register)

use pisa::decl::TableSpec;
use pisa::{
    ActionId, ActionSelector, Digest, DropCode, DualCell, Gress, HashAlgo, MatchKind, Pass, Program, ProgramBuilder, ProgramDecl, Table,
    TraceMode,
};
use pisa::{Op, Salu, SaluProgram, Src, Update};
use wire::ethernet::{EtherType, EthernetFrame};
use wire::ipv4::Ipv4Packet;

/// Ports covered by the per-port counters.
pub const PORT_COUNTERS: u32 = 512;
/// Parse depth: Ethernet, the fixed IPv4 header and the L4 ports (ECMP hashes them).
pub const PARSE_DEPTH: u32 = 14 + 20 + 4;
/// Members (next hops) and groups the ECMP selector holds; members per group.
pub const ECMP_MEMBERS: u32 = 1024;
pub const ECMP_GROUP_SIZE: u32 = 64;

pub struct Forward {
    decl: ProgramDecl,
    rx_count: pisa::SaluAction<DualCell, u32, (), Count>,
    tx_count: pisa::SaluAction<DualCell, u32, (), Count>,
    l2_smac: Table,
    l2_dmac: Table,
    ipv4_lpm: Table,
    ipv4_ecmp: Table,
    ecmp: ActionSelector,
    learn: Digest,
    a_learn: ActionId,
    a_l2_forward: ActionId,
    a_l2_flood: ActionId,
    a_l3_route: ActionId,
    a_to_cpu: ActionId,
    a_set_nexthop: ActionId,
    d_ttl: DropCode,
    d_no_route: DropCode,
    d_not_ipv4: DropCode,
}

/// Count one packet of `bytes` bytes: packets in the low half, bytes in the high half
/// (both wrap at 2^32, as 32-bit hardware counters do). One update per half, no
/// condition, no output.
#[derive(Clone, Copy)]
struct Count;

impl SaluProgram<DualCell, u32, ()> for Count {
    const SALU: Salu = Salu {
        conds: &[],
        lo: &[Update::always(Src::Lo, Op::Add, Src::K(1))],
        hi: &[Update::always(Src::Hi, Op::Add, Src::PhvLo)],
        out: &[],
    };
}

/// The first 6 of 8 bytes as a big-endian number.
#[inline(always)]
fn be_u48(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(b);
    u64::from_be_bytes(w) >> 16
}

impl Forward {
    pub fn new() -> Forward {
        let mut b = ProgramBuilder::new("forward", "L2 switching, IPv4 LPM routing, per-port counters");
        b.parser(PARSE_DEPTH, &[("ethernet", 112), ("ipv4", 160), ("l4_ports", 32)]).metadata_bits(32);
        let rx =
            b.register::<DualCell>("rx_port_counters", Gress::Ingress, 0, PORT_COUNTERS, "received packets (lo) and bytes (hi) per port");
        b.cell_fields(&rx, &[("packets", 32), ("bytes", 32)]);
        let rx_count = b.register_action_salu(rx, "count", Count);
        let tx = b.register::<DualCell>("tx_port_counters", Gress::Egress, 0, PORT_COUNTERS, "sent packets (lo) and bytes (hi) per port");
        b.cell_fields(&tx, &[("packets", 32), ("bytes", 32)]);
        let tx_count = b.register_action_salu(tx, "count", Count);

        let a_nop = b.action("nop", &[], "do nothing");
        let a_learn = b.action("learn", &[], "report the source address to the controller");
        let a_l2_forward = b.action("l2_forward", &[("port", 9)], "send to one port");
        let a_l2_flood = b.action("l2_flood", &[("group", 16)], "replicate to a multicast group, except the ingress port");
        let a_l3_route = b.action("l3_route", &[], "the destination is this router: route by IPv4 address");
        let a_to_cpu = b.action("to_cpu", &[], "send to the controller");
        let a_drop = b.action("drop", &[], "drop");
        let a_set_nexthop =
            b.action("set_nexthop", &[("port", 9), ("dmac", 48), ("smac", 48)], "rewrite MACs, decrement TTL, send to port");

        let l2_smac = b.table(TableSpec {
            name: "l2_smac",
            doc: "known source addresses; a miss reports the address (MAC learning digest)",
            gress: Gress::Ingress,
            stage: 0,
            size: 4096,
            keys: &[("hdr.ethernet.src_addr", 48, MatchKind::Exact)],
            actions: &[a_nop, a_learn],
            default_action: (a_learn, &[]),
            const_default: false,
        });
        let l2_dmac = b.table(TableSpec {
            name: "l2_dmac",
            doc: "destination address to port; misses flood",
            gress: Gress::Ingress,
            stage: 0,
            size: 4096,
            keys: &[("hdr.ethernet.dst_addr", 48, MatchKind::Exact)],
            actions: &[a_l2_forward, a_l2_flood, a_l3_route, a_to_cpu, a_drop],
            default_action: (a_l2_flood, &[1]),
            const_default: false,
        });
        let ipv4_lpm = b.table(TableSpec {
            name: "ipv4_lpm",
            doc: "IPv4 routes for packets addressed to this router's MAC",
            gress: Gress::Ingress,
            stage: 1,
            size: 1024,
            keys: &[("hdr.ipv4.dst_addr", 32, MatchKind::Lpm)],
            actions: &[a_set_nexthop, a_drop],
            default_action: (a_drop, &[]),
            const_default: false,
        });
        let ipv4_ecmp = b.table(TableSpec {
            name: "ipv4_ecmp",
            doc: "IPv4 routes over one or several equal-cost next hops (action selector ecmp_selector), on an ipv4_lpm miss",
            gress: Gress::Ingress,
            stage: 2,
            size: 1024,
            keys: &[("hdr.ipv4.dst_addr", 32, MatchKind::Lpm)],
            actions: &[a_set_nexthop, a_drop],
            default_action: (a_drop, &[]),
            const_default: false,
        });
        let ecmp = b.action_selector(
            "ecmp_selector",
            "next hops of ipv4_ecmp; a group's member is picked by a CRC-32 of the 5-tuple",
            &ipv4_ecmp,
            ECMP_MEMBERS,
            ECMP_GROUP_SIZE,
            HashAlgo::Crc32,
            32,
        );
        let learn = b.digest("mac_learn", &[("src_addr", 48), ("port", 16)], "a source address not in l2_smac, and where it came from");
        let d_ttl = b.drop_reason("ttl_expired");
        let d_no_route = b.drop_reason("no_ipv4_route");
        let d_not_ipv4 = b.drop_reason("routed_not_ipv4");
        let decl = b.build().expect("forward declaration is valid");
        Forward {
            decl,
            rx_count,
            tx_count,
            l2_smac,
            l2_dmac,
            ipv4_lpm,
            ipv4_ecmp,
            ecmp,
            learn,
            a_learn,
            a_l2_forward,
            a_l2_flood,
            a_l3_route,
            a_to_cpu,
            a_set_nexthop,
            d_ttl,
            d_no_route,
            d_not_ipv4,
        }
    }

    /// Route by IPv4 destination (stage 1).
    fn route<M: TraceMode>(&self, pass: &mut Pass<'_, M>) {
        let hdr = pass.hdr();
        let ok = EthernetFrame::new_checked(hdr).map(|e| e.ethertype() == EtherType::Ipv4).unwrap_or(false);
        if !ok {
            pass.drop(self.d_not_ipv4);
            return;
        }
        // The parser sees only the fixed IPv4 header, not the whole packet, so check that
        // header and not the total length.
        if hdr.len() < 34 || hdr[14] >> 4 != 4 || hdr[14] & 0x0F < 5 {
            pass.drop(DropCode::MALFORMED);
            return;
        }
        let dst = [hdr[30], hdr[31], hdr[32], hdr[33]];
        let flow = five_tuple(hdr);
        let mut r = pass.apply(&self.ipv4_lpm, &dst);
        if !r.hit {
            let e = pass.apply(&self.ipv4_ecmp, &dst);
            r = pass.select(&self.ecmp, e, &flow);
        }
        if r.action != self.a_set_nexthop {
            pass.drop(self.d_no_route);
            return;
        }
        let hdr = pass.hdr_mut();
        let mut ip = Ipv4Packet::new_unchecked(&mut hdr[14..34]);
        match ip.decrement_hop_limit() {
            Some(ttl) if ttl > 0 => {}
            _ => {
                pass.drop(self.d_ttl);
                return;
            }
        }
        hdr[0..6].copy_from_slice(&r.param(1).to_be_bytes()[2..]);
        hdr[6..12].copy_from_slice(&r.param(2).to_be_bytes()[2..]);
        pass.forward(r.param(0) as u16);
    }
}

/// What ECMP hashes: source and destination address, protocol, and for an unfragmented TCP
/// or UDP packet without IP options the two ports (else zeros, so all fragments of a
/// datagram take one path).
#[inline]
fn five_tuple(hdr: &[u8]) -> [u8; 13] {
    let mut t = [0u8; 13];
    t[..8].copy_from_slice(&hdr[26..34]);
    t[8] = hdr[23];
    let unfragmented = hdr[20] & 0x3F == 0 && hdr[21] == 0; // MF clear, offset 0
    if (hdr[23] == 6 || hdr[23] == 17) && hdr[14] & 0x0F == 5 && unfragmented && hdr.len() >= 38 {
        t[9..13].copy_from_slice(&hdr[34..38]);
    }
    t
}

impl Default for Forward {
    fn default() -> Self {
        Self::new()
    }
}

impl Program for Forward {
    fn decl(&self) -> &ProgramDecl {
        &self.decl
    }
    pisa::controls_by_trace_mode!(ingress, egress);
}

/// The control blocks, once, for both trace modes (see `Program::ingress_untraced`).
impl Forward {
    #[inline(always)]
    fn ingress_control<M: TraceMode>(&self, pass: &mut Pass<'_, M>) {
        let port = pass.ingress_port();
        let len = pass.packet_len() as u32;
        let (dst, src) = match EthernetFrame::new_checked(pass.hdr()) {
            Ok(eth) => {
                // Both addresses as numbers (what `EthernetAddress::to_u64` gives), each
                // read as one 8-byte word: the header is at least 14 bytes long here.
                let h = eth.into_inner();
                (be_u48(&h[0..8]), be_u48(&h[6..14]))
            }
            Err(_) => {
                pass.drop(DropCode::MALFORMED);
                return;
            }
        };
        if (port as u32) < PORT_COUNTERS {
            pass.execute(&self.rx_count, port as u32, len);
        }
        let s = pass.apply_u64(&self.l2_smac, src);
        if s.action == self.a_learn && (port as u32) < PORT_COUNTERS {
            let mut d = [0u8; 8];
            d[..6].copy_from_slice(&src.to_be_bytes()[2..]);
            d[6..].copy_from_slice(&port.to_be_bytes());
            pass.digest(&self.learn, &d);
        }
        let r = pass.apply_u64(&self.l2_dmac, dst);
        match r.action {
            a if a == self.a_l2_forward => pass.forward(r.param(0) as u16),
            a if a == self.a_l2_flood => pass.multicast(r.param(0) as u16, Some(port)),
            a if a == self.a_l3_route => self.route(pass),
            a if a == self.a_to_cpu => pass.to_cpu(),
            _ => pass.drop(DropCode::PROGRAM),
        }
    }

    #[inline(always)]
    fn egress_control<M: TraceMode>(&self, pass: &mut Pass<'_, M>) {
        let port = pass.egress_port() as u32;
        if port < PORT_COUNTERS {
            let len = pass.packet_len() as u32;
            pass.execute(&self.tx_count, port, len);
        }
    }
}
