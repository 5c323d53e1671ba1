//! The KV application's data on the switch (Hare's `define_appdata` for the read-only /
//! write-through KVS): the value of each offloaded key, spread over 32-bit register arrays
//! because a Tofino stateful ALU returns at most 32 bits. Four arrays per stage (the
//! stage's stateful ALUs), as NetCache lays its values out.

use pisa::salu::common::{Read, Write};
use pisa::{Gress, ProgramBuilder};

/// Places register arrays on stateful ALUs: `free` left in `stage`, then `per_stage` a stage.
pub struct Packer {
    pub stage: u8,
    pub free: u32,
    pub per_stage: u32,
}

impl Packer {
    /// The stage of the next array.
    pub fn take(&mut self) -> u8 {
        if self.free == 0 {
            self.stage += 1;
            self.free = self.per_stage;
        }
        self.free -= 1;
        self.stage
    }
}

/// The value arrays `{prefix}_0 ..` (4 bytes each) and their `get_value` / `put_value`.
pub struct ValueStore {
    pub(crate) get: Vec<pisa::SaluAction<u32, (), u32, Read>>,
    pub(crate) put: Vec<pisa::SaluAction<u32, u32, (), Write>>,
}

impl ValueStore {
    /// `value_bytes / 4` arrays of `slots` cells, placed by `packer`.
    pub fn declare(b: &mut ProgramBuilder, prefix: &str, value_bytes: usize, slots: u32, packer: &mut Packer) -> ValueStore {
        assert!(value_bytes.is_multiple_of(4) && value_bytes > 0);
        let mut get = Vec::new();
        let mut put = Vec::new();
        for i in 0..value_bytes / 4 {
            let stage = packer.take();
            let r = b.register::<u32>(&format!("{prefix}_{i}"), Gress::Ingress, stage, slots, "bytes 4i..4i+4 of each offloaded value");
            get.push(b.register_action_salu(r, "get_value", Read));
            put.push(b.register_action_salu(r, "put_value", Write));
        }
        ValueStore { get, put }
    }
}

use pisa::{Pass, TraceMode};
use wire::hare::{Op, Packet, FLAG_HIT, HEADER_LEN};

use super::app::{DataMv, HareApp, QueryHit};
use super::oostat::state;
use super::{back_to_sender, HareConfig, L2_L4_LEN};

/// The KV store as a Hare application (K3): its values, and write-through query-hit
/// processing. Everything else is the generic program's.
pub struct KvApp {
    values: ValueStore,
}

impl HareApp for KvApp {
    const NAME: &'static str = "hare";
    const DOC: &'static str = "Hare: hot-key offloading for a KV store (e-MAT, OO-Stat, state manager, write-through values)";
    const DROP_PREFIX: &'static str = "hare";
    const METADATA_BITS: u32 = 16 + 8 + 8;

    fn default_config() -> HareConfig {
        HareConfig::default()
    }

    fn define_appdata(b: &mut ProgramBuilder, cfg: &HareConfig, packer: &mut Packer) -> Self {
        let values = ValueStore::declare(b, "value", cfg.value_bytes, cfg.slots, packer);
        b.note(&format!(
            "e-MAT of {} MATs ({:?} key bytes each), {} slots, {}-byte values in {} register arrays",
            cfg.shape().mats(),
            cfg.shape().segments,
            cfg.slots,
            cfg.value_bytes,
            cfg.value_bytes / 4
        ));
        KvApp { values }
    }

    fn apply_queryhit<M: TraceMode>(&self, pass: &mut Pass<'_, M>, cfg: &HareConfig, op: Op, hit: &QueryHit<'_>) {
        let slot = hit.slot as u32;
        match op {
            Op::Get => {
                if pass.execute(&hit.states.check, slot, ()) != state::VALID {
                    return;
                }
                pass.execute(&hit.oo.count, slot, ());
                self.values.serve_get(pass, hit.slot, cfg.key_bytes, cfg.value_bytes);
            }
            // Write-through: the switch's copy is invalid until the server's reply.
            Op::Put => {
                pass.execute(&hit.states.invalidate, slot, ());
            }
            Op::PutReply => {
                if hit.value_len != cfg.value_bytes {
                    return; // a value of another size cannot be cached; the state stays invalid
                }
                pass.execute(&hit.states.revalidate, slot, ());
                self.values.store(pass, hit.slot, hit.voff, cfg.value_bytes);
            }
            _ => {}
        }
    }

    fn apply_datamv<M: TraceMode>(&self, pass: &mut Pass<'_, M>, cfg: &HareConfig, op: Op, dm: &DataMv) -> bool {
        if dm.vlen != cfg.value_bytes {
            return false;
        }
        if op == Op::DataMvToSwitch {
            self.values.store(pass, dm.slot, dm.voff, dm.vlen);
        } else {
            self.values.load(pass, dm.slot, dm.voff, dm.vlen);
        }
        true
    }
}

impl ValueStore {
    /// Query-hit processing of a GET: read the value of `slot` and turn the request into
    /// its reply, back to the client.
    pub(crate) fn serve_get<M: TraceMode>(&self, pass: &mut Pass<'_, M>, slot: u16, kb: usize, vb: usize) {
        let voff = L2_L4_LEN + HEADER_LEN + kb;
        let len = voff + vb;
        let mut val = [0u8; 256];
        for (i, a) in self.get.iter().enumerate() {
            let w = pass.execute(a, slot as u32, ()).get();
            val[4 * i..4 * i + 4].copy_from_slice(&w.to_be_bytes());
        }
        pass.truncate_payload();
        if !pass.resize_hdr(len) {
            return;
        }
        let h = pass.hdr_mut();
        let mut p = Packet::new_unchecked(&mut h[L2_L4_LEN..]);
        p.set_op(Op::GetReply);
        p.set_flags(p.flags() | FLAG_HIT);
        p.set_hit_index(slot);
        p.set_value_len(vb as u8);
        h[voff..len].copy_from_slice(&val[..vb]);
        back_to_sender(pass, len);
    }

    /// Write the `vb` value bytes at header offset `voff` into `slot`.
    pub(crate) fn store<M: TraceMode>(&self, pass: &mut Pass<'_, M>, slot: u16, voff: usize, vb: usize) {
        let mut val = [0u8; 256];
        val[..vb].copy_from_slice(&pass.hdr()[voff..voff + vb]);
        for (i, a) in self.put.iter().enumerate() {
            let w = u32::from_be_bytes([val[4 * i], val[4 * i + 1], val[4 * i + 2], val[4 * i + 3]]);
            pass.execute(a, slot as u32, w);
        }
    }

    /// Read `slot` into the `vb` bytes at header offset `voff`.
    pub(crate) fn load<M: TraceMode>(&self, pass: &mut Pass<'_, M>, slot: u16, voff: usize, vb: usize) {
        let mut val = [0u8; 256];
        for (i, a) in self.get.iter().enumerate() {
            let w = pass.execute(a, slot as u32, ()).get();
            val[4 * i..4 * i + 4].copy_from_slice(&w.to_be_bytes());
        }
        pass.hdr_mut()[voff..voff + vb].copy_from_slice(&val[..vb]);
    }
}
