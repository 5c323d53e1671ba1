//! The DAIET in-memory pipeline for a fixed time (for `perf record`): pair updates per
//! CPU-second. `cargo run --release -p ports --example daiet_rate [seconds [vocab]]`.
fn main() {
    let secs: f64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(3.0);
    // Optional second argument: the vocabulary (4,096 keys by default, as the bench).
    let vocab: u32 = std::env::args().nth(2).and_then(|s| s.parse().ok()).unwrap_or(4096);
    let r = ports::aggregation::bench::daiet_pipeline(64, vocab, std::time::Duration::from_secs_f64(secs));
    println!(
        "{:.2} M pair updates per CPU-second ({:.2} wall), {:.2} passes per packet, drops {}, {} keys checked against the reference",
        r.pair_updates_per_cpu_s / 1e6,
        r.pair_updates_per_s / 1e6,
        r.passes as f64 / r.packets as f64,
        r.drops,
        r.verified_keys
    );
}
