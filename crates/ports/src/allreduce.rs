//! The I/O loop around the sans-IO allreduce worker (`hostlib::allreduce`): one UDP socket,
//! a monotonic clock, bounded in time.

use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use hostlib::allreduce::Worker;

use crate::aggregation::{grow_buffers, send, wait_for};

/// A worker and its socket: contributions go to `dest` (any address whose path crosses the
/// switch; the switch takes the packets by their UDP port).
pub struct WorkerSocket {
    /// The protocol.
    pub worker: Worker,
    sock: UdpSocket,
    dest: SocketAddr,
    start: Instant,
    buf: Vec<u8>,
}

impl WorkerSocket {
    /// Wrap a bound socket.
    pub fn new(worker: Worker, sock: UdpSocket, dest: SocketAddr) -> WorkerSocket {
        grow_buffers(&sock);
        WorkerSocket { worker, sock, dest, start: Instant::now(), buf: vec![0u8; 2048] }
    }

    fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// Aggregate float32 values (exponent round, then data); None if `timeout` passed first.
    pub fn allreduce_f32(&mut self, xs: &[f32], timeout: Duration) -> std::io::Result<Option<Vec<f32>>> {
        let now = self.now();
        self.worker.start_floats(now, xs);
        self.drive(timeout, |w| w.float_done())?;
        Ok(self.worker.take_floats())
    }

    /// Aggregate 32-bit integers (wrapping SUM); None on timeout.
    pub fn allreduce_i32(&mut self, xs: &[i32], timeout: Duration) -> std::io::Result<Option<Vec<i32>>> {
        let now = self.now();
        self.worker.start(now, xs, false);
        self.drive(timeout, |w| w.is_done())?;
        Ok(self.worker.is_done().then(|| self.worker.result()[..xs.len()].to_vec()))
    }

    fn drive(&mut self, timeout: Duration, done: impl Fn(&Worker) -> bool) -> std::io::Result<()> {
        let t0 = Instant::now();
        loop {
            while let Some(p) = self.worker.poll_transmit() {
                send(&self.sock, &p, self.dest)?;
            }
            if done(&self.worker) || t0.elapsed() >= timeout {
                return Ok(());
            }
            self.sock.set_read_timeout(Some(wait_for(self.worker.poll_timeout(), self.now())))?;
            // Take what has arrived; block only for the first.
            let mut first = true;
            loop {
                match self.sock.recv_from(&mut self.buf) {
                    Ok((n, _)) => {
                        let now = self.now();
                        let WorkerSocket { worker, buf, .. } = self;
                        worker.handle(now, &buf[..n]);
                    }
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::ConnectionRefused) => break,
                    Err(e) => return Err(e),
                }
                if first {
                    self.sock.set_nonblocking(true)?;
                    first = false;
                }
                // Send what the results released before draining more.
                while let Some(p) = self.worker.poll_transmit() {
                    send(&self.sock, &p, self.dest)?;
                }
            }
            if !first {
                self.sock.set_nonblocking(false)?;
            }
            let now = self.now();
            self.worker.handle_timeout(now);
        }
    }
}
