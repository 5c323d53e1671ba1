//! The I/O loop around the sans-IO Hare load generator (`hostlib::hare::loadgen`): one
//! UDP socket, the monotonic clock (the one every namespace shares, so samples line up
//! with other processes' stamps), bounded in time.

use std::io::{self, ErrorKind};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

use hostlib::hare::loadgen::KvLoad;

use crate::sys::{monotonic_ns, poll_readable};

/// How a run ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadRun {
    /// When issuing started (monotonic ns).
    pub start_ns: u64,
    /// When issuing stopped.
    pub stop_ns: u64,
    /// When the loop returned (the drain ended).
    pub end_ns: u64,
    /// Requests still in flight when the drain gave up.
    pub unfinished: u64,
    /// Datagrams the socket refused to send (full buffer, unreachable): lost to the protocol.
    pub send_failures: u64,
}

/// A client socket bound to `addr`, with the large buffers a window of replies needs.
pub fn bind(addr: SocketAddr) -> io::Result<UdpSocket> {
    let s = UdpSocket::bind(addr)?;
    crate::aggregation::grow_buffers(&s);
    Ok(s)
}

/// Drive `load` from `start_ns` (monotonic; waits until then) for `duration`, then stop
/// issuing and wait up to `drain` for what is in flight. `dests[i]` is server `i`.
pub fn run_kv_load(
    sock: &UdpSocket,
    dests: &[SocketAddr],
    load: &mut KvLoad,
    start_ns: u64,
    duration: Duration,
    drain: Duration,
) -> io::Result<LoadRun> {
    sock.set_nonblocking(true)?;
    let now0 = monotonic_ns();
    if start_ns > now0 {
        std::thread::sleep(Duration::from_nanos(start_ns - now0));
    }
    let start = monotonic_ns();
    let stop_at = start + duration.as_nanos() as u64;
    let mut run = LoadRun { start_ns: start, ..LoadRun::default() };
    let mut drain_end = u64::MAX;
    let mut buf = vec![0u8; 2048];
    loop {
        let now = monotonic_ns();
        if run.stop_ns == 0 && now >= stop_at {
            load.stop();
            run.stop_ns = now;
            drain_end = now + drain.as_nanos() as u64;
        }
        if load.is_idle() || now >= drain_end {
            break;
        }
        load.handle_timeout(now);
        while let Some((server, payload)) = load.poll_transmit(now) {
            let to = dests[server as usize];
            match sock.send_to(payload, to) {
                Ok(_) => {}
                Err(e)
                    if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::ConnectionRefused)
                        || e.raw_os_error() == Some(libc::ENOBUFS) =>
                {
                    run.send_failures += 1; // the timeout retransmits it
                }
                Err(e) => return Err(e),
            }
        }
        // Everything that has arrived, then wait for more or the next deadline.
        let mut got = 0;
        loop {
            match sock.recv_from(&mut buf) {
                Ok((n, _)) => {
                    load.handle(monotonic_ns(), &buf[..n]);
                    got += 1;
                    if got >= 64 {
                        break; // send what the replies freed before reading on
                    }
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::ConnectionRefused) => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        if got == 0 {
            let now = monotonic_ns();
            let until = load.poll_timeout().unwrap_or(u64::MAX).min(if run.stop_ns == 0 { stop_at } else { drain_end });
            if until > now {
                poll_readable(sock.as_raw_fd(), Some(Duration::from_nanos((until - now).min(100_000_000))))?;
            }
        }
    }
    run.end_ns = monotonic_ns();
    if run.stop_ns == 0 {
        run.stop_ns = run.end_ns;
    }
    run.unfinished = load.in_flight() as u64;
    load.abandon_in_flight(); // their PUTs may or may not have landed: the history says so
    Ok(run)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hostlib::hare::loadgen::{cell, KvOp, LoadConfig};
    use wire::hare::{Op, Packet, Repr, FLAG_HIT};

    /// A server on loopback answering GETs with `values[key]` (as a cell), dropping every
    /// `drop_every`-th request once, and answering key `wrong` with a wrong value.
    fn responder(values: Vec<(Vec<u8>, Vec<u8>)>, drop_every: u64, wrong: Option<Vec<u8>>) -> (SocketAddr, std::thread::JoinHandle<u64>) {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        s.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
        let addr = s.local_addr().unwrap();
        let h = std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            let mut n_req = 0u64;
            let mut dropped = std::collections::HashSet::new();
            while let Ok((n, from)) = s.recv_from(&mut buf) {
                let Ok(mut r) = Repr::parse(&Packet::new_checked(&buf[..n]).unwrap()) else { continue };
                n_req += 1;
                if drop_every > 0 && n_req.is_multiple_of(drop_every) && dropped.insert(r.seq) {
                    continue;
                }
                let v = values.iter().find(|(k, _)| *k == r.key).map(|(_, v)| v.clone()).unwrap();
                let v = if wrong.as_ref() == Some(&r.key) { b"WRONG".to_vec() } else { v };
                r.op = Op::GetReply;
                r.flags = FLAG_HIT;
                r.value = cell(Some(&v), 16);
                s.send_to(&r.to_bytes().unwrap(), from).unwrap();
            }
            n_req
        });
        (addr, h)
    }

    fn load(window: usize) -> KvLoad {
        let keys: Vec<Vec<u8>> = (0..8).map(|i| format!("key{i}").into_bytes()).collect();
        let init = (0..8).map(|i| Some(format!("val{i}").into_bytes())).collect();
        let stream = (0..100).map(|i| (KvOp::Get, (i * 7 % 8) as u32)).collect();
        let cfg = LoadConfig {
            window,
            key_field: 8,
            value_size: 16,
            field_size: 8,
            timeout_ns: 20_000_000,
            retries: 5,
            client: 1,
            seq_start: 9,
            sole_writer: true,
            history: true,
        };
        KvLoad::new(cfg, keys, vec![0; 8], init, stream).unwrap()
    }

    fn values() -> Vec<(Vec<u8>, Vec<u8>)> {
        (0..8).map(|i| (format!("key{i}").into_bytes(), format!("val{i}").into_bytes())).collect()
    }

    #[test]
    fn loopback_gets_with_loss_complete_and_check() {
        let (addr, h) = responder(values(), 7, None);
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut l = load(16);
        let r = run_kv_load(&sock, &[addr], &mut l, 0, Duration::from_millis(300), Duration::from_millis(500)).unwrap();
        drop(sock);
        h.join().unwrap();
        assert!(l.stats.completed > 100, "{:?}", l.stats);
        assert_eq!(l.stats.mismatches, 0);
        assert!(l.stats.retransmits > 0, "dropped requests were sent again: {:?}", l.stats);
        assert_eq!(l.stats.timeouts, 0);
        assert_eq!(r.unfinished, 0);
        assert!(l.samples.iter().all(|s| s.recv_ns >= s.send_ns && s.send_ns >= r.start_ns && s.hit));
    }

    #[test]
    fn loopback_wrong_value_is_counted() {
        let (addr, h) = responder(values(), 0, Some(b"key3".to_vec()));
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut l = load(4);
        run_kv_load(&sock, &[addr], &mut l, 0, Duration::from_millis(100), Duration::from_millis(500)).unwrap();
        drop(sock);
        h.join().unwrap();
        let k3 = l.samples.iter().filter(|s| s.key == 3).count() as u64;
        assert!(k3 > 0);
        assert_eq!(l.stats.mismatches, k3, "every reply for key3 was wrong, and only those");
    }
}
