//! Data-plane programs, one module each, written against `pisa` only.
//!
//! - [`forward`]: the base program (L2, IPv4 LPM, per-port counters).
//! - [`daiet`]: DAIET in-network key-value aggregation, exactly once.
#![forbid(unsafe_code)]

use std::sync::Arc;

use pisa::Program;

pub mod daiet;
pub mod forward;
pub mod switchagg;

/// Names of the programs this build knows.
pub const NAMES: &[&str] = &["forward", "daiet", "switchagg"];

/// A fresh instance of a program by name.
pub fn by_name(name: &str) -> Option<Arc<dyn Program>> {
    match name {
        "forward" => Some(Arc::new(forward::Forward::new())),
        "daiet" => Some(Arc::new(daiet::Daiet::new())),
        "switchagg" => Some(Arc::new(switchagg::SwitchAgg::new())),
        _ => None,
    }
}

/// Instances for a comma-separated or listed set of names, with a clear error for unknown ones.
pub fn instantiate(names: &[String]) -> Result<Vec<Arc<dyn Program>>, String> {
    names.iter().map(|n| by_name(n.trim()).ok_or_else(|| format!("unknown program `{}` (known: {})", n.trim(), NAMES.join(", ")))).collect()
}
