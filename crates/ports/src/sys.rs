//! Small wrappers over the libc calls the ports share: clocks, errno handling, eventfd, poll.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// Nanoseconds on `CLOCK_MONOTONIC`, the clock every port stamps received frames with.
///
/// Monotonic (not wall) time, because the data plane only compares and subtracts
/// timestamps, and because it is the same clock in every network namespace of the host,
/// so a sender and a receiver in different namespaces can compare their stamps.
#[inline]
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// Nanoseconds since the Unix epoch (`CLOCK_REALTIME`); used to put capture files on the
/// wall clock.
#[inline]
pub fn realtime_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

#[inline]
fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime only writes to it.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Turn a `-1` libc return into the current `errno` as an `io::Error`.
#[inline]
pub(crate) fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// The current `errno`.
#[inline]
pub(crate) fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Whether an errno means "try again later" (queue or buffer full), as opposed to a real error.
#[inline]
pub(crate) fn is_would_block(e: i32) -> bool {
    e == libc::EAGAIN || e == libc::EWOULDBLOCK || e == libc::ENOBUFS
}

/// Wait until `fd` is readable or `timeout` passes (`None` waits forever). True if readable.
pub(crate) fn poll_readable(fd: RawFd, timeout: Option<Duration>) -> io::Result<bool> {
    let ms = match timeout {
        None => -1,
        // Round up so a 100 µs timeout does not become a busy 0 ms poll.
        Some(t) => t.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32,
    };
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    loop {
        // SAFETY: `pfd` is one valid pollfd and we pass a count of 1.
        let r = unsafe { libc::poll(&mut pfd, 1, ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        return Ok(r > 0);
    }
}

/// A non-blocking eventfd used as a "frames may be waiting" doorbell.
#[derive(Debug)]
pub(crate) struct EventFd {
    fd: OwnedFd,
}

impl EventFd {
    pub(crate) fn new() -> io::Result<Self> {
        // SAFETY: eventfd takes no pointers; we check the result before wrapping it.
        let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        Ok(EventFd { fd: unsafe { OwnedFd::from_raw_fd(fd) } })
    }

    /// Make the fd readable.
    #[inline]
    pub(crate) fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64 to our own eventfd. A failure can only be
        // counter overflow (impossible at +1 per signal) and is harmless: the fd stays readable.
        unsafe { libc::write(self.fd.as_raw_fd(), &one as *const u64 as *const libc::c_void, 8) };
    }

    /// Make the fd not readable (reset the counter).
    #[inline]
    pub(crate) fn clear(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a valid u64; EAGAIN (already clear) is fine to ignore.
        unsafe { libc::read(self.fd.as_raw_fd(), &mut v as *mut u64 as *mut libc::c_void, 8) };
    }

    pub(crate) fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Set an integer socket option.
pub(crate) fn setsockopt_int(fd: RawFd, level: i32, name: i32, value: i32) -> io::Result<()> {
    setsockopt_raw(fd, level, name, &value)
}

/// Set a socket option from any plain-data value.
pub(crate) fn setsockopt_raw<T>(fd: RawFd, level: i32, name: i32, value: &T) -> io::Result<()> {
    // SAFETY: `value` points to `size_of::<T>()` readable bytes for the duration of the call.
    cvt(unsafe { libc::setsockopt(fd, level, name, value as *const T as *const libc::c_void, std::mem::size_of::<T>() as libc::socklen_t) })
        .map(|_| ())
}

/// Grow a socket buffer (`SO_RCVBUF`/`SO_SNDBUF`) to `bytes`, past `net.core.*mem_max` when we
/// are allowed to (root, via the `*FORCE` variants), so bursts of small frames are not dropped.
pub(crate) fn grow_sock_buf(fd: RawFd, rcv: bool, bytes: usize) {
    let bytes = bytes.min(i32::MAX as usize) as i32;
    let (force, plain) = if rcv { (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF) } else { (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF) };
    if setsockopt_int(fd, libc::SOL_SOCKET, force, bytes).is_err() {
        // Not privileged: the kernel caps this at the sysctl maximum, which is still better
        // than the default. Failure leaves the default, which only costs burst tolerance.
        let _ = setsockopt_int(fd, libc::SOL_SOCKET, plain, bytes);
    }
}

/// `sockaddr_in` for an IPv4 socket address.
pub(crate) fn sockaddr_in(addr: std::net::SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: addr.port().to_be(),
        sin_addr: libc::in_addr { s_addr: u32::from(*addr.ip()).to_be() },
        sin_zero: [0; 8],
    }
}

/// The IPv4 socket address in a `sockaddr_in`.
pub(crate) fn from_sockaddr_in(sa: &libc::sockaddr_in) -> std::net::SocketAddrV4 {
    std::net::SocketAddrV4::new(std::net::Ipv4Addr::from(u32::from_be(sa.sin_addr.s_addr)), u16::from_be(sa.sin_port))
}

/// Send `msgs` with `sendmmsg`, retrying after partial sends, and count what could not be
/// sent in `stats`: a full socket buffer drops the rest of the batch (`tx_full`); an errno
/// in `fatal` (the interface is gone) drops the rest as `tx_error`; any other error skips
/// just the one frame that caused it (`tx_error`). `frame_len(i)` is message `i`'s length.
/// Returns (frames sent, bytes sent).
///
/// # Safety
/// Every message in `msgs` must point at iovecs (and, if set, a name) valid for the call.
pub(crate) unsafe fn sendmmsg_counting(
    fd: RawFd,
    msgs: &mut [libc::mmsghdr],
    frame_len: impl Fn(usize) -> u64,
    stats: &crate::stats::PortStats,
    fatal: &[i32],
) -> (u64, u64) {
    use crate::stats::PortStats;
    let k = msgs.len();
    let (mut off, mut sent, mut bytes) = (0usize, 0u64, 0u64);
    while off < k {
        // SAFETY: the caller guarantees msgs[off..k] are valid for this call.
        let r = unsafe { libc::sendmmsg(fd, msgs.as_mut_ptr().add(off), (k - off) as libc::c_uint, libc::MSG_DONTWAIT) };
        if r > 0 {
            let r = r as usize;
            bytes += (off..off + r).map(&frame_len).sum::<u64>();
            sent += r as u64;
            off += r;
            continue;
        }
        let e = errno();
        if e == libc::EINTR {
            continue;
        }
        if is_would_block(e) {
            PortStats::count(&stats.tx_full, (k - off) as u64);
            break;
        }
        if fatal.contains(&e) {
            PortStats::count(&stats.tx_error, (k - off) as u64);
            break;
        }
        // This one frame is bad (EMSGSIZE, a pending ICMP error, ...): skip it.
        PortStats::count(&stats.tx_error, 1);
        off += 1;
    }
    (sent, bytes)
}
