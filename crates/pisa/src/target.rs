//! Target profiles: the limits a program must respect to fit a real switch.
//!
//! Numbers for Tofino come from the open-sourced Tofino compiler (p4lang/p4c,
//! `backends/tofino`); see `docs/tofino-numbers.md` for each number and where it is from.
//! `unbounded` has no limits and is what the software switch itself needs: every program
//! runs on it, the report then says what a real chip would be missing.

use serde::Serialize;

/// What a target offers per pipe and per stage.
#[derive(Clone, Debug, Serialize)]
pub struct Target {
    pub name: &'static str,
    pub description: &'static str,
    /// Match-action stages per pipe (ingress and egress share them).
    pub stages: u32,
    /// Pipes per chip (each with its own register state).
    pub pipes: u32,
    /// Stateful ALUs per stage: each register array needs one in its stage.
    pub salus_per_stage: u32,
    /// SRAM blocks per stage, each `sram_block_words` x `sram_word_bits`.
    pub sram_blocks_per_stage: u32,
    pub sram_block_words: u32,
    pub sram_word_bits: u32,
    /// TCAM blocks per stage, each `tcam_block_entries` x `tcam_block_bits`.
    pub tcam_blocks_per_stage: u32,
    pub tcam_block_entries: u32,
    pub tcam_block_bits: u32,
    /// Logical match tables per stage.
    pub logical_tables_per_stage: u32,
    /// Hash distribution units per stage: the hash outputs a stage can turn into register
    /// or table indexes (2 units x 3 slices of 16 bits on Tofino; the 8 x 52-bit hash
    /// functions behind them feed exact-match tables too).
    pub hash_units_per_stage: u32,
    /// Widest register cell (bits) a stateful ALU reads and writes: 64 is a pair of 32-bit
    /// halves on Tofino 1; Tofino 2 takes up to 128.
    pub max_register_cell_bits: u32,
    /// Register actions one register array may have.
    pub max_register_actions: u32,
    /// Bits a register action can return to the PHV.
    pub salu_output_bits: u32,
    /// Condition units of one stateful ALU (docs/tofino-numbers.md section 4).
    pub salu_conditions: u32,
    /// Update ALUs per 32-bit half of the cell.
    pub salu_updates_per_half: u32,
    /// Output words one register action returns.
    pub salu_output_words: u32,
    /// Widest PHV operand the stateful ALU takes.
    pub salu_phv_bits: u32,
    /// Register-file rows for constants outside the inline range.
    pub salu_regfile_rows: u32,
    /// Constants an instruction carries inline.
    pub salu_inline_const: (i32, i32),
    /// SRAM blocks one register array may span (the stateful ALU's reach).
    pub max_blocks_per_register: u32,
    /// Extra SRAM blocks the compiler spends per register array.
    pub register_spare_blocks: u32,
    /// Bits of match key an exact-match stage can feed (input crossbar).
    pub exact_key_bits_per_stage: u32,
    /// Bits of match key a ternary table can use.
    pub ternary_key_bits_per_stage: u32,
    /// Bytes of packet the parser can reach. Tofino's overall depth is not published; the
    /// value is the estimate stated in `docs/tofino-numbers.md` (parser section).
    pub parse_depth_bytes: u32,
    /// Bits of packet header vector the match-action stages can use (parsed headers and
    /// metadata). Tofino 1's 2048 tagalong bits, which only carry headers through, are not
    /// counted.
    pub phv_bits: u32,
    /// Largest digest, in bytes.
    pub max_digest_bytes: u32,
    /// Packet generator applications per pipe.
    pub pktgen_apps: u32,
    /// Items (key-value pairs) of one packet a payload analyzer can stream through the
    /// stages; 0: no payload analyzer (a PISA pass sees one packet's headers once).
    pub payload_analyzer_items: u32,
    /// Bytes of block memory (`decl::MemoryKind::Sram`: on-chip block RAM) for block
    /// memories and register arrays together; 0: none (Tofino's SRAM is counted in blocks).
    pub block_sram_bytes: u64,
    /// Bytes of off-chip DRAM for `decl::MemoryKind::Dram` memories.
    pub dram_bytes: u64,
    /// Cycles a DRAM access takes (its latency; hidden by a pipelined memory controller).
    pub dram_latency_cycles: u32,
    /// Clock of the data path, MHz (0: not modelled).
    pub clock_mhz: u32,
    /// Width of the data path's bus, bits: what the header extractor and payload analyzer
    /// take per cycle.
    pub bus_bits: u32,
    /// Ports and their line rate, Gbit/s.
    pub ports: u32,
    pub port_gbps: u32,
    /// Latency of each module of the data path in cycles (a paper's measured table).
    pub cycle_costs: &'static [(&'static str, u64)],
}

const UNLIMITED: u32 = u32::MAX;

impl Target {
    /// Tofino 1 (Barefoot/Intel BFN-T10).
    pub fn tofino1() -> Target {
        Target {
            name: "tofino1",
            description: "Intel Tofino 1: 12 MAU stages per pipe, 4 pipes",
            stages: 12,
            pipes: 4,
            salus_per_stage: 4,
            sram_blocks_per_stage: 80,
            sram_block_words: 1024,
            sram_word_bits: 128,
            tcam_blocks_per_stage: 24,
            tcam_block_entries: 512,
            tcam_block_bits: 44,
            logical_tables_per_stage: 16,
            hash_units_per_stage: 6,
            max_register_cell_bits: 64,
            max_register_actions: 4,
            salu_output_bits: 32,
            salu_conditions: 2,
            salu_updates_per_half: 2,
            salu_output_words: 1,
            salu_phv_bits: 32,
            salu_regfile_rows: 4,
            salu_inline_const: (-8, 7),
            max_blocks_per_register: 35,
            register_spare_blocks: 1,
            exact_key_bits_per_stage: 1024,
            ternary_key_bits_per_stage: 528,
            parse_depth_bytes: 256,
            phv_bits: 4096,
            max_digest_bytes: 48,
            pktgen_apps: 8,
            payload_analyzer_items: 0,
            block_sram_bytes: 0,
            dram_bytes: 0,
            dram_latency_cycles: 0,
            clock_mhz: 0,
            bus_bits: 0,
            ports: 0,
            port_gbps: 0,
            cycle_costs: &[],
        }
    }

    /// Tofino 2 (JBay): more stages, otherwise similar per-stage resources.
    pub fn tofino2() -> Target {
        Target {
            name: "tofino2",
            description: "Intel Tofino 2: 20 MAU stages per pipe, 4 pipes",
            stages: 20,
            pipes: 4,
            salus_per_stage: 4,
            sram_blocks_per_stage: 80,
            sram_block_words: 1024,
            sram_word_bits: 128,
            tcam_blocks_per_stage: 24,
            tcam_block_entries: 512,
            tcam_block_bits: 44,
            logical_tables_per_stage: 16,
            hash_units_per_stage: 6,
            max_register_cell_bits: 128,
            max_register_actions: 4,
            salu_output_bits: 128,
            salu_conditions: 4,
            salu_updates_per_half: 2,
            salu_output_words: 4,
            salu_phv_bits: 64,
            salu_regfile_rows: 4,
            salu_inline_const: (-8, 7),
            max_blocks_per_register: 23,
            register_spare_blocks: 1,
            exact_key_bits_per_stage: 1024,
            ternary_key_bits_per_stage: 528,
            parse_depth_bytes: 384,
            phv_bits: 5120,
            max_digest_bytes: 48,
            pktgen_apps: 16,
            payload_analyzer_items: 0,
            block_sram_bytes: 0,
            dram_bytes: 0,
            dram_latency_cycles: 0,
            clock_mhz: 0,
            bus_bits: 0,
            ports: 0,
            port_gbps: 0,
            cycle_costs: &[],
        }
    }

    /// No limits: what the software switch runs.
    pub fn unbounded() -> Target {
        Target {
            name: "unbounded",
            description: "no hardware limits (the software switch itself)",
            stages: UNLIMITED,
            pipes: UNLIMITED,
            salus_per_stage: UNLIMITED,
            sram_blocks_per_stage: UNLIMITED,
            sram_block_words: 1024,
            sram_word_bits: 128,
            tcam_blocks_per_stage: UNLIMITED,
            tcam_block_entries: 512,
            tcam_block_bits: 44,
            logical_tables_per_stage: UNLIMITED,
            hash_units_per_stage: UNLIMITED,
            max_register_cell_bits: 64,
            max_register_actions: UNLIMITED,
            salu_output_bits: UNLIMITED,
            salu_conditions: UNLIMITED,
            salu_updates_per_half: UNLIMITED,
            salu_output_words: UNLIMITED,
            salu_phv_bits: UNLIMITED,
            salu_regfile_rows: UNLIMITED,
            salu_inline_const: (i32::MIN, i32::MAX),
            max_blocks_per_register: UNLIMITED,
            register_spare_blocks: 0,
            exact_key_bits_per_stage: UNLIMITED,
            ternary_key_bits_per_stage: UNLIMITED,
            parse_depth_bytes: UNLIMITED,
            phv_bits: UNLIMITED,
            max_digest_bytes: UNLIMITED,
            pktgen_apps: UNLIMITED,
            payload_analyzer_items: UNLIMITED,
            block_sram_bytes: u64::MAX,
            dram_bytes: u64::MAX,
            dram_latency_cycles: 0,
            clock_mhz: 0,
            bus_bits: 0,
            ports: 0,
            port_gbps: 0,
            cycle_costs: &[],
        }
    }

    /// The SwitchAgg paper's switch (§5, Table 3): a NetFPGA-SUME board (Xilinx Virtex-7
    /// 690T, four 10 Gbit/s ports, 8 GB of DDR3 in two channels) running a 128-bit data path
    /// at 200 MHz: header extraction, a payload analyzer per port that streams a packet's
    /// variable-length key-value pairs, a crossbar, eight front-end processing engines
    /// (FPE) in block RAM and one back-end engine (BPE) in DRAM with a ~25-cycle latency.
    ///
    /// Block RAM is the 690T's 1,470 blocks of 36 Kbit (6.6 MB): the paper's FPE sizes of
    /// 16 and 32 MB do not fit in it, and the resource report says so. Stages here are the
    /// modules of the data path in order, not MAU stages; the per-stage limits are the
    /// whole chip's (an FPGA places logic where it wants), so what bounds a design is the
    /// memory in bytes and the cycles per pair.
    pub fn switchagg_fpga() -> Target {
        Target {
            name: "switchagg-fpga",
            description: "SwitchAgg on NetFPGA-SUME: Virtex-7 690T, 4x10G, 128-bit bus at 200 MHz, 6.6 MB BRAM, 8 GB DDR3",
            stages: 16,
            pipes: 1,
            salus_per_stage: UNLIMITED,
            // 36-Kbit block RAMs seen as 1K x 32 bits (plus parity).
            sram_blocks_per_stage: 1470,
            sram_block_words: 1024,
            sram_word_bits: 32,
            // Small LUT-based TCAMs for the base program's routes, sized like a Tofino stage's.
            tcam_blocks_per_stage: 24,
            tcam_block_entries: 512,
            tcam_block_bits: 44,
            logical_tables_per_stage: UNLIMITED,
            hash_units_per_stage: 16,
            max_register_cell_bits: 64,
            max_register_actions: UNLIMITED,
            salu_output_bits: UNLIMITED,
            salu_conditions: UNLIMITED,
            salu_updates_per_half: UNLIMITED,
            salu_output_words: UNLIMITED,
            salu_phv_bits: UNLIMITED,
            salu_regfile_rows: UNLIMITED,
            salu_inline_const: (i32::MIN, i32::MAX),
            max_blocks_per_register: UNLIMITED,
            register_spare_blocks: 0,
            exact_key_bits_per_stage: UNLIMITED,
            ternary_key_bits_per_stage: UNLIMITED,
            // The payload analyzer streams the whole frame over the bus.
            parse_depth_bytes: 1518,
            // No PHV: headers and pairs stream over the 128-bit bus.
            phv_bits: UNLIMITED,
            max_digest_bytes: 64,
            pktgen_apps: 0,
            // A 1500-byte payload holds at most 214 of the smallest pairs (7 bytes each).
            payload_analyzer_items: 256,
            block_sram_bytes: 1470 * 36 * 1024 / 8,
            dram_bytes: 8 << 30,
            dram_latency_cycles: 25,
            clock_mhz: 200,
            bus_bits: 128,
            ports: 4,
            port_gbps: 10,
            cycle_costs: &[
                ("header_analyzer", 3),
                ("crossbar", 2),
                ("fpe_hash", 10),
                ("fpe_aggregate", 18),
                ("fpe_forward", 5),
                ("bpe_aggregate", 33),
                ("bpe_flush", 31_250_000),
            ],
        }
    }

    /// Names accepted by [`Target::by_name`].
    pub const NAMES: &'static [&'static str] = &["tofino1", "tofino2", "unbounded", "switchagg-fpga"];

    pub fn by_name(name: &str) -> Option<Target> {
        match name {
            "tofino1" | "tofino" | "tf1" => Some(Target::tofino1()),
            "tofino2" | "tf2" | "jbay" => Some(Target::tofino2()),
            "unbounded" | "software" => Some(Target::unbounded()),
            "switchagg-fpga" | "switchagg" | "netfpga" => Some(Target::switchagg_fpga()),
            _ => None,
        }
    }

    /// Bits in one SRAM block.
    pub fn sram_block_bits(&self) -> u64 {
        self.sram_block_words as u64 * self.sram_word_bits as u64
    }
}

/// True when `v` is the "no limit" value.
pub fn is_unlimited(v: u32) -> bool {
    v == UNLIMITED
}
