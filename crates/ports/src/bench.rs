//! In-process benchmarks of the pipeline (no ports, no syscalls): how many packets per
//! second one core pushes through a program. The clock is read here, in the I/O layer,
//! never in the sans-IO core.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pisa::control::{ControlOp, WriteOp};
use pisa::{FieldMatch, PacketBuf, PipeConfig, ProgramSet, Switch};

use crate::dataplane::{Dataplane, DataplaneOptions};
use crate::spec::{open_ports, OpenOptions, PortSpec};

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
    let mut now = 1u64;
    timed(duration, || {
        let mut packets = 0;
        for _ in 0..256 {
            packets += round(&mut sw, &mut rx, now);
            now += 1;
        }
        packets
    })
}

/// Run `step` (which returns the packets it moved) over and over: 100 ms of warm-up, then
/// measure until `duration` has passed.
fn timed(duration: Duration, mut step: impl FnMut() -> u64) -> PipelineRate {
    let mut packets = 0u64;
    let mut start = Instant::now();
    let mut warm = true;
    loop {
        packets += step();
        let el = start.elapsed();
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

/// A port that offers frames as fast as its pipe takes them (a line-rate sender with the
/// frames already in memory: a 64-byte copy into a pool buffer per frame, what a NIC's
/// receive DMA would do) and takes every frame sent to it (counted, buffer recycled).
struct LoadPort {
    id: pisa::PortId,
    name: String,
    frame: Vec<u8>,
    stats: Arc<crate::PortStats>,
}

impl crate::Port for LoadPort {
    fn name(&self) -> &str {
        &self.name
    }
    fn id(&self) -> pisa::PortId {
        self.id
    }
    fn recv_batch(&mut self, pool: &mut pisa::BufPool, out: &mut Vec<PacketBuf>, max: usize) -> usize {
        for _ in 0..max {
            let mut b = pool.get();
            b.copy_from(&self.frame);
            b.port = self.id;
            out.push(b);
        }
        self.stats.add_rx(max as u64, (max * self.frame.len()) as u64);
        max
    }
    fn send_batch(&mut self, pkts: &mut Vec<PacketBuf>, pool: &mut pisa::BufPool) -> usize {
        let n = pkts.len();
        let bytes: usize = pkts.iter().map(|p| p.len()).sum();
        for p in pkts.drain(..) {
            pool.put(p);
        }
        self.stats.add_tx(n as u64, bytes as u64);
        n
    }
    fn poll_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }
    fn stats(&self) -> Arc<crate::PortStats> {
        self.stats.clone()
    }
    /// A source that can wait, as a capture file can: the pipe reads it only while its
    /// queues and rings have room, so the run measures the pipes, not drops of an
    /// overrun queue.
    fn replay_done(&self) -> Option<bool> {
        Some(false)
    }
}

/// Result of one multi-pipe run.
#[derive(Clone, Debug)]
pub struct PipesRate {
    /// The rate delivered at the ports.
    pub rate: PipelineRate,
    /// Pipes (threads).
    pub pipes: u8,
    /// The cores the pipes were pinned to.
    pub cores: Vec<usize>,
    /// Packets that crossed between pipes (ingress pipe other than egress pipe).
    pub crossed: u64,
    /// Drops of the pipeline and traffic manager (every reason).
    pub tm_drops: u64,
    /// Of them, frames dropped because a crossbar ring was full (`pipe_ring_full`).
    pub ring_full_drops: u64,
    /// CPU seconds the pipe threads ran during the measurement, and the seconds they were
    /// runnable but waiting for a CPU (`/proc/self/task/*/schedstat`; zero where absent).
    pub cpu_seconds: f64,
    /// Seconds the pipe threads waited on a run queue (runnable, not running).
    pub wait_seconds: f64,
}

/// Summed (run, wait) nanoseconds of this process's threads named `pipe<N>`.
fn pipe_schedstat() -> (u64, u64) {
    let mut sum = (0, 0);
    for t in std::fs::read_dir("/proc/self/task").into_iter().flatten().flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if comm.trim().strip_prefix("pipe").is_none_or(|n| n.parse::<u32>().is_err()) {
            continue;
        }
        let st = std::fs::read_to_string(t.path().join("schedstat")).unwrap_or_default();
        let mut f = st.split_whitespace().map(|v| v.parse::<u64>().unwrap_or(0));
        sum.0 += f.next().unwrap_or(0);
        sum.1 += f.next().unwrap_or(0);
    }
    sum
}

/// The `forward` program on the threaded data plane with four ports, each offering 64-byte
/// frames at full speed to port `(i + 2) % 4` (`crossing`: with two pipes, ports 0-1 in
/// pipe 0 and 2-3 in pipe 1, every frame crosses pipes through the traffic manager's rings)
/// or to port `i ^ 1` (every frame stays in its pipe). `cores[i]` runs pipe `i`; one pipe per
/// core given. Measured for `duration` after 200 ms of warm-up: frames delivered at the ports.
pub fn forward_pipes(frame_len: usize, batch: usize, cores: &[usize], crossing: bool, duration: Duration) -> std::io::Result<PipesRate> {
    let pipes = cores.len().max(1) as u8;
    let set = Arc::new(ProgramSet::new(vec![Arc::new(programs::forward::Forward::new())]).expect("forward loads"));
    let ids = set.ids(0).clone();
    let d = set.decl(0).clone();
    let t = |n: &str| ids.tables[d.tables.iter().position(|x| x.name == n).expect("table")];
    let a = |n: &str| ids.actions[d.actions.iter().position(|x| x.name == n).expect("action")];
    let mac = |i: u8| vec![2, 0, 0, 0, 1, i];
    let dst = |i: u8| if crossing { (i + 2) % 4 } else { i ^ 1 };
    let ports: Vec<Box<dyn crate::Port>> = (0..4u8)
        .map(|i| {
            let mut frame = vec![0u8; frame_len.max(14)];
            frame[..6].copy_from_slice(&mac(dst(i)));
            frame[6..12].copy_from_slice(&mac(i));
            frame[12..14].copy_from_slice(&[0x08, 0x00]);
            Box::new(LoadPort { id: i as pisa::PortId, name: format!("load{i}"), frame, stats: Default::default() }) as Box<dyn crate::Port>
        })
        .collect();
    let cfg = PipeConfig { queue_capacity: 1024, egress_budget: batch.max(64) * 2, ..PipeConfig::default() };
    let opts = DataplaneOptions { pipes, pipe: cfg, batch, cores: cores.to_vec(), hold_replay: true, ..DataplaneOptions::default() };
    let dp = Dataplane::start(set, ports, opts)?;
    let err = |e: pisa::ControlError| std::io::Error::other(e.to_string());
    for i in 0..4u8 {
        let m = |v| vec![FieldMatch::Exact { field: 0, value: v }];
        dp.control(ControlOp::TableWrite {
            table_id: t("l2_dmac"),
            op: WriteOp::Insert,
            matches: m(mac(i)),
            priority: 0,
            action_id: a("l2_forward"),
            params: vec![(1, vec![i])],
        })
        .map_err(err)?;
        dp.control(ControlOp::TableWrite {
            table_id: t("l2_smac"),
            op: WriteOp::Insert,
            matches: m(mac(i)),
            priority: 0,
            action_id: a("nop"),
            params: vec![],
        })
        .map_err(err)?;
    }
    let tx = |dp: &Dataplane| dp.port_stats().iter().map(|(_, s)| s.snapshot().tx_packets).sum::<u64>();
    let drops = |dp: &Dataplane| dp.counters().map(|c| (c.drops.iter().sum::<u64>(), c.drops[pisa::DropCode::PIPE_RING_FULL.0 as usize]));
    dp.start_replay();
    std::thread::sleep(Duration::from_millis(200));
    let (p0, d0, s0, t0) = (tx(&dp), drops(&dp).map_err(err)?, pipe_schedstat(), Instant::now());
    std::thread::sleep(duration);
    let (p1, s1, seconds) = (tx(&dp), pipe_schedstat(), t0.elapsed().as_secs_f64());
    let d1 = drops(&dp).map_err(err)?;
    dp.stop();
    let packets = p1 - p0;
    if packets == 0 {
        return Err(std::io::Error::other("no frame was forwarded"));
    }
    let map = dp.port_map().clone();
    let crossed = if (0..4u8).any(|i| map.pipe_of(i as pisa::PortId) != map.pipe_of(dst(i) as pisa::PortId)) { packets } else { 0 };
    Ok(PipesRate {
        rate: PipelineRate { packets, seconds, mpps: packets as f64 / seconds / 1e6 },
        pipes,
        cores: cores.to_vec(),
        crossed,
        tm_drops: d1.0 - d0.0,
        ring_full_drops: d1.1 - d0.1,
        cpu_seconds: s1.0.saturating_sub(s0.0) as f64 / 1e9,
        wait_seconds: s1.1.saturating_sub(s0.1) as f64 / 1e9,
    })
}

/// The router's own MAC: frames addressed to it are routed (`l2_dmac` -> `l3_route`).
const ROUTER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0xFE];
/// Routes installed for the routing benchmarks (10.0.i.0/24, and a /16 under them).
const ROUTES: u8 = 16;

/// The `forward` program set and the entries of the IPv4 routing path (bmv2's
/// `simple_router`): frames to [`ROUTER_MAC`] are routed by LPM to port 1, with the TTL
/// decremented, the checksum patched and the MACs rewritten (the next hop's address is
/// the router's again, so the in-memory loop can route the same frames round after round).
fn route_setup() -> (Arc<ProgramSet>, Vec<ControlOp>) {
    let set = Arc::new(ProgramSet::new(vec![Arc::new(programs::forward::Forward::new())]).expect("forward loads"));
    let ids = set.ids(0).clone();
    let d = set.decl(0).clone();
    let t = |n: &str| ids.tables[d.tables.iter().position(|x| x.name == n).expect("table")];
    let a = |n: &str| ids.actions[d.actions.iter().position(|x| x.name == n).expect("action")];
    let exact = |v: &[u8]| vec![FieldMatch::Exact { field: 0, value: v.to_vec() }];
    let mut ops = vec![
        ControlOp::TableWrite {
            table_id: t("l2_dmac"),
            op: WriteOp::Insert,
            matches: exact(&ROUTER_MAC),
            priority: 0,
            action_id: a("l3_route"),
            params: vec![],
        },
        ControlOp::TableWrite {
            table_id: t("l2_smac"),
            op: WriteOp::Insert,
            matches: exact(&[2, 0, 0, 0, 0, 0]),
            priority: 0,
            action_id: a("nop"),
            params: vec![],
        },
    ];
    let route = |value: Vec<u8>, prefix_len: u32| ControlOp::TableWrite {
        table_id: t("ipv4_lpm"),
        op: WriteOp::Insert,
        matches: vec![FieldMatch::Lpm { field: 0, value, prefix_len }],
        priority: 0,
        action_id: a("set_nexthop"),
        params: vec![(1, vec![1]), (2, ROUTER_MAC.to_vec()), (3, vec![2, 0, 0, 0, 0, 0])],
    };
    ops.push(route(vec![10, 0, 0, 0], 16));
    for i in 0..ROUTES {
        ops.push(route(vec![10, 0, i, 0], 24));
    }
    (set, ops)
}

/// Frame `i` of the routing benchmarks: Ethernet + IPv4 (valid checksum, TTL 255) + UDP,
/// `frame_len` bytes, to 10.0.(i mod 16).(i mod 251 + 1).
pub fn route_frame(i: usize, frame_len: usize) -> Vec<u8> {
    let mut f = vec![0u8; frame_len.max(42)];
    f[..6].copy_from_slice(&ROUTER_MAC);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 0]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip_len = (f.len() - 14) as u16;
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    ip[8] = 255;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&[10, 1, 0, 1]);
    ip[16..20].copy_from_slice(&[10, 0, (i % ROUTES as usize) as u8, (i % 251 + 1) as u8]);
    let sum = ip.chunks(2).fold(0u32, |s, w| s + u16::from_be_bytes([w[0], w[1]]) as u32);
    let sum = (sum & 0xFFFF) + (sum >> 16);
    let sum = !(((sum & 0xFFFF) + (sum >> 16)) as u16);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    f[34..36].copy_from_slice(&5000u16.to_be_bytes());
    f[36..38].copy_from_slice(&5001u16.to_be_bytes());
    let udp_len = (f.len() - 34) as u16;
    f[38..40].copy_from_slice(&udp_len.to_be_bytes());
    f
}

/// Push `frame_len`-byte IPv4 frames through `forward`'s routing path (parse, LPM, TTL
/// decrement, checksum update, MAC rewrite) on one core for about `duration`, the buffers
/// circulating as in [`forward_pipeline`]. Every 200 rounds the frames are restored (TTL
/// 255), a 64-byte copy per frame per 200 routings.
pub fn route_pipeline(frame_len: usize, batch: usize, duration: Duration) -> PipelineRate {
    let (set, ops) = route_setup();
    let cfg = PipeConfig { queue_capacity: batch.max(64) * 2, egress_budget: batch.max(64), ..PipeConfig::default() };
    let mut sw = Switch::new(set, 2, 1, cfg);
    for op in &ops {
        sw.control(op).expect("entry");
    }
    let frames: Vec<Vec<u8>> = (0..batch).map(|i| route_frame(i, frame_len)).collect();
    let mut rx: Vec<PacketBuf> = frames
        .iter()
        .map(|f| {
            let mut b = sw.buffer_for(0);
            b.copy_from(f);
            b
        })
        .collect();
    let mut now = 1u64;
    timed(duration, || {
        let mut packets = 0;
        for _ in 0..200 {
            packets += round(&mut sw, &mut rx, now);
            now += 1;
        }
        assert_eq!(rx.len(), batch, "every frame routed (none dropped)");
        for (b, f) in rx.iter_mut().zip(&frames) {
            b.copy_from(f);
        }
        packets
    })
}

/// The routing path through file ports: `packets` frames replayed from a pcap file in
/// `dir` into port 0 of a running data plane (one pipe thread), routed to port 1 and
/// written to a pcapng file there. Timed from the start of the replay until
/// [`Dataplane::replay_done`]; includes reading frames into buffers and writing the output
/// capture, not loading the input file. Fails if any frame is missing from the output.
pub fn pcap_route(frame_len: usize, packets: usize, dir: &std::path::Path) -> std::io::Result<PipelineRate> {
    std::fs::create_dir_all(dir)?;
    let (input, empty) = (dir.join("route-in.pcap"), dir.join("empty-in.pcap"));
    let (out0, out1) = (dir.join("port0-out.pcapng"), dir.join("port1-out.pcapng"));
    let mut w = std::io::BufWriter::new(std::fs::File::create(&input)?);
    let header = |w: &mut dyn std::io::Write| -> std::io::Result<()> {
        for v in [0xA1B2_C3D4u32, 0x0004_0002, 0, 0, 65535, 1] {
            w.write_all(&v.to_le_bytes())?;
        }
        Ok(())
    };
    header(&mut w)?;
    for i in 0..packets {
        let f = route_frame(i, frame_len);
        for v in [0, 0, f.len() as u32, f.len() as u32] {
            std::io::Write::write_all(&mut w, &v.to_le_bytes())?;
        }
        std::io::Write::write_all(&mut w, &f)?;
    }
    std::io::Write::flush(&mut w)?;
    drop(w);
    header(&mut std::fs::File::create(&empty)?)?;
    let spec = PortSpec::Files { files: vec![(input.clone(), out0.clone()), (empty.clone(), out1.clone())] };
    let (ports, _) = open_ports(&spec, &OpenOptions::default()).map_err(std::io::Error::other)?;
    let (set, ops) = route_setup();
    let dp = Dataplane::start(set, ports, DataplaneOptions { hold_replay: true, ..DataplaneOptions::default() })?;
    for op in ops {
        dp.control(op).map_err(|e| std::io::Error::other(e.to_string()))?;
    }
    let start = Instant::now();
    dp.start_replay();
    while dp.replay_done().map_err(|e| std::io::Error::other(e.to_string()))? != Some(true) {
        std::thread::sleep(Duration::from_micros(200));
    }
    let seconds = start.elapsed().as_secs_f64();
    let sent = dp.port_stats()[1].1.snapshot().tx_packets;
    dp.stop();
    drop(dp);
    for f in [&input, &empty, &out0, &out1] {
        let _ = std::fs::remove_file(f);
    }
    if sent != packets as u64 {
        return Err(std::io::Error::other(format!("{sent} of {packets} frames left port 1")));
    }
    Ok(PipelineRate { packets: sent, seconds, mpps: sent as f64 / seconds / 1e6 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forward_pipes_delivers_on_one_and_two_pipes() {
        let cores = crate::dataplane::allowed_cores().unwrap();
        let one = forward_pipes(64, 32, &cores[..1], true, Duration::from_millis(100)).unwrap();
        assert!(one.rate.packets > 0 && one.crossed == 0);
        if cores.len() >= 2 {
            let two = forward_pipes(64, 32, &cores[..2], true, Duration::from_millis(100)).unwrap();
            assert!(two.rate.packets > 0 && two.crossed == two.rate.packets);
        }
    }

    #[test]
    fn route_frames_have_valid_checksums_and_are_all_routed() {
        let f = route_frame(3, 64);
        let ip = &f[14..34];
        let sum = ip.chunks(2).fold(0u32, |s, w| s + u16::from_be_bytes([w[0], w[1]]) as u32);
        assert_eq!((sum & 0xFFFF) + (sum >> 16), 0xFFFF);
        let r = route_pipeline(64, 32, Duration::from_millis(150));
        assert!(r.packets > 0);
        let dir = std::env::temp_dir().join(format!("ports-bench-{}-{}", std::process::id(), crate::monotonic_ns()));
        let r = pcap_route(64, 2000, &dir).unwrap();
        assert_eq!(r.packets, 2000);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
