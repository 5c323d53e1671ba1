//! Data-plane programs, one module each, written against `pisa` only.
//!
//! - [`forward`]: the base program (L2, IPv4 LPM, per-port counters).
//! - [`allreduce`]: SwitchML-style aggregation of 32-bit integer vectors (ML gradients), exactly once.
//! - [`daiet`]: DAIET in-network key-value aggregation, exactly once.
//! - [`switchagg`]: SwitchAgg's FPGA aggregation engines (FPE/BPE), on the `switchagg-fpga` target.
//! - [`netsha`]: NetSHa's in-switch top-K reduction and answer aggregation for distributed LSH search.
//! - [`hare`]: Hare (e-MAT, OO-Stat, state manager; KV store and lock manager) and the NetCache and DySO baselines.
//! - [`inaas`]: INaaS, one multi-tenant in-network service (leases, read/write/reduce/compute).
//! - [`reply`]: a received frame turned into a reply to its sender (shared by the programs).
#![forbid(unsafe_code)]

use std::sync::Arc;

use pisa::Program;

pub mod allreduce;
pub mod daiet;
pub mod forward;
pub mod hare;
pub mod inaas;
pub mod netsha;
pub mod reply;
pub mod switchagg;

/// Names of the programs this build knows.
pub const NAMES: &[&str] =
    &["forward", "daiet", "switchagg", "netsha", "netsha-tofino1", "hare", "netcache", "dyso", "hare_lock", "inaas", "allreduce"];

/// A fresh instance of a program by name.
pub fn by_name(name: &str) -> Option<Arc<dyn Program>> {
    match name {
        "forward" => Some(Arc::new(forward::Forward::new())),
        "daiet" => Some(Arc::new(daiet::Daiet::new())),
        "switchagg" => Some(Arc::new(switchagg::SwitchAgg::new())),
        n if n.starts_with("netsha") => {
            netsha::NetshaConfig::from_spec(n).ok().map(|c| Arc::new(netsha::Netsha::with_config(c)) as Arc<dyn Program>)
        }
        "hare" => Some(Arc::new(hare::Hare::new())),
        "netcache" => Some(Arc::new(hare::netcache::NetCache::new())),
        "dyso" => Some(Arc::new(hare::dyso::Dyso::new())),
        "hare_lock" => Some(Arc::new(hare::lock::HareLock::new())),
        n if hare::is_spec(n) => hare::by_spec(n),
        "inaas" => Some(Arc::new(inaas::Inaas::new())),
        "allreduce" => Some(Arc::new(allreduce::Allreduce::new())),
        _ => None,
    }
}

/// Instances for a comma-separated or listed set of names, with a clear error for unknown ones.
pub fn instantiate(names: &[String]) -> Result<Vec<Arc<dyn Program>>, String> {
    names.iter().map(|n| by_name(n.trim()).ok_or_else(|| format!("unknown program `{}` (known: {})", n.trim(), NAMES.join(", ")))).collect()
}
