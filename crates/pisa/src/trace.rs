//! Packet traces: what bmv2's `--log-console` shows, for chosen packets only.
//!
//! A trace session is armed on a pipe with a [`TraceFilter`] (a small match on the frame's
//! headers and ingress port, `udp dst 7070 and ip src 10.0.0.1`). Only while a session is
//! armed does ingress look at received frames (once per frame); a frame that matches gets
//! a trace id in its metadata ([`crate::PacketMeta::trace`]), which its copies (clones,
//! multicast replicas) and its recirculations keep. Every pass of a packet with an id
//! records what it does ([`Event`]): each table applied (key, hit, action and data), each
//! register action (array, index, cell before and after), each hash unit's result, block
//! memory words, digests, violations; after ingress the traffic manager's decision (port,
//! multicast group and its ports, clone session, recirculation, drop and its reason); in
//! egress the port, drops and the frame sent.
//!
//! Cost when off: the hooks test the pass's trace id (a field of the pass, 0 when the
//! packet is not traced) and call out-of-line, cold functions only when it is set; the
//! ingress loop tests one flag per batch. `bench/RESULTS.md` has the measurement.
//!
//! A record is complete when none of its copies is queued in the pipe and none has made
//! an event for a quiet period (the driver picks it; the in-memory switch of the tests
//! takes everything once the pipeline is idle). Sans-IO like the rest of the crate: times
//! are the driver's `now`.

use std::fmt;

use serde_json::{json, Value};

use crate::base::{DropCode, Gress};
use crate::packet::{PortId, PORT_CPU, PORT_NONE, PORT_RECIRC};
use crate::pass::Violation;
use crate::program::ProgramSet;

/// Most events one packet's record keeps (a DAIET flush walks thousands of passes); the
/// record says when it was cut.
pub const MAX_EVENTS: usize = 4096;
/// Most records a pipe holds before they are taken; packets matching beyond it are counted
/// as skipped, not traced.
pub const MAX_RECORDS: usize = 256;

/// One condition of a filter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Term {
    EthType(u16),
    IpSrc(u32, u32),
    IpDst(u32, u32),
    IpProto(u8),
    L4Src(u8, u16),
    L4Dst(u8, u16),
    InPort(u16),
}

/// Which packets to trace: conditions joined by `and`, each one of `eth type 0x0800`,
/// `ip src A.B.C.D[/LEN]`, `ip dst A.B.C.D[/LEN]`, `ip proto N`, `udp`, `tcp`,
/// `udp src N`, `udp dst N`, `tcp src N`, `tcp dst N`, `in port N`. `any` matches every
/// packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceFilter {
    terms: Vec<Term>,
    text: String,
}

/// Why a filter expression was refused (the message says what was expected where).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilterError(pub String);

impl fmt::Display for FilterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn num(w: Option<&str>, what: &str, max: u64) -> Result<u64, FilterError> {
    let w = w.ok_or_else(|| FilterError(format!("{what}: a number is missing")))?;
    let v = match w.strip_prefix("0x").or_else(|| w.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => w.parse::<u64>(),
    }
    .map_err(|_| FilterError(format!("{what}: {w:?} is not a number")))?;
    if v > max {
        return Err(FilterError(format!("{what}: {v} is above {max}")));
    }
    Ok(v)
}

fn prefix(w: Option<&str>, what: &str) -> Result<(u32, u32), FilterError> {
    let w = w.ok_or_else(|| FilterError(format!("{what}: an address is missing")))?;
    let (a, len) = match w.split_once('/') {
        Some((a, l)) => {
            (a, l.parse::<u32>().ok().filter(|l| *l <= 32).ok_or_else(|| FilterError(format!("{what}: bad prefix length in {w:?}")))?)
        }
        None => (w, 32),
    };
    let addr: std::net::Ipv4Addr = a.parse().map_err(|_| FilterError(format!("{what}: {a:?} is not an IPv4 address")))?;
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    Ok((u32::from(addr) & mask, mask))
}

impl TraceFilter {
    /// Parse an expression (see the type's doc); the error names the first bad word.
    pub fn parse(text: &str) -> Result<TraceFilter, FilterError> {
        let words: Vec<&str> = text.split_whitespace().collect();
        if words.is_empty() {
            return Err(FilterError("empty match expression".into()));
        }
        let mut terms = Vec::new();
        for part in words.split(|w| w.eq_ignore_ascii_case("and")) {
            let mut it = part.iter().map(|w| w.to_ascii_lowercase());
            let first = it.next().ok_or_else(|| FilterError("`and` needs a condition on both sides".into()))?;
            let second = it.next();
            let third = it.next();
            let t = match (first.as_str(), second.as_deref()) {
                ("any", None) => None,
                ("eth", Some("type")) => Some(Term::EthType(num(third.as_deref(), "eth type", 0xFFFF)? as u16)),
                ("ip", Some("src")) => {
                    let (a, m) = prefix(third.as_deref(), "ip src")?;
                    Some(Term::IpSrc(a, m))
                }
                ("ip", Some("dst")) => {
                    let (a, m) = prefix(third.as_deref(), "ip dst")?;
                    Some(Term::IpDst(a, m))
                }
                ("ip", Some("proto")) => Some(Term::IpProto(num(third.as_deref(), "ip proto", 255)? as u8)),
                ("udp" | "tcp", None) => Some(Term::IpProto(if first == "udp" { 17 } else { 6 })),
                ("udp" | "tcp", Some(dir @ ("src" | "dst"))) => {
                    let proto = if first == "udp" { 17 } else { 6 };
                    let p = num(third.as_deref(), &format!("{first} {dir}"), 0xFFFF)? as u16;
                    Some(if dir == "src" { Term::L4Src(proto, p) } else { Term::L4Dst(proto, p) })
                }
                ("in", Some("port")) => Some(Term::InPort(num(third.as_deref(), "in port", 0xFFFF)? as u16)),
                _ => {
                    return Err(FilterError(format!(
                        "{:?} is not a condition; use eth type N, ip src|dst A.B.C.D[/LEN], ip proto N, udp|tcp [src|dst N], in port N, joined by `and`",
                        part.join(" ")
                    )))
                }
            };
            let want = if t.is_none() || second.is_none() { 1 } else { 3 };
            if part.len() != want {
                return Err(FilterError(format!("{:?}: unexpected words after the condition (missing `and`?)", part.join(" "))));
            }
            terms.extend(t);
        }
        Ok(TraceFilter { terms, text: words.join(" ") })
    }

    /// The expression, words normalised.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Whether a frame received on `port` matches. Untagged Ethernet, IPv4 (L4 ports of the
    /// first fragment only).
    pub fn matches(&self, frame: &[u8], port: PortId) -> bool {
        let h = Headers::of(frame);
        self.terms.iter().all(|t| match *t {
            Term::EthType(e) => h.eth_type == Some(e),
            Term::IpSrc(a, m) => h.ip.is_some_and(|ip| ip.src & m == a),
            Term::IpDst(a, m) => h.ip.is_some_and(|ip| ip.dst & m == a),
            Term::IpProto(p) => h.ip.is_some_and(|ip| ip.proto == p),
            Term::L4Src(p, v) => h.ip.is_some_and(|ip| ip.proto == p && ip.ports.is_some_and(|(s, _)| s == v)),
            Term::L4Dst(p, v) => h.ip.is_some_and(|ip| ip.proto == p && ip.ports.is_some_and(|(_, d)| d == v)),
            Term::InPort(q) => port == q,
        })
    }
}

#[derive(Clone, Copy)]
struct Ip {
    src: u32,
    dst: u32,
    proto: u8,
    ports: Option<(u16, u16)>,
}

/// The headers a filter and a trace's first line look at.
struct Headers {
    eth_type: Option<u16>,
    ip: Option<Ip>,
}

impl Headers {
    fn of(f: &[u8]) -> Headers {
        let eth_type = (f.len() >= 14).then(|| u16::from_be_bytes([f[12], f[13]]));
        let ip = (eth_type == Some(0x0800) && f.len() >= 34 && f[14] >> 4 == 4).then(|| {
            let ihl = (f[14] & 0x0F) as usize * 4;
            let proto = f[23];
            let first_fragment = u16::from_be_bytes([f[20], f[21]]) & 0x1FFF == 0;
            let at = 14 + ihl;
            let ports = (ihl >= 20 && first_fragment && (proto == 6 || proto == 17) && f.len() >= at + 4)
                .then(|| (u16::from_be_bytes([f[at], f[at + 1]]), u16::from_be_bytes([f[at + 2], f[at + 3]])));
            let u32_at = |i: usize| u32::from_be_bytes([f[i], f[i + 1], f[i + 2], f[i + 3]]);
            Ip { src: u32_at(26), dst: u32_at(30), proto, ports }
        });
        Headers { eth_type, ip }
    }

    /// One line: `eth 02:..:01 > 02:..:02 type 0x0800, ipv4 10.0.0.1 > 10.0.0.2 proto 17, udp 4000 > 7070`.
    fn summary(f: &[u8]) -> String {
        let h = Headers::of(f);
        let Some(et) = h.eth_type else { return format!("runt frame of {} bytes", f.len()) };
        let mac = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<Vec<_>>().join(":");
        let mut s = format!("eth {} > {} type {et:#06x}", mac(&f[6..12]), mac(&f[0..6]));
        if let Some(ip) = h.ip {
            s += &format!(", ipv4 {} > {} proto {}", std::net::Ipv4Addr::from(ip.src), std::net::Ipv4Addr::from(ip.dst), ip.proto);
            if let Some((a, b)) = ip.ports {
                s += &format!(", {} {a} > {b}", if ip.proto == 17 { "udp" } else { "tcp" });
            }
        }
        s
    }
}

/// A session to arm on a pipe: which packets, and how many at most (per pipe).
#[derive(Clone, Debug)]
pub struct TraceSession {
    pub filter: TraceFilter,
    pub limit: u32,
}

/// One thing a traced packet did. Objects are program-local indices; [`Record::to_json`]
/// names them.
#[derive(Clone, Debug)]
pub enum Event {
    /// Ingress took the frame: its port and length, the program the parser's classification
    /// gave it (None: ordinary traffic, the base program only), its headers in one line.
    Received {
        port: PortId,
        len: u32,
        owner: Option<u8>,
        headers: String,
    },
    /// A pass of `program` begins (egress passes: the port the copy leaves by).
    Pass {
        program: u8,
        gress: Gress,
        recirculations: u8,
        port: PortId,
        rid: u16,
        clone: bool,
    },
    Table {
        program: u8,
        table: u16,
        key: Box<[u8]>,
        hit: bool,
        action: u16,
        params: Box<[u64]>,
    },
    Selector {
        program: u8,
        profile: u16,
        action: u16,
        params: Box<[u64]>,
    },
    Register {
        program: u8,
        register: u16,
        index: u32,
        before: u64,
        after: u64,
    },
    Memory {
        program: u8,
        memory: u16,
        word: u32,
        before: Box<[u8]>,
        after: Box<[u8]>,
    },
    Hash {
        program: u8,
        unit: u16,
        value: u32,
    },
    Digest {
        program: u8,
        digest: u16,
    },
    Violation {
        program: u8,
        kind: Violation,
    },
    /// What the traffic manager is told after ingress.
    IngressResult {
        egress_port: PortId,
        mcast: Option<(u16, Vec<PortId>)>,
        clone: Option<(u16, Vec<PortId>)>,
        drop: Option<(DropCode, Option<u8>)>,
    },
    /// Dropped after ingress, in the traffic manager or in egress.
    Drop {
        code: DropCode,
        program: Option<u8>,
    },
    /// Sent out of a port.
    Transmit {
        port: PortId,
        len: u32,
    },
}

/// The events of one traced packet and its copies, in the order they happened in a pipe.
#[derive(Clone, Debug)]
pub struct Record {
    pub id: u16,
    pub events: Vec<Event>,
    /// More than [`MAX_EVENTS`] events happened; the later ones are not kept.
    pub truncated: bool,
    pub(crate) last_ns: u64,
}

/// What a take returns: the complete records, and how many packets matched and were
/// skipped (records full) so far.
#[derive(Clone, Debug, Default)]
pub struct TraceTake {
    pub records: Vec<Record>,
    pub matched: u64,
    pub skipped: u64,
    pub armed: bool,
}

impl TraceTake {
    /// Add another pipe's take: records of the same id (a packet whose copies left by
    /// ports of several pipes) are joined.
    pub fn merge(&mut self, other: TraceTake) {
        self.matched += other.matched;
        self.skipped += other.skipped;
        self.armed |= other.armed;
        for r in other.records {
            match self.records.iter_mut().find(|x| x.id == r.id) {
                Some(x) => {
                    x.events.extend(r.events);
                    x.truncated |= r.truncated;
                }
                None => self.records.push(r),
            }
        }
    }
}

/// A pipe's trace state while a session is armed.
pub(crate) struct Tracer {
    filter: TraceFilter,
    left: u32,
    /// Ids this pipe hands out: `first + k * stride` (pipes never share one).
    next: u32,
    first: u16,
    stride: u16,
    pub(crate) records: Vec<Record>,
    matched: u64,
    skipped: u64,
}

impl Tracer {
    pub(crate) fn new(s: TraceSession, pipe: u8, pipes: u8) -> Tracer {
        Tracer {
            filter: s.filter,
            left: s.limit,
            next: 0,
            first: pipe as u16 + 1,
            stride: pipes.max(1) as u16,
            records: Vec::new(),
            matched: 0,
            skipped: 0,
        }
    }

    /// A frame received on `port`: its trace id if it is to be traced (0 if not).
    pub(crate) fn start(&mut self, frame: &[u8], port: PortId, owner: Option<u8>, now: u64) -> u16 {
        if self.left == 0 || !self.filter.matches(frame, port) {
            return 0;
        }
        self.matched += 1;
        if self.records.len() >= MAX_RECORDS {
            self.skipped += 1;
            return 0;
        }
        self.left -= 1;
        // Ids wrap; one still recording is skipped.
        let span = (u16::MAX - self.first) / self.stride + 1;
        let mut id = 0;
        for _ in 0..span {
            let k = self.next % span as u32;
            self.next = self.next.wrapping_add(1);
            let cand = self.first + k as u16 * self.stride;
            if !self.records.iter().any(|r| r.id == cand) {
                id = cand;
                break;
            }
        }
        if id == 0 {
            return 0;
        }
        let ev = Event::Received { port, len: frame.len() as u32, owner, headers: Headers::summary(frame) };
        self.records.push(Record { id, events: vec![ev], truncated: false, last_ns: now });
        id
    }

    /// Add an event to record `id` (made if this pipe has none: a copy's egress in
    /// another pipe).
    pub(crate) fn push(&mut self, id: u16, now: u64, ev: Event) {
        let r = match self.records.iter().rposition(|r| r.id == id) {
            Some(i) => &mut self.records[i],
            None => {
                self.records.push(Record { id, events: Vec::new(), truncated: false, last_ns: now });
                let n = self.records.len();
                &mut self.records[n - 1]
            }
        };
        r.last_ns = now;
        if r.events.len() >= MAX_EVENTS {
            r.truncated = true;
        } else {
            r.events.push(ev);
        }
    }

    /// Records quiet for `quiet_ns` at `now` and with no copy in `queued`.
    pub(crate) fn take(&mut self, now: u64, quiet_ns: u64, queued: &[u16]) -> TraceTake {
        let (done, keep) = std::mem::take(&mut self.records)
            .into_iter()
            .partition(|r| r.last_ns.saturating_add(quiet_ns) <= now && !queued.contains(&r.id));
        self.records = keep;
        TraceTake { records: done, matched: self.matched, skipped: self.skipped, armed: true }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn port_json(p: PortId) -> Value {
    match p {
        PORT_CPU => "cpu".into(),
        PORT_RECIRC => "recirculate".into(),
        PORT_NONE => Value::Null,
        p => p.into(),
    }
}

impl Record {
    /// The record with every object named from the program set's declarations (the same
    /// names and ids as the P4Info): `{"id", "truncated", "events": [{"event": kind, ...}]}`.
    pub fn to_json(&self, set: &ProgramSet) -> Value {
        let pname = |p: u8| (p as usize) < set.len();
        let prog = |p: u8| if pname(p) { Value::from(set.decl(p as usize).name.clone()) } else { Value::from(p) };
        let drop_name = |code: DropCode, p: Option<u8>| -> String {
            if let Some(n) = code.builtin_name() {
                return n.to_string();
            }
            p.filter(|&p| pname(p))
                .and_then(|p| set.decl(p as usize).drop_name(code).map(str::to_string))
                .unwrap_or_else(|| format!("code{}", code.0))
        };
        let events: Vec<Value> = self
            .events
            .iter()
            .map(|e| match e {
                Event::Received { port, len, owner, headers } => json!({
                    "event": "received", "port": port_json(*port), "len": len, "headers": headers,
                    "owner": owner.map(prog), "base": set.base().map(prog),
                }),
                Event::Pass { program, gress, recirculations, port, rid, clone } => json!({
                    "event": "pass", "program": prog(*program), "gress": gress, "recirculations": recirculations,
                    "port": port_json(*port), "rid": rid, "clone": clone,
                }),
                Event::Table { program, table, key, hit, action, params } => {
                    let d = pname(*program).then(|| set.decl(*program as usize));
                    let t = d.and_then(|d| d.tables.get(*table as usize));
                    let mut at = 0usize;
                    let fields: Vec<Value> = t
                        .map(|t| {
                            t.keys
                                .iter()
                                .map(|k| {
                                    let n = k.bits.div_ceil(8) as usize;
                                    let v = key.get(at..at + n).unwrap_or(&[]);
                                    at += n;
                                    json!({"name": k.name, "bits": k.bits, "kind": k.kind, "value": hex(v)})
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    let a = d.and_then(|d| d.actions.get(*action as usize));
                    let ps: Vec<Value> = a
                        .map(|a| a.params.iter().zip(params.iter()).map(|(p, v)| json!({"name": p.name, "bits": p.bits, "value": v})).collect())
                        .unwrap_or_default();
                    json!({
                        "event": "table", "program": prog(*program),
                        "table": t.map(|t| t.name.clone()), "table_id": pname(*program).then(|| set.ids(*program as usize).tables.get(*table as usize).copied()).flatten(),
                        "key": fields, "hit": hit, "action": a.map(|a| a.name.clone()), "params": ps,
                    })
                }
                Event::Selector { program, profile, action, params } => {
                    let d = pname(*program).then(|| set.decl(*program as usize));
                    let a = d.and_then(|d| d.actions.get(*action as usize));
                    let ps: Vec<Value> = a
                        .map(|a| a.params.iter().zip(params.iter()).map(|(p, v)| json!({"name": p.name, "bits": p.bits, "value": v})).collect())
                        .unwrap_or_default();
                    json!({
                        "event": "selector", "program": prog(*program),
                        "profile": d.and_then(|d| d.action_profiles.get(*profile as usize)).map(|p| p.name.clone()),
                        "action": a.map(|a| a.name.clone()), "params": ps,
                    })
                }
                Event::Register { program, register, index, before, after } => {
                    let r = pname(*program).then(|| set.decl(*program as usize)).and_then(|d| d.registers.get(*register as usize));
                    json!({
                        "event": "register", "program": prog(*program), "register": r.map(|r| r.name.clone()),
                        "register_id": pname(*program).then(|| set.ids(*program as usize).registers.get(*register as usize).copied()).flatten(),
                        "bits": r.map(|r| r.cell_bits), "index": index, "before": before, "after": after,
                    })
                }
                Event::Memory { program, memory, word, before, after } => json!({
                    "event": "memory", "program": prog(*program),
                    "memory": pname(*program).then(|| set.decl(*program as usize)).and_then(|d| d.memories.get(*memory as usize)).map(|m| m.name.clone()),
                    "word": word, "before": hex(before), "after": hex(after),
                }),
                Event::Hash { program, unit, value } => json!({
                    "event": "hash", "program": prog(*program),
                    "unit": pname(*program).then(|| set.decl(*program as usize)).and_then(|d| d.hash_units.get(*unit as usize)).map(|h| h.name.clone()),
                    "value": value,
                }),
                Event::Digest { program, digest } => json!({
                    "event": "digest", "program": prog(*program),
                    "digest": pname(*program).then(|| set.decl(*program as usize)).and_then(|d| d.digests.get(*digest as usize)).map(|g| g.name.clone()),
                }),
                Event::Violation { program, kind } => json!({"event": "violation", "program": prog(*program), "kind": kind.name()}),
                Event::IngressResult { egress_port, mcast, clone, drop } => json!({
                    "event": "ingress_result",
                    "egress_port": port_json(*egress_port),
                    "multicast": mcast.as_ref().map(|(g, p)| json!({"group": g, "ports": p})),
                    "clone": clone.as_ref().map(|(s, p)| json!({"session": s, "ports": p.iter().map(|p| port_json(*p)).collect::<Vec<_>>()})),
                    "drop": drop.map(|(c, p)| json!({"reason": drop_name(c, p), "program": p.map(prog)})),
                }),
                Event::Drop { code, program } => json!({"event": "drop", "reason": drop_name(*code, *program), "program": program.map(prog)}),
                Event::Transmit { port, len } => json!({"event": "transmit", "port": port_json(*port), "len": len}),
            })
            .collect();
        json!({"id": self.id, "truncated": self.truncated, "events": events})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(proto: u8, src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 8];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[23] = proto;
        f[26..30].copy_from_slice(&src);
        f[30..34].copy_from_slice(&dst);
        f[34..36].copy_from_slice(&sport.to_be_bytes());
        f[36..38].copy_from_slice(&dport.to_be_bytes());
        f
    }

    #[test]
    fn filters_match_what_they_say() {
        let u = frame(17, [10, 0, 0, 1], [10, 0, 0, 2], 4000, 7070);
        let t = frame(6, [10, 0, 0, 1], [10, 0, 1, 9], 4000, 7070);
        let m = |e: &str, f: &[u8], p: u16| TraceFilter::parse(e).expect(e).matches(f, p);
        assert!(m("udp dst 7070", &u, 0));
        assert!(!m("udp dst 7070", &t, 0), "a TCP segment to 7070 is not UDP");
        assert!(m("tcp dst 7070", &t, 0));
        assert!(m("udp src 4000 and ip src 10.0.0.1 and ip dst 10.0.0.2", &u, 0));
        assert!(!m("udp src 4001", &u, 0));
        assert!(m("ip dst 10.0.1.0/24", &t, 0) && !m("ip dst 10.0.1.0/24", &u, 0));
        assert!(m("eth type 0x0800 and in port 3", &u, 3) && !m("in port 3", &u, 2));
        assert!(m("ip proto 6", &t, 0) && m("udp", &u, 0) && !m("tcp", &u, 0));
        assert!(m("any", &[0u8; 3], 0) && !m("eth type 0x0800", &[0u8; 3], 0));
        // A later fragment has no ports.
        let mut frag = u.clone();
        frag[21] = 1;
        assert!(!m("udp dst 7070", &frag, 0) && m("ip src 10.0.0.1", &frag, 0));
    }

    #[test]
    fn bad_expressions_say_why() {
        for bad in [
            "",
            "udp dst",
            "udp dst x",
            "udp dst 70000",
            "ip src 10.0.0",
            "ip src 1.2.3.4/33",
            "foo",
            "udp dst 1 and",
            "and udp",
            "udp dst 1 tcp dst 2",
            "eth type 0x10000",
        ] {
            let e = TraceFilter::parse(bad).expect_err(bad);
            assert!(!e.0.is_empty() && !e.0.contains('\n'), "{bad}: {e}");
        }
        assert_eq!(TraceFilter::parse("UDP  dst 7070 AND in port 1").expect("ok").text(), "UDP dst 7070 AND in port 1");
    }
}
