//! `cargo run --release -p ports --example pipes_scaling [SECONDS]`: the forward workload
//! on the threaded data plane, 1 pipe on 1 core against 2 pipes on 2 cores, in one run, for
//! flows that stay in their pipe and flows that cross pipes (what `inswitch bench forward`
//! reports as `pipes_scaling` and `pipes_scaling_crossing`).
use std::time::Duration;

fn main() {
    let cores = ports::dataplane::allowed_cores().expect("affinity");
    let secs: f64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(2.0);
    if cores.len() < 2 {
        eprintln!("needs 2 cores, this process may use {}", cores.len());
        std::process::exit(1);
    }
    for crossing in [false, true] {
        let run = |c: &[usize]| ports::bench::forward_pipes(64, 32, c, crossing, Duration::from_secs_f64(secs)).expect("run");
        let (one, two) = (run(&cores[..1]), run(&cores[..2]));
        let per_cpu = |r: &ports::bench::PipesRate| r.rate.packets as f64 / r.cpu_seconds.max(1e-9) / 1e6;
        println!(
            "{}: 1 pipe {:.3} Mpps ({:.2} CPU-s), 2 pipes {:.3} Mpps ({:.2} CPU-s), ratio {:.3}, per CPU-second {:.3} (drops {}, ring_full {})",
            if crossing { "crossing" } else { "local" },
            one.rate.mpps,
            one.cpu_seconds,
            two.rate.mpps,
            two.cpu_seconds,
            two.rate.mpps / one.rate.mpps,
            per_cpu(&two) / per_cpu(&one),
            two.tm_drops,
            two.ring_full_drops
        );
    }
}
