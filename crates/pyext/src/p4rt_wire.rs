//! P4Runtime messages the server sends in bulk, encoded here in protobuf wire format.
//!
//! A controller polling a register gets one `p4.v1.Entity` per cell (512 for a per-port
//! counter); built field by field in Python, that was most of a Read's cost, and reads held
//! the interpreter while writers waited. Only what a register read returns is encoded; the
//! Python side parses it back with the compiled protobuf (fast) before streaming it.

/// Append `v` as a protobuf varint.
fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Append a length-delimited field (`tag` already holds the field number and wire type 2).
fn delimited(out: &mut Vec<u8>, tag: u8, body: &[u8]) {
    out.push(tag);
    varint(out, body.len() as u64);
    out.extend_from_slice(body);
}

// Field tags: (field number << 3) | wire type.
const READ_RESPONSE_ENTITIES: u8 = 1 << 3 | 2;
const ENTITY_REGISTER_ENTRY: u8 = 11 << 3 | 2;
const REGISTER_ENTRY_ID: u8 = 1 << 3;
const REGISTER_ENTRY_INDEX: u8 = 2 << 3 | 2;
const REGISTER_ENTRY_DATA: u8 = 3 << 3 | 2;
const INDEX_INDEX: u8 = 1 << 3;
const P4DATA_BITSTRING: u8 = 1 << 3 | 2;

/// A `p4.v1.ReadResponse` holding one RegisterEntry entity per cell, each value as the
/// canonical bitstring P4Runtime asks for (big-endian, no leading zero bytes, zero as one
/// zero byte).
pub fn register_read_response(register_id: u32, cells: &[(u32, u64)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(cells.len() * 24);
    let (mut entry, mut entity, mut sub) = (Vec::new(), Vec::new(), Vec::new());
    for &(index, value) in cells {
        entry.clear();
        entry.push(REGISTER_ENTRY_ID);
        varint(&mut entry, register_id.into());
        sub.clear();
        if index != 0 {
            sub.push(INDEX_INDEX);
            varint(&mut sub, index.into());
        }
        delimited(&mut entry, REGISTER_ENTRY_INDEX, &sub);
        sub.clear();
        let bytes = value.to_be_bytes();
        let start = bytes.iter().position(|b| *b != 0).unwrap_or(bytes.len() - 1);
        delimited(&mut sub, P4DATA_BITSTRING, &bytes[start..]);
        let data = std::mem::take(&mut sub);
        delimited(&mut entry, REGISTER_ENTRY_DATA, &data);
        sub = data;
        entity.clear();
        delimited(&mut entity, ENTITY_REGISTER_ENTRY, &entry);
        delimited(&mut out, READ_RESPONSE_ENTITIES, &entity);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_what_python_protobuf_serializes() {
        // p4runtime_pb2.ReadResponse(entities=[Entity(register_entry=RegisterEntry(
        //   register_id=5, index=Index(index=i), data=P4Data(bitstring=...)))]).SerializeToString()
        assert_eq!(register_read_response(5, &[(0, 0)]), hex("0a0b5a09080512001a030a0100"));
        assert_eq!(register_read_response(380437028, &[(300, 0x1_0000_00ff)]), hex("0a165a1408a484b4b501120308ac021a070a0501000000ff"));
    }

    fn hex(s: impl AsRef<str>) -> Vec<u8> {
        let s = s.as_ref();
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }
}
