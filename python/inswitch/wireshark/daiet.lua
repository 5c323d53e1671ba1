-- DAIET aggregation packets (UDP port 7070): the layout of crates/wire/src/daiet.rs.
-- Field names follow the DAIET paper: the preamble holds the tree ID and the number of
-- pairs; pairs are fixed-size (16-byte key, 32-bit value) unless the VARLEN flag is set.
local daiet = Proto("daiet", "DAIET in-network aggregation")

local OPS = { [0] = "SUM", [1] = "MIN", [2] = "MAX" }
local INFO = { [0] = "none", [1] = "FINISHED", [2] = "STALLED", [3] = "NOTED", [4] = "BYE" }

local f = {
  tree_id = ProtoField.uint16("daiet.tree_id", "Tree ID", base.DEC),
  flags = ProtoField.uint8("daiet.flags", "Flags", base.HEX),
  f_end = ProtoField.bool("daiet.flags.end", "END", 8, nil, 0x01),
  f_ack = ProtoField.bool("daiet.flags.ack", "ACK", 8, nil, 0x02),
  f_bypass = ProtoField.bool("daiet.flags.bypass", "BYPASS", 8, nil, 0x04),
  f_varlen = ProtoField.bool("daiet.flags.varlen", "VARLEN", 8, nil, 0x08),
  f_from_switch = ProtoField.bool("daiet.flags.from_switch", "FROM_SWITCH", 8, nil, 0x10),
  f_resend = ProtoField.bool("daiet.flags.resend", "RESEND", 8, nil, 0x20),
  f_query = ProtoField.bool("daiet.flags.query", "QUERY", 8, nil, 0x40),
  f_done = ProtoField.bool("daiet.flags.done", "DONE", 8, nil, 0x80),
  op = ProtoField.uint8("daiet.op", "Aggregation function", base.DEC, OPS),
  sender = ProtoField.uint16("daiet.sender", "Sender", base.DEC),
  epoch = ProtoField.uint16("daiet.epoch", "Epoch", base.DEC),
  seq = ProtoField.uint32("daiet.seq", "Sequence number", base.DEC),
  num_entries = ProtoField.uint8("daiet.num_entries", "Number of pairs", base.DEC),
  info = ProtoField.uint8("daiet.info", "Info", base.DEC, INFO),
  pair = ProtoField.none("daiet.pair", "Pair"),
  key_len = ProtoField.uint16("daiet.key_len", "Key length", base.DEC),
  key = ProtoField.string("daiet.key", "Key"),
  value = ProtoField.uint32("daiet.value", "Value", base.DEC),
}
daiet.fields = f

local function printable(tvb)
  -- Keys are bytes; show them as text up to the first zero (fixed keys are zero-padded).
  local s = tvb:raw()
  local z = s:find("\0", 1, true)
  if z then s = s:sub(1, z - 1) end
  return s
end

function daiet.dissector(buf, pinfo, tree)
  if buf:len() < 14 then return 0 end
  pinfo.cols.protocol = "DAIET"
  local t = tree:add(daiet, buf(0, 14), "DAIET")
  t:add(f.tree_id, buf(0, 2))
  local fl = t:add(f.flags, buf(2, 1))
  for _, k in ipairs({ "f_end", "f_ack", "f_bypass", "f_varlen", "f_from_switch", "f_resend", "f_query", "f_done" }) do
    fl:add(f[k], buf(2, 1))
  end
  t:add(f.op, buf(3, 1))
  t:add(f.sender, buf(4, 2))
  t:add(f.epoch, buf(6, 2))
  t:add(f.seq, buf(8, 4))
  t:add(f.num_entries, buf(12, 1))
  t:add(f.info, buf(13, 1))
  local n = buf(12, 1):uint()
  local varlen = bit.band(buf(2, 1):uint(), 0x08) ~= 0
  local at = 14
  for i = 1, n do
    if varlen then
      if at + 6 > buf:len() then break end
      local klen = buf(at, 2):uint()
      if at + 6 + klen > buf:len() then break end
      local p = t:add(f.pair, buf(at, 6 + klen))
      p:set_text(string.format("Pair %d", i))
      p:add(f.key_len, buf(at, 2))
      p:add(f.value, buf(at + 2, 4))
      if klen > 0 then p:add(f.key, buf(at + 6, klen), printable(buf(at + 6, klen))) end
      at = at + 6 + klen
    else
      if at + 20 > buf:len() then break end
      local p = t:add(f.pair, buf(at, 20))
      p:set_text(string.format("Pair %d", i))
      p:add(f.key, buf(at, 16), printable(buf(at, 16)))
      p:add(f.value, buf(at + 16, 4))
      at = at + 20
    end
  end
  t:set_len(at)
  pinfo.cols.info = string.format("DAIET tree %d seq %d, %d pairs", buf(0, 2):uint(), buf(8, 4):uint(), n)
  return at
end

DissectorTable.get("udp.port"):add(7070, daiet)
