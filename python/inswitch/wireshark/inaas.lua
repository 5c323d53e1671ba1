-- INaaS frames (EtherType 0x88B6, right after Ethernet; INaaS §IV-C/D): the layout of
-- crates/wire/src/inaas.rs. Per-item fields carry the paper's subscript: idx_j, key_j,
-- value_j and the bits valid_j, read_j, write_j, reduce_j, compute_j, plus the failure,
-- preemption and overflow bitmaps the goalkeeper reads.
local inaas = Proto("inaas", "INaaS in-network aggregation as a service")

local OPERATORS = { [0] = "ADD", [1] = "SUB", [2] = "SHL", [3] = "SHR", [4] = "AND", [5] = "OR",
  [6] = "XOR", [7] = "NOT", [8] = "MAX", [9] = "MIN", [10] = "PAXOS 1A", [11] = "PAXOS 2A",
  [12] = "BLOOM INSERT", [13] = "BLOOM QUERY", [15] = "compute done" }
local BITMAPS = { "valid", "read", "write", "reduce", "compute", "failed", "preempted", "overflow" }
local ITEMS = 20

local f = {
  operator = ProtoField.uint8("inaas.operator", "Operator", base.DEC, OPERATORS, 0x0F),
  flags = ProtoField.uint8("inaas.flags", "Flags", base.HEX),
  retrans = ProtoField.bool("inaas.retrans", "retrans", 8, nil, 0x01),
  goalkeeper = ProtoField.bool("inaas.flags.goalkeeper", "To the Goalkeeper", 8, nil, 0x02),
  reply = ProtoField.bool("inaas.flags.reply", "Switch reply", 8, nil, 0x04),
  gk_reply = ProtoField.bool("inaas.flags.gk_reply", "Goalkeeper reply", 8, nil, 0x08),
  forged = ProtoField.bool("inaas.flags.forged", "Forged uid", 8, nil, 0x10),
  exact = ProtoField.bool("inaas.flags.exact", "Exact 64-bit trailer", 8, nil, 0x20),
  seq = ProtoField.uint32("inaas.seq", "Sequence number", base.DEC),
  timestamp = ProtoField.uint32("inaas.timestamp", "timestamp (us)", base.DEC),
  time_limit = ProtoField.uint32("inaas.T", "T (time limit, us)", base.DEC),
  uid = ProtoField.uint32("inaas.uid", "uid", base.DEC),
  item = ProtoField.none("inaas.item", "Item"),
  idx = ProtoField.uint16("inaas.idx", "idx", base.DEC),
  key = ProtoField.uint32("inaas.key", "key", base.DEC),
  value = ProtoField.int32("inaas.value", "value", base.DEC),
}
for _, b in ipairs(BITMAPS) do
  f[b] = ProtoField.uint24("inaas." .. b, b .. " bitmap", base.HEX)
  f[b .. "_j"] = ProtoField.bool("inaas." .. b .. "_j", b, base.NONE)
end
inaas.fields = f

function inaas.dissector(buf, pinfo, tree)
  if buf:len() < 242 then return 0 end
  pinfo.cols.protocol = "INaaS"
  local t = tree:add(inaas, buf(0, 242), "INaaS")
  t:add(f.operator, buf(0, 1))
  local fl = t:add(f.flags, buf(1, 1))
  for _, k in ipairs({ "retrans", "goalkeeper", "reply", "gk_reply", "forged", "exact" }) do fl:add(f[k], buf(1, 1)) end
  t:add(f.seq, buf(2, 4))
  t:add(f.timestamp, buf(6, 4))
  t:add(f.time_limit, buf(10, 4))
  t:add(f.uid, buf(14, 4))
  local bm = {}
  for i, b in ipairs(BITMAPS) do
    local at = 18 + 3 * (i - 1)
    t:add(f[b], buf(at, 3))
    bm[b] = buf(at, 3):uint()
  end
  local shown = 0
  for j = 0, ITEMS - 1 do
    local at = 42 + 10 * j
    local mask = bit.lshift(1, j)
    local any = false
    for _, b in ipairs(BITMAPS) do any = any or bit.band(bm[b], mask) ~= 0 end
    -- Items no bitmap mentions are unused slots: shown only when they carry data.
    if any or buf(at, 10):bytes():tohex() ~= string.rep("0", 20) then
      local it = t:add(f.item, buf(at, 10))
      it:set_text(string.format("Item %d: idx %d, key %d, value %d", j, buf(at, 2):uint(), buf(at + 2, 4):uint(), buf(at + 6, 4):int()))
      it:add(f.idx, buf(at, 2))
      it:add(f.key, buf(at + 2, 4))
      it:add(f.value, buf(at + 6, 4))
      for _, b in ipairs(BITMAPS) do
        if bit.band(bm[b], mask) ~= 0 then it:add(f[b .. "_j"], buf(18, 1), true) end
      end
      shown = shown + 1
    end
  end
  pinfo.cols.info = string.format("INaaS uid %d seq %d op %s, %d items", buf(14, 4):uint(), buf(2, 4):uint(),
    OPERATORS[bit.band(buf(0, 1):uint(), 0x0F)] or "?", shown)
  return 242
end

DissectorTable.get("ethertype"):add(0x88B6, inaas)
