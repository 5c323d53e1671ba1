//! `netsha`: in-switch answer reduction and aggregation for distributed LSH search
//! (Zhang et al., NetSHa; paper §3–§4, Algorithms 1 and 2).
//!
//! Layout (all ingress):
//! - stage 0: `qid_hash` (CRC-32 of the QID), `agent` (table: where timer packets go);
//!   built for two condition units (Tofino 1) with two ways: `qid_1` (way 1's owners)
//! - stage 1: `qid` (owners of the query's set of candidate registers, [`selection`]), or
//!   `qid_0` (way 0's) on Tofino 1; `sweep` (timer cursor)
//! - stage 2: `weight_0` (Algorithm 2's weight of way 0), `replacements` ([`best_effort`]),
//!   `epoch` (phase 2's tightening of r.T, [`sort_reduce::EpochAlu`])
//! - stage 3: `weight_1` (way 1's, compared with way 0's), `threshold` (r.T), `progress`
//!   (r.k, commits pending)
//! - stage 4: `born` (claim time and owner, [`timer`]), `state` (held answers, tombstone;
//!   locked while a phase-1 send is in flight, [`sort_reduce`])
//! - stages 5 … 5+n: `slot_d_i` (distance codes) in stage 5+i, `slot_id_i` (data ids) in
//!   stage 6+i
//! - stage 5+n: `answer_events`, `emit_events` (counters the control plane reads)
//!
//! How a packet goes through and what a real switch could not do: docs/netsha.md,
//! "The switch program in brief".

pub mod best_effort;
pub mod path;
pub mod selection;
pub mod slots;
pub mod sort_reduce;
pub mod timer;

use pisa::decl::TableSpec;
use pisa::packet::{PORT_PKTGEN, PORT_RECIRC};
use pisa::TraceMode;
use pisa::{
    ActionId, ClassifyRule, DropCode, DualCell, Gress, HashAlgo, HashUnit, MatchKind, Pass, Program, ProgramBuilder, ProgramDecl, Staged,
    Table,
};
use pisa::{Cmp, Cond, Op, OutputSource, Pred, Salu, SaluOutput, SaluProgram, Src, Update};
use wire::netsha::{self as nw, ANSWER_LEN, BLOCK_HEADER_LEN, MAX_ANSWERS};
use wire::L2_L4_LEN;

use best_effort::BestEffortAlu;
use selection::{
    decode_lookup, decode_probe, outcome, split_flags, tag, QidCas0, QidCas1, QidCasWay, QidCheck, QidClaim, QidLookup1, QidLookup2,
    QidProbe, Selected, WeightAdd, WeightHeavier, WeightRead, WeightSet, FREE,
};
use slots::{decode_distance, encode_distance, valid_distance, SlotDistanceAlu, SlotIdAlu, EMPTY};
use sort_reduce::{
    final_flush_select, gate, held_outcome, send, send_operand, EpochAlu, Gate, Held, HeldInsert, HeldTomb, HeldUnlock, Params,
    ProgressCommit, ProgressRead, ProgressSend, Reduction, SetTo, Step, ThresholdAlu,
};
use timer::{age_operand, now_us, BornAge, BornAgeWrapped, BornOwner, BornSet, SweepAlu};

pub use sort_reduce::Reduction as ReductionMode;

/// Most slots per logical register this program supports.
pub const MAX_SLOTS: usize = 32;
/// Ethernet + IPv4 + UDP + Query#.
pub const MIN_LEN: usize = L2_L4_LEN + nw::HEADER_LEN;
/// UDP source port of the timer packets the generator emits.
pub const TIMER_SRC_PORT: u16 = 0x4E53;
/// Clone session of the split (ingress mirror to the recirculation port): the control
/// plane must configure it (`SwitchPath` and the netsha controller do).
pub const SPLIT_SESSION: u16 = 78;
/// Cells of `split_turn`: splits whose two copies may be in flight at once.
pub const SPLIT_CELLS: u32 = 1024;
/// Multicast group of the query packets: every server, replica id = server index (the
/// control plane configures it); egress prunes the servers not selected.
pub const SELECT_GROUP: u16 = 78;

/// Indexes of `query_events` (`lo`: query packets, `hi`: servers they were sent to).
pub mod query_event {
    /// Queries whose bitmap named some servers.
    pub const SELECTED: u32 = 0;
    /// Queries no selection entry matched: sent to every server.
    pub const ALL_SERVERS: u32 = 1;
    pub const NAMES: [&str; 2] = ["selected", "to_all_servers"];
}

/// Indexes of `answer_events`: what happened to the answer of a pass.
pub mod answer_event {
    pub const INSERTED: u32 = 0;
    pub const DROPPED: u32 = 1;
    pub const BYPASS_COLLISION: u32 = 2;
    pub const BYPASS_TOMB: u32 = 3;
    pub const BYPASS_NO_ROOM: u32 = 4;
    pub const BYPASS_BUDGET: u32 = 5;
    pub const BYPASS_TOO_DEEP: u32 = 6;
    pub const REPLACEMENT: u32 = 7;
    pub const COMMIT: u32 = 8;
    pub const TIMER_RELEASE: u32 = 9;
    pub const CLAIM: u32 = 10;
    pub const BYPASS_BAD_QID: u32 = 11;
    /// A packet without room for a register's output split in two (clone, §3.3 full packets).
    pub const SPLIT: u32 = 12;
    /// Tofino 1's two-array lookup found way 0 taken and way 1 free: the claim of way 1
    /// goes to the next pass (a counted recirculation).
    pub const WAY1_CLAIM_PASS: u32 = 13;
    /// An answer filled its register in phase 1: the register is locked and the send made
    /// on the answer's next pass (a counted recirculation; sort_reduce.rs).
    pub const SEND_PASS: u32 = 14;
    /// An answer met its register locked by a send in flight: it goes around again.
    pub const SEND_WAIT: u32 = 15;
    /// A phase-2 epoch completed and r.T fell to its worst answer (sort_reduce.rs
    /// `EpochAlu`; counted on the pass that tightens, whether or not r.T moved).
    pub const TIGHTEN: u32 = 16;
    pub const NAMES: [&str; 17] = [
        "inserted",
        "dropped_by_threshold",
        "bypass_collision",
        "bypass_replacing",
        "bypass_no_room",
        "bypass_recirculation_budget",
        "bypass_too_deep",
        "replacements",
        "commits",
        "timer_releases",
        "claims",
        "bypass_unreducible_qid",
        "splits",
        "way1_claim_passes",
        "send_passes",
        "send_waits",
        "tightenings",
    ];
}

/// Indexes of `emit_events` (`lo`: answers sent, `hi`: answers cleared unsent).
pub mod emit_event {
    pub const GA: u32 = 0;
    pub const FINAL_FLUSH: u32 = 1;
    pub const ALL: u32 = 2;
    pub const VICTIM: u32 = 3;
    pub const TIMER: u32 = 4;
    pub const NAMES: [&str; 5] = ["ga", "final_flush", "full_phase2", "replaced_victim", "timer"];
}

/// The program's parameters (paper Table 1 by default).
#[derive(Clone, Debug, PartialEq)]
pub struct NetshaConfig {
    /// Logical registers (queries reduced at once).
    pub registers: u32,
    /// Candidate registers per query (Algorithm 2's choice runs over them): 1 or 2; the
    /// registers form registers / ways sets, hash(QID) picks the set.
    pub ways: u32,
    /// Slots per logical register, n = p + q.
    pub slots: u32,
    /// GA slots, p.
    pub ga: u32,
    /// Answers the agent returns, K.
    pub k: u32,
    /// Concurrency parameter: H = λ × registers.
    pub lambda: f64,
    pub reduction: Reduction,
    /// A register's answers are sent at the latest this long after it was claimed.
    pub timeout_ns: u64,
    /// Timer packet generator period (0: no timer).
    pub timer_period_ns: u64,
    /// Parse depth in bytes: the longest packet reduced.
    pub parse_depth: u32,
    /// Recirculations declared (per packet).
    pub max_recirculations: u32,
    /// Program name (several switches on a path may each load a differently named copy).
    pub name: String,
    /// L: LSH tables, one server-selection table each (§4 "Query server selection"); 0: none.
    pub tables: u32,
    /// Entries per selection table (bucket keys of one LSH table held by any server).
    pub select_size: u32,
    /// Condition units of the stateful ALU this program is built for: 4 (Tofino 2) or 2
    /// (Tofino 1). The two-way lookup of `qid` needs 4; with fewer each way's owners are
    /// an array of their own and a claim of way 1 takes a second pass (see `selection.rs`).
    pub salu_conditions: u32,
    /// Phase 2 lowers r.T to the worst answer of each ceil(K / n) full sends (sort_reduce.rs
    /// `EpochAlu`; one more recirculation per phase-2 send). Off: r.T stays the worst of
    /// the first K sent, as in Algorithm 1.
    pub tighten: bool,
}

impl Default for NetshaConfig {
    /// What fits tofino1 (issue 19: the default must): Table 1's registers, K and λ with 6
    /// slots (p = 4; 12 slots need 18 stages), a 256-byte parse and two condition units.
    /// Table 1 as the paper gives it is [`NetshaConfig::unbounded`].
    fn default() -> Self {
        NetshaConfig { slots: 6, ga: 4, parse_depth: 256, salu_conditions: 2, name: "netsha".into(), ..NetshaConfig::unbounded() }
    }
}

impl NetshaConfig {
    /// Table 1 as the paper gives it (100 registers, 12 slots, p = 8, K = 50) with a
    /// 1,514-byte parse and four condition units: does not fit tofino1 (18 stages, the
    /// parse depth, the PHV). Program `netsha-unbounded`.
    pub fn unbounded() -> NetshaConfig {
        NetshaConfig {
            registers: 100,
            ways: 2,
            slots: 12,
            ga: 8,
            k: 50,
            lambda: 0.2,
            reduction: Reduction::Exact,
            // A register's answers wait at most 10 ms + 100 × 100 µs; 10,000 timer packets/s.
            timeout_ns: 10_000_000,
            timer_period_ns: 100_000,
            parse_depth: 1514,
            max_recirculations: 250,
            name: "netsha-unbounded".into(),
            tables: 10,
            select_size: 4096,
            salu_conditions: 4,
            tighten: true,
        }
    }

    /// The default configuration under the name `netsha-tofino1` (kept: it predates the
    /// default fitting tofino1).
    pub fn tofino1() -> NetshaConfig {
        NetshaConfig { name: "netsha-tofino1".into(), ..NetshaConfig::default() }
    }

    /// Parse `netsha` or `netsha:registers=100,ways=2,slots=12,ga=8,k=50,lambda=0.2,reduction=exact,
    /// timeout_us=1000,period_ns=1000,depth=1514,name=...,conds=4` (also `netsha-tofino1`, the
    /// same base as `netsha`, and `netsha-unbounded`, Table 1's; options may be separated by `;`).
    pub fn from_spec(spec: &str) -> Result<NetshaConfig, String> {
        let (base, args) = spec.split_once(':').unwrap_or((spec, ""));
        let mut c = match base {
            "netsha" => NetshaConfig::default(),
            "netsha-tofino1" => NetshaConfig::tofino1(),
            "netsha-unbounded" => NetshaConfig::unbounded(),
            _ => return Err(format!("not a netsha program: {base}")),
        };
        // `;` too, for program lists that are themselves comma-separated.
        for kv in args.split([',', ';']).filter(|s| !s.is_empty()) {
            let (k, v) = kv.split_once('=').ok_or_else(|| format!("netsha option `{kv}` is not key=value"))?;
            let num = |v: &str| v.parse::<u64>().map_err(|e| format!("netsha option {k}: {e}"));
            match k {
                "registers" | "r" => c.registers = num(v)? as u32,
                "ways" | "w" => c.ways = num(v)? as u32,
                "slots" | "n" => c.slots = num(v)? as u32,
                "ga" | "p" => c.ga = num(v)? as u32,
                "k" => c.k = num(v)? as u32,
                "lambda" => c.lambda = v.parse().map_err(|e| format!("netsha option lambda: {e}"))?,
                "reduction" => c.reduction = Reduction::by_name(v).ok_or_else(|| format!("reduction must be paper|exact|off, not {v}"))?,
                "timeout_us" => c.timeout_ns = num(v)? * 1_000,
                "period_ns" => c.timer_period_ns = num(v)?,
                "depth" => c.parse_depth = num(v)? as u32,
                "recirc" => c.max_recirculations = num(v)? as u32,
                "name" => c.name = v.to_string(),
                "tables" | "l" => c.tables = num(v)? as u32,
                "select_size" => c.select_size = num(v)? as u32,
                "conds" => c.salu_conditions = num(v)? as u32,
                "tighten" => c.tighten = num(v)? != 0,
                _ => return Err(format!("unknown netsha option `{k}`")),
            }
        }
        c.validate()?;
        Ok(c)
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.registers == 0 || self.slots == 0 || self.slots as usize > MAX_SLOTS {
            return Err(format!("need registers >= 1 and 1 <= slots <= {MAX_SLOTS}"));
        }
        if !(1..=2).contains(&self.ways) || !self.registers.is_multiple_of(self.ways) {
            return Err(format!("need ways 1 or 2 dividing registers ({} registers, {} ways)", self.registers, self.ways));
        }
        if self.ga == 0 || self.ga > self.slots {
            return Err("need 1 <= ga <= slots".into());
        }
        if self.k == 0 || self.k > 0x7FFF {
            return Err("need 1 <= k <= 32767".into());
        }
        let room = MIN_LEN + BLOCK_HEADER_LEN + ANSWER_LEN * (self.slots as usize + 1);
        if (self.parse_depth as usize) < room {
            return Err(format!("parse depth {} below the {room} bytes one answer plus one register's output need", self.parse_depth));
        }
        if self.tables as usize > nw::MAX_TABLES || (self.tables > 0 && self.select_size == 0) {
            return Err(format!("need tables <= {} and select_size >= 1", nw::MAX_TABLES));
        }
        if self.tables > 0 && (self.parse_depth as usize) < L2_L4_LEN + nw::query_header_len(self.tables as usize) {
            return Err("parse depth below a query packet's header".into());
        }
        if self.salu_conditions < 2 {
            return Err("need conds >= 2 (the qid lookup tests a tag and a free way)".into());
        }
        if self.max_recirculations > 250 {
            return Err("at most 250 recirculations (the pass counter is 8 bits)".into());
        }
        Ok(())
    }

    fn params(&self) -> Params {
        match self.reduction {
            Reduction::Off => Params { n: self.slots, p: self.slots, k: 0x7FFF, reduce: false },
            _ => Params { n: self.slots, p: self.ga, k: self.k, reduce: true },
        }
    }

    /// Answers per packet (one query block) a server may send so the switch reduces all of
    /// them: the packet must lie within the parse depth, and carries at most 120 answers
    /// (§3.3). A packet that later lacks room for a register's output is split (clone).
    pub fn answers_per_packet(&self) -> usize {
        let room = (self.parse_depth as usize).saturating_sub(MIN_LEN + BLOCK_HEADER_LEN);
        (room / ANSWER_LEN).clamp(1, MAX_ANSWERS)
    }
}

/// Bridged metadata (kept across recirculations).
mod br {
    pub const STARTED: usize = 0;
    pub const INPUTS: usize = 1;
    pub const MODE: usize = 2;
    /// Flags: TIMER_FLAG (a timer packet), SPLIT_FLAG (a copy of a split, role not yet known).
    pub const FLAGS: usize = 3;
    pub const TIMER_FLAG: u8 = 1;
    pub const SPLIT_FLAG: u8 = 2;
    /// A query packet being multicast to the servers (A: the selected servers' bitmap).
    pub const QUERY_FLAG: u8 = 4;
    pub const A: usize = 4;
    pub const B: usize = 8;
    pub const C: usize = 12;
    pub const NORMAL: u8 = 0;
    pub const FORCE_CLAIM: u8 = 1;
    pub const COMMIT: u8 = 2;
    pub const RELEASE: u8 = 3;
    /// The tail copy of a split waits (A: passes left) while the front copy goes on.
    pub const PARK: u8 = 4;
    /// The second pass of a phase-1 send (B: the locked register's index).
    pub const SEND: u8 = 5;
    /// The pass after a full phase-2 send: its worst answer (A) into the register's (B,
    /// owner C) epoch, which may lower r.T.
    pub const TIGHTEN: u8 = 6;
}

/// The `qid` owner tags: one 64-bit cell per set (way 0 lo, way 1 hi), or, for two ways
/// on two-condition ALUs (Tofino 1), one 32-bit array per way (see `selection.rs`).
enum Qid {
    Cell {
        lookup: CellLookup,
        probe: pisa::SaluAction<DualCell, u32, u32, QidProbe>,
        cas0: pisa::SaluAction<DualCell, DualCell, u32, QidCas0>,
        cas1: pisa::SaluAction<DualCell, DualCell, u32, QidCas1>,
    },
    /// `qid_1` (way 1, stage 0) and `qid_0` (way 0, stage 1).
    Split {
        check1: pisa::SaluAction<u32, u32, u32, QidCheck>,
        cas1: pisa::SaluAction<u32, DualCell, u32, QidCasWay>,
        check0: pisa::SaluAction<u32, u32, u32, QidCheck>,
        claim0: pisa::SaluAction<u32, u32, u32, QidClaim>,
        cas0: pisa::SaluAction<u32, DualCell, u32, QidCasWay>,
    },
}

/// The one-cell lookup: one way, or two ways (four condition units).
enum CellLookup {
    One(pisa::SaluAction<DualCell, u32, u32, QidLookup1>),
    Two(pisa::SaluAction<DualCell, u32, u32, QidLookup2>),
}

pub struct Netsha {
    decl: ProgramDecl,
    cfg: NetshaConfig,
    prm: Params,
    h: u32,
    qid_hash: HashUnit,
    sweep: pisa::SaluAction<u32, u32, u32, SweepAlu>,
    agent: Table,
    a_to_agent: ActionId,
    /// Whether this switch reduces (default) or only forwards NetSHa packets (§3.8: a
    /// fabric's controller picks the switches that reduce).
    role: Table,
    a_forward_only: ActionId,
    qid: Qid,
    /// Algorithm 2's weights, way 0 (`weight_0`) and way 1 (`weight_1`, one stage later).
    weight_add: [pisa::SaluAction<u32, (), (), WeightAdd>; 2],
    weight_set: [pisa::SaluAction<u32, u32, (), WeightSet>; 2],
    weight_read: pisa::SaluAction<u32, (), u32, WeightRead>,
    weight_heavier: pisa::SaluAction<u32, u32, u32, WeightHeavier>,
    born_set: pisa::SaluAction<DualCell, DualCell, (), BornSet>,
    born_owner: pisa::SaluAction<DualCell, (), u32, BornOwner>,
    born_age: pisa::SaluAction<DualCell, (u32, u32), u32, BornAge>,
    born_age_wrapped: pisa::SaluAction<DualCell, (u32, u32), u32, BornAgeWrapped>,
    replacements: pisa::SaluAction<u32, (u32, u32), u32, BestEffortAlu>,
    threshold: pisa::SaluAction<u32, (u32, u32), u32, ThresholdAlu>,
    /// Phase 2's tightening of r.T (stage 2, before `threshold`).
    epoch: pisa::SaluAction<DualCell, DualCell, u32, EpochAlu>,
    /// Algorithm 1's state (sort_reduce.rs): r.k and commits pending (`progress`, stage
    /// 3), held answers and the tombstone (`state`, stage 4).
    progress_read: pisa::SaluAction<u32, (), u32, ProgressRead>,
    progress_send: pisa::SaluAction<u32, u32, u32, ProgressSend>,
    progress_commit: pisa::SaluAction<u32, (), (), ProgressCommit>,
    progress_set: pisa::SaluAction<u32, u32, (), SetTo>,
    state_insert: pisa::SaluAction<u32, (u32, u32), u32, HeldInsert>,
    state_unlock: pisa::SaluAction<u32, (u32, u32), u32, HeldUnlock>,
    state_set: pisa::SaluAction<u32, u32, (), SetTo>,
    state_tomb: pisa::SaluAction<u32, (), (), HeldTomb>,
    slot_d: Vec<pisa::SaluAction<u32, (u32, u32), u32, SlotDistanceAlu>>,
    slot_id: Vec<pisa::SaluAction<u32, (u32, u32), u32, SlotIdAlu>>,
    answer_events: pisa::SaluAction<u32, u32, (), AddU32>,
    emit_events: pisa::SaluAction<DualCell, DualCell, (), AddPair>,
    splits: pisa::SaluAction<u32, (), u32, SplitCounterAlu>,
    split_turn: pisa::SaluAction<u32, u32, u32, SplitTurnAlu>,
    select: Vec<Table>,
    a_servers: ActionId,
    /// Egress: a selected query replica's addresses, for a server behind other switches
    /// (replica id -> next hop MAC, this switch's MAC, the server's IPv4); none: kept.
    server_addr: Option<Table>,
    a_to_server: ActionId,
    query_events: pisa::SaluAction<DualCell, DualCell, (), AddPair>,
    d_query_malformed: DropCode,
    d_query_pruned: DropCode,
    d_absorbed: DropCode,
    d_timer_idle: DropCode,
    d_timer_raced: DropCode,
}

pub use pisa::salu::common::{Add as AddU32, AddPair};

/// Numbers the splits (ids from 1).
#[derive(Clone, Copy)]
pub struct SplitCounterAlu;
impl SaluProgram<u32, (), u32> for SplitCounterAlu {
    const SALU: Salu = Salu {
        conds: &[Cond::new(Src::Lo, Cmp::Eq, Src::K(-1))],
        lo: &[Update::set(Pred::C0, Src::K(1)), Update::always(Src::Lo, Op::Add, Src::K(1))],
        hi: &[],
        out: &[SaluOutput::always(OutputSource::NewLo)],
    };
}

/// Which copy of a split this is: the first copy to come back claims the cell with the
/// split's id (returns 0, "first"); the second finds its id there, frees the cell and
/// returns 1 ("second"). A test-and-set, since the clone and the original are identical.
#[derive(Clone, Copy)]
pub struct SplitTurnAlu;
impl SaluProgram<u32, u32, u32> for SplitTurnAlu {
    const SALU: Salu = Salu {
        conds: &[Cond::new(Src::Lo, Cmp::Eq, Src::PhvLo)],
        lo: &[Update::set(Pred::C0, Src::K(0)), Update::set(Pred::ALWAYS, Src::PhvLo)],
        hi: &[],
        out: &[SaluOutput::new(Pred::C0, OutputSource::Predicate)],
    };
}

/// What one pass sends for a register: at most n + 1 answers.
struct SentAnswers {
    qid: u32,
    ids: [u32; MAX_SLOTS + 1],
    codes: [u32; MAX_SLOTS + 1],
    len: usize,
}

impl SentAnswers {
    fn new(qid: u32) -> SentAnswers {
        SentAnswers { qid, ids: [0; MAX_SLOTS + 1], codes: [0; MAX_SLOTS + 1], len: 0 }
    }
    fn push(&mut self, a: DualCell) {
        if a.hi != 0 {
            self.ids[self.len] = a.lo;
            self.codes[self.len] = a.hi;
            self.len += 1;
        }
    }
    fn worst(&self) -> u32 {
        self.codes[..self.len].iter().copied().max().unwrap_or(0)
    }
}

impl Netsha {
    pub fn new() -> Netsha {
        Netsha::with_config(NetshaConfig::default())
    }

    pub fn with_config(cfg: NetshaConfig) -> Netsha {
        cfg.validate().expect("valid netsha config");
        let n = cfg.slots as usize;
        let r = cfg.registers;
        let mut b = ProgramBuilder::new(&cfg.name, "NetSHa: in-switch top-K answer reduction and aggregation for distributed LSH search");
        b.parser(cfg.parse_depth, &[("ethernet", 112), ("ipv4", 160), ("udp", 64), ("netsha", (cfg.parse_depth - L2_L4_LEN as u32) * 8)])
            .metadata_bits(32 * 4 + 64 * (n as u32 + 1))
            .classify(ClassifyRule { ip_protocol: Some(17), ..ClassifyRule::ipv4_tos_bit(nw::TOS_BIT) })
            .max_recirculations(Some(cfg.max_recirculations));
        let qid_hash = b.hash_unit("qid_hash", Gress::Ingress, 0, HashAlgo::Crc32, 32);
        // Stage 1: stage 0's four stateful ALUs go to forward's port counters, split_turn
        // and, on Tofino 1, way 1's owner tags (`qid_1`).
        let sweep_r = b.register::<u32>("sweep", Gress::Ingress, 1, 1, "timer cursor: the register the next timer packet visits");
        let sweep = b.register_action_salu(sweep_r, "next", SweepAlu);
        let a_to_agent =
            b.action("to_agent", &[("port", 9), ("dmac", 48), ("dip", 32), ("dport", 16)], "address a timer packet to the agent");
        let a_none = b.action("no_agent", &[], "no agent configured: timer packets are dropped");
        let agent = b.table(TableSpec {
            name: "agent",
            doc: "where timer packets carrying a register's answers go (one entry, key 0)",
            gress: Gress::Ingress,
            stage: 0,
            size: 1,
            keys: &[("meta.zero", 8, MatchKind::Exact)],
            actions: &[a_to_agent, a_none],
            default_action: (a_none, &[]),
            const_default: false,
        });
        let a_reduce = b.action("reduce", &[], "this switch reduces and aggregates NetSHa packets (the default)");
        let a_forward_only = b.action(
            "forward_only",
            &[],
            "this switch leaves NetSHa packets to the base program's forwarding (a switch on the path that does not reduce)",
        );
        let role = b.table(TableSpec {
            name: "role",
            doc: "whether this switch reduces NetSHa answer packets or only forwards them (one entry, key 0; none: reduce); query packets are selected either way",
            gress: Gress::Ingress,
            stage: 0,
            size: 1,
            keys: &[("meta.zero", 8, MatchKind::Exact)],
            actions: &[a_reduce, a_forward_only],
            default_action: (a_reduce, &[]),
            const_default: false,
        });
        let sets = r / cfg.ways;
        let qid = if cfg.ways == 2 && cfg.salu_conditions < 4 {
            // Way 1 first (stage 0, addressed by the hash unit of the same stage), so way 0's
            // action can depend on it; a claim of way 1 then takes a second pass.
            let q1 = b.register::<u32>(
                "qid_1",
                Gress::Ingress,
                0,
                sets,
                "owner of way 1 of each set (Algorithm 2): QID + 1, 0 = free; checked before way 0",
            );
            let q0 = b.register::<u32>("qid_0", Gress::Ingress, 1, sets, "owner of way 0 of each set (Algorithm 2): QID + 1, 0 = free");
            Qid::Split {
                check1: b.register_action_salu(q1, "check", QidCheck),
                cas1: b.register_action_salu(q1, "cas", QidCasWay),
                check0: b.register_action_salu(q0, "check", QidCheck),
                claim0: b.register_action_salu(q0, "claim", QidClaim),
                cas0: b.register_action_salu(q0, "cas", QidCasWay),
            }
        } else {
            let qid_r = b.register::<DualCell>(
                "qid",
                Gress::Ingress,
                1,
                sets,
                "owners of the candidate registers of each set (Algorithm 2): QID + 1 of way 0 (lo) and way 1 (hi), 0 = free",
            );
            b.cell_fields(&qid_r, &[("way0_qid_plus1", 32), ("way1_qid_plus1", 32)]);
            let lookup = if cfg.ways == 1 {
                CellLookup::One(b.register_action_salu(qid_r, "lookup", QidLookup1))
            } else {
                CellLookup::Two(b.register_action_salu(qid_r, "lookup", QidLookup2))
            };
            Qid::Cell {
                lookup,
                probe: b.register_action_salu(qid_r, "probe", QidProbe),
                cas0: b.register_action_salu(qid_r, "cas_0", QidCas0),
                cas1: b.register_action_salu(qid_r, "cas_1", QidCas1),
            }
        };
        // Way 1's weight one stage after way 0's: the choice of the heaviest compares way 1's
        // weight with way 0's, read into PHV the stage before (selection.rs).
        let w0_r = b.register::<u32>(
            "weight_0",
            Gress::Ingress,
            2,
            sets,
            "Algorithm 2's weight of way 0: data pairs its register has carried since its claim",
        );
        let w1_r = b.register::<u32>("weight_1", Gress::Ingress, 3, sets, "Algorithm 2's weight of way 1 (compared with way 0's)");
        let weight_add = [b.register_action_salu(w0_r, "add", WeightAdd), b.register_action_salu(w1_r, "add", WeightAdd)];
        let weight_set = [b.register_action_salu(w0_r, "set", WeightSet), b.register_action_salu(w1_r, "set", WeightSet)];
        let weight_read = b.register_action_salu(w0_r, "read", WeightRead);
        let weight_heavier = b.register_action_salu(w1_r, "heavier", WeightHeavier);
        // After the weights: the replacement register's owner is read once it is chosen.
        let born_r = b.register::<DualCell>("born", Gress::Ingress, 4, r, "claim time in µs (lo) and owner tag (hi), for the timer");
        b.cell_fields(&born_r, &[("claim_us", 32), ("owner_tag", 32)]);
        let born_set = b.register_action_salu(born_r, "set", BornSet);
        let born_owner = b.register_action_salu(born_r, "owner", BornOwner);
        let born_age = b.register_action_salu(born_r, "expired", BornAge);
        let born_age_wrapped = b.register_action_salu(born_r, "expired_wrapped", BornAgeWrapped);
        let rep_r =
            b.register::<u32>("replacements", Gress::Ingress, 2, 1, "best-effort counter: replacements since a register was last free");
        let replacements = b.register_action_salu(rep_r, "grant", BestEffortAlu);
        let t_r = b.register::<u32>(
            "threshold",
            Gress::Ingress,
            3,
            r,
            "r.T: distance code of the worst answer sent (phase 2 drops at or beyond it)",
        );
        let threshold = b.register_action_salu(t_r, "threshold", ThresholdAlu);
        let e_r = b.register::<DualCell>(
            "epoch",
            Gress::Ingress,
            2,
            r,
            "phase 2's full sends in this epoch (lo) and their worst distance code (hi): r.T falls to it every ceil(K / n) sends",
        );
        b.cell_fields(&e_r, &[("sends", 32), ("worst", 32)]);
        let epoch = b.register_action_salu(e_r, "epoch", EpochAlu);
        // Algorithm 1's state in two arrays, so each action tests at most two conditions:
        // `progress` beside r.T (read before the insert, counts sends and commits), `state`
        // after it (held answers, locked while a phase-1 send is in flight; sort_reduce.rs).
        let pr_r = b.register::<u32>("progress", Gress::Ingress, 3, r, "r.k, answers sent (bits 0-15) | commits pending << 16");
        b.cell_fields(&pr_r, &[("k", 16), ("commits_pending", 16)]);
        let progress_read = b.register_action_salu(pr_r, "read", ProgressRead);
        let progress_send = b.register_action_salu(pr_r, "send", ProgressSend);
        let progress_commit = b.register_action_salu(pr_r, "commit", ProgressCommit);
        let progress_set = b.register_action_salu(pr_r, "set", SetTo);
        let s_r = b.register::<u32>("state", Gress::Ingress, 4, r, "held answers (n: locked by a send in flight) | tombstone << 31");
        b.cell_fields(&s_r, &[("held", 31), ("tombstone", 1)]);
        let state_insert = b.register_action_salu(s_r, "insert", HeldInsert);
        let state_unlock = b.register_action_salu(s_r, "unlock", HeldUnlock);
        let state_set = b.register_action_salu(s_r, "set", SetTo);
        let state_tomb = b.register_action_salu(s_r, "tomb", HeldTomb);
        let mut slot_d = Vec::new();
        let mut slot_id = Vec::new();
        for i in 0..n {
            let d = b.register::<u32>(
                &format!("slot_d_{i}"),
                Gress::Ingress,
                5 + i as u8,
                r,
                "distance code of one answer slot of every logical register (0 = empty); slot 0 the worst",
            );
            slot_d.push(b.register_action_salu(d, "slot_sort", SlotDistanceAlu));
            let id = b.register::<u32>(&format!("slot_id_{i}"), Gress::Ingress, 6 + i as u8, r, "data id of the same slot");
            slot_id.push(b.register_action_salu(id, "follow", SlotIdAlu));
        }
        let ev_stage = 5 + n as u8;
        let ae = b.register::<u32>(
            "answer_events",
            Gress::Ingress,
            ev_stage,
            answer_event::NAMES.len() as u32,
            "per-pass outcomes (see answer_event)",
        );
        let answer_events = b.register_action_salu(ae, "add", AddU32);
        let ee = b.register::<DualCell>(
            "emit_events",
            Gress::Ingress,
            ev_stage,
            emit_event::NAMES.len() as u32,
            "answers sent (lo) and cleared (hi) by cause",
        );
        b.cell_fields(&ee, &[("sent", 32), ("cleared", 32)]);
        let emit_events = b.register_action_salu::<DualCell, DualCell, (), _>(ee, "add", AddPair);
        // Stage 5 (after the state test that decides a split; slot 0's stage has ALUs to spare).
        let sp = b.register::<u32>("splits", Gress::Ingress, 5, 1, "split counter: the id of the last split");
        let splits = b.register_action_salu(sp, "next", SplitCounterAlu);
        let st = b.register::<u32>(
            "split_turn",
            Gress::Ingress,
            0,
            SPLIT_CELLS,
            "split id mod cells: set by the first copy of a split to come back, cleared by the second (which half each keeps)",
        );
        let split_turn = b.register_action_salu(st, "turn", SplitTurnAlu);
        // Query server selection (§4): one exact-match table per LSH table, bucket key ->
        // bitmap of the servers holding that bucket; one lookup each, ORed in stage order.
        let a_servers = b.action("servers", &[("bitmap", 32)], "OR the servers holding this bucket into the query's bitmap");
        let a_no_servers = b.action("no_servers", &[], "no server holds this bucket");
        let mut select = Vec::new();
        for t in 0..cfg.tables {
            let name = format!("select_{t}");
            select.push(b.table(TableSpec {
                name: &name,
                doc: "server selection of LSH table t: the query's bucket key -> bitmap of servers holding it",
                gress: Gress::Ingress,
                stage: t as u8,
                size: cfg.select_size,
                keys: &[("netsha_query.key", 64, MatchKind::Exact)],
                actions: &[a_servers, a_no_servers],
                default_action: (a_no_servers, &[]),
                const_default: false,
            }));
        }
        let a_to_server = b.action(
            "to_server",
            &[("dmac", 48), ("smac", 48), ("dip", 32)],
            "address this replica of a query to its server (next hop MAC, this switch's MAC, the server's IPv4) as plain UDP (ToS bit clear): a server behind other switches",
        );
        let a_keep = b.action("keep_addr", &[], "the replica keeps the query's addresses (a server on this switch's own port)");
        let server_addr = (cfg.tables > 0).then(|| {
            b.table(TableSpec {
                name: "server_addr",
                doc: "replica id (server index) -> the addresses of a selected query's copy to that server, when it is behind other switches (a fabric)",
                gress: Gress::Egress,
                stage: 0,
                size: 32,
                keys: &[("eg_intr_md.rid", 16, MatchKind::Exact)],
                actions: &[a_to_server, a_keep],
                default_action: (a_keep, &[]),
                const_default: false,
            })
        });
        let qe = b.register::<DualCell>(
            "query_events",
            Gress::Ingress,
            cfg.tables as u8,
            query_event::NAMES.len() as u32,
            "query packets (lo) and the servers they went to (hi): selected, or every server (see query_event)",
        );
        b.cell_fields(&qe, &[("packets", 32), ("servers", 32)]);
        let query_events = b.register_action_salu::<DualCell, DualCell, (), _>(qe, "add", AddPair);
        let d_query_malformed = b.drop_reason("netsha_query_malformed");
        let d_query_pruned = b.drop_reason("netsha_query_pruned");
        let d_absorbed = b.drop_reason("netsha_absorbed");
        let d_timer_idle = b.drop_reason("netsha_timer_idle");
        let d_timer_raced = b.drop_reason("netsha_timer_raced");
        if cfg.timer_period_ns > 0 {
            b.packet_generator("netsha_timer", cfg.timer_period_ns, timer_template());
        }
        b.note(&format!(
            "n = {} slots need {} stages (5 for selection, the two ways' weights (with r.T), the timer and state, then one per slot plus one for the last slot's id, which shares it with the counters); tofino1 has 12: up to 6 slots fit",
            n,
            n + 6
        ));
        b.note(&format!(
            "one answer per pass: a packet of A answers makes about A recirculations (declared: {}); the paper parses 120 answers (1447 bytes) in one pass, beyond any real parser (tofino1: 256 bytes)",
            cfg.max_recirculations
        ));
        b.note(&format!(
            "Algorithm 2's scan over all registers becomes a choice among the {} candidate register(s) of the query's set (hash(QID), §4): hit, else the first empty, else the heaviest (most data pairs carried) is replaced; the owner tags of a set share one 64-bit cell",
            cfg.ways
        ));
        b.note(&format!(
            "full packets: a packet with no room for a register's output is split: ingress mirror (clone session {SPLIT_SESSION}, to the recirculation port) and recirculate; the first copy back (split_turn test-and-set) keeps the answers sent so far and the first half of the unprocessed answers, the second the other half (header-stack invalidation); each split adds one packet, both count against the recirculation budget"
        ));
        if cfg.tables > 0 {
            b.note(&format!(
                "query server selection (§4): {} exact-match tables (one per LSH table, 64-bit bucket key, {} entries each) in stages 0..{}, their bitmaps ORed; the query is multicast to group {SELECT_GROUP} (every server, replica id = server index) and egress drops the replicas whose bit is clear (an empty bitmap: every server); up to 32 servers",
                cfg.tables,
                cfg.select_size,
                cfg.tables - 1
            ));
        }
        b.note("register index = CRC-32(QID) mod R; a real target sizes the arrays to a power of two");
        let decl = b.build().expect("netsha declaration is valid");
        let prm = cfg.params();
        let h = best_effort::threshold(cfg.lambda, cfg.registers);
        Netsha {
            decl,
            cfg,
            prm,
            h,
            qid_hash,
            sweep,
            agent,
            a_to_agent,
            role,
            a_forward_only,
            qid,
            weight_add,
            weight_set,
            weight_read,
            weight_heavier,
            born_set,
            born_owner,
            born_age,
            born_age_wrapped,
            replacements,
            threshold,
            epoch,
            progress_read,
            progress_send,
            progress_commit,
            progress_set,
            state_insert,
            state_unlock,
            state_set,
            state_tomb,
            slot_d,
            slot_id,
            answer_events,
            emit_events,
            splits,
            split_turn,
            select,
            a_servers,
            server_addr,
            a_to_server,
            query_events,
            d_query_malformed,
            d_query_pruned,
            d_absorbed,
            d_timer_idle,
            d_timer_raced,
        }
    }

    pub fn config(&self) -> &NetshaConfig {
        &self.cfg
    }

    /// Slot_Sort over slots 0..upto: insert the carried answer; returns what comes out.
    fn insert<M: TraceMode>(&self, p: &mut Pass<'_, M>, idx: u32, c: DualCell, upto: usize) -> DualCell {
        let (mut cd, mut cid) = (c.hi, c.lo);
        for i in 0..upto {
            let out = p.execute(&self.slot_d[i], idx, (cd, slots::OP_INSERT)).get();
            if out != cd {
                cid = p.execute(&self.slot_id[i], idx, (cid, slots::OP_SWAP)).get();
                cd = out;
            }
        }
        DualCell::new(cid, cd)
    }

    /// Take slot i's answer out, leaving it empty.
    fn take<M: TraceMode>(&self, p: &mut Pass<'_, M>, idx: u32, i: usize) -> DualCell {
        let d = p.execute(&self.slot_d[i], idx, (0, slots::OP_TAKE)).get();
        let id = p.execute(&self.slot_id[i], idx, (0, slots::OP_TAKE)).get();
        DualCell::new(id, d)
    }

    // ---- packet layout (what the deparser emits) -------------------------------------

    fn qcount<M: TraceMode>(p: &Pass<'_, M>) -> u8 {
        p.hdr()[L2_L4_LEN]
    }

    /// Remove the first answer of the first block (and the block if it is then empty).
    fn consume_front<M: TraceMode>(p: &mut Pass<'_, M>) {
        let len = p.hdr().len();
        let at = L2_L4_LEN + nw::HEADER_LEN;
        let num = u16::from_be_bytes([p.hdr()[at + 4], p.hdr()[at + 5]]);
        let h = p.hdr_mut();
        if num <= 1 {
            h.copy_within(at + BLOCK_HEADER_LEN + ANSWER_LEN * num as usize..len, at);
            let cut = BLOCK_HEADER_LEN + ANSWER_LEN * num as usize;
            h[L2_L4_LEN] -= 1;
            p.resize_hdr(len - cut);
            let b = p.bridged_mut();
            b[br::INPUTS] -= 1;
        } else {
            h.copy_within(at + BLOCK_HEADER_LEN + ANSWER_LEN..len, at + BLOCK_HEADER_LEN);
            h[at + 4..at + 6].copy_from_slice(&(num - 1).to_be_bytes());
            p.resize_hdr(len - ANSWER_LEN);
        }
    }

    /// Drop leading empty input blocks.
    fn skip_empty_inputs<M: TraceMode>(p: &mut Pass<'_, M>) {
        while p.bridged()[br::INPUTS] > 0 {
            let at = L2_L4_LEN + nw::HEADER_LEN;
            if p.hdr()[at + 4] != 0 || p.hdr()[at + 5] != 0 {
                return;
            }
            let len = p.hdr().len();
            let h = p.hdr_mut();
            h.copy_within(at + BLOCK_HEADER_LEN..len, at);
            h[L2_L4_LEN] -= 1;
            p.resize_hdr(len - BLOCK_HEADER_LEN);
            p.bridged_mut()[br::INPUTS] -= 1;
        }
    }

    /// Append a block of answers (id, code) for `qid`.
    fn append<M: TraceMode>(p: &mut Pass<'_, M>, out: &SentAnswers) {
        if out.len == 0 {
            return;
        }
        let len = p.hdr().len();
        if !p.resize_hdr(len + BLOCK_HEADER_LEN + ANSWER_LEN * out.len) {
            return; // room was checked before the registers were touched
        }
        let h = p.hdr_mut();
        h[L2_L4_LEN] += 1;
        h[len..len + 4].copy_from_slice(&out.qid.to_be_bytes());
        h[len + 4..len + 6].copy_from_slice(&(out.len as u16).to_be_bytes());
        for i in 0..out.len {
            nw::put_answer(h, len + BLOCK_HEADER_LEN + ANSWER_LEN * i, out.ids[i], decode_distance(out.codes[i]));
        }
    }

    /// Move the whole front block, unreduced, to the output (the end of the packet): every
    /// answer in it belongs to the same query, hence to the same register. Returns its
    /// number of answers.
    fn bypass_front_block<M: TraceMode>(p: &mut Pass<'_, M>) -> u32 {
        let at = L2_L4_LEN + nw::HEADER_LEN;
        let h = p.hdr_mut();
        let num = u16::from_be_bytes([h[at + 4], h[at + 5]]);
        let blen = BLOCK_HEADER_LEN + ANSWER_LEN * num as usize;
        h[at..].rotate_left(blen);
        p.bridged_mut()[br::INPUTS] -= 1;
        num as u32
    }

    /// The packet leaves: lengths and checksum rewritten, or dropped if nothing is left.
    fn finish<M: TraceMode>(&self, p: &mut Pass<'_, M>) {
        if Self::qcount(p) == 0 {
            p.drop(self.d_absorbed);
            return;
        }
        let len = p.hdr().len();
        let h = p.hdr_mut();
        h[16..18].copy_from_slice(&((len - 14) as u16).to_be_bytes());
        h[38..40].copy_from_slice(&((len - 34) as u16).to_be_bytes());
        h[40..42].copy_from_slice(&[0, 0]); // UDP checksum optional over IPv4
        let mut ip = wire::Ipv4Packet::new_unchecked(&mut h[14..34]);
        ip.fill_checksum();
    }

    fn count<M: TraceMode>(&self, p: &mut Pass<'_, M>, ev: u32) {
        p.execute(&self.answer_events, ev, 1);
    }

    fn count_emit<M: TraceMode>(&self, p: &mut Pass<'_, M>, cause: u32, sent: usize, cleared: usize) {
        p.execute(&self.emit_events, cause, DualCell::new(sent as u32, cleared as u32));
    }

    /// First pass of a server's packet: the parser's checks.
    fn start<M: TraceMode>(&self, p: &mut Pass<'_, M>) -> bool {
        let h = p.hdr();
        let ok_l3 = h.len() >= MIN_LEN && wire::is_ipv4_udp(h);
        if !ok_l3 {
            p.drop(DropCode::MALFORMED);
            return false;
        }
        if p.payload_len() > 0 {
            // Longer than the parser reaches: forwarded unreduced.
            self.count(p, answer_event::BYPASS_TOO_DEEP);
            return false;
        }
        let udp_len = u16::from_be_bytes([h[38], h[39]]) as usize;
        let ip_len = u16::from_be_bytes([h[16], h[17]]) as usize;
        if h.len() == 60 && ip_len + 14 < 60 && ip_len >= 28 {
            // Ethernet padding of a short frame: the deparser does not emit it.
            p.resize_hdr(ip_len + 14);
        }
        let h = p.hdr();
        if udp_len != h.len() - 34 || ip_len != h.len() - 14 {
            p.drop(DropCode::MALFORMED);
            return false;
        }
        let Ok(pkt) = nw::NetshaPacket::new_checked(&h[L2_L4_LEN..]) else {
            p.drop(DropCode::MALFORMED);
            return false;
        };
        let bad = pkt.blocks().any(|b| (0..b.num).any(|i| !valid_distance(pkt.answer(&b, i).1)));
        if bad {
            p.drop(DropCode::MALFORMED);
            return false;
        }
        let q = pkt.query_count();
        let b = p.bridged_mut();
        *b = [0; pisa::packet::BRIDGED_BYTES];
        b[br::STARTED] = 1;
        b[br::INPUTS] = q;
        true
    }

    fn ga(b: &[u8; 16], at: usize) -> u32 {
        u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }
    fn sa(b: &mut [u8; 16], at: usize, v: u32) {
        b[at..at + 4].copy_from_slice(&v.to_be_bytes());
    }

    /// Go around again if there is more to do, else leave.
    fn next_or_finish<M: TraceMode>(&self, p: &mut Pass<'_, M>) {
        if p.bridged()[br::MODE] != br::NORMAL || p.bridged()[br::INPUTS] > 0 {
            p.recirculate();
        } else {
            self.finish(p);
        }
    }

    /// The query's set of candidate registers.
    fn index<M: TraceMode>(&self, p: &mut Pass<'_, M>, qid: u32) -> u32 {
        p.hash(&self.qid_hash, &qid.to_be_bytes()).get() % (self.cfg.registers / self.cfg.ways)
    }

    /// A register index as (set, way).
    fn set_way(&self, idx: u32) -> (u32, u32) {
        (idx / self.cfg.ways, idx % self.cfg.ways)
    }

    /// Compare-and-swap on one register's owner tag (see [`selection::QidCas0`]).
    fn owner_cas<M: TraceMode>(&self, p: &mut Pass<'_, M>, idx: u32, new: u32, expected: u32) -> u32 {
        let (set, way) = self.set_way(idx);
        let x = DualCell::new(new, expected);
        match &self.qid {
            Qid::Cell { cas0, cas1, .. } => if way == 0 { p.execute(cas0, set, x) } else { p.execute(cas1, set, x) }.get(),
            Qid::Split { cas0, cas1, .. } => if way == 0 { p.execute(cas0, set, x) } else { p.execute(cas1, set, x) }.get(),
        }
    }

    /// Algorithm 2's lookup of the query's set: hit, else claim the first free way (as
    /// (kind, way), see [`decode_lookup`]). With the ways in two arrays, a claim of way 1 is
    /// only reported here ([`Self::second_pass_claim`]): the next pass makes it.
    fn lookup<M: TraceMode>(&self, p: &mut Pass<'_, M>, set: u32, my: u32) -> (u32, u32) {
        let ways = self.cfg.ways;
        match &self.qid {
            Qid::Cell { lookup: CellLookup::One(a), .. } => decode_lookup(p.execute(a, set, my).get(), ways),
            Qid::Cell { lookup: CellLookup::Two(a), .. } => decode_lookup(p.execute(a, set, my).get(), ways),
            Qid::Split { check1, check0, claim0, .. } => {
                // Way 1's word (stage 0) picks way 0's action (stage 1): never claim way 0
                // for a query that holds way 1.
                let f1 = p.execute(check1, set, my);
                let f0 = if f1.get() & 1 != 0 { p.execute(check0, set, my) } else { p.execute(claim0, set, my) };
                decode_lookup(split_flags(f0.get(), f1.get()), ways)
            }
        }
    }

    /// Whether a lookup's result is a claim of way 1 still to be made (two arrays only).
    fn second_pass_claim(&self, kind: u32, way: u32) -> bool {
        matches!(self.qid, Qid::Split { .. }) && kind == selection::KIND_CLAIMED && way == 1
    }

    /// Whether the query holds a register of its set, and which way; never claims.
    fn probe<M: TraceMode>(&self, p: &mut Pass<'_, M>, set: u32, my: u32) -> Option<u32> {
        match &self.qid {
            Qid::Cell { probe, .. } => decode_probe(p.execute(probe, set, my).get()),
            Qid::Split { check1, check0, .. } => {
                let f1 = p.execute(check1, set, my).get();
                let f0 = p.execute(check0, set, my).get();
                decode_probe(split_flags(f0, f1))
            }
        }
    }

    /// One answer of a server's packet.
    fn process_front<M: TraceMode>(&self, p: &mut Pass<'_, M>) {
        if p.bridged()[br::FLAGS] & br::SPLIT_FLAG != 0 {
            let id = Self::ga(p.bridged(), br::C);
            let second = p.execute(&self.split_turn, id % SPLIT_CELLS, id) == 1;
            p.bridged_mut()[br::FLAGS] &= !br::SPLIT_FLAG;
            self.keep_part(p, second);
            // With way 1's owners in stage 0 (beside split_turn), the second copy's new
            // front answer reaches the lookup only on the next pass.
            if p.bridged()[br::MODE] == br::PARK || (second && matches!(self.qid, Qid::Split { .. })) {
                p.recirculate();
                return;
            }
        }
        Self::skip_empty_inputs(p);
        if p.bridged()[br::INPUTS] == 0 {
            self.finish(p);
            return;
        }
        let n = self.cfg.slots as usize;
        // A send's second pass always runs: the register it locked waits for it (the lock
        // was taken with room for it and its commit within the budget).
        if p.bridged()[br::MODE] != br::SEND && p.recirculations() as u32 + 3 > self.cfg.max_recirculations {
            self.count(p, answer_event::BYPASS_BUDGET);
            p.bridged_mut()[br::INPUTS] = 0;
            self.finish(p);
            return;
        }
        let len = p.hdr().len();
        let q = Self::qcount(p) as usize;
        let answers = (len - MIN_LEN - BLOCK_HEADER_LEN * q) / ANSWER_LEN;
        let room = len - ANSWER_LEN + BLOCK_HEADER_LEN + ANSWER_LEN * (n + 1) <= self.cfg.parse_depth as usize
            && answers + n < MAX_ANSWERS
            && q + 2 <= 255;
        if !room {
            self.no_room(p);
            return;
        }
        let h = p.hdr();
        let at = L2_L4_LEN + nw::HEADER_LEN;
        let qid = u32::from_be_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
        let (id, d) = nw::answer_at(h, at + BLOCK_HEADER_LEN);
        let Some(my) = tag(qid) else {
            let num = Self::bypass_front_block(p);
            p.execute(&self.answer_events, answer_event::BYPASS_BAD_QID, num);
            self.next_or_finish(p);
            return;
        };
        let c = DualCell::new(id, encode_distance(d));
        let set = self.index(p, qid);
        let ways = self.cfg.ways;
        let force = p.bridged()[br::MODE] == br::FORCE_CLAIM;
        let expected = if force { Self::ga(p.bridged(), br::A) } else { FREE };
        let sending = (p.bridged()[br::MODE] == br::SEND).then(|| Self::ga(p.bridged(), br::B));
        p.bridged_mut()[br::MODE] = br::NORMAL;
        // Algorithm 2 (selection.rs): one access sees every candidate of the set.
        let (sel, way) = if force {
            let way = Self::ga(p.bridged(), br::B);
            let old = self.owner_cas(p, set * ways + way, my, expected);
            (outcome(old, my, expected), way)
        } else {
            let (kind, way) = self.lookup(p, set, my);
            if self.second_pass_claim(kind, way) {
                // Way 1's stage is behind this pass: claim it by compare-and-swap on the
                // next (another packet may take it first; the claim then sees that).
                let b = p.bridged_mut();
                b[br::MODE] = br::FORCE_CLAIM;
                Self::sa(b, br::A, FREE);
                Self::sa(b, br::B, 1);
                self.count(p, answer_event::WAY1_CLAIM_PASS);
                p.recirculate();
                return;
            }
            let sel = match kind {
                selection::KIND_HIT => Selected::Hit,
                selection::KIND_CLAIMED => Selected::Claimed,
                _ => Selected::Occupied(0),
            };
            (sel, way)
        };
        let idx = set * ways + way;
        let (st, t_prev, pending) = match sel {
            Selected::Occupied(_) => {
                let granted = p.execute(&self.replacements, 0, (best_effort::OP_GRANT, self.h));
                // The replacement register: the candidate that carried the most data pairs
                // (way 0's weight read in stage 2, compared with way 1's in stage 3).
                let w0 = p.execute(&self.weight_read, set, ());
                let v = if ways > 1 { p.execute(&self.weight_heavier, set, w0) } else { Staged::now(0) };
                let vidx = v.map(|v| set * ways + v);
                if granted == 0 {
                    let num = Self::bypass_front_block(p);
                    p.execute(&self.answer_events, answer_event::BYPASS_COLLISION, num);
                } else {
                    // Replace: tombstone the victim, flush all its answers, claim next pass.
                    // Its owner tag (stage 4, beside `state`) is not 0: every register the
                    // qid lookup found occupied has its owner in `born` (both written in
                    // the same pass at each claim and release).
                    let victim = p.execute(&self.born_owner, vidx, ()).get();
                    debug_assert_ne!(victim, 0, "an occupied register has an owner");
                    p.execute(&self.state_tomb, vidx, ());
                    let (vidx, v) = (vidx.get(), v.get());
                    let mut out = SentAnswers::new(victim - 1);
                    for i in 0..n {
                        out.push(self.take(p, vidx, i));
                    }
                    Self::append(p, &out);
                    let b = p.bridged_mut();
                    b[br::MODE] = br::FORCE_CLAIM;
                    Self::sa(b, br::A, victim);
                    Self::sa(b, br::B, v);
                    self.count(p, answer_event::REPLACEMENT);
                    self.count_emit(p, emit_event::VICTIM, out.len, 0);
                }
                self.next_or_finish(p);
                return;
            }
            Selected::Claimed => {
                let now = now_us(p.now_ns());
                // A fresh epoch (stage 2, before way 1's weight in stage 3).
                p.execute(&self.epoch, idx, DualCell::new(0, 0));
                p.execute(&self.weight_set[way as usize], set, 1);
                p.execute(&self.threshold, idx, sort_reduce::T_RESET);
                // The old state is ignored: the insert's outcome on an empty register.
                p.execute(&self.progress_set, idx, 0);
                p.execute(&self.born_set, idx, DualCell::new(now, my));
                let Gate::Insert { full_to } = gate(0, false, self.prm) else { unreachable!("an empty register drops nothing") };
                let n_ = self.prm.n;
                p.execute(&self.state_set, idx, if n_ > 1 { 1 } else { full_to });
                match held_outcome(0, full_to, self.prm) {
                    Held::Send => {
                        self.count(p, answer_event::CLAIM);
                        self.lock_and_recirculate(p, idx);
                        return;
                    }
                    Held::EmitAll => (Step::EmitAll, 0, 0),
                    _ => (Step::Insert, 0, 0),
                }
            }
            Selected::Hit if sending == Some(idx) => {
                // The send's second pass: r.k and pending counted (the old ones decide),
                // the register unlocked to what the send leaves in it.
                let t = p.execute(&self.threshold, idx, sort_reduce::T_READ).get();
                let word = p.execute(&self.progress_send, idx, send_operand(self.prm));
                let (prm, n_) = (self.prm, self.prm.n);
                let (st, _, pend) = send(word.get(), prm);
                let old = p.execute(&self.state_unlock, idx, word.map(|w| (send(w, prm).1, n_))).get();
                // Tombstoned (replaced) meanwhile: its answers went with the victim's
                // flush; this one goes on unreduced.
                (if old == n_ { st } else { Step::Tomb }, t, pend)
            }
            Selected::Hit => {
                p.execute(&self.weight_add[way as usize], set, ());
                let t = p.execute(&self.threshold, idx, sort_reduce::T_READ).get();
                let ge = c.hi >= t;
                let word = p.execute(&self.progress_read, idx, ());
                match gate(word.get(), ge, self.prm) {
                    Gate::Drop => (Step::Drop, t, 0),
                    Gate::Insert { full_to } => {
                        let n_ = self.prm.n;
                        let old = p.execute(&self.state_insert, idx, word.map(|_| (full_to, n_ - 1))).get();
                        match held_outcome(old, full_to, self.prm) {
                            Held::Tomb => (Step::Tomb, t, 0),
                            Held::Inserted => (Step::Insert, t, 0),
                            Held::EmitAll => (Step::EmitAll, t, 0),
                            Held::Locked => {
                                self.count(p, answer_event::SEND_WAIT);
                                p.recirculate();
                                return;
                            }
                            Held::Send => {
                                self.lock_and_recirculate(p, idx);
                                return;
                            }
                        }
                    }
                }
            }
        };
        let claimed = matches!(sel, Selected::Claimed);
        let mut out = SentAnswers::new(qid);
        let mut commit = false;
        let mut tighten = false;
        let (ev, cause, mut cleared) = match st {
            Step::Tomb => {
                let num = Self::bypass_front_block(p);
                p.execute(&self.answer_events, answer_event::BYPASS_TOMB, num);
                self.next_or_finish(p);
                return;
            }
            Step::Drop => (answer_event::DROPPED, None, 0),
            Step::Insert => {
                let carry = self.insert(p, idx, c, n);
                debug_assert_eq!(carry.hi, 0);
                (answer_event::INSERTED, None, 0)
            }
            Step::EmitGa => {
                let q = self.prm.q() as usize;
                let carry = self.insert(p, idx, c, q);
                for i in q..n {
                    out.push(self.take(p, idx, i));
                }
                out.push(carry);
                commit = st.commits(self.prm.reduce);
                (answer_event::INSERTED, Some(emit_event::GA), 0)
            }
            Step::EmitAll => {
                for i in 0..n {
                    out.push(self.take(p, idx, i));
                }
                out.push(c);
                // Only sends of exactly n count towards an epoch (its K answers).
                tighten = self.cfg.tighten && self.prm.reduce && out.len == n;
                (answer_event::INSERTED, Some(emit_event::ALL), 0)
            }
            Step::FinalFlush { m } => {
                let mut old_slots = [EMPTY; MAX_SLOTS];
                for (i, o) in old_slots.iter_mut().enumerate().take(n) {
                    *o = self.take(p, idx, i);
                }
                let held = &old_slots[..n - 1];
                let codes: Vec<u32> = held.iter().map(|a| a.hi).collect();
                let mode = self.cfg.reduction;
                let (mask, keep_c) = final_flush_select(&codes, c.hi, m, t_prev, pending, mode);
                let mut cl = 0;
                for (i, a) in held.iter().enumerate() {
                    if mask & (1 << i) != 0 {
                        out.push(*a);
                    } else {
                        cl += 1;
                    }
                }
                if keep_c {
                    out.push(c);
                } else {
                    cl += 1;
                }
                commit = true;
                (answer_event::INSERTED, Some(emit_event::FINAL_FLUSH), cl)
            }
        };
        Self::consume_front(p);
        Self::append(p, &out);
        if commit || tighten {
            let b = p.bridged_mut();
            b[br::MODE] = if commit { br::COMMIT } else { br::TIGHTEN };
            Self::sa(b, br::A, out.worst());
            Self::sa(b, br::B, idx);
            Self::sa(b, br::C, my);
        }
        match cause {
            Some(cause) => {
                self.count_emit(p, cause, out.len, cleared);
            }
            None => {
                self.count(p, if claimed { answer_event::CLAIM } else { ev });
                cleared = 0;
            }
        }
        let _ = cleared;
        self.next_or_finish(p);
    }

    /// The answer filled register `idx` in phase 1 and locked it: the send is made on the
    /// next pass, with the answer still at the front.
    fn lock_and_recirculate<M: TraceMode>(&self, p: &mut Pass<'_, M>, idx: u32) {
        let b = p.bridged_mut();
        b[br::MODE] = br::SEND;
        Self::sa(b, br::B, idx);
        self.count(p, answer_event::SEND_PASS);
        p.recirculate();
    }

    /// A packet too full to carry a register's output (answers sent by the registers it
    /// passed have grown it): its front answer is dropped if its register would drop it
    /// (phase 2, at or beyond r.T, no commit pending: the same test as an insert, state
    /// unchanged), which shrinks the packet; otherwise its front block goes on unreduced.
    fn no_room<M: TraceMode>(&self, p: &mut Pass<'_, M>) {
        let h = p.hdr();
        let at = L2_L4_LEN + nw::HEADER_LEN;
        let qid = u32::from_be_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
        let (_, d) = nw::answer_at(h, at + BLOCK_HEADER_LEN);
        let code = encode_distance(d);
        let mut dropped = false;
        if let Some(my) = tag(qid) {
            let set = self.index(p, qid);
            if let Some(way) = self.probe(p, set, my) {
                let idx = set * self.cfg.ways + way;
                // The insert's drop test, state unchanged (a tombstone does not matter: K
                // answers at least as good as r.T have been sent either way).
                let t = p.execute(&self.threshold, idx, sort_reduce::T_READ).get();
                let word = p.execute(&self.progress_read, idx, ()).get();
                dropped = gate(word, code >= t, self.prm) == Gate::Drop;
            }
        }
        if dropped {
            Self::consume_front(p);
            self.count(p, answer_event::DROPPED);
        } else if self.prm.reduce && Self::splittable(p) {
            // Split: both copies come back (recirculation port) and each keeps a part.
            // (Without reduction nothing would be dropped: the block goes on as it is.)
            let id = p.execute(&self.splits, 0, ()).get();
            let b = p.bridged_mut();
            b[br::FLAGS] |= br::SPLIT_FLAG;
            Self::sa(b, br::C, id);
            self.count(p, answer_event::SPLIT);
            p.clone_ingress(SPLIT_SESSION);
            p.recirculate();
            return;
        } else {
            let num = Self::bypass_front_block(p);
            p.execute(&self.answer_events, answer_event::BYPASS_NO_ROOM, num);
        }
        self.next_or_finish(p);
    }

    /// Whether splitting makes progress: both halves then have less to carry (at least two
    /// unprocessed answers, or answers sent so far that the first copy takes away).
    fn splittable<M: TraceMode>(p: &Pass<'_, M>) -> bool {
        let h = p.hdr();
        let inputs = p.bridged()[br::INPUTS] as usize;
        let mut at = L2_L4_LEN + nw::HEADER_LEN;
        let mut total = 0usize;
        for _ in 0..inputs {
            let num = u16::from_be_bytes([h[at + 4], h[at + 5]]) as usize;
            total += num;
            at += BLOCK_HEADER_LEN + ANSWER_LEN * num;
        }
        total >= 2 || (h[L2_L4_LEN] as usize) > inputs
    }

    /// One copy of a split keeps its part (the deparser emitting only some entries of the
    /// answer header stack): the first copy the answers sent so far and the front of the
    /// unprocessed answers, the second copy the tail: as few answers as give the first
    /// copy room for two more register outputs (all of them if the answers sent so far
    /// leave no such room: the first copy then leaves with those alone; at most half if
    /// nothing was sent yet). A server's answers come nearest first, so the tail holds its
    /// worst ones, and moving few of them keeps the arrival order Algorithm 1 sees close to
    /// the servers' (a larger part processed alongside the front would raise r.T early).
    /// A pending claim (`FORCE_CLAIM`) belongs to the front answers: to the first copy, or
    /// to the second when the first keeps none (it leaves with the answers sent alone).
    fn keep_part<M: TraceMode>(&self, p: &mut Pass<'_, M>, second: bool) {
        let claim = p.bridged()[br::MODE] == br::FORCE_CLAIM;
        let h = p.hdr();
        let len = h.len();
        let inputs = p.bridged()[br::INPUTS] as usize;
        let q = h[L2_L4_LEN] as usize;
        let mut blocks = [(0usize, 0usize); 256];
        let mut at = L2_L4_LEN + nw::HEADER_LEN;
        let mut total = 0usize;
        for b in blocks.iter_mut().take(inputs) {
            let num = u16::from_be_bytes([h[at + 4], h[at + 5]]) as usize;
            *b = (at, num);
            total += num;
            at += BLOCK_HEADER_LEN + ANSWER_LEN * num;
        }
        let out_start = at;
        let n = self.cfg.slots as usize;
        let out_len = BLOCK_HEADER_LEN + ANSWER_LEN * (n + 1);
        let answers = (len - MIN_LEN - BLOCK_HEADER_LEN * q) / ANSWER_LEN;
        let by_len = (len + BLOCK_HEADER_LEN + 2 * out_len).saturating_sub(self.cfg.parse_depth as usize + ANSWER_LEN).div_ceil(ANSWER_LEN);
        let by_count = (answers + 2 * n + 2).saturating_sub(MAX_ANSWERS);
        let t = by_len.max(by_count).max(1).min(if q > inputs { total } else { total / 2 });
        let cut = total - t;
        let (lo, hi) = if second { (cut, total) } else { (0, cut) };
        let mut v = Vec::with_capacity(len - L2_L4_LEN);
        v.push(0u8);
        let mut kept = 0usize;
        let mut base = 0usize;
        for &(bat, num) in blocks.iter().take(inputs) {
            let s = lo.clamp(base, base + num) - base;
            let e = hi.clamp(base, base + num) - base;
            if e > s {
                v.extend_from_slice(&h[bat..bat + 4]);
                v.extend_from_slice(&((e - s) as u16).to_be_bytes());
                v.extend_from_slice(&h[bat + BLOCK_HEADER_LEN + ANSWER_LEN * s..bat + BLOCK_HEADER_LEN + ANSWER_LEN * e]);
                kept += 1;
            }
            base += num;
        }
        let mut count = kept;
        if !second {
            v.extend_from_slice(&h[out_start..len]);
            count += q - inputs;
        }
        v[0] = count as u8;
        let new_len = L2_L4_LEN + v.len();
        p.hdr_mut()[L2_L4_LEN..new_len].copy_from_slice(&v);
        p.resize_hdr(new_len);
        p.bridged_mut()[br::INPUTS] = kept as u8;
        if claim && cut == 0 {
            // The front answers are the second copy's, and so is the claim (its victim and
            // way stay in A and B); before, the first copy left with it and the victim's
            // register stayed tombstoned until its timer.
            if !second {
                p.bridged_mut()[br::MODE] = br::NORMAL;
            }
        } else if second {
            // Wait about as many passes as the front copy has answers left, so the tail's
            // answers reach the registers after the front's, as in the server's order.
            let budget = self.cfg.max_recirculations.saturating_sub(p.recirculations() as u32 + t as u32 + 8);
            let wait = (cut as u32).min(budget);
            let b = p.bridged_mut();
            b[br::MODE] = if wait > 0 { br::PARK } else { br::NORMAL };
            Self::sa(b, br::A, wait);
        }
    }

    /// A parked tail copy: one idle pass (a counted recirculation).
    fn park<M: TraceMode>(&self, p: &mut Pass<'_, M>) {
        let left = Self::ga(p.bridged(), br::A);
        let b = p.bridged_mut();
        if left <= 1 {
            b[br::MODE] = br::NORMAL;
        }
        Self::sa(b, br::A, left.saturating_sub(1));
        p.recirculate();
    }

    /// The pass after a send: r.T rises to the worst answer sent, one commit lands.
    fn commit<M: TraceMode>(&self, p: &mut Pass<'_, M>) {
        let (worst, idx, owner) = (Self::ga(p.bridged(), br::A), Self::ga(p.bridged(), br::B), Self::ga(p.bridged(), br::C));
        // A register released (timer) or replaced since the send belongs to someone else.
        let now_owner = self.owner_cas(p, idx, FREE, FREE);
        if now_owner == owner {
            p.execute(&self.threshold, idx, (sort_reduce::T_MAX, worst));
            p.execute(&self.progress_commit, idx, ());
        }
        p.bridged_mut()[br::MODE] = br::NORMAL;
        self.count(p, answer_event::COMMIT);
        self.next_or_finish(p);
    }

    /// The pass after a full phase-2 send: the send joins its register's epoch, and an
    /// epoch of ceil(K / n) sends (at least K answers, all at most its worst) lowers r.T to
    /// that worst (sort_reduce.rs `EpochAlu`). Nothing is pending meanwhile: the old r.T is
    /// legal until the new one lands.
    fn tighten<M: TraceMode>(&self, p: &mut Pass<'_, M>) {
        let (worst, idx, owner) = (Self::ga(p.bridged(), br::A), Self::ga(p.bridged(), br::B), Self::ga(p.bridged(), br::C));
        let now_owner = self.owner_cas(p, idx, FREE, FREE);
        if now_owner == owner {
            let sends = self.prm.k.div_ceil(self.prm.n).max(1) - 1;
            let t = p.execute(&self.epoch, idx, DualCell::new(sends, worst)).get();
            if t != 0 {
                p.execute(&self.threshold, idx, (sort_reduce::T_MIN, t));
                self.count(p, answer_event::TIGHTEN);
            }
        }
        p.bridged_mut()[br::MODE] = br::NORMAL;
        self.next_or_finish(p);
    }

    /// Address a timer packet to the agent (stage 0 table).
    fn to_agent<M: TraceMode>(&self, p: &mut Pass<'_, M>) -> bool {
        let r = p.apply(&self.agent, &[0]);
        if r.action != self.a_to_agent {
            return false;
        }
        let h = p.hdr_mut();
        h[0..6].copy_from_slice(&r.param(1).to_be_bytes()[2..]);
        h[30..34].copy_from_slice(&(r.param(2) as u32).to_be_bytes());
        h[36..38].copy_from_slice(&(r.param(3) as u16).to_be_bytes());
        p.forward(r.param(0) as u16);
        true
    }

    /// A generator packet: visit the next register; recirculate to release it if expired.
    fn timer_visit<M: TraceMode>(&self, p: &mut Pass<'_, M>) {
        if !self.to_agent(p) {
            p.drop(self.d_timer_idle);
            return;
        }
        let idx = p.execute(&self.sweep, 0, self.cfg.registers).get();
        let timeout = (self.cfg.timeout_ns / 1_000) as u32;
        let now = now_us(p.now_ns());
        // The deadline and the choice of test are computed in an earlier stage (PHV).
        let (age, wrapped) = age_operand(now, timeout);
        let owner = if wrapped { p.execute(&self.born_age_wrapped, idx, age) } else { p.execute(&self.born_age, idx, age) }.get();
        if owner == 0 {
            p.drop(self.d_timer_idle);
            return;
        }
        let b = p.bridged_mut();
        *b = [0; pisa::packet::BRIDGED_BYTES];
        b[br::STARTED] = 1;
        b[br::FLAGS] = br::TIMER_FLAG;
        b[br::MODE] = br::RELEASE;
        Self::sa(b, br::A, owner);
        Self::sa(b, br::B, idx);
        p.recirculate();
    }

    /// Second pass of a timer packet: release the register, carry its answers out.
    fn timer_release<M: TraceMode>(&self, p: &mut Pass<'_, M>) {
        if !self.to_agent(p) {
            p.drop(self.d_timer_idle);
            return;
        }
        let (victim, idx) = (Self::ga(p.bridged(), br::A), Self::ga(p.bridged(), br::B));
        let old = self.owner_cas(p, idx, FREE, victim);
        if old != victim {
            p.drop(self.d_timer_raced);
            return;
        }
        let (set, way) = self.set_way(idx);
        p.execute(&self.replacements, 0, (best_effort::OP_RESET, 0));
        p.execute(&self.weight_set[way as usize], set, 0);
        p.execute(&self.threshold, idx, sort_reduce::T_RESET);
        p.execute(&self.progress_set, idx, 0);
        p.execute(&self.born_set, idx, DualCell::new(0, 0));
        p.execute(&self.state_set, idx, 0);
        let mut out = SentAnswers::new(victim - 1);
        for i in 0..self.cfg.slots as usize {
            out.push(self.take(p, idx, i));
        }
        Self::append(p, &out);
        self.count_emit(p, emit_event::TIMER, out.len, 0);
        self.count(p, answer_event::TIMER_RELEASE);
        if out.len == 0 {
            p.drop(self.d_timer_idle);
            return;
        }
        self.finish(p);
    }
}

impl Netsha {
    /// A query packet: UDP to the servers' port.
    fn is_query<M: TraceMode>(p: &Pass<'_, M>) -> bool {
        let h = p.hdr();
        h.len() >= L2_L4_LEN && u16::from_be_bytes([h[36], h[37]]) == nw::QUERY_PORT
    }

    /// §4 "Query server selection": one lookup per LSH table, the bitmaps ORed, the query
    /// multicast to every server and pruned at egress to the selected ones.
    fn select_servers<M: TraceMode>(&self, p: &mut Pass<'_, M>) {
        let l = self.cfg.tables as usize;
        let h = p.hdr();
        let total = p.packet_len();
        let need = L2_L4_LEN + nw::query_header_len(l);
        let ip_len = if h.len() >= 18 { u16::from_be_bytes([h[16], h[17]]) as usize } else { 0 };
        let udp_len = if h.len() >= 40 { u16::from_be_bytes([h[38], h[39]]) as usize } else { 0 };
        // Lengths agree with the frame (or it is a short frame's Ethernet padding), the
        // header holds L keys and DIM, and DIM accounts for the rest.
        let ok = h.len() >= need
            && wire::is_ipv4_udp(h)
            && ip_len == udp_len + 20
            && (ip_len + 14 == total || (total == 60 && ip_len + 14 < 60))
            && h[L2_L4_LEN + nw::query_field::TABLES] as usize == l
            && {
                let dim = u16::from_be_bytes([h[need - 2], h[need - 1]]) as usize;
                udp_len == 8 + nw::query_header_len(l) + 4 * dim
            };
        if !ok {
            p.drop(self.d_query_malformed);
            return;
        }
        let mut bits = 0u32;
        for (t, table) in self.select.iter().enumerate() {
            let at = L2_L4_LEN + nw::QUERY_HEADER_LEN + nw::KEY_LEN * t;
            let key: [u8; 8] = p.hdr()[at..at + 8].try_into().expect("8 bytes");
            let r = p.apply(table, &key);
            if r.action == self.a_servers {
                bits |= r.param(0) as u32;
            }
        }
        let b = p.bridged_mut();
        *b = [0; pisa::packet::BRIDGED_BYTES];
        b[br::FLAGS] = br::QUERY_FLAG;
        Self::sa(b, br::A, bits);
        let ev = if bits == 0 { query_event::ALL_SERVERS } else { query_event::SELECTED };
        p.execute(&self.query_events, ev, DualCell::new(1, bits.count_ones()));
        let port = p.ingress_port();
        p.multicast(SELECT_GROUP, Some(port));
    }
}

impl Default for Netsha {
    fn default() -> Self {
        Self::new()
    }
}

/// The generator's packet: Ethernet, IPv4 (ToS bit set), UDP, Query# = 0. Addresses are
/// filled from the `agent` table.
pub fn timer_template() -> Vec<u8> {
    let mut v = vec![0u8; MIN_LEN];
    v[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0xFE]);
    v[12..14].copy_from_slice(&[0x08, 0x00]);
    v[14] = 0x45;
    v[15] = nw::TOS_BIT;
    v[16..18].copy_from_slice(&((MIN_LEN - 14) as u16).to_be_bytes());
    v[22] = 64;
    v[23] = 17;
    v[26..30].copy_from_slice(&[10, 0, 0, 254]);
    v[34..36].copy_from_slice(&TIMER_SRC_PORT.to_be_bytes());
    v[38..40].copy_from_slice(&((MIN_LEN - 34) as u16).to_be_bytes());
    v
}

impl Program for Netsha {
    fn decl(&self) -> &ProgramDecl {
        &self.decl
    }
    pisa::controls_by_trace_mode!(egress, ingress);
}

/// The control blocks, once, for both trace modes (see `Program::ingress_untraced`).
impl Netsha {
    #[inline(always)]
    fn egress_control<M: TraceMode>(&self, p: &mut Pass<'_, M>) {
        // Prune the query's replicas to servers not selected (replica id = server index).
        if p.bridged()[br::FLAGS] & br::QUERY_FLAG != 0 {
            let bits = Self::ga(p.bridged(), br::A);
            let rid = p.replication_id() as u32;
            if bits != 0 && (rid >= 32 || bits >> rid & 1 == 0) {
                p.drop(self.d_query_pruned);
                return;
            }
            let Some(t) = &self.server_addr else { return };
            let r = p.apply_u64(t, rid as u64);
            if r.action == self.a_to_server {
                // On to the server through the next switches as ordinary routed traffic:
                // addressed to it, ToS bit clear (no switch after this one selects again),
                // IPv4 checksum recomputed, UDP checksum 0 (optional over IPv4; the old one
                // covered the broadcast address).
                let h = p.hdr_mut();
                h[0..6].copy_from_slice(&r.param(0).to_be_bytes()[2..]);
                h[6..12].copy_from_slice(&r.param(1).to_be_bytes()[2..]);
                h[15] &= !nw::TOS_BIT;
                h[30..34].copy_from_slice(&(r.param(2) as u32).to_be_bytes());
                h[40..42].copy_from_slice(&[0, 0]);
                wire::Ipv4Packet::new_unchecked(&mut h[14..34]).fill_checksum();
            }
        }
    }

    #[inline(always)]
    fn ingress_control<M: TraceMode>(&self, p: &mut Pass<'_, M>) {
        let port = p.ingress_port();
        if port == PORT_PKTGEN {
            self.timer_visit(p);
            return;
        }
        if port != PORT_RECIRC && self.cfg.tables > 0 && Self::is_query(p) {
            self.select_servers(p);
            return;
        }
        if port != PORT_RECIRC && p.apply(&self.role, &[0]).action == self.a_forward_only {
            // Not reducing here: the answer packet keeps the base program's decision, untouched.
            return;
        }
        if (port != PORT_RECIRC || p.bridged()[br::STARTED] == 0) && !self.start(p) {
            return;
        }
        match p.bridged()[br::MODE] {
            br::COMMIT => self.commit(p),
            br::TIGHTEN => self.tighten(p),
            br::RELEASE => self.timer_release(p),
            br::PARK => self.park(p),
            _ => self.process_front(p),
        }
    }
}
