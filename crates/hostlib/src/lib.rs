//! hostlib: end-host protocol logic, sans-IO (packets and time in, packets and deadlines
//! out).
//!
//! - [`netstack`]: a minimal IPv4 host (ARP, ICMP echo, UDP) for processes that reach the
//!   switch without a kernel interface (the rack's UDP-tunnel mode).
//!
//! The in-network applications add their host sides here: allreduce workers (SwitchML-style ML gradient aggregation), aggregation mappers and
//! reducers (DAIET, SwitchAgg), search servers and agent (NetSHa), KV and lock clients and
//! servers (Hare), tenant adapters and the goalkeeper (INaaS).
//!
//! # Driving a machine
//!
//! Every state machine here speaks quinn-proto's vocabulary. `now` is the caller's clock,
//! passed in (nanoseconds; the INaaS machines count microseconds, `now_us`). A driver loop:
//!
//! 1. for each frame or datagram received, `handle(now, bytes)`;
//! 2. once `poll_timeout()` (a `now` value; `None`: no timer) is reached,
//!    `handle_timeout(now)`;
//! 3. send what `poll_transmit()` gives until it returns `None`; then wait for the next
//!    input or `poll_timeout()`.
//!
//! Other outputs drain the same way (`poll_event`, `poll_vote`). Variations, each for a
//! reason: `poll_transmit(now)` takes the time where sending starts new work
//! ([`hare::loadgen::KvLoad`] issues operations; [`aggregation::Mapper`] runs its timers
//! there and has no `handle_timeout`); the aggregation mapper and reducer append every
//! `(destination, payload)` due to a caller's buffer in one call (the mapper builds its
//! packets lazily, window by window); [`inaas::TenantClient`] returns completions from
//! `handle`/`handle_timeout`; [`inaas::paxos::Proposer`]'s `poll_timeout` is also due at
//! once when queued values can start instances (`propose` takes no time). Errors are
//! `thiserror` enums, one per module.
#![forbid(unsafe_code)]

pub mod aggregation;
pub mod allreduce;
pub mod hare;
pub mod inaas;
pub mod netstack;
pub mod switchagg;
