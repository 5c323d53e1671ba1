//! A fixed DAIET workload for instruction counting (the bench's packets, a given number of
//! rounds): `valgrind --tool=callgrind target/release/examples/daiet_count ROUNDS`. Run it
//! with two round counts; the difference of the instruction counts divided by the
//! difference of the pair updates is the cost of one pair update, set-up excluded.
fn main() {
    let rounds: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(100);
    let mut w = ports::aggregation::bench::daiet_workload(64, 4096);
    let mut packets = 0;
    for _ in 0..rounds {
        packets += w.round();
    }
    let drops = w.switch().counters().total_drops();
    println!("{} pair updates, {packets} packets, drops {drops}", rounds * w.pairs_per_round);
}
