//! `inswitch bench aggregation`'s two measurements from Rust, in one run: DAIET pair
//! updates and `forward` packets per CPU-second, and their ratio (to compare builds side by
//! side without the Python module). `cargo run --release -p ports --example agg_rate [SECONDS]`.
fn main() {
    let secs: f64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(2.0);
    let d = std::time::Duration::from_secs_f64(secs);
    let r = ports::aggregation::bench::daiet_pipeline(64, 4096, d);
    let f = ports::aggregation::bench::forward_cpu_rate(d);
    println!(
        "daiet {:.2} M pair updates/CPU-s, forward {:.2} M packets/CPU-s, ratio {:.3}",
        r.pair_updates_per_cpu_s / 1e6,
        f / 1e6,
        r.pair_updates_per_cpu_s / f
    );
}
