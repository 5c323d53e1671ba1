//! AF_PACKET port on an existing interface — in inswitch, the switch end of a veth pair whose
//! other end lives in a host's network namespace. Needs `CAP_NET_RAW` (root).
//!
//! Receive uses a `PACKET_MMAP` ring in `TPACKET_V2` format: the kernel writes each frame into
//! a slot and flips its status word, and we read slots without any system call. V2 rather than
//! V3 because V3 hands frames to user space a *block* at a time, and a partly filled block is
//! only released when its retire timer fires (milliseconds): at the low and bursty rates of
//! request/response experiments that timer, not the switch, would dominate latency. V2 releases
//! every frame as soon as it is written, and at the frame rates a veth pair sustains the
//! per-frame status check costs little.
//!
//! Transmit is either one `sendmmsg` per batch ([`TxMode::Sendmmsg`], the default) or a
//! `TPACKET_V2` TX ring plus one `send` kick per batch ([`TxMode::Ring`]); see [`TxMode`].
//!
//! VLAN tags: the kernel always strips an 802.1Q/802.1ad tag from a received frame into packet
//! metadata before AF_PACKET sees it (whatever the NIC's offload settings), and the ring reports
//! it in `tp_vlan_tci`/`tp_vlan_tpid`; we put the tag back so the switch sees the frame exactly
//! as it was on the wire.
//!
//! Checksums: a host whose interface has transmit checksum offload on (the veth default) hands
//! the kernel UDP/TCP packets with only a partial checksum, to be finished by "hardware"; on a
//! veth pair that never happens, and AF_PACKET delivers the frame flagged
//! `TP_STATUS_CSUMNOTREADY`. Forwarded as is, the receiving host would drop it, so for IPv4
//! UDP and TCP we complete the checksum in software, as the NIC would have.

use std::ffi::CString;
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use pisa::packet::{BufPool, PacketBuf, PortId, DEFAULT_BUF_CAPACITY};

use crate::port::Port;
use crate::stats::PortStats;
use crate::sys::{self, cvt, errno, is_would_block, monotonic_ns, setsockopt_int, setsockopt_raw};

const ETH_P_ALL: u16 = 0x0003;
const ETH_P_8021Q: u16 = 0x8100;
/// Worst-case offset of the frame inside an RX slot: the V2 header and a `sockaddr_ll`, rounded
/// up to the ring alignment, plus room for the MAC header alignment the kernel adds.
const RX_SLOT_OVERHEAD: usize = 80;
/// Bytes of a received frame beyond the interface's MTU: the Ethernet header and room for
/// two VLAN tags (the kernel strips one into the ring's metadata; a second stays in the frame).
const MAX_L2_HEADER: usize = 14 + 8;
/// Offset of the frame inside a TX slot (`TPACKET_ALIGN(sizeof(tpacket2_hdr))`).
const TX_DATA_OFFSET: usize = 32;

/// Fewest receive-ring slots a switch may ask for (the ring is rounded up to whole blocks
/// anyway: one 64 KiB block holds 30 slots of a 2 KB-buffer port).
pub const MIN_RING_FRAMES: usize = 32;
/// Most receive-ring slots a switch may ask for (~140 MB per port at 2 KB buffers).
pub const MAX_RING_FRAMES: usize = 65536;

/// How an [`AfPacketPort`] transmits.
///
/// On veth the two measure the same (about 1.3-2 µs of CPU per 64-byte frame, almost all of it
/// the kernel delivering the frame to the peer; see `examples/ports_bench.rs`), so the default
/// is the simpler one, whose counters are exact and which needs no second ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TxMode {
    /// One `sendmmsg` per batch; the kernel copies each frame into a fresh skb. `tx_packets`
    /// counts frames the kernel accepted.
    #[default]
    Sendmmsg,
    /// Copy the batch into a `TPACKET_V2` TX ring and kick the kernel with one `send`.
    /// `tx_packets` counts frames queued in the ring (the kernel sends them during the kick, or
    /// at the next kick if it was out of socket buffer); a frame the kernel later rejects is
    /// counted as `tx_error` when its slot is reused.
    Ring,
}

/// How to set up an [`AfPacketPort`].
#[derive(Debug, Clone)]
pub struct AfPacketConfig {
    /// Largest frame accepted; should equal the data plane's pool buffer capacity.
    pub buf_capacity: usize,
    /// Slots in the receive ring (rounded up to whole ring blocks).
    pub rx_ring_frames: usize,
    /// Slots in the transmit ring ([`TxMode::Ring`] only).
    pub tx_ring_frames: usize,
    /// How frames are transmitted.
    pub tx_mode: TxMode,
    /// Most frames per `sendmmsg` call.
    pub batch: usize,
    /// Receive frames for every MAC address (a switch port must).
    pub promisc: bool,
    /// Transmit straight to the driver, skipping the interface's qdisc (as a switch ASIC does;
    /// also avoids the qdisc's lock and queue).
    pub qdisc_bypass: bool,
}

impl Default for AfPacketConfig {
    fn default() -> Self {
        AfPacketConfig {
            buf_capacity: DEFAULT_BUF_CAPACITY,
            rx_ring_frames: 4096,
            tx_ring_frames: 1024,
            tx_mode: TxMode::default(),
            batch: 64,
            promisc: true,
            qdisc_bypass: true,
        }
    }
}

/// Geometry of one PACKET_MMAP ring, and where we are in it.
struct Ring {
    /// Start of this ring inside the mapping.
    base: *mut u8,
    frame_size: usize,
    /// Byte offset of each slot from `base` (slots never straddle blocks, so these are not
    /// simply `i * frame_size` unless the frame size divides the block size).
    offsets: Vec<usize>,
    next: usize,
}

impl Ring {
    #[inline]
    fn slot(&self, i: usize) -> *mut u8 {
        // SAFETY: offsets[i] < ring length by construction, so the result stays inside the
        // mapping this ring was built over.
        unsafe { self.base.add(self.offsets[i]) }
    }

    /// The slot's status word, shared with the kernel: accessed atomically.
    #[inline]
    fn status(&self, i: usize) -> &AtomicU32 {
        // SAFETY: every slot starts with a 4-byte-aligned `tp_status` u32 (slots are 16-byte
        // aligned); the mapping outlives `self`; the kernel also uses it as a flag word.
        unsafe { &*(self.slot(i) as *const AtomicU32) }
    }

    #[inline]
    fn advance(&mut self) {
        self.next += 1;
        if self.next == self.offsets.len() {
            self.next = 0;
        }
    }
}

/// Ring layout computed from a requested slot count.
fn ring_req(frames: usize, frame_size: usize) -> libc::tpacket_req {
    let page = 4096usize;
    let block_size = (1usize << 16).max(frame_size.next_multiple_of(page));
    let per_block = block_size / frame_size;
    let blocks = frames.max(1).div_ceil(per_block);
    libc::tpacket_req {
        tp_block_size: block_size as u32,
        tp_block_nr: blocks as u32,
        tp_frame_size: frame_size as u32,
        tp_frame_nr: (blocks * per_block) as u32,
    }
}

/// The MTU of interface `name`, asked through socket `s`.
fn interface_mtu(s: RawFd, name: &CString) -> io::Result<usize> {
    // SAFETY: all-zero is a valid ifreq.
    let mut ifr: libc::ifreq = unsafe { zeroed() };
    let bytes = name.as_bytes();
    if bytes.len() >= ifr.ifr_name.len() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "interface name too long"));
    }
    for (d, b) in ifr.ifr_name.iter_mut().zip(bytes) {
        *d = *b as libc::c_char;
    }
    // SAFETY: SIOCGIFMTU reads the NUL-terminated name and writes `ifru_mtu` in `ifr`.
    cvt(unsafe { libc::ioctl(s, libc::SIOCGIFMTU as _, &mut ifr) })?;
    // SAFETY: SIOCGIFMTU filled the union's `ifru_mtu` member.
    let mtu = unsafe { ifr.ifr_ifru.ifru_mtu };
    Ok(mtu.max(0) as usize)
}

fn ring_offsets(req: &libc::tpacket_req) -> Vec<usize> {
    let per_block = (req.tp_block_size / req.tp_frame_size) as usize;
    (0..req.tp_frame_nr as usize)
        .map(|i| (i / per_block) * req.tp_block_size as usize + (i % per_block) * req.tp_frame_size as usize)
        .collect()
}

/// A switch port bound to one network interface through AF_PACKET.
pub struct AfPacketPort {
    id: PortId,
    name: String,
    ifindex: i32,
    fd: OwnedFd,
    map: *mut u8,
    map_len: usize,
    /// Bytes of the mapping that are the receive ring (the rest is the TX ring, if any).
    rx_len: usize,
    rx: Ring,
    tx: Option<Ring>,
    batch: usize,
    tx_iov: Vec<libc::iovec>,
    tx_msgs: Vec<libc::mmsghdr>,
    stats: Arc<PortStats>,
}

// SAFETY: the raw pointers refer to this port's own mmap'ed rings and preallocated iovec arrays,
// which live exactly as long as the port; nothing else in the process aliases them, so the port
// may move to another thread.
unsafe impl Send for AfPacketPort {}

impl AfPacketPort {
    /// Open switch port `id` on interface `ifname` (which must exist; it need not be up).
    pub fn open(id: PortId, ifname: &str, cfg: &AfPacketConfig) -> io::Result<Self> {
        let cname = CString::new(ifname).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in name"))?;
        // SAFETY: `cname` is a valid NUL-terminated string.
        let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) } as i32;
        if ifindex == 0 {
            return Err(io::Error::new(io::ErrorKind::NotFound, format!("no interface named {ifname:?}")));
        }
        // Protocol 0: receive nothing until the rings exist and we bind, so no frame from another
        // interface is ever queued.
        // SAFETY: plain socket(2) call; the result is checked before use.
        let raw = cvt(unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) })
            .map_err(|e| annotate(e, "socket(AF_PACKET) (needs root / CAP_NET_RAW)"))?;
        // SAFETY: `raw` is a fresh descriptor owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let s = fd.as_raw_fd();
        setsockopt_int(s, libc::SOL_PACKET, libc::PACKET_VERSION, libc::tpacket_versions::TPACKET_V2 as i32)
            .map_err(|e| annotate(e, "PACKET_VERSION"))?;

        let frame_size = (RX_SLOT_OVERHEAD + 4 + cfg.buf_capacity).next_multiple_of(libc::TPACKET_ALIGNMENT);
        // A receive slot holds the largest frame the interface can receive, not the largest
        // buffer: at a 1,500-byte MTU that is 40 slots per ring block instead of 30, a quarter
        // less memory for the same burst. A larger frame (the MTU raised after the port
        // opened) is cut to the slot by the kernel and counted as `rx_oversize`.
        let rx_frame_size = match interface_mtu(s, &cname) {
            Ok(mtu) => (RX_SLOT_OVERHEAD + 4 + cfg.buf_capacity.min(mtu + MAX_L2_HEADER)).next_multiple_of(libc::TPACKET_ALIGNMENT),
            Err(_) => frame_size,
        };
        let rx_req = ring_req(cfg.rx_ring_frames, rx_frame_size);
        setsockopt_raw(s, libc::SOL_PACKET, libc::PACKET_RX_RING, &rx_req).map_err(|e| annotate(e, "PACKET_RX_RING"))?;
        let tx_req = (cfg.tx_mode == TxMode::Ring).then(|| ring_req(cfg.tx_ring_frames, frame_size));
        if let Some(req) = &tx_req {
            setsockopt_raw(s, libc::SOL_PACKET, libc::PACKET_TX_RING, req).map_err(|e| annotate(e, "PACKET_TX_RING"))?;
        }
        let ring_len = |r: &libc::tpacket_req| r.tp_block_size as usize * r.tp_block_nr as usize;
        let rx_len = ring_len(&rx_req);
        let map_len = rx_len + tx_req.as_ref().map_or(0, ring_len);
        // SAFETY: maps the rings the kernel just allocated for this socket (RX then TX, as the
        // kernel lays them out); the result is checked against MAP_FAILED.
        let map = unsafe { libc::mmap(std::ptr::null_mut(), map_len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, s, 0) };
        if map == libc::MAP_FAILED {
            return Err(annotate(io::Error::last_os_error(), "mmap of the packet rings"));
        }
        let map = map as *mut u8;
        let rx = Ring { base: map, frame_size: rx_frame_size, offsets: ring_offsets(&rx_req), next: 0 };
        // SAFETY: rx_len < map_len when a TX ring exists, so this stays inside the mapping.
        let tx = tx_req.map(|req| Ring { base: unsafe { map.add(rx_len) }, frame_size, offsets: ring_offsets(&req), next: 0 });

        let batch = cfg.batch.max(1);
        // SAFETY: all-zero iovec/mmsghdr are valid; pointers are filled in per call.
        let (zero_iov, zero_msg): (libc::iovec, libc::mmsghdr) = unsafe { (zeroed(), zeroed()) };
        // From here on, Drop unmaps the rings if a later step fails.
        let port = AfPacketPort {
            id,
            name: ifname.to_string(),
            ifindex,
            fd,
            map,
            map_len,
            rx_len,
            rx,
            tx,
            batch,
            tx_iov: vec![zero_iov; batch],
            tx_msgs: vec![zero_msg; batch],
            stats: Arc::new(PortStats::default()),
        };

        // Our own transmissions must not come back to us as receptions (kernel >= 4.20).
        let _ = setsockopt_int(s, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, 1);
        if cfg.qdisc_bypass {
            setsockopt_int(s, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, 1).map_err(|e| annotate(e, "PACKET_QDISC_BYPASS"))?;
        }
        // SAFETY: all-zero is a valid sockaddr_ll; we fill in the fields bind needs.
        let mut sll: libc::sockaddr_ll = unsafe { zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = ETH_P_ALL.to_be();
        sll.sll_ifindex = ifindex;
        // SAFETY: `sll` is a valid sockaddr_ll and we pass its exact size.
        cvt(unsafe { libc::bind(s, &sll as *const _ as *const libc::sockaddr, size_of::<libc::sockaddr_ll>() as libc::socklen_t) })
            .map_err(|e| annotate(e, "bind to interface"))?;
        if cfg.promisc {
            // SAFETY: all-zero is a valid packet_mreq.
            let mut mreq: libc::packet_mreq = unsafe { zeroed() };
            mreq.mr_ifindex = ifindex;
            mreq.mr_type = libc::PACKET_MR_PROMISC as u16;
            // A membership (not IFF_PROMISC) is reference-counted by the kernel and undone when
            // the socket closes, so a crash never leaves the interface promiscuous.
            setsockopt_raw(s, libc::SOL_PACKET, libc::PACKET_ADD_MEMBERSHIP, &mreq).map_err(|e| annotate(e, "PACKET_MR_PROMISC"))?;
        }
        Ok(port)
    }

    /// The interface index the port is bound to.
    pub fn ifindex(&self) -> i32 {
        self.ifindex
    }

    /// Fold the kernel's drop counter (frames lost because the RX ring was full) into
    /// `rx_full`. Called automatically when the ring reports losses; the kernel resets its
    /// counter on every read.
    pub fn sync_kernel_stats(&self) {
        // SAFETY: all-zero is a valid tpacket_stats.
        let mut st: libc::tpacket_stats = unsafe { zeroed() };
        let mut len = size_of::<libc::tpacket_stats>() as libc::socklen_t;
        // SAFETY: `st` has room for `len` bytes; getsockopt writes at most that many.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                &mut st as *mut _ as *mut libc::c_void,
                &mut len,
            )
        };
        if r == 0 {
            PortStats::count(&self.stats.rx_full, st.tp_drops as u64);
        }
    }

    fn send_ring(&mut self, pkts: &[PacketBuf]) -> (u64, u64) {
        let Some(tx) = self.tx.as_mut() else {
            return (0, 0);
        };
        let room = tx.frame_size - TX_DATA_OFFSET;
        let (mut queued, mut bytes, mut full, mut bad) = (0u64, 0u64, 0u64, 0u64);
        for p in pkts.iter() {
            let i = tx.next;
            let status = tx.status(i).load(Ordering::Acquire);
            if status == libc::TP_STATUS_WRONG_FORMAT {
                // The kernel rejected the frame that was in this slot earlier.
                bad += 1;
            } else if status != libc::TP_STATUS_AVAILABLE {
                // Slot still owned by the kernel: the ring is full.
                full += 1;
                continue;
            }
            if p.len() > room {
                bad += 1;
                continue;
            }
            let slot = tx.slot(i);
            // SAFETY: the slot is ours (status AVAILABLE); we write the frame after the header,
            // within the slot (len <= room), then the header fields, and publish with a release
            // store of the status so the kernel sees the data before the flag.
            unsafe {
                std::ptr::copy_nonoverlapping(p.data().as_ptr(), slot.add(TX_DATA_OFFSET), p.len());
                let hdr = slot as *mut libc::tpacket2_hdr;
                (*hdr).tp_len = p.len() as u32;
                (*hdr).tp_snaplen = p.len() as u32;
            }
            tx.status(i).store(libc::TP_STATUS_SEND_REQUEST, Ordering::Release);
            tx.advance();
            queued += 1;
            bytes += p.len() as u64;
        }
        if queued > 0 {
            loop {
                // SAFETY: a zero-length send on a socket with a TX ring asks the kernel to
                // transmit every slot marked SEND_REQUEST; no user memory is passed.
                let r = unsafe { libc::send(self.fd.as_raw_fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT) };
                if r >= 0 {
                    break;
                }
                let e = errno();
                if e == libc::EINTR {
                    continue;
                }
                // Out of socket buffer: the queued slots stay SEND_REQUEST and leave with the
                // next kick. Anything else (interface down) is an error for the whole batch.
                if !is_would_block(e) {
                    PortStats::count(&self.stats.tx_error, queued);
                    return (0, 0);
                }
                break;
            }
        }
        PortStats::count(&self.stats.tx_full, full);
        PortStats::count(&self.stats.tx_error, bad);
        (queued, bytes)
    }

    fn send_mmsg(&mut self, pkts: &[PacketBuf]) -> (u64, u64) {
        let (mut sent, mut bytes) = (0u64, 0u64);
        for chunk in pkts.chunks(self.batch) {
            let k = chunk.len();
            for (i, p) in chunk.iter().enumerate() {
                self.tx_iov[i] = libc::iovec { iov_base: p.data().as_ptr() as *mut libc::c_void, iov_len: p.len() };
                let h = &mut self.tx_msgs[i].msg_hdr;
                h.msg_iov = &mut self.tx_iov[i];
                h.msg_iovlen = 1;
            }
            // SAFETY: msgs[..k] point at iovecs over the frames in `chunk`, alive for the
            // call; the socket is bound, so no destination address is needed.
            let (n, b) = unsafe {
                sys::sendmmsg_counting(
                    self.fd.as_raw_fd(),
                    &mut self.tx_msgs[..k],
                    |i| chunk[i].len() as u64,
                    &self.stats,
                    &[libc::ENETDOWN, libc::ENXIO, libc::ENODEV],
                )
            };
            sent += n;
            bytes += b;
        }
        (sent, bytes)
    }
}

impl Port for AfPacketPort {
    fn name(&self) -> &str {
        &self.name
    }

    fn id(&self) -> PortId {
        self.id
    }

    fn recv_batch(&mut self, pool: &mut BufPool, out: &mut Vec<PacketBuf>, max: usize) -> usize {
        let cap = pool.buf_capacity();
        let ts = monotonic_ns();
        let (mut n, mut bytes, mut oversize, mut runts) = (0usize, 0u64, 0u64, 0u64);
        let mut losing = false;
        while n < max {
            let i = self.rx.next;
            let status = self.rx.status(i).load(Ordering::Acquire);
            if status & libc::TP_STATUS_USER == 0 {
                break;
            }
            losing |= status & libc::TP_STATUS_LOSING != 0;
            let slot = self.rx.slot(i);
            // SAFETY: the slot is ours until we hand it back (status USER); it begins with a
            // tpacket2_hdr the kernel filled in before setting the status (acquire above).
            let h = unsafe { std::ptr::read(slot as *const libc::tpacket2_hdr) };
            let (len, snap, mac) = (h.tp_len as usize, h.tp_snaplen as usize, h.tp_mac as usize);
            let vlan = status & libc::TP_STATUS_VLAN_VALID != 0 || h.tp_vlan_tci != 0;
            let wire_len = len + if vlan { 4 } else { 0 };
            if snap < 14 || mac + snap > self.rx.frame_size {
                // A runt, or a header we cannot trust: nothing to forward.
                runts += 1;
            } else if snap < len || wire_len > cap {
                oversize += 1;
            } else {
                // SAFETY: mac + snap <= frame_size (checked), so the frame lies inside the slot.
                let data = unsafe { std::slice::from_raw_parts(slot.add(mac), snap) };
                let mut b = pool.get();
                let dst = b.raw_mut();
                if vlan {
                    let tpid =
                        if status & libc::TP_STATUS_VLAN_TPID_VALID != 0 && h.tp_vlan_tpid != 0 { h.tp_vlan_tpid } else { ETH_P_8021Q };
                    dst[..12].copy_from_slice(&data[..12]);
                    dst[12..14].copy_from_slice(&tpid.to_be_bytes());
                    dst[14..16].copy_from_slice(&h.tp_vlan_tci.to_be_bytes());
                    dst[16..wire_len].copy_from_slice(&data[12..]);
                } else {
                    dst[..len].copy_from_slice(data);
                }
                b.set_len(wire_len);
                if status & libc::TP_STATUS_CSUMNOTREADY != 0 {
                    complete_l4_checksum(b.data_mut());
                }
                b.port = self.id;
                b.ts_ns = ts;
                bytes += wire_len as u64;
                out.push(b);
                n += 1;
            }
            self.rx.status(i).store(libc::TP_STATUS_KERNEL, Ordering::Release);
            self.rx.advance();
        }
        if losing {
            self.sync_kernel_stats();
        }
        self.stats.add_rx(n as u64, bytes);
        PortStats::count(&self.stats.rx_oversize, oversize);
        PortStats::count(&self.stats.rx_error, runts);
        n
    }

    fn send_batch(&mut self, pkts: &mut Vec<PacketBuf>, pool: &mut BufPool) -> usize {
        let (sent, bytes) = if self.tx.is_some() { self.send_ring(pkts) } else { self.send_mmsg(pkts) };
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

    fn rx_ring(&self) -> Option<(usize, usize)> {
        Some((self.rx.offsets.len(), self.rx_len))
    }
}

impl Drop for AfPacketPort {
    fn drop(&mut self) {
        // SAFETY: `map`/`map_len` are exactly what mmap returned; no references into the rings
        // outlive the port. The socket is closed afterwards by OwnedFd.
        unsafe { libc::munmap(self.map as *mut libc::c_void, self.map_len) };
    }
}

/// Recompute the UDP or TCP checksum of an IPv4 frame (optionally 802.1Q-tagged) in place.
/// Returns false, leaving the frame alone, if it is not IPv4 UDP/TCP or is truncated.
pub fn complete_l4_checksum(frame: &mut [u8]) -> bool {
    let mut l3 = 14;
    if frame.len() >= 18 && (frame[12..14] == [0x81, 0x00] || frame[12..14] == [0x88, 0xa8]) {
        l3 = 18;
    }
    if frame.len() < l3 + 20 || frame[l3 - 2..l3] != [0x08, 0x00] || frame[l3] >> 4 != 4 {
        return false;
    }
    let ihl = (frame[l3] & 0x0f) as usize * 4;
    let total = u16::from_be_bytes([frame[l3 + 2], frame[l3 + 3]]) as usize;
    let frag = u16::from_be_bytes([frame[l3 + 6], frame[l3 + 7]]) & 0x3fff;
    let proto = frame[l3 + 9];
    let csum_at = match proto {
        17 => 6,
        6 => 16,
        _ => return false,
    };
    if frag != 0 || ihl < 20 || total < ihl + csum_at + 2 || l3 + total > frame.len() {
        return false;
    }
    let l4 = l3 + ihl;
    let l4_len = total - ihl;
    frame[l4 + csum_at] = 0;
    frame[l4 + csum_at + 1] = 0;
    let mut sum: u64 = 0;
    let mut add = |bytes: &[u8]| {
        let mut chunks = bytes.chunks_exact(2);
        for c in &mut chunks {
            sum += u16::from_be_bytes([c[0], c[1]]) as u64;
        }
        if let [last] = chunks.remainder() {
            sum += (*last as u64) << 8;
        }
    };
    add(&frame[l3 + 12..l3 + 20]); // source and destination addresses
    add(&[0, proto]);
    add(&(l4_len as u16).to_be_bytes());
    add(&frame[l4..l4 + l4_len]);
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    let mut c = !(sum as u16);
    if c == 0 && proto == 17 {
        // In UDP, 0 means "no checksum"; a computed 0 is sent as all ones.
        c = 0xffff;
    }
    frame[l4 + csum_at..l4 + csum_at + 2].copy_from_slice(&c.to_be_bytes());
    true
}

fn annotate(e: io::Error, what: &str) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_geometry_keeps_slots_inside_blocks() {
        let fs = (RX_SLOT_OVERHEAD + 4 + 2048).next_multiple_of(16);
        let req = ring_req(1000, fs);
        assert_eq!(req.tp_block_size % 4096, 0);
        assert!(req.tp_frame_nr >= 1000);
        let per_block = req.tp_block_size / req.tp_frame_size;
        assert_eq!(req.tp_frame_nr, per_block * req.tp_block_nr);
        let offs = ring_offsets(&req);
        let total = (req.tp_block_size * req.tp_block_nr) as usize;
        assert!(offs.iter().all(|&o| o + fs <= total && o % 16 == 0));
        for w in offs.windows(2) {
            assert!(w[1] >= w[0] + fs);
        }
        // Frames up to the buffer capacity fit in a slot after the kernel's header.
        assert!(fs - 66 >= 2048);
    }

    #[test]
    fn completes_udp_checksum() {
        // Ethernet + IPv4 (10.0.0.1 -> 10.0.0.2) + UDP 1234 -> 80, payload "hi", with a bogus
        // (partial) checksum 0xabcd.
        let mut f = vec![0u8; 14];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f.extend_from_slice(&[0x45, 0, 0, 30, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
        f.extend_from_slice(&[0x04, 0xd2, 0x00, 0x50, 0x00, 0x0a, 0xab, 0xcd, b'h', b'i']);
        assert!(complete_l4_checksum(&mut f));
        let got = u16::from_be_bytes([f[40], f[41]]);
        // Verify: summing the pseudo header and segment including the checksum gives 0xffff.
        let mut sum: u32 = 0x0a00 + 0x0001 + 0x0a00 + 0x0002 + 17 + 10;
        for c in f[34..44].chunks(2) {
            sum += u16::from_be_bytes([c[0], c[1]]) as u32;
        }
        while sum >> 16 != 0 {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        assert_eq!(sum, 0xffff, "checksum {got:#06x} verifies");
        // Not IPv4: untouched.
        let mut arp = vec![0u8; 60];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert!(!complete_l4_checksum(&mut arp));
    }

    #[test]
    fn missing_interface_is_a_clear_error() {
        let e = AfPacketPort::open(0, "nosuchif0", &AfPacketConfig::default()).err().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("nosuchif0"));
    }
}
