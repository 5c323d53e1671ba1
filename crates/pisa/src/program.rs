//! Programs and program sets.
//!
//! A switch runs a *set* of programs in one pipeline, as one compiled P4 program would:
//! the base program (the one without classification rules, normally `forward`) runs on
//! every packet; the parser hands packets matching an application's rules (UDP port, ToS
//! bit, EtherType) to that application as well, after the base program. The application
//! sees the base program's forwarding decision and may keep or override it. Both blocks
//! are placed from stage 0 in parallel, as a compiler places independent control blocks,
//! so their resources add up per stage.

use std::collections::HashMap;
use std::sync::Arc;

use serde::Serialize;

use crate::decl::{ClassifyRule, ProgramDecl};
use crate::pass::{Pass, Traced, Untraced};
use crate::pipe::{Batch, BatchRan};
use crate::resources::ResourceReport;
use crate::target::Target;

/// A data-plane program: a declaration and the two control blocks.
pub trait Program: Send + Sync + 'static {
    fn decl(&self) -> &ProgramDecl;
    /// Ingress control: one pass of one packet.
    fn ingress(&self, pass: &mut Pass<'_>);
    /// Egress control: one pass of one copy leaving by `pass.egress_port()`.
    fn egress(&self, _pass: &mut Pass<'_>) {}
    /// Ingress control with the trace hooks compiled out: the pipe runs it while no trace
    /// session is armed. It must do exactly what `ingress` does. The default runs
    /// `ingress` itself (whose hooks then test a trace id of 0); a program removes the
    /// hooks' tests by writing its control once, generic over the pass
    /// (`fn control<M: TraceMode>(&self, pass: &mut Pass<'_, M>)`), and calling it from
    /// both `ingress` and `ingress_untraced` ([`controls_by_trace_mode!`] writes both).
    fn ingress_untraced(&self, pass: &mut Pass<'_, Untraced>) {
        self.ingress(pass.as_traced())
    }
    /// Egress control with the trace hooks compiled out (see [`Program::ingress_untraced`]).
    fn egress_untraced(&self, pass: &mut Pass<'_, Untraced>) {
        self.egress(pass.as_traced())
    }
    /// A pipe's batch loop with this program's `ingress`/`egress` called directly: the
    /// default is compiled per program type, so the pipe crosses one virtual call per batch
    /// instead of one per packet. Not to be overridden (an override cannot make a
    /// [`BatchRan`]); the loop and every check it makes per packet are the pipe's.
    #[doc(hidden)]
    fn run_batch(&self, batch: &mut Batch<'_, '_, Traced>) -> BatchRan {
        batch.run(Some(self))
    }
    /// The same loop with the trace hooks compiled out, for a batch run while no trace
    /// session is armed (`ingress_untraced`/`egress_untraced` called directly).
    #[doc(hidden)]
    fn run_batch_untraced(&self, batch: &mut Batch<'_, '_, Untraced>) -> BatchRan {
        batch.run(Some(self))
    }
}

/// Inside `impl Program for P`: `ingress` and `ingress_untraced` (with `egress`, also the
/// egress pair) as calls of the program's control block written once for both trace
/// modes, `fn ingress_control<M: TraceMode>(&self, pass: &mut Pass<'_, M>)` (and
/// `egress_control`), inlined into the pipe's batch loop.
#[macro_export]
macro_rules! controls_by_trace_mode {
    (ingress) => {
        #[inline(always)]
        fn ingress(&self, pass: &mut $crate::Pass<'_>) {
            self.ingress_control(pass)
        }
        #[inline(always)]
        fn ingress_untraced(&self, pass: &mut $crate::Pass<'_, $crate::Untraced>) {
            self.ingress_control(pass)
        }
    };
    (egress) => {
        #[inline(always)]
        fn egress(&self, pass: &mut $crate::Pass<'_>) {
            self.egress_control(pass)
        }
        #[inline(always)]
        fn egress_untraced(&self, pass: &mut $crate::Pass<'_, $crate::Untraced>) {
            self.egress_control(pass)
        }
    };
    ($($gress:ident),+) => {
        $($crate::controls_by_trace_mode!($gress);)+
    };
}

/// P4Runtime id prefixes (p4info.proto, `P4Ids.Prefix`).
pub mod id_prefix {
    pub const ACTION: u32 = 0x01;
    pub const TABLE: u32 = 0x02;
    pub const REGISTER: u32 = 0x16;
    pub const DIGEST: u32 = 0x17;
    pub const ACTION_PROFILE: u32 = 0x11;
}

/// The P4Runtime ids of one program's objects, in declaration order.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ProgramIds {
    pub tables: Vec<u32>,
    pub actions: Vec<u32>,
    pub registers: Vec<u32>,
    pub digests: Vec<u32>,
    pub action_profiles: Vec<u32>,
}

/// What a P4Runtime id names: program index and object index within it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjAddr {
    pub program: u8,
    pub index: u16,
}

/// An ordered set of programs sharing one pipeline.
pub struct ProgramSet {
    programs: Vec<Arc<dyn Program>>,
    base: Option<u8>,
    rules: Vec<(ClassifyRule, u8)>,
    ids: Vec<ProgramIds>,
    by_id: HashMap<u32, ObjAddr>,
    max_depth: usize,
    /// Per-program constants the packet path needs, copied out of the declarations so the
    /// hot path does not reach through the trait object for them.
    depth: Vec<usize>,
    recirc_limit: Vec<Option<u32>>,
    owns_recirc: Vec<bool>,
}

/// Why a set of programs cannot be loaded together.
#[derive(Debug, thiserror::Error)]
pub enum SetError {
    #[error("program `{0}` appears twice")]
    Duplicate(String),
    #[error("programs `{0}` and `{1}` are both base programs (no classification rules); a set has at most one")]
    TwoBases(String, String),
    #[error("at most 254 programs in a set")]
    TooMany,
    /// The set's objects do not fit the target (each problem names the objects).
    #[error("the programs do not fit {target}: {}", problems.join("; "))]
    DoesNotFit { target: String, problems: Vec<String> },
}

fn fnv1a(s: &str) -> u32 {
    s.bytes().fold(0x811C_9DC5u32, |h, b| (h ^ b as u32).wrapping_mul(0x0100_0193))
}

impl ProgramSet {
    /// Load `programs` for `target`: refused, before any packet, if their objects do not
    /// fit it (a stage beyond the target's pipeline, more of a resource in a stage than it
    /// has, ...; see [`ResourceReport`]), with a message naming the objects.
    pub fn load_on(programs: Vec<Arc<dyn Program>>, target: &Target) -> Result<ProgramSet, SetError> {
        let set = ProgramSet::new(programs)?;
        let decls: Vec<&ProgramDecl> = set.programs.iter().map(|p| p.decl()).collect();
        let report = ResourceReport::new(&decls, target);
        if !report.fits {
            return Err(SetError::DoesNotFit { target: target.name.to_string(), problems: report.problems });
        }
        Ok(set)
    }

    /// Load `programs` with no target's limits (the model's own: see [`ProgramSet::load_on`]).
    pub fn new(programs: Vec<Arc<dyn Program>>) -> Result<ProgramSet, SetError> {
        if programs.len() > 254 {
            return Err(SetError::TooMany);
        }
        let mut base: Option<u8> = None;
        let mut rules = Vec::new();
        for (i, p) in programs.iter().enumerate() {
            let d = p.decl();
            if programs[..i].iter().any(|q| q.decl().name == d.name) {
                return Err(SetError::Duplicate(d.name.clone()));
            }
            if d.classify.is_empty() {
                if let Some(b) = base {
                    return Err(SetError::TwoBases(programs[b as usize].decl().name.clone(), d.name.clone()));
                }
                base = Some(i as u8);
            }
            for r in &d.classify {
                rules.push((r.clone(), i as u8));
            }
        }
        // Ids: the prefix and 24 bits of a hash of the qualified name, so an object keeps its
        // id across program sets; collisions move to the next free id.
        let mut by_id = HashMap::new();
        let mut ids = Vec::new();
        for (pi, p) in programs.iter().enumerate() {
            let d = p.decl();
            let mut assign = |prefix: u32, name: &str, index: usize| -> u32 {
                let mut id = (prefix << 24) | (fnv1a(&format!("{}.{}", d.name, name)) & 0x00FF_FFFF);
                while by_id.contains_key(&id) || id & 0x00FF_FFFF == 0 {
                    id = (prefix << 24) | ((id + 1) & 0x00FF_FFFF);
                }
                by_id.insert(id, ObjAddr { program: pi as u8, index: index as u16 });
                id
            };
            let mut pid = ProgramIds::default();
            for (i, t) in d.tables.iter().enumerate() {
                pid.tables.push(assign(id_prefix::TABLE, &t.name, i));
            }
            for (i, a) in d.actions.iter().enumerate() {
                pid.actions.push(assign(id_prefix::ACTION, &a.name, i));
            }
            for (i, r) in d.registers.iter().enumerate() {
                pid.registers.push(assign(id_prefix::REGISTER, &r.name, i));
            }
            for (i, g) in d.digests.iter().enumerate() {
                pid.digests.push(assign(id_prefix::DIGEST, &g.name, i));
            }
            for (i, a) in d.action_profiles.iter().enumerate() {
                pid.action_profiles.push(assign(id_prefix::ACTION_PROFILE, &a.name, i));
            }
            ids.push(pid);
        }
        let depth: Vec<usize> = programs.iter().map(|p| p.decl().parser.depth_bytes as usize).collect();
        let recirc_limit = programs.iter().map(|p| p.decl().max_recirculations).collect();
        let owns_recirc = programs.iter().map(|p| p.decl().owns_recirculated_passes && !p.decl().classify.is_empty()).collect();
        let max_depth = depth.iter().copied().max().unwrap_or(0);
        Ok(ProgramSet { programs, base, rules, ids, by_id, max_depth, depth, recirc_limit, owns_recirc })
    }

    pub fn len(&self) -> usize {
        self.programs.len()
    }
    pub fn is_empty(&self) -> bool {
        self.programs.is_empty()
    }
    pub fn program(&self, i: usize) -> &Arc<dyn Program> {
        &self.programs[i]
    }
    pub fn programs(&self) -> &[Arc<dyn Program>] {
        &self.programs
    }
    pub fn decl(&self, i: usize) -> &ProgramDecl {
        self.programs[i].decl()
    }
    pub fn base(&self) -> Option<u8> {
        self.base
    }
    pub fn ids(&self, i: usize) -> &ProgramIds {
        &self.ids[i]
    }
    pub fn names(&self) -> Vec<String> {
        self.programs.iter().map(|p| p.decl().name.clone()).collect()
    }
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.programs.iter().position(|p| p.decl().name == name)
    }
    /// Parse depth of program `i`, in bytes.
    #[inline]
    pub fn parse_depth(&self, i: usize) -> usize {
        self.depth[i]
    }
    /// Most recirculations a packet of program `i` may make (None: unbounded).
    #[inline]
    pub fn recirc_limit(&self, i: usize) -> Option<u32> {
        self.recirc_limit[i]
    }
    /// Whether program `i` owns the recirculated passes of its packets
    /// ([`ProgramDecl::owns_recirculated_passes`]); false for an index out of range.
    #[inline]
    pub fn owns_recirculated_passes(&self, i: usize) -> bool {
        self.owns_recirc.get(i).copied().unwrap_or(false)
    }
    /// Deepest parse among the programs.
    pub fn max_parse_depth(&self) -> usize {
        self.max_depth
    }

    /// Resolve a P4Runtime id of the given prefix.
    pub fn resolve(&self, id: u32, prefix: u32) -> Option<ObjAddr> {
        if id >> 24 != prefix {
            return None;
        }
        self.by_id.get(&id).copied()
    }

    /// The program owning a frame (its index), or None for ordinary traffic.
    #[inline]
    pub fn classify(&self, frame: &[u8]) -> Option<u8> {
        if self.rules.is_empty() || frame.len() < 14 {
            return None;
        }
        let et = u16::from_be_bytes([frame[12], frame[13]]);
        let ip = if et == 0x0800 && frame.len() >= 34 && frame[14] >> 4 == 4 { Some(&frame[14..]) } else { None };
        let udp_dport = ip.and_then(|ip| {
            let ihl = (ip[0] & 0x0F) as usize * 4;
            // First fragment only: later fragments carry no UDP header.
            let frag_off = u16::from_be_bytes([ip[6], ip[7]]) & 0x1FFF;
            if ip[9] == 17 && frag_off == 0 && ihl >= 20 && ip.len() >= ihl + 8 {
                Some(u16::from_be_bytes([ip[ihl + 2], ip[ihl + 3]]))
            } else {
                None
            }
        });
        for (r, owner) in &self.rules {
            if r.ethertype.is_some_and(|e| e != et) {
                continue;
            }
            if let Some((mask, value)) = r.ipv4_tos {
                match ip {
                    Some(ip) if ip[1] & mask == value => {}
                    _ => continue,
                }
            }
            if let Some(proto) = r.ip_protocol {
                match ip {
                    Some(ip) if ip[9] == proto => {}
                    _ => continue,
                }
            }
            if let Some((lo, hi)) = r.udp_dst_port {
                match udp_dport {
                    Some(p) if p >= lo && p <= hi => {}
                    _ => continue,
                }
            }
            return Some(*owner);
        }
        None
    }

    /// The declarations and ids as JSON: what the control plane turns into a P4Info.
    pub fn to_json(&self) -> serde_json::Value {
        let progs: Vec<_> =
            self.programs.iter().enumerate().map(|(i, p)| serde_json::json!({ "decl": p.decl(), "ids": self.ids[i] })).collect();
        serde_json::json!({
            "programs": progs,
            "base": self.base.map(|b| self.programs[b as usize].decl().name.clone()),
        })
    }
}
