//! AF_XDP port on an existing interface (the switch end of a veth pair, or a NIC queue).
//! Needs root (`CAP_NET_ADMIN` + `CAP_BPF`/`CAP_SYS_ADMIN`).
//!
//! Each port owns a UMEM (one anonymous mapping cut into fixed-size chunks) and an XSK socket
//! with the four rings over it: the *fill* ring gives the kernel empty chunks to receive into,
//! the *rx* ring hands back filled ones, the *tx* ring takes chunks to send and the
//! *completion* ring returns them once sent. The first half of the chunks is the receive
//! side's (always on the fill ring or in the rx ring), the second half the transmit side's
//! (free list, tx ring or completion ring), so neither direction can starve the other.
//! Frames are copied between UMEM chunks and the data plane's pool buffers: the pipeline keeps
//! its buffers across stages and queues, and a copy of a frame costs less than the ring work.
//!
//! The kernel only puts frames on an XSK socket when an XDP program redirects them there; the
//! port loads a five-instruction program (`bpf_redirect_map(&xsks, rx_queue_index, XDP_PASS)`)
//! and attaches it with a BPF *link*. A link lives exactly as long as the file descriptors
//! that refer to it, so the kernel detaches the program when the switch exits for any reason,
//! `kill -9` included; the rack's teardown also turns XDP off on every switch interface, for
//! programs attached by other means. See `docs/xdp.md` for why the program is emitted here
//! rather than built with clang and loaded with libxdp.
//!
//! Attach mode: native (driver) XDP first, generic (skb) XDP if the driver has none. Bind
//! mode: zero-copy first, copy mode if the driver does not support it (veth: native, copy).

use std::ffi::CString;
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use pisa::packet::{BufPool, PacketBuf, PortId};

use crate::port::Port;
use crate::stats::PortStats;
use crate::sys::{cvt, errno, monotonic_ns, setsockopt_int, setsockopt_raw};

/// Bytes per UMEM chunk. A page: the largest frame veth's native XDP accepts fits, after the
/// kernel's 256-byte XDP headroom.
const CHUNK: usize = 4096;

const BPF_MAP_CREATE: i32 = 0;
const BPF_MAP_UPDATE_ELEM: i32 = 2;
const BPF_PROG_LOAD: i32 = 5;
const BPF_LINK_CREATE: i32 = 28;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
const XDP_PASS: i32 = 2;
const BPF_FUNC_REDIRECT_MAP: i32 = 51;
const SO_BUSY_POLL: i32 = 46;
const SO_PREFER_BUSY_POLL: i32 = 69;
const SO_BUSY_POLL_BUDGET: i32 = 70;
/// Entries of the XSKMAP (one per receive queue the program may see).
const XSKMAP_ENTRIES: u32 = 64;

/// One eBPF instruction (`struct bpf_insn`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Insn {
    code: u8,
    regs: u8, // dst in the low nibble, src in the high one
    off: i16,
    imm: i32,
}

const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn { code, regs: (src << 4) | dst, off, imm }
}

/// The redirect program:
/// ```text
/// r2 = *(u32 *)(r1 + 16)        ; ctx->rx_queue_index
/// r1 = map_fd ll                ; the XSKMAP (BPF_PSEUDO_MAP_FD)
/// r3 = XDP_PASS                 ; what to do when the queue has no socket
/// call bpf_redirect_map
/// exit
/// ```
fn redirect_program(map_fd: RawFd) -> [Insn; 6] {
    [
        insn(0x61, 2, 1, 16, 0),                    // BPF_LDX | BPF_MEM | BPF_W
        insn(0x18, 1, 1, 0, map_fd),                // BPF_LD | BPF_IMM | BPF_DW, src = PSEUDO_MAP_FD
        insn(0x00, 0, 0, 0, 0),                     // upper half of the 64-bit immediate
        insn(0xb7, 3, 0, 0, XDP_PASS),              // BPF_ALU64 | BPF_MOV | BPF_K
        insn(0x85, 0, 0, 0, BPF_FUNC_REDIRECT_MAP), // BPF_JMP | BPF_CALL
        insn(0x95, 0, 0, 0, 0),                     // BPF_JMP | BPF_EXIT
    ]
}

/// `union bpf_attr`, as raw words: every command here fits in its first 128 bytes, and the
/// kernel requires the bytes it does not read to be zero.
#[repr(C, align(8))]
struct BpfAttr([u8; 128]);

impl BpfAttr {
    fn new() -> Self {
        BpfAttr([0; 128])
    }
    fn u32_at(&mut self, off: usize, v: u32) -> &mut Self {
        self.0[off..off + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn u64_at(&mut self, off: usize, v: u64) -> &mut Self {
        self.0[off..off + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }
}

fn bpf(cmd: i32, attr: &mut BpfAttr) -> io::Result<OwnedFd> {
    // SAFETY: `attr` is a valid, 128-byte, zero-padded bpf_attr for `cmd`; the kernel reads at
    // most that many bytes (and writes only to buffers we pointed it at, which outlive the call).
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.0.as_mut_ptr(), attr.0.len() as u32) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the bpf commands used with this helper return a fresh fd owned by nobody else
    // (the kernel creates bpf fds close-on-exec).
    Ok(unsafe { OwnedFd::from_raw_fd(r as RawFd) })
}

/// The XDP side of a port: the XSKMAP, the program and the link attaching it to the interface.
/// Dropping it (or the process dying) detaches the program.
struct XdpAttachment {
    map: OwnedFd,
    _prog: OwnedFd,
    _link: OwnedFd,
    native: bool,
}

impl XdpAttachment {
    fn attach(ifindex: u32, allow_generic: bool) -> io::Result<XdpAttachment> {
        let mut a = BpfAttr::new();
        a.u32_at(0, BPF_MAP_TYPE_XSKMAP).u32_at(4, 4).u32_at(8, 4).u32_at(12, XSKMAP_ENTRIES);
        a.0[28..28 + 9].copy_from_slice(b"inswitch\0");
        let map = bpf(BPF_MAP_CREATE, &mut a).map_err(|e| annotate(e, "creating the XSKMAP (needs root and a kernel with AF_XDP)"))?;
        let prog = redirect_program(map.as_raw_fd());
        let license = b"GPL\0";
        let mut log = vec![0u8; 4096];
        let mut a = BpfAttr::new();
        a.u32_at(0, BPF_PROG_TYPE_XDP)
            .u32_at(4, prog.len() as u32)
            .u64_at(8, prog.as_ptr() as u64)
            .u64_at(16, license.as_ptr() as u64)
            .u32_at(24, 1)
            .u32_at(28, log.len() as u32)
            .u64_at(32, log.as_mut_ptr() as u64)
            .u32_at(68, BPF_XDP); // expected_attach_type
        a.0[48..48 + 13].copy_from_slice(b"inswitch_xsk\0");
        let prog_fd = bpf(BPF_PROG_LOAD, &mut a).map_err(|e| {
            let msg = String::from_utf8_lossy(&log[..log.iter().position(|&b| b == 0).unwrap_or(0)]).trim().to_string();
            annotate(e, &format!("loading the XDP redirect program ({msg})"))
        })?;
        let link = |flags: u32| {
            let mut a = BpfAttr::new();
            a.u32_at(0, prog_fd.as_raw_fd() as u32).u32_at(4, ifindex).u32_at(8, BPF_XDP).u32_at(12, flags);
            bpf(BPF_LINK_CREATE, &mut a)
        };
        let (link, native) = match link(XDP_FLAGS_DRV_MODE) {
            Ok(l) => (l, true),
            Err(e) if !allow_generic => return Err(annotate(e, "attaching XDP in native mode")),
            Err(_) => (link(XDP_FLAGS_SKB_MODE).map_err(|e| annotate(e, "attaching the XDP program"))?, false),
        };
        Ok(XdpAttachment { map, _prog: prog_fd, _link: link, native })
    }

    fn insert(&self, queue: u32, xsk: RawFd) -> io::Result<()> {
        let key = queue;
        let val = xsk as u32;
        let mut a = BpfAttr::new();
        a.u32_at(0, self.map.as_raw_fd() as u32).u64_at(8, &key as *const u32 as u64).u64_at(16, &val as *const u32 as u64);
        // SAFETY: as in `bpf`; MAP_UPDATE_ELEM returns 0, not an fd, so we do not wrap it.
        let r = unsafe { libc::syscall(libc::SYS_bpf, BPF_MAP_UPDATE_ELEM, a.0.as_mut_ptr(), a.0.len() as u32) };
        if r < 0 {
            return Err(annotate(io::Error::last_os_error(), "inserting the socket in the XSKMAP"));
        }
        Ok(())
    }
}

/// How to set up an [`XdpPort`].
#[derive(Debug, Clone)]
pub struct XdpConfig {
    /// UMEM chunks (frames in flight), split evenly between receive and transmit.
    pub frames: usize,
    /// Entries of each of the four rings (a power of two).
    pub ring_size: u32,
    /// Most frames moved per call.
    pub batch: usize,
    /// Ask the kernel to busy-poll the socket's NAPI context (`SO_PREFER_BUSY_POLL`).
    pub busy_poll: bool,
    /// Accept generic (skb) XDP when the driver has no native XDP.
    pub allow_generic: bool,
}

impl Default for XdpConfig {
    fn default() -> Self {
        XdpConfig { frames: 4096, ring_size: 2048, batch: 64, busy_poll: false, allow_generic: true }
    }
}

/// One mmap'ed XSK ring: producer and consumer indices shared with the kernel, then the
/// descriptors. `T` is `u64` (fill, completion: chunk addresses) or `xdp_desc` (rx, tx).
struct XskRing<T> {
    map: *mut u8,
    map_len: usize,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    descs: *mut T,
    mask: u32,
    /// Our cached copy of the index we advance (producer for fill/tx, consumer for rx/comp).
    local: u32,
}

impl<T> XskRing<T> {
    fn map(fd: RawFd, off: &libc::xdp_ring_offset, size: u32, pgoff: u64) -> io::Result<Self> {
        let map_len = off.desc as usize + size as usize * size_of::<T>();
        // SAFETY: maps the ring the kernel allocated for this socket at `pgoff`; checked below.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                pgoff as libc::off_t,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(annotate(io::Error::last_os_error(), "mmap of an XSK ring"));
        }
        let map = map as *mut u8;
        // SAFETY: the offsets come from XDP_MMAP_OFFSETS for this very mapping.
        unsafe {
            Ok(XskRing {
                map,
                map_len,
                producer: map.add(off.producer as usize) as *const AtomicU32,
                consumer: map.add(off.consumer as usize) as *const AtomicU32,
                descs: map.add(off.desc as usize) as *mut T,
                mask: size - 1,
                local: 0,
            })
        }
    }
    #[inline]
    fn prod(&self) -> &AtomicU32 {
        // SAFETY: points into the live mapping; the kernel updates it concurrently, hence atomic.
        unsafe { &*self.producer }
    }
    #[inline]
    fn cons(&self) -> &AtomicU32 {
        // SAFETY: as for `prod`.
        unsafe { &*self.consumer }
    }
    #[inline]
    fn slot(&self, idx: u32) -> *mut T {
        // SAFETY: masked index < ring size, inside the descriptor array.
        unsafe { self.descs.add((idx & self.mask) as usize) }
    }
    /// Producer side: free entries.
    #[inline]
    fn free(&self) -> u32 {
        (self.mask + 1) - self.local.wrapping_sub(self.cons().load(Ordering::Acquire))
    }
    /// Consumer side: entries ready.
    #[inline]
    fn ready(&self) -> u32 {
        self.prod().load(Ordering::Acquire).wrapping_sub(self.local)
    }
}

impl<T> Drop for XskRing<T> {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping made in `map`; nothing refers into it past the port.
        unsafe { libc::munmap(self.map as *mut libc::c_void, self.map_len) };
    }
}

/// A switch port bound to queue 0 of one interface through AF_XDP.
pub struct XdpPort {
    id: PortId,
    name: String,
    ifindex: u32,
    // Field order is drop order: the socket (and its rings) before the UMEM it uses, and the
    // program's link last of all is fine (it only redirects to sockets still in the map).
    fill: XskRing<u64>,
    comp: XskRing<u64>,
    rx: XskRing<libc::xdp_desc>,
    tx: XskRing<libc::xdp_desc>,
    fd: OwnedFd,
    xdp: XdpAttachment,
    umem: *mut u8,
    umem_len: usize,
    /// Transmit chunks not in the tx or completion ring.
    tx_free: Vec<u64>,
    /// Transmit descriptors queued but not yet taken by the kernel (copy mode needs a kick).
    tx_pending: bool,
    zero_copy: bool,
    stats: Arc<PortStats>,
    /// Kernel counters already folded into `stats` (they only grow).
    seen: libc::xdp_statistics,
    polls: u32,
}

// SAFETY: the raw pointers refer to this port's own UMEM and ring mappings, which live exactly
// as long as the port and are aliased only by the kernel; the port may move to another thread.
unsafe impl Send for XdpPort {}

impl XdpPort {
    /// Open switch port `id` on queue 0 of interface `ifname`, loading and attaching the
    /// redirect program.
    pub fn open(id: PortId, ifname: &str, cfg: &XdpConfig) -> io::Result<Self> {
        let cname = CString::new(ifname).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in name"))?;
        // SAFETY: `cname` is a valid NUL-terminated string.
        let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
        if ifindex == 0 {
            return Err(io::Error::new(io::ErrorKind::NotFound, format!("no interface named {ifname:?}")));
        }
        let queues = rx_queues(ifname);
        if queues > 1 {
            // One socket serves one queue; frames hashed to other queues would bypass the switch.
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("{ifname} has {queues} receive queues; an XDP port serves interfaces with one"),
            ));
        }
        let ring = cfg.ring_size.max(64).next_power_of_two();
        let frames = cfg.frames.max(2 * ring as usize).next_multiple_of(2);

        // SAFETY: plain socket(2); checked.
        let raw = cvt(unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) })
            .map_err(|e| annotate(e, "socket(AF_XDP) (needs root and a kernel with AF_XDP)"))?;
        // SAFETY: fresh descriptor.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let s = fd.as_raw_fd();

        let umem_len = frames * CHUNK;
        // SAFETY: anonymous private mapping, checked.
        let umem = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                umem_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if umem == libc::MAP_FAILED {
            return Err(annotate(io::Error::last_os_error(), "mmap of the UMEM"));
        }
        let umem = umem as *mut u8;
        let guard = UmemGuard(umem, umem_len);
        // SAFETY: all-zero is valid for these plain structs.
        let mut reg: libc::xdp_umem_reg = unsafe { zeroed() };
        reg.addr = umem as u64;
        reg.len = umem_len as u64;
        reg.chunk_size = CHUNK as u32;
        setsockopt_raw(s, libc::SOL_XDP, libc::XDP_UMEM_REG, &reg).map_err(|e| annotate(e, "XDP_UMEM_REG"))?;
        for opt in [libc::XDP_UMEM_FILL_RING, libc::XDP_UMEM_COMPLETION_RING, libc::XDP_RX_RING, libc::XDP_TX_RING] {
            setsockopt_int(s, libc::SOL_XDP, opt, ring as i32).map_err(|e| annotate(e, "XDP ring size"))?;
        }
        // SAFETY: zeroed plain struct; getsockopt writes at most `len` bytes.
        let mut off: libc::xdp_mmap_offsets = unsafe { zeroed() };
        let mut len = size_of::<libc::xdp_mmap_offsets>() as libc::socklen_t;
        cvt(unsafe { libc::getsockopt(s, libc::SOL_XDP, libc::XDP_MMAP_OFFSETS, &mut off as *mut _ as *mut libc::c_void, &mut len) })
            .map_err(|e| annotate(e, "XDP_MMAP_OFFSETS"))?;
        let mut fill = XskRing::<u64>::map(s, &off.fr, ring, libc::XDP_UMEM_PGOFF_FILL_RING)?;
        let comp = XskRing::<u64>::map(s, &off.cr, ring, libc::XDP_UMEM_PGOFF_COMPLETION_RING)?;
        let rx = XskRing::<libc::xdp_desc>::map(s, &off.rx, ring, libc::XDP_PGOFF_RX_RING as u64)?;
        let tx = XskRing::<libc::xdp_desc>::map(s, &off.tx, ring, libc::XDP_PGOFF_TX_RING as u64)?;

        // Receive half: as many chunks on the fill ring as it holds.
        let half = frames / 2;
        let on_fill = half.min(ring as usize);
        for i in 0..on_fill {
            // SAFETY: i < ring size; the kernel reads fill entries only below the producer.
            unsafe { *fill.slot(i as u32) = (i * CHUNK) as u64 };
        }
        fill.local = on_fill as u32;
        fill.prod().store(fill.local, Ordering::Release);
        let tx_free: Vec<u64> = (half..frames).map(|i| (i * CHUNK) as u64).collect();

        if cfg.busy_poll {
            setsockopt_int(s, libc::SOL_SOCKET, SO_PREFER_BUSY_POLL, 1).map_err(|e| annotate(e, "SO_PREFER_BUSY_POLL"))?;
            setsockopt_int(s, libc::SOL_SOCKET, SO_BUSY_POLL, 20).map_err(|e| annotate(e, "SO_BUSY_POLL"))?;
            setsockopt_int(s, libc::SOL_SOCKET, SO_BUSY_POLL_BUDGET, cfg.batch as i32).map_err(|e| annotate(e, "SO_BUSY_POLL_BUDGET"))?;
        }

        let xdp = XdpAttachment::attach(ifindex, cfg.allow_generic)?;
        let bind = |flags: u16| {
            // SAFETY: zeroed plain struct, then the fields bind reads.
            let mut sa: libc::sockaddr_xdp = unsafe { zeroed() };
            sa.sxdp_family = libc::AF_XDP as u16;
            sa.sxdp_flags = flags;
            sa.sxdp_ifindex = ifindex;
            sa.sxdp_queue_id = 0;
            // SAFETY: valid sockaddr_xdp of the exact size.
            cvt(unsafe { libc::bind(s, &sa as *const _ as *const libc::sockaddr, size_of::<libc::sockaddr_xdp>() as libc::socklen_t) })
        };
        let zero_copy = match bind(libc::XDP_ZEROCOPY) {
            Ok(_) => true,
            Err(_) => {
                bind(libc::XDP_COPY).map_err(|e| annotate(e, "bind of the XSK socket"))?;
                false
            }
        };
        xdp.insert(0, s)?;
        std::mem::forget(guard);
        let mode = format!("{},{}", if xdp.native { "native" } else { "generic" }, if zero_copy { "zero-copy" } else { "copy" });
        Ok(XdpPort {
            id,
            name: format!("xdp:{ifname}({mode})"),
            ifindex,
            fill,
            comp,
            rx,
            tx,
            fd,
            xdp,
            umem,
            umem_len,
            tx_free,
            tx_pending: false,
            zero_copy,
            stats: Arc::new(PortStats::default()),
            // SAFETY: all-zero is a valid xdp_statistics.
            seen: unsafe { zeroed() },
            polls: 0,
        })
    }

    /// The interface index the port is bound to.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// Whether the program runs in the driver (native XDP) rather than generic skb mode.
    pub fn native(&self) -> bool {
        self.xdp.native
    }

    /// Whether the socket is bound zero-copy (the driver writes into the UMEM).
    pub fn zero_copy(&self) -> bool {
        self.zero_copy
    }

    /// Fold the kernel's per-ring counters (`XDP_STATISTICS`) into the port's: frames lost
    /// because the rx ring was full (`rx_full`), because the fill ring was empty
    /// (`rx_fill_empty`), or dropped otherwise (too large for a chunk: `rx_xdp_dropped`), and
    /// descriptors the kernel found invalid.
    pub fn sync_kernel_stats(&mut self) {
        // SAFETY: zeroed plain struct; getsockopt writes at most `len` bytes.
        let mut st: libc::xdp_statistics = unsafe { zeroed() };
        let mut len = size_of::<libc::xdp_statistics>() as libc::socklen_t;
        let r = unsafe {
            libc::getsockopt(self.fd.as_raw_fd(), libc::SOL_XDP, libc::XDP_STATISTICS, &mut st as *mut _ as *mut libc::c_void, &mut len)
        };
        if r != 0 {
            return;
        }
        let s = &self.stats;
        PortStats::count(&s.rx_full, st.rx_ring_full.saturating_sub(self.seen.rx_ring_full));
        PortStats::count(&s.rx_fill_empty, st.rx_fill_ring_empty_descs.saturating_sub(self.seen.rx_fill_ring_empty_descs));
        // In copy mode the kernel's `rx_dropped` also counts the fill-empty drops; count
        // those once.
        let fill_empty = st.rx_fill_ring_empty_descs.saturating_sub(self.seen.rx_fill_ring_empty_descs);
        let dropped = st.rx_dropped.saturating_sub(self.seen.rx_dropped);
        PortStats::count(&s.rx_xdp_dropped, if self.zero_copy { dropped } else { dropped.saturating_sub(fill_empty) });
        PortStats::count(&s.rx_error, st.rx_invalid_descs.saturating_sub(self.seen.rx_invalid_descs));
        PortStats::count(&s.tx_error, st.tx_invalid_descs.saturating_sub(self.seen.tx_invalid_descs));
        self.seen = st;
    }

    /// Move sent chunks from the completion ring back to the free list.
    fn reclaim(&mut self) {
        let n = self.comp.ready();
        for k in 0..n {
            // SAFETY: entries below the producer are the kernel's completed addresses.
            let addr = unsafe { *self.comp.slot(self.comp.local.wrapping_add(k)) };
            self.tx_free.push(addr & !(CHUNK as u64 - 1));
        }
        if n > 0 {
            self.comp.local = self.comp.local.wrapping_add(n);
            self.comp.cons().store(self.comp.local, Ordering::Release);
        }
    }

    /// Ask the kernel to transmit what is on the tx ring (copy mode transmits only inside
    /// this call, at most 32 frames each time, answering EAGAIN while more remain).
    fn kick(&mut self) {
        for _ in 0..64 {
            // SAFETY: zero-length sendto on our own socket; no buffers.
            let r = unsafe { libc::sendto(self.fd.as_raw_fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT, std::ptr::null(), 0) };
            if r >= 0 || !matches!(errno(), libc::EAGAIN | libc::EBUSY | libc::EINTR) {
                break;
            }
            if self.tx.cons().load(Ordering::Acquire) == self.tx.local {
                break;
            }
        }
        self.tx_pending = self.tx.cons().load(Ordering::Acquire) != self.tx.local;
    }

    #[inline]
    fn chunk(&self, addr: u64) -> *mut u8 {
        // SAFETY: every address the kernel hands back is one we gave it (< umem_len); callers
        // bound the length by the chunk size.
        unsafe { self.umem.add(addr as usize) }
    }
}

struct UmemGuard(*mut u8, usize);
impl Drop for UmemGuard {
    fn drop(&mut self) {
        // SAFETY: the mapping made just before; only reached when open fails.
        unsafe { libc::munmap(self.0 as *mut libc::c_void, self.1) };
    }
}

impl Port for XdpPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn id(&self) -> PortId {
        self.id
    }

    fn recv_batch(&mut self, pool: &mut BufPool, out: &mut Vec<PacketBuf>, max: usize) -> usize {
        if self.tx_pending {
            self.kick();
        }
        let n = self.rx.ready().min(max as u32);
        if n == 0 {
            self.polls = self.polls.wrapping_add(1);
            if self.polls.is_multiple_of(1024) {
                self.sync_kernel_stats();
            }
            return 0;
        }
        let ts = monotonic_ns();
        let cap = pool.buf_capacity();
        let (mut bytes, mut got, mut oversize) = (0u64, 0usize, 0u64);
        // Every received chunk goes straight back on the fill ring; the fill ring has room,
        // because receive chunks are only ever on it or on the rx ring.
        for k in 0..n {
            let idx = self.rx.local.wrapping_add(k);
            // SAFETY: entries below the rx producer are the kernel's filled descriptors.
            let d = unsafe { *self.rx.slot(idx) };
            let len = d.len as usize;
            let base = d.addr & !(CHUNK as u64 - 1);
            if len > cap || (d.addr - base) as usize + len > CHUNK {
                oversize += 1;
            } else {
                let mut b = pool.get();
                // SAFETY: addr..addr+len lies inside the chunk (checked above).
                let src = unsafe { std::slice::from_raw_parts(self.chunk(d.addr), len) };
                b.raw_mut()[..len].copy_from_slice(src);
                b.set_len(len);
                b.port = self.id;
                b.ts_ns = ts;
                bytes += len as u64;
                out.push(b);
                got += 1;
            }
            // SAFETY: the fill ring has room (see above); slot index below its size.
            unsafe { *self.fill.slot(self.fill.local.wrapping_add(k)) = base };
        }
        self.rx.local = self.rx.local.wrapping_add(n);
        self.rx.cons().store(self.rx.local, Ordering::Release);
        self.fill.local = self.fill.local.wrapping_add(n);
        self.fill.prod().store(self.fill.local, Ordering::Release);
        self.stats.add_rx(got as u64, bytes);
        PortStats::count(&self.stats.rx_oversize, oversize);
        if n as usize == max && self.rx.ready() * 2 > self.rx.mask + 1 {
            // Falling behind: look at the kernel's counters more often.
            self.sync_kernel_stats();
        }
        got
    }

    fn send_batch(&mut self, pkts: &mut Vec<PacketBuf>, pool: &mut BufPool) -> usize {
        self.reclaim();
        let room = CHUNK;
        let (mut sent, mut bytes, mut full, mut bad) = (0u64, 0u64, 0u64, 0u64);
        let mut queued = 0u32;
        for p in pkts.iter() {
            if p.len() > room {
                bad += 1;
                continue;
            }
            if self.tx.free() <= queued || self.tx_free.is_empty() {
                full += 1;
                continue;
            }
            let addr = self.tx_free.pop().expect("checked non-empty");
            // SAFETY: the chunk is ours (free list) and len <= CHUNK.
            unsafe { std::ptr::copy_nonoverlapping(p.data().as_ptr(), self.chunk(addr), p.len()) };
            let idx = self.tx.local.wrapping_add(queued);
            // SAFETY: the tx ring has a free entry at idx (checked above).
            unsafe { *self.tx.slot(idx) = libc::xdp_desc { addr, len: p.len() as u32, options: 0 } };
            queued += 1;
            sent += 1;
            bytes += p.len() as u64;
        }
        if queued > 0 {
            self.tx.local = self.tx.local.wrapping_add(queued);
            self.tx.prod().store(self.tx.local, Ordering::Release);
            self.kick();
        }
        pkts.drain(..).for_each(|p| pool.put(p));
        self.stats.add_tx(sent, bytes);
        PortStats::count(&self.stats.tx_full, full);
        PortStats::count(&self.stats.tx_error, bad);
        sent as usize
    }

    fn poll_fd(&self) -> Option<RawFd> {
        Some(self.fd.as_raw_fd())
    }

    fn stats(&self) -> Arc<PortStats> {
        self.stats.clone()
    }
}

impl Drop for XdpPort {
    fn drop(&mut self) {
        // SAFETY: the UMEM mapping made in `open`. The socket and ring mappings are released by
        // their own drops; the kernel keeps the UMEM pages pinned until the socket is gone, so
        // unmapping our view first is safe.
        unsafe { libc::munmap(self.umem as *mut libc::c_void, self.umem_len) };
    }
}

/// Receive queues of an interface (1 when sysfs does not say).
fn rx_queues(ifname: &str) -> usize {
    std::fs::read_dir(format!("/sys/class/net/{ifname}/queues"))
        .map(|d| d.filter_map(Result::ok).filter(|e| e.file_name().to_string_lossy().starts_with("rx-")).count().max(1))
        .unwrap_or(1)
}

fn annotate(e: io::Error, what: &str) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_encodes_as_the_kernel_expects() {
        let p = redirect_program(7);
        assert_eq!(size_of::<Insn>(), 8);
        // ld_imm64 with the map fd: dst r1, src BPF_PSEUDO_MAP_FD (1).
        assert_eq!(p[1], Insn { code: 0x18, regs: 0x11, off: 0, imm: 7 });
        assert_eq!(p[0].regs, 0x12, "r2 = *(r1 + 16)");
        assert_eq!(p[5].code, 0x95);
    }

    #[test]
    fn missing_interface_is_a_clear_error() {
        let e = XdpPort::open(0, "nosuchif0", &XdpConfig::default()).err().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("nosuchif0"));
    }
}
