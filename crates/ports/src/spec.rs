//! Port specs: the one-line description of a switch's ports that the CLI and switchd accept,
//! and [`open_ports`], which turns one into live ports.
//!
//! ```text
//! memory:N                   N in-memory ports (hosts attach through MemoryPeer handles)
//! udp:BASEPORT:N             N UDP tunnel ports on 127.0.0.1:BASEPORT .. BASEPORT+N-1
//! udp:HOST:BASEPORT:N        the same on another local IPv4 address
//! udp:...@PEERHOST:PEERBASE  the same, port i accepting datagrams only from PEERHOST:PEERBASE+i
//! udp:HOST:PORT>PEERHOST:PEERPORT,HOST:PORT>PEERHOST:PEERPORT,...
//!                            UDP ports listed one by one: port i is bound to the i-th HOST:PORT
//!                            and has the i-th PEERHOST:PEERPORT as its fixed peer (sends only
//!                            there, drops datagrams from anywhere else). Two such ports that
//!                            name each other are a point-to-point link between two switches
//!                            (a fabric without root); a port whose peer is a host's address is
//!                            that host's NIC cable. Local addresses and peers are each unique,
//!                            no port is its own peer, and neither side is 0.0.0.0 or port 0.
//! veth:IF1,IF2,...           AF_PACKET on existing interfaces; port i is the i-th name
//! xdp:IF1,IF2,...            AF_XDP on existing interfaces (AF_PACKET where XDP is unavailable)
//! pcap:IN:OUT,IN:OUT,...     file ports: port i replays capture IN (pcap or pcapng) and
//!                            writes what it sends to OUT (pcapng); paths without ':' or ','
//! ```

use std::fmt;
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::str::FromStr;

use pisa::packet::{PortId, DEFAULT_BUF_CAPACITY};

use crate::afpacket::{AfPacketConfig, AfPacketPort, TxMode};
use crate::fault::{FaultConfig, FaultPort};
use crate::file::FilePort;
use crate::memory::{memory_pair_with, MemoryConfig, MemoryPeer, DEFAULT_QUEUE_DEPTH};
use crate::pcap::CapturePort;
use crate::port::Port;
use crate::udp::{UdpConfig, UdpPort, DEFAULT_SOCK_BUF};
use crate::xdp::{XdpConfig, XdpPort};

/// Most ports one spec may declare (a large switch has a few hundred front-panel ports).
pub const MAX_PORTS: usize = 1024;

const ACCEPTED: &str =
    "accepted forms: memory:N | udp:[HOST:]BASEPORT:N[@PEERHOST:PEERBASE] | udp:HOST:PORT>PEERHOST:PEERPORT,... | veth:IF1,IF2,... | xdp:IF1,IF2,... | pcap:IN:OUT,IN:OUT,... (N from 1 to 1024)";

/// A parsed port spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortSpec {
    /// `memory:N`
    Memory {
        /// Number of ports.
        count: u16,
    },
    /// `udp:[HOST:]BASEPORT:N[@PEERHOST:PEERBASE]`
    Udp {
        /// Address the sockets bind to (127.0.0.1 unless given).
        host: Ipv4Addr,
        /// UDP port of switch port 0; port i uses `base + i`.
        base: u16,
        /// Number of ports.
        count: u16,
        /// The host address of port 0 (port i's is `peer.port() + i`): a port with a peer
        /// sends only there and drops datagrams from anywhere else. `None` learns the peer
        /// from the latest datagram, which any local process can then take over.
        peer: Option<SocketAddrV4>,
    },
    /// `udp:HOST:PORT>PEERHOST:PEERPORT,...`: each port's own address and fixed peer.
    UdpLinks {
        /// (local address, peer address) of each port, in port order.
        links: Vec<(SocketAddrV4, SocketAddrV4)>,
    },
    /// `veth:IF1,IF2,...`
    Veth {
        /// Interface of each port, in port order.
        ifaces: Vec<String>,
    },
    /// `xdp:IF1,IF2,...`
    Xdp {
        /// Interface of each port, in port order.
        ifaces: Vec<String>,
    },
    /// `pcap:IN:OUT,IN:OUT,...`
    Files {
        /// Input capture and output capture of each port, in port order.
        files: Vec<(PathBuf, PathBuf)>,
    },
}

/// Why a port spec was rejected. Every message ends with the accepted forms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// Nothing given.
    #[error("empty port spec; {ACCEPTED}")]
    Empty,
    /// The part before the first `:` is not a known kind.
    #[error("unknown port kind {0:?}; {ACCEPTED}")]
    UnknownKind(String),
    /// A known kind with bad arguments.
    #[error("bad port spec {spec:?}: {why}; {ACCEPTED}")]
    Invalid {
        /// The spec as given.
        spec: String,
        /// What is wrong with it.
        why: String,
    },
}

impl PortSpec {
    /// Parse a spec string (see the module docs for the forms).
    pub fn parse(s: &str) -> Result<PortSpec, SpecError> {
        let s = s.trim();
        if s.is_empty() {
            return Err(SpecError::Empty);
        }
        let bad = |why: String| SpecError::Invalid { spec: s.to_string(), why };
        let (kind, rest) = s.split_once(':').unwrap_or((s, ""));
        match kind {
            "memory" | "mem" => Ok(PortSpec::Memory { count: parse_count(rest).map_err(bad)? }),
            "udp" if rest.contains('>') => Ok(PortSpec::UdpLinks { links: parse_links(rest).map_err(bad)? }),
            "udp" => {
                let (rest, peer) = match rest.split_once('@') {
                    Some((r, p)) => (r, Some(p)),
                    None => (rest, None),
                };
                let parts: Vec<&str> = rest.split(':').collect();
                let (host, base, count) = match parts.as_slice() {
                    [base, count] => (Ipv4Addr::LOCALHOST, *base, *count),
                    [host, base, count] => (parse_host(host).map_err(bad)?, *base, *count),
                    _ => return Err(bad("expected udp:BASEPORT:N or udp:HOST:BASEPORT:N".into())),
                };
                let count = parse_count(count).map_err(bad)?;
                let base: u32 = base.parse().map_err(|_| bad(format!("BASEPORT {base:?} is not a number")))?;
                if !(1..=65535).contains(&base) {
                    return Err(bad(format!("BASEPORT {base} is outside 1-65535")));
                }
                let last = base + count as u32 - 1;
                if last > 65535 {
                    return Err(bad(format!("ports {base}..{last} go past UDP port 65535")));
                }
                let peer = peer.map(|p| parse_peer(p, count)).transpose().map_err(bad)?;
                Ok(PortSpec::Udp { host, base: base as u16, count, peer })
            }
            "veth" | "afpacket" | "if" | "xdp" => {
                let ifaces: Vec<String> = rest.split(',').map(str::to_string).collect();
                for (i, name) in ifaces.iter().enumerate() {
                    check_ifname(name).map_err(|why| bad(format!("interface {} {name:?}: {why}", i + 1)))?;
                    if ifaces[..i].contains(name) {
                        return Err(bad(format!("interface {name:?} listed twice")));
                    }
                }
                if ifaces.len() > MAX_PORTS {
                    return Err(bad(format!("{} interfaces, at most {MAX_PORTS}", ifaces.len())));
                }
                Ok(if kind == "xdp" { PortSpec::Xdp { ifaces } } else { PortSpec::Veth { ifaces } })
            }
            "pcap" | "file" => {
                let mut files: Vec<(PathBuf, PathBuf)> = Vec::new();
                for (i, pair) in rest.split(',').enumerate() {
                    let parts: Vec<&str> = pair.split(':').collect();
                    let [input, output] = parts.as_slice() else {
                        return Err(bad(format!("port {} {pair:?}: expected IN:OUT (paths without ':')", i + 1)));
                    };
                    if input.is_empty() || output.is_empty() {
                        return Err(bad(format!("port {} {pair:?}: empty file name", i + 1)));
                    }
                    let (input, output) = (PathBuf::from(input), PathBuf::from(output));
                    if files.iter().any(|(a, b)| *b == output || *a == output) || input == output {
                        return Err(bad(format!("output {} is used twice", output.display())));
                    }
                    files.push((input, output));
                }
                if files.len() > MAX_PORTS {
                    return Err(bad(format!("{} ports, at most {MAX_PORTS}", files.len())));
                }
                Ok(PortSpec::Files { files })
            }
            other => Err(SpecError::UnknownKind(other.to_string())),
        }
    }

    /// Number of ports the spec declares.
    pub fn count(&self) -> usize {
        match self {
            PortSpec::Memory { count } | PortSpec::Udp { count, .. } => *count as usize,
            PortSpec::UdpLinks { links } => links.len(),
            PortSpec::Veth { ifaces } | PortSpec::Xdp { ifaces } => ifaces.len(),
            PortSpec::Files { files } => files.len(),
        }
    }
}

fn parse_count(s: &str) -> Result<u16, String> {
    let n: usize = s.parse().map_err(|_| format!("port count {s:?} is not a number"))?;
    if n == 0 || n > MAX_PORTS {
        return Err(format!("port count {n} is outside 1-{MAX_PORTS}"));
    }
    Ok(n as u16)
}

/// `PEERHOST:PEERBASE`, with room for `count` consecutive peer ports.
fn parse_peer(s: &str, count: u16) -> Result<SocketAddrV4, String> {
    let (host, base) = s.rsplit_once(':').ok_or_else(|| format!("peer {s:?} is not PEERHOST:PEERBASE"))?;
    let host = parse_host(host)?;
    let base: u32 = base.parse().map_err(|_| format!("PEERBASE {base:?} is not a number"))?;
    let last = base + count as u32 - 1;
    if base == 0 || last > 65535 {
        return Err(format!("peer ports {base}..{last} are outside 1-65535"));
    }
    Ok(SocketAddrV4::new(host, base as u16))
}

/// `HOST:PORT>PEERHOST:PEERPORT,...` (the part after `udp:`).
fn parse_links(s: &str) -> Result<Vec<(SocketAddrV4, SocketAddrV4)>, String> {
    let mut links: Vec<(SocketAddrV4, SocketAddrV4)> = Vec::new();
    for (i, entry) in s.split(',').enumerate() {
        let n = i + 1;
        let Some((local, peer)) = entry.split_once('>') else {
            return Err(format!("port {n} {entry:?}: expected HOST:PORT>PEERHOST:PEERPORT"));
        };
        if peer.contains('>') {
            return Err(format!("port {n} {entry:?}: more than one '>'"));
        }
        let local = parse_sockaddr(local).map_err(|why| format!("port {n} {entry:?}: {why}"))?;
        let peer = parse_sockaddr(peer).map_err(|why| format!("port {n} {entry:?}: peer {why}"))?;
        if local == peer {
            return Err(format!("port {n} {entry:?}: a port cannot be its own peer"));
        }
        if let Some(j) = links.iter().position(|(l, _)| *l == local) {
            return Err(format!("port {n}: address {local} is port {}'s already", j + 1));
        }
        if let Some(j) = links.iter().position(|(_, p)| *p == peer) {
            return Err(format!("port {n}: peer {peer} is port {}'s peer already", j + 1));
        }
        links.push((local, peer));
        if links.len() > MAX_PORTS {
            return Err(format!("more than {MAX_PORTS} ports"));
        }
    }
    Ok(links)
}

/// `HOST:PORT`, a concrete unicast address (not 0.0.0.0, not port 0).
fn parse_sockaddr(s: &str) -> Result<SocketAddrV4, String> {
    let (host, port) = s.rsplit_once(':').ok_or_else(|| format!("{s:?} is not HOST:PORT"))?;
    let host = parse_host(host)?;
    if host.is_unspecified() || host.is_broadcast() || host.is_multicast() {
        return Err(format!("HOST {host} is not a unicast address"));
    }
    let port: u32 = port.parse().map_err(|_| format!("PORT {port:?} is not a number"))?;
    if !(1..=65535).contains(&port) {
        return Err(format!("PORT {port} is outside 1-65535"));
    }
    Ok(SocketAddrV4::new(host, port as u16))
}

fn parse_host(s: &str) -> Result<Ipv4Addr, String> {
    if s == "localhost" {
        return Ok(Ipv4Addr::LOCALHOST);
    }
    s.parse().map_err(|_| format!("HOST {s:?} is not an IPv4 address"))
}

/// The kernel's rules for interface names (`dev_valid_name`).
fn check_ifname(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("empty name");
    }
    if name.len() > 15 {
        return Err("longer than 15 bytes");
    }
    if name == "." || name == ".." || name.chars().any(|c| c == '/' || c == ':' || c.is_whitespace()) {
        return Err("not a valid interface name");
    }
    Ok(())
}

impl FromStr for PortSpec {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PortSpec::parse(s)
    }
}

impl fmt::Display for PortSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortSpec::Memory { count } => write!(f, "memory:{count}"),
            PortSpec::Udp { host, base, count, peer } => {
                write!(f, "udp:")?;
                if *host != Ipv4Addr::LOCALHOST {
                    write!(f, "{host}:")?;
                }
                write!(f, "{base}:{count}")?;
                match peer {
                    Some(p) => write!(f, "@{p}"),
                    None => Ok(()),
                }
            }
            PortSpec::UdpLinks { links } => {
                let parts: Vec<String> = links.iter().map(|(l, p)| format!("{l}>{p}")).collect();
                write!(f, "udp:{}", parts.join(","))
            }
            PortSpec::Veth { ifaces } => write!(f, "veth:{}", ifaces.join(",")),
            PortSpec::Xdp { ifaces } => write!(f, "xdp:{}", ifaces.join(",")),
            PortSpec::Files { files } => {
                let pairs: Vec<String> = files.iter().map(|(i, o)| format!("{}:{}", i.display(), o.display())).collect();
                write!(f, "pcap:{}", pairs.join(","))
            }
        }
    }
}

/// Settings for [`open_ports`].
#[derive(Debug, Clone)]
pub struct OpenOptions {
    /// Buffer capacity of the data plane's pool (largest frame accepted).
    pub buf_capacity: usize,
    /// If set, capture every port's traffic into `DIR/port{ID}.pcapng`.
    pub pcap_dir: Option<PathBuf>,
    /// If set, start a new capture file when one reaches this many bytes.
    pub pcap_max_bytes: Option<u64>,
    /// AF_PACKET receive ring slots per port.
    pub rx_ring_frames: usize,
    /// AF_PACKET transmit ring slots per port.
    pub tx_ring_frames: usize,
    /// How AF_PACKET ports transmit.
    pub tx_mode: TxMode,
    /// In-memory queue depth per direction.
    pub memory_queue_depth: usize,
    /// UDP socket buffer size per direction.
    pub udp_sock_buf: usize,
    /// If set, inject faults on every port; port `i` uses seed `seed + i` so ports differ.
    pub fault: Option<FaultConfig>,
    /// AF_PACKET ports transmit straight to the driver, skipping the interface's qdisc
    /// (false: through it, so `tc` shaping on a switch port applies to what it sends).
    pub qdisc_bypass: bool,
    /// `xdp:` ports: AF_XDP settings (busy polling, ring sizes).
    pub xdp: XdpConfig,
    /// `xdp:` ports open as AF_PACKET without trying AF_XDP (as when XDP is unavailable).
    /// Defaults to true when the environment has `INSWITCH_XDP=off`.
    pub xdp_off: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        let af = AfPacketConfig::default();
        OpenOptions {
            buf_capacity: DEFAULT_BUF_CAPACITY,
            pcap_dir: None,
            pcap_max_bytes: None,
            rx_ring_frames: af.rx_ring_frames,
            tx_ring_frames: af.tx_ring_frames,
            tx_mode: af.tx_mode,
            memory_queue_depth: DEFAULT_QUEUE_DEPTH,
            udp_sock_buf: DEFAULT_SOCK_BUF,
            fault: None,
            qdisc_bypass: af.qdisc_bypass,
            xdp: XdpConfig::default(),
            xdp_off: std::env::var("INSWITCH_XDP").is_ok_and(|v| v == "off" || v == "0"),
        }
    }
}

/// Why [`open_ports`] failed.
#[derive(Debug, thiserror::Error)]
pub enum PortError {
    /// The spec string was bad.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// A port could not be opened (missing interface, address in use, not root, ...).
    #[error("cannot open switch port {id} ({what}): {source}")]
    Open {
        /// The switch port number.
        id: PortId,
        /// What was being opened (interface name or address).
        what: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

fn afpacket_config(opts: &OpenOptions) -> AfPacketConfig {
    AfPacketConfig {
        buf_capacity: opts.buf_capacity,
        rx_ring_frames: opts.rx_ring_frames,
        tx_ring_frames: opts.tx_ring_frames,
        tx_mode: opts.tx_mode,
        qdisc_bypass: opts.qdisc_bypass,
        ..AfPacketConfig::default()
    }
}

/// What [`open_ports`] returns: the ports, in port order, and for `memory:N` the host end of
/// each (empty for other kinds).
pub type OpenedPorts = (Vec<Box<dyn Port>>, Vec<MemoryPeer>);

/// Open every port of `spec`, numbered from 0, wrapped in fault injection and capture as `opts`
/// asks.
pub fn open_ports(spec: &PortSpec, opts: &OpenOptions) -> Result<OpenedPorts, PortError> {
    let mut ports: Vec<Box<dyn Port>> = Vec::with_capacity(spec.count());
    let mut peers = Vec::new();
    let open_err = |id: PortId, what: String| move |source: io::Error| PortError::Open { id, what, source };
    for i in 0..spec.count() {
        let id = i as PortId;
        let port: Box<dyn Port> = match spec {
            PortSpec::Memory { .. } => {
                let cfg = MemoryConfig { queue_depth: opts.memory_queue_depth, buf_capacity: opts.buf_capacity };
                let (port, peer) = memory_pair_with(id, cfg).map_err(open_err(id, format!("mem{id}")))?;
                peers.push(peer);
                Box::new(port)
            }
            PortSpec::Udp { host, base, peer, .. } => {
                let addr = SocketAddrV4::new(*host, base + id);
                let peer = peer.map(|p| SocketAddrV4::new(*p.ip(), p.port() + id));
                let cfg = UdpConfig { sock_buf: opts.udp_sock_buf, peer, ..UdpConfig::new(addr) };
                Box::new(UdpPort::open(id, &cfg).map_err(open_err(id, format!("udp:{addr}")))?)
            }
            PortSpec::UdpLinks { links } => {
                let (addr, peer) = links[i];
                let cfg = UdpConfig { sock_buf: opts.udp_sock_buf, peer: Some(peer), ..UdpConfig::new(addr) };
                Box::new(UdpPort::open(id, &cfg).map_err(open_err(id, format!("udp:{addr}")))?)
            }
            PortSpec::Veth { ifaces } => {
                Box::new(AfPacketPort::open(id, &ifaces[i], &afpacket_config(opts)).map_err(open_err(id, ifaces[i].clone()))?)
            }
            PortSpec::Xdp { ifaces } => {
                let name = &ifaces[i];
                let xdp = if opts.xdp_off {
                    Err(io::Error::other("INSWITCH_XDP=off"))
                } else if !opts.qdisc_bypass {
                    // AF_XDP transmits straight to the driver: only AF_PACKET can honour a qdisc.
                    Err(io::Error::other("sending through the qdisc needs AF_PACKET"))
                } else {
                    XdpPort::open(id, name, &opts.xdp)
                };
                match xdp {
                    Ok(p) => {
                        eprintln!("switch port {id}: {}", p.name());
                        Box::new(p)
                    }
                    Err(e) => {
                        // Not a missing interface: that is an error whichever socket is used.
                        if e.kind() == io::ErrorKind::NotFound {
                            return Err(open_err(id, name.clone())(e));
                        }
                        eprintln!("switch port {id}: AF_XDP unavailable on {name} ({e}); using AF_PACKET");
                        Box::new(AfPacketPort::open(id, name, &afpacket_config(opts)).map_err(open_err(id, name.clone()))?)
                    }
                }
            }
            PortSpec::Files { files } => {
                let (input, output) = &files[i];
                Box::new(FilePort::open(id, input, output).map_err(open_err(id, "file port".into()))?)
            }
        };
        let port: Box<dyn Port> = match &opts.fault {
            Some(f) => Box::new(FaultPort::new(port, FaultConfig { seed: f.seed.wrapping_add(i as u64), ..f.clone() })),
            None => port,
        };
        let port: Box<dyn Port> = match &opts.pcap_dir {
            Some(dir) => Box::new(
                CapturePort::with_limit(port, dir, opts.pcap_max_bytes).map_err(open_err(id, format!("capture in {}", dir.display())))?,
            ),
            None => port,
        };
        ports.push(port);
    }
    Ok((ports, peers))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pisa::packet::BufPool;

    #[test]
    fn parses_every_form_and_round_trips() {
        for (s, want) in [
            ("memory:4", PortSpec::Memory { count: 4 }),
            ("udp:40000:8", PortSpec::Udp { host: Ipv4Addr::LOCALHOST, base: 40000, count: 8, peer: None }),
            ("udp:10.0.0.1:5000:2", PortSpec::Udp { host: Ipv4Addr::new(10, 0, 0, 1), base: 5000, count: 2, peer: None }),
            (
                "udp:40000:8@127.0.0.1:41000",
                PortSpec::Udp {
                    host: Ipv4Addr::LOCALHOST,
                    base: 40000,
                    count: 8,
                    peer: Some(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 41000)),
                },
            ),
            (
                "udp:127.0.0.1:20000>127.0.0.1:20001,10.0.0.1:20002>127.0.0.1:30000",
                PortSpec::UdpLinks {
                    links: vec![
                        (SocketAddrV4::new(Ipv4Addr::LOCALHOST, 20000), SocketAddrV4::new(Ipv4Addr::LOCALHOST, 20001)),
                        (SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 20002), SocketAddrV4::new(Ipv4Addr::LOCALHOST, 30000)),
                    ],
                },
            ),
            ("veth:s1,s2,eth0.100", PortSpec::Veth { ifaces: vec!["s1".into(), "s2".into(), "eth0.100".into()] }),
            ("xdp:s1,s2", PortSpec::Xdp { ifaces: vec!["s1".into(), "s2".into()] }),
            (
                "pcap:a.pcap:b.pcapng,/t/c:d",
                PortSpec::Files { files: vec![("a.pcap".into(), "b.pcapng".into()), ("/t/c".into(), "d".into())] },
            ),
        ] {
            let got = PortSpec::parse(s).unwrap();
            assert_eq!(got, want);
            assert_eq!(got.to_string(), s);
            assert_eq!(s.parse::<PortSpec>().unwrap(), want);
        }
        assert_eq!(PortSpec::parse("udp:65535:1").unwrap().count(), 1);
        // `localhost` is accepted and shown as the address it is.
        let l = PortSpec::parse("udp:localhost:5>localhost:6").unwrap();
        assert_eq!((l.count(), l.to_string().as_str()), (1, "udp:127.0.0.1:5>127.0.0.1:6"));
    }

    #[test]
    fn rejects_each_malformed_udp_link_form() {
        let err = |s: &str| PortSpec::parse(s).unwrap_err().to_string();
        for (s, why) in [
            ("udp:>", "port 1 \">\": \"\" is not HOST:PORT"),
            ("udp:127.0.0.1:5>", "port 1 \"127.0.0.1:5>\": peer \"\" is not HOST:PORT"),
            ("udp:>127.0.0.1:5", "port 1 \">127.0.0.1:5\": \"\" is not HOST:PORT"),
            ("udp:5>127.0.0.1:6", "\"5\" is not HOST:PORT"),
            ("udp:127.0.0.1:5>6", "peer \"6\" is not HOST:PORT"),
            ("udp:127.0.0.1:5>127.0.0.1:6,", "port 2 \"\": expected HOST:PORT>PEERHOST:PEERPORT"),
            ("udp:127.0.0.1:5>127.0.0.1:6,,127.0.0.1:7>127.0.0.1:8", "port 2 \"\": expected"),
            ("udp:127.0.0.1:5>127.0.0.1:6,127.0.0.1:7", "port 2 \"127.0.0.1:7\": expected HOST:PORT>PEERHOST:PEERPORT"),
            ("udp:127.0.0.1:5>127.0.0.1:6>127.0.0.1:7", "more than one '>'"),
            ("udp:nohost:5>127.0.0.1:6", "HOST \"nohost\" is not an IPv4 address"),
            ("udp:127.0.0.1:5>1.2.3:6", "HOST \"1.2.3\" is not an IPv4 address"),
            ("udp:127.0.0.1:x>127.0.0.1:6", "PORT \"x\" is not a number"),
            ("udp:127.0.0.1:0>127.0.0.1:6", "PORT 0 is outside 1-65535"),
            ("udp:127.0.0.1:5>127.0.0.1:65536", "PORT 65536 is outside 1-65535"),
            ("udp:127.0.0.1:-1>127.0.0.1:6", "PORT \"-1\" is not a number"),
            ("udp:0.0.0.0:5>127.0.0.1:6", "HOST 0.0.0.0 is not a unicast address"),
            ("udp:127.0.0.1:5>255.255.255.255:6", "HOST 255.255.255.255 is not a unicast address"),
            ("udp:127.0.0.1:5>224.0.0.1:6", "HOST 224.0.0.1 is not a unicast address"),
            ("udp:127.0.0.1:5>127.0.0.1:5", "a port cannot be its own peer"),
            ("udp:127.0.0.1:5>127.0.0.1:6,127.0.0.1:5>127.0.0.1:7", "port 2: address 127.0.0.1:5 is port 1's already"),
            ("udp:127.0.0.1:5>127.0.0.1:6,127.0.0.1:7>127.0.0.1:6", "port 2: peer 127.0.0.1:6 is port 1's peer already"),
            ("udp:localhost:5>127.0.0.1:6,127.0.0.1:5>127.0.0.1:7", "address 127.0.0.1:5 is port 1's already"),
            ("udp:127.0.0.1:5:2>127.0.0.1:6", "HOST \"127.0.0.1:5\" is not an IPv4 address"),
        ] {
            let e = err(s);
            assert!(e.contains(why), "{s:?}: {e}");
            assert!(e.contains("udp:HOST:PORT>PEERHOST:PEERPORT,..."), "{s:?}: {e}");
        }
        let many: Vec<String> = (1..=MAX_PORTS as u32 + 1).map(|i| format!("127.0.0.1:{}>127.0.0.2:{}", i, i)).collect();
        assert!(err(&format!("udp:{}", many.join(","))).contains("more than 1024 ports"));
        let most: Vec<String> = (1..=MAX_PORTS as u32).map(|i| format!("127.0.0.1:{}>127.0.0.2:{}", i, i)).collect();
        assert_eq!(PortSpec::parse(&format!("udp:{}", most.join(","))).unwrap().count(), MAX_PORTS);
    }

    proptest::proptest! {
        /// Any list of distinct local addresses and distinct peers (none its own) prints and
        /// parses back to itself, and opens nothing else than it says.
        #[test]
        fn udp_links_round_trip(raw in proptest::collection::vec((proptest::prelude::any::<[u8; 4]>(), 1u16.., proptest::prelude::any::<[u8; 4]>(), 1u16..), 1..20)) {
            let mut links: Vec<(SocketAddrV4, SocketAddrV4)> = Vec::new();
            for (la, lp, pa, pp) in raw {
                let fix = |a: [u8; 4]| { let ip = Ipv4Addr::from(a); if ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast() { Ipv4Addr::LOCALHOST } else { ip } };
                let (l, p) = (SocketAddrV4::new(fix(la), lp), SocketAddrV4::new(fix(pa), pp));
                if l != p && !links.iter().any(|(a, b)| *a == l || *b == p) {
                    links.push((l, p));
                }
            }
            proptest::prop_assume!(!links.is_empty());
            let spec = PortSpec::UdpLinks { links: links.clone() };
            let text = spec.to_string();
            proptest::prop_assert_eq!(PortSpec::parse(&text).unwrap(), spec);
            proptest::prop_assert_eq!(PortSpec::parse(&text).unwrap().count(), links.len());
        }
    }

    #[test]
    fn udp_link_ports_are_each_others_peers() {
        use pisa::packet::BufPool;
        // Two switches' ports, each naming the other: a frame sent on one arrives on the other;
        // a datagram from a third socket is dropped as foreign.
        let free = || std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let (a, b) = (free(), free());
        let (mut pa, _) =
            open_ports(&PortSpec::parse(&format!("udp:127.0.0.1:{a}>127.0.0.1:{b}")).unwrap(), &OpenOptions::default()).unwrap();
        let (mut pb, _) =
            open_ports(&PortSpec::parse(&format!("udp:127.0.0.1:{b}>127.0.0.1:{a}")).unwrap(), &OpenOptions::default()).unwrap();
        let mut pool = BufPool::new(DEFAULT_BUF_CAPACITY, 16);
        let mut frame = pool.get();
        frame.set_len(60);
        frame.data_mut().copy_from_slice(&[0x5a; 60]);
        assert_eq!(pa[0].send_batch(&mut vec![frame], &mut pool), 1);
        let stranger = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        stranger.send_to(&[1u8; 60], format!("127.0.0.1:{b}")).unwrap();
        let mut got = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while got.is_empty() && std::time::Instant::now() < deadline {
            pb[0].recv_batch(&mut pool, &mut got, 8);
        }
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].data(), &[0x5a; 60][..]);
        got.clear();
        while pb[0].stats().snapshot().rx_foreign < 1 && std::time::Instant::now() < deadline {
            pb[0].recv_batch(&mut pool, &mut got, 8);
        }
        assert!(got.is_empty(), "the stranger's datagram was taken");
        assert_eq!((pb[0].stats().snapshot().rx_foreign, pb[0].stats().snapshot().rx_packets), (1, 1));
    }

    #[test]
    fn rejects_bad_specs_with_helpful_messages() {
        let err = |s: &str| PortSpec::parse(s).unwrap_err().to_string();
        for s in [
            "memory:0",
            "memory:x",
            "memory:5000",
            "udp:70000:2",
            "udp:0:2",
            "udp:65535:2",
            "udp:40000",
            "udp:a.b.c.d:40000:2",
            "udp:1:2:3:4",
            "udp:40000:2@127.0.0.1",
            "udp:40000:2@127.0.0.1:65535",
            "udp:40000:2@nohost:5",
            "veth:",
            "veth:a,,b",
            "veth:a,a",
            "veth:has space",
            "veth:waytoolonginterfacename",
            "",
            "tap:3",
            "pcap:",
            "pcap:a",
            "pcap:a:b:c",
            "pcap:a:,b:c",
            "pcap:a:o,b:o",
            "pcap:a:a",
        ] {
            let e = err(s);
            assert!(e.contains("accepted forms: memory:N"), "{s:?}: {e}");
        }
        assert!(err("udp:70000:2").contains("70000 is outside 1-65535"));
        assert!(err("memory:0").contains("port count 0"));
        assert!(err("veth:a,,b").contains("interface 2 \"\": empty name"));
        assert!(err("tap:3").starts_with("unknown port kind \"tap\""));
        assert!(err("pcap:a:o,b:o").contains("output o is used twice"));
        assert!(err("pcap:a").contains("port 1 \"a\": expected IN:OUT"));
    }

    #[test]
    fn opens_memory_ports_with_capture_and_faults() {
        let dir = std::env::temp_dir().join(format!("ports-open-{}-{}", std::process::id(), crate::monotonic_ns()));
        let opts = OpenOptions {
            pcap_dir: Some(dir.clone()),
            fault: Some(FaultConfig { loss: 0.0, ..FaultConfig::default() }),
            ..OpenOptions::default()
        };
        let (mut ports, peers) = open_ports(&PortSpec::parse("memory:3").unwrap(), &opts).unwrap();
        assert_eq!((ports.len(), peers.len()), (3, 3));
        let mut pool = BufPool::new(DEFAULT_BUF_CAPACITY, 8);
        peers[2].send(&[7u8; 60]);
        let mut v = Vec::new();
        assert_eq!(ports[2].recv_batch(&mut pool, &mut v, 8), 1);
        assert_eq!((ports[2].id(), ports[2].name(), v[0].port), (2, "mem2", 2));
        drop(ports);
        assert!(dir.join("port2.pcapng").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn opens_udp_ports_and_reports_which_failed() {
        // Find a free base by binding port 0, then open two ports there.
        let probe = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let taken = probe.local_addr().unwrap().port();
        let spec = PortSpec::Udp { host: Ipv4Addr::LOCALHOST, base: taken, count: 1, peer: None };
        let e = open_ports(&spec, &OpenOptions::default()).err().unwrap();
        assert!(matches!(e, PortError::Open { id: 0, .. }), "{e}");
        assert!(e.to_string().contains(&format!("udp:127.0.0.1:{taken}")));

        let e = open_ports(&PortSpec::parse("veth:nosuchif9").unwrap(), &OpenOptions::default()).err().unwrap();
        assert!(e.to_string().contains("nosuchif9"), "{e}");
    }
}
