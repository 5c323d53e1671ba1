//! Network-namespace fixtures for tests and benchmarks: a veth pair with one end in the root
//! namespace (where the switch opens an [`AfPacketPort`](crate::AfPacketPort)) and the other in
//! a fresh namespace standing in for a host. Needs root and the `ip` tool.
//!
//! The rack builder (Python) sets up real topologies; this exists so the crate can test and
//! measure itself without it.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::sys::cvt;

/// Whether this process can create namespaces and raw sockets (effective uid 0).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Run `ip ARGS...`, failing with its stderr if it exits non-zero.
pub fn ip(args: &[&str]) -> io::Result<()> {
    let out = Command::new("ip").args(args).output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim())))
    }
}

/// A namespace `ns` holding veth end `ns_if`, whose peer `root_if` is in the root namespace.
/// Both ends are up, with IPv6 off (so the kernel sends no neighbour discovery noise). Dropping
/// it deletes the pair and the namespace, also when a test panics.
#[derive(Debug)]
pub struct VethNs {
    /// Name of the network namespace (as in `ip netns`).
    pub ns: String,
    /// The veth end in the root namespace.
    pub root_if: String,
    /// The veth end inside the namespace.
    pub ns_if: String,
}

impl VethNs {
    /// Create a namespace and veth pair named from `tag` (at most 8 characters), the process id
    /// and a counter, so concurrent tests and left-overs of crashed runs never collide.
    pub fn create(tag: &str) -> io::Result<Self> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let base = format!("{}{}{}", &tag[..tag.len().min(4)], std::process::id() % 1_000_000, n);
        let me = VethNs { ns: format!("{base}ns"), root_if: format!("{base}a"), ns_if: format!("{base}b") };
        // From here on, Drop cleans up whatever part was made.
        ip(&["netns", "add", &me.ns])?;
        ip(&["link", "add", &me.root_if, "type", "veth", "peer", "name", &me.ns_if, "netns", &me.ns])?;
        let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{}/disable_ipv6", me.root_if), "1");
        ip(&["link", "set", &me.root_if, "up"])?;
        me.run_in_ns(|| {
            // /proc/sys/net shows the namespace of the thread that opens it.
            let _ = std::fs::write("/proc/sys/net/ipv6/conf/all/disable_ipv6", "1");
        })?;
        ip(&["-n", &me.ns, "link", "set", &me.ns_if, "up"])?;
        ip(&["-n", &me.ns, "link", "set", "lo", "up"])?;
        Ok(me)
    }

    /// Run `ip -n NS ARGS...` (e.g. to add an address or a neighbour entry).
    pub fn ip_in_ns(&self, args: &[&str]) -> io::Result<()> {
        let mut all = vec!["-n", self.ns.as_str()];
        all.extend_from_slice(args);
        ip(&all)
    }

    /// Run `f` on a new thread that has entered the namespace (sockets it opens live there),
    /// and wait for its result.
    pub fn run_in_ns<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> io::Result<T> {
        let h = self.spawn_in_ns(f)?;
        h.join().map_err(|_| io::Error::other("thread in namespace panicked"))
    }

    /// Start `f` on a new thread inside the namespace and return its handle.
    pub fn spawn_in_ns<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> io::Result<std::thread::JoinHandle<T>> {
        let nsfile = File::open(format!("/var/run/netns/{}", self.ns))?;
        Ok(std::thread::spawn(move || {
            // SAFETY: setns on a namespace fd we opened; it changes only this thread's network
            // namespace, which is what we want.
            cvt(unsafe { libc::setns(nsfile.as_raw_fd(), libc::CLONE_NEWNET) }).expect("setns");
            drop(nsfile);
            f()
        }))
    }

    /// MAC address of the namespace end.
    pub fn ns_mac(&self) -> io::Result<[u8; 6]> {
        let out = Command::new("ip").args(["-n", &self.ns, "-o", "link", "show", &self.ns_if]).output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let mac = text
            .split_whitespace()
            .skip_while(|w| *w != "link/ether")
            .nth(1)
            .ok_or_else(|| io::Error::other(format!("no MAC in {text:?}")))?;
        let mut m = [0u8; 6];
        for (i, part) in mac.split(':').enumerate().take(6) {
            m[i] = u8::from_str_radix(part, 16).map_err(io::Error::other)?;
        }
        Ok(m)
    }
}

impl Drop for VethNs {
    fn drop(&mut self) {
        // Deleting one end deletes the pair; deleting the namespace would too, but be explicit.
        let _ = ip(&["link", "del", &self.root_if]);
        let _ = ip(&["netns", "del", &self.ns]);
    }
}
