//! Pipeline rate of `forward` on one core: `cargo run --release -p ports --example pipeline_rate [SECONDS]`.
fn main() {
    let secs: f64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(2.0);
    for batch in [32usize, 64, 256] {
        let r = ports::bench::forward_pipeline(64, batch, std::time::Duration::from_secs_f64(secs));
        println!("batch {batch}: {:.2} Mpps ({} packets in {:.2}s)", r.mpps, r.packets, r.seconds);
    }
}
