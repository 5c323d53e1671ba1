//! A fixed workload for instruction counting: `valgrind --tool=callgrind target/release/examples/pipeline_count`.
fn main() {
    let n = ports::bench::forward_rounds(64, 32, 3125);
    println!("{n} packets");
}
