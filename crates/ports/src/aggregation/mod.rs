//! The I/O loops around the sans-IO aggregation sender and receiver
//! (`hostlib::aggregation`): one real UDP socket each, a monotonic clock, bounded in time.

use std::collections::HashMap;
use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use hostlib::aggregation::{Mapper, MapperConfig, MapperStats, MemPairs, PairSource, Reducer, ReducerConfig, ReducerStats};

pub mod spool;

pub use spool::SpoolSource;

/// What a mapper run did.
#[derive(Debug, Clone)]
pub struct MapRun {
    /// The sender's counters.
    pub stats: MapperStats,
    /// Every tree confirmed complete by its reducer (false: timed out).
    pub completed: bool,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// Datagrams lost, duplicated or delayed by the socket's own fault injection.
    pub faults_injected: u64,
}

/// What a reducer run received.
#[derive(Debug)]
pub struct ReduceRun {
    /// Aggregated pairs.
    pub result: HashMap<Vec<u8>, u64>,
    /// The receiver's counters.
    pub stats: ReducerStats,
    /// The tree completed (false: timed out).
    pub completed: bool,
    /// Time until completion (or the whole run if it never completed).
    pub elapsed: Duration,
    /// Datagrams lost, duplicated or delayed by the socket's own fault injection.
    pub faults_injected: u64,
    /// The socket's receive buffer as the kernel granted it (bytes).
    pub rcvbuf_bytes: u64,
    /// Datagrams the kernel dropped at this socket (its receive buffer was full).
    pub socket_drops: u64,
}

/// Faults an endpoint injects on its own socket, seeded so a run repeats: each datagram
/// sent and each received is lost, duplicated or held back behind the next one with these
/// probabilities (switch-made packets, ACKs and flushes, meet them on receive).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SocketFaults {
    /// Probability a datagram is lost.
    pub loss: f64,
    /// Probability a datagram is duplicated.
    pub duplicate: f64,
    /// Probability a datagram is held back behind the next one.
    pub reorder: f64,
    /// Seed of the generator.
    pub seed: u64,
}

impl SocketFaults {
    fn any(&self) -> bool {
        self.loss > 0.0 || self.duplicate > 0.0 || self.reorder > 0.0
    }
}

/// A direction of seeded faults: what to deliver now for one datagram.
struct FaultDir {
    f: SocketFaults,
    rng: u64,
    held: Vec<(Vec<u8>, SocketAddr)>,
    injected: u64,
}

impl FaultDir {
    fn new(f: SocketFaults, salt: u64) -> FaultDir {
        FaultDir { f, rng: (f.seed ^ salt).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1, held: Vec::new(), injected: 0 }
    }
    fn draw(&mut self) -> f64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng >> 11) as f64 / (1u64 << 53) as f64
    }
    /// The datagrams to pass on in place of `d` (none, it, it twice, it and held ones).
    fn apply(&mut self, d: (Vec<u8>, SocketAddr), out: &mut Vec<(Vec<u8>, SocketAddr)>) {
        if !self.f.any() {
            out.push(d);
            return;
        }
        let (lost, dup, late) = (self.draw() < self.f.loss, self.draw() < self.f.duplicate, self.draw() < self.f.reorder);
        if lost {
            self.injected += 1;
            return;
        }
        if dup {
            self.injected += 1;
            out.push(d.clone());
        }
        if late {
            self.injected += 1;
            self.held.push(d);
            return;
        }
        out.push(d);
        out.append(&mut self.held);
    }
}

/// Give a mapper's or reducer's socket large buffers: a switch's flush arrives as a burst
/// of hundreds of packets, and a default-sized buffer would drop its tail (the job would
/// still be correct, through the fallback, but slower).
pub(crate) fn grow_buffers(sock: &UdpSocket) {
    use std::os::fd::AsRawFd;
    let size: libc::c_int = 16 << 20;
    let set = |opt: libc::c_int| {
        // SAFETY: a valid socket and a c_int option value of the stated length.
        unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&size as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            ) == 0
        }
    };
    // The FORCE options need CAP_NET_ADMIN; without it the plain ones (capped by the
    // kernel's rmem_max / wmem_max) are the best we can do.
    if !set(libc::SO_RCVBUFFORCE) {
        set(libc::SO_RCVBUF);
    }
    if !set(libc::SO_SNDBUFFORCE) {
        set(libc::SO_SNDBUF);
    }
}

/// The kernel's view of a socket: its receive buffer size and how many datagrams it
/// dropped because the buffer was full (`SO_MEMINFO`'s `SK_MEMINFO_DROPS`).
fn socket_rx_state(sock: &UdpSocket) -> (u64, u64) {
    use std::os::fd::AsRawFd;
    const SK_MEMINFO_VARS: usize = 9;
    const SK_MEMINFO_DROPS: usize = 8;
    let mut rcvbuf: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: a valid socket; the out buffers are as long as the lengths passed.
    let ok = unsafe {
        libc::getsockopt(sock.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, (&mut rcvbuf as *mut libc::c_int).cast(), &mut len) == 0
    };
    let mut mem = [0u32; SK_MEMINFO_VARS];
    let mut mlen = std::mem::size_of_val(&mem) as libc::socklen_t;
    // SAFETY: as above.
    let mok = unsafe { libc::getsockopt(sock.as_raw_fd(), libc::SOL_SOCKET, libc::SO_MEMINFO, mem.as_mut_ptr().cast(), &mut mlen) == 0 };
    let drops = if mok && mlen as usize > SK_MEMINFO_DROPS * 4 { mem[SK_MEMINFO_DROPS] as u64 } else { 0 };
    (if ok { rcvbuf.max(0) as u64 } else { 0 }, drops)
}

pub(crate) fn wait_for(deadline: Option<u64>, now: u64) -> Duration {
    // The loops also check their overall timeout, so never block for long; but an idle
    // reducer waking every few ms costs CPU the job is measured by.
    let cap = 100_000_000u64;
    let d = deadline.map_or(cap, |d| d.saturating_sub(now).clamp(50_000, cap));
    Duration::from_nanos(d)
}

/// Send a mapper's pairs to `dests[tree index]` from `sock` (bound by the caller, e.g. to
/// port 0 to learn the address before anything runs) and serve its trees until every
/// reducer says DONE and then GONE (or nothing came for the linger) or `timeout` passes.
#[allow(clippy::too_many_arguments)]
pub fn run_mapper(
    sock: UdpSocket,
    cfg: MapperConfig,
    dests: &[SocketAddr],
    tree_ids: &[u16],
    keys: Vec<u8>,
    offsets: Vec<u64>,
    values: Vec<u32>,
    tree_of_pair: Vec<u16>,
    timeout: Duration,
    faults: SocketFaults,
) -> std::io::Result<MapRun> {
    let src =
        MemPairs::new(tree_ids.len(), keys, offsets, values, tree_of_pair).map_err(|e| std::io::Error::new(ErrorKind::InvalidInput, e))?;
    run_mapper_source(sock, cfg, dests, tree_ids, src, timeout, faults)
}

/// [`run_mapper`] for pairs read from `source` as the window advances (e.g. a
/// [`SpoolSource`]: the mapper's memory does not grow with its input). A source that fails
/// while sending ends the run with an `InvalidData` error.
pub fn run_mapper_source<S: PairSource>(
    sock: UdpSocket,
    cfg: MapperConfig,
    dests: &[SocketAddr],
    tree_ids: &[u16],
    source: S,
    timeout: Duration,
    faults: SocketFaults,
) -> std::io::Result<MapRun> {
    grow_buffers(&sock);
    let (ftx, frx) = (FaultDir::new(faults, 1), FaultDir::new(faults, 2));
    let start = Instant::now();
    let now = || start.elapsed().as_nanos() as u64;
    let m = Mapper::from_source(cfg, tree_ids, source, now()).map_err(|e| std::io::Error::new(ErrorKind::InvalidInput, e))?;
    run(sock, m, dests, timeout, ftx, frx, start)
}

fn run<S: PairSource>(
    sock: UdpSocket,
    mut m: Mapper<S>,
    dests: &[SocketAddr],
    timeout: Duration,
    mut ftx: FaultDir,
    mut frx: FaultDir,
    start: Instant,
) -> std::io::Result<MapRun> {
    let now = || start.elapsed().as_nanos() as u64;
    let mut staged = Vec::new();
    let mut out = Vec::new();
    let mut buf = vec![0u8; 65536];
    let linger = Duration::from_nanos(m.linger_ns());
    let (mut done_at, mut last_rx): (Option<Duration>, Instant) = (None, Instant::now());
    // After DONE: answer each DONE with a BYE, and close only once every reducer said GONE
    // (or nothing came for the linger): a DONE sent again while a BYE was on its way would
    // otherwise meet a closed port, and the host's ICMP error would be a frame the
    // mapper never sent, counted by its switch.
    while !m.may_close() && start.elapsed() < timeout {
        out.clear();
        m.poll_transmit(now(), &mut out);
        // A source that cannot be read fails the run now (it would never complete).
        if let Some(e) = m.error() {
            return Err(std::io::Error::new(ErrorKind::InvalidData, e.to_string()));
        }
        for (t, p) in out.drain(..) {
            ftx.apply((p, dests[t]), &mut staged);
        }
        for (p, to) in staged.drain(..) {
            send(&sock, &p, to)?;
        }
        if m.is_done() {
            done_at.get_or_insert(start.elapsed());
        }
        sock.set_read_timeout(Some(wait_for(m.poll_timeout(), now())))?;
        // Take what has arrived; block only for the first.
        let mut first = true;
        let waited_empty = loop {
            match sock.recv_from(&mut buf) {
                Ok((n, from)) => {
                    last_rx = Instant::now();
                    frx.apply((buf[..n].to_vec(), from), &mut staged);
                    for (p, _) in staged.drain(..) {
                        m.handle(now(), &p);
                    }
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::ConnectionRefused) => {
                    break first && e.kind() != ErrorKind::ConnectionRefused;
                }
                Err(e) => return Err(e),
            }
            if first {
                sock.set_nonblocking(true)?;
                first = false;
            }
        };
        if !first {
            sock.set_nonblocking(false)?;
        }
        // Decided after a receive that found the socket empty, as the reducer's linger: a
        // mapper descheduled for longer still reads (and answers) what waits for it.
        if m.is_done() && waited_empty && last_rx.elapsed() >= linger {
            break;
        }
    }
    // The time to DONE: the wait for GONE is not sending.
    let elapsed = done_at.unwrap_or_else(|| start.elapsed());
    Ok(MapRun { completed: m.is_done(), stats: m.stats.clone(), elapsed, faults_injected: ftx.injected + frx.injected })
}

pub(crate) fn send(sock: &UdpSocket, p: &[u8], to: SocketAddr) -> std::io::Result<()> {
    loop {
        match sock.send_to(p, to) {
            Ok(_) => return Ok(()),
            // A full socket buffer or an unreachable peer is loss to the protocol.
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::ConnectionRefused) => return Ok(()),
            Err(e) if e.raw_os_error() == Some(105) => std::thread::sleep(Duration::from_micros(50)),
            Err(e) => return Err(e),
        }
    }
}

/// Send what the reducer has to say (ACKs, NOTED, DONE, RESEND) to its mappers, through
/// the fault model; `out` and `staged` are the loop's reused buffers.
fn send_replies(
    sock: &UdpSocket,
    r: &mut Reducer,
    mappers: &[SocketAddr],
    ftx: &mut FaultDir,
    out: &mut Vec<(usize, Vec<u8>)>,
    staged: &mut Vec<(Vec<u8>, SocketAddr)>,
) -> std::io::Result<()> {
    out.clear();
    r.poll_transmit(out);
    for (m, p) in out.drain(..) {
        if let Some(a) = mappers.get(m) {
            ftx.apply((p, *a), staged);
        }
    }
    for (p, to) in staged.drain(..) {
        send(sock, &p, to)?;
    }
    Ok(())
}

/// Receive one tree on `sock` (bound by the caller: bound before the mappers start, it
/// holds their first packets instead of refusing them) from `mappers` (index = mapper id)
/// until complete (and a short linger to answer late status reports) or `timeout`.
pub fn run_reducer(
    sock: UdpSocket,
    cfg: ReducerConfig,
    mappers: &[SocketAddr],
    timeout: Duration,
    faults: SocketFaults,
) -> std::io::Result<ReduceRun> {
    // The reducer's socket is where the flush lands: it needs the large buffer most (with
    // the kernel's default of ~208 KB, a flush of a few hundred packets overflowed it while
    // this loop was descheduled, and the tree fell back).
    grow_buffers(&sock);
    let (mut ftx, mut frx) = (FaultDir::new(faults, 3), FaultDir::new(faults, 4));
    let mut staged = Vec::new();
    let start = Instant::now();
    let now = || start.elapsed().as_nanos() as u64;
    // After completion: leave once every mapper said BYE; else (a BYE or the mapper lost)
    // once nothing came for the linger, DONE being sent again meanwhile.
    let quiet = Duration::from_nanos((cfg.rto_ns * 5).max(cfg.linger_ns));
    let mut r = Reducer::new(cfg);
    let mut out = Vec::new();
    let mut buf = vec![0u8; 65536];
    let mut done_at: Option<Instant> = None;
    let mut last_rx = Instant::now();
    // Datagrams the socket had dropped when the tree fell back: the usual cause of loss
    // between switch and reducer, so the fallback's reason names it.
    let mut drops_at_fallback: Option<u64> = None;
    while start.elapsed() < timeout {
        sock.set_read_timeout(Some(wait_for(r.poll_timeout(), now())))?;
        let mut first = true;
        // Whether the blocking receive waited and found nothing (an ICMP error does not count).
        let waited_empty = loop {
            match sock.recv_from(&mut buf) {
                Ok((n, from)) => {
                    last_rx = Instant::now();
                    frx.apply((buf[..n].to_vec(), from), &mut staged);
                    for (p, _) in staged.drain(..) {
                        r.handle(now(), &p);
                    }
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::ConnectionRefused) => {
                    break first && e.kind() != ErrorKind::ConnectionRefused;
                }
                Err(e) => return Err(e),
            }
            if first {
                sock.set_nonblocking(true)?;
                first = false;
            }
            send_replies(&sock, &mut r, mappers, &mut ftx, &mut out, &mut staged)?;
        };
        if !first {
            sock.set_nonblocking(false)?;
        }
        r.handle_timeout(now());
        send_replies(&sock, &mut r, mappers, &mut ftx, &mut out, &mut staged)?;
        if r.stats.fallback && drops_at_fallback.is_none() {
            drops_at_fallback = Some(socket_rx_state(&sock).1);
        }
        if r.is_complete() && done_at.is_none() {
            done_at = Some(Instant::now());
        }
        // Decided only after a receive that waited and found the socket empty: a reducer
        // descheduled for longer than the linger must still read the report waiting for it.
        // The second bound stops a linger that stray traffic would keep alive.
        if let Some(d) = done_at {
            if r.all_answered() || (waited_empty && last_rx.elapsed() >= quiet) || d.elapsed() >= 4 * quiet {
                break;
            }
        }
    }
    let (rcvbuf_bytes, socket_drops) = socket_rx_state(&sock);
    if let Some(d) = drops_at_fallback.filter(|&d| d > 0) {
        r.stats.fallback_reason.push_str(&format!("; the reducer's socket had dropped {d} datagrams (receive buffer full)"));
    }
    let elapsed = done_at.map_or(start.elapsed(), |d| d.duration_since(start));
    Ok(ReduceRun {
        completed: r.is_complete(),
        stats: r.stats.clone(),
        result: r.take_result(),
        elapsed,
        faults_injected: ftx.injected + frx.injected,
        rcvbuf_bytes,
        socket_drops,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hostlib::aggregation::Mode;
    use wire::daiet::Op;

    /// Two mappers and a reducer on loopback, no switch: udp mode is exact; switch mode
    /// falls back and is exact too.
    /// A reducer's and `n` mappers' sockets on loopback, with their addresses. Every socket
    /// is bound (to a port the kernel picks) before any thread starts: fixed port numbers in
    /// the ephemeral range could be taken by another process, and a reducer bound late
    /// refused the mappers' first window.
    fn loopback(n: usize) -> (UdpSocket, SocketAddr, Vec<UdpSocket>, Vec<SocketAddr>) {
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let red_sock = UdpSocket::bind(any).unwrap();
        let red_addr = red_sock.local_addr().unwrap();
        let map_socks: Vec<UdpSocket> = (0..n).map(|_| UdpSocket::bind(any).unwrap()).collect();
        let maps: Vec<SocketAddr> = map_socks.iter().map(|s| s.local_addr().unwrap()).collect();
        (red_sock, red_addr, map_socks, maps)
    }

    #[test]
    fn loopback_udp_and_fallback() {
        let (f, none) = (SocketFaults { loss: 0.05, duplicate: 0.05, reorder: 0.05, seed: 3 }, SocketFaults::default());
        for (mode, faults) in [(Mode::Udp, none), (Mode::Switch, none), (Mode::Udp, f), (Mode::Switch, f)] {
            let words: Vec<Vec<String>> =
                (0..2).map(|m| (0..2000).map(|i| format!("w{}", (i * 7 + m * 3) % 150)).chain(["x".repeat(40)]).collect()).collect();
            let mut reference: HashMap<Vec<u8>, u64> = HashMap::new();
            for w in words.iter().flatten() {
                *reference.entry(w.as_bytes().to_vec()).or_default() += 1;
            }
            let (red_sock, red_addr, map_socks, maps) = loopback(2);
            let mut rc = ReducerConfig::new(9, 2, Op::Sum, mode);
            rc.grace_ns = 50_000_000;
            let maps2 = maps.clone();
            let h = std::thread::spawn(move || {
                let t0 = Instant::now();
                let run = run_reducer(red_sock, rc, &maps2, Duration::from_secs(20), faults).unwrap();
                (run, t0.elapsed())
            });
            let hs: Vec<_> = words
                .into_iter()
                .zip(map_socks)
                .enumerate()
                .map(|(i, (ws, sock))| {
                    std::thread::spawn(move || {
                        let mut keys = Vec::new();
                        let mut offs = vec![0u64];
                        for w in &ws {
                            keys.extend_from_slice(w.as_bytes());
                            offs.push(keys.len() as u64);
                        }
                        let mut cfg = MapperConfig::new(i as u16, Op::Sum, mode);
                        cfg.stall_ns = 50_000_000;
                        let faults = SocketFaults { seed: faults.seed + 10 + i as u64, ..faults };
                        let n = ws.len();
                        run_mapper(sock, cfg, &[red_addr], &[9], keys, offs, vec![1; n], vec![0; n], Duration::from_secs(20), faults)
                            .unwrap()
                    })
                })
                .collect();
            let runs: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
            let (red, total) = h.join().unwrap();
            assert!(red.completed);
            if faults.loss == 0.0 {
                // Every mapper said BYE: the reducer left without waiting out its linger.
                let after = total.saturating_sub(red.elapsed);
                assert!(after < Duration::from_millis(250), "{mode:?}: the reducer left {after:?} after completion");
            }
            assert_eq!(red.result, reference);
            assert_eq!(red.stats.fallback, mode == Mode::Switch);
            assert!(runs.iter().all(|r| r.completed));
            // The large buffer was granted (the kernel reports double what was asked for;
            // without CAP_NET_ADMIN at least the default) and nothing overflowed it.
            assert!(red.rcvbuf_bytes >= 212_992, "{}", red.rcvbuf_bytes);
            assert_eq!(red.socket_drops, 0);
            if faults.loss > 0.0 {
                assert!(red.faults_injected + runs.iter().map(|r| r.faults_injected).sum::<u64>() > 0);
            }
        }
    }

    /// Mappers reading their pairs from spool files (one per tree) on loopback: the same
    /// result as the reference, in udp mode and through the no-switch fallback (which reads
    /// the spools again from the start); a truncated spool fails the run with a clear error.
    #[test]
    fn loopback_from_spools() {
        use std::path::PathBuf;
        let dir = std::env::temp_dir().join(format!("inswitch-spool-loop-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let words: Vec<Vec<String>> =
            (0..2).map(|m| (0..30_000).map(|i| format!("w{}", (i * 7 + m * 3) % 1500)).chain(["x".repeat(40)]).collect()).collect();
        let mut reference: HashMap<Vec<u8>, u64> = HashMap::new();
        for w in words.iter().flatten() {
            *reference.entry(w.as_bytes().to_vec()).or_default() += 1;
        }
        let spools: Vec<PathBuf> = words
            .iter()
            .enumerate()
            .map(|(m, ws)| {
                let p = dir.join(format!("spool-m{m}-9.bin"));
                let mut w = std::io::BufWriter::new(std::fs::File::create(&p).unwrap());
                for x in ws {
                    spool::write_frame(&mut w, x.as_bytes(), 1).unwrap();
                }
                p
            })
            .collect();
        for mode in [Mode::Udp, Mode::Switch] {
            let (red_sock, red_addr, map_socks, maps) = loopback(2);
            let mut rc = ReducerConfig::new(9, 2, Op::Sum, mode);
            rc.grace_ns = 50_000_000;
            let h = std::thread::spawn(move || run_reducer(red_sock, rc, &maps, Duration::from_secs(20), SocketFaults::default()).unwrap());
            let hs: Vec<_> = map_socks
                .into_iter()
                .enumerate()
                .map(|(i, sock)| {
                    let path = spools[i].clone();
                    std::thread::spawn(move || {
                        let mut cfg = MapperConfig::new(i as u16, Op::Sum, mode);
                        cfg.stall_ns = 50_000_000;
                        let src = SpoolSource::open(&[path]).unwrap();
                        run_mapper_source(sock, cfg, &[red_addr], &[9], src, Duration::from_secs(20), SocketFaults::default()).unwrap()
                    })
                })
                .collect();
            let runs: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
            let red = h.join().unwrap();
            assert!(red.completed && runs.iter().all(|r| r.completed));
            assert_eq!(red.result, reference, "{mode:?}");
            assert_eq!(red.stats.fallback, mode == Mode::Switch);
            for r in &runs {
                assert_eq!(r.stats.pairs, 30_001);
                assert!(r.stats.max_held_packets <= 64, "{}", r.stats.max_held_packets);
            }
        }
        // Cut short: refused before anything is sent.
        let full = std::fs::read(&spools[0]).unwrap();
        std::fs::write(&spools[0], &full[..full.len() - 3]).unwrap();
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = sock.local_addr().unwrap();
        let src = SpoolSource::open(&spools[..1]).unwrap();
        let cfg = MapperConfig::new(0, Op::Sum, Mode::Udp);
        let err = run_mapper_source(sock, cfg, &[to], &[9], src, Duration::from_secs(5), SocketFaults::default()).unwrap_err();
        assert!(err.to_string().contains("truncated frame"), "{err}");
        std::fs::remove_dir_all(dir).unwrap();
    }
}

/// In-memory benchmarks of the `daiet` and `switchagg` programs: pair updates per second
/// on one core, each checked against the reference after the run.
pub mod bench {
    use std::collections::HashMap;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use hostlib::aggregation::{Header, Protocol};
    use hostlib::switchagg::harness as sa_harness;
    use pisa::control::{CloneSession, ControlOp, Replica, WriteOp};
    use pisa::{FieldMatch, PacketBuf, PipeConfig, ProgramSet, Switch, PORT_RECIRC};
    use programs::daiet::{ack_session, layout, TreeConfig, WALK_SESSION};
    use programs::switchagg::Config as SaConfig;
    use wire::daiet::{Op, Packet, MAX_PAIRS, UDP_PORT};
    use wire::switchagg::{AggPacket as SaPacket, Operation as SaOp};

    /// The tree's parent port (the mapper is on port 1).
    const PARENT_PORT: u16 = 2;

    /// CPU time this thread has used, in ns: rates per CPU-second stay meaningful on a
    /// machine shared with other work (wall-clock rates do not).
    pub fn thread_cpu_ns() -> u64 {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `ts` is a valid timespec for clock_gettime to fill.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }

    /// 100 ms of rounds not counted: caches, branch predictors and the pool warmed up.
    fn warm_up(mut round: impl FnMut() -> u64) {
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(100) {
            round();
        }
    }

    /// What a timed run of rounds measured: packets, wall seconds, CPU seconds of this
    /// thread.
    struct Timed {
        packets: u64,
        seconds: f64,
        cpu_seconds: f64,
    }

    /// Rounds for `duration` (whole rounds: the last one ends past it).
    fn timed(duration: Duration, mut round: impl FnMut() -> u64) -> Timed {
        let mut packets = 0u64;
        let start = Instant::now();
        let cpu0 = thread_cpu_ns();
        while start.elapsed() < duration {
            packets += round();
        }
        Timed { packets, seconds: start.elapsed().as_secs_f64(), cpu_seconds: (thread_cpu_ns() - cpu0) as f64 / 1e9 }
    }

    /// `forward`'s packet rate per CPU-second (64-byte frames, batches of 32), the base of
    /// the aggregation ratio, measured the same way as [`daiet_pipeline`].
    pub fn forward_cpu_rate(duration: Duration) -> f64 {
        let start = Instant::now();
        let c0 = thread_cpu_ns();
        let mut packets = 0u64;
        while start.elapsed() < duration {
            packets += crate::bench::forward_rounds(64, 32, 2000);
        }
        let cpu = (thread_cpu_ns() - c0) as f64 / 1e9;
        packets as f64 / cpu.max(1e-9)
    }

    /// What a run measured.
    #[derive(Clone, Debug)]
    pub struct AggRate {
        /// Pairs aggregated (all admitted: the program's counters confirm no drop).
        pub pair_updates: u64,
        /// Packets (of up to ten pairs) sent in.
        pub packets: u64,
        /// Switch passes (ingress, recirculations included).
        pub passes: u64,
        /// Seconds measured.
        pub seconds: f64,
        /// Pair updates per second of wall time.
        pub pair_updates_per_s: f64,
        /// CPU seconds the measuring thread used.
        pub cpu_seconds: f64,
        /// Pair updates per CPU-second: the per-core rate.
        pub pair_updates_per_cpu_s: f64,
        /// Drops counted by the switch during the run (should be 0).
        pub drops: u64,
        /// Keys whose aggregate (cells plus pairs sent on to the parent) was checked equal
        /// to the reference after the run ([`DaietWorkload::verify`]).
        pub verified_keys: usize,
    }

    fn be_bytes(v: u64, bits: u32) -> Vec<u8> {
        let n = bits.div_ceil(8) as usize;
        v.to_be_bytes()[8 - n..].to_vec()
    }

    /// The workload of [`daiet_pipeline`], set up once and run round by round (a fixed
    /// number of rounds for instruction counting: `examples/daiet_count.rs`).
    pub struct DaietWorkload {
        sw: Switch,
        templates: Vec<Vec<u8>>,
        /// Pairs in one round's packets.
        pub pairs_per_round: u64,
        seq: u32,
        now: u64,
        rx: Vec<PacketBuf>,
        /// Rounds run so far (warm-up included: the switch's cells hold them all).
        rounds: u64,
        /// Pairs the switch sent on to the parent (the spillover bucket: colliding keys),
        /// summed by key.
        spilled: HashMap<Vec<u8>, u64>,
    }

    impl DaietWorkload {
        /// One round: every template sent in once (next sequence numbers), run until every
        /// recirculation is done. Returns the packets sent.
        pub fn round(&mut self) -> u64 {
            let sw = &mut self.sw;
            for t in &self.templates {
                let mut b = sw.buffer_for(1);
                b.copy_from(t);
                b.data_mut()[layout::SEQ..layout::SEQ + 4].copy_from_slice(&self.seq.to_be_bytes());
                self.seq += 1;
                self.rx.push(b);
            }
            sw.process(&mut self.rx, self.now);
            self.now += 1;
            while self.sw.pipes()[0].pending() > 0 {
                self.sw.tick(self.now);
                self.now += 1;
                self.recycle();
            }
            self.recycle();
            self.rounds += 1;
            self.templates.len() as u64
        }

        /// Return sent frames to the pool, counting the pairs that went on to the parent.
        fn recycle(&mut self) {
            for f in self.sw.tx(PARENT_PORT).iter() {
                let Ok(p) = Packet::new_checked(&f.data()[wire::L2_L4_LEN..]) else { continue };
                if p.flags() & wire::daiet::flags::ACK == 0 {
                    for (k, v) in p.pairs() {
                        *self.spilled.entry(k.to_vec()).or_default() += v as u64;
                    }
                }
            }
            for p in 0..4 {
                self.sw.recycle_tx(p);
            }
        }

        /// Check the aggregation against the same computation without the switch: for
        /// every key, the values in the switch's cells (four slices) plus the pairs sent on
        /// to the parent equal the rounds run times the key's total in one round's packets.
        /// Returns the keys compared, or what differs.
        pub fn verify(&self) -> Result<usize, String> {
            let mut want: HashMap<Vec<u8>, u64> = HashMap::new();
            for t in &self.templates {
                let p = Packet::new_checked(&t[wire::L2_L4_LEN..]).map_err(|e| format!("template: {e:?}"))?;
                for (k, v) in p.pairs() {
                    *want.entry(k.to_vec()).or_default() += v as u64 * self.rounds;
                }
            }
            let mut got = self.spilled.clone();
            let decl = self.sw.pipes()[0].set().decl(1);
            let state = self.sw.pipes()[0].state(1);
            let reg = |name: &str| {
                decl.registers.iter().position(|r| r.name == name).map(|i| state.register(i)).ok_or(format!("no register {name}"))
            };
            for s in 0..wire::daiet::SLICES {
                let keys = [reg(&format!("key0_{s}"))?, reg(&format!("key1_{s}"))?, reg(&format!("key2_{s}"))?, reg(&format!("key3_{s}"))?];
                let vals = reg(&format!("value_{s}"))?;
                for (i, &v) in vals.iter().enumerate() {
                    if keys[0][i] == 0 {
                        continue; // an empty cell
                    }
                    let mut k: Vec<u8> = keys.iter().flat_map(|w| (w[i] as u32).to_be_bytes()).collect();
                    k.truncate(k.iter().position(|&c| c == 0).unwrap_or(k.len()));
                    *got.entry(k).or_default() += v;
                }
            }
            // Pairs waiting in the spillover bucket (a slot's first key word is zero when
            // empty: keys on this path have no zero byte).
            let bk = [reg("spill_key0")?, reg("spill_key1")?, reg("spill_key2")?, reg("spill_key3")?];
            for (i, &v) in reg("spill_value")?.iter().enumerate() {
                if bk[0][i] == 0 {
                    continue;
                }
                let mut k: Vec<u8> = bk.iter().flat_map(|w| (w[i] as u32).to_be_bytes()).collect();
                k.truncate(k.iter().position(|&c| c == 0).unwrap_or(k.len()));
                *got.entry(k).or_default() += v;
            }
            if got == want {
                Ok(want.len())
            } else {
                let wrong =
                    want.iter().filter(|(k, v)| got.get(*k) != Some(v)).count() + got.keys().filter(|k| !want.contains_key(*k)).count();
                Err(format!("{wrong} of {} keys differ from the reference after {} rounds", want.len(), self.rounds))
            }
        }

        /// The switch under test (its counters).
        pub fn switch(&self) -> &Switch {
            &self.sw
        }
    }

    /// `forward,daiet` with one tree over `cells` cells; data packets of ten pairs from one
    /// mapper with consecutive sequence numbers, over a vocabulary of `vocab` keys, `batch`
    /// packets per round, each round run to completion (all recirculations).
    pub fn daiet_pipeline(batch: usize, vocab: u32, duration: Duration) -> AggRate {
        let mut w = daiet_workload(batch, vocab);
        warm_up(|| w.round());
        let c0 = w.sw.counters();
        let Timed { packets, seconds, cpu_seconds } = timed(duration, || w.round());
        let c1 = w.sw.counters();
        let pair_updates = packets / w.templates.len() as u64 * w.pairs_per_round;
        let passes = c1.programs[1].ingress_passes - c0.programs[1].ingress_passes;
        let drops = c1.total_drops() - c0.total_drops();
        AggRate {
            pair_updates,
            packets,
            passes,
            seconds,
            pair_updates_per_s: pair_updates as f64 / seconds,
            cpu_seconds,
            pair_updates_per_cpu_s: pair_updates as f64 / cpu_seconds.max(1e-9),
            drops,
            verified_keys: w.verify().unwrap_or_else(|e| panic!("DAIET bench: the switch's aggregate is wrong: {e}")),
        }
    }

    /// Build the switch, tree and packet templates of [`daiet_pipeline`].
    pub fn daiet_workload(batch: usize, vocab: u32) -> DaietWorkload {
        let set = Arc::new(
            ProgramSet::new(vec![Arc::new(programs::forward::Forward::new()), Arc::new(programs::daiet::Daiet::new())])
                .expect("programs load"),
        );
        let cfg = PipeConfig {
            queue_capacity: batch.max(64) * 4,
            egress_budget: batch.max(64) * 2,
            recirc_capacity: batch * 16 + 64,
            recirc_per_batch: batch * 16 + 64,
            ..PipeConfig::default()
        };
        let mut sw = Switch::new(set.clone(), 4, 1, cfg);
        let id = |prog: usize, table: &str, action: &str| {
            let d = set.decl(prog);
            (
                set.ids(prog).tables[d.tables.iter().position(|t| t.name == table).unwrap()],
                set.ids(prog).actions[d.actions.iter().position(|a| a.name == action).unwrap()],
            )
        };
        let (l2, fwd) = id(0, "l2_dmac", "l2_forward");
        // Both hosts' source addresses known to `forward` (as after the controller learned
        // them from the first digests, and as `forward_cpu_rate`'s rig has them): otherwise
        // every packet's first pass sends a MAC-learning digest, which the forward rate this
        // one is compared with does not pay.
        let (smac, known) = id(0, "l2_smac", "nop");
        for h in [1u8, 2] {
            sw.control(&ControlOp::TableWrite {
                table_id: smac,
                op: WriteOp::Insert,
                matches: vec![FieldMatch::Exact { field: 0, value: vec![2, 0, 0, 0, 0, h] }],
                priority: 0,
                action_id: known,
                params: vec![],
            })
            .expect("l2_smac entry");
        }
        for (h, p) in [(1u8, 1u16), (2, 2)] {
            sw.control(&ControlOp::TableWrite {
                table_id: l2,
                op: WriteOp::Insert,
                matches: vec![FieldMatch::Exact { field: 0, value: vec![2, 0, 0, 0, 0, h] }],
                priority: 0,
                action_id: fwd,
                params: vec![(1, be_bytes(p as u64, 9))],
            })
            .expect("l2 entry");
        }
        let (tt, ta) = id(1, "daiet_trees", "set_tree");
        let tree = TreeConfig {
            parent_port: PARENT_PORT,
            tree_idx: 0,
            part_base: 0,
            part_size: 65536,
            sender_base: 0,
            op: Op::Sum,
            children: 1,
            switch_id: 250,
            max_senders: 256,
        };
        let params =
            tree.params().iter().zip(TreeConfig::PARAMS).enumerate().map(|(i, (v, (_, b)))| (i as u32 + 1, be_bytes(*v, b))).collect();
        sw.control(&ControlOp::TableWrite {
            table_id: tt,
            op: WriteOp::Insert,
            matches: vec![FieldMatch::Exact { field: 0, value: vec![0, 1] }],
            priority: 0,
            action_id: ta,
            params,
        })
        .expect("tree entry");
        for p in 0..4u16 {
            let c = CloneSession { replicas: vec![Replica { port: p, rid: 0 }], truncate_len: programs::daiet::ACK_FRAME_LEN };
            sw.control(&ControlOp::CloneSessionWrite { op: WriteOp::Insert, session: ack_session(p), session_cfg: c }).expect("session");
        }
        let c = CloneSession { replicas: vec![Replica { port: PORT_RECIRC, rid: 0 }], truncate_len: 0 };
        sw.control(&ControlOp::CloneSessionWrite { op: WriteOp::Insert, session: WALK_SESSION, session_cfg: c }).expect("session");

        // Templates: `batch` packets of (up to) ten pairs over the vocabulary, placed by the
        // mapper's own encoder (each key at a position of its slice).
        let words: Vec<Vec<u8>> =
            (0..batch * MAX_PAIRS).map(|i| format!("word{}", (i as u64).wrapping_mul(2_654_435_761) % vocab as u64).into_bytes()).collect();
        let hdr = Header { tree_id: 1, flags: 0, op: Op::Sum, sender: 0, epoch: 0 };
        let payloads = Protocol::Daiet.packetize(hdr, words.iter().map(|w| (&w[..], 1u32)));
        let pairs_per_round: u64 =
            payloads.iter().map(|p| Packet::new_checked(&p[..]).map(|v| v.pairs().count() as u64).unwrap_or(0)).sum();
        let templates: Vec<Vec<u8>> = payloads
            .iter()
            .map(|p| {
                let mut f = vec![0u8; wire::L2_L4_LEN];
                f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
                f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
                f[12..14].copy_from_slice(&[8, 0]);
                f[14] = 0x45;
                f[22] = 64;
                f[23] = 17;
                f[26..30].copy_from_slice(&[10, 0, 0, 1]);
                f[30..34].copy_from_slice(&[10, 0, 0, 2]);
                f[34..36].copy_from_slice(&5000u16.to_be_bytes());
                f[36..38].copy_from_slice(&UDP_PORT.to_be_bytes());
                f.extend_from_slice(p);
                let n = f.len();
                layout::fix_lengths(&mut f, n);
                f
            })
            .collect();
        DaietWorkload { sw, templates, pairs_per_round, seq: 0, now: 1, rx: Vec::with_capacity(batch), rounds: 0, spilled: HashMap::new() }
    }

    /// Drops and hardware-rule violations the switch counted for program `prog`.
    fn program_drops(sw: &Switch, prog: usize) -> u64 {
        let c = sw.counters();
        c.programs.get(prog).map(|p| p.drops.iter().sum::<u64>() + p.violations.iter().sum::<u64>()).unwrap_or(0)
    }

    /// Pairs of one SwitchAgg mapper (or of one packet).
    pub type SaPairs = Vec<(Vec<u8>, u32)>;

    /// The workload of [`switchagg_pipeline`]: one `forward,switchagg` switch with one SUM
    /// tree whose children are ports `0..children` and whose parent is port `children`; the
    /// mappers' packets (numbered, up to 1500 bytes, in mapper round-robin order) built once
    /// and sent round after round with the next sequence numbers, `batch` frames per
    /// `process` call.
    ///
    /// Everything the switch sends towards the parent (FPE→BPE→parent evictions during the
    /// run, then the flush) is summed by key as it leaves, so that after [`Self::flush`]
    /// the switch's whole aggregate can be compared with the reference ([`Self::verify`]).
    pub struct SwitchAggWorkload {
        sw: Switch,
        /// (child port, frame, pairs in it); the sequence number is written per send.
        frames: Vec<(u16, Vec<u8>, u64)>,
        children: u16,
        batch: usize,
        /// Next sequence number of each child (continues across rounds: exactly once at the
        /// switch needs them consecutive).
        seq: Vec<u32>,
        now: u64,
        rx: Vec<PacketBuf>,
        /// Pairs in one round's packets.
        pub pairs_per_round: u64,
        /// Each key's total in one round's packets (the same computation without the switch).
        per_round: HashMap<Vec<u8>, u32>,
        /// Rounds run so far (warm-up included).
        rounds: u64,
        /// Pairs the switch sent towards the parent, summed by key (wrapping, as the switch's
        /// SUM does).
        up: HashMap<Vec<u8>, u32>,
        /// Packets towards the parent, and those whose sequence number was not the next one
        /// (the switch numbers what it sends up: 0, 1, 2, …).
        up_packets: u64,
        up_seq_errors: u64,
        /// The flush's last packet (EoT) reached the parent.
        eot: bool,
    }

    impl SwitchAggWorkload {
        /// Set up the switch (engines of `cfg`, one tree, ACK and flush sessions as the
        /// controller installs them) and the packets of `shares` (one mapper each).
        pub fn new(shares: &[SaPairs], cfg: SaConfig, batch: usize) -> SwitchAggWorkload {
            let m = shares.len().clamp(1, 200);
            let cfg = SaConfig { max_trees: cfg.max_trees.max(1), max_children: cfg.max_children.max(m as u32), ..cfg };
            let (sw, _) = sa_harness::single_switch(cfg, m as u16, SaOp::Sum);
            let per: Vec<Vec<SaPairs>> = shares.iter().take(m).map(|s| sa_harness::packetize(s)).collect();
            let mut frames = Vec::new();
            let most = per.iter().map(|p| p.len()).max().unwrap_or(0);
            for i in 0..most {
                for (j, p) in per.iter().enumerate() {
                    if let Some(pk) = p.get(i).filter(|pk| !pk.is_empty()) {
                        let f = sa_harness::frame(1 + j as u8, 200, 0, SaOp::Sum, j as u16, 0, 0, pk);
                        frames.push((j as u16, f, pk.len() as u64));
                    }
                }
            }
            let mut per_round: HashMap<Vec<u8>, u32> = HashMap::new();
            for (k, v) in shares.iter().take(m).flatten() {
                let e = per_round.entry(k.clone()).or_insert(0);
                *e = e.wrapping_add(*v);
            }
            let pairs_per_round = frames.iter().map(|f| f.2).sum();
            SwitchAggWorkload {
                sw,
                frames,
                children: m as u16,
                batch: batch.max(1),
                seq: vec![0; m],
                now: 1,
                rx: Vec::with_capacity(batch.max(1)),
                pairs_per_round,
                per_round,
                rounds: 0,
                up: HashMap::new(),
                up_packets: 0,
                up_seq_errors: 0,
                eot: false,
            }
        }

        /// One round: every mapper packet sent once, in batches, with the next sequence
        /// numbers. Returns the packets sent.
        pub fn round(&mut self) -> u64 {
            let (l2, b) = (wire::L2_L4_LEN, self.batch);
            for c in 0..self.frames.len().div_ceil(b) {
                for (j, f, _) in &self.frames[c * b..((c + 1) * b).min(self.frames.len())] {
                    let s = &mut self.seq[*j as usize];
                    let mut buf = self.sw.buffer_for(*j);
                    buf.copy_from(f);
                    buf.data_mut()[l2 + 8..l2 + 12].copy_from_slice(&s.to_be_bytes());
                    *s += 1;
                    self.rx.push(buf);
                }
                self.step();
            }
            self.rounds += 1;
            self.frames.len() as u64
        }

        /// Queue a frame from `child` outside the rounds' templates: sequence number
        /// `seq`, `flags`, `pairs`.
        fn queue(&mut self, child: u16, seq: u32, flags: u8, pairs: &[(Vec<u8>, u32)]) {
            let f = sa_harness::frame(1 + child as u8, 200, 0, SaOp::Sum, child, seq, flags, pairs);
            let mut buf = self.sw.buffer_for(child);
            buf.copy_from(&f);
            self.rx.push(buf);
        }

        /// The queued frames through the switch, then the frames it sent recycled.
        fn step(&mut self) {
            self.sw.process(&mut self.rx, self.now);
            self.now += 1;
            self.recycle();
        }

        /// Return sent frames to the pool, summing the pairs that went towards the parent.
        fn recycle(&mut self) {
            let parent = self.children;
            for f in self.sw.tx(parent).iter() {
                let Some(p) = f.data().get(wire::L2_L4_LEN..).and_then(|b| SaPacket::new_checked(b).ok()) else {
                    self.up_seq_errors += 1; // nothing but aggregation packets goes up
                    continue;
                };
                if p.seq() as u64 != self.up_packets {
                    self.up_seq_errors += 1;
                }
                self.up_packets += 1;
                self.eot |= p.eot();
                for pair in p.pairs() {
                    match pair {
                        Ok((k, v)) => {
                            let e = self.up.entry(k.to_vec()).or_insert(0);
                            *e = e.wrapping_add(v);
                        }
                        Err(_) => self.up_seq_errors += 1,
                    }
                }
            }
            for p in 0..self.children + 2 {
                self.sw.recycle_tx(p);
            }
        }

        /// Every child sends its end of tree (EoT, next sequence number, no pairs); the
        /// last one makes the switch flush the tree to the parent (recirculating, one
        /// bucket word per item); run until nothing is pending. Err if the flush did not
        /// end with EoT at the parent.
        pub fn flush(&mut self) -> Result<(), String> {
            for j in 0..self.children {
                let s = self.seq[j as usize];
                self.seq[j as usize] += 1;
                self.queue(j, s, wire::switchagg::flags::EOT, &[]);
            }
            self.step();
            // One pass per bucket word at most (the program's recirculation bound).
            let limit = self.sw.pipes()[0].set().recirc_limit(1).unwrap_or(u32::MAX) as u64 + 16;
            let mut ticks = 0u64;
            while self.sw.pipes()[0].pending() > 0 && ticks < limit {
                self.sw.tick(self.now);
                self.now += 1;
                ticks += 1;
                self.recycle();
            }
            if !self.eot {
                return Err(format!("the flush did not reach the parent with EoT ({ticks} ticks)"));
            }
            Ok(())
        }

        /// Check the aggregation against the same computation without the switch: after
        /// [`Self::flush`], the pairs the switch sent towards the parent, summed by key,
        /// equal the rounds run times the key's total in one round's packets, and the
        /// switch's stream up was numbered without a gap. Returns the keys compared.
        pub fn verify(&self) -> Result<usize, String> {
            if !self.eot {
                return Err("not flushed: the switch still holds the aggregate".into());
            }
            if self.up_seq_errors > 0 {
                return Err(format!("{} packets towards the parent out of sequence or unreadable", self.up_seq_errors));
            }
            let r = self.rounds as u32; // SUM wraps at 32 bits in the switch; so here
            let want: HashMap<&[u8], u32> = self.per_round.iter().map(|(k, v)| (&k[..], v.wrapping_mul(r))).collect();
            let wrong = want.iter().filter(|(k, v)| self.up.get(**k) != Some(v)).count()
                + self.up.keys().filter(|k| !want.contains_key(&k[..])).count();
            if wrong == 0 {
                Ok(want.len())
            } else {
                Err(format!("{wrong} of {} keys differ from the reference after {} rounds", want.len(), self.rounds))
            }
        }

        /// Packets the switch has sent towards the parent so far (evictions, then the flush).
        pub fn up_packets(&self) -> u64 {
            self.up_packets
        }

        /// Rounds run so far.
        pub fn rounds(&self) -> u64 {
            self.rounds
        }

        /// The switch under test (its counters).
        pub fn switch(&self) -> &Switch {
            &self.sw
        }
    }

    /// The pairs of `inswitch bench aggregation`'s SwitchAgg measurement: 3 mappers of
    /// 20,000 pairs each over `vocab` distinct 16-byte keys, value 1.
    pub fn switchagg_shares(vocab: u32, per_mapper: u32) -> Vec<SaPairs> {
        let vocab = vocab.max(1);
        (0..3u32)
            .map(|j| {
                (0..per_mapper)
                    .map(|i| {
                        let k = (i.wrapping_mul(2_654_435_761).wrapping_add(j * 7919)) % vocab;
                        (format!("key-{k:012}").into_bytes(), 1)
                    })
                    .collect()
            })
            .collect()
    }

    /// [`switchagg_shares`] (20,000 pairs per mapper) on the default engines (4 MB FPE,
    /// 256 MB BPE), one tree of 3 children.
    pub fn switchagg_workload(batch: usize, vocab: u32) -> SwitchAggWorkload {
        let cfg = SaConfig { max_trees: 1, max_children: 3, ..SaConfig::default() };
        SwitchAggWorkload::new(&switchagg_shares(vocab, 20_000), cfg, batch)
    }

    /// Measure a SwitchAgg workload as [`daiet_pipeline`] does: 100 ms of warm-up, then
    /// whole rounds for `duration`, rates per wall and per CPU-second of this thread; then
    /// the flush (not timed) and the check against the reference. Err if the switch's
    /// aggregate is wrong.
    pub fn switchagg_measure(mut w: SwitchAggWorkload, duration: Duration) -> Result<AggRate, String> {
        warm_up(|| w.round());
        let c0 = w.sw.counters();
        let d0 = program_drops(&w.sw, 1);
        let rounds0 = w.rounds;
        let Timed { packets, seconds, cpu_seconds } = timed(duration, || w.round());
        let c1 = w.sw.counters();
        let drops = program_drops(&w.sw, 1) - d0;
        let pair_updates = (w.rounds - rounds0) * w.pairs_per_round;
        w.flush()?;
        let verified_keys = w.verify()?;
        Ok(AggRate {
            pair_updates,
            packets,
            passes: c1.programs[1].ingress_passes - c0.programs[1].ingress_passes,
            seconds,
            pair_updates_per_s: pair_updates as f64 / seconds,
            cpu_seconds,
            pair_updates_per_cpu_s: pair_updates as f64 / cpu_seconds.max(1e-9),
            drops,
            verified_keys,
        })
    }

    /// `inswitch bench aggregation`'s SwitchAgg measurement ([`switchagg_workload`],
    /// [`switchagg_measure`]). Panics if the switch's aggregate is wrong, as
    /// [`daiet_pipeline`] does.
    pub fn switchagg_pipeline(batch: usize, vocab: u32, duration: Duration) -> AggRate {
        switchagg_measure(switchagg_workload(batch, vocab), duration)
            .unwrap_or_else(|e| panic!("SwitchAgg bench: the switch's aggregate is wrong: {e}"))
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn daiet_bench_check_catches_a_wrong_aggregate() {
            let mut w = super::daiet_workload(8, 512);
            for _ in 0..3 {
                w.round();
            }
            assert!(w.verify().is_ok());
            // One cell's value off by one: the check must see it.
            let decl = w.sw.pipes()[0].set().decl(1);
            let v = decl.registers.iter().position(|r| r.name == "value_0").unwrap();
            let cells = w.sw.pipe_mut(0).state_mut(1).register_mut(v);
            let i = cells.iter().position(|&c| c != 0).expect("a used cell");
            cells[i] += 1;
            assert!(w.verify().is_err());
        }

        use super::{switchagg_measure, switchagg_shares, SaConfig, SwitchAggWorkload};

        /// Engines small enough that pairs are evicted FPE → BPE → parent during the run.
        fn small_engines() -> SaConfig {
            SaConfig { fpe_bytes: 16 << 10, bpe_bytes: 64 << 10, slots_per_bucket: 4, max_trees: 1, max_children: 3 }
        }

        #[test]
        fn switchagg_bench_check_passes_with_evictions_and_replays() {
            let mut w = SwitchAggWorkload::new(&switchagg_shares(2048, 2000), small_engines(), 16);
            for _ in 0..3 {
                w.round();
            }
            assert!(w.up_packets > 0 && !w.up.is_empty(), "evictions reached the parent during the run");
            assert!(w.verify().is_err(), "before the flush there is no whole aggregate to compare");
            // A retransmission of an aggregated packet (an old sequence number) is
            // acknowledged, not added again: the check still passes.
            let old = w.frames[0].1.clone();
            let n = w.frames[0].2 as usize;
            let p = wire::switchagg::AggPacket::new_checked(&old[wire::L2_L4_LEN..]).unwrap();
            let pairs: Vec<_> = p.pairs().map(|r| r.map(|(k, v)| (k.to_vec(), v)).unwrap()).collect();
            assert_eq!(pairs.len(), n);
            send_extra_from(&mut w, 0, &pairs, 1);
            w.flush().unwrap();
            let keys = w.verify().unwrap();
            assert_eq!(keys, 2048);
            assert_eq!(super::program_drops(&w.sw, 1), 0);
            // One forwarded pair off by one: the check must see it.
            let k = w.up.keys().next().unwrap().clone();
            *w.up.get_mut(&k).unwrap() += 1;
            assert!(w.verify().is_err());
        }

        #[test]
        fn switchagg_bench_check_catches_a_wrong_aggregate() {
            // The switch aggregates one pair the rounds do not hold (a packet that is not
            // part of the workload, in sequence): its aggregate differs from the reference.
            let mut w = SwitchAggWorkload::new(&switchagg_shares(2048, 2000), small_engines(), 16);
            for _ in 0..2 {
                w.round();
            }
            let s = w.seq[0];
            w.seq[0] += 1;
            send_extra_from(&mut w, 0, &[(b"key-000000000007".to_vec(), 1)], s);
            w.flush().unwrap();
            let e = w.verify().unwrap_err();
            assert!(e.contains("1 of 2048 keys differ"), "{e}");
            // A key the reference does not have at all is caught too.
            let mut w = SwitchAggWorkload::new(&switchagg_shares(512, 500), small_engines(), 16);
            w.round();
            let s = w.seq[1];
            w.seq[1] += 1;
            send_extra_from(&mut w, 1, &[(b"not-in-the-job".to_vec(), 3)], s);
            w.flush().unwrap();
            assert!(w.verify().is_err());
        }

        /// One packet from `child` with sequence number `seq`, outside the rounds.
        fn send_extra_from(w: &mut SwitchAggWorkload, child: u16, pairs: &[(Vec<u8>, u32)], seq: u32) {
            w.queue(child, seq, 0, pairs);
            w.step();
        }

        #[test]
        fn switchagg_bench_runs_without_drops() {
            // The bench's keys and packets; engines of 4 MB + 8 MB so the flush stays short
            // in a debug build (the bench itself uses the default 256 MB BPE).
            let cfg = SaConfig { fpe_bytes: 4 << 20, bpe_bytes: 8 << 20, slots_per_bucket: 4, max_trees: 1, max_children: 3 };
            let w = SwitchAggWorkload::new(&switchagg_shares(4096, 20_000), cfg, 32);
            let r = switchagg_measure(w, std::time::Duration::from_millis(200)).unwrap();
            assert!(r.pair_updates > 0 && r.packets > 0);
            assert_eq!(r.drops, 0, "{r:?}");
            assert_eq!(r.verified_keys, 4096, "{r:?}");
            assert!(r.pair_updates >= r.packets * 60, "full 1500-byte packets of 16-byte keys: {r:?}");
            assert!(r.cpu_seconds > 0.0 && r.pair_updates_per_cpu_s >= r.pair_updates_per_s * 0.5, "{r:?}");
            eprintln!("{r:?}");
        }

        #[test]
        fn daiet_bench_runs_without_drops() {
            let r = super::daiet_pipeline(32, 4096, std::time::Duration::from_millis(200));
            assert!(r.pair_updates > 0);
            assert_eq!(r.drops, 0, "{r:?}");
            assert!(r.passes >= r.packets && r.passes <= r.packets * 3, "up to ten pairs, four per pass: {r:?}");
            assert!(r.pair_updates >= r.packets * 5, "packets are mostly full: {r:?}");
            assert!(r.verified_keys >= 300, "the aggregate of the run's keys was checked: {r:?}");
            eprintln!("{r:?}");
        }
    }
}
