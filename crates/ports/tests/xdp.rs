//! AF_XDP over a real veth pair: frames from a namespace arrive at the switch-side XDP port
//! intact, frames the port sends arrive inside, every frame offered is either received or
//! counted as a drop by ring, and the XDP program goes away with the port.
//! Skipped (with a message) when not running as root.

use std::process::Command;
use std::time::{Duration, Instant};

use pisa::packet::{BufPool, PacketBuf, DEFAULT_BUF_CAPACITY};
use ports::netns::{is_root, VethNs};
use ports::{AfPacketConfig, AfPacketPort, Port, XdpConfig, XdpPort};

const ETHERTYPE: u16 = 0x88B5;

fn frame(seq: u32, len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x02]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
    f[12..14].copy_from_slice(&ETHERTYPE.to_be_bytes());
    f[14..18].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in f[18..].iter_mut().enumerate() {
        *b = (i as u32 ^ seq) as u8;
    }
    f
}

fn ours(d: &[u8]) -> bool {
    d.len() >= 18 && d[12..14] == ETHERTYPE.to_be_bytes()
}

fn recv_ours(port: &mut dyn Port, pool: &mut BufPool, n: usize, timeout: Duration) -> Vec<Vec<u8>> {
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

fn xdp_attached(ifname: &str) -> bool {
    let out = Command::new("ip").args(["-d", "link", "show", "dev", ifname]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).contains("prog/xdp")
}

#[test]
fn xdp_veth_both_directions_and_detach() {
    if !is_root() {
        eprintln!("skipping AF_XDP test: needs root to create a network namespace and veth pair");
        return;
    }
    let env = VethNs::create("isxd").expect("create netns + veth");
    let mut sw = XdpPort::open(4, &env.root_if, &XdpConfig::default()).expect("open XDP port");
    assert!(sw.native(), "veth has native XDP");
    assert!(!sw.zero_copy(), "veth has no zero-copy");
    assert!(sw.name().contains("native,copy"), "{}", sw.name());
    assert!(xdp_attached(&env.root_if), "program attached while the port is open");
    let mut pool = BufPool::new(DEFAULT_BUF_CAPACITY, 256);

    let sent: Vec<Vec<u8>> = (0..300).map(|i| frame(i, 60 + (i as usize * 37) % 1450)).collect();
    let to_send = sent.clone();
    let ns_if = env.ns_if.clone();
    let host = env
        .spawn_in_ns(move || {
            let mut p = AfPacketPort::open(0, &ns_if, &AfPacketConfig::default()).expect("open namespace-side port");
            let mut pool = BufPool::new(DEFAULT_BUF_CAPACITY, 64);
            for chunk in to_send.chunks(50) {
                let mut v: Vec<PacketBuf> = chunk.iter().map(|f| PacketBuf::from_slice(f, 0)).collect();
                assert_eq!(p.send_batch(&mut v, &mut pool), chunk.len());
                std::thread::sleep(Duration::from_millis(2));
            }
            recv_ours(&mut p, &mut pool, 100, Duration::from_secs(5))
        })
        .unwrap();
    let got = recv_ours(&mut sw, &mut pool, sent.len(), Duration::from_secs(5));
    assert_eq!(got, sent, "all frames from the namespace arrived intact and in order");

    std::thread::sleep(Duration::from_millis(50));
    let back: Vec<Vec<u8>> = (1000..1100).map(|i| frame(i, 64 + (i as usize % 1400))).collect();
    let mut v: Vec<PacketBuf> = back.iter().map(|f| PacketBuf::from_slice(f, 4)).collect();
    assert_eq!(sw.send_batch(&mut v, &mut pool), 100);
    assert_eq!(host.join().unwrap(), back, "frames the XDP port sent arrived intact");
    let s = sw.stats().snapshot();
    assert_eq!((s.tx_packets, s.total_drops()), (100, 0));

    drop(sw);
    assert!(!xdp_attached(&env.root_if), "closing the port detached the program");
}

#[test]
fn xdp_every_offered_frame_is_received_or_counted() {
    if !is_root() {
        eprintln!("skipping AF_XDP counter test: needs root");
        return;
    }
    let env = VethNs::create("isxc").expect("create netns + veth");
    // Small rings, not read while the host sends: most frames must be dropped, and counted.
    let cfg = XdpConfig { frames: 256, ring_size: 64, ..XdpConfig::default() };
    let mut sw = XdpPort::open(0, &env.root_if, &cfg).expect("open XDP port");
    let mut pool = BufPool::new(DEFAULT_BUF_CAPACITY, 512);
    let n = 2000u32;
    let ns_if = env.ns_if.clone();
    env.run_in_ns(move || {
        let mut p = AfPacketPort::open(0, &ns_if, &AfPacketConfig::default()).unwrap();
        let mut pool = BufPool::new(DEFAULT_BUF_CAPACITY, 64);
        let mut sent = 0;
        for chunk in (0..n).collect::<Vec<_>>().chunks(50) {
            let mut v: Vec<PacketBuf> = chunk.iter().map(|&i| PacketBuf::from_slice(&frame(i, 64), 0)).collect();
            sent += p.send_batch(&mut v, &mut pool);
        }
        assert_eq!(sent, n as usize);
    })
    .unwrap();
    let got = recv_ours(&mut sw, &mut pool, n as usize, Duration::from_millis(500));
    sw.sync_kernel_stats();
    let s = sw.stats().snapshot();
    assert!(got.len() < n as usize, "rings this small overflow");
    assert!(s.rx_full + s.rx_fill_empty > 0, "{s:?}");
    assert_eq!(got.len() as u64 + s.rx_full + s.rx_fill_empty + s.rx_xdp_dropped, n as u64, "nothing lost uncounted: {s:?}");
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
fn xdp_host_udp_arrives_with_complete_checksums() {
    if !is_root() {
        eprintln!("skipping AF_XDP checksum test: needs root");
        return;
    }
    // veth offloads transmit checksums by default, and native XDP sees the frame before
    // anything completes the checksum (there is no skb flag to tell, as AF_PACKET has), so
    // hosts behind XDP ports turn transmit checksum offload off, as the rack does
    // (`REQUIRED_NS_OFFLOADS`); then every frame arrives complete.
    let env = VethNs::create("isxk").expect("create netns + veth");
    let st = Command::new("ip").args(["netns", "exec", &env.ns, "ethtool", "-K", &env.ns_if, "tx", "off"]).status().unwrap();
    assert!(st.success(), "ethtool -K tx off");
    env.ip_in_ns(&["addr", "add", "10.233.1.1/24", "dev", &env.ns_if]).unwrap();
    env.ip_in_ns(&["neigh", "add", "10.233.1.2", "lladdr", "02:00:00:00:00:02", "dev", &env.ns_if]).unwrap();
    let mut sw = XdpPort::open(0, &env.root_if, &XdpConfig::default()).unwrap();
    let mut pool = BufPool::new(DEFAULT_BUF_CAPACITY, 16);
    env.run_in_ns(|| {
        let s = std::net::UdpSocket::bind("10.233.1.1:0").unwrap();
        for len in [1usize, 2, 17, 100, 1400] {
            s.send_to(&vec![0x5a; len], "10.233.1.2:7777").unwrap();
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

#[test]
fn xdp_spec_opens_xdp_ports_or_falls_back_to_af_packet() {
    if !is_root() {
        eprintln!("skipping AF_XDP fallback test: needs root");
        return;
    }
    let env = VethNs::create("isxf").expect("create netns + veth");
    let spec = ports::PortSpec::parse(&format!("xdp:{}", env.root_if)).unwrap();
    let opts = ports::OpenOptions { xdp_off: false, ..Default::default() };
    let (mut p, _) = ports::open_ports(&spec, &opts).unwrap();
    assert!(p[0].name().starts_with("xdp:"), "{}", p[0].name());
    assert!(xdp_attached(&env.root_if));
    drop(p.pop());
    assert!(!xdp_attached(&env.root_if));

    // Forced fallback (as when the kernel has no AF_XDP): an AF_PACKET port that works.
    let (mut p, _) = ports::open_ports(&spec, &ports::OpenOptions { xdp_off: true, ..Default::default() }).unwrap();
    assert_eq!(p[0].name(), env.root_if, "AF_PACKET port");
    assert!(!xdp_attached(&env.root_if));
    let ns_if = env.ns_if.clone();
    env.run_in_ns(move || {
        let mut h = AfPacketPort::open(0, &ns_if, &AfPacketConfig::default()).unwrap();
        let mut pool = BufPool::new(DEFAULT_BUF_CAPACITY, 16);
        let mut v = vec![PacketBuf::from_slice(&frame(7, 100), 0)];
        assert_eq!(h.send_batch(&mut v, &mut pool), 1);
    })
    .unwrap();
    let mut pool = BufPool::new(DEFAULT_BUF_CAPACITY, 16);
    assert_eq!(recv_ours(p[0].as_mut(), &mut pool, 1, Duration::from_secs(3)), vec![frame(7, 100)]);

    // A missing interface is an error, not a fallback.
    let bad = ports::PortSpec::parse("xdp:nosuchif9").unwrap();
    assert!(ports::open_ports(&bad, &opts).is_err());
}
