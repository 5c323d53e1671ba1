//! The resource report: what a set of programs uses, stage by stage, against a target's
//! limits, and whether it fits.
//!
//! Memory is counted the way the Tofino compiler counts it (see `docs/tofino-numbers.md`,
//! "How the compiler counts memory"): register arrays pack cells into 128-bit words and
//! take one spare RAM; exact tables pack entries (key, version bits, action overhead) into
//! words with at least four hash ways; ternary and LPM tables take TCAM blocks 44 bits wide
//! and an indirection SRAM. These are estimates of a compiler's placement, stated as such;
//! the limits themselves are the chip's.

use serde::Serialize;

use crate::base::{Gress, MatchKind};
use crate::decl::{MemoryKind, ProgramDecl, TableDecl};
use crate::target::{is_unlimited, Target};

#[derive(Clone, Debug, Default, Serialize)]
pub struct StageUsage {
    pub stage: u32,
    pub stateful_alus: u32,
    pub sram_blocks: u32,
    pub map_rams: u32,
    pub tcam_blocks: u32,
    pub logical_tables: u32,
    pub hash_units: u32,
    pub exact_key_bits: u32,
    pub ternary_key_bits: u32,
    pub register_bits: u64,
    /// What lives here, e.g. `forward.l2_dmac`.
    pub objects: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct RegisterUsage {
    pub name: String,
    pub gress: Gress,
    pub stage: u8,
    pub cells: u32,
    pub cell_bits: u32,
    pub bits: u64,
    pub sram_blocks: u32,
    pub register_actions: u32,
    pub max_action_out_bits: u32,
    /// What each register action's stateful ALU instruction uses.
    pub actions: Vec<AluUsage>,
}

/// The stateful ALU instruction of one register action: what it uses of the ALU, or that
/// it is a Rust body the loader cannot check (`checked: false`, an "unchecked ALU").
#[derive(Clone, Debug, Serialize)]
pub struct AluUsage {
    pub name: String,
    pub checked: bool,
    pub conditions: u32,
    pub updates_lo: u32,
    pub updates_hi: u32,
    pub outputs: u32,
}

#[derive(Clone, Debug, Serialize)]
pub struct TableUsage {
    pub name: String,
    pub gress: Gress,
    pub stage: u8,
    pub match_kinds: Vec<MatchKind>,
    pub entries: u32,
    pub key_bits: u32,
    pub action_data_bits: u32,
    pub sram_blocks: u32,
    pub tcam_blocks: u32,
}

#[derive(Clone, Debug, Serialize)]
pub struct MemoryUsage {
    pub name: String,
    pub gress: Gress,
    pub stage: u8,
    pub kind: MemoryKind,
    pub words: u32,
    pub word_bytes: u32,
    pub bytes: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct ProgramUsage {
    pub name: String,
    pub stages: u32,
    pub parse_depth_bytes: u32,
    pub phv_bits: u32,
    /// Recirculations one packet may make; None: unbounded (a perpetual packet).
    pub recirculations_per_packet: Option<u32>,
    pub packet_generators: u32,
    pub digests: Vec<(String, u32)>,
    pub notes: Vec<String>,
    /// Items of one packet its payload analyzer streams through the stages (1: none).
    pub items_per_pass: u32,
}

#[derive(Clone, Debug, Serialize)]
pub struct ResourceReport {
    pub programs: Vec<ProgramUsage>,
    pub target: Target,
    pub stages_used: u32,
    pub stages: Vec<StageUsage>,
    pub registers: Vec<RegisterUsage>,
    pub tables: Vec<TableUsage>,
    pub parse_depth_bytes: u32,
    pub phv_bits: u32,
    pub register_bits_total: u64,
    pub sram_blocks_total: u32,
    pub tcam_blocks_total: u32,
    pub hash_units_total: u32,
    pub stateful_alus_total: u32,
    pub table_entries_total: u64,
    /// Block memories (FPGA targets) and their totals by kind, in bytes.
    pub memories: Vec<MemoryUsage>,
    pub memory_sram_bytes: u64,
    pub memory_dram_bytes: u64,
    pub fits: bool,
    /// Register actions whose body is Rust, not a declared stateful ALU instruction
    /// (`program.register.action`): the loader cannot tell whether a Tofino computes them.
    pub unchecked_alus: Vec<String>,
    /// Every limit exceeded, in words.
    pub problems: Vec<String>,
}

fn log2_ceil(n: u32) -> u32 {
    if n <= 1 {
        0
    } else {
        32 - (n - 1).leading_zeros()
    }
}

/// SRAM blocks of a register array: data RAMs (cells packed per 128-bit word) + spares.
pub fn register_blocks(cells: u32, cell_bits: u32, t: &Target) -> (u32, u32) {
    let cells_per_word = (t.sram_word_bits / cell_bits.max(1)).max(1);
    let data = cells.div_ceil(t.sram_block_words * cells_per_word);
    (data, data + t.register_spare_blocks)
}

/// Bits of action selection and immediate data an entry of `table` carries.
fn action_overhead(table: &TableDecl, decl: &ProgramDecl) -> (u32, u32, u32) {
    let n_actions = table.actions.len() as u32;
    let instr = log2_ceil(n_actions.max(1));
    let data = table.actions.iter().map(|a| decl.actions[*a as usize].param_bits()).max().unwrap_or(0);
    // Up to 32 bits of action data ride in the entry; more goes to action-data RAMs.
    let (immediate, adata_rams) = if data <= 32 {
        (data, 0)
    } else {
        let bytes = data.div_ceil(8);
        let per_word = if bytes <= 16 { (16u32 >> log2_ceil(bytes)).max(1) } else { 1 };
        let words_per_entry = if bytes <= 16 { 1 } else { bytes.div_ceil(16) };
        let rams = table.size.div_ceil(1024 * per_word) * words_per_entry;
        (log2_ceil(table.size.max(2)), rams)
    };
    (instr, immediate, adata_rams)
}

fn table_blocks(table: &TableDecl, decl: &ProgramDecl, t: &Target) -> (u32, u32) {
    let (instr, immediate, adata_rams) = action_overhead(table, decl);
    let key_bits = table.key_bits();
    if table.is_exact() {
        let entry_bits = key_bits + 4 + instr + immediate;
        let word = t.sram_word_bits;
        let (width, per_word) =
            if entry_bits <= word { (1, (word / entry_bits.max(1)).clamp(1, 5)) } else { (entry_bits.div_ceil(word), 1) };
        let mut depth = table.size.div_ceil(per_word * t.sram_block_words);
        if key_bits > 10 {
            depth = depth.max(4); // at least four cuckoo ways
        }
        (depth * width + adata_rams, 0)
    } else {
        let depth = table.size.div_ceil(t.tcam_block_entries);
        let key_bytes = key_bits.div_ceil(8);
        let rem = key_bytes % 11;
        let width = (2 * (key_bytes / 11)
            + if rem > 6 {
                2
            } else if rem > 0 {
                1
            } else {
                0
            })
        .max(1);
        let overhead = (instr + immediate).clamp(8, 64);
        let per_word = (t.sram_word_bits >> log2_ceil(overhead)).max(1);
        let indirection = table.size.div_ceil(t.sram_block_words * per_word);
        (indirection + adata_rams, depth * width)
    }
}

impl ResourceReport {
    /// Report for programs loaded together (resources add up per stage).
    pub fn new(decls: &[&ProgramDecl], target: &Target) -> ResourceReport {
        let mut problems = Vec::new();
        let stages_used = decls.iter().map(|d| d.stages_used()).max().unwrap_or(0);
        let mut stages: Vec<StageUsage> = (0..stages_used).map(|s| StageUsage { stage: s, ..Default::default() }).collect();
        let mut registers = Vec::new();
        let mut tables = Vec::new();
        let mut programs = Vec::new();
        let mut hash_total = 0;
        let mut memories = Vec::new();
        let mut unchecked_alus = Vec::new();

        for d in decls {
            for r in &d.registers {
                let (_data, blocks) = register_blocks(r.size, r.cell_bits, target);
                let st = &mut stages[r.stage as usize];
                st.stateful_alus += 1;
                st.sram_blocks += blocks;
                st.map_rams += blocks;
                st.logical_tables += 1;
                st.register_bits += r.size as u64 * r.cell_bits as u64;
                st.objects.push(format!("{}.{} (register {}x{}b)", d.name, r.name, r.size, r.cell_bits));
                let out = r.actions.iter().map(|a| a.out_bits).max().unwrap_or(0);
                if r.cell_bits > target.max_register_cell_bits {
                    problems.push(format!(
                        "{}.{}: {}-bit cells exceed the {}-bit stateful ALU",
                        d.name, r.name, r.cell_bits, target.max_register_cell_bits
                    ));
                }
                if r.actions.len() as u32 > target.max_register_actions {
                    problems.push(format!(
                        "{}.{}: {} register actions, at most {}",
                        d.name,
                        r.name,
                        r.actions.len(),
                        target.max_register_actions
                    ));
                }
                if out > target.salu_output_bits {
                    problems.push(format!(
                        "{}.{}: a register action returns {} bits, the stateful ALU returns at most {}",
                        d.name, r.name, out, target.salu_output_bits
                    ));
                }
                if !is_unlimited(target.max_blocks_per_register) && blocks - target.register_spare_blocks > target.max_blocks_per_register {
                    problems.push(format!(
                        "{}.{}: {} SRAM blocks, one stateful ALU reaches at most {}",
                        d.name,
                        r.name,
                        blocks - target.register_spare_blocks,
                        target.max_blocks_per_register
                    ));
                }
                let mut actions = Vec::new();
                for a in &r.actions {
                    let qualified = format!("{}.{}.{}", d.name, r.name, a.name);
                    let usage = match &a.alu {
                        Some(alu) => {
                            for e in crate::salu::check(alu, a.phv_bits, target) {
                                problems.push(format!("{qualified}: {e}"));
                            }
                            AluUsage {
                                name: a.name.clone(),
                                checked: true,
                                conditions: alu.conds.len() as u32,
                                updates_lo: alu.lo.len() as u32,
                                updates_hi: alu.hi.len() as u32,
                                outputs: alu.out.len() as u32,
                            }
                        }
                        None => {
                            unchecked_alus.push(qualified);
                            AluUsage { name: a.name.clone(), checked: false, conditions: 0, updates_lo: 0, updates_hi: 0, outputs: 0 }
                        }
                    };
                    actions.push(usage);
                }
                registers.push(RegisterUsage {
                    name: format!("{}.{}", d.name, r.name),
                    gress: r.gress,
                    stage: r.stage,
                    cells: r.size,
                    cell_bits: r.cell_bits,
                    bits: r.size as u64 * r.cell_bits as u64,
                    sram_blocks: blocks,
                    register_actions: r.actions.len() as u32,
                    max_action_out_bits: out,
                    actions,
                });
            }
            for tb in &d.tables {
                let (sram, tcam) = table_blocks(tb, d, target);
                let st = &mut stages[tb.stage as usize];
                st.sram_blocks += sram;
                st.tcam_blocks += tcam;
                st.logical_tables += 1;
                if tb.is_exact() {
                    st.exact_key_bits += tb.key_bits();
                } else {
                    st.ternary_key_bits += tb.key_bits();
                }
                let kind = if tb.is_exact() {
                    "exact"
                } else if tb.keys.iter().any(|k| k.kind == MatchKind::Lpm) {
                    "lpm"
                } else {
                    "ternary"
                };
                st.objects.push(format!("{}.{} ({kind} table, {} entries)", d.name, tb.name, tb.size));
                tables.push(TableUsage {
                    name: format!("{}.{}", d.name, tb.name),
                    gress: tb.gress,
                    stage: tb.stage,
                    match_kinds: tb.keys.iter().map(|k| k.kind).collect(),
                    entries: tb.size,
                    key_bits: tb.key_bits(),
                    action_data_bits: tb.actions.iter().map(|a| d.actions[*a as usize].param_bits()).max().unwrap_or(0),
                    sram_blocks: sram,
                    tcam_blocks: tcam,
                });
            }
            for h in &d.hash_units {
                let st = &mut stages[h.stage as usize];
                st.hash_units += 1;
                st.objects.push(format!("{}.{} (hash {} -> {}b)", d.name, h.name, h.algo.name(), h.out_bits));
                hash_total += 1;
            }
            let phv = d.parser.depth_bytes * 8 + d.metadata_bits + d.bridged_bytes * 8;
            if d.parser.depth_bytes > target.parse_depth_bytes {
                problems.push(format!(
                    "{}: the parser reaches {} bytes, the target's parser about {}",
                    d.name, d.parser.depth_bytes, target.parse_depth_bytes
                ));
            }
            for g in &d.digests {
                if g.bytes() as u32 > target.max_digest_bytes {
                    problems.push(format!("{}.{}: digest of {} bytes, at most {}", d.name, g.name, g.bytes(), target.max_digest_bytes));
                }
            }
            if d.packet_generators.len() as u32 > target.pktgen_apps {
                problems.push(format!(
                    "{}: {} packet generators, at most {} per pipe",
                    d.name,
                    d.packet_generators.len(),
                    target.pktgen_apps
                ));
            }
            for m in &d.memories {
                let st = &mut stages[m.stage as usize];
                st.objects.push(format!("{}.{} ({:?} memory {}x{}B)", d.name, m.name, m.kind, m.words, m.word_bytes).to_lowercase());
                if target.block_sram_bytes == 0 {
                    problems.push(format!(
                        "{}.{}: a block memory of {}-byte words; {} has none (its stateful ALUs reach {}-bit cells)",
                        d.name, m.name, m.word_bytes, target.name, target.max_register_cell_bits
                    ));
                }
                memories.push(MemoryUsage {
                    name: format!("{}.{}", d.name, m.name),
                    gress: m.gress,
                    stage: m.stage,
                    kind: m.kind,
                    words: m.words,
                    word_bytes: m.word_bytes,
                    bytes: m.bytes(),
                });
            }
            if d.items_per_pass > 1 && d.items_per_pass > target.payload_analyzer_items {
                problems.push(if target.payload_analyzer_items == 0 {
                    format!(
                        "{}: streams up to {} items of a packet through the stages; {} has no payload analyzer (one pass sees one set of headers: recirculate per item)",
                        d.name, d.items_per_pass, target.name
                    )
                } else {
                    format!("{}: {} items per packet, the payload analyzer streams at most {}", d.name, d.items_per_pass, target.payload_analyzer_items)
                });
            }
            programs.push(ProgramUsage {
                name: d.name.clone(),
                stages: d.stages_used(),
                parse_depth_bytes: d.parser.depth_bytes,
                phv_bits: phv,
                recirculations_per_packet: d.max_recirculations,
                packet_generators: d.packet_generators.len() as u32,
                digests: d.digests.iter().map(|g| (g.name.clone(), g.bytes() as u32)).collect(),
                notes: d.notes.clone(),
                items_per_pass: d.items_per_pass.max(1),
            });
        }

        // The base program's headers are always in the PHV; applications own disjoint packets,
        // so the compiler can overlay their headers: count the largest one.
        let base_phv: u32 = decls.iter().zip(&programs).filter(|(d, _)| d.classify.is_empty()).map(|(_, p)| p.phv_bits).sum();
        let app_phv: u32 = decls.iter().zip(&programs).filter(|(d, _)| !d.classify.is_empty()).map(|(_, p)| p.phv_bits).max().unwrap_or(0);
        let phv_bits = base_phv + app_phv;
        let parse_depth = decls.iter().map(|d| d.parser.depth_bytes).max().unwrap_or(0);
        if phv_bits > target.phv_bits {
            problems.push(format!("{phv_bits} PHV bits of headers and metadata, the target has {}", target.phv_bits));
        }
        if stages_used > target.stages {
            let beyond: Vec<&str> = stages.iter().skip(target.stages as usize).flat_map(|s| s.objects.iter().map(String::as_str)).collect();
            problems.push(format!("{stages_used} stages used, the target has {}: {}", target.stages, beyond.join(", ")));
        }
        for s in &stages {
            let mut over = |what: &str, used: u64, limit: u32| {
                if !is_unlimited(limit) && used > limit as u64 {
                    problems.push(format!("stage {}: {used} {what}, at most {limit}: {}", s.stage, s.objects.join(", ")));
                }
            };
            over("stateful ALUs", s.stateful_alus as u64, target.salus_per_stage);
            over("SRAM blocks", s.sram_blocks as u64, target.sram_blocks_per_stage);
            over("TCAM blocks", s.tcam_blocks as u64, target.tcam_blocks_per_stage);
            over("logical tables", s.logical_tables as u64, target.logical_tables_per_stage);
            over("hash units", s.hash_units as u64, target.hash_units_per_stage);
            over("exact-match key bits", s.exact_key_bits as u64, target.exact_key_bits_per_stage);
            over("ternary key bits", s.ternary_key_bits as u64, target.ternary_key_bits_per_stage);
        }
        let memory_sram_bytes: u64 = memories.iter().filter(|m| m.kind == MemoryKind::Sram).map(|m| m.bytes).sum();
        let memory_dram_bytes: u64 = memories.iter().filter(|m| m.kind == MemoryKind::Dram).map(|m| m.bytes).sum();
        if target.block_sram_bytes > 0 {
            // On a target with block RAM, register arrays live in it too.
            let reg_bytes: u64 = registers.iter().map(|r| r.bits.div_ceil(8)).sum();
            if memory_sram_bytes + reg_bytes > target.block_sram_bytes {
                problems.push(format!(
                    "{} bytes of block RAM ({} in memories, {} in register arrays), the target has {}",
                    memory_sram_bytes + reg_bytes,
                    memory_sram_bytes,
                    reg_bytes,
                    target.block_sram_bytes
                ));
            }
            if memory_dram_bytes > target.dram_bytes {
                problems.push(format!("{memory_dram_bytes} bytes of DRAM, the target has {}", target.dram_bytes));
            }
        }
        ResourceReport {
            memories,
            memory_sram_bytes,
            memory_dram_bytes,
            stages_used,
            register_bits_total: stages.iter().map(|s| s.register_bits).sum(),
            sram_blocks_total: stages.iter().map(|s| s.sram_blocks).sum(),
            tcam_blocks_total: stages.iter().map(|s| s.tcam_blocks).sum(),
            stateful_alus_total: stages.iter().map(|s| s.stateful_alus).sum(),
            table_entries_total: tables.iter().map(|t| t.entries as u64).sum(),
            hash_units_total: hash_total,
            stages,
            registers,
            tables,
            parse_depth_bytes: parse_depth,
            phv_bits,
            fits: problems.is_empty(),
            unchecked_alus,
            problems,
            programs,
            target: target.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_blocks_match_the_compiler_rule() {
        let t = Target::tofino1();
        // 4096 x 32-bit cells: 4 per word, 1024 words -> 1 data RAM + 1 spare.
        assert_eq!(register_blocks(4096, 32, &t), (1, 2));
        // 65536 x 32-bit: 16 data RAMs.
        assert_eq!(register_blocks(65536, 32, &t), (16, 17));
        // 1024 pairs: 2 per word -> 1 RAM.
        assert_eq!(register_blocks(1024, 64, &t), (1, 2));
        assert_eq!(register_blocks(2049, 64, &t), (2, 3));
    }
}
