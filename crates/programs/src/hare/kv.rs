//! The KV application's data on the switch (Hare's `define_appdata` for the read-only /
//! write-through KVS): the value of each offloaded key, spread over 32-bit register arrays
//! because a Tofino stateful ALU returns at most 32 bits. Four arrays per stage (the
//! stage's stateful ALUs), as NetCache lays its values out.

use pisa::{Gress, ProgramBuilder, RegisterAction};

fn get_value(c: u32, _: ()) -> (u32, u32) {
    (c, c)
}
fn put_value(_: u32, v: u32) -> (u32, ()) {
    (v, ())
}

/// The value arrays `value_0 ..` (4 bytes each) and their `get_value` / `put_value`.
pub struct ValueStore {
    pub(crate) get: Vec<RegisterAction<u32, (), u32>>,
    pub(crate) put: Vec<RegisterAction<u32, u32, ()>>,
    /// Last stage used.
    pub last_stage: u8,
}

impl ValueStore {
    /// `value_bytes / 4` arrays of `slots` cells, from `stage` on; `first_free` stateful ALUs
    /// are free in the first stage.
    pub fn declare(b: &mut ProgramBuilder, value_bytes: usize, slots: u32, mut stage: u8, first_free: u32, per_stage: u32) -> ValueStore {
        assert!(value_bytes % 4 == 0 && value_bytes > 0);
        let mut get = Vec::new();
        let mut put = Vec::new();
        let mut free = first_free;
        for i in 0..value_bytes / 4 {
            if free == 0 {
                stage += 1;
                free = per_stage;
            }
            free -= 1;
            let r = b.register::<u32>(&format!("value_{i}"), Gress::Ingress, stage, slots, "bytes 4i..4i+4 of each offloaded value");
            get.push(b.register_action(r, "get_value", get_value));
            put.push(b.register_action(r, "put_value", put_value));
        }
        ValueStore { get, put, last_stage: stage }
    }
}
