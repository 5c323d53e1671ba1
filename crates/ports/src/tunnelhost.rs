//! A host on the switch without a kernel interface: [`hostlib::netstack::HostStack`]
//! driven over a UDP-tunnel port (the rack's no-root mode). A background thread receives
//! frames and answers ARP and pings; the application sends datagrams and pings and waits
//! for what arrives, from any thread.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hostlib::netstack::{Event, HostStack, SendError, StackStats};
use wire::ethernet::EthernetAddress;
use wire::ipv4::Ipv4Address;

use crate::sys::monotonic_ns;
use crate::udp::UdpTunnelHost;

/// A received UDP datagram: source address, source port, payload.
pub type Datagram = (Ipv4Address, u16, Vec<u8>);

/// Datagrams held per bound port before new ones are dropped.
pub const RX_QUEUE: usize = 65536;

struct Shared {
    sock: UdpTunnelHost,
    stack: Mutex<HostStack>,
    udp: Mutex<HashMap<u16, VecDeque<Datagram>>>,
    udp_cv: Condvar,
    echo: Mutex<Vec<(Ipv4Address, u16, u16, u64)>>,
    echo_cv: Condvar,
    stop: AtomicBool,
    rx_queue_drops: std::sync::atomic::AtomicU64,
}

impl Shared {
    /// Transmit what the stack queued (called with the stack locked by the caller).
    fn flush(&self, stack: &mut HostStack) -> io::Result<()> {
        while let Some(f) = stack.poll_transmit() {
            self.sock.send(&f)?;
        }
        Ok(())
    }

    fn dispatch(&self, stack: &mut HostStack) {
        while let Some(ev) = stack.poll_event() {
            match ev {
                Event::Udp { src, src_port, dst_port, payload } => {
                    let mut q = self.udp.lock().expect("udp lock");
                    let e = q.entry(dst_port).or_default();
                    if e.len() < RX_QUEUE {
                        e.push_back((src, src_port, payload));
                    } else {
                        self.rx_queue_drops.fetch_add(1, Ordering::Relaxed);
                    }
                    drop(q);
                    self.udp_cv.notify_all();
                }
                Event::EchoReply { src, ident, seq, at_ns } => {
                    self.echo.lock().expect("echo lock").push((src, ident, seq, at_ns));
                    self.echo_cv.notify_all();
                }
            }
        }
    }
}

/// A running tunnel host.
pub struct TunnelHost {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    next_ident: std::sync::atomic::AtomicU16,
}

fn to_io(e: SendError) -> io::Error {
    match e {
        SendError::TooLarge => io::Error::new(io::ErrorKind::InvalidInput, "datagram larger than one 1500-byte frame"),
        SendError::QueueFull => io::Error::new(io::ErrorKind::WouldBlock, "too many datagrams wait for ARP resolution"),
    }
}

impl TunnelHost {
    /// Attach a host with `mac` and `ip/prefix_len` to the switch port at `switch`, from
    /// `local` if given (a port with a fixed peer accepts only that address), else from an
    /// ephemeral port.
    pub fn start(
        switch: SocketAddrV4,
        local: Option<SocketAddrV4>,
        mac: EthernetAddress,
        ip: Ipv4Address,
        prefix_len: u8,
        gateway: Option<Ipv4Address>,
    ) -> io::Result<TunnelHost> {
        let sock = match local {
            Some(l) => UdpTunnelHost::connect_from(switch, l)?,
            None => UdpTunnelHost::connect(switch)?,
        };
        sock.register()?;
        let mut stack = HostStack::new(mac, ip, prefix_len);
        stack.set_gateway(gateway);
        let shared = Arc::new(Shared {
            sock,
            stack: Mutex::new(stack),
            udp: Mutex::new(HashMap::new()),
            udp_cv: Condvar::new(),
            echo: Mutex::new(Vec::new()),
            echo_cv: Condvar::new(),
            stop: AtomicBool::new(false),
            rx_queue_drops: Default::default(),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new().name(format!("host-{ip}")).spawn(move || {
            let mut buf = vec![0u8; 2048];
            while !s.stop.load(Ordering::Relaxed) {
                let got = s.sock.recv_timeout(&mut buf, Duration::from_millis(20));
                let now = monotonic_ns();
                let mut stack = s.stack.lock().expect("stack lock");
                if let Ok(Some(n)) = got {
                    stack.handle(now, &buf[..n]);
                    // Drain whatever else is already waiting before releasing the lock.
                    while let Ok(Some(n)) = s.sock.try_recv(&mut buf) {
                        stack.handle(now, &buf[..n]);
                    }
                }
                if stack.poll_timeout().is_some_and(|t| t <= now) {
                    stack.handle_timeout(now);
                }
                let _ = s.flush(&mut stack);
                s.dispatch(&mut stack);
            }
        })?;
        Ok(TunnelHost { shared, thread: Some(thread), next_ident: std::sync::atomic::AtomicU16::new(1) })
    }

    /// A permanent neighbour entry (see [`HostStack::set_static_neighbor`]), e.g. the
    /// gateway's MAC when the switch answers no ARP for it.
    pub fn set_static_neighbor(&self, ip: Ipv4Address, mac: EthernetAddress) {
        let mut stack = self.shared.stack.lock().expect("stack lock");
        stack.set_static_neighbor(ip, mac);
        let _ = self.shared.flush(&mut stack);
    }

    /// Accept datagrams to `port`.
    pub fn bind_udp(&self, port: u16) {
        self.shared.stack.lock().expect("stack lock").bind_udp(port);
    }

    /// Send a UDP datagram (queued behind ARP resolution if needed).
    pub fn send_udp(&self, dst: Ipv4Address, src_port: u16, dst_port: u16, payload: &[u8]) -> io::Result<()> {
        let mut stack = self.shared.stack.lock().expect("stack lock");
        stack.send_udp(dst, src_port, dst_port, payload, monotonic_ns()).map_err(to_io)?;
        self.shared.flush(&mut stack)
    }

    /// Datagrams that arrived on `port`: waits up to `timeout` for the first, returns at most `max`.
    pub fn recv_udp(&self, port: u16, timeout: Duration, max: usize) -> Vec<Datagram> {
        let deadline = Instant::now() + timeout;
        let mut q = self.shared.udp.lock().expect("udp lock");
        loop {
            if let Some(v) = q.get_mut(&port).filter(|v| !v.is_empty()) {
                let n = v.len().min(max);
                return v.drain(..n).collect();
            }
            let now = Instant::now();
            if now >= deadline {
                return Vec::new();
            }
            q = self.shared.udp_cv.wait_timeout(q, deadline - now).expect("udp lock").0;
        }
    }

    /// Ping `dst` `count` times, `interval` apart, each waiting up to `timeout`: round-trip
    /// times in seconds, None for each lost one.
    pub fn ping(&self, dst: Ipv4Address, count: u16, timeout: Duration, interval: Duration) -> io::Result<Vec<Option<f64>>> {
        let ident = self.next_ident.fetch_add(1, Ordering::Relaxed);
        let mut out = Vec::new();
        for seq in 0..count {
            let sent = monotonic_ns();
            {
                let mut stack = self.shared.stack.lock().expect("stack lock");
                stack.send_ping(dst, ident, seq, b"inswitch-ping", sent).map_err(to_io)?;
                self.shared.flush(&mut stack)?;
            }
            let deadline = Instant::now() + timeout;
            let mut got = None;
            let mut e = self.shared.echo.lock().expect("echo lock");
            loop {
                if let Some(i) = e.iter().position(|r| r.0 == dst && r.1 == ident && r.2 == seq) {
                    let r = e.swap_remove(i);
                    got = Some(r.3.saturating_sub(sent) as f64 / 1e9);
                    break;
                }
                let now = Instant::now();
                if now >= deadline {
                    break;
                }
                e = self.shared.echo_cv.wait_timeout(e, deadline - now).expect("echo lock").0;
            }
            drop(e);
            out.push(got);
            if seq + 1 < count {
                std::thread::sleep(interval);
            }
        }
        Ok(out)
    }

    /// The stack's counters.
    pub fn stats(&self) -> StackStats {
        self.shared.stack.lock().expect("stack lock").stats().clone()
    }

    /// Datagrams dropped because the application did not collect them.
    pub fn rx_queue_drops(&self) -> u64 {
        self.shared.rx_queue_drops.load(Ordering::Relaxed)
    }

    /// Stop the receive thread.
    pub fn close(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for TunnelHost {
    fn drop(&mut self) {
        self.close();
    }
}
