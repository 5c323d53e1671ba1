//! `switchagg`: SwitchAgg's aggregation data plane (SwitchAgg §4.2) for the
//! `switchagg-fpga` target.
//!
//! A packet to UDP port 7071 is an aggregation packet (`wire::switchagg`). Its pairs go
//! one after another through the engines, as the FPGA's payload analyzer hands them over
//! (each pair an *item*: a fresh trip through the stages, see `pisa::Pass::next_item`):
//! - stage 0: the tree's configuration (table `tree_config`) and the exactly-once check
//!   (register `expected_seq`, see [`reliability`]);
//! - stage 1: the key's hash (`key_hash`, the same function for every engine, §4.2.4);
//! - stage 2: the front-end processing engine of the pair's key-length group
//!   ([`payload_analyzer`]): `fpe0`..`fpe7`, block-RAM hash tables of buckets of slots
//!   ([`hash_table`]); a colliding pair evicts the stored one;
//! - stages 3-4: the back-end processing engine: `bpe0`..`bpe7`, the DRAM regions of
//!   each group, taking the FPE's evictions; what it evicts travels on to the parent;
//! - stage 6: `eot_count`, children that have sent their last packet, and `pairs_in`,
//!   the pairs of each tree's new (not duplicate) packets;
//! - stage 7: `up_seq`, the sequence numbers of what this switch sends to its parent, and
//!   `pairs_out`, the pairs those packets carry (the per-switch reduction is
//!   `1 - pairs_out / pairs_in`; pairs vary in length, so frame sizes do not give it).
//!
//! What happens to pairs that stay in the packet, the flush, the memory split across
//! trees and the FPGA's time: docs/switchagg.md, "Data path" and "Time".

pub mod configuration;
pub mod cycles;
pub mod flush;
pub mod hash_table;
pub mod payload_analyzer;
pub mod reliability;

use pisa::decl::TableSpec;
use pisa::salu::common::{Add, FetchInc, Inc};
use pisa::TraceMode;
use pisa::{
    ActionId, ClassifyRule, DropCode, Gress, HashAlgo, HashUnit, MatchKind, Memory, MemoryKind, Pass, Program, ProgramBuilder, ProgramDecl,
    Table,
};
use pisa::{Cmp, Cond, Op, OutputSource, Pred, Salu, SaluOutput, SaluProgram, Src, Update};
use wire::switchagg::{self as sa, flags, Operation, HEADER_LEN, PAIR_OVERHEAD};

use hash_table::{bucket_bytes, Spill};
use payload_analyzer::{group_of, slot_len, GROUPS};

/// The parse depth: the payload analyzer streams the whole frame.
pub const PARSE_DEPTH: u32 = 1518;
/// Largest frame the switch emits (Ethernet payload of 1500 bytes).
pub const MAX_FRAME: usize = 1514;
/// Items (pairs, or bucket words when flushing) per packet: a 1500-byte payload holds at
/// most 210 of the smallest pairs.
pub const ITEMS_PER_PASS: u32 = 256;
/// Clone session of the ACK towards the child on port `p`: `ACK_SESSION_BASE + p`, one
/// replica to port `p` (below 511) with replication id [`ACK_RID`] (installed by the controller).
pub const ACK_SESSION_BASE: u16 = 0x200;
pub const ACK_RID: u16 = 0x0ACC;
/// Ports that have an ACK session (clone session ids end at 1023); a child on another port
/// (the CPU port) gets ACKs only for packets turned around whole.
pub const MAX_ACK_PORT: u16 = 1024 - ACK_SESSION_BASE;
/// Clone session whose one replica is the recirculation port: a flush pass sends its
/// packet to the parent and its copy around again.
pub const FLUSH_SESSION: u16 = 0x1FF;

/// Marker in bridged metadata byte 0.
const BRIDGED_FLUSH: u8 = 0xF1;
const BRIDGED_ACK: u8 = 0xAC;

/// Sizes of the engines and of the configuration.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// Front-end SRAM, bytes, split evenly over the eight FPEs.
    pub fpe_bytes: u64,
    /// Back-end DRAM, bytes, split evenly over the eight groups; 0: no BPE.
    pub bpe_bytes: u64,
    /// Slots per bucket (1..=8).
    pub slots_per_bucket: u32,
    /// Trees one switch serves at once.
    pub max_trees: u32,
    /// Children per tree.
    pub max_children: u32,
}

impl Default for Config {
    /// 4 MB of FPE block RAM (fits the 690T's 6.6 MB), 256 MB of BPE DRAM.
    fn default() -> Self {
        Config { fpe_bytes: 4 << 20, bpe_bytes: 256 << 20, slots_per_bucket: 4, max_trees: 64, max_children: 256 }
    }
}

pub struct SwitchAgg {
    decl: ProgramDecl,
    cfg: Config,
    tree_config: Table,
    a_set_tree: ActionId,
    expected_seq: pisa::SaluAction<u32, u32, u8, reliability::SeqCheck>,
    key_hash: HashUnit,
    bpe_hash: HashUnit,
    fpe: Vec<Memory>,
    bpe: Vec<Memory>,
    fpe_evictions: pisa::SaluAction<u32, (), (), Inc>,
    bpe_evictions: pisa::SaluAction<u32, (), (), Inc>,
    eot_count: pisa::SaluAction<u16, u16, bool, Arrive>,
    up_seq: pisa::SaluAction<u32, (), u32, FetchInc>,
    pairs_in: pisa::SaluAction<u32, u32, (), Add>,
    pairs_out: pisa::SaluAction<u32, u32, (), Add>,
    d_unknown_tree: DropCode,
    d_op_mismatch: DropCode,
    d_bad_child: DropCode,
    d_seq_gap: DropCode,
    d_ack: DropCode,
}

/// One more child has sent EoT: true (and the count starts over) when all have.
#[derive(Clone, Copy)]
struct Arrive;
impl SaluProgram<u16, u16, bool> for Arrive {
    const SALU: Salu = Salu {
        conds: &[Cond::linear(Src::Lo, Src::PhvLo, 1, Cmp::GeU)],
        lo: &[Update::set(Pred::C0, Src::K(0)), Update::always(Src::Lo, Op::Add, Src::K(1))],
        hi: &[],
        out: &[SaluOutput::new(Pred::C0, OutputSource::Predicate)],
    };
}
/// A tree's configuration, from `tree_config`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tree {
    pub parent_port: u16,
    pub children: u16,
    pub op: Operation,
    pub region: u32,
    pub regions: u32,
    pub up_child: u16,
}

/// Register indexes, for the control plane and tests.
pub mod reg {
    pub const EXPECTED_SEQ: usize = 0;
    pub const FPE_EVICTIONS: usize = 1;
    pub const BPE_EVICTIONS: usize = 2;
    pub const EOT_COUNT: usize = 3;
    pub const UP_SEQ: usize = 4;
    pub const PAIRS_IN: usize = 5;
    pub const PAIRS_OUT: usize = 6;
}

impl SwitchAgg {
    pub fn new() -> SwitchAgg {
        SwitchAgg::with_config(Config::default())
    }

    pub fn with_config(cfg: Config) -> SwitchAgg {
        let slots = cfg.slots_per_bucket.clamp(1, 8);
        let cfg = Config { slots_per_bucket: slots, max_trees: cfg.max_trees.clamp(1, 256), max_children: cfg.max_children.max(1), ..cfg };
        let mut b = ProgramBuilder::new("switchagg", "SwitchAgg: key-value aggregation with front-end (SRAM) and back-end (DRAM) engines");
        b.parser(PARSE_DEPTH, &[("ethernet", 112), ("ipv4", 160), ("udp", 64), ("switchagg", HEADER_LEN as u32 * 8)])
            .metadata_bits(128)
            .bridged_bytes(14)
            .classify(ClassifyRule::udp_port(sa::UDP_PORT))
            .items_per_pass(ITEMS_PER_PASS);
        let a_set_tree = b.action(
            "set_tree",
            &[("parent_port", 9), ("children", 16), ("op", 8), ("region", 8), ("regions", 8), ("up_child", 16)],
            "the tree's parent port, children, operation, memory region (of `regions` equal ones) and this switch's child id at its parent",
        );
        let a_none = b.action("unknown_tree", &[], "drop: no such tree here");
        let tree_config = b.table(TableSpec {
            name: "tree_config",
            doc: "aggregation trees this switch serves (the Configure packet, through P4Runtime)",
            gress: Gress::Ingress,
            stage: 0,
            size: cfg.max_trees,
            keys: &[("hdr.switchagg.tree_id", 16, MatchKind::Exact)],
            actions: &[a_set_tree, a_none],
            default_action: (a_none, &[]),
            const_default: false,
        });
        let r = b.register::<u32>(
            "expected_seq",
            Gress::Ingress,
            0,
            cfg.max_trees * cfg.max_children,
            "next expected sequence number per (tree region, child)",
        );
        let expected_seq = b.register_action_salu(r, "check", reliability::SeqCheck);
        let key_hash = b.hash_unit("key_hash", Gress::Ingress, 1, HashAlgo::Crc32, 32);
        let fpe: Vec<Memory> = (0..GROUPS)
            .map(|g| {
                let wb = bucket_bytes(slots as usize, slot_len(g)) as u32;
                let words = ((cfg.fpe_bytes / GROUPS as u64) / wb as u64).max(1) as u32;
                b.memory(
                    &format!("fpe{g}"),
                    Gress::Ingress,
                    2,
                    MemoryKind::Sram,
                    words,
                    wb,
                    &format!("front-end engine of group {g}: keys of {}..={} bytes", slot_len(g) - 7, slot_len(g)),
                )
            })
            .collect();
        let bpe_hash = b.hash_unit("bpe_hash", Gress::Ingress, 3, HashAlgo::Crc32c, 32);
        let r = b.register::<u32>("fpe_evictions", Gress::Ingress, 3, GROUPS as u32, "pairs each FPE evicted");
        let fpe_evictions = b.register_action_salu(r, "count", Inc);
        let bpe: Vec<Memory> = if cfg.bpe_bytes == 0 {
            Vec::new()
        } else {
            (0..GROUPS)
                .map(|g| {
                    let wb = bucket_bytes(slots as usize, slot_len(g)) as u32;
                    let words = ((cfg.bpe_bytes / GROUPS as u64) / wb as u64).max(1) as u32;
                    b.memory(
                        &format!("bpe{g}"),
                        Gress::Ingress,
                        4,
                        MemoryKind::Dram,
                        words,
                        wb,
                        &format!("back-end engine, DRAM region of group {g}"),
                    )
                })
                .collect()
        };
        let r = b.register::<u32>("bpe_evictions", Gress::Ingress, 5, GROUPS as u32, "pairs the BPE evicted to the next hop");
        let bpe_evictions = b.register_action_salu(r, "count", Inc);
        let r = b.register::<u16>("eot_count", Gress::Ingress, 6, cfg.max_trees, "children of each tree that have sent EoT");
        let eot_count = b.register_action_salu(r, "arrive", Arrive);
        let r = b.register::<u32>("up_seq", Gress::Ingress, 7, cfg.max_trees, "next sequence number towards each tree's parent");
        let up_seq = b.register_action_salu(r, "next", FetchInc);
        // Plain counters (an add per packet), read by the controller for per-switch pair
        // counts; declared last so the other registers keep their indexes.
        let r =
            b.register::<u32>("pairs_in", Gress::Ingress, 6, cfg.max_trees, "pairs of each tree's new packets received from its children");
        let pairs_in = b.register_action_salu(r, "add", Add);
        let r = b.register::<u32>("pairs_out", Gress::Ingress, 7, cfg.max_trees, "pairs of each tree sent to its parent (flush included)");
        let pairs_out = b.register_action_salu(r, "add", Add);
        let words: u64 = fpe.iter().chain(&bpe).map(|m| m.words() as u64).sum();
        b.max_recirculations(Some((words + 2).min(u32::MAX as u64) as u32));
        b.note("SwitchAgg is an FPGA design (NetFPGA-SUME): it needs the `switchagg-fpga` target's payload analyzer and block memories; on a Tofino see `daiet`.");
        b.note("Each pair is one item through stages 1-5 (the payload analyzer streams pairs); the FPGA's time is charged per pair by Table 3's cycles (programs::switchagg::cycles), not by pass count.");
        b.note("Flush: the last EoT packet recirculates, each pass draining up to a packet's worth of bucket words (one per item); the recirculation bound is one pass per word.");
        let d_unknown_tree = b.drop_reason("switchagg_unknown_tree");
        let d_op_mismatch = b.drop_reason("switchagg_op_mismatch");
        let d_bad_child = b.drop_reason("switchagg_bad_child");
        let d_seq_gap = b.drop_reason("switchagg_seq_gap");
        let d_ack = b.drop_reason("switchagg_ack_consumed");
        let decl = b.build().expect("switchagg declaration is valid");
        SwitchAgg {
            decl,
            cfg,
            tree_config,
            a_set_tree,
            expected_seq,
            key_hash,
            bpe_hash,
            fpe,
            bpe,
            fpe_evictions,
            bpe_evictions,
            eot_count,
            up_seq,
            pairs_in,
            pairs_out,
            d_unknown_tree,
            d_op_mismatch,
            d_bad_child,
            d_seq_gap,
            d_ack,
        }
    }

    pub fn config(&self) -> Config {
        self.cfg
    }

    /// Bucket words per tree region of each engine memory, FPE then BPE.
    pub fn memories(&self) -> impl Iterator<Item = &Memory> {
        self.fpe.iter().chain(&self.bpe)
    }

    /// The tree of `tree_id` (stage 0), or None.
    pub(crate) fn tree<M: TraceMode>(&self, pass: &mut Pass<'_, M>, tree_id: u16) -> Option<Tree> {
        let r = pass.apply_u64(&self.tree_config, tree_id as u64);
        if r.action != self.a_set_tree {
            return None;
        }
        let op = Operation::from_code(r.param(2) as u8).ok()?;
        let (region, regions) = (r.param(3) as u32, r.param(4) as u32);
        if region >= regions || region >= self.cfg.max_trees {
            return None;
        }
        Some(Tree { parent_port: r.param(0) as u16, children: r.param(1) as u16, op, region, regions, up_child: r.param(5) as u16 })
    }

    /// Offset of the aggregation header and end of the UDP payload, if the frame is
    /// IPv4/UDP with consistent lengths inside the header region.
    fn locate(hdr: &[u8]) -> Option<(usize, usize)> {
        if hdr.len() < wire::L2_L4_LEN || hdr[12..14] != [0x08, 0x00] || hdr[14] >> 4 != 4 {
            return None;
        }
        let ihl = (hdr[14] & 0x0F) as usize * 4;
        let udp_at = 14 + ihl;
        if ihl < 20 || hdr.len() < udp_at + 8 {
            return None;
        }
        let udp_len = u16::from_be_bytes([hdr[udp_at + 4], hdr[udp_at + 5]]) as usize;
        if udp_len < 8 || udp_at + udp_len > hdr.len() {
            return None;
        }
        Some((udp_at + 8, udp_at + udp_len))
    }

    /// One pair through the engines (stages 1-5); the pair that moves on, if any.
    #[inline]
    fn engines<M: TraceMode>(&self, pass: &mut Pass<'_, M>, tree: &Tree, g: usize, key: &[u8], value: u32) -> Spill {
        let h = pass.hash(&self.key_hash, key);
        let m = self.fpe[g];
        let Some((base, per)) = configuration::region(m.words(), tree.region, tree.regions) else {
            return Spill::some(key, value);
        };
        let (sl, op) = (slot_len(g), tree.op);
        let out = pass.access(&m, base + h % per, |w| hash_table::aggregate(w, sl, key, value, op));
        if !out.spill.is_some() {
            return out.spill;
        }
        if out.evicted {
            pass.execute(&self.fpe_evictions, g as u32, ());
        }
        let Some(&bm) = self.bpe.get(g) else {
            return out.spill;
        };
        let Some((bbase, bper)) = configuration::region(bm.words(), tree.region, tree.regions) else {
            return out.spill;
        };
        let s = out.spill;
        let h2 = pass.hash(&self.bpe_hash, s.key()).get();
        let out2 = pass.access(&bm, bbase + h2 % bper, |w| hash_table::aggregate(w, sl, s.key(), s.value, op));
        if out2.evicted {
            pass.execute(&self.bpe_evictions, g as u32, ());
        }
        out2.spill
    }
}

impl Default for SwitchAgg {
    fn default() -> Self {
        Self::new()
    }
}

impl Program for SwitchAgg {
    fn decl(&self) -> &ProgramDecl {
        &self.decl
    }
    pisa::controls_by_trace_mode!(ingress, egress);
}

/// The control blocks, once, for both trace modes (see `Program::ingress_untraced`).
impl SwitchAgg {
    #[inline(always)]
    fn ingress_control<M: TraceMode>(&self, pass: &mut Pass<'_, M>) {
        if pass.recirculations() > 0 && pass.bridged()[0] == BRIDGED_FLUSH {
            flush::flush_pass(self, pass);
            return;
        }
        let Some((at, end)) = Self::locate(pass.hdr()) else {
            pass.drop(DropCode::MALFORMED);
            return;
        };
        let hdr = pass.hdr();
        if end - at < 2 || hdr[at] != sa::packet_type::AGGREGATION {
            // Launch, Configure and Ack go to their address by ordinary forwarding.
            return;
        }
        let fl = hdr[at + 1];
        if fl & flags::BYPASS != 0 {
            return;
        }
        if fl & flags::ACK != 0 {
            // An ACK from this switch's parent: the switch does not retransmit (see report).
            pass.drop(self.d_ack);
            return;
        }
        let Ok(p) = sa::AggPacket::new_checked(&hdr[at..end]) else {
            pass.drop(DropCode::MALFORMED);
            return;
        };
        let (tree_id, child, seq, n, op_code) = (p.tree_id(), p.child_id(), p.seq(), p.num_pairs(), p.op_code());
        let Some(tree) = self.tree(pass, tree_id) else {
            pass.drop(self.d_unknown_tree);
            return;
        };
        if tree.op.code() != op_code {
            pass.drop(self.d_op_mismatch);
            return;
        }
        if child as u32 >= self.cfg.max_children {
            pass.drop(self.d_bad_child);
            return;
        }
        let verdict = pass.execute(&self.expected_seq, tree.region * self.cfg.max_children + child as u32, seq);
        let in_port = pass.ingress_port();
        match verdict.get() {
            reliability::NEW => {}
            reliability::DUPLICATE => {
                // Aggregated already: only the ACK is owed.
                if reliability::make_ack(pass, at, child, seq) {
                    pass.forward(in_port);
                }
                return;
            }
            _ => {
                pass.drop(self.d_seq_gap);
                return;
            }
        }

        // The payload analyzer: pairs one after another through the engines, the ones that
        // move on rewritten in place (never longer than what came in).
        let mut rd = at + HEADER_LEN;
        let mut wr = rd;
        let mut out_n: u16 = 0;
        let mut key = [0u8; 256];
        for i in 0..n {
            if i > 0 && !pass.next_item() {
                return;
            }
            let h = pass.hdr();
            let klen = h[rd] as usize;
            key[..klen].copy_from_slice(&h[rd + 2..rd + 2 + klen]);
            let value = u32::from_be_bytes([h[rd + 2 + klen], h[rd + 3 + klen], h[rd + 4 + klen], h[rd + 5 + klen]]);
            rd += PAIR_OVERHEAD + klen;
            let spill = match group_of(klen) {
                Some(g) => self.engines(pass, &tree, g, &key[..klen], value),
                // Longer than any engine's slots: it travels on intact.
                None => {
                    let h = pass.hdr_mut();
                    h.copy_within(rd - PAIR_OVERHEAD - klen..rd, wr);
                    wr += PAIR_OVERHEAD + klen;
                    out_n += 1;
                    continue;
                }
            };
            if spill.is_some() {
                wr += sa::emit_pair(&mut pass.hdr_mut()[wr..], spill.key(), spill.value);
                out_n += 1;
            }
        }

        pass.execute(&self.pairs_in, tree.region, n as u32);
        let last = fl & flags::EOT != 0 && pass.execute(&self.eot_count, tree.region, tree.children).get();
        if last {
            // Every child is done: this packet carries what is left of it and then walks
            // the tree's memory (flush passes), ending at the parent with EoT.
            {
                let h = pass.hdr_mut();
                h[at + 1] = 0;
                h[at + 12..at + 14].copy_from_slice(&out_n.to_be_bytes());
            }
            if !reliability::set_agg_len(pass, at, wr - at) {
                return;
            }
            let br = pass.bridged_mut();
            br.fill(0);
            br[0] = BRIDGED_FLUSH;
            flush::stash_ack(br, child, seq);
            if in_port < MAX_ACK_PORT {
                pass.clone_ingress(ACK_SESSION_BASE + in_port);
            }
            pass.recirculate();
            return;
        }
        if out_n == 0 {
            // Everything was absorbed: the packet itself becomes the ACK.
            if reliability::make_ack(pass, at, child, seq) {
                pass.forward(in_port);
            }
            return;
        }
        let up = pass.execute(&self.up_seq, tree.region, ());
        pass.execute(&self.pairs_out, tree.region, out_n as u32);
        {
            let h = pass.hdr_mut();
            h[at + 1] = 0;
            h[at + 6..at + 8].copy_from_slice(&tree.up_child.to_be_bytes());
            h[at + 8..at + 12].copy_from_slice(&up.get().to_be_bytes());
            h[at + 12..at + 14].copy_from_slice(&out_n.to_be_bytes());
        }
        if !reliability::set_agg_len(pass, at, wr - at) {
            return;
        }
        let br = pass.bridged_mut();
        br.fill(0);
        br[0] = BRIDGED_ACK;
        flush::stash_ack(br, child, seq);
        if in_port < MAX_ACK_PORT {
            pass.clone_ingress(ACK_SESSION_BASE + in_port);
        }
        pass.forward(tree.parent_port);
    }

    #[inline(always)]
    fn egress_control<M: TraceMode>(&self, pass: &mut Pass<'_, M>) {
        // The ACK clone: back to the child with the sequence number it acknowledges.
        if pass.is_clone() && pass.replication_id() == ACK_RID {
            let Some((at, _)) = Self::locate(pass.hdr()) else {
                pass.drop(DropCode::MALFORMED);
                return;
            };
            let (child, seq) = flush::unstash_ack(pass.bridged());
            if !reliability::make_ack(pass, at, child, seq) {
                pass.drop(DropCode::MALFORMED);
            }
        }
    }
}
