fn main() {
    let secs: f64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(2.0);
    let batch: usize = std::env::args().nth(2).and_then(|s| s.parse().ok()).unwrap_or(1024);
    let vocab: u32 = std::env::args().nth(3).and_then(|s| s.parse().ok()).unwrap_or(16384);
    let r = ports::aggregation::bench::daiet_pipeline(batch, vocab, std::time::Duration::from_secs_f64(secs));
    println!("daiet {:.2} M pair updates/CPU-s (batch {batch}, vocab {vocab}, keys verified {})", r.pair_updates_per_cpu_s / 1e6, r.verified_keys);
}
