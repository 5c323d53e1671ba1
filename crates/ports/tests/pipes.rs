//! A two-pipe data plane (ports 0-1 in pipe 0, ports 2-3 in pipe 1) running `forward` over
//! in-memory ports: flows between ports of different pipes cross the traffic manager's
//! rings and arrive intact and in order; each pipe keeps its own registers; a full ring
//! drops and counts instead of losing frames silently; pipe threads are pinned.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pisa::control::{ControlOp, ControlReply, WriteOp};
use pisa::{DropCode, FieldMatch, ProgramSet};
use ports::dataplane::{allowed_cores, check_cores, Dataplane, DataplaneOptions};
use ports::{memory_pair, MemoryPeer, Port};

fn mac(i: u8) -> [u8; 6] {
    [2, 0, 0, 0, 0, i]
}

/// Frame `seq` of the flow from port `src` to port `dst`: the sequence number and a
/// pattern derived from it fill the payload, so a corrupted or reordered frame shows.
fn frame(src: u8, dst: u8, seq: u32, len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[..6].copy_from_slice(&mac(dst));
    f[6..12].copy_from_slice(&mac(src));
    f[12..14].copy_from_slice(&[0x88, 0xB5]);
    f[14..18].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in f[18..].iter_mut().enumerate() {
        *b = (seq as usize).wrapping_mul(31).wrapping_add(i * 7 + src as usize) as u8;
    }
    f
}

struct Rig {
    dp: Dataplane,
    peers: Vec<MemoryPeer>,
    set: Arc<ProgramSet>,
}

fn rig(opts: DataplaneOptions) -> Rig {
    let set = Arc::new(ProgramSet::new(vec![programs::by_name("forward").unwrap()]).unwrap());
    let (ports, peers): (Vec<Box<dyn Port>>, Vec<MemoryPeer>) = (0..4)
        .map(|i| {
            let (p, h) = memory_pair(i, 65536);
            (Box::new(p) as Box<dyn Port>, h)
        })
        .unzip();
    let dp = Dataplane::start(set.clone(), ports, DataplaneOptions { pipes: 2, ..opts }).unwrap();
    let d = set.decl(0);
    let ids = set.ids(0);
    let t = |n: &str| ids.tables[d.tables.iter().position(|x| x.name == n).unwrap()];
    let a = |n: &str| ids.actions[d.actions.iter().position(|x| x.name == n).unwrap()];
    for i in 0..4u8 {
        let m = vec![FieldMatch::Exact { field: 0, value: mac(i).to_vec() }];
        let op = WriteOp::Insert;
        dp.control(ControlOp::TableWrite {
            table_id: t("l2_dmac"),
            op,
            matches: m.clone(),
            priority: 0,
            action_id: a("l2_forward"),
            params: vec![(1, vec![i])],
        })
        .unwrap();
        dp.control(ControlOp::TableWrite { table_id: t("l2_smac"), op, matches: m, priority: 0, action_id: a("nop"), params: vec![] })
            .unwrap();
    }
    Rig { dp, peers, set }
}

impl Rig {
    fn register(&self, name: &str) -> u32 {
        let d = self.set.decl(0);
        self.set.ids(0).registers[d.registers.iter().position(|r| r.name == name).unwrap()]
    }
    /// Cell `index` of register `name` in pipe `pipe` (packets low 32 bits for the port counters).
    fn cell(&self, pipe: u8, name: &str, index: u32) -> u64 {
        match self.dp.control_pipe(pipe, ControlOp::RegisterRead { register_id: self.register(name), index: Some(index) }).unwrap() {
            ControlReply::RegisterCells(c) => c[0].1,
            r => panic!("unexpected reply {r:?}"),
        }
    }
}

/// Send `frames` from `peer`, waiting for room when its queue to the switch is full.
fn send_all(peer: &MemoryPeer, frames: &[Vec<u8>]) {
    for f in frames {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !peer.send(f) {
            assert!(Instant::now() < deadline, "the switch stopped taking frames");
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

/// Receive `n` frames at `peer` (or fewer if none arrives for a second).
fn recv_n(peer: &MemoryPeer, n: usize) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    while got.len() < n {
        match peer.recv_timeout(Duration::from_secs(1)) {
            Some(f) => got.push(f),
            None => break,
        }
    }
    got
}

#[test]
fn flows_between_pipes_arrive_intact_and_in_order() {
    let r = rig(DataplaneOptions::default());
    assert_eq!(r.dp.port_map().pipe_of(1), Some(0));
    assert_eq!(r.dp.port_map().pipe_of(2), Some(1));
    const N: u32 = 5000;
    // Port 0 (pipe 0) -> port 2 (pipe 1) and port 3 (pipe 1) -> port 1 (pipe 0), at once,
    // with frames of every size from 60 to 1500 bytes.
    let a: Vec<Vec<u8>> = (0..N).map(|s| frame(0, 2, s, 60 + (s as usize * 37) % 1441)).collect();
    let b: Vec<Vec<u8>> = (0..N).map(|s| frame(3, 1, s, 60 + (s as usize * 53) % 1441)).collect();
    std::thread::scope(|sc| {
        sc.spawn(|| send_all(&r.peers[0], &a));
        sc.spawn(|| send_all(&r.peers[3], &b));
        let got2 = sc.spawn(|| recv_n(&r.peers[2], N as usize));
        let got1 = recv_n(&r.peers[1], N as usize);
        let got2 = got2.join().unwrap();
        // Exactly what was sent, byte for byte, in the order sent (the reference is the
        // list of frames itself: `forward` changes nothing in an L2 frame).
        assert_eq!(got2.len(), a.len(), "frames lost between pipe 0 and pipe 1");
        assert!(got2 == a, "frames from pipe 0 to pipe 1 changed or reordered");
        assert_eq!(got1.len(), b.len(), "frames lost between pipe 1 and pipe 0");
        assert!(got1 == b, "frames from pipe 1 to pipe 0 changed or reordered");
    });
    // Nothing else came out anywhere, and nothing was dropped.
    assert!(r.peers[0].recv().is_none() && r.peers[3].recv().is_none());
    let c = r.dp.counters().unwrap();
    assert_eq!(c.drops.iter().sum::<u64>(), 0);
    // Ingress ran in the pipe of the ingress port, egress in the pipe of the egress port.
    let per = r.dp.counters_per_pipe().unwrap();
    assert_eq!(per[0].ports[0].rx_packets, N as u64);
    assert_eq!(per[1].ports[2].tx_packets, N as u64);
    assert_eq!(per[1].ports[3].rx_packets, N as u64);
    assert_eq!(per[0].ports[1].tx_packets, N as u64);
    assert_eq!(per[1].ports[0].rx_packets + per[0].ports[2].tx_packets, 0);
}

#[test]
fn each_pipe_keeps_its_own_registers() {
    let r = rig(DataplaneOptions::default());
    // 7 frames 0 -> 2 (ingress pipe 0, egress pipe 1) and 3 frames 2 -> 3 (all in pipe 1).
    send_all(&r.peers[0], &(0..7).map(|s| frame(0, 2, s, 64)).collect::<Vec<_>>());
    send_all(&r.peers[2], &(0..3).map(|s| frame(2, 3, s, 64)).collect::<Vec<_>>());
    assert_eq!(recv_n(&r.peers[2], 7).len(), 7);
    assert_eq!(recv_n(&r.peers[3], 3).len(), 3);
    let pk = |v: u64| v & 0xFFFF_FFFF;
    // Received-frame counters (ingress) live in the pipe of the ingress port ...
    assert_eq!(pk(r.cell(0, "rx_port_counters", 0)), 7);
    assert_eq!(pk(r.cell(1, "rx_port_counters", 0)), 0);
    assert_eq!(pk(r.cell(1, "rx_port_counters", 2)), 3);
    assert_eq!(pk(r.cell(0, "rx_port_counters", 2)), 0);
    // ... sent-frame counters (egress) in the pipe of the egress port.
    assert_eq!(pk(r.cell(1, "tx_port_counters", 2)), 7);
    assert_eq!(pk(r.cell(0, "tx_port_counters", 2)), 0);
    assert_eq!(pk(r.cell(1, "tx_port_counters", 3)), 3);
    // A write to one pipe leaves the other's copy alone.
    let id = r.register("tx_port_counters");
    r.dp.control_pipe(0, ControlOp::RegisterWrite { register_id: id, index: Some(2), value: 99 }).unwrap();
    assert_eq!(r.cell(0, "tx_port_counters", 2), 99);
    assert_eq!(pk(r.cell(1, "tx_port_counters", 2)), 7);
    // More traffic counts on in pipe 1 only.
    send_all(&r.peers[0], &[frame(0, 2, 7, 64)]);
    assert_eq!(recv_n(&r.peers[2], 1).len(), 1);
    assert_eq!(pk(r.cell(1, "tx_port_counters", 2)), 8);
    assert_eq!(r.cell(0, "tx_port_counters", 2), 99);
}

#[test]
fn a_full_ring_drops_and_counts_every_frame_it_cannot_take() {
    // A ring of one batch: a burst from two ports of pipe 0 towards pipe 1 overflows it
    // whenever pipe 1 has not taken the previous batch yet.
    let r = rig(DataplaneOptions { ring_capacity: 1, ..DataplaneOptions::default() });
    const N: u32 = 20000;
    let a: Vec<Vec<u8>> = (0..N).map(|s| frame(0, 2, s, 64)).collect();
    let b: Vec<Vec<u8>> = (0..N).map(|s| frame(1, 3, s, 64)).collect();
    let (got2, got3) = std::thread::scope(|sc| {
        sc.spawn(|| send_all(&r.peers[0], &a));
        sc.spawn(|| send_all(&r.peers[1], &b));
        let g3 = sc.spawn(|| recv_n(&r.peers[3], N as usize));
        (recv_n(&r.peers[2], N as usize), g3.join().unwrap())
    });
    let c = r.dp.counters().unwrap();
    let ring_full = c.drops[DropCode::PIPE_RING_FULL.0 as usize];
    let delivered = (got2.len() + got3.len()) as u64;
    eprintln!("ring of one batch: {delivered} delivered, {ring_full} pipe_ring_full drops");
    // No silent loss: every frame sent is delivered or counted, by reason, at its port.
    assert_eq!(delivered + c.drops.iter().sum::<u64>(), 2 * N as u64, "delivered {delivered}, drops {:?}", c.drops);
    assert_eq!(c.ports[2].queue_drops + c.ports[3].queue_drops, 2 * N as u64 - delivered);
    assert_eq!(ring_full, 2 * N as u64 - delivered, "the only drops are full rings");
    // What arrives is still in order (drops leave gaps, never swaps).
    for got in [&got2, &got3] {
        let seqs: Vec<u32> = got.iter().map(|f| u32::from_be_bytes(f[14..18].try_into().unwrap())).collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "frames reordered");
    }
}

#[test]
fn pipe_threads_run_on_the_cores_given() {
    let cores = allowed_cores().unwrap();
    assert!(check_cores(&[0, 0], 2).unwrap_err().contains("twice"));
    assert!(check_cores(&[0], 2).unwrap_err().contains("one core per pipe"));
    assert!(check_cores(&[100_000], 1).unwrap_err().contains("not one this process may run on"));
    if cores.len() < 2 {
        return;
    }
    let want = vec![cores[1], cores[0]];
    let r = rig(DataplaneOptions { cores: want.clone(), ..DataplaneOptions::default() });
    assert_eq!(r.dp.cores(), &want[..]);
    // Each pipe thread's allowed CPUs, from /proc: exactly its core. (Other tests of this
    // file run pipe threads of their own, unpinned, at the same time.)
    let expect = [(0usize, want[0].to_string()), (1, want[1].to_string())];
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !expect.iter().all(|e| seen.contains(e)) && Instant::now() < deadline {
        seen.clear();
        for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            let Some(pipe) = comm.trim().strip_prefix("pipe").and_then(|p| p.parse::<usize>().ok()) else { continue };
            let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
            let allowed = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap_or("").trim().to_string();
            seen.push((pipe, allowed));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(expect.iter().all(|e| seen.contains(e)), "pipe threads and their CPUs: {seen:?}, want {expect:?}");
}
