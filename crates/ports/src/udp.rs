//! UDP tunnel: each switch port is a UDP socket (by default on loopback, port `BASEPORT + i`),
//! and each datagram carries exactly one Ethernet frame. Needs no privileges, so it is how
//! processes on an ordinary machine attach to the switch.
//!
//! A port given a fixed peer (what the rack does: it assigns every host its tunnel address)
//! sends only there and drops datagrams from any other source, counted as `rx_foreign`: a
//! learning port could be taken over by any local process that sends it one datagram.
//!
//! Without a fixed peer the port learns it (the attached "host NIC") from the source address
//! of the most recent datagram it received, the way a learning bridge would; until then it
//! cannot transmit and counts `tx_no_peer`. A host that wants to receive before it sends can
//! announce itself with an empty datagram ([`UdpTunnelHost::register`]), which the port uses
//! for learning only. Both directions move a batch with one `recvmmsg`/`sendmmsg` system call.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pisa::packet::{BufPool, PacketBuf, PortId};

use crate::port::Port;
use crate::stats::PortStats;
use crate::sys::{self, cvt, errno, from_sockaddr_in, grow_sock_buf, is_would_block, monotonic_ns, poll_readable};

/// Default frames per `recvmmsg`/`sendmmsg` call.
pub const DEFAULT_UDP_BATCH: usize = 64;
/// Default socket buffer size requested for each direction.
pub const DEFAULT_SOCK_BUF: usize = 4 << 20;

/// How to set up a [`UdpPort`].
#[derive(Debug, Clone)]
pub struct UdpConfig {
    /// Address the port's socket binds to.
    pub bind: SocketAddrV4,
    /// A fixed peer; `None` learns it from received datagrams.
    pub peer: Option<SocketAddrV4>,
    /// Most frames moved by one system call.
    pub batch: usize,
    /// Socket receive and send buffer size in bytes.
    pub sock_buf: usize,
}

impl UdpConfig {
    /// Defaults for a port bound to `bind` that learns its peer.
    pub fn new(bind: SocketAddrV4) -> Self {
        UdpConfig { bind, peer: None, batch: DEFAULT_UDP_BATCH, sock_buf: DEFAULT_SOCK_BUF }
    }
}

/// Preallocated `mmsghdr`s and `iovec`s for one direction, so a batch costs no allocation.
/// The `mmsghdr`s point into `iov` and `addrs`, heap arrays never resized after creation.
struct MsgVec {
    msgs: Vec<libc::mmsghdr>,
    iov: Vec<libc::iovec>,
    addrs: Vec<libc::sockaddr_in>,
}

impl MsgVec {
    fn new(n: usize) -> Self {
        // SAFETY: mmsghdr, iovec and sockaddr_in are plain C structs for which all-zero is valid.
        let zero_msg: libc::mmsghdr = unsafe { zeroed() };
        let zero_iov: libc::iovec = unsafe { zeroed() };
        let zero_sa: libc::sockaddr_in = unsafe { zeroed() };
        let mut v = MsgVec { msgs: vec![zero_msg; n], iov: vec![zero_iov; n], addrs: vec![zero_sa; n] };
        for i in 0..n {
            let h = &mut v.msgs[i].msg_hdr;
            h.msg_iov = &mut v.iov[i];
            h.msg_iovlen = 1;
            h.msg_name = &mut v.addrs[i] as *mut libc::sockaddr_in as *mut libc::c_void;
            h.msg_namelen = size_of::<libc::sockaddr_in>() as libc::socklen_t;
        }
        v
    }
}

/// A switch port that is a UDP socket.
pub struct UdpPort {
    id: PortId,
    name: String,
    fd: OwnedFd,
    local: SocketAddrV4,
    peer: Option<libc::sockaddr_in>,
    fixed_peer: bool,
    batch: usize,
    /// Buffers waiting to receive into, one per message slot (refilled from the pool).
    rx_bufs: Vec<PacketBuf>,
    rx: MsgVec,
    tx: MsgVec,
    stats: Arc<PortStats>,
}

// SAFETY: the raw pointers inside the MsgVecs point only into heap memory owned by this
// struct (its own Vecs and PacketBufs), so moving the whole struct to another thread is sound.
unsafe impl Send for UdpPort {}

impl UdpPort {
    /// Open switch port `id` as a UDP socket configured by `cfg`.
    pub fn open(id: PortId, cfg: &UdpConfig) -> io::Result<Self> {
        let sock = UdpSocket::bind(cfg.bind)?;
        sock.set_nonblocking(true)?;
        let fd: OwnedFd = sock.into();
        grow_sock_buf(fd.as_raw_fd(), true, cfg.sock_buf);
        grow_sock_buf(fd.as_raw_fd(), false, cfg.sock_buf);
        let local = local_addr_v4(fd.as_raw_fd())?;
        let batch = cfg.batch.max(1);
        Ok(UdpPort {
            id,
            name: format!("udp:{local}"),
            fd,
            local,
            peer: cfg.peer.map(sys::sockaddr_in),
            fixed_peer: cfg.peer.is_some(),
            batch,
            rx_bufs: Vec::with_capacity(batch),
            rx: MsgVec::new(batch),
            tx: MsgVec::new(batch),
            stats: Arc::new(PortStats::default()),
        })
    }

    /// Open switch port `id` bound to `127.0.0.1:(base + id)`, learning its peer.
    pub fn loopback(id: PortId, base: u16) -> io::Result<Self> {
        let port = base.checked_add(id).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "UDP port number above 65535"))?;
        Self::open(id, &UdpConfig::new(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)))
    }

    /// The address the port's socket is bound to (what a host connects to).
    pub fn local_addr(&self) -> SocketAddrV4 {
        self.local
    }

    /// The current peer (fixed, or learned from the latest datagram), if any.
    pub fn peer(&self) -> Option<SocketAddrV4> {
        self.peer.as_ref().map(from_sockaddr_in)
    }

    /// Send frames `pkts[start..end]` (at most `batch`), returning (sent, bytes sent).
    fn send_chunk(&mut self, pkts: &[PacketBuf], peer: &libc::sockaddr_in) -> (u64, u64) {
        let k = pkts.len();
        for (i, p) in pkts.iter().enumerate() {
            self.tx.iov[i] = libc::iovec { iov_base: p.data().as_ptr() as *mut libc::c_void, iov_len: p.len() };
            let h = &mut self.tx.msgs[i].msg_hdr;
            h.msg_name = peer as *const libc::sockaddr_in as *mut libc::c_void;
            h.msg_namelen = size_of::<libc::sockaddr_in>() as libc::socklen_t;
        }
        // SAFETY: msgs[..k] are initialised mmsghdrs whose iovecs point at the live frames in
        // `pkts` and whose names point at `peer`, all valid for this call.
        unsafe { sys::sendmmsg_counting(self.fd.as_raw_fd(), &mut self.tx.msgs[..k], |i| pkts[i].len() as u64, &self.stats, &[]) }
    }
}

impl Port for UdpPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn id(&self) -> PortId {
        self.id
    }

    fn recv_batch(&mut self, pool: &mut BufPool, out: &mut Vec<PacketBuf>, max: usize) -> usize {
        let n = max.min(self.batch);
        if n == 0 {
            return 0;
        }
        while self.rx_bufs.len() < n {
            self.rx_bufs.push(pool.get());
        }
        for i in 0..n {
            let b = self.rx_bufs[i].raw_mut();
            self.rx.iov[i] = libc::iovec { iov_base: b.as_mut_ptr() as *mut libc::c_void, iov_len: b.len() };
            let h = &mut self.rx.msgs[i].msg_hdr;
            h.msg_namelen = size_of::<libc::sockaddr_in>() as libc::socklen_t;
            h.msg_flags = 0;
        }
        // SAFETY: msgs[0..n] point at n iovecs, each covering the whole of a buffer we own, and
        // at n sockaddr_in slots; the kernel writes only within those.
        let r = unsafe {
            libc::recvmmsg(self.fd.as_raw_fd(), self.rx.msgs.as_mut_ptr(), n as libc::c_uint, libc::MSG_DONTWAIT, std::ptr::null_mut())
        };
        if r <= 0 {
            if r < 0 && !is_would_block(errno()) && errno() != libc::EINTR {
                PortStats::count(&self.stats.rx_error, 1);
            }
            return 0;
        }
        let ts = monotonic_ns();
        let cap = pool.buf_capacity();
        let (mut got, mut bytes, mut oversize, mut foreign) = (0usize, 0u64, 0u64, 0u64);
        let mut learned = None;
        for i in 0..r as usize {
            let m = &self.rx.msgs[i];
            let len = m.msg_len as usize;
            let named = m.msg_hdr.msg_namelen as usize >= size_of::<libc::sockaddr_in>();
            if self.fixed_peer {
                if !(named && self.peer.as_ref().is_some_and(|p| same_addr(p, &self.rx.addrs[i]))) {
                    foreign += 1;
                    continue;
                }
            } else if named {
                learned = Some(i);
            }
            if m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 || len > cap {
                oversize += 1;
                continue;
            }
            if len == 0 {
                // An empty datagram announces the host; it carries no frame.
                continue;
            }
            let mut b = std::mem::replace(&mut self.rx_bufs[i], pool.get());
            b.set_len(len);
            b.port = self.id;
            b.ts_ns = ts;
            bytes += len as u64;
            out.push(b);
            got += 1;
        }
        if let Some(i) = learned {
            let sa = self.rx.addrs[i];
            if sa.sin_family == libc::AF_INET as libc::sa_family_t {
                self.peer = Some(sa);
            }
        }
        self.stats.add_rx(got as u64, bytes);
        PortStats::count(&self.stats.rx_oversize, oversize);
        PortStats::count(&self.stats.rx_foreign, foreign);
        got
    }

    fn send_batch(&mut self, pkts: &mut Vec<PacketBuf>, pool: &mut BufPool) -> usize {
        let Some(peer) = self.peer else {
            PortStats::count(&self.stats.tx_no_peer, pkts.len() as u64);
            pkts.drain(..).for_each(|p| pool.put(p));
            return 0;
        };
        let (mut sent, mut bytes) = (0u64, 0u64);
        let mut start = 0;
        while start < pkts.len() {
            let end = (start + self.batch).min(pkts.len());
            let (s, b) = self.send_chunk(&pkts[start..end], &peer);
            sent += s;
            bytes += b;
            start = end;
        }
        pkts.drain(..).for_each(|p| pool.put(p));
        self.stats.add_tx(sent, bytes);
        sent as usize
    }

    fn poll_fd(&self) -> Option<RawFd> {
        Some(self.fd.as_raw_fd())
    }

    fn stats(&self) -> Arc<PortStats> {
        self.stats.clone()
    }
}

fn same_addr(a: &libc::sockaddr_in, b: &libc::sockaddr_in) -> bool {
    a.sin_family == b.sin_family && a.sin_port == b.sin_port && a.sin_addr.s_addr == b.sin_addr.s_addr
}

fn local_addr_v4(fd: RawFd) -> io::Result<SocketAddrV4> {
    // SAFETY: all-zero is a valid sockaddr_in.
    let mut sa: libc::sockaddr_in = unsafe { zeroed() };
    let mut len = size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: `sa` has room for `len` bytes, and getsockname writes at most that many.
    cvt(unsafe { libc::getsockname(fd, &mut sa as *mut _ as *mut libc::sockaddr, &mut len) })?;
    Ok(from_sockaddr_in(&sa))
}

/// The host side of a UDP tunnel port: a "host NIC" that sends and receives Ethernet frames to
/// and from one switch port. Used by tests and by the Python host processes.
pub struct UdpTunnelHost {
    sock: UdpSocket,
    switch: SocketAddrV4,
}

impl UdpTunnelHost {
    /// Attach to the switch port listening at `switch`, from an ephemeral port on the same
    /// address (or on all addresses if `switch` is not a loopback address).
    pub fn connect(switch: SocketAddrV4) -> io::Result<Self> {
        let ip = if switch.ip().is_loopback() { *switch.ip() } else { Ipv4Addr::UNSPECIFIED };
        Self::connect_from(switch, SocketAddrV4::new(ip, 0))
    }

    /// Attach to the switch port at `switch` from `local`: the address a port with a fixed
    /// peer expects its host at (the only source it accepts).
    pub fn connect_from(switch: SocketAddrV4, local: SocketAddrV4) -> io::Result<Self> {
        let sock = UdpSocket::bind(local)?;
        sock.connect(switch)?;
        sock.set_nonblocking(true)?;
        grow_sock_buf(sock.as_raw_fd(), true, DEFAULT_SOCK_BUF);
        grow_sock_buf(sock.as_raw_fd(), false, DEFAULT_SOCK_BUF);
        Ok(UdpTunnelHost { sock, switch })
    }

    /// Tell the switch port our address without sending a frame (an empty datagram), so it can
    /// send to us before we send anything.
    pub fn register(&self) -> io::Result<()> {
        self.send_raw(&[])
    }

    fn send_raw(&self, bytes: &[u8]) -> io::Result<()> {
        loop {
            match self.sock.send(bytes) {
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    poll_writable(self.sock.as_raw_fd())?;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Send one frame to the switch (waits if the socket buffer is full). An empty frame is
    /// refused: on the tunnel it means "register".
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        if frame.is_empty() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty frame"));
        }
        self.send_raw(frame)
    }

    /// Send several frames with `sendmmsg` (waits while the socket buffer is full). Returns the
    /// number sent, which is all of them unless an error occurs part-way.
    pub fn send_batch(&self, frames: &[&[u8]]) -> io::Result<usize> {
        let mut done = 0;
        // SAFETY: all-zero is a valid mmsghdr/iovec; pointers are filled in below.
        let mut iov: Vec<libc::iovec> = vec![unsafe { zeroed() }; frames.len().min(DEFAULT_UDP_BATCH)];
        let mut msgs: Vec<libc::mmsghdr> = vec![unsafe { zeroed() }; iov.len()];
        while done < frames.len() {
            let k = (frames.len() - done).min(iov.len());
            for i in 0..k {
                let f = frames[done + i];
                iov[i] = libc::iovec { iov_base: f.as_ptr() as *mut libc::c_void, iov_len: f.len() };
                msgs[i].msg_hdr.msg_iov = &mut iov[i];
                msgs[i].msg_hdr.msg_iovlen = 1;
            }
            // SAFETY: msgs[0..k] point at k iovecs over frames borrowed for this call; the
            // socket is connected, so no address is needed.
            let r = unsafe { libc::sendmmsg(self.sock.as_raw_fd(), msgs.as_mut_ptr(), k as libc::c_uint, libc::MSG_DONTWAIT) };
            if r > 0 {
                done += r as usize;
            } else {
                let e = errno();
                if is_would_block(e) {
                    poll_writable(self.sock.as_raw_fd())?;
                } else if e != libc::EINTR {
                    if done > 0 {
                        return Ok(done);
                    }
                    return Err(io::Error::from_raw_os_error(e));
                }
            }
        }
        Ok(done)
    }

    /// Receive one frame into `buf` if one is waiting now. Returns its length (truncated to
    /// `buf.len()` if longer).
    pub fn try_recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        loop {
            match self.sock.recv(buf) {
                Ok(n) => return Ok(Some(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Receive one frame into `buf`, waiting up to `timeout`. `Ok(None)` on timeout.
    pub fn recv_timeout(&self, buf: &mut [u8], timeout: Duration) -> io::Result<Option<usize>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(n) = self.try_recv(buf)? {
                return Ok(Some(n));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || !poll_readable(self.sock.as_raw_fd(), Some(left))? {
                return self.try_recv(buf);
            }
        }
    }

    /// Receive one frame as a new `Vec`, waiting up to `timeout`.
    pub fn recv_frame(&self, timeout: Duration) -> io::Result<Option<Vec<u8>>> {
        let mut buf = vec![0u8; 65536];
        Ok(self.recv_timeout(&mut buf, timeout)?.map(|n| {
            buf.truncate(n);
            buf
        }))
    }

    /// Receive frames until `n` have arrived or no frame arrives for `idle`.
    pub fn recv_frames(&self, n: usize, idle: Duration) -> io::Result<Vec<Vec<u8>>> {
        let mut out = Vec::with_capacity(n);
        let mut buf = vec![0u8; 65536];
        while out.len() < n {
            match self.recv_timeout(&mut buf, idle)? {
                Some(len) => out.push(buf[..len].to_vec()),
                None => break,
            }
        }
        Ok(out)
    }

    /// Our own address (what the switch port learns as its peer).
    pub fn local_addr(&self) -> io::Result<SocketAddrV4> {
        local_addr_v4(self.sock.as_raw_fd())
    }

    /// The switch port's address.
    pub fn switch_addr(&self) -> SocketAddrV4 {
        self.switch
    }
}

impl AsRawFd for UdpTunnelHost {
    fn as_raw_fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }
}

fn poll_writable(fd: RawFd) -> io::Result<()> {
    let mut pfd = libc::pollfd { fd, events: libc::POLLOUT, revents: 0 };
    // SAFETY: one valid pollfd, count 1. A short wait is enough: we retry the send anyway.
    let r = unsafe { libc::poll(&mut pfd, 1, 10) };
    if r < 0 && errno() != libc::EINTR {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pisa::packet::DEFAULT_BUF_CAPACITY;

    fn frame(i: u32, len: usize) -> Vec<u8> {
        let mut f: Vec<u8> = (0..len).map(|k| (k * 7 + i as usize) as u8).collect();
        f[..4].copy_from_slice(&i.to_be_bytes());
        f
    }

    fn ephemeral_port(id: PortId) -> UdpPort {
        UdpPort::open(id, &UdpConfig::new(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0))).unwrap()
    }

    fn recv_n(port: &mut UdpPort, pool: &mut BufPool, n: usize) -> Vec<PacketBuf> {
        let mut out = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        while out.len() < n && Instant::now() < deadline {
            if port.recv_batch(pool, &mut out, 64) == 0 {
                poll_readable(port.poll_fd().unwrap(), Some(Duration::from_millis(50))).unwrap();
            }
        }
        out
    }

    #[test]
    fn no_peer_until_learned_then_round_trip() {
        let mut port = ephemeral_port(5);
        let mut pool = BufPool::new(DEFAULT_BUF_CAPACITY, 64);
        // Nobody has talked to the port yet: transmissions are dropped as tx_no_peer.
        let mut v = vec![PacketBuf::from_slice(&frame(0, 60), 5), PacketBuf::from_slice(&frame(1, 60), 5)];
        assert_eq!(port.send_batch(&mut v, &mut pool), 0);
        assert!(v.is_empty());
        assert_eq!(port.stats().snapshot().tx_no_peer, 2);

        let host = UdpTunnelHost::connect(port.local_addr()).unwrap();
        host.send(&frame(7, 1514)).unwrap();
        let got = recv_n(&mut port, &mut pool, 1);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].data(), &frame(7, 1514)[..]);
        assert_eq!(got[0].port, 5);
        assert_eq!(port.peer(), Some(host.local_addr().unwrap()));

        let mut v = got;
        assert_eq!(port.send_batch(&mut v, &mut pool), 1);
        assert_eq!(host.recv_frame(Duration::from_secs(2)).unwrap().unwrap(), frame(7, 1514));
    }

    #[test]
    fn batch_of_1000_frames_intact_both_ways() {
        let mut port = ephemeral_port(1);
        let mut pool = BufPool::new(DEFAULT_BUF_CAPACITY, 128);
        let host = UdpTunnelHost::connect(port.local_addr()).unwrap();
        let frames: Vec<Vec<u8>> = (0..1000).map(|i| frame(i, 60 + (i as usize % 1400))).collect();
        let refs: Vec<&[u8]> = frames.iter().map(|f| &f[..]).collect();
        assert_eq!(host.send_batch(&refs).unwrap(), 1000);
        let mut got = recv_n(&mut port, &mut pool, 1000);
        assert_eq!(got.len(), 1000);
        for (g, f) in got.iter().zip(&frames) {
            assert_eq!(g.data(), &f[..]);
        }
        assert_eq!(port.stats().snapshot().rx_packets, 1000);
        // Send them back in one call; the host must see all 1000 in order.
        assert_eq!(port.send_batch(&mut got, &mut pool), 1000);
        let back = host.recv_frames(1000, Duration::from_secs(2)).unwrap();
        assert_eq!(back.len(), 1000);
        assert_eq!(back, frames);
        let s = port.stats().snapshot();
        assert_eq!((s.tx_packets, s.total_drops()), (1000, 0));
    }

    #[test]
    fn peer_follows_latest_sender_and_register_learns_without_a_frame() {
        let mut port = ephemeral_port(2);
        let mut pool = BufPool::new(DEFAULT_BUF_CAPACITY, 8);
        let a = UdpTunnelHost::connect(port.local_addr()).unwrap();
        let b = UdpTunnelHost::connect(port.local_addr()).unwrap();
        a.register().unwrap();
        let mut out = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(2);
        while port.peer().is_none() && Instant::now() < deadline {
            port.recv_batch(&mut pool, &mut out, 8);
        }
        assert!(out.is_empty(), "registration is not a frame");
        assert_eq!(port.peer(), Some(a.local_addr().unwrap()));
        b.send(&frame(1, 64)).unwrap();
        let got = recv_n(&mut port, &mut pool, 1);
        assert_eq!(got.len(), 1);
        assert_eq!(port.peer(), Some(b.local_addr().unwrap()));
    }

    #[test]
    fn oversize_datagram_is_dropped_and_counted() {
        let mut port = ephemeral_port(0);
        let mut pool = BufPool::new(256, 8);
        let host = UdpTunnelHost::connect(port.local_addr()).unwrap();
        host.send(&frame(0, 1000)).unwrap();
        host.send(&frame(1, 100)).unwrap();
        let got = recv_n(&mut port, &mut pool, 1);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].data(), &frame(1, 100)[..]);
        assert_eq!(port.stats().snapshot().rx_oversize, 1);
    }

    #[test]
    fn fixed_peer_refuses_and_counts_other_senders() {
        let probe = UdpSocket::bind("127.0.0.1:0").unwrap();
        let host_addr = match probe.local_addr().unwrap() {
            std::net::SocketAddr::V4(a) => a,
            _ => unreachable!(),
        };
        drop(probe);
        let mut cfg = UdpConfig::new(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0));
        cfg.peer = Some(host_addr);
        let mut port = UdpPort::open(3, &cfg).unwrap();
        let mut pool = BufPool::new(DEFAULT_BUF_CAPACITY, 8);
        let host = UdpTunnelHost::connect_from(port.local_addr(), host_addr).unwrap();
        let thief = UdpTunnelHost::connect(port.local_addr()).unwrap();
        thief.send(&frame(9, 64)).unwrap();
        thief.register().unwrap();
        host.send(&frame(1, 64)).unwrap();
        let got = recv_n(&mut port, &mut pool, 1);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].data(), &frame(1, 64)[..]);
        assert_eq!(port.peer(), Some(host_addr), "the peer never moves");
        let deadline = Instant::now() + Duration::from_secs(2);
        while port.stats().snapshot().rx_foreign < 2 && Instant::now() < deadline {
            port.recv_batch(&mut pool, &mut Vec::new(), 8);
        }
        assert_eq!(port.stats().snapshot().rx_foreign, 2);
        assert_eq!(port.stats().snapshot().rx_packets, 1);
        let mut v = got;
        assert_eq!(port.send_batch(&mut v, &mut pool), 1);
        assert_eq!(host.recv_frame(Duration::from_secs(2)).unwrap().unwrap(), frame(1, 64));
        assert_eq!(thief.recv_frame(Duration::from_millis(200)).unwrap(), None);
    }

    #[test]
    fn fixed_peer_sends_without_learning() {
        let host_sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let host_addr = match host_sock.local_addr().unwrap() {
            std::net::SocketAddr::V4(a) => a,
            _ => unreachable!(),
        };
        let mut cfg = UdpConfig::new(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0));
        cfg.peer = Some(host_addr);
        let mut port = UdpPort::open(0, &cfg).unwrap();
        let mut pool = BufPool::new(DEFAULT_BUF_CAPACITY, 8);
        let mut v = vec![PacketBuf::from_slice(&frame(3, 64), 0)];
        assert_eq!(port.send_batch(&mut v, &mut pool), 1);
        host_sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut buf = [0u8; 2048];
        let n = host_sock.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], &frame(3, 64)[..]);
    }
}
