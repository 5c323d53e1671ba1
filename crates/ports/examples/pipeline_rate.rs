//! Pipeline rate of `forward` on one core, against the bare loop doing the same essential
//! work: `cargo run --release -p ports --example pipeline_rate [SECONDS]`.
fn main() {
    let secs: f64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(2.0);
    let d = std::time::Duration::from_secs_f64(secs);
    let bare = ports::bench::bare_forward_loop(32, d);
    println!("bare loop: {:.2} Mpps", bare.mpps);
    for batch in [32usize, 64, 256] {
        let r = ports::bench::forward_pipeline(64, batch, d);
        println!(
            "batch {batch}: {:.2} Mpps ({} packets in {:.2}s), {:.2} of the bare loop",
            r.mpps,
            r.packets,
            r.seconds,
            r.mpps / bare.mpps
        );
    }
}
