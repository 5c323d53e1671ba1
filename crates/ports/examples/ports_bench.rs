//! Micro-benchmark of the port layer alone (no pipeline): how many frames per second each
//! kind of port moves, and, for AF_PACKET on veth, how that compares with the same veth path
//! with nothing of ours on it.
//!
//! ```text
//! cargo run --release -p ports --example ports_bench [SECONDS_PER_CASE]
//! ```
//! The AF_PACKET cases need root (they create network namespaces) and are skipped otherwise.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pisa::packet::{BufPool, PacketBuf, DEFAULT_BUF_CAPACITY};
use ports::netns::{ip, is_root, VethNs};
use ports::{memory_pair, AfPacketConfig, AfPacketPort, Port, TxMode, UdpPort, UdpTunnelHost};

const BATCH: usize = 32;

fn eth_frame(len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 2]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&0x88B5u16.to_be_bytes());
    f
}

/// CPU time this thread has used, in ns (robust to other load on the machine, unlike rates).
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec for clock_gettime to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn mpps(n: u64, d: Duration) -> String {
    format!("{:.2} Mpps", n as f64 / d.as_secs_f64() / 1e6)
}

/// Memory port, one thread: host sends a batch, switch receives it and sends it back, host
/// drains it. Each frame crosses the port twice.
fn memory_single_thread(secs: Duration) {
    let (mut port, peer) = memory_pair(0, 4096);
    let mut pool = BufPool::new(DEFAULT_BUF_CAPACITY, 256);
    let f = eth_frame(64);
    let frames: Vec<&[u8]> = vec![&f[..]; BATCH];
    let mut v = Vec::with_capacity(BATCH);
    let (mut n, start) = (0u64, Instant::now());
    while start.elapsed() < secs {
        for _ in 0..1000 {
            peer.send_batch(&frames);
            port.recv_batch(&mut pool, &mut v, BATCH);
            port.send_batch(&mut v, &mut pool);
            while peer.recv_with(|_| ()).is_some() {}
            n += BATCH as u64;
        }
    }
    let d = start.elapsed();
    println!("memory, 1 thread, host->switch->host round trips: {} ({} port crossings/s)", mpps(n, d), mpps(2 * n, d));
}

/// Memory port, two threads: a host thread keeps the port fed while the switch thread receives
/// and transmits back; the host thread also drains what comes back.
fn memory_two_threads(secs: Duration) {
    let (mut port, peer) = memory_pair(0, 4096);
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let host = std::thread::spawn(move || {
        let f = eth_frame(64);
        let frames: Vec<&[u8]> = vec![&f[..]; BATCH];
        let mut back = 0u64;
        while !stop2.load(Ordering::Relaxed) {
            peer.send_batch(&frames);
            while peer.recv_with(|_| ()).is_some() {
                back += 1;
            }
        }
        back
    });
    let mut pool = BufPool::new(DEFAULT_BUF_CAPACITY, 256);
    let mut v = Vec::with_capacity(BATCH);
    let (mut n, start) = (0u64, Instant::now());
    while start.elapsed() < secs {
        for _ in 0..1000 {
            n += port.recv_batch(&mut pool, &mut v, BATCH) as u64;
            port.send_batch(&mut v, &mut pool);
        }
    }
    let d = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    let back = host.join().unwrap();
    println!("memory, 2 threads, switch rx+tx: {} (host got back {})", mpps(n, d), mpps(back, d));
}

/// UDP tunnel on loopback: a host blasts frames with sendmmsg, the switch port receives.
fn udp_rx(secs: Duration) {
    let mut port = UdpPort::open(0, &ports::UdpConfig::new(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))).unwrap();
    let host = UdpTunnelHost::connect(port.local_addr()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let tx = std::thread::spawn(move || {
        let f = eth_frame(64);
        let frames: Vec<&[u8]> = vec![&f[..]; 64];
        let mut n = 0u64;
        while !stop2.load(Ordering::Relaxed) {
            n += host.send_batch(&frames).unwrap_or(0) as u64;
        }
        n
    });
    let mut pool = BufPool::new(DEFAULT_BUF_CAPACITY, 256);
    let mut v = Vec::with_capacity(64);
    let (mut n, start) = (0u64, Instant::now());
    while start.elapsed() < secs {
        n += port.recv_batch(&mut pool, &mut v, 64) as u64;
        v.drain(..).for_each(|p| pool.put(p));
    }
    let d = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    let sent = tx.join().unwrap();
    println!("udp tunnel, host sendmmsg -> switch recvmmsg: {} received (host sent {})", mpps(n, d), mpps(sent, d));
}

/// AF_PACKET receive: a sender in the namespace writes 64-byte frames into its veth end as
/// fast as it can; the switch-side port counts what it receives.
fn afpacket_rx(secs: Duration) {
    let env = VethNs::create("ispb").unwrap();
    let mut sw = AfPacketPort::open(0, &env.root_if, &AfPacketConfig::default()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let ns_if = env.ns_if.clone();
    let tx = env
        .spawn_in_ns(move || {
            let mut p = AfPacketPort::open(0, &ns_if, &AfPacketConfig::default()).unwrap();
            let mut pool = BufPool::new(DEFAULT_BUF_CAPACITY, 256);
            let f = eth_frame(64);
            let mut n = 0u64;
            while !stop2.load(Ordering::Relaxed) {
                let mut v: Vec<PacketBuf> = (0..BATCH)
                    .map(|_| {
                        let mut b = pool.get();
                        b.copy_from(&f);
                        b
                    })
                    .collect();
                n += p.send_batch(&mut v, &mut pool) as u64;
            }
            n
        })
        .unwrap();
    let mut pool = BufPool::new(DEFAULT_BUF_CAPACITY, 256);
    let mut v = Vec::with_capacity(64);
    std::thread::sleep(Duration::from_millis(100));
    sw.sync_kernel_stats();
    let before = sw.stats().snapshot();
    let (mut n, start, cpu0) = (0u64, Instant::now(), thread_cpu_ns());
    let mut busy_cpu = 0u64;
    while start.elapsed() < secs {
        let c = thread_cpu_ns();
        let k = sw.recv_batch(&mut pool, &mut v, 64) as u64;
        if k > 0 {
            busy_cpu += thread_cpu_ns() - c;
        }
        n += k;
        v.drain(..).for_each(|p| pool.put(p));
    }
    let d = start.elapsed();
    let _ = cpu0;
    stop.store(true, Ordering::Relaxed);
    let sent = tx.join().unwrap();
    sw.sync_kernel_stats();
    let after = sw.stats().snapshot();
    println!(
        "af_packet rx over veth (64 B): {} received ({} ns CPU/frame in non-empty recv_batch); sender {}; ring drops {}",
        mpps(n, d),
        busy_cpu / n.max(1),
        mpps(sent, d),
        after.rx_full - before.rx_full
    );
}

/// AF_PACKET transmit: the switch-side port sends 64-byte frames as fast as it can; a port in
/// the namespace counts arrivals.
fn afpacket_tx(secs: Duration, mode: TxMode) {
    let env = VethNs::create("ispb").unwrap();
    let cfg = AfPacketConfig { tx_mode: mode, ..AfPacketConfig::default() };
    let mut sw = AfPacketPort::open(0, &env.root_if, &cfg).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let ns_if = env.ns_if.clone();
    let rx = env
        .spawn_in_ns(move || {
            let mut p = AfPacketPort::open(0, &ns_if, &AfPacketConfig::default()).unwrap();
            let mut pool = BufPool::new(DEFAULT_BUF_CAPACITY, 256);
            let mut v = Vec::with_capacity(64);
            let mut n = 0u64;
            while !stop2.load(Ordering::Relaxed) {
                n += p.recv_batch(&mut pool, &mut v, 64) as u64;
                v.drain(..).for_each(|b| pool.put(b));
            }
            n
        })
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let mut pool = BufPool::new(DEFAULT_BUF_CAPACITY, 256);
    let f = eth_frame(64);
    let mut v = Vec::with_capacity(BATCH);
    let (mut n, start, cpu0) = (0u64, Instant::now(), thread_cpu_ns());
    while start.elapsed() < secs {
        for _ in 0..BATCH {
            let mut b = pool.get();
            b.copy_from(&f);
            v.push(b);
        }
        n += sw.send_batch(&mut v, &mut pool) as u64;
    }
    let d = start.elapsed();
    let cpu = thread_cpu_ns() - cpu0;
    std::thread::sleep(Duration::from_millis(50));
    stop.store(true, Ordering::Relaxed);
    let got = rx.join().unwrap();
    let s = sw.stats().snapshot();
    println!(
        "af_packet tx over veth (64 B, {mode:?}): {} sent ({} ns CPU/frame incl. veth delivery), {} received in ns; tx_full {} tx_error {}",
        mpps(n, d),
        cpu / n.max(1),
        mpps(got, d),
        s.tx_full,
        s.tx_error
    );
}

/// UDP through the port layer: blaster in namespace A -> veth -> AF_PACKET port A -> port B ->
/// veth -> sink in namespace B (a two-port "switch" that only forwards). Baseline: the same
/// blaster and sink over one veth pair with nothing in between (namespace -> root namespace).
fn afpacket_forward(secs: Duration, payload: usize, pps: Option<u64>) {
    let rate = pps.map_or("max rate".to_string(), |r| format!("paced {r} pps"));
    // Baseline: ns -> root over one veth pair, kernel only.
    let base = VethNs::create("ispf").unwrap();
    base.ip_in_ns(&["addr", "add", "10.231.0.1/24", "dev", &base.ns_if]).unwrap();
    ip(&["addr", "add", "10.231.0.2/24", "dev", &base.root_if]).unwrap();
    let sink_sock = ports::traffic::sink_socket(SocketAddrV4::new(Ipv4Addr::new(10, 231, 0, 2), 9000)).unwrap();
    let sink = std::thread::spawn(move || ports::traffic::udp_sink_on(sink_sock, secs * 3, Duration::from_millis(300)).unwrap());
    let dst = SocketAddrV4::new(Ipv4Addr::new(10, 231, 0, 2), 9000);
    let b = base.run_in_ns(move || ports::udp_blast(dst, payload, secs, pps).unwrap()).unwrap();
    let s = sink.join().unwrap();
    println!(
        "baseline udp over one veth pair, no switch ({payload} B payload, {rate}): sent {:.1} kpps, received {:.1} kpps, lat avg {} us",
        b.pps() / 1e3,
        s.pps() / 1e3,
        s.latency_avg_ns.unwrap_or(0) / 1000
    );
    drop(base);

    // Through two AF_PACKET ports forwarding A -> B.
    let a = VethNs::create("ispf").unwrap();
    let bns = VethNs::create("ispf").unwrap();
    a.ip_in_ns(&["addr", "add", "10.232.0.1/24", "dev", &a.ns_if]).unwrap();
    bns.ip_in_ns(&["addr", "add", "10.232.0.2/24", "dev", &bns.ns_if]).unwrap();
    let bmac = bns.ns_mac().unwrap();
    let mac = bmac.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":");
    a.ip_in_ns(&["neigh", "add", "10.232.0.2", "lladdr", &mac, "dev", &a.ns_if]).unwrap();
    let mut pa = AfPacketPort::open(0, &a.root_if, &AfPacketConfig::default()).unwrap();
    let mut pb = AfPacketPort::open(1, &bns.root_if, &AfPacketConfig::default()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let fwd = std::thread::spawn(move || {
        let mut pool = BufPool::new(DEFAULT_BUF_CAPACITY, 512);
        let mut v = Vec::with_capacity(64);
        let mut n = 0u64;
        let fd = pa.poll_fd().unwrap();
        while !stop2.load(Ordering::Relaxed) {
            let k = pa.recv_batch(&mut pool, &mut v, 64);
            if k > 0 {
                n += pb.send_batch(&mut v, &mut pool) as u64;
            }
            if k < 64 {
                // Sleep until the ring has frames, as the data-plane driver does with epoll,
                // so a spinning forwarder does not starve the hosts of CPU.
                let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
                // SAFETY: one valid pollfd; 10 ms timeout so `stop` is noticed.
                unsafe { libc::poll(&mut pfd, 1, 10) };
            }
        }
        (n, pa.stats().snapshot(), pb.stats().snapshot())
    });
    let sink = bns
        .spawn_in_ns(move || ports::udp_sink(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 9000), secs * 3, Duration::from_millis(300)).unwrap())
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let dst = SocketAddrV4::new(Ipv4Addr::new(10, 232, 0, 2), 9000);
    let bl = a.run_in_ns(move || ports::udp_blast(dst, payload, secs, pps).unwrap()).unwrap();
    let s = sink.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    let (n, sa, sb) = fwd.join().unwrap();
    println!(
        "udp through 2 af_packet ports, forward-only ({payload} B payload, {rate}): sent {:.1} kpps, forwarded {}, received {:.1} kpps, lat avg {} us; port A rx_full {} port B tx_full {}",
        bl.pps() / 1e3,
        n,
        s.pps() / 1e3,
        s.latency_avg_ns.unwrap_or(0) / 1000,
        sa.rx_full,
        sb.tx_full
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let secs = Duration::from_secs_f64(args.get(1).and_then(|s| s.parse().ok()).unwrap_or(2.0));
    // Optional second argument: run only the cases whose name contains it.
    let only = args.get(2).cloned().unwrap_or_default();
    let want = |name: &str| name.contains(only.as_str());
    println!(
        "ports micro-benchmark, {} s per case, {} CPUs",
        secs.as_secs_f64(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    if want("memory1") {
        memory_single_thread(secs);
    }
    if want("memory2") {
        memory_two_threads(secs);
    }
    if want("udp") {
        udp_rx(secs);
    }
    if !is_root() {
        println!("not root: skipping the AF_PACKET cases");
        return;
    }
    if want("afrx") {
        afpacket_rx(secs);
    }
    if want("aftx") {
        afpacket_tx(secs, TxMode::Ring);
        afpacket_tx(secs, TxMode::Sendmmsg);
    }
    if want("affwd") {
        // 22-byte payload: a 64-byte Ethernet frame, with room for the sink's latency stamp.
        afpacket_forward(secs, 22, None);
        afpacket_forward(secs, 22, Some(20_000));
        afpacket_forward(secs, 22, Some(2_000));
    }
}
