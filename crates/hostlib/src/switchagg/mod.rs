//! SwitchAgg's task launch (SwitchAgg §3 and §4.1): the shim layer a worker uses to start an
//! aggregation task, and the controller's side of the Launch → Configure → Ack exchange.
//! Sans-IO: packets in, packets out; the caller sends them over UDP and keeps the time.
//!
//! 1. The master's shim sends **Launch** (reducers and mappers) to the controller.
//! 2. The controller builds one tree per reducer and sends each switch a **Configure**
//!    (trees and their numbers of children; how it installs them is P4Runtime's business).
//! 3. Each switch answers **Ack** type 1; when every switch has, the controller answers
//!    the master with **Ack** type 0 and the mappers may start.
//!
//! Lost packets are retransmitted on timeout (`poll_timeout` / `handle_timeout`): the
//! master's Launch until its Ack, the controller's Configure to each switch until that
//! switch's Ack. The in-memory rack the tests and experiments drive is [`harness`].

pub mod harness;
pub mod shim;

pub use shim::{switch_on_configure, Controller, ControllerStats, Peer, Shim, SwitchPlan, DEFAULT_RTO_NS};
