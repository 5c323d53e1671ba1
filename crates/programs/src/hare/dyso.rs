//! `dyso`: the DySO baseline (Song et al., IFIP Networking 2022) as Hare §III-A2 describes
//! it: the r-MAT, a matrix of register cells R rows x C columns. A key's row is a hash of
//! the key; each column compares the stored key with the queried one, 16 bytes per stage
//! (four 32-bit stateful ALUs), so a column of a K-byte key spans K/16 stages and its value
//! V/16 more. The controller writes keys and values with packets (fast), but a key can
//! only go to its own row: the analyzer keeps the locally hottest C keys per row.
//!
//! Offload packet (`DataMvToSwitch` from an allowed port or the CPU): `key`, `value`, column
//! in `aux`; the row is computed from the key as for queries. `StateSet` with `aux` =
//! column clears a cell (`status` 0) — the row again from the packet's key.
//!
//! Keys are compared by their padded key field (the key length only picks the row), so
//! two keys that differ only in trailing zero bytes are one object here; the KV runs use
//! fixed-size keys.

use pisa::decl::TableSpec;
use pisa::salu::common::{Equals, Write};
use pisa::TraceMode;
use pisa::{ActionId, DropCode, Gress, HashAlgo, HashUnit, MatchKind, Pass, Program, ProgramBuilder, ProgramDecl, Table, PORT_CPU};
use wire::hare::{Op, Packet, FLAG_DONE, HEADER_LEN, PORT_CLIENT, PORT_SERVER};

use super::kv::{Packer, ValueStore};
use super::oostat::{state, StateManager};
use super::{back_to_sender, L2_L4_LEN};

/// What a DySO switch is built for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DysoConfig {
    /// Key field width (a multiple of 4).
    pub key_bytes: usize,
    pub value_bytes: usize,
    /// Rows of the r-MAT (a power of two).
    pub rows: u32,
    /// Columns: objects per row.
    pub columns: usize,
}

impl Default for DysoConfig {
    fn default() -> Self {
        DysoConfig { key_bytes: 16, value_bytes: 16, rows: 8192, columns: 2 }
    }
}

struct Column {
    key_cmp: Vec<pisa::SaluAction<u32, u32, bool, Equals>>,
    key_put: Vec<pisa::SaluAction<u32, u32, (), Write>>,
    valid: StateManager,
    values: ValueStore,
}

/// The DySO program.
pub struct Dyso {
    decl: ProgramDecl,
    cfg: DysoConfig,
    row_hash: HashUnit,
    columns: Vec<Column>,
    control_ports: Table,
    a_allow: ActionId,
    d_unknown_op: DropCode,
    d_key_field: DropCode,
    d_control_denied: DropCode,
}

/// Stages the r-MAT needs for one column: key words, a valid bit, value words, 4 ALUs a stage.
pub fn salus_per_column(key_bytes: usize, value_bytes: usize) -> usize {
    key_bytes / 4 + 1 + value_bytes / 4
}

impl Dyso {
    pub fn new() -> Dyso {
        Dyso::with_config(DysoConfig::default())
    }

    pub fn with_config(cfg: DysoConfig) -> Dyso {
        assert!(cfg.key_bytes.is_multiple_of(4) && cfg.key_bytes >= 4 && cfg.key_bytes <= 252);
        assert!(
            cfg.value_bytes.is_multiple_of(4)
                && cfg.value_bytes >= 4
                && cfg.rows.is_power_of_two()
                && cfg.rows <= 1 << 16
                && cfg.columns >= 1
        );
        let mut b =
            ProgramBuilder::new("dyso", "DySO baseline: r-MAT (hashed rows x C columns of register-held keys), packet-based offloading");
        b.parser(
            (L2_L4_LEN + HEADER_LEN + cfg.key_bytes + cfg.value_bytes) as u32,
            &[("ethernet", 112), ("ipv4", 160), ("udp", 64), ("hare", HEADER_LEN as u32 * 8)],
        )
        .metadata_bits(32 + 8 * cfg.columns as u32 + super::ARRIVAL_MACS_BITS)
        .classify(pisa::ClassifyRule {
            ethertype: Some(0x0800),
            ip_protocol: Some(17),
            udp_dst_port: Some((PORT_SERVER, PORT_CLIENT)),
            ..Default::default()
        });
        let row_bits = cfg.rows.trailing_zeros().max(1);
        let row_hash = b.hash_unit("row_hash", Gress::Ingress, 1, HashAlgo::Crc32, row_bits);
        let a_allow = b.action("allow_control", &[], "this port may offload keys");
        let a_deny = b.action("deny_control", &[], "control packets from this port are dropped");
        let control_ports = b.table(TableSpec {
            name: "control_ports",
            doc: "ports allowed to send control packets",
            gress: Gress::Ingress,
            stage: 1,
            size: 64,
            keys: &[("ig_intr_md.ingress_port", 9, MatchKind::Exact)],
            actions: &[a_allow, a_deny],
            default_action: (a_deny, &[]),
            const_default: false,
        });
        // Key words of all columns first (a hit is known only after every comparison),
        // then each column's valid bit and value words.
        let mut packer = Packer { stage: 1, free: 4, per_stage: 4 };
        let mut keys = Vec::new();
        for c in 0..cfg.columns {
            let mut kc = Vec::new();
            let mut kp = Vec::new();
            for j in 0..cfg.key_bytes / 4 {
                let s = packer.take();
                let r = b.register::<u32>(
                    &format!("key_c{c}_w{j}"),
                    Gress::Ingress,
                    s,
                    cfg.rows,
                    "r-MAT: word j of the key in column c, per row",
                );
                kc.push(b.register_action_salu(r, "compare", Equals));
                kp.push(b.register_action_salu(r, "put", Write));
            }
            keys.push((kc, kp));
        }
        // A hit is known only after every column compared: valid bits and values follow.
        if packer.free < packer.per_stage {
            packer.free = 0;
        }
        let mut columns = Vec::new();
        for (c, (key_cmp, key_put)) in keys.into_iter().enumerate() {
            let s = packer.take();
            let valid = StateManager::declare_named(&mut b, &format!("valid_c{c}"), s, cfg.rows);
            let values = ValueStore::declare(&mut b, &format!("value_c{c}"), cfg.value_bytes, cfg.rows, &mut packer);
            columns.push(Column { key_cmp, key_put, valid, values });
        }
        let d_unknown_op = b.drop_reason("dyso_unknown_op");
        let d_key_field = b.drop_reason("dyso_key_field");
        let d_control_denied = b.drop_reason("dyso_control_denied");
        b.note(&format!(
            "r-MAT {} rows x {} columns; a column takes {} stateful ALUs ({}-byte keys at 16 bytes per stage)",
            cfg.rows,
            cfg.columns,
            salus_per_column(cfg.key_bytes, cfg.value_bytes),
            cfg.key_bytes
        ));
        let decl = b.build().expect("dyso declaration is valid");
        Dyso { decl, cfg, row_hash, columns, control_ports, a_allow, d_unknown_op, d_key_field, d_control_denied }
    }

    pub fn config(&self) -> &DysoConfig {
        &self.cfg
    }

    /// The row of a key field (what the data plane computes): the analyzer uses it to keep
    /// the locally hottest keys per row.
    pub fn row_of(&self, key_len: u8, key_field: &[u8]) -> u32 {
        let mut k = Vec::with_capacity(1 + key_field.len());
        k.push(key_len);
        k.extend_from_slice(key_field);
        HashAlgo::Crc32.compute(&k) & (self.cfg.rows - 1)
    }
}

impl Default for Dyso {
    fn default() -> Self {
        Self::new()
    }
}

impl Program for Dyso {
    fn decl(&self) -> &ProgramDecl {
        &self.decl
    }
    pisa::controls_by_trace_mode!(ingress);
}

/// The control blocks, once, for both trace modes (see `Program::ingress_untraced`).
impl Dyso {
    #[inline(always)]
    fn ingress_control<M: TraceMode>(&self, pass: &mut Pass<'_, M>) {
        let kb = self.cfg.key_bytes;
        let vb = self.cfg.value_bytes;
        let hdr = pass.hdr();
        if hdr.len() < L2_L4_LEN + HEADER_LEN || !wire::is_ipv4_udp(hdr) {
            pass.drop(DropCode::MALFORMED);
            return;
        }
        let (op, key_len, kf, vlen, flags, aux, status) = match Packet::new_checked(&hdr[L2_L4_LEN..]) {
            Ok(p) => (p.op(), p.key_len(), p.key_field() as usize, p.value_len() as usize, p.flags(), p.aux(), p.status()),
            Err(_) => {
                pass.drop(DropCode::MALFORMED);
                return;
            }
        };
        let Some(op) = op else {
            pass.drop(self.d_unknown_op);
            return;
        };
        let control = matches!(op, Op::DataMvToSwitch | Op::StateSet);
        if !(control || matches!(op, Op::Get | Op::Put | Op::PutReply)) || flags & FLAG_DONE != 0 {
            return;
        }
        if kf != kb {
            pass.drop(self.d_key_field);
            return;
        }
        let mut key = [0u8; 257];
        key[0] = key_len;
        key[1..1 + kb].copy_from_slice(&pass.hdr()[L2_L4_LEN + HEADER_LEN..L2_L4_LEN + HEADER_LEN + kb]);
        let row = pass.hash(&self.row_hash, &key[..1 + kb]);
        let voff = L2_L4_LEN + HEADER_LEN + kb;
        if control {
            let port = pass.ingress_port();
            let allowed = port == PORT_CPU || pass.apply_u64(&self.control_ports, port as u64).action == self.a_allow;
            if !allowed {
                pass.drop(self.d_control_denied);
                return;
            }
            let c = aux as usize;
            if c >= self.columns.len() || (op == Op::DataMvToSwitch && vlen != vb) {
                pass.drop(DropCode::MALFORMED);
                return;
            }
            let col = &self.columns[c];
            if op == Op::DataMvToSwitch {
                for (j, a) in col.key_put.iter().enumerate() {
                    let w = u32::from_be_bytes([key[1 + 4 * j], key[2 + 4 * j], key[3 + 4 * j], key[4 + 4 * j]]);
                    pass.execute(a, row, w);
                }
                pass.execute(&col.valid.set, row, state::VALID);
                col.values.store(pass, row.get() as u16, voff, vb);
            } else {
                pass.execute(&col.valid.set, row, status.min(state::REPLACING));
            }
            let h = pass.hdr_mut();
            h[L2_L4_LEN + wire::hare::field::FLAGS] |= FLAG_DONE;
            let end = voff + vlen;
            back_to_sender(pass, end);
            return;
        }
        // Compare every column; the first whose words all match is the hit.
        let mut hit = None;
        for (c, col) in self.columns.iter().enumerate() {
            let mut eq = true;
            for (j, a) in col.key_cmp.iter().enumerate() {
                let w = u32::from_be_bytes([key[1 + 4 * j], key[2 + 4 * j], key[3 + 4 * j], key[4 + 4 * j]]);
                eq &= pass.execute(a, row, w).get();
            }
            if eq && hit.is_none() {
                hit = Some(c);
            }
        }
        let Some(c) = hit else { return };
        let col = &self.columns[c];
        match op {
            Op::Get if pass.execute(&col.valid.check, row, ()).get() == state::VALID => {
                col.values.serve_get(pass, row.get() as u16, kb, vb);
            }
            Op::Put => {
                pass.execute(&col.valid.invalidate, row, ());
            }
            Op::PutReply if vlen == vb => {
                pass.execute(&col.valid.revalidate, row, ());
                col.values.store(pass, row.get() as u16, voff, vb);
            }
            _ => {}
        }
    }
}
