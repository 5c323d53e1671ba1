//! A fixed SwitchAgg workload for instruction counting (the bench's packets, a given number
//! of rounds): `valgrind --tool=callgrind target/release/examples/switchagg_count ROUNDS`.
//! Run it with two round counts; the difference of the instruction counts divided by the
//! difference of the pair updates is the cost of one pair update, set-up excluded.
fn main() {
    let rounds: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(10);
    let mut w = ports::aggregation::bench::switchagg_workload(64, 4096);
    let mut pairs = 0;
    for _ in 0..rounds {
        pairs += w.round();
    }
    let drops = w.switch().counters().total_drops();
    println!("{pairs} pair updates in {rounds} rounds, drops {drops}");
}
