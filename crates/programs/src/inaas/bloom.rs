//! The `bloom` tenant's Bloom filter, answered by the switch (INaaS §IV-E, §VI: "a variant
//! of bloom filter", 2.4 % false positives).
//!
//! A partitioned Bloom filter with [`HASHES`] hash functions: hash function `j` owns array
//! `bloom_j`, beside memory segment `j`, and a probe of it is item `j` of the packet. For a
//! register index the tenant holds a lease on in segment `j`, cell `idx` of `bloom_j` holds
//! 32 of the tenant's bits (low half) and the uid they belong to (high half). The adapter
//! computes each probe's (index, bit) inside the tenant's region, as every INaaS item
//! names its register (Algorithm 1 reads `hdr.idx_j`); the switch checks the lease and
//! does the bit work:
//!
//! - ingress stage 2: segment `j`'s lease is *probed* (never taken, as Paxos does): a probe
//!   of a register the tenant does not hold is a failed item and touches nothing;
//! - egress stages 0 (`bloom_0`, `bloom_1`) and 1 (`bloom_2`): one register action per
//!   array ([`BloomInsert`] ORs the mask in, [`BloomQuery`] only reads), each returning the
//!   cell's bits if they are this uid's, else 0;
//! - the stage after (metadata): `mask & !bits` per probe, ORed over the probes; zero is
//!   "present". The switch rewrites the packet into the answer (the value of each probed
//!   item: [`BLOOM_PRESENT`] or [`BLOOM_ABSENT`]) and sends it back to the tenant.
//!
//! Why three arrays, and why the uid in the cell: docs/inaas.md, "Bloom in the switch".

use pisa::TraceMode;
use pisa::{
    Cmp, Cond, DualCell, Gress, OutputSource, Pass, Pred, ProgramBuilder, Salu, SaluAction, SaluOutput, SaluProgram, Src, Staged, Update,
};
use wire::inaas::{Bitmap, InaasPacket, BLOOM_ABSENT, BLOOM_PRESENT, ITEMS, OP_BLOOM_INSERT};

use super::failure::bridged;
use super::lease::SEGMENT_SIZE;
use super::{Inaas, Prim};

/// Hash functions (and arrays): segments 0..HASHES.
pub const HASHES: usize = 3;
/// Egress stage of each hash function's array: the free stateful ALUs of tofino1.
pub const BLOOM_STAGES: [u8; HASHES] = [0, 0, 1];
/// Bits per cell (the low half).
pub const BITS_PER_CELL: u32 = 32;

/// In bridged metadata ([`bridged::BLOOM`]): what the egress arrays do.
pub mod kind {
    pub const NONE: u8 = 0;
    pub const INSERT: u8 = 1;
    pub const QUERY: u8 = 2;
}

/// c0: the cell's bits are this uid's (high half == the uid operand).
const OWNED: &[Cond] = &[Cond::new(Src::Hi, Cmp::Eq, Src::PhvHi)];
/// The old bits if they are this uid's, else 0.
const OLD_IF_OWNED: &[SaluOutput] = &[SaluOutput::new(Pred::C0, OutputSource::OldLo)];

/// Insert: operands (mask, uid). Owned cell: bits |= mask; another uid's (or an empty)
/// cell: bits = mask, claimed for this uid. Returns the bits before, if they were this
/// uid's (else 0).
#[derive(Clone, Copy, Debug)]
pub struct BloomInsert;
impl SaluProgram<DualCell, (u32, u32), u32> for BloomInsert {
    const SALU: Salu = Salu {
        conds: OWNED,
        lo: &[Update::new(Pred::C0, Src::Lo, pisa::Op::Or, Src::PhvLo), Update::set(Pred::C0.not(), Src::PhvLo)],
        hi: &[Update::set(Pred::ALWAYS, Src::PhvHi)],
        out: OLD_IF_OWNED,
    };
}

/// Query: operands (mask, uid); the cell unchanged. Returns its bits if they are this
/// uid's, else 0.
#[derive(Clone, Copy, Debug)]
pub struct BloomQuery;
impl SaluProgram<DualCell, (u32, u32), u32> for BloomQuery {
    const SALU: Salu = Salu { conds: OWNED, lo: &[], hi: &[], out: OLD_IF_OWNED };
}

type Action<P> = SaluAction<DualCell, (u32, u32), u32, P>;

/// One hash function's array and its two register actions.
pub(super) struct BloomArray {
    insert: Action<BloomInsert>,
    query: Action<BloomQuery>,
}

/// Declare `bloom_0 .. bloom_{HASHES-1}`.
pub(super) fn declare(b: &mut ProgramBuilder) -> Vec<BloomArray> {
    (0..HASHES)
        .map(|j| {
            let r = b.register::<DualCell>(
                &format!("bloom_{j}"),
                Gress::Egress,
                BLOOM_STAGES[j],
                SEGMENT_SIZE,
                "Bloom hash function j under segment j's lease: 32 bits (lo) of the uid in hi",
            );
            b.cell_fields(&r, &[("bits", 32), ("owner_uid", 32)]);
            BloomArray { insert: b.register_action_salu(r, "insert", BloomInsert), query: b.register_action_salu(r, "query", BloomQuery) }
        })
        .collect()
}

/// A Bloom packet: only probes in segments 0..HASHES, at least one; an insert's are write
/// items, a query's read items; each names an index and a non-zero mask (the key).
pub(super) fn check(v: &InaasPacket<&[u8]>) -> Option<[Prim; ITEMS]> {
    let valid = v.bitmap(Bitmap::Valid);
    let insert = v.op() == OP_BLOOM_INSERT;
    let (want, other) = if insert { (Bitmap::Write, Bitmap::Read) } else { (Bitmap::Read, Bitmap::Write) };
    let others = v.bitmap(other) | v.bitmap(Bitmap::Reduce) | v.bitmap(Bitmap::Compute);
    if valid == 0 || valid & !((1 << HASHES) - 1) != 0 || v.bitmap(want) != valid || others != 0 {
        return None;
    }
    let mut prims = [Prim::None; ITEMS];
    for (j, slot) in prims.iter_mut().enumerate().take(HASHES) {
        if valid & 1 << j != 0 {
            if v.key(j) == 0 || v.idx(j) as u32 >= SEGMENT_SIZE {
                return None;
            }
            *slot = if insert { Prim::Write } else { Prim::Read };
        }
    }
    Some(prims)
}

impl Inaas {
    /// Bloom in ingress: probe the leases (stage 2); the arrays run in egress. Always
    /// answered to the sender (a retransmission too: both operations are idempotent).
    #[allow(clippy::too_many_arguments)] // as `paxos_ingress`: the packet's parsed fields
    pub(super) fn bloom_ingress<M: TraceMode>(
        &self,
        pass: &mut Pass<'_, M>,
        prims: &[Prim; ITEMS],
        uid: u32,
        port: u16,
        gk: u16,
        slot: u16,
        fl: u8,
    ) {
        let out = self.probe_leases(pass, prims, uid, HASHES, 1);
        let op = pass.hdr()[14];
        InaasPacket::new_unchecked(&mut pass.hdr_mut()[14..]).set_bitmap(Bitmap::Failed, out.failed);
        self.bridge(pass, slot, port, gk, &out);
        pass.bridged_mut()[bridged::BLOOM] = if op == OP_BLOOM_INSERT { kind::INSERT } else { kind::QUERY };
        let h = pass.hdr_mut();
        crate::reply::swap_macs(h);
        h[15] = fl & !wire::inaas::flags::RETRANS | wire::inaas::flags::REPLY;
        pass.forward(port);
    }

    /// Bloom in egress (stages 0-1, before the usage counters of stage 1): each leased
    /// probe's array, then the answer in the packet.
    pub(super) fn bloom_egress<M: TraceMode>(&self, pass: &mut Pass<'_, M>, what: u8) {
        let v = InaasPacket::new_unchecked(&pass.hdr()[14..]);
        let live = v.bitmap(Bitmap::Valid) & !v.bitmap(Bitmap::Failed) & ((1 << HASHES) - 1);
        let uid = v.uid();
        let probes: [(u32, u32); HASHES] = std::array::from_fn(|j| (v.idx(j) as u32, v.key(j)));
        // Missing bits of every probe read: mask & !bits, ORed (usable from stage 2).
        let mut missing: Staged<u32> = Staged::now(0);
        for (j, a) in self.bloom.iter().enumerate() {
            if live & 1 << j == 0 {
                continue;
            }
            let (idx, mask) = probes[j];
            let bits =
                if what == kind::INSERT { pass.execute(&a.insert, idx, (mask, uid)) } else { pass.execute(&a.query, idx, (mask, uid)) };
            missing = missing | bits.map(|b| mask & !b);
        }
        let answer = if missing.get() == 0 { BLOOM_PRESENT } else { BLOOM_ABSENT };
        let mut p = InaasPacket::new_unchecked(&mut pass.hdr_mut()[14..]);
        for j in 0..HASHES {
            if live & 1 << j != 0 {
                p.set_value(j, answer);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_and_query_are_per_uid() {
        let c = DualCell::default();
        let (c, o) = BloomInsert.run(c, (0b0100, 7));
        assert_eq!((c, o), (DualCell::new(0b0100, 7), 0), "an empty cell is claimed");
        let (c, o) = BloomInsert.run(c, (0b0001, 7));
        assert_eq!((c, o), (DualCell::new(0b0101, 7), 0b0100), "OR, and the bits before");
        assert_eq!(BloomQuery.run(c, (0b1, 7)), (c, 0b0101));
        assert_eq!(BloomQuery.run(c, (0b1, 9)), (c, 0), "another uid reads nothing");
        let (c2, o) = BloomInsert.run(c, (0b1000, 9));
        assert_eq!((c2, o), (DualCell::new(0b1000, 9), 0), "a new holder starts from its own bits only");
        assert_eq!(BloomQuery.run(c2, (0b0101, 7)).1, 0);
    }
}
