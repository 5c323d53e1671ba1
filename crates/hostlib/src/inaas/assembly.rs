//! Packet assembly on the provider's side of a tenant (INaaS §V: the tenant never sees its
//! uid; the adapter fills it in). Requests name a segment, a register index and a
//! primitive per item; the assembler turns them into one INaaS frame, and the switch's or
//! the goalkeeper's answer back into per-item results.

use wire::ethernet::{EtherType, EthernetAddress, EthernetFrame, EthernetRepr};
use wire::inaas::{flags, Bitmap, InaasPacket, InaasRepr, Item, Operator, ETHERTYPE, HEADER_LEN, ITEMS, OP_BLOOM_INSERT, OP_BLOOM_QUERY};

/// Why a request cannot be one INaaS frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("Bloom items mix with nothing else, inserts not with queries")]
    MixedBloom,
    #[error("segment out of range")]
    Segment,
    #[error("two items for one segment")]
    TwoItems,
}

/// One primitive on one item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// The value under `key`, or a miss.
    Read { key: u32 },
    /// Store `(key, value)` (key 0 and value 0 free the cell).
    Write { key: u32, value: i32 },
    /// Store `(key, value)` if the cell is free or holds `key`; returns the old value.
    Swap { key: u32, value: i32 },
    /// Add `value` to aggregate `key16` as worker `worker` (< 16).
    Reduce { key16: u16, worker: u8, value: i32 },
    /// Read aggregate `key16` once `workers` workers have contributed.
    Collect { key16: u16, workers: u8 },
    /// `op(value, param)` on the packet, no memory.
    Compute { value: i32, param: u32 },
    /// Bloom filter insert: set `mask` in this segment's Bloom cell (segments 0..3, one per
    /// hash function). All items of a Bloom request are Bloom items of one kind.
    BloomInsert { mask: u32 },
    /// Bloom filter query of `mask`: the switch answers, for the whole request,
    /// [`wire::inaas::BLOOM_PRESENT`] or [`wire::inaas::BLOOM_ABSENT`] in each probe it read.
    BloomQuery { mask: u32 },
}

impl Op {
    fn encode(self) -> (bool, bool, bool, bool, u32, i32) {
        // (read, write, reduce, compute, key, value)
        match self {
            Op::Read { key } => (true, false, false, false, key, 0),
            Op::Write { key, value } => (false, true, false, false, key, value),
            Op::Swap { key, value } => (true, true, false, false, key, value),
            Op::Reduce { key16, worker, value } => (false, false, true, false, (key16 as u32) << 16 | 1 << (worker & 15), value),
            Op::Collect { key16, workers } => (true, false, false, false, reduce_key(key16, workers), 0),
            Op::Compute { value, param } => (false, false, false, true, param, value),
            Op::BloomInsert { mask } => (false, true, false, false, mask, 0),
            Op::BloomQuery { mask } => (true, false, false, false, mask, 0),
        }
    }
    /// Does this item use switch memory (and so a lease)?
    pub fn stateful(&self) -> bool {
        !matches!(self, Op::Compute { .. })
    }
}

/// The key of a finished aggregate: 16-bit key and a full bitmap of `workers` workers.
pub fn reduce_key(key16: u16, workers: u8) -> u32 {
    let full = if workers >= 16 { 0xFFFF } else { (1u32 << workers) - 1 };
    (key16 as u32) << 16 | full
}

/// One item of a request: segment `seg` (< 20), register `idx`, primitive `op`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ItemReq {
    pub seg: usize,
    pub idx: u16,
    pub op: Op,
}

/// What became of one item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ItemResult {
    /// Done; the value it returns (reads, swaps, collects, computes; 0 otherwise), exact.
    Done(i64),
    /// Not done: a read miss, or the register is not this tenant's.
    Miss,
}

/// A parsed answer (from the switch or the goalkeeper).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    pub uid: u32,
    pub seq: u32,
    pub flags: u8,
    pub results: [Option<ItemResult>; ITEMS],
}

/// Builds a tenant's frames.
#[derive(Clone, Debug)]
pub struct Assembler {
    pub uid: u32,
    pub mac: EthernetAddress,
    /// Where INaaS frames are addressed (the goalkeeper's MAC: the service's address).
    pub service_mac: EthernetAddress,
    /// The lease length T the tenant asks for (µs; the switch caps it per tenant).
    pub lease_us: u32,
    next_seq: u32,
}

impl Assembler {
    pub fn new(uid: u32, mac: EthernetAddress, service_mac: EthernetAddress, lease_us: u32) -> Self {
        Assembler { uid, mac, service_mac, lease_us, next_seq: 1 }
    }

    /// Build one frame. Items must name distinct segments (< 20). Returns (seq, frame).
    pub fn build(&mut self, items: &[ItemReq], operator: Operator, now_us: u32) -> Result<(u32, Vec<u8>), FrameError> {
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1).max(1);
        let f = build_frame(self.mac, self.service_mac, self.uid, seq, self.lease_us, items, operator, now_us, 0)?;
        Ok((seq, f))
    }
}

/// An INaaS frame from its parts.
#[allow(clippy::too_many_arguments)]
pub fn build_frame(
    src: EthernetAddress,
    dst: EthernetAddress,
    uid: u32,
    seq: u32,
    lease_us: u32,
    items: &[ItemReq],
    operator: Operator,
    now_us: u32,
    fl: u8,
) -> Result<Vec<u8>, FrameError> {
    // A Bloom request's operation byte says insert or query; `operator` is then unused.
    let bloom = match items.first().map(|i| i.op) {
        Some(Op::BloomInsert { .. }) => Some(OP_BLOOM_INSERT),
        Some(Op::BloomQuery { .. }) => Some(OP_BLOOM_QUERY),
        _ => None,
    };
    let same = |o: &Op| match bloom {
        Some(OP_BLOOM_INSERT) => matches!(o, Op::BloomInsert { .. }),
        Some(_) => matches!(o, Op::BloomQuery { .. }),
        None => !matches!(o, Op::BloomInsert { .. } | Op::BloomQuery { .. }),
    };
    if !items.iter().all(|i| same(&i.op)) {
        return Err(FrameError::MixedBloom);
    }
    let mut r = InaasRepr {
        op: bloom.unwrap_or(operator as u8),
        flags: fl,
        seq,
        timestamp: now_us,
        time_limit: lease_us,
        uid,
        ..Default::default()
    };
    let mut bits = [0u32; 5];
    for it in items {
        if it.seg >= ITEMS {
            return Err(FrameError::Segment);
        }
        let bit = 1 << it.seg;
        if bits[0] & bit != 0 {
            return Err(FrameError::TwoItems);
        }
        let (rd, wr, red, comp, key, value) = it.op.encode();
        bits[0] |= bit;
        for (k, on) in [rd, wr, red, comp].into_iter().enumerate() {
            if on {
                bits[k + 1] |= bit;
            }
        }
        r.items[it.seg] = Item { idx: it.idx, key, value };
    }
    for (k, which) in [Bitmap::Valid, Bitmap::Read, Bitmap::Write, Bitmap::Reduce, Bitmap::Compute].into_iter().enumerate() {
        r.set_bits(which, bits[k]);
    }
    let eth = EthernetRepr { src_addr: src, dst_addr: dst, ethertype: EtherType::Unknown(ETHERTYPE) };
    let mut buf = vec![0u8; 14 + HEADER_LEN];
    eth.emit(&mut EthernetFrame::new_unchecked(&mut buf[..]));
    r.emit(&mut InaasPacket::new_unchecked(&mut buf[14..]));
    Ok(buf)
}

/// Parse an answer addressed to a tenant: the switch's (`REPLY`) or the goalkeeper's
/// (`GK_REPLY`, exact values in a trailer when `EXACT`). `None` for anything else.
pub fn parse_reply(frame: &[u8]) -> Option<Reply> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if eth.ethertype() != EtherType::Unknown(ETHERTYPE) {
        return None;
    }
    let body = &frame[14..];
    let p = InaasPacket::new_checked(body).ok()?;
    let fl = p.flags();
    if fl & (flags::REPLY | flags::GK_REPLY) == 0 {
        return None;
    }
    let exact = fl & flags::EXACT != 0 && body.len() >= HEADER_LEN + 8 * ITEMS;
    let valid = p.bitmap(Bitmap::Valid);
    let failed = p.bitmap(Bitmap::Failed);
    let mut results = [None; ITEMS];
    for (j, r) in results.iter_mut().enumerate() {
        if valid & 1 << j == 0 {
            continue;
        }
        *r = Some(if failed & 1 << j != 0 {
            ItemResult::Miss
        } else if exact {
            let at = HEADER_LEN + 8 * j;
            let mut b = [0u8; 8];
            b.copy_from_slice(&body[at..at + 8]);
            ItemResult::Done(i64::from_be_bytes(b))
        } else {
            ItemResult::Done(p.value(j) as i64)
        });
    }
    Some(Reply { uid: p.uid(), seq: p.seq(), flags: fl, results })
}
