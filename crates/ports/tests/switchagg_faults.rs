//! SwitchAgg exactly once on the threaded data plane: two mappers behind `FaultPort`s
//! (seeded loss, duplication and reordering, both directions) send numbered packets with
//! go-back-N retransmission; the reducer's sums must equal a HashMap of the input.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hostlib::switchagg::harness::{clone_session_op, frame, packetize, tree_config_op};
use pisa::{Program, ProgramSet, PORT_RECIRC};
use ports::dataplane::{Dataplane, DataplaneOptions};
use ports::memory::memory_pair;
use ports::{FaultConfig, FaultPort, MemoryPeer, Port};
use programs::switchagg::{Config, SwitchAgg, ACK_RID, ACK_SESSION_BASE, FLUSH_SESSION};
use wire::switchagg::{flags, AggPacket, Operation};
use wire::L2_L4_LEN;

const MAPPERS: usize = 2;
const REDUCER_PORT: u16 = 3;

fn pairs(m: usize) -> Vec<(Vec<u8>, u32)> {
    (0..3000u32).map(|i| (format!("word{}", (i * 7 + m as u32 * 13) % 700).into_bytes(), 1 + i % 3)).collect()
}

#[test]
fn reducer_sums_equal_the_reference_through_fault_ports() {
    let cfg = Config { fpe_bytes: 4 << 10, bpe_bytes: 16 << 10, slots_per_bucket: 4, max_trees: 1, max_children: 4 };
    let progs: Vec<Arc<dyn Program>> = vec![Arc::new(programs::forward::Forward::new()), Arc::new(SwitchAgg::with_config(cfg))];
    let set = Arc::new(ProgramSet::new(progs).unwrap());
    let mut ports: Vec<Box<dyn Port>> = Vec::new();
    let mut peers: Vec<MemoryPeer> = Vec::new();
    let mut fault_stats = Vec::new();
    for i in 0..4u16 {
        let (port, peer) = memory_pair(i, 4096);
        peers.push(peer);
        if (i as usize) < MAPPERS {
            let f = FaultPort::new(
                port,
                FaultConfig { seed: 11 + i as u64, loss: 0.08, duplicate: 0.08, reorder: 0.08, reorder_gap: 2, on_tx: true },
            );
            fault_stats.push(f.fault_stats());
            ports.push(Box::new(f));
        } else {
            ports.push(Box::new(port));
        }
    }
    let dp = Dataplane::start(set.clone(), ports, DataplaneOptions::default()).unwrap();
    dp.control(tree_config_op(&set, 0, REDUCER_PORT, MAPPERS as u16, Operation::Sum, 0, 1, 0)).unwrap();
    for p in 0..MAPPERS as u16 {
        dp.control(clone_session_op(ACK_SESSION_BASE + p, p, ACK_RID)).unwrap();
    }
    dp.control(clone_session_op(FLUSH_SESSION, PORT_RECIRC, 0)).unwrap();

    // Mappers: go-back-N over the faulty ports, a window of 8, a 20 ms timeout.
    type Batch = Vec<(Vec<u8>, u32)>;
    let packets: Vec<Vec<Batch>> = (0..MAPPERS).map(|m| packetize(&pairs(m))).collect();
    let mut base = [0u32; MAPPERS];
    let mut next = [0u32; MAPPERS];
    let mut sent_at = [Instant::now(); MAPPERS];
    let mut result: HashMap<Vec<u8>, u32> = HashMap::new();
    let mut reducer_seq = 0u32;
    let mut eot = false;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !eot && Instant::now() < deadline {
        for m in 0..MAPPERS {
            let total = packets[m].len() as u32;
            if base[m] < total && next[m] > base[m] && sent_at[m].elapsed() > Duration::from_millis(20) {
                next[m] = base[m];
            }
            while next[m] < total && next[m] < base[m] + 8 {
                let q = next[m];
                let fl = if q + 1 == total { flags::EOT } else { 0 };
                let f = frame(1 + m as u8, 200, 0, Operation::Sum, m as u16, q, fl, &packets[m][q as usize]);
                if !peers[m].send(&f) {
                    break;
                }
                if next[m] == base[m] {
                    sent_at[m] = Instant::now();
                }
                next[m] += 1;
            }
            while let Some(f) = peers[m].recv() {
                let Ok(a) = AggPacket::new_checked(&f[L2_L4_LEN..]) else { continue };
                if a.flags() & flags::ACK != 0 && a.child_id() == m as u16 && a.seq() >= base[m] && a.seq() < next[m] {
                    base[m] = a.seq() + 1;
                    sent_at[m] = Instant::now();
                }
            }
        }
        while let Some(f) = peers[REDUCER_PORT as usize].recv() {
            let a = AggPacket::new_checked(&f[L2_L4_LEN..]).expect("the switch sends well-formed packets");
            assert_eq!(a.seq(), reducer_seq, "the switch's stream to the reducer is in order");
            reducer_seq += 1;
            for (k, v) in a.pairs().map(|r| r.unwrap()) {
                *result.entry(k.to_vec()).or_insert(0) += v;
            }
            eot |= a.eot();
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    dp.stop();
    assert!(eot, "the tree was flushed to the reducer within the time limit");
    let mut want: HashMap<Vec<u8>, u32> = HashMap::new();
    for m in 0..MAPPERS {
        for (k, v) in pairs(m) {
            *want.entry(k).or_insert(0) += v;
        }
    }
    assert!(result == want, "reducer sums differ from the reference ({} vs {} keys)", result.len(), want.len());
    let lost: u64 = fault_stats
        .iter()
        .map(|s| s.rx_lost.load(std::sync::atomic::Ordering::Relaxed) + s.tx_lost.load(std::sync::atomic::Ordering::Relaxed))
        .sum();
    let dup: u64 = fault_stats.iter().map(|s| s.rx_duplicated.load(std::sync::atomic::Ordering::Relaxed)).sum();
    assert!(lost > 0 && dup > 0, "faults were injected (lost {lost}, duplicated {dup})");
}
