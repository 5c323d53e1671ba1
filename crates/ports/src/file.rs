//! File ports, as bmv2's `--use-files`: a port that replays a capture into the switch and
//! writes every frame the switch sends out of it to another capture.
//!
//! Input may be classic pcap (either byte order, microsecond or nanosecond stamps) or pcapng
//! (Section Header, Interface Description, Enhanced and Simple Packet Blocks, either byte
//! order; other blocks are skipped), since both are what tcpdump, Wireshark and scapy write.
//! Every interface must be Ethernet. The whole input is read and checked when the port
//! opens, so a malformed file is one clear error before any traffic, never a panic halfway.
//! Output is pcapng, like the switch's other captures ([`PcapngWriter`]).
//!
//! Replay runs as fast as the pipeline takes frames: the driver holds back reading a replay
//! port while the traffic manager has a backlog ([`Port::replay_done`]), so nothing is
//! tail-dropped for the file's sake.

use std::fs::File;
use std::io;
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use pisa::packet::{BufPool, PacketBuf, PortId};

use crate::pcap::{Direction, PcapngWriter};
use crate::port::Port;
use crate::stats::PortStats;
use crate::sys::monotonic_ns;

const LINKTYPE_ETHERNET: u32 = 1;

/// The frames of a capture file, in file order, in one buffer.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Frames {
    data: Vec<u8>,
    /// End offset of each frame in `data`.
    ends: Vec<usize>,
}

impl Frames {
    /// Number of frames.
    pub fn len(&self) -> usize {
        self.ends.len()
    }
    /// No frames.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }
    /// Frame `i`.
    pub fn get(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.data[start..self.ends[i]]
    }
    /// Every frame, in order.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> {
        (0..self.len()).map(|i| self.get(i))
    }
    fn push(&mut self, f: &[u8]) {
        self.data.extend_from_slice(f);
        self.ends.push(self.data.len());
    }
}

/// Why a capture file could not be read: one line, with the byte offset of the problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FormatError(String);

fn bad<T>(msg: impl Into<String>) -> Result<T, FormatError> {
    Err(FormatError(msg.into()))
}

/// Byte-order-aware reads that fail instead of panicking when the file is short.
#[derive(Clone, Copy)]
struct Rd<'a> {
    b: &'a [u8],
    big_endian: bool,
}

impl Rd<'_> {
    fn u16(&self, o: usize) -> Result<u16, FormatError> {
        match self.b.get(o..o + 2) {
            Some(s) => Ok(if self.big_endian { u16::from_be_bytes([s[0], s[1]]) } else { u16::from_le_bytes([s[0], s[1]]) }),
            None => bad(format!("truncated at byte {o}")),
        }
    }
    fn u32(&self, o: usize) -> Result<u32, FormatError> {
        match self.b.get(o..o + 4) {
            Some(s) => {
                let a = [s[0], s[1], s[2], s[3]];
                Ok(if self.big_endian { u32::from_be_bytes(a) } else { u32::from_le_bytes(a) })
            }
            None => bad(format!("truncated at byte {o}")),
        }
    }
}

/// Parse a whole capture (pcap or pcapng; see the module docs).
pub fn parse_capture(b: &[u8]) -> Result<Frames, FormatError> {
    if b.len() < 4 {
        return bad(format!("too short to be a capture ({} bytes)", b.len()));
    }
    let magic = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    match magic {
        0xA1B2_C3D4 | 0xA1B2_3C4D => parse_pcap(b, false),
        0xD4C3_B2A1 | 0x4D3C_B2A1 => parse_pcap(b, true),
        0x0A0D_0D0A => parse_pcapng(b),
        _ => bad(format!("not a pcap or pcapng file (magic {magic:#010x})")),
    }
}

fn parse_pcap(b: &[u8], big_endian: bool) -> Result<Frames, FormatError> {
    let r = Rd { b, big_endian };
    if b.len() < 24 {
        return bad("truncated pcap file header");
    }
    let linktype = r.u32(20)? & 0x0FFF_FFFF;
    if linktype != LINKTYPE_ETHERNET {
        return bad(format!("link type {linktype} is not Ethernet (1)"));
    }
    let mut frames = Frames::default();
    let mut o = 24;
    while o < b.len() {
        if o + 16 > b.len() {
            return bad(format!("truncated record header at byte {o}"));
        }
        let caplen = r.u32(o + 8)? as usize;
        let Some(data) = b.get(o + 16..(o + 16).saturating_add(caplen)) else {
            return bad(format!("record at byte {o} claims {caplen} bytes; the file ends first"));
        };
        frames.push(data);
        o += 16 + caplen;
    }
    Ok(frames)
}

fn parse_pcapng(b: &[u8]) -> Result<Frames, FormatError> {
    const SHB: u32 = 0x0A0D_0D0A;
    let mut frames = Frames::default();
    let mut linktypes: Vec<u32> = Vec::new();
    let mut r = Rd { b, big_endian: false };
    let mut o = 0;
    while o < b.len() {
        if o + 12 > b.len() {
            return bad(format!("truncated block header at byte {o}"));
        }
        let kind = u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        if kind == SHB {
            // A new section: its byte-order magic sets the byte order, and interfaces restart.
            r.big_endian = match r.b.get(o + 8..o + 12) {
                Some([0x4D, 0x3C, 0x2B, 0x1A]) => false,
                Some([0x1A, 0x2B, 0x3C, 0x4D]) => true,
                _ => return bad(format!("bad byte-order magic in section header at byte {o}")),
            };
            linktypes.clear();
        }
        let total = r.u32(o + 4)? as usize;
        if total < 12 || !total.is_multiple_of(4) {
            return bad(format!("block at byte {o} has invalid length {total}"));
        }
        if o + total > b.len() {
            return bad(format!("block at byte {o} claims {total} bytes; the file ends first"));
        }
        if r.u32(o + total - 4)? as usize != total {
            return bad(format!("block at byte {o}: trailing length does not match"));
        }
        let body = Rd { b: &b[o + 8..o + total - 4], big_endian: r.big_endian };
        match kind {
            SHB => {}
            1 => {
                // Interface Description Block.
                let lt = body.u16(0)? as u32;
                if lt != LINKTYPE_ETHERNET {
                    return bad(format!("interface {} has link type {lt}, not Ethernet (1)", linktypes.len()));
                }
                linktypes.push(lt);
            }
            6 => {
                // Enhanced Packet Block.
                let iface = body.u32(0)? as usize;
                if iface >= linktypes.len() {
                    return bad(format!("packet at byte {o} names interface {iface}, which is not declared"));
                }
                let caplen = body.u32(12)? as usize;
                let Some(data) = body.b.get(20..20usize.saturating_add(caplen)) else {
                    return bad(format!("packet at byte {o} claims {caplen} bytes; its block is shorter"));
                };
                frames.push(data);
            }
            3 => {
                // Simple Packet Block: interface 0, the rest of the body is the frame
                // (padded), capped by the original length.
                if linktypes.is_empty() {
                    return bad(format!("packet at byte {o} comes before any interface"));
                }
                let orig = body.u32(0)? as usize;
                let data = &body.b[4..];
                frames.push(&data[..orig.min(data.len())]);
            }
            _ => {} // statistics, name resolution, custom blocks: nothing to replay
        }
        o += total;
    }
    if o == 0 {
        return bad("empty pcapng file");
    }
    Ok(frames)
}

/// Read and parse a capture file; errors name the file.
pub fn read_capture(path: &Path) -> io::Result<Frames> {
    let bytes = std::fs::read(path).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    parse_capture(&bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", path.display())))
}

/// A switch port fed by a capture file, writing what it transmits to another.
pub struct FilePort {
    id: PortId,
    name: String,
    frames: Frames,
    next: usize,
    out: PcapngWriter<File>,
    out_path: PathBuf,
    stats: Arc<PortStats>,
}

impl FilePort {
    /// Read `input` whole (errors for a missing or malformed file) and create `output`.
    pub fn open(id: PortId, input: &Path, output: &Path) -> io::Result<FilePort> {
        let frames = read_capture(input)?;
        let name = format!("pcap:{}", input.display());
        let out = PcapngWriter::create(output, &name).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", output.display())))?;
        Ok(FilePort { id, name, frames, next: 0, out, out_path: output.to_path_buf(), stats: Arc::new(PortStats::default()) })
    }

    /// Frames in the input file.
    pub fn input_frames(&self) -> usize {
        self.frames.len()
    }

    /// The output file.
    pub fn output(&self) -> &Path {
        &self.out_path
    }
}

impl Port for FilePort {
    fn name(&self) -> &str {
        &self.name
    }

    fn id(&self) -> PortId {
        self.id
    }

    fn recv_batch(&mut self, pool: &mut BufPool, out: &mut Vec<PacketBuf>, max: usize) -> usize {
        let ts = monotonic_ns();
        let cap = pool.buf_capacity();
        let (mut n, mut bytes, mut oversize) = (0usize, 0u64, 0u64);
        while n < max && self.next < self.frames.len() {
            let f = self.frames.get(self.next);
            self.next += 1;
            if f.len() > cap {
                oversize += 1;
                continue;
            }
            let mut b = pool.get();
            b.copy_from(f);
            b.port = self.id;
            b.ts_ns = ts;
            bytes += f.len() as u64;
            out.push(b);
            n += 1;
        }
        self.stats.add_rx(n as u64, bytes);
        PortStats::count(&self.stats.rx_oversize, oversize);
        n
    }

    fn send_batch(&mut self, pkts: &mut Vec<PacketBuf>, pool: &mut BufPool) -> usize {
        let now = monotonic_ns();
        let (mut sent, mut bytes, mut failed) = (0u64, 0u64, 0u64);
        for p in pkts.drain(..) {
            match self.out.write_frame(p.data(), now, Direction::Outbound) {
                Ok(()) => {
                    sent += 1;
                    bytes += p.len() as u64;
                }
                Err(_) => failed += 1,
            }
            pool.put(p);
        }
        self.stats.add_tx(sent, bytes);
        PortStats::count(&self.stats.tx_error, failed);
        sent as usize
    }

    fn poll_fd(&self) -> Option<RawFd> {
        None
    }

    fn stats(&self) -> Arc<PortStats> {
        self.stats.clone()
    }

    fn replay_done(&self) -> Option<bool> {
        Some(self.next >= self.frames.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pisa::packet::DEFAULT_BUF_CAPACITY;

    fn frames(n: usize) -> Vec<Vec<u8>> {
        (0..n).map(|i| (0..60 + i % 40).map(|j| (i * 7 + j) as u8).collect()).collect()
    }

    /// A classic pcap file, written here independently of the parser.
    fn pcap_bytes(fs: &[Vec<u8>], big_endian: bool, nanos: bool) -> Vec<u8> {
        let w32 = |v: u32| if big_endian { v.to_be_bytes() } else { v.to_le_bytes() };
        let w16 = |v: u16| if big_endian { v.to_be_bytes() } else { v.to_le_bytes() };
        let mut b = Vec::new();
        b.extend_from_slice(&w32(if nanos { 0xA1B2_3C4D } else { 0xA1B2_C3D4 }));
        b.extend_from_slice(&w16(2));
        b.extend_from_slice(&w16(4));
        b.extend_from_slice(&[0; 8]);
        b.extend_from_slice(&w32(65535));
        b.extend_from_slice(&w32(1));
        for (i, f) in fs.iter().enumerate() {
            b.extend_from_slice(&w32(i as u32));
            b.extend_from_slice(&w32(0));
            b.extend_from_slice(&w32(f.len() as u32));
            b.extend_from_slice(&w32(f.len() as u32 + 4));
            b.extend_from_slice(f);
        }
        b
    }

    fn pcapng_bytes(fs: &[Vec<u8>]) -> Vec<u8> {
        let mut buf = Vec::new();
        let mut w = PcapngWriter::new(&mut buf, "x").unwrap();
        for f in fs {
            w.write_frame(f, 5, Direction::Inbound).unwrap();
        }
        drop(w);
        buf
    }

    fn tmp(tag: &str) -> PathBuf {
        std::env::temp_dir().join(format!("ports-file-{tag}-{}-{}", std::process::id(), monotonic_ns()))
    }

    #[test]
    fn reads_pcap_in_both_byte_orders_and_pcapng() {
        let fs = frames(50);
        for (big_endian, nanos) in [(false, false), (true, false), (false, true), (true, true)] {
            let got = parse_capture(&pcap_bytes(&fs, big_endian, nanos)).unwrap();
            assert_eq!(got.iter().map(<[u8]>::to_vec).collect::<Vec<_>>(), fs, "big_endian={big_endian} nanos={nanos}");
        }
        let got = parse_capture(&pcapng_bytes(&fs)).unwrap();
        assert_eq!(got.iter().map(<[u8]>::to_vec).collect::<Vec<_>>(), fs);
        assert!(parse_capture(&pcap_bytes(&[], false, false)).unwrap().is_empty());
    }

    #[test]
    fn file_port_round_trip() {
        let fs = frames(300);
        let (input, output) = (tmp("in.pcap"), tmp("out.pcapng"));
        std::fs::write(&input, pcap_bytes(&fs, false, false)).unwrap();
        let mut port = FilePort::open(3, &input, &output).unwrap();
        assert_eq!((port.input_frames(), port.replay_done()), (300, Some(false)));
        let mut pool = BufPool::new(DEFAULT_BUF_CAPACITY, 64);
        let mut got = Vec::new();
        let mut v = Vec::new();
        while port.recv_batch(&mut pool, &mut v, 64) > 0 {
            assert!(v.iter().all(|p| p.port == 3));
            got.extend(v.iter().map(|p| p.data().to_vec()));
            port.send_batch(&mut v, &mut pool);
        }
        assert_eq!(got, fs);
        assert_eq!(port.replay_done(), Some(true));
        let s = port.stats().snapshot();
        assert_eq!((s.rx_packets, s.tx_packets), (300, 300));
        drop(port);
        // What the port wrote reads back (with the test reader of the capture module too).
        let out = std::fs::read(&output).unwrap();
        assert_eq!(parse_capture(&out).unwrap().iter().map(<[u8]>::to_vec).collect::<Vec<_>>(), fs);
        let cap = crate::pcap::reader::parse(&out);
        assert!(cap.records.iter().all(|r| r.flags == Some(2)));
        let _ = (std::fs::remove_file(&input), std::fs::remove_file(&output));
    }

    #[test]
    fn oversize_frames_are_counted_not_replayed() {
        let fs = vec![vec![1u8; 60], vec![2u8; 3000], vec![3u8; 60]];
        let (input, output) = (tmp("big.pcap"), tmp("big.pcapng"));
        std::fs::write(&input, pcap_bytes(&fs, false, false)).unwrap();
        let mut port = FilePort::open(0, &input, &output).unwrap();
        let mut pool = BufPool::new(DEFAULT_BUF_CAPACITY, 8);
        let mut v = Vec::new();
        assert_eq!(port.recv_batch(&mut pool, &mut v, 8), 2);
        assert_eq!(port.stats().snapshot().rx_oversize, 1);
        let _ = (std::fs::remove_file(&input), std::fs::remove_file(&output));
    }

    #[test]
    fn truncated_and_garbage_files_are_errors_not_panics() {
        let fs = frames(5);
        for good in [pcap_bytes(&fs, false, false), pcap_bytes(&fs, true, true), pcapng_bytes(&fs)] {
            // Every prefix either parses (cut at a record boundary, giving a prefix of the
            // frames) or is an error; none panics.
            for cut in 0..good.len() {
                match parse_capture(&good[..cut]) {
                    Ok(got) => assert!(got.len() < fs.len() && got.iter().zip(&fs).all(|(a, b)| a == b.as_slice())),
                    Err(e) => assert!(!e.to_string().contains('\n'), "{e}"),
                }
            }
            // Flip every byte in turn: never a panic.
            for i in 0..good.len() {
                let mut b = good.clone();
                b[i] ^= 0xFF;
                let _ = parse_capture(&b);
            }
        }
        // Pseudo-random garbage behind each magic.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for magic in [0xA1B2_C3D4u32, 0xD4C3_B2A1, 0x0A0D_0D0A, 0] {
            for len in [0, 3, 8, 24, 100, 1000] {
                let mut b = magic.to_le_bytes().to_vec();
                for _ in 0..len {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    b.push(x as u8);
                }
                let _ = parse_capture(&b);
            }
        }
        let e = |b: &[u8]| parse_capture(b).unwrap_err().to_string();
        assert!(e(b"hello world, not a capture").starts_with("not a pcap or pcapng file"));
        assert!(e(&[1, 2]).contains("too short"));
        let mut cut = pcap_bytes(&fs, false, false);
        cut.truncate(cut.len() - 3);
        assert!(e(&cut).contains("the file ends first"), "{}", e(&cut));
        let mut wrong_link = pcap_bytes(&fs, false, false);
        wrong_link[20] = 101;
        assert!(e(&wrong_link).contains("not Ethernet"));
    }

    #[test]
    fn open_errors_name_the_file() {
        let missing = tmp("missing.pcap");
        let e = FilePort::open(0, &missing, &tmp("o")).err().unwrap().to_string();
        assert!(e.contains(&missing.display().to_string()), "{e}");
        let junk = tmp("junk.pcap");
        std::fs::write(&junk, b"garbage garbage garbage garbage").unwrap();
        let e = FilePort::open(0, &junk, &tmp("o")).err().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("not a pcap or pcapng file"), "{e}");
        let _ = std::fs::remove_file(&junk);
    }
}
