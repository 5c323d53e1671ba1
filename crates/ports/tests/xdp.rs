//! AF_XDP over a real veth pair: frames from a namespace arrive at the switch-side XDP port
//! intact, frames the port sends arrive inside, every frame offered is either received or
//! counted as a drop by ring, and the XDP program goes away with the port.
//! Skipped (with a message) when not running as root.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{frame, recv_ours};
use pisa::packet::{BufPool, PacketBuf, DEFAULT_BUF_CAPACITY};
use ports::netns::{is_root, VethNs};
use ports::{AfPacketConfig, AfPacketPort, Port, XdpConfig, XdpPort};

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

    let sent: Vec<Vec<u8>> = (0..300).map(|i| frame(i, 60 + (i as usize * 37) % 1450, None)).collect();
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
    let back: Vec<Vec<u8>> = (1000..1100).map(|i| frame(i, 64 + (i as usize % 1400), None)).collect();
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
            let mut v: Vec<PacketBuf> = chunk.iter().map(|&i| PacketBuf::from_slice(&frame(i, 64, None), 0)).collect();
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
    let mut sw = XdpPort::open(0, &env.root_if, &XdpConfig::default()).unwrap();
    common::host_udp_arrives_with_complete_checksums(&env, "10.233.1", &mut sw);
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
        let mut v = vec![PacketBuf::from_slice(&frame(7, 100, None), 0)];
        assert_eq!(h.send_batch(&mut v, &mut pool), 1);
    })
    .unwrap();
    let mut pool = BufPool::new(DEFAULT_BUF_CAPACITY, 16);
    assert_eq!(recv_ours(p[0].as_mut(), &mut pool, 1, Duration::from_secs(3)), vec![frame(7, 100, None)]);

    // A missing interface is an error, not a fallback.
    let bad = ports::PortSpec::parse("xdp:nosuchif9").unwrap();
    assert!(ports::open_ports(&bad, &opts).is_err());
}
