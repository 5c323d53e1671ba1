//! AF_PACKET over a real veth pair: frames sent from inside a network namespace arrive at the
//! switch-side port intact (VLAN tags included), and frames the switch sends arrive inside.
//! Skipped (with a message) when not running as root.

use std::time::{Duration, Instant};

use pisa::packet::{BufPool, PacketBuf, DEFAULT_BUF_CAPACITY};
use ports::netns::{is_root, VethNs};
use ports::{AfPacketConfig, AfPacketPort, Port, TxMode};

/// A local-experimental EtherType, so frames the kernel itself sends never match.
const ETHERTYPE: u16 = 0x88B5;

fn frame(seq: u32, len: usize, vlan: Option<u16>) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x02]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
    let mut off = 12;
    if let Some(tci) = vlan {
        f[12..14].copy_from_slice(&0x8100u16.to_be_bytes());
        f[14..16].copy_from_slice(&tci.to_be_bytes());
        off = 16;
    }
    f[off..off + 2].copy_from_slice(&ETHERTYPE.to_be_bytes());
    f[off + 2..off + 6].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in f[off + 6..].iter_mut().enumerate() {
        *b = (i as u32 ^ seq) as u8;
    }
    f
}

/// Is this one of our test frames (tagged or not)?
fn ours(d: &[u8]) -> bool {
    d.len() >= 18 && (d[12..14] == ETHERTYPE.to_be_bytes() || (d[12..14] == [0x81, 0x00] && d[16..18] == ETHERTYPE.to_be_bytes()))
}

fn recv_ours(port: &mut AfPacketPort, pool: &mut BufPool, n: usize, timeout: Duration) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let mut v = Vec::new();
    let deadline = Instant::now() + timeout;
    while got.len() < n && Instant::now() < deadline {
        if port.recv_batch(pool, &mut v, 64) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        for p in v.drain(..) {
            if ours(p.data()) {
                got.push(p.data().to_vec());
            }
            pool.put(p);
        }
    }
    got
}

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

/// One's-complement check of an IPv4 UDP frame's checksum (independent of the crate's code).
fn udp_checksum_ok(f: &[u8]) -> bool {
    let ihl = (f[14] & 0x0f) as usize * 4;
    let udp = &f[14 + ihl..];
    let len = u16::from_be_bytes([udp[4], udp[5]]) as usize;
    let mut sum: u32 = 17 + len as u32;
    for c in f[26..34].chunks(2).chain(udp[..len].chunks(2)) {
        sum += u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32;
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum == 0xffff
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
    env.ip_in_ns(&["addr", "add", "10.233.0.1/24", "dev", &env.ns_if]).unwrap();
    env.ip_in_ns(&["neigh", "add", "10.233.0.2", "lladdr", "02:00:00:00:00:02", "dev", &env.ns_if]).unwrap();
    let mut sw = AfPacketPort::open(0, &env.root_if, &AfPacketConfig::default()).unwrap();
    let mut pool = BufPool::new(DEFAULT_BUF_CAPACITY, 16);
    env.run_in_ns(|| {
        let s = std::net::UdpSocket::bind("10.233.0.1:0").unwrap();
        for len in [1usize, 2, 17, 100, 1400] {
            s.send_to(&vec![0x5a; len], "10.233.0.2:7777").unwrap();
        }
    })
    .unwrap();
    let mut got = Vec::new();
    let mut v = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(3);
    while got.len() < 5 && Instant::now() < deadline {
        sw.recv_batch(&mut pool, &mut v, 16);
        for p in v.drain(..) {
            let d = p.data();
            if d.len() > 42 && d[12..14] == [0x08, 0x00] && d[23] == 17 {
                got.push(d.to_vec());
            }
        }
    }
    assert_eq!(got.len(), 5);
    for f in &got {
        assert!(udp_checksum_ok(f), "bad UDP checksum in {f:02x?}");
    }
}
