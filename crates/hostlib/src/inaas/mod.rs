//! INaaS end-host logic, sans-IO: the provider's packet assembly for tenants
//! ([`assembly`]), the tenant's request/retransmission state ([`client`]) and the
//! goalkeeper ([`goalkeeper`]).

pub mod assembly;
pub mod bloom;
pub mod client;
pub mod goalkeeper;
pub mod paxos;
pub mod paxos_run;
pub mod service;

pub use assembly::{build_frame, parse_reply, reduce_key, Assembler, FrameError, ItemReq, ItemResult, Op, Reply};
pub use client::{Completion, TenantClient};
pub use goalkeeper::{GkStats, Goalkeeper, Grant, Holds, Spill, TenantInfo};
pub use service::{Service, SwitchUsage};

use wire::inaas::Operator;

/// What a tenant's switch memory holds, which decides what the goalkeeper does with a
/// preempted pair (§IV-C scheduling observations).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Latency-sensitive cache (KV store): a preempted pair is dropped, the store has it.
    Kv,
    /// Throughput-sensitive aggregation: a preempted partial aggregate is spilled.
    Reduce,
    /// Accuracy-sensitive (Bloom filter): never preempted by policy; kept if it were.
    Bloom,
    /// Consensus state (Paxos acceptors): kept.
    Paxos,
}

/// The exact result of a compute, in 64 bits (an independent implementation of the
/// switch's operators, which saturate at 32 bits).
pub fn arith_exact(op: Operator, value: i32, param: u32) -> i64 {
    let (v, p) = (value as i64, param as i32 as i64);
    match op {
        Operator::Add => v + p,
        Operator::Sub => v - p,
        Operator::Shl => ((value as u32).wrapping_shl(param & 31) as i32) as i64,
        Operator::Shr => ((value as u32).wrapping_shr(param & 31) as i32) as i64,
        Operator::And => v & p,
        Operator::Or => v | p,
        Operator::Xor => v ^ p,
        Operator::Not => !v,
        Operator::Max => v.max(p),
        Operator::Min => v.min(p),
    }
}
