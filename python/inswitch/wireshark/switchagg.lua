-- SwitchAgg packets (UDP port 7071): the layout of crates/wire/src/switchagg.rs, the
-- Aggregation packet of SwitchAgg Table 1 <TreeID, EoT, Operation, Number of Pairs,
-- <KeyLength, ValueLength, Key, Value>*> with the exactly-once fields (flags, child, seq).
local sa = Proto("switchagg", "SwitchAgg in-network aggregation")

local TYPES = { [1] = "Aggregation", [2] = "Launch", [3] = "Configure", [4] = "Ack" }
local OPS = { [0] = "SUM", [1] = "MIN", [2] = "MAX" }

local f = {
  type = ProtoField.uint8("switchagg.type", "Type", base.DEC, TYPES),
  flags = ProtoField.uint8("switchagg.flags", "Flags", base.HEX),
  eot = ProtoField.bool("switchagg.eot", "EoT", 8, nil, 0x01),
  ack = ProtoField.bool("switchagg.flags.ack", "ACK", 8, nil, 0x02),
  bypass = ProtoField.bool("switchagg.flags.bypass", "BYPASS", 8, nil, 0x04),
  control = ProtoField.bool("switchagg.flags.control", "CONTROL", 8, nil, 0x08),
  tree_id = ProtoField.uint16("switchagg.tree_id", "TreeID", base.DEC),
  operation = ProtoField.uint8("switchagg.operation", "Operation", base.DEC, OPS),
  reserved = ProtoField.uint8("switchagg.reserved", "Reserved", base.DEC),
  child = ProtoField.uint16("switchagg.child", "Child", base.DEC),
  seq = ProtoField.uint32("switchagg.seq", "Sequence number", base.DEC),
  num_pairs = ProtoField.uint16("switchagg.num_pairs", "Number of Pairs", base.DEC),
  pair = ProtoField.none("switchagg.pair", "Pair"),
  key_length = ProtoField.uint8("switchagg.key_length", "KeyLength", base.DEC),
  value_length = ProtoField.uint8("switchagg.value_length", "ValueLength", base.DEC),
  key = ProtoField.string("switchagg.key", "Key"),
  value = ProtoField.uint32("switchagg.value", "Value", base.DEC),
}
sa.fields = f

function sa.dissector(buf, pinfo, tree)
  if buf:len() < 1 then return 0 end
  pinfo.cols.protocol = "SwitchAgg"
  local ty = buf(0, 1):uint()
  local t = tree:add(sa, buf(), "SwitchAgg")
  t:add(f.type, buf(0, 1))
  if ty ~= 1 or buf:len() < 14 then
    pinfo.cols.info = "SwitchAgg " .. (TYPES[ty] or "unknown type")
    return buf:len()
  end
  local fl = t:add(f.flags, buf(1, 1))
  fl:add(f.eot, buf(1, 1))
  fl:add(f.ack, buf(1, 1))
  fl:add(f.bypass, buf(1, 1))
  fl:add(f.control, buf(1, 1))
  t:add(f.tree_id, buf(2, 2))
  t:add(f.operation, buf(4, 1))
  t:add(f.reserved, buf(5, 1))
  t:add(f.child, buf(6, 2))
  t:add(f.seq, buf(8, 4))
  t:add(f.num_pairs, buf(12, 2))
  local n = buf(12, 2):uint()
  local at = 14
  for i = 1, n do
    if at + 2 > buf:len() then break end
    local kl, vl = buf(at, 1):uint(), buf(at + 1, 1):uint()
    if at + 2 + kl + vl > buf:len() then break end
    local p = t:add(f.pair, buf(at, 2 + kl + vl))
    p:set_text(string.format("Pair %d", i))
    p:add(f.key_length, buf(at, 1))
    p:add(f.value_length, buf(at + 1, 1))
    if kl > 0 then p:add(f.key, buf(at + 2, kl)) end
    if vl == 4 then p:add(f.value, buf(at + 2 + kl, 4)) end
    at = at + 2 + kl + vl
  end
  pinfo.cols.info = string.format("SwitchAgg Aggregation tree %d child %d seq %d, %d pairs",
    buf(2, 2):uint(), buf(6, 2):uint(), buf(8, 4):uint(), n)
  return buf:len()
end

DissectorTable.get("udp.port"):add(7071, sa)
