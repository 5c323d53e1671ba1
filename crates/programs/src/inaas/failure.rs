//! What one packet's pass could not do, collected as Algorithm 1's `meta.bitmap`, and the
//! per-tenant counts the switch keeps (the ledger's source of truth).
//!
//! The counts travel in bridged metadata to egress, where the tenant's usage registers are
//! updated once per packet, on its last pass.

/// Per-packet outcome of the primitives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Items the switch did not do (lease held by another tenant, key mismatch).
    pub failed: u32,
    /// Items whose register this packet took over (old contents go to the goalkeeper).
    pub preempted: u32,
    /// Items whose arithmetic saturated.
    pub overflow: u32,
    /// Register actions and compute operations run for the tenant (pay-per-use).
    pub alu_ops: u8,
    /// Accesses refused for a mismatch (uid or key): malicious-tenant detection.
    pub mismatches: u8,
    /// Leases taken (registers occupied).
    pub acquisitions: u8,
}

impl Outcome {
    /// Does the packet need the goalkeeper (Algorithm 1: `meta.bitmap != 0`)?
    pub fn needs_goalkeeper(&self) -> bool {
        self.failed | self.preempted | self.overflow != 0
    }
}

/// Bridged metadata layout (16 bytes available).
pub mod bridged {
    /// 1 when the packet belongs to a registered tenant (the usage below is counted).
    pub const VALID: usize = 0;
    /// Tenant slot, u16.
    pub const SLOT: usize = 1;
    /// The port the packet came in on (recirculation loses it), u16.
    pub const PORT: usize = 3;
    /// The goalkeeper's port, u16.
    pub const GOALKEEPER: usize = 5;
    pub const ALU_OPS: usize = 7;
    pub const MISMATCHES: usize = 8;
    pub const ACQUISITIONS: usize = 9;
    /// 1: a Paxos packet whose acceptors run in egress.
    pub const PAXOS: usize = 10;
    /// Acceptor segments whose lease this packet took: their Paxos cells are cleared.
    pub const CLEAR: usize = 11;
    /// A Bloom packet's egress work ([`crate::inaas::bloom::kind`]).
    pub const BLOOM: usize = 12;
    /// Bytes used.
    pub const LEN: u32 = 13;
}
