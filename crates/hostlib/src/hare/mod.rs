//! Hare's host side (sans-IO): NOO-Stat with its min-heaps and integrator, and the frames
//! KV clients, servers and the analyzer exchange with the switch.

pub mod frames;
pub mod loadgen;
pub mod noostat;
pub mod ycsb;
