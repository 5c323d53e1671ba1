//! One pass of a packet through a program's ingress or egress control.
//!
//! [`Pass`] is the only way a program touches the switch: header bytes (as far as its
//! parser reaches), its tables, registers, hash units and digests, and the intrinsic
//! metadata that tells the traffic manager what to do. Every stateful or table access goes
//! through the pass's guard, which enforces the hardware's rules:
//! - stages in order: an object in an earlier stage than one already used cannot be
//!   reached again in this pass (that would need a recirculation);
//! - each table applied, each register array's action executed, each hash unit and digest
//!   used at most once per pass;
//! - objects belong to one gress.
//!
//! A violation does not panic: the access has no effect, returns a default value, and the
//! packet is dropped at the end of the pass and counted by kind.

use serde::Serialize;

use crate::decl::{Digest, DropCode, Gress, HashUnit, ObjRef, Table};
pub use crate::packet::{PacketMeta, BRIDGED_BYTES};
use crate::packet::{PacketBuf, PortId, PORT_CPU, PORT_NONE, PORT_RECIRC};
use crate::register::{Cell, RegisterAction};
use crate::table::{TableResult, TableState};

/// Kinds of hardware-rule violations a program can commit at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Violation {
    /// The same register array, table, hash unit or digest a second time in one pass.
    DoubleAccess,
    /// An object in an earlier stage than one already used.
    StageOrder,
    /// An object of the other gress.
    WrongGress,
    /// A register index outside the array.
    IndexOutOfRange,
    /// A header region beyond the parse depth or the buffer.
    HeaderTooLarge,
}

impl Violation {
    pub const ALL: [Violation; 5] = [Violation::DoubleAccess, Violation::StageOrder, Violation::WrongGress, Violation::IndexOutOfRange, Violation::HeaderTooLarge];
    pub fn name(self) -> &'static str {
        match self {
            Violation::DoubleAccess => "double_access",
            Violation::StageOrder => "stage_order",
            Violation::WrongGress => "wrong_gress",
            Violation::IndexOutOfRange => "index_out_of_range",
            Violation::HeaderTooLarge => "header_too_large",
        }
    }
    pub fn index(self) -> usize {
        self as usize
    }
}

/// A digest produced by a pass, on its way to the control plane.
#[derive(Clone, Debug)]
pub struct DigestMsg {
    pub program: u8,
    pub digest: u16,
    pub data: Box<[u8]>,
}

/// A program's state in one pipe: its register arrays and tables.
pub struct ProgramState {
    pub(crate) regs: Vec<Box<[u64]>>,
    pub(crate) tables: Vec<TableState>,
    pub(crate) digest_enabled: Vec<bool>,
}

impl ProgramState {
    pub(crate) fn new(decl: &crate::decl::ProgramDecl) -> Self {
        ProgramState {
            regs: decl.registers.iter().map(|r| vec![0u64; r.size as usize].into_boxed_slice()).collect(),
            tables: decl.tables.iter().map(TableState::new).collect(),
            digest_enabled: vec![false; decl.digests.len()],
        }
    }
    pub fn register(&self, idx: usize) -> &[u64] {
        &self.regs[idx]
    }
    pub fn register_mut(&mut self, idx: usize) -> &mut [u64] {
        &mut self.regs[idx]
    }
    pub fn table(&self, idx: usize) -> &TableState {
        &self.tables[idx]
    }
    pub fn table_mut(&mut self, idx: usize) -> &mut TableState {
        &mut self.tables[idx]
    }
}

/// The per-pass access set and stage cursor.
#[derive(Clone, Copy)]
struct Guard {
    gress: Gress,
    stage: u8,
    touched: [u64; 4],
    violation: Option<Violation>,
}

impl Guard {
    #[inline(always)]
    fn enter(&mut self, o: ObjRef) -> bool {
        if self.violation.is_some() {
            return false;
        }
        let (w, b) = ((o.id >> 6) as usize & 3, o.id & 63);
        let v = if o.gress != self.gress {
            Violation::WrongGress
        } else if o.stage < self.stage {
            Violation::StageOrder
        } else if self.touched[w] & (1u64 << b) != 0 {
            Violation::DoubleAccess
        } else {
            self.touched[w] |= 1u64 << b;
            self.stage = o.stage;
            return true;
        };
        self.violation = Some(v);
        false
    }
}

/// One packet's pass through one program's control block.
pub struct Pass<'a> {
    pkt: &'a mut PacketBuf,
    hdr_len: usize,
    depth: usize,
    state: &'a mut ProgramState,
    guard: Guard,
    now_ns: u64,
    program: u8,
    digests: &'a mut Vec<DigestMsg>,
    digest_cap: usize,
}

impl<'a> Pass<'a> {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        pkt: &'a mut PacketBuf,
        depth: usize,
        state: &'a mut ProgramState,
        gress: Gress,
        now_ns: u64,
        program: u8,
        digests: &'a mut Vec<DigestMsg>,
        digest_cap: usize,
    ) -> Self {
        let hdr_len = depth.min(pkt.len());
        Pass { pkt, hdr_len, depth, state, guard: Guard { gress, stage: 0, touched: [0; 4], violation: None }, now_ns, program, digests, digest_cap }
    }

    /// The violation committed in this pass, if any.
    pub(crate) fn violation(&self) -> Option<Violation> {
        self.guard.violation
    }

    // ---- packet bytes -------------------------------------------------------------

    /// The header bytes the parser reaches (at most the declared parse depth).
    #[inline]
    pub fn hdr(&self) -> &[u8] {
        &self.pkt.data()[..self.hdr_len]
    }
    /// The header bytes, writable: what the deparser emits.
    #[inline]
    pub fn hdr_mut(&mut self) -> &mut [u8] {
        let n = self.hdr_len;
        &mut self.pkt.data_mut()[..n]
    }
    /// Whole packet length in bytes (headers and payload).
    #[inline]
    pub fn packet_len(&self) -> usize {
        self.pkt.len()
    }
    /// Bytes after the header region, which the program cannot see.
    #[inline]
    pub fn payload_len(&self) -> usize {
        self.pkt.len() - self.hdr_len
    }
    /// Change the header region's length to `n` (the deparser emitting more or fewer
    /// header bytes: headers made valid or invalid). The payload moves with it; new bytes
    /// are zero. Fails, as a violation, beyond the parse depth or the buffer.
    pub fn resize_hdr(&mut self, n: usize) -> bool {
        let payload = self.pkt.len() - self.hdr_len;
        if n > self.depth || n + payload > self.pkt.capacity() {
            self.guard.violation.get_or_insert(Violation::HeaderTooLarge);
            return false;
        }
        let old = self.hdr_len;
        let total = n + payload;
        if n != old {
            let raw = self.pkt.raw_mut();
            raw.copy_within(old..old + payload, n);
            if n > old {
                raw[old..n].fill(0);
            }
            self.pkt.set_len(total);
        }
        self.hdr_len = n;
        true
    }
    /// Cut the packet to its header region (drop the payload), e.g. to turn a packet into
    /// a short notification.
    pub fn truncate_payload(&mut self) {
        let n = self.hdr_len;
        self.pkt.set_len(n);
    }

    // ---- intrinsic metadata ---------------------------------------------------------

    #[inline]
    pub fn ingress_port(&self) -> PortId {
        self.pkt.meta.ingress_port
    }
    #[inline]
    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }
    /// Recirculations this packet has made.
    #[inline]
    pub fn recirculations(&self) -> u8 {
        self.pkt.meta.recirculations
    }
    /// Egress: the port this copy leaves by.
    #[inline]
    pub fn egress_port(&self) -> PortId {
        self.pkt.meta.egress_port
    }
    /// Egress: replication id of this copy (multicast instance / clone replica).
    #[inline]
    pub fn replication_id(&self) -> u16 {
        self.pkt.meta.rid
    }
    #[inline]
    pub fn is_clone(&self) -> bool {
        self.pkt.meta.is_clone
    }
    #[inline]
    pub fn bridged(&self) -> &[u8; BRIDGED_BYTES] {
        &self.pkt.meta.bridged
    }
    #[inline]
    pub fn bridged_mut(&mut self) -> &mut [u8; BRIDGED_BYTES] {
        &mut self.pkt.meta.bridged
    }
    /// The forwarding decision so far (set by the base program or this one).
    #[inline]
    pub fn decision(&self) -> (PortId, u16) {
        (self.pkt.meta.egress_port, self.pkt.meta.mcast_grp)
    }

    /// Send to one port (clears any multicast choice).
    #[inline]
    pub fn forward(&mut self, port: PortId) {
        self.pkt.meta.egress_port = port;
        self.pkt.meta.mcast_grp = 0;
        self.pkt.meta.drop = None;
    }
    /// Replicate to a multicast group, optionally pruning one port (usually the source).
    #[inline]
    pub fn multicast(&mut self, group: u16, prune: Option<PortId>) {
        self.pkt.meta.mcast_grp = group;
        self.pkt.meta.egress_port = PORT_NONE;
        self.pkt.meta.mcast_prune_port = prune.unwrap_or(PORT_NONE);
        self.pkt.meta.drop = None;
    }
    #[inline]
    pub fn drop(&mut self, code: DropCode) {
        self.pkt.meta.drop = Some(code);
    }
    /// Undo a drop decision (e.g. a later program takes the packet over).
    #[inline]
    pub fn undrop(&mut self) {
        self.pkt.meta.drop = None;
    }
    #[inline]
    pub fn is_dropped(&self) -> bool {
        self.pkt.meta.drop.is_some()
    }
    /// Send the packet around again: a new, counted pass through this pipe.
    #[inline]
    pub fn recirculate(&mut self) {
        self.forward(PORT_RECIRC);
    }
    /// Send the packet to the controller (a P4Runtime PacketIn).
    #[inline]
    pub fn to_cpu(&mut self) {
        self.forward(PORT_CPU);
    }
    /// Ingress: also send a copy through clone session `session` (ingress-to-egress mirror).
    #[inline]
    pub fn clone_ingress(&mut self, session: u16) {
        self.pkt.meta.clone_session = session;
    }
    /// Egress: also send a copy of the packet as it leaves egress through `session`.
    #[inline]
    pub fn clone_egress(&mut self, session: u16) {
        self.pkt.meta.e2e_clone_session = session;
    }

    // ---- tables, registers, hashes, digests ---------------------------------------------

    /// Apply a table to a key in its layout. On a rule violation returns a miss with no action.
    #[inline]
    pub fn apply(&mut self, t: &Table, key: &[u8]) -> TableResult {
        if !self.guard.enter(t.obj) {
            return TableResult::NONE;
        }
        self.state.tables[t.idx as usize].lookup(key)
    }

    /// Apply a table whose key fits in 8 bytes, given as a big-endian number.
    #[inline]
    pub fn apply_u64(&mut self, t: &Table, key: u64) -> TableResult {
        if !self.guard.enter(t.obj) {
            return TableResult::NONE;
        }
        self.state.tables[t.idx as usize].lookup_u64(key)
    }

    /// Run a register action on cell `index` with operand `input`; returns its output.
    #[inline]
    pub fn execute<T: Cell, I, O: Default>(&mut self, a: &RegisterAction<T, I, O>, index: u32, input: I) -> O {
        if !self.guard.enter(a.reg.obj) {
            return O::default();
        }
        match self.state.regs[a.reg.idx as usize].get_mut(index as usize) {
            Some(slot) => {
                let (c, out) = (a.f)(T::from_bits(*slot), input);
                *slot = c.to_bits();
                out
            }
            None => {
                self.guard.violation = Some(Violation::IndexOutOfRange);
                O::default()
            }
        }
    }

    /// Compute a hash unit over `data` (the bytes of the fields it hashes).
    #[inline]
    pub fn hash(&mut self, h: &HashUnit, data: &[u8]) -> u32 {
        if !self.guard.enter(h.obj) {
            return 0;
        }
        h.algo.compute(data) & h.mask
    }

    /// Send a digest to the control plane (if the control plane enabled it). `data` is the
    /// digest's fields packed as declared; it is cut or zero-padded to the declared size.
    pub fn digest(&mut self, d: &Digest, data: &[u8]) {
        let o = ObjRef { id: d.obj, stage: self.guard.stage, gress: Gress::Ingress };
        if !self.guard.enter(o) {
            return;
        }
        if !self.state.digest_enabled.get(d.idx as usize).copied().unwrap_or(false) || self.digests.len() >= self.digest_cap {
            return;
        }
        let mut v = vec![0u8; d.bytes as usize];
        let n = data.len().min(v.len());
        v[..n].copy_from_slice(&data[..n]);
        self.digests.push(DigestMsg { program: self.program, digest: d.idx, data: v.into_boxed_slice() });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(id: u16, stage: u8, gress: Gress) -> ObjRef {
        ObjRef { id, stage, gress }
    }

    #[test]
    fn guard_enforces_order_and_single_access() {
        let mut g = Guard { gress: Gress::Ingress, stage: 0, touched: [0; 4], violation: None };
        assert!(g.enter(obj(0, 0, Gress::Ingress)));
        assert!(g.enter(obj(1, 0, Gress::Ingress)), "two objects in one stage are fine");
        assert!(g.enter(obj(2, 3, Gress::Ingress)));
        assert!(!g.enter(obj(3, 1, Gress::Ingress)));
        assert_eq!(g.violation, Some(Violation::StageOrder));

        let mut g = Guard { gress: Gress::Ingress, stage: 0, touched: [0; 4], violation: None };
        assert!(g.enter(obj(200, 2, Gress::Ingress)));
        assert!(!g.enter(obj(200, 2, Gress::Ingress)));
        assert_eq!(g.violation, Some(Violation::DoubleAccess));

        let mut g = Guard { gress: Gress::Egress, stage: 0, touched: [0; 4], violation: None };
        assert!(!g.enter(obj(0, 0, Gress::Ingress)));
        assert_eq!(g.violation, Some(Violation::WrongGress));
    }
}
