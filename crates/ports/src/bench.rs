//! In-process benchmarks of the pipeline (no ports, no syscalls): how many packets per
//! second one core pushes through a program. The clock is read here, in the I/O layer,
//! never in the sans-IO core.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pisa::control::{ControlOp, WriteOp};
use pisa::{FieldMatch, PacketBuf, PipeConfig, ProgramSet, Switch};

/// Result of a pipeline run.
#[derive(Clone, Debug)]
pub struct PipelineRate {
    /// Packets pushed through ingress, traffic manager and egress.
    pub packets: u64,
    /// Seconds measured.
    pub seconds: f64,
    /// Millions of packets per second.
    pub mpps: f64,
}

/// A switch running `forward` with two hosts, and a batch of frames from host 0 to host 1.
fn forward_rig(frame_len: usize, batch: usize) -> (Switch, Vec<PacketBuf>) {
    let set = Arc::new(ProgramSet::new(vec![Arc::new(programs::forward::Forward::new())]).expect("forward loads"));
    let ids = set.ids(0).clone();
    let d = set.decl(0).clone();
    let t = |n: &str| ids.tables[d.tables.iter().position(|x| x.name == n).expect("table")];
    let a = |n: &str| ids.actions[d.actions.iter().position(|x| x.name == n).expect("action")];
    let cfg = PipeConfig { queue_capacity: batch.max(64) * 2, egress_budget: batch.max(64), ..PipeConfig::default() };
    let mut sw = Switch::new(set, 2, 1, cfg);
    let mac = |i: u8| vec![2, 0, 0, 0, 0, i];
    for i in 0..2u8 {
        let m = |v| vec![FieldMatch::Exact { field: 0, value: v }];
        let fwd = ControlOp::TableWrite {
            table_id: t("l2_dmac"),
            op: WriteOp::Insert,
            matches: m(mac(i)),
            priority: 0,
            action_id: a("l2_forward"),
            params: vec![(1, vec![i])],
        };
        let known = ControlOp::TableWrite {
            table_id: t("l2_smac"),
            op: WriteOp::Insert,
            matches: m(mac(i)),
            priority: 0,
            action_id: a("nop"),
            params: vec![],
        };
        sw.control(&fwd).expect("entry");
        sw.control(&known).expect("entry");
    }
    let mut frame = vec![0u8; frame_len.max(14)];
    frame[..6].copy_from_slice(&mac(1));
    frame[6..12].copy_from_slice(&mac(0));
    frame[12..14].copy_from_slice(&[0x08, 0x00]);
    let rx = (0..batch)
        .map(|_| {
            let mut b = sw.buffer_for(0);
            b.copy_from(&frame);
            b
        })
        .collect();
    (sw, rx)
}

/// One round: the batch through the switch, and its output back as the next input.
#[inline]
fn round(sw: &mut Switch, rx: &mut Vec<PacketBuf>, now: u64) -> u64 {
    sw.process(rx, now);
    std::mem::swap(rx, sw.tx(1));
    for p in rx.iter_mut() {
        p.port = 0;
    }
    rx.len() as u64
}

/// Exactly `rounds` batches through `forward` (for instruction counting under callgrind).
pub fn forward_rounds(frame_len: usize, batch: usize, rounds: u64) -> u64 {
    let (mut sw, mut rx) = forward_rig(frame_len, batch);
    (0..rounds).map(|r| round(&mut sw, &mut rx, r + 1)).sum()
}

/// Push `frame_len`-byte L2 frames through the `forward` program on one core, in batches of
/// `batch`, for about `duration`. The same buffers circulate (egress output becomes the next
/// input), so the measurement is the pipeline, not allocation or copying.
pub fn forward_pipeline(frame_len: usize, batch: usize, duration: Duration) -> PipelineRate {
    let (mut sw, mut rx) = forward_rig(frame_len, batch);
    let mut packets = 0u64;
    let mut now = 1u64;
    let mut start = Instant::now();
    let mut warm = true;
    loop {
        for _ in 0..256 {
            packets += round(&mut sw, &mut rx, now);
            now += 1;
        }
        let el = start.elapsed();
        // 100 ms of warm-up, then measure until the duration has passed.
        if warm && el > Duration::from_millis(100) {
            warm = false;
            packets = 0;
            start = Instant::now();
            continue;
        }
        if !warm && el >= duration {
            let seconds = el.as_secs_f64();
            return PipelineRate { packets, seconds, mpps: packets as f64 / seconds / 1e6 };
        }
    }
}

/// The floor under [`forward_pipeline`]: the same essential work per frame (parse two MAC
/// addresses, look both up in a hash map, update two counters) in a bare loop, with none of
/// the model around it. The ratio of the two is what the model's rule checking, traffic
/// manager and counters cost.
pub fn bare_forward_loop(batch: usize, duration: Duration) -> PipelineRate {
    use hashbrown::HashMap;
    use rustc_hash::FxBuildHasher;

    let mut table: HashMap<u64, u64, FxBuildHasher> = HashMap::with_hasher(FxBuildHasher);
    table.insert(0x0200_0000_0001, 1);
    table.insert(0x0200_0000_0000, 0);
    let mut bufs: Vec<Box<[u8]>> = (0..batch)
        .map(|_| {
            let mut b = vec![0u8; 2048];
            b[..6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
            b[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 0]);
            b.into_boxed_slice()
        })
        .collect();
    let mut counters = vec![0u64; 512];
    let mut packets = 0u64;
    let start = Instant::now();
    while start.elapsed() < duration {
        for _ in 0..1024 {
            for b in bufs.iter_mut() {
                let dst = u64::from_be_bytes([0, 0, b[0], b[1], b[2], b[3], b[4], b[5]]);
                let src = u64::from_be_bytes([0, 0, b[6], b[7], b[8], b[9], b[10], b[11]]);
                counters[0] = counters[0].wrapping_add(1 + (64 << 32));
                let known = table.get(&src).copied().unwrap_or(9);
                let port = table.get(&dst).copied().unwrap_or(0) as usize & 511;
                counters[port] = counters[port].wrapping_add(1 + (64 << 32) + known);
                b[13] ^= 1; // touch the frame, as a deparser would
            }
            packets += batch as u64;
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    std::hint::black_box(&counters);
    PipelineRate { packets, seconds, mpps: packets as f64 / seconds / 1e6 }
}
