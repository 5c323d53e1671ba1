//! A UDP traffic generator and sink for benchmarks: run one in a host namespace, the other in
//! another, and the switch in between. Plain sockets, one `sendmmsg`/`recvmmsg` per batch.
//!
//! Each datagram's payload starts with a 20-byte stamp — magic `ISWB`, a sequence number and
//! the CLOCK_MONOTONIC send time (the same clock in every namespace of a machine) — when the
//! payload is long enough, so the sink can report the highest sequence seen and one-way
//! latency.

use std::io;
use std::mem::zeroed;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use crate::sys::{errno, grow_sock_buf, monotonic_ns, poll_readable};

const MAGIC: &[u8; 4] = b"ISWB";
/// Bytes of the stamp at the start of each payload.
pub const STAMP_LEN: usize = 20;
const BATCH: usize = 32;

/// What [`udp_blast`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlastReport {
    /// Datagrams the kernel accepted.
    pub sent: u64,
    /// Payload bytes of those datagrams.
    pub bytes: u64,
    /// Send calls refused with ENOBUFS (device or qdisc queue full).
    pub enobufs: u64,
    /// Send calls refused with EAGAIN (socket buffer full).
    pub eagain: u64,
    /// Send calls that failed otherwise (e.g. ECONNREFUSED after an ICMP port unreachable).
    pub errors: u64,
    /// How long the blast ran.
    pub elapsed: Duration,
}

impl BlastReport {
    /// Datagrams sent per second.
    pub fn pps(&self) -> f64 {
        rate(self.sent, self.elapsed)
    }
}

/// What [`udp_sink`] saw.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SinkReport {
    /// Datagrams received.
    pub packets: u64,
    /// Payload bytes received.
    pub bytes: u64,
    /// CLOCK_MONOTONIC ns of the first arrival.
    pub first_ns: Option<u64>,
    /// CLOCK_MONOTONIC ns of the last arrival.
    pub last_ns: Option<u64>,
    /// Highest sequence number in a stamped payload.
    pub max_seq: Option<u64>,
    /// Mean one-way latency of stamped datagrams (send stamp to receive batch), ns.
    pub latency_avg_ns: Option<u64>,
    /// Largest one-way latency seen, ns.
    pub latency_max_ns: Option<u64>,
    /// How long the sink ran.
    pub elapsed: Duration,
}

impl SinkReport {
    /// Datagrams per second over the active interval (first to last arrival).
    pub fn pps(&self) -> f64 {
        match (self.first_ns, self.last_ns) {
            (Some(a), Some(b)) if b > a && self.packets > 1 => (self.packets - 1) as f64 * 1e9 / (b - a) as f64,
            _ => 0.0,
        }
    }
}

fn rate(n: u64, d: Duration) -> f64 {
    if d.is_zero() {
        0.0
    } else {
        n as f64 / d.as_secs_f64()
    }
}

/// Send `payload_len`-byte UDP datagrams to `dst` for `duration`, as fast as possible or at
/// `target_pps`, in `sendmmsg` batches of 32 over a connected, non-blocking socket.
pub fn udp_blast(dst: SocketAddrV4, payload_len: usize, duration: Duration, target_pps: Option<u64>) -> io::Result<BlastReport> {
    let sock = UdpSocket::bind(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0))?;
    sock.connect(dst)?;
    sock.set_nonblocking(true)?;
    grow_sock_buf(sock.as_raw_fd(), false, 4 << 20);
    let fd = sock.as_raw_fd();
    let mut bufs = vec![vec![0u8; payload_len]; BATCH];
    // SAFETY: all-zero iovec/mmsghdr are valid; pointers are set right below.
    let mut iov: Vec<libc::iovec> = vec![unsafe { zeroed() }; BATCH];
    let mut msgs: Vec<libc::mmsghdr> = vec![unsafe { zeroed() }; BATCH];
    for i in 0..BATCH {
        iov[i] = libc::iovec { iov_base: bufs[i].as_mut_ptr() as *mut libc::c_void, iov_len: payload_len };
        msgs[i].msg_hdr.msg_iov = &mut iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    let mut rep = BlastReport::default();
    let start = Instant::now();
    loop {
        let elapsed = start.elapsed();
        if elapsed >= duration {
            break;
        }
        let mut k = BATCH;
        if let Some(pps) = target_pps {
            let due = (elapsed.as_nanos() * pps as u128 / 1_000_000_000) as u64;
            if due <= rep.sent {
                // Ahead of schedule: sleep when the next send is far off, else spin.
                let next_ns = (rep.sent + 1) as u128 * 1_000_000_000 / pps.max(1) as u128;
                let wait = next_ns.saturating_sub(elapsed.as_nanos());
                if wait > 100_000 {
                    std::thread::sleep(Duration::from_nanos(wait as u64 - 50_000));
                } else {
                    std::hint::spin_loop();
                }
                continue;
            }
            k = k.min((due - rep.sent) as usize);
        }
        let now = monotonic_ns();
        for (i, b) in bufs.iter_mut().take(k).enumerate() {
            stamp(b, rep.sent + i as u64, now);
        }
        // SAFETY: msgs[0..k] point at iovecs over `bufs`, which outlive the call; the socket
        // is connected, so no address is needed.
        let r = unsafe { libc::sendmmsg(fd, msgs.as_mut_ptr(), k as libc::c_uint, libc::MSG_DONTWAIT) };
        if r > 0 {
            rep.sent += r as u64;
            rep.bytes += r as u64 * payload_len as u64;
            continue;
        }
        match errno() {
            libc::EINTR => {}
            libc::ENOBUFS => {
                rep.enobufs += 1;
                std::thread::yield_now();
            }
            e if e == libc::EAGAIN || e == libc::EWOULDBLOCK => {
                rep.eagain += 1;
                let mut pfd = libc::pollfd { fd, events: libc::POLLOUT, revents: 0 };
                // SAFETY: one valid pollfd; wait at most 1 ms for room in the socket buffer.
                unsafe { libc::poll(&mut pfd, 1, 1) };
            }
            _ => rep.errors += 1,
        }
    }
    rep.elapsed = start.elapsed();
    Ok(rep)
}

fn stamp(b: &mut [u8], seq: u64, now: u64) {
    if b.len() >= STAMP_LEN {
        b[..4].copy_from_slice(MAGIC);
        b[4..12].copy_from_slice(&seq.to_be_bytes());
        b[12..20].copy_from_slice(&now.to_be_bytes());
    }
}

/// The sink's receive buffer: what arrives while the sink is not running waits here.
const SINK_BUF: usize = 8 << 20;

/// Receive UDP datagrams on `bind` until `duration` has passed, or until nothing has arrived
/// for `idle_timeout` after the first datagram, counting them with `recvmmsg` batches.
pub fn udp_sink(bind: SocketAddrV4, duration: Duration, idle_timeout: Duration) -> io::Result<SinkReport> {
    udp_sink_on(sink_socket(bind)?, duration, idle_timeout)
}

/// A socket bound for [`udp_sink_on`], its receive buffer already large: bind it before
/// starting the sender, so nothing is lost before the sink runs. (Growing the buffer only
/// in the sink's thread lost the first ~200 datagrams whenever that thread started tens
/// of ms after the sender: the default buffer holds a few hundred small datagrams.)
pub fn sink_socket(bind: SocketAddrV4) -> io::Result<UdpSocket> {
    let sock = UdpSocket::bind(bind)?;
    grow_sock_buf(sock.as_raw_fd(), true, SINK_BUF);
    Ok(sock)
}

/// [`udp_sink`] on an already bound socket (so a caller can bind first, then start the sender,
/// without a race; see [`sink_socket`]).
pub fn udp_sink_on(sock: UdpSocket, duration: Duration, idle_timeout: Duration) -> io::Result<SinkReport> {
    sock.set_nonblocking(true)?;
    grow_sock_buf(sock.as_raw_fd(), true, SINK_BUF);
    let fd = sock.as_raw_fd();
    const N: usize = 64;
    let mut bufs = vec![[0u8; 2048]; N];
    // SAFETY: all-zero iovec/mmsghdr are valid; pointers are set right below.
    let mut iov: Vec<libc::iovec> = vec![unsafe { zeroed() }; N];
    let mut msgs: Vec<libc::mmsghdr> = vec![unsafe { zeroed() }; N];
    for i in 0..N {
        iov[i] = libc::iovec { iov_base: bufs[i].as_mut_ptr() as *mut libc::c_void, iov_len: 2048 };
        msgs[i].msg_hdr.msg_iov = &mut iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    let mut rep = SinkReport::default();
    let (mut lat_sum, mut lat_n, mut lat_max) = (0u128, 0u64, 0u64);
    let start = Instant::now();
    let mut last_arrival = start;
    loop {
        let now = Instant::now();
        let left = duration.saturating_sub(now - start);
        if left.is_zero() || (rep.packets > 0 && now - last_arrival >= idle_timeout) {
            break;
        }
        // SAFETY: msgs[0..N] point at N iovecs over `bufs`, each 2048 bytes, alive for the call.
        let r = unsafe { libc::recvmmsg(fd, msgs.as_mut_ptr(), N as libc::c_uint, libc::MSG_DONTWAIT, std::ptr::null_mut()) };
        if r <= 0 {
            let e = errno();
            if r < 0 && e != libc::EAGAIN && e != libc::EWOULDBLOCK && e != libc::EINTR {
                return Err(io::Error::from_raw_os_error(e));
            }
            let wait = if rep.packets > 0 { left.min(idle_timeout.saturating_sub(now - last_arrival)) } else { left };
            poll_readable(fd, Some(wait.max(Duration::from_micros(100))))?;
            continue;
        }
        let t = monotonic_ns();
        last_arrival = Instant::now();
        rep.first_ns.get_or_insert(t);
        rep.last_ns = Some(t);
        for (m, b) in msgs.iter().zip(&bufs).take(r as usize) {
            let len = m.msg_len as usize;
            rep.packets += 1;
            rep.bytes += len as u64;
            if len >= STAMP_LEN && &b[..4] == MAGIC {
                let seq = u64::from_be_bytes(b[4..12].try_into().unwrap());
                let sent = u64::from_be_bytes(b[12..20].try_into().unwrap());
                rep.max_seq = Some(rep.max_seq.map_or(seq, |m| m.max(seq)));
                if sent <= t {
                    let l = t - sent;
                    lat_sum += l as u128;
                    lat_n += 1;
                    lat_max = lat_max.max(l);
                }
            }
        }
    }
    if lat_n > 0 {
        rep.latency_avg_ns = Some((lat_sum / lat_n as u128) as u64);
        rep.latency_max_ns = Some(lat_max);
    }
    rep.elapsed = start.elapsed();
    Ok(rep)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blast_and_sink_on_loopback() {
        let sink_sock = sink_socket(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)).unwrap();
        let addr = match sink_sock.local_addr().unwrap() {
            std::net::SocketAddr::V4(a) => a,
            _ => unreachable!(),
        };
        // The blast starts once the sink's thread runs: the rate below is measured at the
        // sink, from its first arrival, and a sink starting late reads a backlog at once.
        let (started, wait_started) = std::sync::mpsc::channel();
        // The sink stops after 1 s without a datagram: the blaster's thread, descheduled on a
        // loaded machine, was seen pausing over 200 ms (the old idle time) before its last
        // packet, and the sink had stopped without it.
        let sink = std::thread::spawn(move || {
            started.send(()).unwrap();
            udp_sink_on(sink_sock, Duration::from_secs(5), Duration::from_secs(1)).unwrap()
        });
        wait_started.recv().unwrap();
        // Paced, so the loopback socket buffer never overflows and every datagram arrives.
        let b = udp_blast(addr, 64, Duration::from_millis(300), Some(20_000)).unwrap();
        let s = sink.join().unwrap();
        assert!(b.sent > 3_000 && b.sent <= 6_100, "{b:?}");
        assert_eq!(s.packets, b.sent, "{s:?} {b:?}");
        assert_eq!(s.bytes, b.bytes);
        assert_eq!(s.max_seq, Some(b.sent - 1));
        assert!(s.latency_avg_ns.unwrap() < 50_000_000);
        // Paced at 20 kpps: the measured rate is close to it.
        assert!((15_000.0..25_000.0).contains(&s.pps()), "pps {}", s.pps());
        assert!(s.elapsed < Duration::from_secs(4), "stopped on idle, not at the 5 s limit: {:?}", s.elapsed);
    }
}

/// What [`frame_blast`] did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FrameBlastReport {
    /// Frames the port queued for transmission.
    pub sent: u64,
    /// Frames refused because the transmit ring was full (retried with the next batch).
    pub ring_full: u64,
    /// How long the blast ran.
    pub elapsed: Duration,
    /// The port that sent (e.g. `xdp:eth0(native,copy)`), which says the path taken.
    pub port: String,
}

impl FrameBlastReport {
    /// Frames sent per second.
    pub fn pps(&self) -> f64 {
        rate(self.sent, self.elapsed)
    }
}

/// Send copies of one Ethernet `frame` out of interface `ifname` for `duration`, as fast as
/// the transmit ring takes them: through an AF_XDP socket (`xdp`) or a PACKET_MMAP TX ring.
/// Unlike [`udp_blast`], no socket layer or routing runs per frame, so the sender outruns a
/// forwarding path between two namespaces and the path, not the sender, is measured.
pub fn frame_blast(ifname: &str, frame: &[u8], duration: Duration, xdp: bool) -> io::Result<FrameBlastReport> {
    use crate::afpacket::{AfPacketConfig, AfPacketPort, TxMode};
    use crate::port::Port;
    use crate::xdp::{XdpConfig, XdpPort};
    use pisa::packet::{BufPool, PacketBuf, DEFAULT_BUF_CAPACITY};

    if frame.len() < 14 || frame.len() > DEFAULT_BUF_CAPACITY {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("frame of {} bytes", frame.len())));
    }
    let mut port: Box<dyn Port> = if xdp {
        Box::new(XdpPort::open(0, ifname, &XdpConfig::default())?)
    } else {
        Box::new(AfPacketPort::open(0, ifname, &AfPacketConfig { tx_mode: TxMode::Ring, tx_ring_frames: 4096, ..Default::default() })?)
    };
    let mut pool = BufPool::new(DEFAULT_BUF_CAPACITY, 4 * BATCH * 2);
    let batch = 2 * BATCH;
    let start = Instant::now();
    let mut v: Vec<PacketBuf> = Vec::with_capacity(batch);
    let mut rx = Vec::new();
    while start.elapsed() < duration {
        for _ in 0..16 {
            v.extend((0..batch).map(|_| {
                let mut b = pool.get();
                b.raw_mut()[..frame.len()].copy_from_slice(frame);
                b.set_len(frame.len());
                b
            }));
            if port.send_batch(&mut v, &mut pool) == 0 {
                // Ring full: let the kernel drain it (and reclaim completions).
                std::thread::yield_now();
            }
            // Anything arriving on the sender's interface is not ours to keep.
            port.recv_batch(&mut pool, &mut rx, batch);
            rx.drain(..).for_each(|p| pool.put(p));
        }
    }
    let elapsed = start.elapsed();
    // Let the last ring contents leave before the port (and its ring) is closed.
    std::thread::sleep(Duration::from_millis(20));
    let s = port.stats().snapshot();
    Ok(FrameBlastReport { sent: s.tx_packets, ring_full: s.tx_full, elapsed, port: port.name().to_string() })
}
