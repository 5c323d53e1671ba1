//! `inswitch bench aggregation`'s measurements from Rust, in one run: DAIET and SwitchAgg
//! pair updates and `forward` packets per CPU-second, and DAIET's ratio to `forward` (to
//! compare builds side by side without the Python module). Both aggregation benches check
//! the switch's aggregate against the reference after the run (they panic otherwise).
//! `cargo run --release -p ports --example agg_rate [SECONDS]`.
fn main() {
    let secs: f64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(2.0);
    let d = std::time::Duration::from_secs_f64(secs);
    let r = ports::aggregation::bench::daiet_pipeline(64, 4096, d);
    let f = ports::aggregation::bench::forward_cpu_rate(d);
    let t = std::time::Instant::now();
    let s = ports::aggregation::bench::switchagg_pipeline(64, 4096, d);
    let s_total = t.elapsed().as_secs_f64();
    println!(
        "daiet {:.2} M pair updates/CPU-s, forward {:.2} M packets/CPU-s, ratio {:.3}; switchagg {:.2} M pair updates/CPU-s ({:.2} M/wall-s, {} keys checked, {} drops, {:.1} s with warm-up and flush)",
        r.pair_updates_per_cpu_s / 1e6,
        f / 1e6,
        r.pair_updates_per_cpu_s / f,
        s.pair_updates_per_cpu_s / 1e6,
        s.pair_updates_per_s / 1e6,
        s.verified_keys,
        s.drops,
        s_total
    );
}
