//! `daiet`: in-network key-value aggregation (DAIET, Sapio et al., HotNets 2017, §4
//! Algorithm 1), with exactly-once delivery and the two defects of the public code fixed.
//!
//! Per aggregation tree (one per reducer; configured by the controller in `daiet_trees`):
//! key and value register arrays used as a hash table with one-element buckets, an index
//! stack of used cells, a children counter, and the switch's own sequence numbers towards
//! the parent. Trees share the arrays in partitions the controller sets.
//!
//! Layout (tofino1), slice s = 0..3: stage 0 `daiet_trees`; 1 `seq_state`, `key_hash_s`;
//! 2–5 `key0_s`..`key3_s`; 6 `value_s`; 7 `stack_top_s`; 8 `index_stack_s`; 9 `out_seq`,
//! `ends_seen`, `spill_ring`; 10 `spill_key0`..`spill_key3`; 11 `spill_value`,
//! `spill_overflow`, `spill_busy`.
//!
//! A packet's passes, the flush and the bounded waits: docs/wordcount.md, "DAIET's
//! switch program: a packet's passes".

pub mod bucket;
pub mod cells;
pub mod exactly_once;
pub mod flush;
pub mod layout;
pub mod spillover;
pub mod tree;

use pisa::decl::TableSpec;
use pisa::{
    ClassifyRule, DropCode, DualCell, Gress, HashAlgo, HashLanes, HashUnit, LanesError, MatchKind, Pass, Program, ProgramBuilder,
    ProgramDecl, RegisterLanes, Table, TraceMode,
};
use wire::daiet::{flags, Op, MAX_PAIRS, PAIR_LEN, SLICES, UDP_PORT};

use bucket::*;
use cells::*;
use exactly_once::*;
use layout::*;
pub use tree::{Tree, TreeConfig, MAX_TREES, TREE_BAD, TREE_NONE, TREE_USABLE};

/// Cells of each slice's key/value arrays and index stack, shared by all trees (a tree's
/// partition is the same range in every slice).
pub const CELLS: u32 = 65536;
/// (tree, sender) slots of `seq_state`.
pub const SENDER_SLOTS: u32 = 65536;
/// Waiting passes after which a packet gives up (a counted `daiet_wait_exceeded` drop): an
/// END waiting in `seq_state` for its sender's packets in flight (`WAIT`), or the flush
/// walker waiting for the bucket's drains and stores (`S_WAIT`). The counts they wait on
/// come back within a few hundred passes in a correct job (each packet in flight, drain or
/// store ends within a few dozen of its own passes; see the tests' measurement); they can
/// only stay stuck if a packet they count was lost inside the switch (a full recirculation
/// queue, a tree removed meanwhile) or the controller rewrote the registers.
/// - The END gives up holding nothing (`WAIT` admits nothing): the sender's count stays as
///   it is, so a retransmitted END waits and gives up again, the mapper stalls and the
///   reducer falls back (a stuck count is never cleared in the data plane: clearing it
///   would acknowledge the lost packet's retransmission as a duplicate without its pairs).
/// - The walker gives up in a pass of its own (stage 1 comes before the bucket's stage 9):
///   it undoes its END's in-flight count (`complete`), resets `ends_seen`, `out_seq` and
///   the bucket's counter (its cells and index stacks are already empty), so the tree is
///   ready for the next job; its reducer never gets the switch's END and falls back.
pub const MAX_WAIT_PASSES: u32 = 4096;
/// Clone session of the ACK copy for a child on port `p`: `ACK_SESSION_BASE + p` (ports
/// below 511; the controller installs one session per port).
pub const ACK_SESSION_BASE: u16 = 512;
/// Clone session whose one replica goes to the recirculation port (the flush walk).
pub const WALK_SESSION: u16 = 1023;
/// The clone session acknowledging a child on `port`.
pub fn ack_session(port: u16) -> u16 {
    ACK_SESSION_BASE.saturating_add(port).min(WALK_SESSION - 1)
}

/// Bytes of an ACK frame: Ethernet, IPv4, UDP, DAIET header.
pub const ACK_FRAME_LEN: u32 = PAIRS as u32;

/// One register slice: the hash table and index stack that the pairs at positions
/// `p % SLICES == s` use; here the actions the flush runs on one slice at a time.
#[derive(Clone, Copy)]
struct Slice {
    key_take: [pisa::SaluAction<u32, (), u32, Take>; 4],
    v_take: pisa::SaluAction<u32, (), u32, Take>,
    pop: pisa::SaluAction<u32, (), u32, Pop>,
    stack_read: pisa::SaluAction<u32, (), u32, Read>,
}

/// The actions a pass runs on the four slices side by side, stage by stage: lane `s` is
/// slice `s` (see `pisa::lanes`: a cost of the model, the rules are those of four
/// separate accesses).
struct PairLanes {
    key_hash: HashLanes<SLICES>,
    key0: pisa::SaluLanes<u32, u32, u32, ClaimOrMatch, SLICES>,
    key_follow: [pisa::SaluLanes<u32, (u32, u32), u32, Follow, SLICES>; 3],
    v_sum: pisa::SaluLanes<u32, (u32, u32), (), Sum, SLICES>,
    v_min: pisa::SaluLanes<u32, (u32, u32), (), Min, SLICES>,
    v_max: pisa::SaluLanes<u32, (u32, u32), (), Max, SLICES>,
    push: pisa::SaluLanes<u32, (), u32, Push, SLICES>,
    stack_write: pisa::SaluLanes<u32, u32, (), Write, SLICES>,
}

pub struct Daiet {
    decl: ProgramDecl,
    trees: Table,
    admit: pisa::SaluAction<DualCell, (u32, u8), u32, Admit>,
    admit_end: pisa::SaluAction<DualCell, u32, u32, AdmitEnd>,
    check: pisa::SaluAction<DualCell, u32, u32, Check>,
    complete: pisa::SaluAction<DualCell, (), (), Complete>,
    /// One per slice (an array, not a Vec: indexing by slice needs no bounds check).
    slices: [Slice; SLICES],
    lanes: PairLanes,
    out_next: pisa::SaluAction<u32, (), u32, Push>,
    out_last: pisa::SaluAction<u32, (), u32, Take>,
    ends_arrive: pisa::SaluAction<u32, (), u32, Push>,
    ends_reset: pisa::SaluAction<u32, (), u32, Take>,
    /// The spillover bucket ([`bucket`]): its ring (stage 9) and busy counters (stage 11).
    spill_store: pisa::SaluAction<DualCell, u32, u32, RingStore>,
    spill_drained: pisa::SaluAction<DualCell, (u32, u32), u32, RingDrained>,
    spill_take: pisa::SaluAction<DualCell, (), u32, RingTake>,
    busy_store: pisa::SaluAction<DualCell, (u32, u32), u32, BusyStore>,
    busy_drained: pisa::SaluAction<DualCell, u32, (), BusyDrained>,
    busy_check: pisa::SaluAction<DualCell, (), u32, BusyCheck>,
    busy_reset: pisa::SaluAction<DualCell, (), (), BusyReset>,
    spill_key_write: [pisa::SaluAction<u32, u32, (), Write>; 4],
    spill_key_take: [pisa::SaluAction<u32, (), u32, Take>; 4],
    spill_value_write: pisa::SaluAction<u32, u32, (), Write>,
    spill_value_take: pisa::SaluAction<u32, (), u32, Take>,
    spill_overflow: pisa::SaluAction<u32, u32, (), AddN>,
    d_gap: DropCode,
    d_busy: DropCode,
    d_sender: DropCode,
    d_lost_tree: DropCode,
    d_bad_tree: DropCode,
    d_wait: DropCode,
}

impl Default for Daiet {
    fn default() -> Self {
        Self::new()
    }
}

impl Daiet {
    pub fn new() -> Daiet {
        let mut b = ProgramBuilder::new("daiet", "DAIET in-network key-value aggregation with exactly-once delivery");
        b.parser(
            PARSE_DEPTH as u32,
            &[("ethernet", 112), ("ipv4", 160), ("udp", 64), ("daiet", 112), ("pairs", (MAX_PAIRS * PAIR_LEN * 8) as u32)],
        )
        .metadata_bits(160)
        .bridged_bytes(16)
        .classify(ClassifyRule { udp_dst_port: Some((UDP_PORT, UDP_PORT)), ..Default::default() })
        // The flush walk makes one pass per used cell: bounded by the partition size,
        // not by a small constant, and a drain takes on the full buffers that the load
        // keeps filling, so no fixed limit is declared. Waiting (for counts that a lost
        // packet would never bring back) is bounded: `MAX_WAIT_PASSES`.
        .max_recirculations(None);
        b.note("four pairs per pass, one per register slice: a data packet of n pairs makes ceil(n/4) - 1 recirculations (2 for ten pairs), plus one per colliding pair beyond one per pass (each pass stores one in the spillover bucket); the packet that fills a bucket buffer makes one pass per slot draining it (ten); the END that completes a tree makes one per used cell, one per slice, one to take the bucket's head buffer, one per pair left in the bucket and one per flushed packet, and recirculates while a drain or a packet's bucket stores are under way (at most MAX_WAIT_PASSES passes, see below)");
        b.note("the spillover bucket is per tree in registers (stages 9-11): a ring of 16 buffers of ten pair slots (one takes colliding pairs while full ones are drained, each by the packet that filled it), one pair in or out per pass per packet; a colliding pair that finds the bucket busy (the head buffer's last slot waiting for the next buffer's drain) goes on to the parent in its own packet unaggregated (exact; counted in spill_overflow). The paper's bucket is one buffer flushed at once; a drain here takes ten passes, so under heavy collisions it saturates");
        b.note("the spillover bucket's counter is two declared arrays: spill_ring (stage 9) holds the next slot (16 x head moves + fill) and whether the buffer after the head is known free, spill_busy (stage 11) a bit per buffer being drained and the packets still storing. Whether the next buffer is being drained is a bit chosen by the head, which no ALU condition can test: a store that moves the head learns it in stage 11 and tells the ring in its next pass (a data pass gives up its store for it; a drain's first pass reads the ring anyway), or that buffer's drain does when it ends; until then the head's last slot is refused (the last slot is taken only by a store that drains the buffer, so no buffer waits full). The END's flush asks spill_busy in one pass and takes the ring's head buffer in the next");
        b.note(&format!("every waiting loop is bounded: an END waiting for its sender's packets in flight, or the flush walker waiting for the spillover bucket's drains and stores, gives up after MAX_WAIT_PASSES = {MAX_WAIT_PASSES} consecutive waiting passes (counted in its bridged metadata, in a field unused while it waits; no extra bridged byte): a counted drop daiet_wait_exceeded, the walker undoing its END's in-flight count and resetting the tree's ends_seen, out_seq and bucket counter; the hosts' retransmission and fallback finish the job"));
        b.note("seq_state: three comparisons and the END bit are more than a Tofino stateful ALU's two conditions, so a data packet runs admit (seq == expected, seq < expected), an END admit_end (seq == expected, nothing in flight), and a packet that was not the expected one recirculates once and runs check (seq < expected, something in flight): a duplicate, a gap found by an END, or a copy of a packet in flight costs one recirculation");
        b.note(
            "key words are 32-bit cells (the Tofino 1 stateful ALU returns 32 bits): a 16-byte key is four arrays compared in four stages",
        );
        b.note("every pair of a pass runs the four key stages and the value stage whatever the earlier words decided: the decision (claim, match, collide) travels with it as an operand, and a collision leaves the cells as they are (two comparisons per stateful ALU)");
        let a_set_tree = b.action(
            "set_tree",
            &TreeConfig::PARAMS,
            "the tree's parent port, register slot, memory partition, senders, op, children, switch id",
        );
        b.decode_action(a_set_tree, TreeConfig::decode);
        let a_untracked = b.action("untracked", &[], "not aggregated here: forward untouched");
        let trees = b.table(TableSpec {
            name: "daiet_trees",
            doc: "aggregation trees configured by the controller",
            gress: Gress::Ingress,
            stage: 0,
            size: MAX_TREES,
            keys: &[("hdr.daiet.tree_id", 16, MatchKind::Exact)],
            actions: &[a_set_tree, a_untracked],
            default_action: (a_untracked, &[]),
            const_default: true,
        });
        let seq = b.register::<DualCell>(
            "seq_state",
            Gress::Ingress,
            1,
            SENDER_SLOTS,
            "per (tree, sender): next expected seq (lo), packets in flight (hi)",
        );
        b.cell_fields(&seq, &[("next_seq", 32), ("in_flight", 32)]);
        let admit = b.register_action_salu(seq, "admit", Admit);
        let admit_end = b.register_action_salu(seq, "admit_end", AdmitEnd);
        let check = b.register_action_salu(seq, "check", Check);
        let complete = b.register_action_salu(seq, "complete", Complete);
        // Per slice, stage by stage: the hash unit (stage 1), four key words (2-5), the
        // value (6), the index stack's top (7) and slots (8).
        let mut per: Vec<SliceActions> = Vec::with_capacity(SLICES);
        for i in 0..SLICES {
            let key_hash = b.hash_unit(&format!("key_hash_{i}"), Gress::Ingress, 1, HashAlgo::Crc32c, 32);
            let k: Vec<_> =
                (0..4).map(|w| b.register::<u32>(&format!("key{w}_{i}"), Gress::Ingress, 2 + w as u8, CELLS, "key word")).collect();
            let key0 = b.register_action_salu(k[0], "claim_or_match", ClaimOrMatch);
            let key_follow = [1, 2, 3].map(|w| b.register_action_salu(k[w], "follow", Follow));
            let key_take = [0, 1, 2, 3].map(|w| b.register_action_salu(k[w], "take", Take));
            let val = b.register::<u32>(&format!("value_{i}"), Gress::Ingress, 6, CELLS, "aggregated value");
            let top =
                b.register::<u32>(&format!("stack_top_{i}"), Gress::Ingress, 7, MAX_TREES, "per tree: cells on the slice's index stack");
            let stack = b.register::<u32>(&format!("index_stack_{i}"), Gress::Ingress, 8, CELLS, "used cells of each tree's partition");
            per.push(SliceActions {
                key_hash,
                key0,
                key_follow,
                v_sum: b.register_action_salu(val, "sum", Sum),
                v_min: b.register_action_salu(val, "min", Min),
                v_max: b.register_action_salu(val, "max", Max),
                push: b.register_action_salu(top, "push", Push),
                stack_write: b.register_action_salu(stack, "write", Write),
                slice: Slice {
                    key_take,
                    v_take: b.register_action_salu(val, "take", Take),
                    pop: b.register_action_salu(top, "pop", Pop),
                    stack_read: b.register_action_salu(stack, "read", Read),
                },
            });
        }
        let lanes = PairLanes::new(&per).expect("each stage's slice arrays are lanes of one stage");
        let slices: [Slice; SLICES] = std::array::from_fn(|i| per[i].slice);
        let out =
            b.register::<u32>("out_seq", Gress::Ingress, 9, MAX_TREES, "per tree: the switch's next sequence number towards the parent");
        let out_next = b.register_action_salu(out, "next", Push);
        let out_last = b.register_action_salu(out, "last", Take);
        let ends = b.register::<u32>("ends_seen", Gress::Ingress, 9, MAX_TREES, "per tree: children that sent END");
        let ends_arrive = b.register_action_salu(ends, "arrive", Push);
        let ends_reset = b.register_action_salu(ends, "reset", Take);
        let ring = b.register::<DualCell>(
            "spill_ring",
            Gress::Ingress,
            9,
            MAX_TREES,
            "per tree: the spillover bucket's next slot, 16 x head moves + fill (lo); 4 x fill, + 2 while the buffer after the head is not known free (hi)",
        );
        b.cell_fields(&ring, &[("pos", 32), ("gate", 32)]);
        let spill_store = b.register_action_salu(ring, "store", RingStore);
        let spill_drained = b.register_action_salu(ring, "drained", RingDrained);
        let spill_take = b.register_action_salu(ring, "take", RingTake);
        let sk: Vec<_> = (0..4)
            .map(|w| b.register::<u32>(&format!("spill_key{w}"), Gress::Ingress, 10, BUCKET_CELLS, "spillover bucket slots: key word"))
            .collect();
        let spill_key_write = [0, 1, 2, 3].map(|w| b.register_action_salu(sk[w], "store", Write));
        let spill_key_take = [0, 1, 2, 3].map(|w| b.register_action_salu(sk[w], "take", Take));
        let sv = b.register::<u32>("spill_value", Gress::Ingress, 11, BUCKET_CELLS, "spillover bucket slots: value");
        let spill_value_write = b.register_action_salu(sv, "store", Write);
        let spill_value_take = b.register_action_salu(sv, "take", Take);
        let so = b.register::<u32>(
            "spill_overflow",
            Gress::Ingress,
            11,
            MAX_TREES,
            "per tree: colliding pairs that found the bucket busy and went on in their packet",
        );
        let spill_overflow = b.register_action_salu(so, "add", AddN);
        let busy = b.register::<DualCell>(
            "spill_busy",
            Gress::Ingress,
            11,
            MAX_TREES,
            "per tree: the spillover bucket's buffers being drained, a bit each (lo); packets still storing (hi)",
        );
        b.cell_fields(&busy, &[("draining", 16), ("unused", 16), ("storing", 32)]);
        let busy_store = b.register_action_salu(busy, "store", BusyStore);
        let busy_drained = b.register_action_salu(busy, "drained", BusyDrained);
        let busy_check = b.register_action_salu(busy, "check", BusyCheck);
        let busy_reset = b.register_action_salu(busy, "reset", BusyReset);
        let d_gap = b.drop_reason("daiet_seq_gap");
        let d_busy = b.drop_reason("daiet_in_flight_copy");
        let d_sender = b.drop_reason("daiet_sender_out_of_range");
        let d_lost_tree = b.drop_reason("daiet_tree_removed_in_flight");
        let d_bad_tree = b.drop_reason("daiet_bad_tree_config");
        let d_wait = b.drop_reason("daiet_wait_exceeded");
        // Every recirculated pass sets its own route (forward to the parent or the child,
        // recirculate, clone, drop; a tree removed in flight is a counted drop), so the base
        // program's L2 tables are not applied on those passes (see `Daiet::ingress`).
        b.owns_recirculated_passes();
        let decl = b.build().expect("daiet declaration is valid");
        Daiet {
            decl,
            trees,
            admit,
            admit_end,
            check,
            complete,
            slices,
            lanes,
            out_next,
            out_last,
            ends_arrive,
            ends_reset,
            spill_store,
            spill_drained,
            spill_take,
            busy_store,
            busy_drained,
            busy_check,
            busy_reset,
            spill_key_write,
            spill_key_take,
            spill_value_write,
            spill_value_take,
            spill_overflow,
            d_gap,
            d_busy,
            d_sender,
            d_lost_tree,
            d_bad_tree,
            d_wait,
        }
    }

    /// Process the pairs at positions `first..first + SLICES` (below `np`), one per slice,
    /// stage by stage, the four slices as lanes: hash, four key words, value, index
    /// stack. Returns the positions that collided (bit per position).
    fn pairs<M: TraceMode>(&self, pass: &mut Pass<'_, M>, t: &Tree<'_>, first: usize, np: usize) -> u16 {
        let l = &self.lanes;
        let h = pass.hdr();
        let mut keys = [[0u8; 16]; SLICES];
        let mut words = [[0u32; 4]; SLICES]; // a key's words as the registers compare them
        let mut vals = [0u32; SLICES];
        let mut present = 0u32; // lanes with a pair
                                // This pass's pairs as one slice (one bounds check), then 20-byte arrays (no check
                                // per byte read).
        let n = SLICES.min(np.saturating_sub(first));
        let group = h.get(pair_at(first)..pair_at(first + n)).unwrap_or_default();
        let (group, _) = group.as_chunks::<PAIR_LEN>();
        for s in 0..group.len().min(SLICES) {
            let pair = &group[s];
            if pair[0] == 0 {
                continue; // a hole
            }
            let u32_at = |i: usize| u32::from_be_bytes([pair[i], pair[i + 1], pair[i + 2], pair[i + 3]]);
            keys[s].copy_from_slice(&pair[..16]);
            words[s] = [u32_at(0), u32_at(4), u32_at(8), u32_at(12)];
            vals[s] = u32_at(16);
            present |= 1 << s;
        }
        if present == 0 {
            return 0;
        }
        let mask = t.part_size() - 1;
        // Stage 1: the hash units.
        let idx = pass.hash_lanes(&l.key_hash, present, keys.each_ref().map(|k| &k[..])).map(|h| t.part_base() + (h & mask));
        // Stages 2-5: the key words. Every pair runs every stage: the decision (claim,
        // match or collide) travels with it from word to word and into the value.
        // (Written out, not a loop: the decisions then stay in registers between stages.)
        let d = pass.execute_lanes(&l.key0, present, idx, |s| words[s][0]);
        let d = pass.execute_lanes(&l.key_follow[0], present, idx, |s| (words[s][1], d[s]));
        let d = pass.execute_lanes(&l.key_follow[1], present, idx, |s| (words[s][2], d[s]));
        let d = pass.execute_lanes(&l.key_follow[2], present, idx, |s| (words[s][3], d[s]));
        // Stage 6: the values.
        let x = |s: usize| (vals[s], d[s]);
        match t.op() {
            Op::Sum => pass.execute_lanes(&l.v_sum, present, idx, x),
            Op::Min => pass.execute_lanes(&l.v_min, present, idx, x),
            Op::Max => pass.execute_lanes(&l.v_max, present, idx, x),
        };
        let (claimed, collided) = decided(present, &d);
        // Stages 7-8: a newly used cell goes on its slice's index stack.
        if claimed != 0 {
            let slot = pass.execute_lanes(&l.push, claimed, [t.tree_idx() as u32; SLICES], |_| ());
            pass.execute_lanes(&l.stack_write, claimed, slot.map(|x| t.part_base() + (x % t.part_size())), |s| idx[s]);
        }
        (collided << first) as u16
    }

    /// Turn the packet into an ACK of `seq` for `sender`, sent back by `port`.
    fn ack_in_place<M: TraceMode>(&self, pass: &mut Pass<'_, M>, sender: u16, seq: u32, port: u16) {
        // The payload first (nothing to move), then the header region to the ACK's.
        pass.truncate_payload();
        if !pass.resize_hdr(PAIRS) {
            return;
        }
        let len = pass.packet_len();
        let h = pass.hdr_mut();
        rewrite_as_ack(h, sender, seq, len);
        pass.forward(port);
    }
}

/// The lanes of `present` that claimed a cell, and those that collided (bit `s`: lane
/// `s`).
#[inline(always)]
fn decided(present: u32, d: &[u32; SLICES]) -> (u32, u32) {
    // A decision is CLAIM, MATCH or COLLIDE (0 for a lane not run): two bits each, the
    // four lanes' in one byte, and both masks from one table load instead of eight
    // compares.
    let packed = (d[0] & 3) | (d[1] & 3) << 2 | (d[2] & 3) << 4 | (d[3] & 3) << 6;
    let x = DECIDED[packed as usize] as u32;
    (x & 0xF & present, x >> 4 & present)
}

/// [`decided`]'s table: for four lanes' decisions packed two bits each (lane `s` at bits
/// `2s..2s + 2`), the lanes that claimed (low nibble) and collided (high nibble).
const DECIDED: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        let mut s = 0;
        while s < SLICES {
            let d = (i >> (2 * s)) as u32 & 3;
            if d == CLAIM {
                t[i] |= 1 << s;
            }
            if d == COLLIDE {
                t[i] |= 0x10 << s;
            }
            s += 1;
        }
        i += 1;
    }
    t
};

/// One slice's actions as `Daiet::new` declares them, before the stages' lanes are made.
struct SliceActions {
    key_hash: HashUnit,
    key0: pisa::SaluAction<u32, u32, u32, ClaimOrMatch>,
    key_follow: [pisa::SaluAction<u32, (u32, u32), u32, Follow>; 3],
    v_sum: pisa::SaluAction<u32, (u32, u32), (), Sum>,
    v_min: pisa::SaluAction<u32, (u32, u32), (), Min>,
    v_max: pisa::SaluAction<u32, (u32, u32), (), Max>,
    push: pisa::SaluAction<u32, (), u32, Push>,
    stack_write: pisa::SaluAction<u32, u32, (), Write>,
    slice: Slice,
}

impl PairLanes {
    fn new(p: &[SliceActions]) -> Result<PairLanes, LanesError> {
        let at = |s: usize| &p[s];
        Ok(PairLanes {
            key_hash: HashLanes::new(std::array::from_fn(|s| at(s).key_hash))?,
            key0: RegisterLanes::new(std::array::from_fn(|s| at(s).key0))?,
            key_follow: [
                RegisterLanes::new(std::array::from_fn(|s| at(s).key_follow[0]))?,
                RegisterLanes::new(std::array::from_fn(|s| at(s).key_follow[1]))?,
                RegisterLanes::new(std::array::from_fn(|s| at(s).key_follow[2]))?,
            ],
            v_sum: RegisterLanes::new(std::array::from_fn(|s| at(s).v_sum))?,
            v_min: RegisterLanes::new(std::array::from_fn(|s| at(s).v_min))?,
            v_max: RegisterLanes::new(std::array::from_fn(|s| at(s).v_max))?,
            push: RegisterLanes::new(std::array::from_fn(|s| at(s).push))?,
            stack_write: RegisterLanes::new(std::array::from_fn(|s| at(s).stack_write))?,
        })
    }
}

/// Rewrite a frame's headers into an ACK (addresses swapped, no pairs). A header region
/// shorter than an ACK's is left alone (callers check the length).
pub fn rewrite_as_ack(h: &mut [u8], sender: u16, seq: u32, frame_len: usize) {
    // The ACK's fixed bytes as one array: the writes below need no bounds checks.
    let Some(h) = h.first_chunk_mut::<PAIRS>() else { return };
    swap_addresses(h);
    h[FLAGS] = flags::ACK;
    h[SENDER..SENDER + 2].copy_from_slice(&sender.to_be_bytes());
    h[SEQ..SEQ + 4].copy_from_slice(&seq.to_be_bytes());
    h[NUM_PAIRS] = 0;
    h[NUM_PAIRS + 1] = 0;
    fix_lengths(h, frame_len);
}

impl Program for Daiet {
    fn decl(&self) -> &ProgramDecl {
        &self.decl
    }
    // Inlined into the pipe's batch loop (`Program::run_batch`).
    pisa::controls_by_trace_mode!(ingress, egress);
}

/// The control blocks, once, for both trace modes (see `Program::ingress_untraced`).
impl Daiet {
    #[inline(always)]
    fn ingress_control<M: TraceMode>(&self, pass: &mut Pass<'_, M>) {
        let hdr = pass.hdr();
        // Ethernet, IPv4 without options, UDP, the DAIET header: anything shorter or
        // different is malformed.
        if hdr.len() < PAIRS || !wire::is_ipv4_udp(hdr) {
            pass.drop(DropCode::MALFORMED);
            return;
        }
        let fl = hdr[FLAGS];
        if fl & (flags::ACK | flags::BYPASS | flags::RESEND | flags::QUERY | flags::DONE) != 0 {
            return; // forwarded as ordinary traffic
        }
        let tree_id = u16::from_be_bytes([hdr[TREE], hdr[TREE + 1]]);
        let mut br = Bridged::load(pass.bridged());
        // The table is applied on every pass (a tree removed or rewritten in flight is seen
        // by the next pass); its entry's parameters were decoded and checked when the
        // controller wrote it (`TreeConfig::decode`).
        let r = pass.apply_u64(&self.trees, tree_id as u64);
        let Some(t) = Tree::usable(r.params, r.decoded) else {
            if r.decoded == TREE_BAD {
                pass.drop(self.d_bad_tree);
                return;
            }
            // A packet already in its passes (admitted, or an END waiting for its sender's
            // packets in flight) whose tree was removed: dropped and counted (the sender
            // resends; the reducer's gap detection covers the rest). The program owns its
            // recirculated passes, so it decides their route: no L2 lookup to fall back on.
            if br.phase() != PH_FRESH || pass.recirculations() > 0 {
                pass.drop(self.d_lost_tree);
            }
            // Not a tree of this switch: forwarded untouched.
            return;
        };
        match br.phase() {
            PH_FRESH => self.first_pass(pass, &t, &mut br),
            PH_DATA => self.data_pass(pass, &t, &mut br),
            PH_WALK => self.walk_pass(pass, &t, &mut br),
            PH_DRAIN => self.drain_pass(pass, &t, &mut br),
            _ => pass.drop(DropCode::MALFORMED),
        }
        br.store(pass.bridged_mut());
    }

    #[inline(always)]
    fn egress_control<M: TraceMode>(&self, pass: &mut Pass<'_, M>) {
        // The only clones reaching egress are ACK copies (the walk's clone recirculates).
        if pass.is_clone() {
            let br = Bridged::load(pass.bridged());
            let len = pass.packet_len();
            if len < PAIRS || pass.hdr().len() < PAIRS {
                pass.drop(DropCode::MALFORMED);
                return;
            }
            rewrite_as_ack(pass.hdr_mut(), br.child(), br.child_seq(), len);
        }
    }
}

impl Daiet {
    fn first_pass<M: TraceMode>(&self, pass: &mut Pass<'_, M>, t: &Tree<'_>, br: &mut Bridged) {
        // The fixed headers as one array (`ingress` checked the length): one bounds check,
        // not one per field.
        let Some(h) = pass.hdr().first_chunk::<PAIRS>() else {
            pass.drop(DropCode::MALFORMED);
            return;
        };
        let fl = h[FLAGS];
        let sender = u16::from_be_bytes([h[SENDER], h[SENDER + 1]]);
        let seq = u32::from_be_bytes([h[SEQ], h[SEQ + 1], h[SEQ + 2], h[SEQ + 3]]);
        let np = h[NUM_PAIRS] as usize;
        let varlen = fl & flags::VARLEN != 0;
        let end = fl & flags::END != 0;
        if !varlen && (np > MAX_PAIRS || pass.packet_len() < pair_at(np)) {
            pass.drop(DropCode::MALFORMED);
            return;
        }
        if end && np != 0 {
            pass.drop(DropCode::MALFORMED);
            return;
        }
        if sender >= t.max_senders() {
            pass.drop(self.d_sender);
            return;
        }
        // An END waiting for the sender's packets in flight keeps the port it came by.
        let port = if pass.recirculations() > 0 { br.port() } else { pass.ingress_port() };
        // Done in this pass: every pair fits (or none is aggregated here). A final END is
        // not: it walks the tables, so it stays in flight; whether it is final is known
        // only after `ends_seen` (a later stage), so every END is admitted as in flight
        // and a non-final one completes in its next pass.
        let one_pass = !end && (varlen || np <= SLICES);
        // Stage 1: a packet not the expected one asks again in a pass of its own (`check`);
        // its later passes are told apart by `cursor` (unused before admission).
        let slot = t.sender_base() + sender as u32;
        let code = if br.cursor() == CHECK_PASS {
            check_code(pass.execute(&self.check, slot, seq).get())
        } else if end {
            admit_end_code(pass.execute(&self.admit_end, slot, seq).get())
        } else {
            admit_code(pass.execute(&self.admit, slot, (seq, u8::from(!one_pass))).get())
        };
        match code {
            ADMIT => {}
            ASK_AGAIN => {
                br.set_port(port);
                br.set_cursor(CHECK_PASS);
                pass.recirculate();
                return;
            }
            DUPLICATE => {
                self.ack_in_place(pass, sender, seq, port);
                return;
            }
            GAP => {
                pass.drop(self.d_gap);
                return;
            }
            WAIT => {
                // Counted in `pending` (unused before admission; zero on arrival). Past the
                // bound the END gives up: it holds nothing to undo (`WAIT` admits nothing).
                br.set_port(port);
                br.set_pending(br.pending() + 1);
                if br.pending() >= MAX_WAIT_PASSES {
                    pass.drop(self.d_wait);
                } else {
                    pass.recirculate();
                }
                return;
            }
            _ => {
                pass.drop(self.d_busy);
                return;
            }
        }
        *br = Bridged::admitted(port, sender, seq);
        if end {
            let ends = pass.execute(&self.ends_arrive, t.tree_idx() as u32, ());
            if ends + 1 >= t.children() as u32 {
                br.set_phase(PH_WALK);
            }
            pass.recirculate();
            return;
        }
        if varlen {
            // Not aggregated here: every pair goes on, whole.
            br.set_pending(KEPT_PAIRS);
            self.data_tail(pass, t, br, 0);
        } else {
            br.set_spill(self.pairs(pass, t, 0, np));
            br.set_cursor(SLICES as u8);
            self.data_tail(pass, t, br, np);
        }
    }

    fn data_pass<M: TraceMode>(&self, pass: &mut Pass<'_, M>, t: &Tree<'_>, br: &mut Bridged) {
        let h = pass.hdr();
        let np = h[NUM_PAIRS] as usize;
        let first = br.cursor() as usize;
        // The pass that takes the last group of pairs (or a non-final END) completes the
        // packet in `seq_state`; passes after it only store colliding pairs in the bucket
        // (covered by the bucket's `storers`, see [`bucket`]).
        let group = first < np;
        if (group || np == 0 && first == 0) && first + SLICES >= np {
            pass.execute(&self.complete, t.sender_base() + br.child() as u32, ());
        }
        if group {
            br.set_spill(br.spill() | self.pairs(pass, t, first, np));
            br.set_cursor(br.cursor() + SLICES as u8);
        }
        self.data_tail(pass, t, br, np);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `decided` against its definition lane by lane, for every combination of the four
    /// lanes' decisions (or none) and every set of lanes with a pair.
    #[test]
    fn decided_equals_lane_by_lane() {
        let vals = [0, CLAIM, MATCH, COLLIDE];
        for i in 0..256usize {
            let d: [u32; SLICES] = std::array::from_fn(|s| vals[i >> (2 * s) & 3]);
            for present in 0..16u32 {
                let lanes = |v: u32| (0..SLICES).filter(|&s| present >> s & 1 != 0 && d[s] == v).fold(0, |m, s| m | 1 << s);
                assert_eq!(decided(present, &d), (lanes(CLAIM), lanes(COLLIDE)), "{d:?} {present:#b}");
            }
        }
    }
}
