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

use std::cell::RefCell;
use std::marker::PhantomData;

use serde::Serialize;

use crate::base::{ActionId, DropCode, Gress, ObjRef, MAX_ACTION_PARAMS};
use crate::decl::{Digest, HashUnit, Memory, Table};
use crate::lanes::{HashLanes, RegisterLanes};
use crate::packet::{PacketBuf, PortId, PORT_CPU, PORT_NONE, PORT_RECIRC};
pub use crate::packet::{PacketMeta, BRIDGED_BYTES};
use crate::register::{Cell, RegisterAction, SaluBody};
use crate::staged::{Staged, StagedArg};
use crate::table::{TableResult, TableState};
use crate::trace::Event;

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
    pub const ALL: [Violation; 5] =
        [Violation::DoubleAccess, Violation::StageOrder, Violation::WrongGress, Violation::IndexOutOfRange, Violation::HeaderTooLarge];
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
    /// Every register array's cells, back to back in declaration order (array `i` at
    /// `spans[i]`; a `Register` handle carries its offset): one slice for a pass to index.
    pub(crate) regs: Box<[u64]>,
    pub(crate) spans: Vec<std::ops::Range<usize>>,
    /// Block memories (words back to back).
    pub(crate) mems: Vec<Box<[u8]>>,
    /// What a pass only reads, apart from the registers it writes: a pass borrows the two
    /// halves separately (one pointer each), and table results borrow the read-only half
    /// for the whole pass.
    pub(crate) read_only: ProgramReadOnly,
}

/// The read-only (on the packet path) part of a program's state, and its constants.
pub(crate) struct ProgramReadOnly {
    pub(crate) tables: Vec<TableState>,
    pub(crate) profiles: Vec<crate::selector::ProfileState>,
    pub(crate) digest_enabled: Vec<bool>,
    /// Parse depth in bytes.
    depth: usize,
    /// Index of the program in its set.
    program: u8,
    /// Items one packet may stream through the stages (at least 1).
    items: u32,
}

impl ProgramState {
    pub(crate) fn new(decl: &crate::decl::ProgramDecl, program: u8) -> Self {
        let mut spans = Vec::with_capacity(decl.registers.len());
        let mut at = 0usize;
        for r in &decl.registers {
            spans.push(at..at + r.size as usize);
            at += r.size as usize;
        }
        ProgramState {
            regs: vec![0u64; at].into_boxed_slice(),
            spans,
            mems: decl.memories.iter().map(|m| vec![0u8; m.bytes() as usize].into_boxed_slice()).collect(),
            read_only: ProgramReadOnly {
                items: decl.items_per_pass.max(1),
                tables: decl.tables.iter().map(|t| TableState::new(t).with_decoders(&decl.action_decoders)).collect(),
                profiles: decl.action_profiles.iter().map(crate::selector::ProfileState::new).collect(),
                digest_enabled: vec![false; decl.digests.len()],
                depth: decl.parser.depth_bytes as usize,
                program,
            },
        }
    }
    pub fn register(&self, idx: usize) -> &[u64] {
        &self.regs[self.spans[idx].clone()]
    }
    pub fn register_mut(&mut self, idx: usize) -> &mut [u64] {
        &mut self.regs[self.spans[idx].clone()]
    }
    /// Register array `idx`, if the program has one.
    pub(crate) fn register_get(&self, idx: usize) -> Option<&[u64]> {
        self.spans.get(idx).map(|s| &self.regs[s.clone()])
    }
    pub(crate) fn register_get_mut(&mut self, idx: usize) -> Option<&mut [u64]> {
        let s = self.spans.get(idx)?.clone();
        Some(&mut self.regs[s])
    }
    /// Block memory `idx`, words back to back.
    pub fn memory(&self, idx: usize) -> &[u8] {
        &self.mems[idx]
    }
    pub fn table(&self, idx: usize) -> &TableState {
        &self.read_only.tables[idx]
    }
    pub fn table_mut(&mut self, idx: usize) -> &mut TableState {
        &mut self.read_only.tables[idx]
    }
}

/// What all passes in a pipe share: the time and the digests waiting for the control
/// plane (one pointer in each pass instead of three fields to fill). Shared, not
/// exclusive, so that a pass of an application can run while the base program's pass is
/// held open (see [`Pass::load`]).
pub(crate) struct PassEnv {
    pub(crate) now_ns: u64,
    pub(crate) digests: RefCell<Vec<DigestMsg>>,
    pub(crate) digest_cap: usize,
    /// The armed trace session, if any (see [`crate::trace`]).
    pub(crate) trace: RefCell<Option<Box<crate::trace::Tracer>>>,
}

impl PassEnv {
    pub(crate) fn new(digest_cap: usize) -> PassEnv {
        PassEnv { now_ns: 0, digests: RefCell::new(Vec::new()), digest_cap, trace: RefCell::new(None) }
    }

    /// Add `ev` to trace `id` (out of line: only traced packets get here).
    #[cold]
    #[inline(never)]
    pub(crate) fn record(&self, id: u16, ev: crate::trace::Event) {
        if let Some(t) = self.trace.borrow_mut().as_mut() {
            t.push(id, self.now_ns, ev);
        }
    }
}

/// The per-pass access set and stage cursor.
///
/// Positions are `gress << 8 | stage` (see [`ObjRef`]). A pass reaches objects in
/// non-decreasing position within its gress, so only the objects of the current position
/// can be reached twice: the set holds just those (one bit each), and moving on to a later
/// stage starts it afresh. The fast path is one compare for an object of the current stage
/// (plus its bit), two for a later one. The first violation moves the cursor past every
/// position, so every later access fails the same checks and lands in the cold path,
/// which records only the first violation.
#[derive(Clone, Copy)]
struct Guard {
    /// Objects of the current stage reached so far.
    touched: u64,
    /// Digests sent so far (a digest is not tied to a stage).
    digests: u64,
    pos: u16,
    end: u16,
    violation: Option<Violation>,
    /// Position of stage 0 of this pass's gress (where `pos` starts).
    start: u16,
}

/// The cursor after a violation: beyond every position.
const VIOLATED: u16 = u16::MAX;

/// Why `o` may not be reached by a guard at `pos` in the gress ending at `end` (out of
/// line: it never runs in a correct program); the violation to record.
#[cold]
#[inline(never)]
fn why(pos: u16, end: u16, o: ObjRef) -> Violation {
    if o.pos >> 8 != (end - 1) >> 8 {
        Violation::WrongGress
    } else if o.pos < pos {
        Violation::StageOrder
    } else {
        Violation::DoubleAccess
    }
}

impl Guard {
    #[inline(always)]
    fn new(gress: Gress) -> Guard {
        let start = crate::base::pos(0, gress);
        Guard { touched: 0, digests: 0, pos: start, end: start + 256, violation: None, start }
    }

    /// As new, for the next pass in the same gress.
    #[inline(always)]
    fn reset(&mut self) {
        (self.touched, self.digests, self.pos, self.violation) = (0, 0, self.start, None);
    }

    #[inline(always)]
    fn enter(&mut self, o: ObjRef) -> bool {
        if o.pos == self.pos {
            if self.touched & o.bit == 0 {
                self.touched |= o.bit;
                return true;
            }
        } else if o.pos > self.pos && o.pos < self.end {
            self.pos = o.pos;
            self.touched = o.bit;
            return true;
        }
        if self.violation.is_none() {
            self.fail(why(self.pos, self.end, o));
        }
        false
    }

    /// Enter `o` with an index or operand usable from position `after` on (see
    /// [`crate::staged`]): a value produced in `o`'s own stage (or later) is a
    /// `StageOrder` violation.
    #[inline(always)]
    fn enter_after(&mut self, o: ObjRef, after: u16) -> bool {
        if o.pos < after {
            self.fail(Violation::StageOrder);
            return false;
        }
        self.enter(o)
    }

    /// Enter every object in `bits` (all at position `pos`, distinct, at least one) at
    /// once, as separate entries in a row would; or, if any of them could not enter,
    /// nothing at all and nothing recorded (the caller then enters them one by one, which
    /// records the violation where separate entries would).
    #[inline(always)]
    fn try_enter_all(&mut self, pos: u16, bits: u64) -> bool {
        // A later stage first: lanes usually move on to the next stage (the same tests as
        // `enter`, in the other order).
        if pos > self.pos {
            if pos < self.end {
                self.pos = pos;
                self.touched = bits;
                return true;
            }
        } else if pos == self.pos && self.touched & bits == 0 {
            self.touched |= bits;
            return true;
        }
        false
    }

    /// The digest with bit `bit`: any stage of ingress, once per pass.
    #[inline]
    fn enter_digest(&mut self, bit: u64) -> bool {
        if self.violation.is_some() {
            return false;
        }
        if self.end != 256 {
            self.fail(Violation::WrongGress);
            return false;
        }
        if self.digests & bit != 0 {
            self.fail(Violation::DoubleAccess);
            return false;
        }
        self.digests |= bit;
        true
    }

    /// Record `v` unless an earlier violation is recorded; no access succeeds afterwards.
    #[cold]
    fn fail(&mut self, v: Violation) {
        if self.violation.is_none() {
            self.violation = Some(v);
            self.pos = VIOLATED;
        }
    }
}

/// Whether a pass's trace hooks are compiled in: [`Traced`] (the hooks test the packet's
/// trace id after each operation) or [`Untraced`] (no hook, no test). The pipe decides once
/// per batch loop: untraced while no trace session is armed.
pub trait TraceMode: sealed::Sealed + Sized + 'static {
    /// Whether the hooks are compiled in.
    const TRACE_HOOKS: bool;
    /// `program`'s ingress control in this mode.
    #[doc(hidden)]
    fn ingress<P: crate::Program + ?Sized>(program: &P, pass: &mut Pass<'_, Self>);
    /// `program`'s egress control in this mode.
    #[doc(hidden)]
    fn egress<P: crate::Program + ?Sized>(program: &P, pass: &mut Pass<'_, Self>);
    /// `program`'s batch loop in this mode (one virtual call).
    #[doc(hidden)]
    fn run_batch(program: &dyn crate::Program, batch: &mut crate::pipe::Batch<'_, '_, Self>) -> crate::pipe::BatchRan;
}

/// Trace hooks compiled in (the default mode of a [`Pass`]).
pub struct Traced;
/// Trace hooks compiled out: for batches run while no trace session is armed.
pub struct Untraced;

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Traced {}
    impl Sealed for super::Untraced {}
}

impl TraceMode for Traced {
    const TRACE_HOOKS: bool = true;
    #[inline(always)]
    fn ingress<P: crate::Program + ?Sized>(program: &P, pass: &mut Pass<'_, Self>) {
        program.ingress(pass)
    }
    #[inline(always)]
    fn egress<P: crate::Program + ?Sized>(program: &P, pass: &mut Pass<'_, Self>) {
        program.egress(pass)
    }
    #[inline(always)]
    fn run_batch(program: &dyn crate::Program, batch: &mut crate::pipe::Batch<'_, '_, Self>) -> crate::pipe::BatchRan {
        program.run_batch(batch)
    }
}

impl TraceMode for Untraced {
    const TRACE_HOOKS: bool = false;
    #[inline(always)]
    fn ingress<P: crate::Program + ?Sized>(program: &P, pass: &mut Pass<'_, Self>) {
        program.ingress_untraced(pass)
    }
    #[inline(always)]
    fn egress<P: crate::Program + ?Sized>(program: &P, pass: &mut Pass<'_, Self>) {
        program.egress_untraced(pass)
    }
    #[inline(always)]
    fn run_batch(program: &dyn crate::Program, batch: &mut crate::pipe::Batch<'_, '_, Self>) -> crate::pipe::BatchRan {
        program.run_batch_untraced(batch)
    }
}

/// One packet's pass through one program's control block.
///
/// It holds the packet (moved in, a pointer) and little else that changes per packet,
/// so that a batch loop can keep one pass open on a program and move packets through it
/// ([`Pass::load`], [`Pass::unload`]) instead of building a pass per packet.
///
/// `M`: whether the trace hooks are compiled in (see [`TraceMode`]). `Pass<'_>` (the
/// default, [`Traced`]) tests the packet's trace id after each table, register, hash,
/// memory and digest operation; `Pass<'_, Untraced>` has no hook at all: the pipe runs
/// batches with it while no trace session is armed, when no hook could record anything
/// ([`crate::Program::ingress_untraced`]). The two have one layout (`repr(C)`, and `M` is
/// only in a zero-sized marker), so that [`Pass::as_traced`] can view one as the other.
#[repr(C)]
pub struct Pass<'a, M = Traced> {
    pkt: PacketBuf,
    hdr_len: usize,
    /// The program's parse depth (a copy: read at every [`Pass::load`]).
    depth: usize,
    regs: &'a mut [u64],
    mems: &'a mut Vec<Box<[u8]>>,
    read_only: &'a ProgramReadOnly,
    env: &'a PassEnv,
    guard: Guard,
    /// Items streamed so far in this pass beyond the first ([`Pass::next_item`]).
    items: u32,
    /// The packet's trace id (0: not traced; the hooks test only this).
    pub(crate) trace: u16,
    /// The Ethernet destination and source addresses as the packet arrived, before the
    /// base program's pass (set by the pipe for an application's ingress pass).
    arrival: [u8; 12],
    mode: PhantomData<M>,
}

impl<'a, M: TraceMode> Pass<'a, M> {
    #[inline(always)]
    pub(crate) fn new(pkt: PacketBuf, state: &'a mut ProgramState, gress: Gress, env: &'a PassEnv) -> Self {
        let ProgramState { regs, mems, read_only, .. } = state;
        let hdr_len = read_only.depth.min(pkt.len());
        let trace = if M::TRACE_HOOKS { pkt.meta.trace } else { 0 };
        Pass {
            pkt,
            hdr_len,
            depth: read_only.depth,
            regs,
            mems,
            read_only,
            env,
            guard: Guard::new(gress),
            items: 0,
            trace,
            arrival: [0; 12],
            mode: PhantomData,
        }
    }

    /// Start a new pass (same program, same gress) over `pkt`: the packet is swapped in,
    /// and the one held so far comes out in `pkt`. A pass starts as if new: header region
    /// from the parse depth, no object reached, no violation.
    #[inline(always)]
    pub(crate) fn load(&mut self, pkt: &mut PacketBuf) {
        std::mem::swap(&mut self.pkt, pkt);
        self.hdr_len = self.depth.min(self.pkt.len());
        self.guard.reset();
        self.items = 0;
        // (Untraced: the id stays 0 from `new`, for a control block run through
        // `as_traced`.)
        if M::TRACE_HOOKS {
            self.trace = self.pkt.meta.trace;
            if self.trace != 0 {
                self.trace_pass();
            }
        }
    }

    /// Whether this pass records its operations: its packet is traced (and the hooks are
    /// compiled in; untraced, a constant false and no test).
    #[inline(always)]
    fn traced(&self) -> bool {
        M::TRACE_HOOKS && self.trace != 0
    }

    /// This pass as one with the trace hooks compiled in (the same pass; untraced, its
    /// trace id is 0, so the hooks test and record nothing). For a program's control
    /// block that has only the traced instance ([`crate::Program::ingress_untraced`]).
    #[inline(always)]
    pub fn as_traced(&mut self) -> &mut Pass<'a, Traced> {
        self.retype()
    }

    /// This pass viewed with mode `N`: only where `N` is `M` (the pipe's generic loop
    /// calling the program's instance for its mode), or `N` is `Traced` (above).
    #[inline(always)]
    pub(crate) fn retype<N: TraceMode>(&mut self) -> &mut Pass<'a, N> {
        debug_assert!(N::TRACE_HOOKS || !M::TRACE_HOOKS, "a traced pass is never run untraced");
        const { assert!(std::mem::size_of::<Pass<'static, Traced>>() == std::mem::size_of::<Pass<'static, Untraced>>()) };
        let p: *mut Pass<'a, M> = self;
        // SAFETY: `Pass` is `repr(C)` and `M` is only in the zero-sized `mode` marker, so
        // `Pass<'a, M>` and `Pass<'a, N>` have the same fields with the same types at the
        // same offsets; the reference keeps `self`'s lifetime and exclusivity. An untraced
        // pass viewed as traced holds trace id 0 (never set when `M::TRACE_HOOKS` is false), which
        // the hooks read as "not traced".
        #[allow(unsafe_code)]
        unsafe {
            &mut *(p as *mut Pass<'a, N>)
        }
    }

    // ---- trace hooks (cold: reached only for traced packets) ----------------------------

    #[cold]
    #[inline(never)]
    fn trace_pass(&self) {
        let m = &self.pkt.meta;
        let gress = if self.guard.start == 0 { Gress::Ingress } else { Gress::Egress };
        let port = if gress == Gress::Ingress { m.ingress_port } else { m.egress_port };
        let ev =
            Event::Pass { program: self.read_only.program, gress, recirculations: m.recirculations, port, rid: m.rid, clone: m.is_clone };
        self.env.record(self.trace, ev);
    }

    /// (The result's fields by value: a reference would make the caller keep the result in
    /// memory on the untraced path too.)
    #[cold]
    #[inline(never)]
    fn trace_table(&self, table: u16, key: &[u8], hit: bool, action: ActionId, params: &[u64; MAX_ACTION_PARAMS]) {
        let ev = Event::Table { program: self.read_only.program, table, key: key.into(), hit, action: action.0, params: params[..].into() };
        self.env.record(self.trace, ev);
    }

    #[cold]
    #[inline(never)]
    fn trace_table_u64(&self, table: u16, key: u64, hit: bool, action: ActionId, params: &[u64; MAX_ACTION_PARAMS]) {
        let n = self.read_only.tables[table as usize].key_bytes().min(8);
        self.trace_table(table, &key.to_be_bytes()[8 - n..], hit, action, params);
    }

    #[cold]
    #[inline(never)]
    fn trace_register(&self, register: u16, index: u32, before: u64, after: u64) {
        self.env.record(self.trace, Event::Register { program: self.read_only.program, register, index, before, after });
    }

    #[cold]
    #[inline(never)]
    fn trace_hash(&self, unit: u16, value: u32) {
        self.env.record(self.trace, Event::Hash { program: self.read_only.program, unit, value });
    }

    /// A violation committed by this pass.
    #[cold]
    #[inline(never)]
    pub(crate) fn trace_violation(&self, kind: Violation) {
        self.env.record(self.trace, Event::Violation { program: self.read_only.program, kind });
    }

    /// End the pass: the packet is swapped out into `pkt` (and what `pkt` held goes back
    /// in); returns the violation committed, if any.
    #[inline(always)]
    pub(crate) fn unload(&mut self, pkt: &mut PacketBuf) -> Option<Violation> {
        std::mem::swap(&mut self.pkt, pkt);
        self.guard.violation
    }

    /// End the pass: the packet, and the violation committed, if any.
    #[inline(always)]
    pub(crate) fn finish(self) -> (PacketBuf, Option<Violation>) {
        (self.pkt, self.guard.violation)
    }

    // ---- packet bytes -------------------------------------------------------------

    /// The header bytes the parser reaches (at most the declared parse depth).
    #[inline]
    pub fn hdr(&self) -> &[u8] {
        self.pkt.head(self.hdr_len)
    }
    /// The header bytes, writable: what the deparser emits.
    #[inline]
    pub fn hdr_mut(&mut self) -> &mut [u8] {
        let n = self.hdr_len;
        self.pkt.head_mut(n)
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
    #[inline]
    pub fn resize_hdr(&mut self, n: usize) -> bool {
        // Shrinking a region with no payload after it (a packet cut to its headers, as a
        // reply is): nothing moves, nothing can fail; the general path below does the same.
        if n <= self.hdr_len && self.pkt.len() == self.hdr_len {
            self.pkt.set_len(n);
            self.hdr_len = n;
            return true;
        }
        self.resize_hdr_moving(n)
    }

    /// [`Pass::resize_hdr`] in general: the payload moves, the region may grow.
    #[inline(never)]
    fn resize_hdr_moving(&mut self, n: usize) -> bool {
        let payload = self.pkt.len() - self.hdr_len;
        if n > self.read_only.depth || n + payload > self.pkt.capacity() {
            self.guard.fail(Violation::HeaderTooLarge);
            return false;
        }
        let old = self.hdr_len;
        let total = n + payload;
        if n != old {
            let raw = self.pkt.raw_mut();
            if payload > 0 {
                raw.copy_within(old..old + payload, n);
            }
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
    #[inline]
    pub fn truncate_payload(&mut self) {
        let n = self.hdr_len;
        self.pkt.set_len(n);
    }

    // ---- intrinsic metadata ---------------------------------------------------------

    /// The Ethernet destination (bytes 0-5) and source (6-11) addresses the packet arrived
    /// with, on an application's ingress pass: what the parser extracted, before the base
    /// program rewrote them (routing). On Tofino the parser copies them into the
    /// application's metadata: a program that reads them declares the 96 bits in
    /// `metadata_bits`. Zeros on other passes and for a frame shorter than 12 bytes.
    #[inline]
    pub fn arrival_macs(&self) -> &[u8; 12] {
        &self.arrival
    }

    /// Record the addresses `pkt` arrives with (see [`Pass::arrival_macs`]), for the pass
    /// this packet is loaded into next.
    #[inline(always)]
    pub(crate) fn set_arrival(&mut self, pkt: &PacketBuf) {
        self.arrival = pkt.data().first_chunk::<12>().copied().unwrap_or([0; 12]);
    }

    #[inline]
    pub fn ingress_port(&self) -> PortId {
        self.pkt.meta.ingress_port
    }
    #[inline]
    pub fn now_ns(&self) -> u64 {
        self.env.now_ns
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
    pub fn apply(&mut self, t: &Table, key: &[u8]) -> TableResult<'a> {
        if !self.guard.enter(t.obj) {
            return TableResult::NONE;
        }
        let read_only: &'a ProgramReadOnly = self.read_only;
        let r = read_only.tables[t.idx as usize].lookup(key);
        if self.traced() {
            self.trace_table(t.idx, key, r.hit, r.action, r.params);
        }
        r
    }

    /// Apply a table whose key fits in 8 bytes, given as a big-endian number.
    #[inline(always)]
    pub fn apply_u64(&mut self, t: &Table, key: u64) -> TableResult<'a> {
        if !self.guard.enter(t.obj) {
            return TableResult::NONE;
        }
        let read_only: &'a ProgramReadOnly = self.read_only;
        let r = read_only.tables[t.idx as usize].lookup_u64(key);
        if self.traced() {
            self.trace_table_u64(t.idx, key, r.hit, r.action, r.params);
        }
        r
    }

    /// Run a register action on cell `index` with operand `input`; returns its output,
    /// usable from the next stage on. An index or operand produced in this action's stage
    /// (or later) is a `StageOrder` violation (see [`crate::staged`]).
    #[inline]
    pub fn execute<T: Cell, I, O: Default, B: SaluBody<T, I, O>>(
        &mut self,
        a: &RegisterAction<T, I, O, B>,
        index: impl StagedArg<u32>,
        input: impl StagedArg<I>,
    ) -> Staged<O> {
        let (index, input) = (index.staged(), input.staged());
        let pos = a.reg.obj.pos;
        if !self.guard.enter_after(a.reg.obj, index.after().max(input.after())) {
            return Staged::produced_at(O::default(), pos);
        }
        Staged::produced_at(self.run_action(a, index.get(), input.get()), pos)
    }

    /// The action's body on cell `index` (the object entered).
    #[inline(always)]
    fn run_action<T: Cell, I, O: Default, B: SaluBody<T, I, O>>(&mut self, a: &RegisterAction<T, I, O, B>, index: u32, input: I) -> O {
        // In the array, then in the program's register memory (the second holds for every
        // handle of this program; checked anyway, never a panic).
        let at = a.reg.offset as usize + index as usize;
        match self.regs.get_mut(at).filter(|_| index < a.reg.size) {
            Some(slot) => {
                let before = *slot;
                let (c, out) = a.body.run(T::from_bits(before), input);
                let after = c.to_bits();
                *slot = after;
                if self.traced() {
                    self.trace_register(a.reg.idx, index, before, after);
                }
                out
            }
            None => {
                self.guard.fail(Violation::IndexOutOfRange);
                O::default()
            }
        }
    }

    /// Run lanes' register actions, lane `i` (if bit `i` of `active` is set) on cell
    /// `index[i]` with operand `input(i)`; returns each lane's output (the default for a
    /// lane not run). The same as one [`Pass::execute`] per active lane in lane order,
    /// checks, effects and violations included (see [`crate::lanes`]).
    #[inline(always)]
    pub fn execute_lanes<T: Cell, I, O: Default + Copy, B: SaluBody<T, I, O>, const N: usize>(
        &mut self,
        l: &RegisterLanes<T, I, O, B, N>,
        active: u32,
        index: [u32; N],
        input: impl Fn(usize) -> I,
    ) -> [O; N] {
        let mut out = [O::default(); N];
        let bits = l.bits(active);
        if bits == 0 {
            return out;
        }
        if !self.guard.try_enter_all(l.pos, bits) {
            return self.execute_lanes_one_by_one(l, active, index, input);
        }
        // One lane: false if its index is out of range (as separate accesses: this lane
        // fails, the later ones find the pass violated and do nothing).
        let lane = |pass: &mut Self, i: usize, out: &mut [O; N]| -> bool {
            let a = &l.acts[i];
            if index[i] < a.reg.size {
                if let Some(slot) = pass.regs.get_mut(a.reg.offset as usize + index[i] as usize) {
                    let before = *slot;
                    let (c, o) = a.body.run(T::from_bits(before), input(i));
                    let after = c.to_bits();
                    *slot = after;
                    out[i] = o;
                    if pass.traced() {
                        pass.trace_register(a.reg.idx, index[i], before, after);
                    }
                    return true;
                }
            }
            pass.guard.fail(Violation::IndexOutOfRange);
            false
        };
        if active & ((1 << N) - 1) == (1 << N) - 1 {
            // Every lane (the usual case): no test per lane.
            for i in 0..N {
                if !lane(self, i, &mut out) {
                    break;
                }
            }
        } else {
            for i in 0..N {
                if active >> i & 1 != 0 && !lane(self, i, &mut out) {
                    break;
                }
            }
        }
        out
    }

    /// Lanes that cannot enter as a group (a rule is broken): one by one, so the violation
    /// is recorded as separate accesses record it.
    #[cold]
    #[inline(never)]
    fn execute_lanes_one_by_one<T: Cell, I, O: Default + Copy, B: SaluBody<T, I, O>, const N: usize>(
        &mut self,
        l: &RegisterLanes<T, I, O, B, N>,
        active: u32,
        index: [u32; N],
        input: impl Fn(usize) -> I,
    ) -> [O; N] {
        let mut out = [O::default(); N];
        for i in 0..N {
            if active >> i & 1 != 0 {
                out[i] = self.execute(&l.acts[i], index[i], input(i)).get();
            }
        }
        out
    }

    /// Compute lanes' hash units, unit `i` (if bit `i` of `active` is set) over
    /// `data[i]`; 0 for a lane not run. The same as one [`Pass::hash`] per active lane.
    #[inline(always)]
    pub fn hash_lanes<const N: usize>(&mut self, h: &HashLanes<N>, active: u32, data: [&[u8]; N]) -> [u32; N] {
        let bits = h.bits(active);
        if bits == 0 {
            return [0; N];
        }
        if !self.guard.try_enter_all(h.pos, bits) {
            return self.hash_lanes_one_by_one(h, active, data);
        }
        let u = &h.units[0]; // all lanes compute the same hash (checked by `HashLanes::new`)
        let mut out = u.algo.compute_lanes(active, data);
        for o in &mut out {
            *o &= u.mask;
        }
        if self.traced() {
            for (i, o) in out.iter().enumerate() {
                if active >> i & 1 != 0 {
                    self.trace_hash(h.units[i].idx, *o);
                }
            }
        }
        out
    }

    #[cold]
    #[inline(never)]
    fn hash_lanes_one_by_one<const N: usize>(&mut self, h: &HashLanes<N>, active: u32, data: [&[u8]; N]) -> [u32; N] {
        let mut out = [0u32; N];
        for i in 0..N {
            if active >> i & 1 != 0 {
                out[i] = self.hash(&h.units[i], data[i]).get();
            }
        }
        out
    }

    /// Read-modify-write one word of a block memory: `f` gets the word and returns the
    /// output (on a rule violation `f` does not run and the default comes back).
    #[inline]
    pub fn access<R: Default>(&mut self, m: &Memory, word: impl StagedArg<u32>, f: impl FnOnce(&mut [u8]) -> R) -> R {
        let word = word.staged();
        if !self.guard.enter_after(m.obj, word.after()) {
            return R::default();
        }
        let word = word.get();
        if word >= m.words {
            self.guard.fail(Violation::IndexOutOfRange);
            return R::default();
        }
        let w = m.word_bytes as usize;
        let at = word as usize * w;
        if self.traced() {
            return self.access_traced(m, word, at..at + w, f);
        }
        f(&mut self.mems[m.idx as usize][at..at + w])
    }

    #[cold]
    #[inline(never)]
    fn access_traced<R>(&mut self, m: &Memory, word: u32, at: std::ops::Range<usize>, f: impl FnOnce(&mut [u8]) -> R) -> R {
        let cell = &mut self.mems[m.idx as usize][at];
        let before: Box<[u8]> = (&*cell).into();
        let r = f(cell);
        let after: Box<[u8]> = (&*cell).into();
        self.env.record(self.trace, Event::Memory { program: self.read_only.program, memory: m.idx, word, before, after });
        r
    }

    /// The next item of this packet enters the stages (a payload analyzer handing the
    /// engines one key-value pair after another): the stage cursor starts over, so each
    /// item may use each object once. At most `items_per_pass` items per pass (as the
    /// program declared); one more is a `double_access` violation and returns false.
    #[inline]
    pub fn next_item(&mut self) -> bool {
        if self.guard.violation.is_some() {
            return false;
        }
        if self.items + 1 >= self.read_only.items {
            self.guard.fail(Violation::DoubleAccess);
            return false;
        }
        self.items += 1;
        self.guard.touched = 0;
        self.guard.pos = self.guard.start;
        true
    }

    /// A cache hint for the model, not a switch operation: start fetching the cell that
    /// `a` will reach at `index` later in this pass. It reads and changes nothing, reaches
    /// no object (the guard is not involved; the access itself is checked when it runs)
    /// and may be given for any index. On hardware each stage has its own SRAM, so a
    /// pass's register accesses cost nothing extra; in the model they are cache misses
    /// into large arrays, and a program that knows its indices early (after its hash
    /// stage) lets them overlap instead of taking them one stage after another.
    #[inline(always)]
    pub fn prefetch<T: Cell, I, O, B: SaluBody<T, I, O>>(&self, a: &RegisterAction<T, I, O, B>, index: u32) {
        if index < a.reg.size {
            if let Some(slot) = self.regs.get(a.reg.offset as usize + index as usize) {
                prefetch_hint(slot);
            }
        }
    }

    /// Compute a hash unit over `data` (the bytes of the fields it hashes). The result may
    /// address a register array of the same stage (Tofino's hash distribution feeds the
    /// stage's stateful ALUs), so it is usable from the unit's own stage on.
    #[inline]
    pub fn hash(&mut self, h: &HashUnit, data: &[u8]) -> Staged<u32> {
        if !self.guard.enter(h.obj) {
            return Staged::usable_at(0, h.obj.pos);
        }
        let v = h.algo.compute(data) & h.mask;
        if self.traced() {
            self.trace_hash(h.idx, v);
        }
        Staged::usable_at(v, h.obj.pos)
    }

    /// Resolve a hit of a table implemented by action selector `s` to the member's action:
    /// a member entry directly, a group entry by the selector's hash of `data` (its stage's
    /// hash unit, so it counts as that unit's use). Direct results and misses pass through.
    pub fn select(&mut self, s: &crate::selector::ActionSelector, r: TableResult<'a>, data: &[u8]) -> TableResult<'a> {
        let read_only: &'a ProgramReadOnly = self.read_only;
        let Some(p) = read_only.profiles.get(s.idx as usize) else {
            return TableResult::NONE;
        };
        let out = p.resolve(r, || self.hash(&s.hash, data).get());
        if self.traced() {
            let ev =
                Event::Selector { program: self.read_only.program, profile: s.idx, action: out.action.0, params: out.params[..].into() };
            self.env.record(self.trace, ev);
        }
        out
    }

    /// Send a digest to the control plane (if the control plane enabled it). `data` is the
    /// digest's fields packed as declared; it is cut or zero-padded to the declared size.
    pub fn digest(&mut self, d: &Digest, data: &[u8]) {
        if !self.guard.enter_digest(d.bit) {
            return;
        }
        if self.traced() {
            self.env.record(self.trace, Event::Digest { program: self.read_only.program, digest: d.idx });
        }
        let mut digests = self.env.digests.borrow_mut();
        if !self.read_only.digest_enabled.get(d.idx as usize).copied().unwrap_or(false) || digests.len() >= self.env.digest_cap {
            return;
        }
        let mut v = vec![0u8; d.bytes as usize];
        let n = data.len().min(v.len());
        v[..n].copy_from_slice(&data[..n]);
        digests.push(DigestMsg { program: self.read_only.program, digest: d.idx, data: v.into_boxed_slice() });
    }
}

/// Ask the CPU to bring `slot`'s cache line closer (x86-64 `prefetcht0`; nothing
/// elsewhere).
#[inline(always)]
#[allow(unsafe_code)]
fn prefetch_hint(slot: &u64) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch only hints the cache; it never faults and reads nothing into the
    // program (the pointer comes from a live reference anyway). SSE is part of x86-64.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(slot as *const u64 as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = slot;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(local: u8, stage: u8, gress: Gress) -> ObjRef {
        ObjRef::new(local, stage, gress)
    }

    #[test]
    fn guard_enforces_order_and_single_access() {
        let mut g = Guard::new(Gress::Ingress);
        assert!(g.enter(obj(0, 0, Gress::Ingress)));
        assert!(g.enter(obj(1, 0, Gress::Ingress)), "two objects in one stage are fine");
        assert!(g.enter(obj(0, 3, Gress::Ingress)), "the same local index in another stage is another object");
        assert!(!g.enter(obj(3, 1, Gress::Ingress)));
        assert_eq!(g.violation, Some(Violation::StageOrder));
        assert!(!g.enter(obj(1, 3, Gress::Ingress)), "nothing succeeds after a violation");
        assert_eq!(g.violation, Some(Violation::StageOrder), "the first violation is kept");

        let mut g = Guard::new(Gress::Ingress);
        assert!(g.enter(obj(63, 2, Gress::Ingress)));
        assert!(!g.enter(obj(63, 2, Gress::Ingress)));
        assert_eq!(g.violation, Some(Violation::DoubleAccess));

        let mut g = Guard::new(Gress::Ingress);
        assert!(g.enter(obj(5, 2, Gress::Ingress)));
        assert!(g.enter(obj(5, 4, Gress::Ingress)));
        assert!(!g.enter(obj(5, 2, Gress::Ingress)), "an earlier stage stays out of reach");
        assert_eq!(g.violation, Some(Violation::StageOrder));

        let mut g = Guard::new(Gress::Egress);
        assert!(!g.enter(obj(0, 0, Gress::Ingress)));
        assert_eq!(g.violation, Some(Violation::WrongGress));

        let mut g = Guard::new(Gress::Ingress);
        assert!(!g.enter(obj(0, 0, Gress::Egress)));
        assert_eq!(g.violation, Some(Violation::WrongGress));
    }

    /// A program of four 16-cell arrays in stage 2 (lanes), one more in stage 2, one in
    /// stage 1 and four hash units in stage 1; its state, and a pass over an empty packet.
    mod lanes_rig {
        use super::super::*;
        use crate::decl::ProgramBuilder;
        use crate::hash::HashAlgo;
        use crate::lanes::{HashLanes, LanesError, RegisterLanes};
        use crate::register::{RegisterAction, SaluBody};

        #[derive(Clone, Copy)]
        pub struct AddOld;
        impl SaluBody<u32, u32, u32> for AddOld {
            fn run(self, c: u32, v: u32) -> (u32, u32) {
                (c.wrapping_add(v), c)
            }
        }

        pub struct Rig {
            pub decl: crate::decl::ProgramDecl,
            pub lanes: RegisterLanes<u32, u32, u32, AddOld, 4>,
            pub one: [RegisterAction<u32, u32, u32, AddOld>; 4],
            pub other: RegisterAction<u32, u32, u32, AddOld>,
            pub early: RegisterAction<u32, u32, u32, AddOld>,
            pub hashes: HashLanes<4>,
        }

        pub fn rig() -> Rig {
            let mut b = ProgramBuilder::new("lanes", "lanes test");
            let early_r = b.register::<u32>("early", Gress::Ingress, 1, 16, "");
            let early = b.register_action_body(early_r, "add", AddOld);
            let regs: Vec<_> = (0..4).map(|i| b.register::<u32>(&format!("r{i}"), Gress::Ingress, 2, 16, "")).collect();
            let one = [0, 1, 2, 3].map(|i| b.register_action_body(regs[i], "add", AddOld));
            let other_r = b.register::<u32>("other", Gress::Ingress, 2, 16, "");
            let other = b.register_action_body(other_r, "add", AddOld);
            let units = [0, 1, 2, 3].map(|i| b.hash_unit(&format!("h{i}"), Gress::Ingress, 1, HashAlgo::Crc32c, 8));
            let decl = b.build().expect("valid");
            assert_eq!(RegisterLanes::new([one[0], one[0]]).err(), Some(LanesError::SameObject));
            assert_eq!(RegisterLanes::new([one[0], early]).err(), Some(LanesError::NotOneStage));
            Rig { decl, lanes: RegisterLanes::new(one).expect("lanes"), one, other, early, hashes: HashLanes::new(units).expect("lanes") }
        }

        /// Run `f` on a fresh pass over `state`; the violation it committed.
        pub fn with_pass(state: &mut ProgramState, f: impl FnOnce(&mut Pass<'_>)) -> Option<Violation> {
            let env = PassEnv::new(0);
            let mut pass = Pass::new(PacketBuf::with_capacity(64), state, Gress::Ingress, &env);
            f(&mut pass);
            pass.finish().1
        }
    }

    #[test]
    fn lanes_equal_separate_accesses() {
        use lanes_rig::*;
        let r = rig();
        // Random (seeded) index, operand and active sets; after each pass the lanes' state
        // equals the state of the same pass done with one `execute` per lane.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut a = ProgramState::new(&r.decl, 0);
        let mut b = ProgramState::new(&r.decl, 0);
        for _ in 0..2000 {
            let active = (next() % 16) as u32;
            // Mostly in range; sometimes out of range (16 cells).
            let index: [u32; 4] = std::array::from_fn(|_| (next() % 18) as u32);
            let input: [u32; 4] = std::array::from_fn(|_| next() as u32);
            let before_other = next() % 3 == 0; // the same stage's other array first: lanes still enter
            let (mut out_a, mut out_b) = ([0u32; 4], [0u32; 4]);
            let va = with_pass(&mut a, |p| {
                if before_other {
                    p.execute(&r.other, 0, 1);
                }
                out_a = p.execute_lanes(&r.lanes, active, index, |i| input[i]);
            });
            let vb = with_pass(&mut b, |p| {
                if before_other {
                    p.execute(&r.other, 0, 1);
                }
                for i in 0..4 {
                    if active >> i & 1 != 0 {
                        out_b[i] = p.execute(&r.one[i], index[i], input[i]).get();
                    }
                }
            });
            assert_eq!(va, vb, "violation, active {active:b} index {index:?}");
            assert_eq!(out_a, out_b);
            assert_eq!(a.regs, b.regs);
        }
        // Broken rules give the same violation and effects as separate accesses: a lane's
        // array reached twice, an earlier stage after the lanes' stage.
        for twice in [true, false] {
            let mut a = ProgramState::new(&r.decl, 0);
            let mut b = ProgramState::new(&r.decl, 0);
            let va = with_pass(&mut a, |p| {
                p.execute(&r.one[2], 3, 5);
                p.execute_lanes(&r.lanes, 0b1111, [1, 2, 3, 4], |i| i as u32 + 1);
                if !twice {
                    p.execute(&r.early, 0, 1);
                }
            });
            let vb = with_pass(&mut b, |p| {
                p.execute(&r.one[2], 3, 5);
                for i in 0..4 {
                    p.execute(&r.one[i], [1, 2, 3, 4][i], i as u32 + 1);
                }
                if !twice {
                    p.execute(&r.early, 0, 1);
                }
            });
            assert_eq!(va, Some(Violation::DoubleAccess));
            assert_eq!(va, vb);
            assert_eq!(a.regs, b.regs);
        }
        let mut a = ProgramState::new(&r.decl, 0);
        let v = with_pass(&mut a, |p| {
            p.execute_lanes(&r.lanes, 0b0011, [1, 2, 0, 0], |_| 1);
            p.execute(&r.early, 0, 1);
        });
        assert_eq!(v, Some(Violation::StageOrder));
        // No active lane reaches nothing: the stage is not entered.
        let mut a = ProgramState::new(&r.decl, 0);
        let v = with_pass(&mut a, |p| {
            p.execute_lanes(&r.lanes, 0, [1, 2, 3, 4], |_| 1);
            p.execute(&r.early, 0, 1);
        });
        assert_eq!(v, None);
    }

    #[test]
    fn hash_lanes_equal_separate_hashes() {
        use lanes_rig::*;
        let r = rig();
        let keys: [[u8; 16]; 4] = std::array::from_fn(|i| std::array::from_fn(|j| (i * 16 + j + 1) as u8));
        let data = keys.each_ref().map(|k| &k[..]);
        let mut s = ProgramState::new(&r.decl, 0);
        let mut got = [0; 4];
        assert_eq!(with_pass(&mut s, |p| got = p.hash_lanes(&r.hashes, 0b1011, data)), None);
        let want: [u32; 4] = std::array::from_fn(|i| if i == 2 { 0 } else { crate::hash::HashAlgo::Crc32c.compute(&keys[i]) & 0xFF });
        assert_eq!(got, want);
        // A hash unit of the group used before: the group's violation, as one by one.
        let v = with_pass(&mut s, |p| {
            p.hash(r.hashes.lane(1), &keys[1]);
            p.hash_lanes(&r.hashes, 0b0011, data);
        });
        assert_eq!(v, Some(Violation::DoubleAccess));
    }

    /// `enter` and `try_enter_all` against the rule written out (an object is reachable if
    /// it is of the pass's gress and at a later stage than the cursor, or at the cursor's
    /// stage and not reached yet), from every cursor (fresh, at each stage, violated) with
    /// every touched set, for objects and groups of every stage of both gresses.
    #[test]
    fn guard_entries_follow_the_rule() {
        for gress in [Gress::Ingress, Gress::Egress] {
            for cursor in [None, Some(0u8), Some(1), Some(5), Some(255)] {
                for touched in [0u64, 0b01, 0b10, 0b11] {
                    for violated in [false, true] {
                        let mut g = Guard::new(gress);
                        if let Some(c) = cursor {
                            g.pos = crate::base::pos(c, gress);
                            g.touched = touched;
                        }
                        if violated {
                            g.fail(Violation::StageOrder);
                        }
                        for og in [Gress::Ingress, Gress::Egress] {
                            for stage in [0u8, 1, 2, 5, 6, 255] {
                                for bits in [0b01u64, 0b10, 0b11] {
                                    let pos = crate::base::pos(stage, og);
                                    let allowed = !violated && og == gress && (pos > g.pos || pos == g.pos && g.touched & bits == 0);
                                    let (mut a, mut b) = (g, g);
                                    assert_eq!(a.try_enter_all(pos, bits), allowed, "{gress:?} {cursor:?} {touched} {og:?} {stage} {bits}");
                                    if allowed {
                                        let want = if pos == g.pos { g.touched | bits } else { bits };
                                        assert_eq!((a.pos, a.touched), (pos, want));
                                    } else {
                                        assert_eq!((a.pos, a.touched, a.violation), (g.pos, g.touched, g.violation), "nothing changes");
                                    }
                                    if bits.count_ones() == 1 {
                                        let o = ObjRef { bit: bits, pos };
                                        assert_eq!(b.enter(o), allowed);
                                        if allowed {
                                            assert_eq!((b.pos, b.touched, b.violation), (a.pos, a.touched, None));
                                        } else {
                                            assert!(b.violation.is_some(), "a refused entry is a violation");
                                            assert_eq!(b.pos, VIOLATED);
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn guard_digests_once_per_ingress_pass() {
        let mut g = Guard::new(Gress::Ingress);
        assert!(g.enter(obj(0, 5, Gress::Ingress)));
        assert!(g.enter_digest(1 << 3));
        assert!(g.enter(obj(0, 7, Gress::Ingress)));
        assert!(g.enter_digest(1 << 4));
        assert!(!g.enter_digest(1 << 3), "a digest at a later stage is still the same digest");
        assert_eq!(g.violation, Some(Violation::DoubleAccess));
        g.reset();
        assert_eq!(g.violation, None);
        assert!(g.enter_digest(1 << 3), "a new pass starts with no digest sent");

        let mut g = Guard::new(Gress::Egress);
        assert!(!g.enter_digest(1));
        assert_eq!(g.violation, Some(Violation::WrongGress));
        g.reset();
        assert!(g.enter(obj(0, 0, Gress::Egress)), "reset keeps the gress");
    }

    /// `resize_hdr`'s shortcut (shrinking with no payload) does what the general path does:
    /// same result, bytes, length, header region and violation, for every packet length,
    /// cut or not, and every new length around the parse depth and the buffer's size.
    #[test]
    fn resize_hdr_shortcut_equals_general_path() {
        use crate::decl::ProgramBuilder;
        let mut b = ProgramBuilder::new("resize", "resize test");
        b.parser(48, &[("h", 384)]);
        let decl = b.build().expect("valid");
        let env = PassEnv::new(0);
        let bytes: Vec<u8> = (1..=96).collect();
        for len in [0, 10, 47, 48, 49, 80, 96] {
            for cut in [false, true] {
                for n in [0, 1, 20, 47, 48, 49, 64, 96, 97] {
                    let run = |general: bool| {
                        let mut state = ProgramState::new(&decl, 0);
                        let mut pkt = PacketBuf::with_capacity(96);
                        assert!(pkt.copy_from(&bytes[..len]));
                        let mut pass = Pass::<Traced>::new(pkt, &mut state, Gress::Ingress, &env);
                        if cut {
                            pass.truncate_payload();
                        }
                        let ok = if general { pass.resize_hdr_moving(n) } else { pass.resize_hdr(n) };
                        let hdr = pass.hdr().to_vec();
                        let (pkt, v) = pass.finish();
                        (ok, hdr, pkt.data().to_vec(), v)
                    };
                    assert_eq!(run(false), run(true), "len {len} cut {cut} n {n}");
                }
            }
        }
    }
}
