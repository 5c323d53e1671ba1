//! The DAIET bench with a larger working set than `inswitch bench aggregation`'s (whose 64
//! packets carry 640 keys and stay in cache): `agg_big [SECONDS] [PACKETS] [VOCAB]`, by
//! default 1,024 ten-pair packets over a 16,384-word vocabulary (about 10,000 keys across
//! the 24 register arrays of 65,536 cells), result checked as in the bench.
fn main() {
    let arg = |i: usize| std::env::args().nth(i);
    let secs: f64 = arg(1).and_then(|s| s.parse().ok()).unwrap_or(2.0);
    let batch: usize = arg(2).and_then(|s| s.parse().ok()).unwrap_or(1024);
    let vocab: u32 = arg(3).and_then(|s| s.parse().ok()).unwrap_or(16384);
    let r = ports::aggregation::bench::daiet_pipeline(batch, vocab, std::time::Duration::from_secs_f64(secs));
    println!(
        "daiet {:.2} M pair updates/CPU-s ({batch} packets, vocabulary {vocab}, {} keys verified)",
        r.pair_updates_per_cpu_s / 1e6,
        r.verified_keys
    );
}
