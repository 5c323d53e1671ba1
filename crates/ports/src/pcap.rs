//! Packet capture in pcapng, readable by Wireshark and tshark.
//!
//! [`PcapngWriter`] writes one section with one Ethernet interface whose timestamps are in
//! nanoseconds (`if_tsresol` = 9), and one Enhanced Packet Block per frame with the direction
//! (inbound/outbound) in `epb_flags`. [`CapturePort`] wraps any port and records every frame it
//! receives and every frame it is asked to transmit into `DIR/port{ID}.pcapng`.
//!
//! The capture is flushed after every batch the port moves, so Wireshark or tshark can read
//! the file while the switch runs (a reader sees whole blocks up to the last batch). With a
//! size limit, a file that reaches it is closed and the next one started: `port{ID}.pcapng`,
//! then `port{ID}.1.pcapng`, `port{ID}.2.pcapng`, ... (see [`capture_path`]); each is a
//! complete pcapng file.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use pisa::packet::{BufPool, PacketBuf, PortId};

use crate::port::Port;
use crate::stats::PortStats;
use crate::sys::{monotonic_ns, realtime_ns};

const SHB: u32 = 0x0A0D_0D0A;
const IDB: u32 = 0x0000_0001;
const EPB: u32 = 0x0000_0006;
const BYTE_ORDER_MAGIC: u32 = 0x1A2B_3C4D;
const LINKTYPE_ETHERNET: u16 = 1;
const OPT_END: u16 = 0;
const OPT_SHB_USERAPPL: u16 = 4;
const OPT_IF_NAME: u16 = 2;
const OPT_IF_TSRESOL: u16 = 9;
const OPT_EPB_FLAGS: u16 = 2;

/// Which way a captured frame was going, from the switch's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Received by the switch port.
    Inbound,
    /// Transmitted by the switch port.
    Outbound,
}

impl Direction {
    /// The `epb_flags` value: bits 0-1 are the direction (1 inbound, 2 outbound).
    fn epb_flags(self) -> u32 {
        match self {
            Direction::Inbound => 1,
            Direction::Outbound => 2,
        }
    }
}

/// Writes a pcapng stream: the section and interface headers on creation, then one block per
/// frame. Buffered; flushed by [`flush`](Self::flush) and on drop.
pub struct PcapngWriter<W: Write> {
    out: BufWriter<W>,
    /// Added to CLOCK_MONOTONIC stamps to put them on the wall clock that pcapng expects.
    mono_to_wall: u64,
    scratch: Vec<u8>,
    /// Bytes written so far (headers included), for rotation by size.
    written: u64,
}

impl PcapngWriter<File> {
    /// Create (truncate) `path` and write the headers, naming the interface `if_name`.
    pub fn create(path: impl AsRef<Path>, if_name: &str) -> io::Result<Self> {
        let mut w = Self::new(File::create(path)?, if_name)?;
        w.flush()?; // a file with no frames yet is already a valid capture
        Ok(w)
    }
}

impl<W: Write> PcapngWriter<W> {
    /// Start a pcapng stream on `w` with one Ethernet interface called `if_name`.
    pub fn new(w: W, if_name: &str) -> io::Result<Self> {
        let mut me = PcapngWriter {
            out: BufWriter::with_capacity(1 << 16, w),
            mono_to_wall: realtime_ns().wrapping_sub(monotonic_ns()),
            scratch: Vec::with_capacity(256),
            written: 0,
        };
        // Section Header Block: byte-order magic, version 1.0, unknown section length.
        let mut body = Vec::new();
        body.extend_from_slice(&BYTE_ORDER_MAGIC.to_le_bytes());
        body.extend_from_slice(&1u16.to_le_bytes());
        body.extend_from_slice(&0u16.to_le_bytes());
        body.extend_from_slice(&u64::MAX.to_le_bytes());
        push_option(&mut body, OPT_SHB_USERAPPL, b"inswitch");
        push_option(&mut body, OPT_END, &[]);
        me.write_block(SHB, &body)?;
        // Interface Description Block: Ethernet, no snap limit, nanosecond timestamps.
        let mut body = Vec::new();
        body.extend_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
        body.extend_from_slice(&0u16.to_le_bytes());
        body.extend_from_slice(&0u32.to_le_bytes());
        push_option(&mut body, OPT_IF_NAME, if_name.as_bytes());
        push_option(&mut body, OPT_IF_TSRESOL, &[9]);
        push_option(&mut body, OPT_END, &[]);
        me.write_block(IDB, &body)?;
        Ok(me)
    }

    fn write_block(&mut self, kind: u32, body: &[u8]) -> io::Result<()> {
        let total = (12 + body.len()) as u32;
        self.out.write_all(&kind.to_le_bytes())?;
        self.out.write_all(&total.to_le_bytes())?;
        self.out.write_all(body)?;
        self.out.write_all(&total.to_le_bytes())?;
        self.written += total as u64;
        Ok(())
    }

    /// Bytes of the stream so far (buffered or not).
    pub fn bytes_written(&self) -> u64 {
        self.written
    }

    /// Append one frame seen at `ts_mono_ns` (CLOCK_MONOTONIC, as in `PacketBuf::ts_ns`).
    pub fn write_frame(&mut self, frame: &[u8], ts_mono_ns: u64, dir: Direction) -> io::Result<()> {
        let ts = ts_mono_ns.wrapping_add(self.mono_to_wall);
        let mut body = std::mem::take(&mut self.scratch);
        body.clear();
        body.extend_from_slice(&0u32.to_le_bytes()); // interface id
        body.extend_from_slice(&((ts >> 32) as u32).to_le_bytes());
        body.extend_from_slice(&(ts as u32).to_le_bytes());
        body.extend_from_slice(&(frame.len() as u32).to_le_bytes()); // captured length
        body.extend_from_slice(&(frame.len() as u32).to_le_bytes()); // original length
        body.extend_from_slice(frame);
        body.resize(body.len().next_multiple_of(4), 0);
        push_option(&mut body, OPT_EPB_FLAGS, &dir.epb_flags().to_le_bytes());
        push_option(&mut body, OPT_END, &[]);
        let r = self.write_block(EPB, &body);
        self.scratch = body;
        r
    }

    /// Push buffered blocks to the underlying writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

impl<W: Write> Drop for PcapngWriter<W> {
    fn drop(&mut self) {
        let _ = self.out.flush();
    }
}

/// Append a pcapng option (code, length, value padded to 4 bytes).
fn push_option(body: &mut Vec<u8>, code: u16, value: &[u8]) {
    body.extend_from_slice(&code.to_le_bytes());
    body.extend_from_slice(&(value.len() as u16).to_le_bytes());
    body.extend_from_slice(value);
    body.resize(body.len().next_multiple_of(4), 0);
}

/// A port wrapper that records the inner port's traffic into `DIR/port{ID}.pcapng`.
///
/// Inbound: every frame the inner port delivered. Outbound: every frame handed to
/// `send_batch`, stamped with the time of the call — including frames the inner port then
/// drops (its drop counters say how many), since which ones it dropped is not reported.
/// A write error stops the capture (counted in [`write_errors`](Self::write_errors)) but never
/// disturbs the traffic.
pub struct CapturePort<P: Port> {
    inner: P,
    writer: Option<PcapngWriter<File>>,
    dir: PathBuf,
    path: PathBuf,
    /// Start a new file once the current one holds this many bytes.
    max_bytes: Option<u64>,
    /// Files started so far (the current one is number `files - 1`).
    files: u32,
    /// The current file reached `max_bytes`: the next frame starts a new one.
    full: bool,
    write_errors: Arc<AtomicU64>,
}

/// The `n`-th capture file of port `id` in `dir`: `port{ID}.pcapng` first, then
/// `port{ID}.{n}.pcapng`.
pub fn capture_path(dir: &Path, id: PortId, n: u32) -> PathBuf {
    if n == 0 {
        dir.join(format!("port{id}.pcapng"))
    } else {
        dir.join(format!("port{id}.{n}.pcapng"))
    }
}

impl<P: Port> CapturePort<P> {
    /// Wrap `inner`, creating `dir` if needed and the capture file in it.
    pub fn new(inner: P, dir: impl AsRef<Path>) -> io::Result<Self> {
        Self::with_limit(inner, dir, None)
    }

    /// Like [`new`](Self::new), starting a new file whenever one reaches `max_bytes`
    /// (checked after each batch, so a file may exceed it by one batch).
    pub fn with_limit(inner: P, dir: impl AsRef<Path>, max_bytes: Option<u64>) -> io::Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir)?;
        let path = capture_path(&dir, inner.id(), 0);
        let writer = PcapngWriter::create(&path, inner.name())?;
        Ok(CapturePort {
            inner,
            writer: Some(writer),
            dir,
            path,
            max_bytes,
            files: 1,
            full: false,
            write_errors: Arc::new(AtomicU64::new(0)),
        })
    }

    /// The capture file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Capture files started so far.
    pub fn files(&self) -> u32 {
        self.files
    }

    /// Write errors so far (after the first, capture is off).
    pub fn write_errors(&self) -> u64 {
        self.write_errors.load(Ordering::Relaxed)
    }

    /// Flush the capture file.
    pub fn flush(&mut self) -> io::Result<()> {
        match self.writer.as_mut() {
            Some(w) => w.flush(),
            None => Ok(()),
        }
    }

    /// The wrapped port.
    pub fn inner(&self) -> &P {
        &self.inner
    }

    /// The wrapped port, mutably.
    pub fn inner_mut(&mut self) -> &mut P {
        &mut self.inner
    }

    fn record<'a>(&mut self, frames: impl Iterator<Item = (&'a [u8], u64)>, dir: Direction) {
        let mut frames = frames.peekable();
        if frames.peek().is_none() {
            return;
        }
        // The next file is started when the next frame comes, not when the last one filled
        // the file: no empty file is left behind.
        if self.full {
            self.full = false;
            let path = capture_path(&self.dir, self.inner.id(), self.files);
            match PcapngWriter::create(&path, self.inner.name()) {
                Ok(next) => {
                    self.writer = Some(next); // drops (closes) the full file
                    self.path = path;
                    self.files += 1;
                }
                Err(_) => return self.fail(),
            }
        }
        let Some(w) = self.writer.as_mut() else { return };
        for (data, ts) in frames {
            if w.write_frame(data, ts, dir).is_err() {
                return self.fail();
            }
        }
        // One write per batch: readers see the frames while the switch runs.
        if w.flush().is_err() {
            return self.fail();
        }
        self.full = self.max_bytes.is_some_and(|m| w.bytes_written() >= m);
    }

    /// A write failed: count it and stop capturing (the traffic goes on).
    fn fail(&mut self) {
        self.write_errors.fetch_add(1, Ordering::Relaxed);
        self.writer = None;
    }
}

impl<P: Port> Port for CapturePort<P> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn id(&self) -> PortId {
        self.inner.id()
    }

    fn recv_batch(&mut self, pool: &mut BufPool, out: &mut Vec<PacketBuf>, max: usize) -> usize {
        let start = out.len();
        let n = self.inner.recv_batch(pool, out, max);
        self.record(out[start..].iter().map(|p| (p.data(), p.ts_ns)), Direction::Inbound);
        n
    }

    fn send_batch(&mut self, pkts: &mut Vec<PacketBuf>, pool: &mut BufPool) -> usize {
        if !pkts.is_empty() {
            let now = monotonic_ns();
            self.record(pkts.iter().map(|p| (p.data(), now)), Direction::Outbound);
        }
        self.inner.send_batch(pkts, pool)
    }

    fn poll_fd(&self) -> Option<RawFd> {
        self.inner.poll_fd()
    }

    fn stats(&self) -> Arc<PortStats> {
        self.inner.stats()
    }

    fn replay_done(&self) -> Option<bool> {
        self.inner.replay_done()
    }

    fn rx_ring(&self) -> Option<(usize, usize)> {
        self.inner.rx_ring()
    }
}

#[cfg(test)]
pub(crate) mod reader {
    //! A minimal pcapng reader, enough to check what the writer produced.

    /// One Enhanced Packet Block.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Record {
        pub ts_ns: u64,
        pub data: Vec<u8>,
        pub flags: Option<u32>,
    }

    /// Parsed file: link type, timestamp resolution exponent, interface name, packets.
    #[derive(Debug)]
    pub struct Capture {
        pub linktype: u16,
        pub tsresol: u8,
        pub if_name: String,
        pub records: Vec<Record>,
    }

    fn u16le(b: &[u8], o: usize) -> u16 {
        u16::from_le_bytes(b[o..o + 2].try_into().unwrap())
    }
    fn u32le(b: &[u8], o: usize) -> u32 {
        u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
    }

    fn options(b: &[u8]) -> Vec<(u16, Vec<u8>)> {
        let mut out = Vec::new();
        let mut o = 0;
        while o + 4 <= b.len() {
            let (code, len) = (u16le(b, o), u16le(b, o + 2) as usize);
            if code == 0 {
                break;
            }
            out.push((code, b[o + 4..o + 4 + len].to_vec()));
            o += 4 + len.next_multiple_of(4);
        }
        out
    }

    /// Parse a whole file; panics on anything malformed (it is a test helper).
    pub fn parse(b: &[u8]) -> Capture {
        let mut cap = Capture { linktype: 0, tsresol: 6, if_name: String::new(), records: Vec::new() };
        let mut o = 0;
        assert_eq!(u32le(b, 0), super::SHB, "starts with a section header");
        while o < b.len() {
            let kind = u32le(b, o);
            let total = u32le(b, o + 4) as usize;
            assert_eq!(total % 4, 0);
            assert_eq!(u32le(b, o + total - 4) as usize, total, "trailing length matches");
            let body = &b[o + 8..o + total - 4];
            match kind {
                super::SHB => assert_eq!(u32le(body, 0), super::BYTE_ORDER_MAGIC),
                super::IDB => {
                    cap.linktype = u16le(body, 0);
                    for (code, v) in options(&body[8..]) {
                        match code {
                            super::OPT_IF_TSRESOL => cap.tsresol = v[0],
                            super::OPT_IF_NAME => cap.if_name = String::from_utf8(v).unwrap(),
                            _ => {}
                        }
                    }
                }
                super::EPB => {
                    let ts = ((u32le(body, 4) as u64) << 32) | u32le(body, 8) as u64;
                    let caplen = u32le(body, 12) as usize;
                    assert_eq!(u32le(body, 16) as usize, caplen);
                    let data = body[20..20 + caplen].to_vec();
                    let flags = options(&body[20 + caplen.next_multiple_of(4)..])
                        .into_iter()
                        .find(|(c, _)| *c == super::OPT_EPB_FLAGS)
                        .map(|(_, v)| u32::from_le_bytes(v[..4].try_into().unwrap()));
                    cap.records.push(Record { ts_ns: ts, data, flags });
                }
                other => panic!("unexpected block type {other:#x}"),
            }
            o += total;
        }
        cap
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::memory_pair;
    use pisa::packet::DEFAULT_BUF_CAPACITY;

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ports-{tag}-{}-{}", std::process::id(), monotonic_ns()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn writer_output_parses_back() {
        let mut buf = Vec::new();
        {
            let mut w = PcapngWriter::new(&mut buf, "sw0").unwrap();
            w.write_frame(&[1, 2, 3, 4, 5], 1_000, Direction::Inbound).unwrap();
            w.write_frame(&[9; 64], 2_000, Direction::Outbound).unwrap();
        }
        let cap = reader::parse(&buf);
        assert_eq!((cap.linktype, cap.tsresol, cap.if_name.as_str()), (1, 9, "sw0"));
        assert_eq!(cap.records.len(), 2);
        assert_eq!(cap.records[0].data, vec![1, 2, 3, 4, 5]);
        assert_eq!(cap.records[0].flags, Some(1));
        assert_eq!(cap.records[1].flags, Some(2));
        assert_eq!(cap.records[1].ts_ns - cap.records[0].ts_ns, 1_000);
        // Wall clock: after 2020.
        assert!(cap.records[0].ts_ns > 1_577_836_800_000_000_000);
    }

    #[test]
    fn capture_port_records_both_directions() {
        let dir = tmpdir("cap");
        let (port, peer) = memory_pair(7, 64);
        let mut port = CapturePort::new(port, &dir).unwrap();
        let mut pool = BufPool::new(DEFAULT_BUF_CAPACITY, 16);
        let frames: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i; 60 + i as usize]).collect();
        for f in &frames {
            peer.send(f);
        }
        let mut v = Vec::new();
        assert_eq!(port.recv_batch(&mut pool, &mut v, 64), 10);
        v.truncate(4);
        assert_eq!(port.send_batch(&mut v, &mut pool), 4);
        port.flush().unwrap();
        let path = dir.join("port7.pcapng");
        assert_eq!(port.path(), path);
        let cap = reader::parse(&std::fs::read(&path).unwrap());
        assert_eq!(cap.if_name, "mem7");
        assert_eq!(cap.records.len(), 14);
        let inbound: Vec<_> = cap.records.iter().filter(|r| r.flags == Some(1)).map(|r| r.data.clone()).collect();
        assert_eq!(inbound, frames);
        let outbound: Vec<_> = cap.records.iter().filter(|r| r.flags == Some(2)).map(|r| r.data.clone()).collect();
        assert_eq!(outbound, frames[..4].to_vec());
        drop(port);

        // tshark, if installed, must read the file and see every frame with its length.
        match std::process::Command::new("tshark")
            .args(["-r", path.to_str().unwrap(), "-T", "fields", "-e", "frame.len"])
            .args(["-e", "frame.packet_flags_direction"])
            .output()
        {
            Ok(out) if out.status.success() => {
                let text = String::from_utf8_lossy(&out.stdout).to_string();
                let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split('\t').collect()).collect();
                assert_eq!(rows.len(), 14, "{text}");
                assert_eq!(rows[0][0], "60");
                let inbound = rows.iter().filter(|r| r[1].trim() == "0x00000001").count();
                assert_eq!(inbound, 10, "{text}");
            }
            Ok(out) => panic!("tshark failed: {}", String::from_utf8_lossy(&out.stderr)),
            Err(_) => eprintln!("tshark not installed: skipping the tshark check"),
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn capture_is_readable_before_stop_and_rotates_by_size() {
        let dir = tmpdir("rot");
        let (port, peer) = memory_pair(3, 64);
        // Each 100-byte frame takes a 100 + 32 + 12 byte block; headers take well under 200.
        let mut port = CapturePort::with_limit(port, &dir, Some(1000)).unwrap();
        let mut pool = BufPool::new(DEFAULT_BUF_CAPACITY, 16);
        let frames: Vec<Vec<u8>> = (0..20u8).map(|i| vec![i; 100]).collect();
        let mut seen = Vec::new();
        for chunk in frames.chunks(2) {
            for f in chunk {
                peer.send(f);
            }
            let mut v = Vec::new();
            assert_eq!(port.recv_batch(&mut pool, &mut v, 64), 2);
            // Flushed after the batch: the current file parses and ends with this batch.
            let cur = reader::parse(&std::fs::read(port.path()).unwrap());
            let last: Vec<_> = cur.records.iter().map(|r| r.data.clone()).collect();
            if !last.is_empty() {
                assert_eq!(last.last(), chunk.last());
            }
            seen.push(port.files());
        }
        assert!(port.files() >= 3, "20 frames of 144 bytes in files of 1000 bytes: {seen:?}");
        drop(port);
        // Every file is a valid capture, none much above the limit, together all frames in order.
        let mut all = Vec::new();
        for n in 0.. {
            let p = capture_path(&dir, 3, n);
            if !p.exists() {
                break;
            }
            let bytes = std::fs::read(&p).unwrap();
            assert!(bytes.len() < 1000 + 2 * 144, "{} is {} bytes", p.display(), bytes.len());
            let records = reader::parse(&bytes).records;
            assert!(!records.is_empty(), "{} holds no frame", p.display());
            all.extend(records.into_iter().map(|r| r.data));
        }
        assert_eq!(all, frames);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
