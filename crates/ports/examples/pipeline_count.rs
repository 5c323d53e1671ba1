//! A fixed workload for instruction counting: `valgrind --tool=callgrind target/release/examples/pipeline_count`
//! (100,000 packets of `forward` through `Switch::process`). With the argument `bare`, the
//! bare loop of `ports::bench::bare_forward_loop` instead (batches of 32 for 0.2 s of the
//! valgrind-slowed clock; divide its instructions by the packets printed).
fn main() {
    if std::env::args().nth(1).as_deref() == Some("bare") {
        let r = ports::bench::bare_forward_loop(32, std::time::Duration::from_millis(200));
        println!("{} packets (bare loop)", r.packets);
        return;
    }
    let n = ports::bench::forward_rounds(64, 32, 3125);
    println!("{n} packets");
}
