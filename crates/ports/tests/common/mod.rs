//! Helpers shared by the port tests (AF_PACKET and AF_XDP see the same frames).
#![allow(dead_code)] // each test file uses its own subset

use std::time::{Duration, Instant};

use pisa::packet::BufPool;
use ports::netns::VethNs;
use ports::Port;

/// A local-experimental EtherType, so frames the kernel itself sends never match.
pub const ETHERTYPE: u16 = 0x88B5;

pub fn frame(seq: u32, len: usize, vlan: Option<u16>) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x02]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
    let mut off = 12;
    if let Some(tci) = vlan {
        f[12..14].copy_from_slice(&0x8100u16.to_be_bytes());
        f[14..16].copy_from_slice(&tci.to_be_bytes());
        off = 16;
    }
    f[off..off + 2].copy_from_slice(&ETHERTYPE.to_be_bytes());
    f[off + 2..off + 6].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in f[off + 6..].iter_mut().enumerate() {
        *b = (i as u32 ^ seq) as u8;
    }
    f
}

/// Is this one of our test frames (tagged or not)?
pub fn ours(d: &[u8]) -> bool {
    d.len() >= 18 && (d[12..14] == ETHERTYPE.to_be_bytes() || (d[12..14] == [0x81, 0x00] && d[16..18] == ETHERTYPE.to_be_bytes()))
}

pub fn recv_ours(port: &mut dyn Port, pool: &mut BufPool, n: usize, timeout: Duration) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let mut v = Vec::new();
    let deadline = Instant::now() + timeout;
    while got.len() < n && Instant::now() < deadline {
        if port.recv_batch(pool, &mut v, 64) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        for p in v.drain(..) {
            if ours(p.data()) {
                got.push(p.data().to_vec());
            }
            pool.put(p);
        }
    }
    got
}

/// One's-complement check of an IPv4 UDP frame's checksum (independent of the crate's code).
pub fn udp_checksum_ok(f: &[u8]) -> bool {
    let ihl = (f[14] & 0x0f) as usize * 4;
    let udp = &f[14 + ihl..];
    let len = u16::from_be_bytes([udp[4], udp[5]]) as usize;
    let mut sum: u32 = 17 + len as u32;
    for c in f[26..34].chunks(2).chain(udp[..len].chunks(2)) {
        sum += u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]) as u32;
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum == 0xffff
}

/// The host in `env`'s namespace sends UDP datagrams of several sizes to `net.2` from
/// `net.1` (veth leaves their checksums to offload); `sw` must receive all five with the
/// checksum complete.
pub fn host_udp_arrives_with_complete_checksums(env: &VethNs, net: &str, sw: &mut dyn Port) {
    let (src, dst) = (format!("{net}.1"), format!("{net}.2"));
    env.ip_in_ns(&["addr", "add", &format!("{src}/24"), "dev", &env.ns_if]).unwrap();
    env.ip_in_ns(&["neigh", "add", &dst, "lladdr", "02:00:00:00:00:02", "dev", &env.ns_if]).unwrap();
    let mut pool = BufPool::new(pisa::packet::DEFAULT_BUF_CAPACITY, 16);
    let (bind, to) = (format!("{src}:0"), format!("{dst}:7777"));
    env.run_in_ns(move || {
        let s = std::net::UdpSocket::bind(bind).unwrap();
        for len in [1usize, 2, 17, 100, 1400] {
            s.send_to(&vec![0x5a; len], &to).unwrap();
        }
    })
    .unwrap();
    let mut got = Vec::new();
    let mut v = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(3);
    while got.len() < 5 && Instant::now() < deadline {
        sw.recv_batch(&mut pool, &mut v, 16);
        for p in v.drain(..) {
            let d = p.data();
            if d.len() > 42 && d[12..14] == [0x08, 0x00] && d[23] == 17 {
                got.push(d.to_vec());
            }
        }
    }
    assert_eq!(got.len(), 5);
    for f in &got {
        assert!(udp_checksum_ok(f), "bad UDP checksum in {f:02x?}");
    }
}
