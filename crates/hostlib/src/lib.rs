//! hostlib: end-host protocol logic, sans-IO (packets and time in, packets and deadlines
//! out).
//!
//! - [`netstack`]: a minimal IPv4 host (ARP, ICMP echo, UDP) for processes that reach the
//!   switch without a kernel interface (the rack's UDP-tunnel mode).
//!
//! The in-network applications add their host sides here: allreduce workers (SwitchML-style ML gradient aggregation), aggregation mappers and
//! reducers (DAIET, SwitchAgg), search servers and agent (NetSHa), KV and lock clients and
//! servers (Hare), tenant adapters and the goalkeeper (INaaS).
#![forbid(unsafe_code)]

pub mod aggregation;
pub mod allreduce;
pub mod hare;
pub mod inaas;
pub mod netstack;
pub mod switchagg;
