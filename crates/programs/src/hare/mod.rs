//! `hare`: hot-item offloading for a key-value store (Hare, IEEE/ACM ToN 2025).
//!
//! - [`emat`]: K1, the e-MAT hit-check across M stages, and its control-plane updater.
//! - [`oostat`]: OO-Stat counters and the state manager, both driven by packets.
//! - [`app`]: K3, the [`app::HareApp`] trait an application implements; [`HareProgram`]
//!   is the generic program around it (parsing, e-MAT, state manager, OO-Stat, control).
//! - [`kv`]: the KV store as a `HareApp` (values in register arrays); [`lock`]: the lock
//!   manager as a `HareApp`.
//!
//! Queries (UDP to [`wire::hare::PORT_SERVER`]): a GET whose key is offloaded and valid is
//! answered by the switch, turning the request into the reply; everything else goes on to
//! its server. PUTs are write-through: the switch invalidates its copy, the server's PUT
//! reply (carrying key and value) refreshes it. Control packets (from the CPU port or a
//! port the control plane allows in `control_ports`) fetch and clear OO-Stat, set slot
//! states and move application data; they come back to their sender marked done.
//!
//! Layout for the default configuration on tofino1 (`inswitch resources hare`): e-MAT in
//! ingress stages 1..=M, the state manager in the next stage, then OO-Stat and the value
//! arrays, four per stage.

pub mod app;
pub mod dyso;
pub mod emat;
pub mod kv;
pub mod lock;
pub mod netcache;
pub mod oostat;

use pisa::decl::TableSpec;
use pisa::{ActionId, DropCode, Gress, MatchKind, Pass, Program, ProgramBuilder, ProgramDecl, Table, TraceMode, PORT_CPU, PORT_RECIRC};
use wire::hare::{Op, Packet, FLAG_DONE, HEADER_LEN, PORT_CLIENT, PORT_SERVER};
use wire::L2_L4_LEN;

use app::{DataMv, HareApp, QueryHit};
use emat::{Emat, EmatShape};
use oostat::{state, OoStat, StateManager};

/// Bridged metadata of an aging fetch's second pass: byte 0 [`AGE_PASS`], bytes 2-3 the
/// port the control packet came in by, 4-7 what [`oostat::Age`] takes away.
const AGE_BRIDGED: u32 = 8;
const AGE_PASS: u8 = 1;

/// Metadata bits of the arriving Ethernet addresses, which a reply is addressed from
/// ([`pisa::Pass::arrival_macs`]).
pub const ARRIVAL_MACS_BITS: u32 = 96;

/// First ingress stage Hare uses (stage 0 holds the base program's L2 tables).
pub const FIRST_STAGE: u8 = 1;

/// What a Hare switch is built for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HareConfig {
    /// Width of the key field (bytes).
    pub key_bytes: usize,
    /// Value size (bytes, a multiple of 4).
    pub value_bytes: usize,
    /// Objects that can be offloaded at once (entries per MAT, cells per array).
    pub slots: u32,
    /// Key bytes per MAT; `None`: as wide as the stage's exact-match crossbar allows
    /// (1024 bits on Tofino, less the index or key length that links the MATs).
    pub segment_bytes: Option<usize>,
}

impl Default for HareConfig {
    /// 128-byte keys (file paths, IoT dataset identifiers) and 64-byte values: the largest
    /// pair the tofino1 parser reaches in one pass (58 + 128 + 64 = 250 of 256 bytes).
    fn default() -> Self {
        HareConfig { key_bytes: 128, value_bytes: 64, slots: 8192, segment_bytes: None }
    }
}

impl HareConfig {
    /// The e-MAT's segments: with the default width, the first MAT takes 127 bytes beside
    /// the 8-bit key length and the others 126 bytes beside the 16-bit index.
    pub fn shape(&self) -> EmatShape {
        match self.segment_bytes {
            Some(s) => EmatShape::new(self.key_bytes, s),
            None => {
                let mut segments = Vec::new();
                let mut left = self.key_bytes;
                let mut width = (1024 - 8) / 8;
                while left > 0 {
                    let s = left.min(width);
                    segments.push(s);
                    left -= s;
                    width = (1024 - emat::INDEX_BITS as usize) / 8;
                }
                EmatShape { key_bytes: self.key_bytes, segments }
            }
        }
    }

    /// Bytes the parser must reach: headers, key field and value.
    pub fn parse_depth(&self) -> usize {
        L2_L4_LEN + HEADER_LEN + self.key_bytes + self.value_bytes
    }
}

/// The generic Hare program (K3): e-MAT, state manager, OO-Stat and control-packet
/// dispatch, around application `A`'s data and query-hit processing.
pub struct HareProgram<A: HareApp> {
    decl: ProgramDecl,
    cfg: HareConfig,
    emat: Emat,
    control_ports: Table,
    a_allow: ActionId,
    states: StateManager,
    oo: OoStat,
    app: A,
    d_unknown_op: DropCode,
    d_key_field: DropCode,
    d_control_denied: DropCode,
    d_bad_slot: DropCode,
}

/// The Hare KV program.
pub type Hare = HareProgram<kv::KvApp>;

impl<A: HareApp> HareProgram<A> {
    /// The application's default configuration.
    pub fn new() -> Self {
        Self::with_config(A::default_config())
    }

    /// A Hare switch for `cfg`.
    pub fn with_config(cfg: impl Into<HareConfig>) -> Self {
        let cfg: HareConfig = cfg.into();
        A::check_config(&cfg);
        assert!(cfg.key_bytes >= 1 && cfg.key_bytes <= 255 && cfg.value_bytes.is_multiple_of(4) && cfg.value_bytes <= 252);
        assert!(cfg.slots >= 1 && cfg.slots <= 1 << emat::INDEX_BITS);
        let mut b = ProgramBuilder::new(A::NAME, A::DOC);
        b.parser(cfg.parse_depth() as u32, &[("ethernet", 112), ("ipv4", 160), ("udp", 64), ("hare", HEADER_LEN as u32 * 8)])
            // 96: the arriving MACs, copied by the parser for the reply (`back_to_sender`).
            .metadata_bits(16 + ARRIVAL_MACS_BITS + A::METADATA_BITS)
            .bridged_bytes(AGE_BRIDGED)
            // An aging fetch takes a second pass (an application may declare more).
            .max_recirculations(Some(1))
            .classify(pisa::ClassifyRule {
                ethertype: Some(0x0800),
                ip_protocol: Some(17),
                udp_dst_port: Some((PORT_SERVER, PORT_CLIENT)),
                ..Default::default()
            });
        let shape = cfg.shape();
        let m = shape.mats() as u8;
        let emat = Emat::declare(&mut b, shape, FIRST_STAGE, cfg.slots);
        let st_stage = FIRST_STAGE + m;
        let a_allow = b.action("allow_control", &[], "this port may send control packets");
        let a_deny = b.action("deny_control", &[], "control packets from this port are dropped");
        let control_ports = b.table(TableSpec {
            name: "control_ports",
            doc: "ports of backend servers allowed to move application data and set states",
            gress: Gress::Ingress,
            stage: st_stage,
            size: 64,
            keys: &[("ig_intr_md.ingress_port", 9, MatchKind::Exact)],
            actions: &[a_allow, a_deny],
            default_action: (a_deny, &[]),
            const_default: false,
        });
        let states = StateManager::declare(&mut b, st_stage, cfg.slots);
        let oo = OoStat::declare(&mut b, st_stage + 1, cfg.slots);
        let app = A::define_appdata(&mut b, &cfg, &mut kv::Packer { stage: st_stage + 1, free: 3, per_stage: 4 });
        let drop = |b: &mut ProgramBuilder, what: &str| b.drop_reason(&format!("{}_{what}", A::DROP_PREFIX));
        let d_unknown_op = drop(&mut b, "unknown_op");
        let d_key_field = drop(&mut b, "key_field");
        let d_control_denied = drop(&mut b, "control_denied");
        let d_bad_slot = drop(&mut b, "bad_slot");
        b.note("OO-Stat aging (StatFetch with status 2) takes two passes: fetch returns the count c, the packet recirculates with c - c/2 in its bridged metadata and age subtracts it (a stateful ALU has no shift; hits counted in between are kept)");
        let decl = b.build().expect("hare declaration is valid");
        HareProgram { decl, cfg, emat, control_ports, a_allow, states, oo, app, d_unknown_op, d_key_field, d_control_denied, d_bad_slot }
    }

    /// The configuration.
    pub fn config(&self) -> &HareConfig {
        &self.cfg
    }

    fn query<M: TraceMode>(&self, pass: &mut Pass<'_, M>, op: Op) {
        let kb = self.cfg.key_bytes;
        let (key_len, key_field_ok, value_len) = {
            let p = Packet::new_unchecked(&pass.hdr()[L2_L4_LEN..]);
            (p.key_len(), p.key_field() as usize == kb, p.value_len() as usize)
        };
        if !key_field_ok || !A::query_ok(&self.cfg, value_len) {
            pass.drop(self.d_key_field);
            return;
        }
        let mut key = [0u8; 256];
        key[..kb].copy_from_slice(&pass.hdr()[L2_L4_LEN + HEADER_LEN..L2_L4_LEN + HEADER_LEN + kb]);
        let Some(slot) = self.emat.lookup(pass, key_len, &key[..kb]) else {
            return; // a miss: on to the server (the base program's decision)
        };
        if slot as u32 >= self.cfg.slots {
            return;
        }
        let hit = QueryHit { slot, voff: L2_L4_LEN + HEADER_LEN + kb, value_len, states: &self.states, oo: &self.oo };
        self.app.apply_queryhit(pass, &self.cfg, op, &hit);
    }

    fn control<M: TraceMode>(&self, pass: &mut Pass<'_, M>, op: Op) {
        let port = pass.ingress_port();
        // The second pass of an aging fetch: this program's own packet (bridged metadata
        // is zero on a packet that enters by a port).
        let aging = port == PORT_RECIRC && pass.bridged()[0] == AGE_PASS;
        let allowed = aging || port == PORT_CPU || pass.apply_u64(&self.control_ports, port as u64).action == self.a_allow;
        if !allowed {
            pass.drop(self.d_control_denied);
            return;
        }
        let kb = self.cfg.key_bytes;
        let (slot, status, kf, vlen, aux) = {
            let p = Packet::new_unchecked(&pass.hdr()[L2_L4_LEN..]);
            (p.hit_index(), p.status(), p.key_field() as usize, p.value_len() as usize, p.aux())
        };
        if slot as u32 >= self.cfg.slots {
            pass.drop(self.d_bad_slot);
            return;
        }
        let voff = L2_L4_LEN + HEADER_LEN + kf;
        let end = voff + vlen;
        match op {
            Op::StatFetch => {
                if vlen != 4 {
                    pass.drop(DropCode::MALFORMED);
                    return;
                }
                if aging {
                    // Pass 2: take away what pass 1 computed; the count is in the packet.
                    let b = pass.bridged();
                    let by = u32::from_ne_bytes([b[4], b[5], b[6], b[7]]);
                    let to = u16::from_ne_bytes([b[2], b[3]]);
                    pass.execute(&self.oo.age, slot as u32, by);
                    let h = pass.hdr_mut();
                    h[L2_L4_LEN + wire::hare::field::FLAGS] |= FLAG_DONE;
                    reply_to(pass, end, to);
                    return;
                }
                let c = match status {
                    1 => pass.execute(&self.oo.fetch_clear, slot as u32, ()),
                    _ => pass.execute(&self.oo.fetch, slot as u32, ()),
                };
                pass.hdr_mut()[voff..voff + 4].copy_from_slice(&c.get().to_be_bytes());
                if status == 2 {
                    // Aging: halve the count. No shift in a stateful ALU: the packet
                    // computes c - c/2 on its metadata and subtracts it in a second pass.
                    let b = pass.bridged_mut();
                    b[0] = AGE_PASS;
                    b[2..4].copy_from_slice(&port.to_ne_bytes());
                    b[4..8].copy_from_slice(&oostat::age_by(c.get()).to_ne_bytes());
                    // The addresses it arrived with, for pass 2's reply (routing may have
                    // rewritten them on this pass).
                    let arrival = *pass.arrival_macs();
                    pass.hdr_mut()[..12].copy_from_slice(&arrival);
                    pass.recirculate();
                    return;
                }
            }
            Op::StateSet => {
                if status > state::REPLACING {
                    pass.drop(DropCode::MALFORMED);
                    return;
                }
                pass.execute(&self.states.set, slot as u32, status);
            }
            Op::DataMvToSwitch | Op::DataMvToServer => {
                if kf != kb || !self.app.apply_datamv(pass, &self.cfg, op, &DataMv { slot, aux, voff, vlen }) {
                    pass.drop(DropCode::MALFORMED);
                    return;
                }
            }
            _ => {
                pass.drop(self.d_unknown_op);
                return;
            }
        }
        let h = pass.hdr_mut();
        h[L2_L4_LEN + wire::hare::field::FLAGS] |= FLAG_DONE;
        back_to_sender(pass, end);
    }
}

/// Turn the packet back to its sender as `len` header bytes, out of the port it came in
/// by: addressed to the neighbour it arrived from (also when routed, see
/// [`crate::reply::address_reply`]), IPs and ports swapped, a fresh TTL, the lengths and
/// the IPv4 checksum fixed (the UDP checksum is left out, 0).
pub(crate) fn back_to_sender<M: TraceMode>(pass: &mut Pass<'_, M>, len: usize) {
    let port = pass.ingress_port();
    reply_to(pass, len, port);
}

/// [`back_to_sender`] for a packet that came in by `port` (on an earlier pass).
fn reply_to<M: TraceMode>(pass: &mut Pass<'_, M>, len: usize, port: pisa::PortId) {
    if !pass.resize_hdr(len) {
        return;
    }
    pass.truncate_payload();
    // To the neighbour the request came from: on a ToR that routed it, the base program
    // has already rewritten the MACs (next hop's, router's), so the arriving ones.
    let arrival = *pass.arrival_macs();
    let h = pass.hdr_mut();
    crate::reply::address_reply(h, 34, &arrival);
    crate::reply::fix_lengths(h, len);
    if port == PORT_CPU {
        pass.to_cpu();
    } else {
        pass.forward(port);
    }
}

impl<A: HareApp> Default for HareProgram<A> {
    fn default() -> Self {
        Self::new()
    }
}

impl<A: HareApp> Program for HareProgram<A> {
    fn decl(&self) -> &ProgramDecl {
        &self.decl
    }

    pisa::controls_by_trace_mode!(ingress);
}

/// The control block, once, for both trace modes (see `Program::ingress_untraced`).
impl<A: HareApp> HareProgram<A> {
    #[inline(always)]
    fn ingress_control<M: TraceMode>(&self, pass: &mut Pass<'_, M>) {
        let hdr = pass.hdr();
        // Fixed offsets: IPv4 without options.
        if hdr.len() < L2_L4_LEN + HEADER_LEN || !wire::is_ipv4_udp(hdr) {
            pass.drop(DropCode::MALFORMED);
            return;
        }
        let (op, flags) = match Packet::new_checked(&hdr[L2_L4_LEN..]) {
            Ok(p) => (p.op(), p.flags()),
            Err(_) => {
                pass.drop(DropCode::MALFORMED);
                return;
            }
        };
        match op {
            None => pass.drop(self.d_unknown_op),
            Some(op) if self.app.intercept(pass, op, flags, &self.states) => {}
            Some(op) if op.is_control() => {
                // Replies of control packets travel back as ordinary traffic.
                if flags & FLAG_DONE == 0 {
                    self.control(pass, op)
                }
            }
            Some(op) if A::is_query(op) => self.query(pass, op),
            Some(_) => {}
        }
    }
}

/// Parse `key=value` pairs after `name:`, separated by `,` or `:` (e.g.
/// `hare:key=80,value=64,slots=4096` or, where commas separate programs,
/// `hare:key=80:value=64:slots=4096`).
fn spec_params(spec: &str) -> Result<Vec<(String, usize)>, String> {
    let rest = spec.split_once(':').map(|x| x.1).unwrap_or("");
    rest.split([',', ':'])
        .filter(|s| !s.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').ok_or_else(|| format!("`{kv}`: expected name=number"))?;
            let n = v.trim().parse::<usize>().map_err(|_| format!("`{kv}`: not a number"))?;
            Ok((k.trim().to_string(), n))
        })
        .collect()
}

/// Whether `name` is a parameterized Hare-family program (`hare:...`, `netcache:...`, `dyso:...`).
pub fn is_spec(name: &str) -> bool {
    ["hare:", "netcache:", "dyso:", "hare_lock:"].iter().any(|p| name.starts_with(p))
}

/// A Hare-family program from a spec (`,` or `:` between parameters): `hare:key=B,value=B,slots=N[,seg=B]`,
/// `netcache:key=B,value=B,slots=N[,threshold=T]`, `dyso:key=B,value=B,rows=R,columns=C`.
/// Invalid specs give `None` (the caller reports the name as unknown).
pub fn by_spec(name: &str) -> Option<std::sync::Arc<dyn Program>> {
    let params = spec_params(name).ok()?;
    // A parameter the family does not take is an error, not silently ignored.
    let known: &[&str] = match name.split(':').next()? {
        "hare" => &["key", "value", "slots", "seg"],
        "hare_lock" => &["key", "slots"],
        "netcache" => &["key", "value", "slots", "threshold"],
        "dyso" => &["key", "value", "rows", "columns"],
        _ => return None,
    };
    if params.iter().any(|p| !known.contains(&p.0.as_ref())) {
        return None;
    }
    let get = |k: &str| params.iter().find(|p| p.0 == k).map(|p| p.1);
    let ok_kv = |kb: usize, vb: usize| (1..=255).contains(&kb) && vb.is_multiple_of(4) && (4..=252).contains(&vb);
    if name.starts_with("hare:") {
        let d = HareConfig::default();
        let cfg = HareConfig {
            key_bytes: get("key").unwrap_or(d.key_bytes),
            value_bytes: get("value").unwrap_or(d.value_bytes),
            slots: get("slots").unwrap_or(d.slots as usize) as u32,
            segment_bytes: get("seg"),
        };
        if !ok_kv(cfg.key_bytes, cfg.value_bytes) || cfg.slots == 0 || cfg.slots > 1 << 16 || cfg.segment_bytes == Some(0) {
            return None;
        }
        Some(std::sync::Arc::new(Hare::with_config(cfg)))
    } else if name.starts_with("hare_lock:") {
        let d = lock::LockConfig::default();
        let cfg = lock::LockConfig { key_bytes: get("key").unwrap_or(d.key_bytes), slots: get("slots").unwrap_or(d.slots as usize) as u32 };
        if !(1..=127).contains(&cfg.key_bytes) || cfg.slots == 0 || cfg.slots > 1 << 16 {
            return None;
        }
        Some(std::sync::Arc::new(lock::HareLock::with_config(cfg)))
    } else if name.starts_with("netcache:") {
        let d = netcache::NetCacheConfig::default();
        let cfg = netcache::NetCacheConfig {
            key_bytes: get("key").unwrap_or(d.key_bytes),
            value_bytes: get("value").unwrap_or(d.value_bytes),
            slots: get("slots").unwrap_or(d.slots as usize) as u32,
            report_threshold: get("threshold").unwrap_or(d.report_threshold as usize) as u32,
        };
        if !ok_kv(cfg.key_bytes, cfg.value_bytes) || cfg.slots == 0 || cfg.slots > 1 << 16 {
            return None;
        }
        Some(std::sync::Arc::new(netcache::NetCache::with_config(cfg)))
    } else if name.starts_with("dyso:") {
        let d = dyso::DysoConfig::default();
        let cfg = dyso::DysoConfig {
            key_bytes: get("key").unwrap_or(d.key_bytes),
            value_bytes: get("value").unwrap_or(d.value_bytes),
            rows: get("rows").unwrap_or(d.rows as usize) as u32,
            columns: get("columns").unwrap_or(d.columns),
        };
        if !ok_kv(cfg.key_bytes, cfg.value_bytes)
            || !cfg.key_bytes.is_multiple_of(4)
            || !cfg.rows.is_power_of_two()
            || cfg.rows > 1 << 16
            || cfg.columns == 0
            || cfg.columns > 16
        {
            return None;
        }
        Some(std::sync::Arc::new(dyso::Dyso::with_config(cfg)))
    } else {
        None
    }
}
