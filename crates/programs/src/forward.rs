//! `forward`: the base program every switch runs. L2 switching on a static MAC table
//! (filled by the control plane; misses flood through a multicast group), IPv4 LPM
//! routing for multi-switch topologies, per-port packet and byte counters in register
//! arrays, and a MAC-learning digest for unknown source addresses.
//!
//! Layout (tofino1):
//! - ingress stage 0: `rx_port_counters` (register), `l2_smac`, `l2_dmac` (exact)
//! - ingress stage 1: `ipv4_lpm` (LPM) with TTL decrement and incremental checksum
//! - egress stage 0: `tx_port_counters` (register)

use pisa::decl::TableSpec;
use pisa::{
    ActionId, Digest, DropCode, Gress, MatchKind, Pair, Pass, Program, ProgramBuilder, ProgramDecl, RegisterAction, SaluBody, Table,
};
use wire::ethernet::{EtherType, EthernetFrame};
use wire::ipv4::Ipv4Packet;

/// Ports covered by the per-port counters.
pub const PORT_COUNTERS: u32 = 512;
/// Parse depth: Ethernet and the fixed IPv4 header.
pub const PARSE_DEPTH: u32 = 14 + 20;

pub struct Forward {
    decl: ProgramDecl,
    rx_count: RegisterAction<Pair, u32, (), Count>,
    tx_count: RegisterAction<Pair, u32, (), Count>,
    l2_smac: Table,
    l2_dmac: Table,
    ipv4_lpm: Table,
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
/// (both wrap at 2^32, as 32-bit hardware counters do). A zero-sized body rather than a
/// `fn`, so it inlines: it runs twice per packet.
#[derive(Clone, Copy)]
struct Count;

impl SaluBody<Pair, u32, ()> for Count {
    #[inline(always)]
    fn run(self, c: Pair, bytes: u32) -> (Pair, ()) {
        (Pair::new(c.lo.wrapping_add(1), c.hi.wrapping_add(bytes)), ())
    }
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
        b.parser(PARSE_DEPTH, &[("ethernet", 112), ("ipv4", 160)]).metadata_bits(32);
        let rx = b.register::<Pair>("rx_port_counters", Gress::Ingress, 0, PORT_COUNTERS, "received packets (lo) and bytes (hi) per port");
        b.cell_fields(&rx, &[("packets", 32), ("bytes", 32)]);
        let rx_count = b.register_action_body(rx, "count", Count);
        let tx = b.register::<Pair>("tx_port_counters", Gress::Egress, 0, PORT_COUNTERS, "sent packets (lo) and bytes (hi) per port");
        b.cell_fields(&tx, &[("packets", 32), ("bytes", 32)]);
        let tx_count = b.register_action_body(tx, "count", Count);

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
    fn route(&self, pass: &mut Pass<'_>) {
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
        let r = pass.apply(&self.ipv4_lpm, &dst);
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

impl Default for Forward {
    fn default() -> Self {
        Self::new()
    }
}

impl Program for Forward {
    fn decl(&self) -> &ProgramDecl {
        &self.decl
    }

    fn ingress(&self, pass: &mut Pass<'_>) {
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

    fn egress(&self, pass: &mut Pass<'_>) {
        let port = pass.egress_port() as u32;
        if port < PORT_COUNTERS {
            let len = pass.packet_len() as u32;
            pass.execute(&self.tx_count, port, len);
        }
    }
}
