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

/// Makes a fresh instance of one program.
type Constructor = fn() -> Arc<dyn Program>;

/// The programs this build knows: name and constructor, one row each.
const PROGRAMS: &[(&str, Constructor)] = &[
    ("forward", || Arc::new(forward::Forward::new())),
    ("daiet", || Arc::new(daiet::Daiet::new())),
    ("switchagg", || Arc::new(switchagg::SwitchAgg::new())),
    ("netsha", || Arc::new(netsha::Netsha::with_config(netsha::NetshaConfig::default()))),
    ("netsha-tofino1", || Arc::new(netsha::Netsha::with_config(netsha::NetshaConfig::tofino1()))),
    ("netsha-unbounded", || Arc::new(netsha::Netsha::with_config(netsha::NetshaConfig::unbounded()))),
    ("hare", || Arc::new(hare::Hare::new())),
    ("netcache", || Arc::new(hare::netcache::NetCache::new())),
    ("dyso", || Arc::new(hare::dyso::Dyso::new())),
    ("hare_lock", || Arc::new(hare::lock::HareLock::new())),
    ("inaas", || Arc::new(inaas::Inaas::new())),
    ("inaas_paxos", || Arc::new(inaas::Inaas::with_paxos())),
    ("allreduce", || Arc::new(allreduce::Allreduce::new())),
];

/// Names of the programs this build knows.
pub fn names() -> impl Iterator<Item = &'static str> {
    PROGRAMS.iter().map(|(n, _)| *n)
}

/// A fresh instance of a program by name, or by spec: `netsha:key=value,...` and the
/// Hare family's specs (see [`netsha::NetshaConfig::from_spec`], [`hare::by_spec`]).
pub fn by_name(name: &str) -> Option<Arc<dyn Program>> {
    if let Some((_, new)) = PROGRAMS.iter().find(|(n, _)| *n == name) {
        return Some(new());
    }
    if name.starts_with("netsha") {
        return netsha::NetshaConfig::from_spec(name).ok().map(|c| Arc::new(netsha::Netsha::with_config(c)) as Arc<dyn Program>);
    }
    if hare::is_spec(name) {
        return hare::by_spec(name);
    }
    None
}

/// Instances for a comma-separated or listed set of names, with a clear error for unknown ones.
pub fn instantiate(names: &[String]) -> Result<Vec<Arc<dyn Program>>, String> {
    instantiate_with(names, by_name)
}

/// A fresh instance of a program for a target: as [`by_name`], except that a program whose
/// size follows from the target is built for it (`inaas`, `inaas_paxos`: the segments a
/// pass serves, see [`inaas::lease::Layout::for_target`]).
pub fn by_name_for(name: &str, t: &pisa::Target) -> Option<Arc<dyn Program>> {
    match name {
        "inaas" => Some(Arc::new(inaas::Inaas::for_target(false, t))),
        "inaas_paxos" => Some(Arc::new(inaas::Inaas::for_target(true, t))),
        _ => by_name(name),
    }
}

/// [`instantiate`] for a target (see [`by_name_for`]).
pub fn instantiate_for(names: &[String], t: &pisa::Target) -> Result<Vec<Arc<dyn Program>>, String> {
    instantiate_with(names, |n| by_name_for(n, t))
}

fn instantiate_with(names: &[String], by: impl Fn(&str) -> Option<Arc<dyn Program>>) -> Result<Vec<Arc<dyn Program>>, String> {
    names
        .iter()
        .map(|n| {
            by(n.trim()).ok_or_else(|| format!("unknown program `{}` (known: {})", n.trim(), self::names().collect::<Vec<_>>().join(", ")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::by_name;

    #[test]
    fn specs_take_only_their_own_parameters() {
        for good in [
            "hare:key=16,value=8,slots=16",
            "hare_lock:key=8,slots=4",
            "netcache:key=16,value=8,slots=8,threshold=3",
            "dyso:key=16,value=8,rows=4,columns=2",
        ] {
            assert!(by_name(good).is_some(), "{good}");
        }
        for bad in ["hare:bogus=1", "hare:key=16,rows=4", "hare_lock:value=8", "netcache:seg=4", "dyso:slots=8", "netsha:bogus=1"] {
            assert!(by_name(bad).is_none(), "{bad} loaded");
        }
    }

    /// Register actions still on Rust bodies ("unchecked ALU", issue 19), per program,
    /// with array numbers as `N`. Converting one removes it here; a program gaining one
    /// (or a converted one going back) fails. Keep `docs/pisa-rules.md` in step.
    const UNCHECKED: &[(&str, &[&str])] = &[("inaas", &["inaas.kv_N.reduce"]), ("inaas_paxos", &["inaas_paxos.kv_N.reduce"])];

    #[test]
    fn unchecked_alus_are_the_listed_ones() {
        for name in super::names() {
            let p = by_name(name).unwrap();
            let r = pisa::ResourceReport::new(&[p.decl()], &pisa::Target::unbounded());
            let mut got: Vec<String> = r
                .unchecked_alus
                .iter()
                .map(|a| {
                    // Array numbers (kv_3, lease_17) as N.
                    let mut out = String::new();
                    let mut digits = false;
                    for ch in a.chars() {
                        if ch.is_ascii_digit() && out.ends_with('_') {
                            digits = true;
                        } else if !(digits && ch.is_ascii_digit()) {
                            if digits {
                                out.push('N');
                            }
                            digits = false;
                            out.push(ch);
                        }
                    }
                    if digits {
                        out.push('N');
                    }
                    out
                })
                .collect();
            got.sort();
            got.dedup();
            let want: Vec<String> =
                UNCHECKED.iter().find(|(n, _)| *n == name).map(|(_, l)| l.iter().map(|s| s.to_string()).collect()).unwrap_or_default();
            assert_eq!(got, want, "{name}: register actions on Rust bodies (unchecked ALU)");
        }
    }
}
