//! The I/O loops around the sans-IO aggregation sender and receiver
//! (`hostlib::aggregation`): one real UDP socket each, a monotonic clock, bounded in time.

use std::collections::HashMap;
use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use hostlib::aggregation::{Mapper, MapperConfig, MapperStats, Reducer, ReducerConfig, ReducerStats};

/// What a mapper run did.
#[derive(Debug, Clone)]
pub struct MapRun {
    /// The sender's counters.
    pub stats: MapperStats,
    /// Every tree confirmed complete by its reducer (false: timed out).
    pub completed: bool,
    /// Wall time of the run.
    pub elapsed: Duration,
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
}

fn wait_for(deadline: Option<u64>, now: u64) -> Duration {
    // Never block long: the loops also check their overall timeout.
    let cap = 5_000_000u64;
    let d = deadline.map_or(cap, |d| d.saturating_sub(now).clamp(50_000, cap));
    Duration::from_nanos(d)
}

/// Send a mapper's pairs to `dests[tree index]` and serve its trees until every reducer
/// says DONE or `timeout` passes.
#[allow(clippy::too_many_arguments)]
pub fn run_mapper(cfg: MapperConfig, bind: SocketAddr, dests: &[SocketAddr], tree_ids: &[u16], keys: Vec<u8>, offsets: Vec<u64>, values: Vec<u32>, tree_of_pair: Vec<u16>, timeout: Duration) -> std::io::Result<MapRun> {
    let sock = UdpSocket::bind(bind)?;
    let start = Instant::now();
    let now = || start.elapsed().as_nanos() as u64;
    let mut m = Mapper::new(cfg, tree_ids, keys, offsets, values, tree_of_pair, now()).map_err(|e| std::io::Error::new(ErrorKind::InvalidInput, e))?;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 65536];
    while !m.is_done() && start.elapsed() < timeout {
        out.clear();
        m.poll_transmit(now(), &mut out);
        for (t, p) in &out {
            send(&sock, p, dests[*t])?;
        }
        sock.set_read_timeout(Some(wait_for(m.next_deadline(), now())))?;
        // Take what has arrived; block only for the first.
        let mut first = true;
        loop {
            match sock.recv_from(&mut buf) {
                Ok((n, _)) => m.handle(now(), &buf[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::ConnectionRefused) => break,
                Err(e) => return Err(e),
            }
            if first {
                sock.set_nonblocking(true)?;
                first = false;
            }
        }
        if !first {
            sock.set_nonblocking(false)?;
        }
    }
    Ok(MapRun { completed: m.is_done(), stats: m.stats.clone(), elapsed: start.elapsed() })
}

fn send(sock: &UdpSocket, p: &[u8], to: SocketAddr) -> std::io::Result<()> {
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

/// Receive one tree at `bind` from `mappers` (index = mapper id) until complete (and a
/// short linger to answer late status reports) or `timeout`.
pub fn run_reducer(cfg: ReducerConfig, bind: SocketAddr, mappers: &[SocketAddr], timeout: Duration) -> std::io::Result<ReduceRun> {
    let sock = UdpSocket::bind(bind)?;
    // The switch's final flush arrives as one burst of hundreds of packets: with the
    // default receive buffer (~208 KB) the reducer's socket overflows and the tree falls back.
    crate::sys::grow_sock_buf(std::os::fd::AsRawFd::as_raw_fd(&sock), true, 16 << 20);
    let start = Instant::now();
    let now = || start.elapsed().as_nanos() as u64;
    let quiet = Duration::from_nanos((cfg.rto_ns * 5).max(100_000_000));
    let mut r = Reducer::new(cfg);
    let mut out = Vec::new();
    let mut buf = vec![0u8; 65536];
    let mut done_at: Option<Instant> = None;
    let mut last_rx = Instant::now();
    while start.elapsed() < timeout {
        if let Some(d) = done_at {
            if last_rx.elapsed() >= quiet || d.elapsed() >= Duration::from_secs(2) {
                break;
            }
        }
        sock.set_read_timeout(Some(wait_for(r.next_deadline(), now())))?;
        let mut first = true;
        loop {
            match sock.recv_from(&mut buf) {
                Ok((n, _)) => {
                    last_rx = Instant::now();
                    r.handle(now(), &buf[..n]);
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::ConnectionRefused) => break,
                Err(e) => return Err(e),
            }
            if first {
                sock.set_nonblocking(true)?;
                first = false;
            }
            out.clear();
            r.drain_transmit(&mut out);
            for (m, p) in &out {
                if let Some(a) = mappers.get(*m) {
                    send(&sock, p, *a)?;
                }
            }
        }
        if !first {
            sock.set_nonblocking(false)?;
        }
        r.on_timer(now());
        out.clear();
        r.drain_transmit(&mut out);
        for (m, p) in &out {
            if let Some(a) = mappers.get(*m) {
                send(&sock, p, *a)?;
            }
        }
        if r.is_complete() && done_at.is_none() {
            done_at = Some(Instant::now());
        }
    }
    let elapsed = done_at.map_or(start.elapsed(), |d| d.duration_since(start));
    Ok(ReduceRun { completed: r.is_complete(), stats: r.stats.clone(), result: r.take_result(), elapsed })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hostlib::aggregation::Mode;
    use wire::daiet::Op;

    /// Two mappers and a reducer on loopback, no switch: udp mode is exact; switch mode
    /// falls back and is exact too.
    #[test]
    fn loopback_udp_and_fallback() {
        for (mode, base) in [(Mode::Udp, 47100u16), (Mode::Switch, 47200)] {
            let words: Vec<Vec<String>> =
                (0..2).map(|m| (0..2000).map(|i| format!("w{}", (i * 7 + m * 3) % 150)).chain(["x".repeat(40)]).collect()).collect();
            let mut reference: HashMap<Vec<u8>, u64> = HashMap::new();
            for w in words.iter().flatten() {
                *reference.entry(w.as_bytes().to_vec()).or_default() += 1;
            }
            let red_addr: SocketAddr = format!("127.0.0.1:{base}").parse().unwrap();
            let maps: Vec<SocketAddr> = (1..=2).map(|i| format!("127.0.0.1:{}", base + i).parse().unwrap()).collect();
            let mut rc = ReducerConfig::new(9, 2, Op::Sum, mode);
            rc.grace_ns = 50_000_000;
            let maps2 = maps.clone();
            let h = std::thread::spawn(move || run_reducer(rc, red_addr, &maps2, Duration::from_secs(20)).unwrap());
            let hs: Vec<_> = words
                .into_iter()
                .enumerate()
                .map(|(i, ws)| {
                    let bind = maps[i];
                    std::thread::spawn(move || {
                        let mut keys = Vec::new();
                        let mut offs = vec![0u64];
                        for w in &ws {
                            keys.extend_from_slice(w.as_bytes());
                            offs.push(keys.len() as u64);
                        }
                        let mut cfg = MapperConfig::new(i as u16, Op::Sum, mode);
                        cfg.stall_ns = 50_000_000;
                        let n = ws.len();
                        run_mapper(cfg, bind, &[red_addr], &[9], keys, offs, vec![1; n], vec![0; n], Duration::from_secs(20)).unwrap()
                    })
                })
                .collect();
            let runs: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
            let red = h.join().unwrap();
            assert!(red.completed);
            assert_eq!(red.result, reference);
            assert_eq!(red.stats.fallback, mode == Mode::Switch);
            assert!(runs.iter().all(|r| r.completed));
        }
    }
}
