//! Program declarations: everything a data-plane program places on the switch (parser,
//! register arrays and their actions, match tables, hash units, digests, packet
//! generators), each with the stage and gress it lives in.
//!
//! A program builds its declaration once with [`ProgramBuilder`] and keeps the returned
//! handles; the resource report, the P4Info and the runtime checks all come from it.

use serde::{Deserialize, Serialize};

// Re-exported here, where programs have always found them.
use crate::base::{pos, MatchKind};
pub use crate::base::{ActionId, DropCode, Gress, ObjRef, MAX_ACTION_PARAMS};
use crate::hash::HashAlgo;
use crate::register::{Cell, Register, RegisterAction, SaluBody, SaluFn, SaluValue};
use crate::salu::{Declared, SaluDecl, SaluIn, SaluOut, SaluProgram};

/// Most objects (tables, register arrays, hash units, digests) one program may declare.
pub const MAX_OBJECTS: usize = 256;
/// Most tables, register arrays and hash units one program may place in one stage of one
/// gress (far above any target's per-stage resources): the width of the pass guard's
/// per-stage access set.
pub const MAX_STAGE_OBJECTS: usize = 64;
/// Most digests one program may declare (Tofino's digest type is 3 bits).
pub const MAX_DIGESTS: usize = 64;
/// Widest action parameter, in bits.
pub const MAX_PARAM_BITS: u32 = 64;

/// Which packets a program owns. All present fields must match.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassifyRule {
    pub ethertype: Option<u16>,
    /// IPv4 `(tos & mask) == value`.
    pub ipv4_tos: Option<(u8, u8)>,
    pub ip_protocol: Option<u8>,
    /// Inclusive range of UDP destination ports.
    pub udp_dst_port: Option<(u16, u16)>,
}

impl ClassifyRule {
    /// IPv4/UDP to one destination port.
    pub fn udp_port(port: u16) -> Self {
        ClassifyRule { ethertype: Some(0x0800), ip_protocol: Some(17), udp_dst_port: Some((port, port)), ..Default::default() }
    }
    /// IPv4 packets whose ToS byte has `bit` set (the reserved-bit marking of NetSHa).
    pub fn ipv4_tos_bit(bit: u8) -> Self {
        ClassifyRule { ethertype: Some(0x0800), ipv4_tos: Some((bit, bit)), ..Default::default() }
    }
    /// Frames of one EtherType.
    pub fn ethertype(et: u16) -> Self {
        ClassifyRule { ethertype: Some(et), ..Default::default() }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HeaderDecl {
    pub name: String,
    pub bits: u32,
}

/// What the parser extracts: `depth_bytes` is the furthest byte it reaches.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ParserDecl {
    pub depth_bytes: u32,
    pub headers: Vec<HeaderDecl>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RegisterActionDecl {
    pub name: String,
    pub in_bits: u32,
    pub out_bits: u32,
    /// The stateful ALU instruction, when declared as one ([`crate::salu::Salu`]); `None`
    /// for a Rust body, which the loader cannot check (reported as an unchecked ALU).
    #[serde(default)]
    pub alu: Option<SaluDecl>,
    /// Widest PHV operand, in bits (declared instructions only).
    #[serde(default)]
    pub phv_bits: u32,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RegisterDecl {
    pub name: String,
    pub doc: String,
    pub gress: Gress,
    pub stage: u8,
    pub size: u32,
    pub cell_bits: u32,
    pub actions: Vec<RegisterActionDecl>,
    /// How a cell splits into named fields, least significant first (empty: one number).
    /// Published in the P4Info so a controller shows `packets` and `bytes`, not one packed
    /// integer; the data plane itself never reads it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<CellFieldDecl>,
}

/// One named bit field of a register cell (see [`RegisterDecl::fields`]).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CellFieldDecl {
    pub name: String,
    pub bits: u32,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ParamDecl {
    pub name: String,
    pub bits: u32,
}

/// A table action: its name and the parameters the control plane supplies per entry.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ActionDecl {
    pub name: String,
    pub doc: String,
    pub params: Vec<ParamDecl>,
}

impl ActionDecl {
    pub fn param_bits(&self) -> u32 {
        self.params.iter().map(|p| p.bits).sum()
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KeyDecl {
    pub name: String,
    pub bits: u32,
    pub kind: MatchKind,
}

impl KeyDecl {
    pub fn bytes(&self) -> usize {
        self.bits.div_ceil(8) as usize
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TableDecl {
    pub name: String,
    pub doc: String,
    pub gress: Gress,
    pub stage: u8,
    pub size: u32,
    pub keys: Vec<KeyDecl>,
    /// Indexes into the program's action list.
    pub actions: Vec<u16>,
    pub default_action: u16,
    pub default_params: Vec<u64>,
    /// The default action cannot be changed by the control plane.
    pub const_default: bool,
}

impl TableDecl {
    pub fn key_bits(&self) -> u32 {
        self.keys.iter().map(|k| k.bits).sum()
    }
    pub fn key_bytes(&self) -> usize {
        self.keys.iter().map(|k| k.bytes()).sum()
    }
    /// Tables whose keys are all exact live in SRAM; any other kind needs TCAM.
    pub fn is_exact(&self) -> bool {
        self.keys.iter().all(|k| k.kind == MatchKind::Exact)
    }
    /// A priority is required on entries of tables with ternary or optional fields.
    pub fn needs_priority(&self) -> bool {
        self.keys.iter().any(|k| matches!(k.kind, MatchKind::Ternary | MatchKind::Optional))
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HashDecl {
    pub name: String,
    pub gress: Gress,
    pub stage: u8,
    pub algo: HashAlgo,
    pub out_bits: u32,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DigestDecl {
    pub name: String,
    pub doc: String,
    pub fields: Vec<ParamDecl>,
}

impl DigestDecl {
    pub fn bytes(&self) -> usize {
        self.fields.iter().map(|f| f.bits.div_ceil(8) as usize).sum()
    }
}

/// A periodic packet generator (Tofino's pktgen timer application): the only way the
/// switch gets packets it did not receive.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PktGenDecl {
    pub name: String,
    pub period_ns: u64,
    pub packet: Vec<u8>,
}

/// What a block memory is built from: on-chip SRAM (block RAM, one access per cycle) or
/// off-chip DRAM (large, with a latency the target states).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryKind {
    Sram,
    Dram,
}

/// A block memory of wide words (an FPGA's block RAM or a DRAM region): one
/// read-modify-write of one word per pass (or per item, see
/// [`ProgramBuilder::items_per_pass`]). Tofino has no such memory: its stateful ALUs reach
/// cells of at most 64 (128) bits, so the resource report refuses these on a Tofino target.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MemoryDecl {
    pub name: String,
    pub doc: String,
    pub gress: Gress,
    pub stage: u8,
    pub kind: MemoryKind,
    pub words: u32,
    pub word_bytes: u32,
}

impl MemoryDecl {
    pub fn bytes(&self) -> u64 {
        self.words as u64 * self.word_bytes as u64
    }
}

/// Handle to a block memory.
#[derive(Clone, Copy, Debug)]
pub struct Memory {
    pub(crate) obj: ObjRef,
    pub(crate) idx: u16,
    pub(crate) words: u32,
    pub(crate) word_bytes: u32,
}

impl Memory {
    pub fn words(&self) -> u32 {
        self.words
    }
    pub fn word_bytes(&self) -> u32 {
        self.word_bytes
    }
    pub fn index(&self) -> usize {
        self.idx as usize
    }
}

/// Everything a program declares. Built by [`ProgramBuilder`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ProgramDecl {
    pub name: String,
    pub doc: String,
    pub parser: ParserDecl,
    /// Bits of metadata the program keeps in the PHV beside the parsed headers.
    pub metadata_bits: u32,
    /// Bytes of metadata carried from ingress to egress.
    pub bridged_bytes: u32,
    /// Packets this program owns; empty means the base program (ordinary traffic).
    pub classify: Vec<ClassifyRule>,
    pub registers: Vec<RegisterDecl>,
    pub actions: Vec<ActionDecl>,
    pub tables: Vec<TableDecl>,
    pub hash_units: Vec<HashDecl>,
    pub digests: Vec<DigestDecl>,
    pub packet_generators: Vec<PktGenDecl>,
    /// Most recirculations one packet may make (a recirculated pass beyond it is dropped).
    /// `None`: a perpetual packet (e.g. a timer packet), bounded only by the recirculation port.
    pub max_recirculations: Option<u32>,
    /// Names of program-specific drop reasons, codes `DropCode::FIRST_PROGRAM..`.
    pub drop_reasons: Vec<String>,
    /// Notes the program wants shown with its resource report (e.g. what it leaves out).
    pub notes: Vec<String>,
    /// Block memories (wide words; FPGA targets only).
    #[serde(default)]
    pub memories: Vec<MemoryDecl>,
    /// Items (e.g. key-value pairs) of one packet a payload analyzer streams through the
    /// stages one after another, each item a fresh pass over them ([`crate::Pass::next_item`]).
    /// 0 or 1: one pass per packet, as on a PISA switch.
    #[serde(default)]
    pub items_per_pass: u32,
    /// On a recirculated pass of a packet this program owns, the packet stays with this
    /// program (its parser branches on the recirculation port and its bridged header, as a
    /// merged P4 program's would, instead of classifying the rewritten bytes again) and the
    /// base program does not run: this program sets the forwarding decision itself
    /// (forward, recirculate, clone, drop). Without a decision the packet is a counted
    /// `no_route` drop blamed on this program. See [`ProgramBuilder::owns_recirculated_passes`].
    #[serde(default)]
    pub owns_recirculated_passes: bool,
    /// Per-entry values computed once from an action's parameters when the control plane
    /// writes an entry (see [`ProgramBuilder::decode_action`]). Not part of the program's
    /// description (a function of the model, not of the switch): not serialized.
    #[serde(skip)]
    pub action_decoders: Vec<ActionDecoder>,
    /// Action profiles (with or without a selector) implementing some of the tables.
    #[serde(default)]
    pub action_profiles: Vec<crate::selector::ActionProfileDecl>,
}

/// What a table entry of `action` carries beside its parameters: `decode(params)`,
/// computed when the entry is written (see [`ProgramBuilder::decode_action`]).
#[derive(Clone, Copy, Debug)]
pub struct ActionDecoder {
    pub action: ActionId,
    pub decode: fn(&[u64; MAX_ACTION_PARAMS]) -> u32,
}

impl ProgramDecl {
    /// Deepest stage any object uses, plus one.
    pub fn stages_used(&self) -> u32 {
        let r = self.registers.iter().map(|r| r.stage);
        let t = self.tables.iter().map(|t| t.stage);
        let h = self.hash_units.iter().map(|h| h.stage);
        let m = self.memories.iter().map(|m| m.stage);
        r.chain(t).chain(h).chain(m).map(|s| s as u32 + 1).max().unwrap_or(0)
    }

    /// The name of drop code `code`: the switch's own ([`DropCode::builtin_name`]) or one
    /// this program declared.
    pub fn drop_name(&self, code: DropCode) -> Option<&str> {
        code.builtin_name().or_else(|| self.drop_reasons.get((code.0).checked_sub(DropCode::FIRST_PROGRAM)? as usize).map(|s| s.as_str()))
    }

    /// The drop code named `name` (see [`ProgramDecl::drop_name`]).
    pub fn drop_code(&self, name: &str) -> Option<DropCode> {
        (0..DropCode::MAX as u8).map(DropCode).find(|&c| self.drop_name(c) == Some(name))
    }
}

/// Errors in a declaration itself (independent of any target).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DeclError {
    #[error("duplicate {kind} name `{name}`")]
    Duplicate { kind: &'static str, name: String },
    #[error("{0}")]
    Invalid(String),
}

/// Handle to a match table.
#[derive(Clone, Copy, Debug)]
pub struct Table {
    pub(crate) obj: ObjRef,
    pub(crate) idx: u16,
}

impl Table {
    pub fn index(&self) -> usize {
        self.idx as usize
    }
}

/// Handle to a hash unit.
#[derive(Clone, Copy, Debug)]
pub struct HashUnit {
    pub(crate) obj: ObjRef,
    pub(crate) algo: HashAlgo,
    pub(crate) mask: u32,
    /// Its index in the program's hash units (names it in a packet trace).
    pub(crate) idx: u16,
}

/// Handle to a digest.
#[derive(Clone, Copy, Debug)]
pub struct Digest {
    /// Its bit in the pass's set of digests sent (a digest goes with any stage, so it is
    /// tracked apart from the staged objects).
    pub(crate) bit: u64,
    pub(crate) idx: u16,
    pub(crate) bytes: u16,
}

/// Builds a [`ProgramDecl`] and hands out the handles the program uses at run time.
pub struct ProgramBuilder {
    decl: ProgramDecl,
    next_obj: u16,
    /// Objects declared so far in each stage of each gress (by `pos`).
    stage_objs: Vec<u8>,
    errors: Vec<DeclError>,
}

impl ProgramBuilder {
    pub fn new(name: &str, doc: &str) -> Self {
        ProgramBuilder {
            decl: ProgramDecl {
                name: name.to_string(),
                doc: doc.to_string(),
                parser: ParserDecl::default(),
                metadata_bits: 0,
                bridged_bytes: 0,
                classify: Vec::new(),
                registers: Vec::new(),
                actions: Vec::new(),
                tables: Vec::new(),
                hash_units: Vec::new(),
                digests: Vec::new(),
                packet_generators: Vec::new(),
                max_recirculations: Some(0),
                drop_reasons: Vec::new(),
                notes: Vec::new(),
                memories: Vec::new(),
                items_per_pass: 0,
                owns_recirculated_passes: false,
                action_decoders: Vec::new(),
                action_profiles: Vec::new(),
            },
            next_obj: 0,
            stage_objs: vec![0; 512],
            errors: Vec::new(),
        }
    }

    /// Count one more object against [`MAX_OBJECTS`].
    fn count_obj(&mut self) {
        if self.next_obj as usize >= MAX_OBJECTS {
            self.errors.push(DeclError::Invalid(format!("more than {MAX_OBJECTS} objects in one program")));
        }
        self.next_obj = self.next_obj.saturating_add(1);
    }

    fn obj(&mut self, stage: u8, gress: Gress) -> ObjRef {
        self.count_obj();
        let n = &mut self.stage_objs[pos(stage, gress) as usize];
        let local = *n;
        *n = n.saturating_add(1);
        if local as usize == MAX_STAGE_OBJECTS {
            self.errors.push(DeclError::Invalid(format!(
                "more than {MAX_STAGE_OBJECTS} tables, register arrays and hash units in {gress:?} stage {stage}"
            )));
        }
        ObjRef::new(local.min(MAX_STAGE_OBJECTS as u8 - 1), stage, gress)
    }

    fn check_name(&mut self, kind: &'static str, name: &str, taken: bool) {
        if taken {
            self.errors.push(DeclError::Duplicate { kind, name: name.to_string() });
        }
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.') {
            self.errors.push(DeclError::Invalid(format!("{kind} name `{name}` must be [A-Za-z0-9_.]+")));
        }
    }

    /// The parser reaches `depth_bytes` into the packet and extracts these headers.
    pub fn parser(&mut self, depth_bytes: u32, headers: &[(&str, u32)]) -> &mut Self {
        self.decl.parser =
            ParserDecl { depth_bytes, headers: headers.iter().map(|(n, b)| HeaderDecl { name: n.to_string(), bits: *b }).collect() };
        self
    }

    pub fn metadata_bits(&mut self, bits: u32) -> &mut Self {
        self.decl.metadata_bits = bits;
        self
    }

    pub fn bridged_bytes(&mut self, bytes: u32) -> &mut Self {
        if bytes as usize > crate::base::BRIDGED_BYTES {
            self.errors.push(DeclError::Invalid(format!("bridged metadata is at most {} bytes", crate::base::BRIDGED_BYTES)));
        }
        self.decl.bridged_bytes = bytes;
        self
    }

    pub fn classify(&mut self, rule: ClassifyRule) -> &mut Self {
        self.decl.classify.push(rule);
        self
    }

    pub fn max_recirculations(&mut self, n: Option<u32>) -> &mut Self {
        self.decl.max_recirculations = n;
        self
    }

    /// Declare that this application decides the route of every recirculated pass of its
    /// packets: on those passes the base program (L2/L3 forwarding) is not applied and the
    /// packet is not classified again (see [`ProgramDecl::owns_recirculated_passes`]).
    /// Only for an application (a program with classification rules). Adds a note to the
    /// resource report (`inswitch resources`); the flag is in the declaration's JSON.
    pub fn owns_recirculated_passes(&mut self) -> &mut Self {
        self.decl.owns_recirculated_passes = true;
        self.decl.notes.push(
            "owns its recirculated passes: a packet it recirculates comes back to it (parsed by the recirculation port and its bridged header, not classified again) and the base program's tables are not applied on that pass; it sets the forwarding decision itself"
                .to_string(),
        );
        self
    }

    pub fn note(&mut self, note: &str) -> &mut Self {
        self.decl.notes.push(note.to_string());
        self
    }

    /// A program-specific drop reason, counted separately in the switch's metrics.
    pub fn drop_reason(&mut self, name: &str) -> DropCode {
        let code = DropCode::FIRST_PROGRAM as usize + self.decl.drop_reasons.len();
        if code >= DropCode::MAX {
            self.errors.push(DeclError::Invalid("too many drop reasons".into()));
        }
        self.decl.drop_reasons.push(name.to_string());
        DropCode(code.min(DropCode::MAX - 1) as u8)
    }

    /// A register array of `size` cells of type `T` in `stage` of `gress`.
    pub fn register<T: Cell>(&mut self, name: &str, gress: Gress, stage: u8, size: u32, doc: &str) -> Register<T> {
        let taken = self.decl.registers.iter().any(|r| r.name == name);
        self.check_name("register", name, taken);
        if size == 0 {
            self.errors.push(DeclError::Invalid(format!("register `{name}` has size 0")));
        }
        let obj = self.obj(stage, gress);
        let idx = self.decl.registers.len() as u16;
        let offset = self.decl.registers.iter().map(|r| r.size as u64).sum();
        self.decl.registers.push(RegisterDecl {
            name: name.to_string(),
            doc: doc.to_string(),
            gress,
            stage,
            size,
            cell_bits: T::BITS,
            actions: Vec::new(),
            fields: Vec::new(),
        });
        Register::new(obj, idx, size, offset)
    }

    /// Name the bit fields of `reg`'s cells, least significant first (`[("packets", 32),
    /// ("bytes", 32)]` for a [`crate::DualCell`] with packets in `lo`); their widths must add
    /// up to the cell's. Only for readers (P4Info, `inswitch registers read`, the web view).
    pub fn cell_fields<T: Cell>(&mut self, reg: &Register<T>, fields: &[(&str, u32)]) -> &mut Self {
        let total: u32 = fields.iter().map(|(_, b)| *b).sum();
        let r = &mut self.decl.registers[reg.idx as usize];
        if total != T::BITS || fields.iter().any(|(n, b)| n.is_empty() || *b == 0) {
            let name = r.name.clone();
            self.errors.push(DeclError::Invalid(format!("fields of register `{name}` must be named and add up to its {} bits", T::BITS)));
            return self;
        }
        r.fields = fields.iter().map(|(n, b)| CellFieldDecl { name: n.to_string(), bits: *b }).collect();
        self
    }

    /// A register action on `reg`: the stateful ALU program a packet can run on one cell.
    pub fn register_action<T: Cell, I: SaluValue, O: SaluValue>(
        &mut self,
        reg: Register<T>,
        name: &str,
        f: SaluFn<T, I, O>,
    ) -> RegisterAction<T, I, O> {
        self.register_action_body(reg, name, f)
    }

    /// A register action whose body is a [`SaluBody`] type, typically zero-sized so the
    /// compiler can inline it (see [`SaluBody`]).
    pub fn register_action_body<T: Cell, I: SaluValue, O: SaluValue, B: SaluBody<T, I, O>>(
        &mut self,
        reg: Register<T>,
        name: &str,
        body: B,
    ) -> RegisterAction<T, I, O, B> {
        self.push_register_action(reg, name, I::BITS, O::BITS, None, 0);
        RegisterAction::new(reg, body)
    }

    /// A register action whose body is a declared stateful ALU instruction (see
    /// [`crate::salu`]): checked against the target when the program loads and reported
    /// by `inswitch resources`. An instruction naming a half the cell lacks, an operand the
    /// action does not take or an undeclared condition is refused here.
    pub fn register_action_salu<T: Cell, I: SaluIn + SaluValue, O: SaluOut + SaluValue, P: SaluProgram<T, I, O>>(
        &mut self,
        reg: Register<T>,
        name: &str,
        body: P,
    ) -> RegisterAction<T, I, O, Declared<P>> {
        let d = P::SALU.to_decl();
        for e in crate::salu::check_shape(&d, T::BITS, I::OPERANDS, O::WORDS) {
            let r = &self.decl.registers[reg.idx as usize].name;
            self.errors.push(DeclError::Invalid(format!("register action `{r}.{name}`: {e}")));
        }
        self.push_register_action(reg, name, <I as SaluValue>::BITS, <O as SaluValue>::BITS, Some(d), <I as SaluIn>::BITS);
        RegisterAction::new(reg, Declared(body))
    }

    fn push_register_action<T: Cell>(
        &mut self,
        reg: Register<T>,
        name: &str,
        in_bits: u32,
        out_bits: u32,
        alu: Option<SaluDecl>,
        phv_bits: u32,
    ) {
        let r = &mut self.decl.registers[reg.idx as usize];
        let taken = r.actions.iter().any(|a| a.name == name);
        r.actions.push(RegisterActionDecl { name: name.to_string(), in_bits, out_bits, alu, phv_bits });
        self.check_name("register action", name, taken);
    }

    /// A table action with control-plane parameters `(name, bits)`.
    pub fn action(&mut self, name: &str, params: &[(&str, u32)], doc: &str) -> ActionId {
        let taken = self.decl.actions.iter().any(|a| a.name == name);
        self.check_name("action", name, taken);
        if params.len() > MAX_ACTION_PARAMS {
            self.errors.push(DeclError::Invalid(format!("action `{name}` has more than {MAX_ACTION_PARAMS} parameters")));
        }
        for (p, bits) in params {
            if *bits == 0 || *bits > MAX_PARAM_BITS {
                self.errors.push(DeclError::Invalid(format!("parameter `{p}` of `{name}` must be 1..={MAX_PARAM_BITS} bits")));
            }
        }
        self.decl.actions.push(ActionDecl {
            name: name.to_string(),
            doc: doc.to_string(),
            params: params.iter().map(|(n, b)| ParamDecl { name: n.to_string(), bits: *b }).collect(),
        });
        ActionId(self.decl.actions.len() as u16 - 1)
    }

    /// Give `action` a decoder: every table entry (and default) of `action` then carries
    /// `decode(params)`, computed when the control plane writes the entry and replaced with
    /// it on every write, and a lookup returns it as [`crate::TableResult::decoded`] (0 for
    /// actions without a decoder). For a program that would otherwise decode or check the
    /// same parameters on every pass: the switch still applies the table on every pass, so
    /// an entry modified or deleted in flight is seen by the very next pass; only the
    /// model's arithmetic on the parameters moves to the control plane's write.
    pub fn decode_action(&mut self, action: ActionId, decode: fn(&[u64; MAX_ACTION_PARAMS]) -> u32) -> &mut Self {
        if action.0 as usize >= self.decl.actions.len() {
            self.errors.push(DeclError::Invalid(format!("decoder for action {} that is not declared", action.0)));
        } else if self.decl.action_decoders.iter().any(|d| d.action == action) {
            self.errors.push(DeclError::Invalid(format!("action `{}` has two decoders", self.decl.actions[action.0 as usize].name)));
        } else {
            self.decl.action_decoders.push(ActionDecoder { action, decode });
        }
        self
    }

    /// A match-action table.
    pub fn table(&mut self, spec: TableSpec<'_>) -> Table {
        let taken = self.decl.tables.iter().any(|t| t.name == spec.name);
        self.check_name("table", spec.name, taken);
        if spec.keys.is_empty() {
            self.errors.push(DeclError::Invalid(format!("table `{}` has no key", spec.name)));
        }
        let lpm = spec.keys.iter().filter(|k| k.2 == MatchKind::Lpm).count();
        if lpm > 1 {
            self.errors.push(DeclError::Invalid(format!("table `{}` has more than one LPM field", spec.name)));
        }
        if spec.keys.iter().any(|k| k.2 == MatchKind::Lpm && k.1 > 128) {
            self.errors.push(DeclError::Invalid(format!("table `{}`: LPM fields are at most 128 bits", spec.name)));
        }
        if !spec.actions.contains(&spec.default_action.0) {
            self.errors.push(DeclError::Invalid(format!("table `{}`: default action is not one of its actions", spec.name)));
        }
        let nparams = self.decl.actions.get(spec.default_action.0 .0 as usize).map(|a| a.params.len());
        if nparams != Some(spec.default_action.1.len()) {
            self.errors.push(DeclError::Invalid(format!("table `{}`: default action parameters do not match", spec.name)));
        }
        if spec.size == 0 {
            self.errors.push(DeclError::Invalid(format!("table `{}` has size 0", spec.name)));
        }
        let obj = self.obj(spec.stage, spec.gress);
        let idx = self.decl.tables.len() as u16;
        self.decl.tables.push(TableDecl {
            name: spec.name.to_string(),
            doc: spec.doc.to_string(),
            gress: spec.gress,
            stage: spec.stage,
            size: spec.size,
            keys: spec.keys.iter().map(|(n, b, k)| KeyDecl { name: n.to_string(), bits: *b, kind: *k }).collect(),
            actions: spec.actions.iter().map(|a| a.0).collect(),
            default_action: spec.default_action.0 .0,
            default_params: spec.default_action.1.to_vec(),
            const_default: spec.const_default,
        });
        Table { obj, idx }
    }

    /// A hash unit computing `algo` over packet fields, keeping the low `out_bits`.
    pub fn hash_unit(&mut self, name: &str, gress: Gress, stage: u8, algo: HashAlgo, out_bits: u32) -> HashUnit {
        let taken = self.decl.hash_units.iter().any(|h| h.name == name);
        self.check_name("hash unit", name, taken);
        if out_bits == 0 || out_bits > algo.width() {
            self.errors.push(DeclError::Invalid(format!("hash unit `{name}`: out_bits must be 1..={}", algo.width())));
        }
        let obj = self.obj(stage, gress);
        let idx = self.decl.hash_units.len() as u16;
        self.decl.hash_units.push(HashDecl { name: name.to_string(), gress, stage, algo, out_bits });
        let mask = if out_bits >= 32 { u32::MAX } else { (1u32 << out_bits) - 1 };
        HashUnit { obj, algo, mask, idx }
    }

    /// An action selector implementing `table`: its entries point at members (an action of
    /// the table with its data) or groups of members, and a group's member is picked by the
    /// hash `algo` (`out_bits` wide) of what the program passes to [`crate::Pass::select`],
    /// computed by a hash unit of the table's stage. At most `size` members and `size`
    /// groups, `max_group_size` members per group.
    #[allow(clippy::too_many_arguments)]
    pub fn action_selector(
        &mut self,
        name: &str,
        doc: &str,
        table: &Table,
        size: u32,
        max_group_size: u32,
        algo: HashAlgo,
        out_bits: u32,
    ) -> crate::selector::ActionSelector {
        let taken = self.decl.action_profiles.iter().any(|p| p.name == name);
        self.check_name("action profile", name, taken);
        if size == 0 || max_group_size == 0 {
            self.errors.push(DeclError::Invalid(format!("action selector `{name}` has size 0")));
        }
        if self.decl.action_profiles.iter().any(|p| p.tables.contains(&table.idx)) {
            self.errors.push(DeclError::Invalid(format!("table {} already has an action profile", table.idx)));
        }
        let t = &self.decl.tables[table.idx as usize];
        let (gress, stage) = (t.gress, t.stage);
        let hash = self.hash_unit(&format!("{name}_hash"), gress, stage, algo, out_bits);
        let idx = self.decl.action_profiles.len() as u16;
        self.decl.action_profiles.push(crate::selector::ActionProfileDecl {
            name: name.to_string(),
            doc: doc.to_string(),
            tables: vec![table.idx],
            size,
            max_group_size,
            hash_unit: Some(self.decl.hash_units.len() as u16 - 1),
        });
        crate::selector::ActionSelector { idx, hash }
    }

    /// A digest: a small record sent to the control plane (at most one per packet pass).
    pub fn digest(&mut self, name: &str, fields: &[(&str, u32)], doc: &str) -> Digest {
        let taken = self.decl.digests.iter().any(|d| d.name == name);
        self.check_name("digest", name, taken);
        self.count_obj();
        let idx = self.decl.digests.len();
        if idx == MAX_DIGESTS {
            self.errors.push(DeclError::Invalid(format!("more than {MAX_DIGESTS} digests in one program")));
        }
        let d = DigestDecl {
            name: name.to_string(),
            doc: doc.to_string(),
            fields: fields.iter().map(|(n, b)| ParamDecl { name: n.to_string(), bits: *b }).collect(),
        };
        let bytes = d.bytes() as u16;
        self.decl.digests.push(d);
        Digest { bit: 1u64 << (idx % MAX_DIGESTS), idx: idx as u16, bytes }
    }

    /// A block memory of `words` words of `word_bytes` bytes in `stage` of `gress` (an
    /// FPGA's block RAM or a DRAM region; see [`MemoryDecl`]).
    #[allow(clippy::too_many_arguments)]
    pub fn memory(&mut self, name: &str, gress: Gress, stage: u8, kind: MemoryKind, words: u32, word_bytes: u32, doc: &str) -> Memory {
        let taken = self.decl.memories.iter().any(|m| m.name == name);
        self.check_name("memory", name, taken);
        if words == 0 || word_bytes == 0 {
            self.errors.push(DeclError::Invalid(format!("memory `{name}` has size 0")));
        }
        let obj = self.obj(stage, gress);
        let idx = self.decl.memories.len() as u16;
        self.decl.memories.push(MemoryDecl { name: name.to_string(), doc: doc.to_string(), gress, stage, kind, words, word_bytes });
        Memory { obj, idx, words, word_bytes }
    }

    /// Declare a payload analyzer: up to `n` items of one packet pass through the stages one
    /// after another (see [`ProgramDecl::items_per_pass`]).
    pub fn items_per_pass(&mut self, n: u32) -> &mut Self {
        self.decl.items_per_pass = n;
        self
    }

    /// A periodic packet generator injecting `packet` every `period_ns` into ingress.
    pub fn packet_generator(&mut self, name: &str, period_ns: u64, packet: Vec<u8>) -> &mut Self {
        if period_ns == 0 {
            self.errors.push(DeclError::Invalid(format!("packet generator `{name}` has period 0")));
        }
        self.decl.packet_generators.push(PktGenDecl { name: name.to_string(), period_ns, packet });
        self
    }

    /// Finish: the declaration, or every structural error found.
    pub fn build(mut self) -> Result<ProgramDecl, Vec<DeclError>> {
        if self.decl.owns_recirculated_passes && self.decl.classify.is_empty() {
            self.errors.push(DeclError::Invalid(
                "owns_recirculated_passes is for an application (a program with classification rules), not the base program".to_string(),
            ));
        }
        if self.errors.is_empty() {
            Ok(self.decl)
        } else {
            Err(self.errors)
        }
    }
}

/// Arguments of [`ProgramBuilder::table`].
pub struct TableSpec<'a> {
    pub name: &'a str,
    pub doc: &'a str,
    pub gress: Gress,
    pub stage: u8,
    pub size: u32,
    /// `(field name, bits, match kind)` in key order.
    pub keys: &'a [(&'a str, u32, MatchKind)],
    pub actions: &'a [ActionId],
    pub default_action: (ActionId, &'a [u64]),
    pub const_default: bool,
}
