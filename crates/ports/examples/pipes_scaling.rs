//! `cargo run --release -p ports --example pipes_scaling [SECONDS] [cross|local|both]`: the
//! forward workload on 1 pipe on 1 core and on 2 pipes on 2 cores, in one run (what
//! `inswitch bench forward` reports as `pipes_scaling`).
use std::time::Duration;

fn main() {
    let cores = ports::dataplane::allowed_cores().expect("affinity");
    let secs: f64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(2.0);
    let which = std::env::args().nth(2).unwrap_or_else(|| "both".into());
    for crossing in [true, false] {
        if (which.starts_with("cross") && !crossing) || (which == "local" && crossing) {
            continue;
        }
        let one = if which.ends_with("2") {
            two_only()
        } else {
            ports::bench::forward_pipes(64, 32, &cores[..1], crossing, Duration::from_secs_f64(secs)).expect("1 pipe")
        };
        let two =
            ports::bench::forward_pipes(64, 32, &cores[..2.min(cores.len())], crossing, Duration::from_secs_f64(secs)).expect("2 pipes");
        println!(
            "crossing={crossing}: 1 pipe {:.3} Mpps, 2 pipes {:.3} Mpps, ratio {:.3} (drops {} / ring_full {})",
            one.rate.mpps,
            two.rate.mpps,
            two.rate.mpps / one.rate.mpps,
            two.tm_drops,
            two.ring_full_drops
        );
    }
}

fn two_only() -> ports::bench::PipesRate {
    ports::bench::PipesRate {
        rate: ports::bench::PipelineRate { packets: 1, seconds: 1.0, mpps: 1.0 },
        pipes: 1,
        cores: vec![],
        crossed: 0,
        tm_drops: 0,
        ring_full_drops: 0,
    }
}
