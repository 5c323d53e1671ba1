-- Hare messages (UDP ports 7370 to servers and the switch, 7371 to clients): the layout
-- of crates/wire/src/hare.rs. The key sits in a fixed-width field (key_field bytes, of
-- which key_len are meaningful) so the switch's e-MATs reach it; hit_index is the index
-- the last e-MAT yields on a hit (Hare §IV).
local hare = Proto("hare", "Hare hot-item offloading")

local OPS = {
  [1] = "GET", [2] = "GET_REPLY", [3] = "PUT", [4] = "PUT_REPLY", [5] = "ACQUIRE",
  [6] = "RELEASE", [7] = "GRANT", [8] = "RELEASE_ACK", [16] = "STAT_FETCH (OO-Stat)",
  [17] = "STATE_SET (state manager)", [18] = "DATAMV_SERVER2SWITCH", [19] = "DATAMV_SWITCH2SERVER",
}

local f = {
  op = ProtoField.uint8("hare.op", "Op", base.DEC, OPS),
  flags = ProtoField.uint8("hare.flags", "Flags", base.HEX),
  hit = ProtoField.bool("hare.flags.hit", "HIT (answered by the switch)", 8, nil, 0x01),
  done = ProtoField.bool("hare.flags.done", "DONE (processed by the switch)", 8, nil, 0x02),
  key_len = ProtoField.uint8("hare.key_len", "Key length", base.DEC),
  key_field = ProtoField.uint8("hare.key_field", "Key field width", base.DEC),
  seq = ProtoField.uint32("hare.seq", "Sequence number", base.DEC),
  hit_index = ProtoField.uint16("hare.hit_index", "Hit index", base.DEC),
  aux = ProtoField.uint16("hare.aux", "Aux", base.DEC),
  value_len = ProtoField.uint8("hare.value_len", "Value length", base.DEC),
  status = ProtoField.uint8("hare.status", "Status", base.DEC),
  reserved = ProtoField.uint16("hare.reserved", "Reserved", base.DEC),
  key = ProtoField.string("hare.key", "Key"),
  value = ProtoField.bytes("hare.value", "Value"),
}
hare.fields = f

function hare.dissector(buf, pinfo, tree)
  if buf:len() < 16 then return 0 end
  pinfo.cols.protocol = "Hare"
  local t = tree:add(hare, buf(), "Hare")
  t:add(f.op, buf(0, 1))
  local fl = t:add(f.flags, buf(1, 1))
  fl:add(f.hit, buf(1, 1))
  fl:add(f.done, buf(1, 1))
  t:add(f.key_len, buf(2, 1))
  t:add(f.key_field, buf(3, 1))
  t:add(f.seq, buf(4, 4))
  t:add(f.hit_index, buf(8, 2))
  t:add(f.aux, buf(10, 2))
  t:add(f.value_len, buf(12, 1))
  t:add(f.status, buf(13, 1))
  t:add(f.reserved, buf(14, 2))
  local kl, kf, vl = buf(2, 1):uint(), buf(3, 1):uint(), buf(12, 1):uint()
  if kf > 0 and 16 + kf <= buf:len() then
    local shown = math.min(kl, kf)
    if shown > 0 then t:add(f.key, buf(16, kf), buf(16, shown):raw()) end
  end
  if vl > 0 and 16 + kf + vl <= buf:len() then t:add(f.value, buf(16 + kf, vl)) end
  local op = buf(0, 1):uint()
  pinfo.cols.info = string.format("Hare %s seq %d%s", OPS[op] or tostring(op), buf(4, 4):uint(),
    bit.band(buf(1, 1):uint(), 1) ~= 0 and " [switch hit]" or "")
  return buf:len()
end

local udp = DissectorTable.get("udp.port")
udp:add(7370, hare)
udp:add(7371, hare)
