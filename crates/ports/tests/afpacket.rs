//! AF_PACKET over a real veth pair: frames sent from inside a network namespace arrive at the
//! switch-side port intact (VLAN tags included), and frames the switch sends arrive inside.
//! Skipped (with a message) when not running as root.

mod common;

use std::time::Duration;

use common::{frame, recv_ours};
use pisa::packet::{BufPool, PacketBuf, DEFAULT_BUF_CAPACITY};
use ports::netns::{is_root, VethNs};
use ports::{AfPacketConfig, AfPacketPort, Port, TxMode};

fn check_both_directions(tx_mode: TxMode) {
    if !is_root() {
        eprintln!("skipping AF_PACKET test: needs root to create a network namespace and veth pair");
        return;
    }
    let env = VethNs::create("ispt").expect("create netns + veth");
    let cfg = AfPacketConfig { tx_mode, ..AfPacketConfig::default() };
    let mut sw = AfPacketPort::open(4, &env.root_if, &cfg).expect("open switch-side port");
    let mut pool = BufPool::new(DEFAULT_BUF_CAPACITY, 256);

    // Host (namespace) -> switch: 300 frames of assorted sizes, every 10th VLAN-tagged.
    let sent: Vec<Vec<u8>> =
        (0..300).map(|i| frame(i, 60 + (i as usize * 37) % 1450, (i % 10 == 0).then_some(0x2000 | i as u16))).collect();
    let to_send = sent.clone();
    let ns_if = env.ns_if.clone();
    let host = env
        .spawn_in_ns(move || {
            let mut p = AfPacketPort::open(0, &ns_if, &cfg).expect("open namespace-side port");
            let mut pool = BufPool::new(DEFAULT_BUF_CAPACITY, 64);
            for chunk in to_send.chunks(50) {
                let mut v: Vec<PacketBuf> = chunk.iter().map(|f| PacketBuf::from_slice(f, 0)).collect();
                let n = p.send_batch(&mut v, &mut pool);
                assert_eq!(n, chunk.len(), "namespace side sent");
                std::thread::sleep(Duration::from_millis(2));
            }
            // Then receive what the switch sends back.
            recv_ours(&mut p, &mut pool, 100, Duration::from_secs(5))
        })
        .unwrap();
    let got = recv_ours(&mut sw, &mut pool, sent.len(), Duration::from_secs(5));
    assert_eq!(got.len(), sent.len(), "all frames from the namespace arrived");
    assert_eq!(got, sent, "frames intact and in order, VLAN tags restored");
    let s = sw.stats().snapshot();
    assert!(s.rx_packets >= 300);
    assert_eq!(s.rx_oversize, 0);

    // Switch -> host: 100 frames, some tagged. Give the namespace thread time to open its port.
    let back: Vec<Vec<u8>> = (1000..1100).map(|i| frame(i, 64 + (i as usize % 700), (i % 4 == 0).then_some(7))).collect();
    std::thread::sleep(Duration::from_millis(50));
    let mut v: Vec<PacketBuf> = back.iter().map(|f| PacketBuf::from_slice(f, 4)).collect();
    assert_eq!(sw.send_batch(&mut v, &mut pool), 100);
    assert!(v.is_empty());
    let host_got = host.join().unwrap();
    assert_eq!(host_got, back);
    assert_eq!(sw.stats().snapshot().tx_packets, 100);
    // Our own transmissions were not received back (PACKET_IGNORE_OUTGOING).
    assert!(recv_ours(&mut sw, &mut pool, 1, Duration::from_millis(100)).is_empty());
}

#[test]
fn afpacket_veth_both_directions_tx_ring() {
    check_both_directions(TxMode::Ring);
}

#[test]
fn afpacket_veth_both_directions_sendmmsg() {
    check_both_directions(TxMode::Sendmmsg);
}

#[test]
fn afpacket_oversize_frames_are_counted() {
    if !is_root() {
        eprintln!("skipping AF_PACKET oversize test: needs root");
        return;
    }
    let env = VethNs::create("ispo").expect("create netns + veth");
    env.ip_in_ns(&["link", "set", &env.ns_if, "mtu", "9000"]).unwrap();
    ports::netns::ip(&["link", "set", &env.root_if, "mtu", "9000"]).unwrap();
    // A port whose buffers hold 1024 bytes, fed a 3000-byte jumbo frame.
    let cfg = AfPacketConfig { buf_capacity: 1024, ..AfPacketConfig::default() };
    let mut sw = AfPacketPort::open(0, &env.root_if, &cfg).unwrap();
    let mut pool = BufPool::new(1024, 16);
    let ns_if = env.ns_if.clone();
    env.run_in_ns(move || {
        let mut p = AfPacketPort::open(0, &ns_if, &AfPacketConfig { buf_capacity: 9000, ..Default::default() }).unwrap();
        let mut pool = BufPool::new(9000, 4);
        let mut v = vec![PacketBuf::from_slice(&frame(1, 3000, None), 0), PacketBuf::from_slice(&frame(2, 500, None), 0)];
        assert_eq!(p.send_batch(&mut v, &mut pool), 2);
    })
    .unwrap();
    let got = recv_ours(&mut sw, &mut pool, 1, Duration::from_secs(3));
    assert_eq!(got, vec![frame(2, 500, None)]);
    assert_eq!(sw.stats().snapshot().rx_oversize, 1);
}

#[test]
fn afpacket_completes_offloaded_udp_checksums() {
    if !is_root() {
        eprintln!("skipping AF_PACKET checksum test: needs root");
        return;
    }
    // veth has transmit checksum offload on by default: the host's UDP packets leave with a
    // partial checksum, which the switch port must complete.
    let env = VethNs::create("ispc").expect("create netns + veth");
    let mut sw = AfPacketPort::open(0, &env.root_if, &AfPacketConfig::default()).unwrap();
    common::host_udp_arrives_with_complete_checksums(&env, "10.233.0", &mut sw);
}

#[test]
fn afpacket_rx_ring_has_the_asked_size_and_counts_overflow() {
    if !is_root() {
        eprintln!("skipping AF_PACKET ring size test: needs root");
        return;
    }
    let env = VethNs::create("rngr").expect("create netns + veth");
    // Default: 4096 slots asked, rounded up to whole 64 KiB blocks. A slot holds what a
    // 1500-byte MTU lets in (80 + 4 + 1522 bytes, 16-aligned: 1616), 40 to a block.
    let big = AfPacketPort::open(0, &env.root_if, &AfPacketConfig::default()).unwrap();
    assert_eq!(big.rx_ring(), Some((4120, 103 << 16)));
    drop(big);
    // At a 9000-byte MTU the slot is the 2048-byte buffer's (2144 bytes, 30 to a block).
    ports::netns::ip(&["link", "set", &env.root_if, "mtu", "9000"]).unwrap();
    let jumbo = AfPacketPort::open(0, &env.root_if, &AfPacketConfig::default()).unwrap();
    assert_eq!(jumbo.rx_ring(), Some((4110, 137 << 16)));
    drop(jumbo);
    ports::netns::ip(&["link", "set", &env.root_if, "mtu", "1500"]).unwrap();
    // 32 slots asked: one block, 40 slots, 64 KiB mapped.
    let cfg = AfPacketConfig { rx_ring_frames: 32, ..AfPacketConfig::default() };
    let mut sw = AfPacketPort::open(0, &env.root_if, &cfg).unwrap();
    assert_eq!(sw.rx_ring(), Some((40, 1 << 16)));
    // Boxed (as the data plane holds it), the port still reports its ring.
    let ns_if = env.ns_if.clone();
    env.run_in_ns(move || {
        let mut p = AfPacketPort::open(0, &ns_if, &AfPacketConfig::default()).unwrap();
        let mut pool = BufPool::new(DEFAULT_BUF_CAPACITY, 64);
        for chunk in 0..4 {
            let mut v: Vec<PacketBuf> = (0..50).map(|i| PacketBuf::from_slice(&frame(chunk * 50 + i, 100, None), 0)).collect();
            assert_eq!(p.send_batch(&mut v, &mut pool), 50);
        }
    })
    .unwrap();
    // Nobody read while 200 frames arrived: the ring kept 40, the rest are counted lost.
    let mut pool = BufPool::new(DEFAULT_BUF_CAPACITY, 256);
    let got = recv_ours(&mut sw, &mut pool, 200, Duration::from_millis(500));
    // (Up to 40: the kernel may have queued a frame of its own, e.g. IPv6 neighbour discovery.)
    assert!((30..=40).contains(&got.len()), "a full ring holds its slots: {}", got.len());
    sw.sync_kernel_stats();
    assert!(sw.stats().snapshot().rx_full >= 160, "{:?}", sw.stats().snapshot());
    let boxed: Box<dyn Port> = Box::new(sw);
    assert_eq!(boxed.rx_ring(), Some((40, 1 << 16)));
}
