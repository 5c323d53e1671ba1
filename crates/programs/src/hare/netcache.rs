//! `netcache`: the NetCache baseline (Jin et al., SOSP 2017) as Hare §III describes it, on
//! the same wire format and value layout as `hare`, so the same trace runs against both.
//!
//! - one exact-match table `cache` holds whole keys (so a key is limited to one stage's
//!   match width: 127 bytes beside the key length);
//! - per-slot hit counters (`cache_hits`, NetCache's precise counters for cached keys) and
//!   valid bits (write-through: a PUT invalidates, the server's reply refreshes);
//! - NOO-Stat on the switch: a count-min sketch of 4 rows x 256 counters over GETs that
//!   miss, and a Bloom filter of 3 x 512 bits so a hot key is reported once; a key whose
//!   estimate reaches the report threshold is cloned to the controller (session
//!   [`REPORT_SESSION`]) while the GET goes on to its server;
//! - the controller changes the table and the values through the control plane (table and
//!   register writes), NetCache's switch-OS path.

use pisa::decl::TableSpec;
use pisa::salu::common::CountSat;
use pisa::TraceMode;
use pisa::{ActionId, DropCode, Gress, HashAlgo, HashUnit, MatchKind, Pass, Program, ProgramBuilder, ProgramDecl, Table};
use pisa::{OutputSource, Pred, Salu, SaluOutput, SaluProgram, Src, Update};
use wire::hare::{Op, Packet, HEADER_LEN, PORT_CLIENT, PORT_SERVER};

use super::kv::ValueStore;
use super::oostat::{state, StateManager};
use super::L2_L4_LEN;

/// Clone session of hot-key reports to the controller.
pub const REPORT_SESSION: u16 = 90;
/// Rows and width of the count-min sketch.
pub const CMS_ROWS: usize = 4;
pub const CMS_WIDTH: u32 = 256;
/// Hash functions and bits per hash of the Bloom filter.
pub const BLOOM_HASHES: usize = 3;
pub const BLOOM_BITS: u32 = 512;
const FIRST_STAGE: u8 = 1;

/// What a NetCache switch is built for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetCacheConfig {
    pub key_bytes: usize,
    pub value_bytes: usize,
    pub slots: u32,
    /// A key is reported when its count-min estimate reaches this (the paper: 384).
    pub report_threshold: u32,
}

impl Default for NetCacheConfig {
    fn default() -> Self {
        NetCacheConfig { key_bytes: 80, value_bytes: 64, slots: 8192, report_threshold: 384 }
    }
}

/// A Bloom filter bit: set it, return it as it was.
#[derive(Clone, Copy)]
struct TestAndSet;
impl SaluProgram<bool, (), bool> for TestAndSet {
    const SALU: Salu =
        Salu { conds: &[], lo: &[Update::set(Pred::ALWAYS, Src::K(1))], hi: &[], out: &[SaluOutput::always(OutputSource::OldLo)] };
}

/// The NetCache program.
pub struct NetCache {
    decl: ProgramDecl,
    cfg: NetCacheConfig,
    cache: Table,
    a_hit: ActionId,
    valid: StateManager,
    hits: pisa::SaluAction<u32, (), u32, CountSat>,
    cms: Vec<(HashUnit, pisa::SaluAction<u32, (), u32, CountSat>)>,
    bloom: Vec<(HashUnit, pisa::SaluAction<bool, (), bool, TestAndSet>)>,
    values: ValueStore,
    d_unknown_op: DropCode,
    d_key_field: DropCode,
}

impl NetCache {
    pub fn new() -> NetCache {
        NetCache::with_config(NetCacheConfig::default())
    }

    pub fn with_config(cfg: NetCacheConfig) -> NetCache {
        assert!(cfg.key_bytes >= 1 && cfg.key_bytes <= 255 && cfg.value_bytes.is_multiple_of(4) && cfg.value_bytes <= 252);
        let mut b = ProgramBuilder::new(
            "netcache",
            "NetCache baseline: one-stage key MAT, count-min + Bloom hot-key reports, write-through values",
        );
        b.parser(
            (L2_L4_LEN + HEADER_LEN + cfg.key_bytes + cfg.value_bytes) as u32,
            &[("ethernet", 112), ("ipv4", 160), ("udp", 64), ("hare", HEADER_LEN as u32 * 8)],
        )
        .metadata_bits(16 + 32 + 8 + super::ARRIVAL_MACS_BITS)
        .classify(pisa::ClassifyRule {
            ethertype: Some(0x0800),
            ip_protocol: Some(17),
            udp_dst_port: Some((PORT_SERVER, PORT_CLIENT)),
            ..Default::default()
        });
        let a_hit = b.action("cache_hit", &[("slot", 16)], "the key is cached in this slot");
        let a_miss = b.action("cache_miss", &[], "not cached");
        let key_bits = cfg.key_bytes as u32 * 8;
        let keys = [("hdr.hare.key_len", 8, MatchKind::Exact), ("hdr.hare.key", key_bits, MatchKind::Exact)];
        let cache = b.table(TableSpec {
            name: "cache",
            doc: "cached keys -> slot (whole key in one stage)",
            gress: Gress::Ingress,
            stage: FIRST_STAGE,
            size: cfg.slots,
            keys: &keys,
            actions: &[a_hit, a_miss],
            default_action: (a_miss, &[]),
            const_default: true,
        });
        let valid = StateManager::declare(&mut b, FIRST_STAGE + 1, cfg.slots);
        let hr =
            b.register::<u32>("cache_hits", Gress::Ingress, FIRST_STAGE + 1, cfg.slots, "hits per cached key (read by the controller)");
        let hits = b.register_action_salu(hr, "count", CountSat);
        let algos = [HashAlgo::Crc32, HashAlgo::Crc32c, HashAlgo::Crc32Mpeg2, HashAlgo::Crc32Bzip2];
        let cms = (0..CMS_ROWS)
            .map(|i| {
                let h = b.hash_unit(&format!("cms_hash_{i}"), Gress::Ingress, FIRST_STAGE + 2, algos[i], 8);
                let r = b.register::<u32>(
                    &format!("cms_{i}"),
                    Gress::Ingress,
                    FIRST_STAGE + 2,
                    CMS_WIDTH,
                    "count-min sketch row (GETs of uncached keys)",
                );
                (h, b.register_action_salu(r, "count", CountSat))
            })
            .collect();
        let balgos = [HashAlgo::Crc16, HashAlgo::Crc16Xmodem, HashAlgo::Crc16Kermit];
        let bloom = (0..BLOOM_HASHES)
            .map(|i| {
                let h = b.hash_unit(&format!("bloom_hash_{i}"), Gress::Ingress, FIRST_STAGE + 3, balgos[i], 9);
                let r =
                    b.register::<bool>(&format!("bloom_{i}"), Gress::Ingress, FIRST_STAGE + 3, BLOOM_BITS, "Bloom filter of reported keys");
                (h, b.register_action_salu(r, "test_and_set", TestAndSet))
            })
            .collect();
        let values = ValueStore::declare(
            &mut b,
            "value",
            cfg.value_bytes,
            cfg.slots,
            &mut super::kv::Packer { stage: FIRST_STAGE + 3, free: 1, per_stage: 4 },
        );
        let d_unknown_op = b.drop_reason("netcache_unknown_op");
        let d_key_field = b.drop_reason("netcache_key_field");
        if cfg.key_bytes > 127 {
            b.note("NetCache matches the whole key in one stage: keys over 127 bytes do not fit its MAT");
        }
        let decl = b.build().expect("netcache declaration is valid");
        NetCache { decl, cfg, cache, a_hit, valid, hits, cms, bloom, values, d_unknown_op, d_key_field }
    }

    pub fn config(&self) -> &NetCacheConfig {
        &self.cfg
    }
}

impl Default for NetCache {
    fn default() -> Self {
        Self::new()
    }
}

impl Program for NetCache {
    fn decl(&self) -> &ProgramDecl {
        &self.decl
    }
    pisa::controls_by_trace_mode!(ingress);
}

/// The control blocks, once, for both trace modes (see `Program::ingress_untraced`).
impl NetCache {
    #[inline(always)]
    fn ingress_control<M: TraceMode>(&self, pass: &mut Pass<'_, M>) {
        let kb = self.cfg.key_bytes;
        let vb = self.cfg.value_bytes;
        let hdr = pass.hdr();
        if hdr.len() < L2_L4_LEN + HEADER_LEN || !wire::is_ipv4_udp(hdr) {
            pass.drop(DropCode::MALFORMED);
            return;
        }
        let (op, key_len, kf, vlen) = match Packet::new_checked(&hdr[L2_L4_LEN..]) {
            Ok(p) => (p.op(), p.key_len(), p.key_field() as usize, p.value_len() as usize),
            Err(_) => {
                pass.drop(DropCode::MALFORMED);
                return;
            }
        };
        let Some(op) = op else {
            pass.drop(self.d_unknown_op);
            return;
        };
        if !matches!(op, Op::Get | Op::Put | Op::PutReply) {
            return; // replies and others pass as ordinary traffic
        }
        if kf != kb {
            pass.drop(self.d_key_field);
            return;
        }
        let mut key = [0u8; 257];
        key[0] = key_len;
        key[1..1 + kb].copy_from_slice(&pass.hdr()[L2_L4_LEN + HEADER_LEN..L2_L4_LEN + HEADER_LEN + kb]);
        let r = pass.apply(&self.cache, &key[..1 + kb]);
        let slot = if r.hit && r.action == self.a_hit { Some(r.param(0) as u16) } else { None };
        let voff = L2_L4_LEN + HEADER_LEN + kb;
        match (op, slot) {
            (Op::Get, Some(s)) if s as u32 >= self.cfg.slots => {}
            (Op::Get, Some(s)) if pass.execute(&self.valid.check, s as u32, ()) == state::VALID => {
                pass.execute(&self.hits, s as u32, ());
                self.values.serve_get(pass, s, kb, vb);
            }
            (Op::Get, None) => {
                let mut est = u32::MAX;
                for (h, a) in &self.cms {
                    let i = pass.hash(h, &key[..1 + kb]);
                    est = est.min(pass.execute(a, i, ()).get());
                }
                if est >= self.cfg.report_threshold {
                    let mut seen = true;
                    for (h, a) in &self.bloom {
                        let i = pass.hash(h, &key[..1 + kb]);
                        seen &= pass.execute(a, i, ()).get();
                    }
                    if !seen {
                        pass.clone_ingress(REPORT_SESSION);
                    }
                }
            }
            (Op::Put, Some(s)) if (s as u32) < self.cfg.slots => {
                pass.execute(&self.valid.invalidate, s as u32, ());
            }
            (Op::PutReply, Some(s)) if (s as u32) < self.cfg.slots && vlen == vb => {
                pass.execute(&self.valid.revalidate, s as u32, ());
                self.values.store(pass, s, voff, vb);
            }
            _ => {}
        }
    }
}
