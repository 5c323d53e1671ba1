-- NetSHa packets: IPv4 with the ToS reserved bit (0x01) set (NetSHa §3.3), UDP payload.
-- Queries (to UDP port 7000): QID, L, L bucket keys, DIM, the vector. Answers (Figure 2):
-- Query# then per query Query ID, NUM and NUM <data ID, distance> pairs. Layout of
-- crates/wire/src/netsha.rs.
local netsha = Proto("netsha", "NetSHa LSH search")

local f = {
  query_count = ProtoField.uint8("netsha.query_count", "Query #", base.DEC),
  block = ProtoField.none("netsha.query", "Query"),
  qid = ProtoField.uint32("netsha.qid", "Query ID", base.DEC),
  num = ProtoField.uint16("netsha.num", "NUM", base.DEC),
  answer = ProtoField.none("netsha.answer", "Answer"),
  data_id = ProtoField.uint32("netsha.data_id", "Data ID", base.DEC),
  distance = ProtoField.double("netsha.distance", "Distance"),
  l = ProtoField.uint8("netsha.l", "L (LSH tables)", base.DEC),
  bucket_key = ProtoField.uint64("netsha.bucket_key", "Bucket key", base.HEX),
  dim = ProtoField.uint16("netsha.dim", "DIM", base.DEC),
  vector = ProtoField.bytes("netsha.vector", "Query vector (DIM x f32)"),
}
netsha.fields = f

local QUERY_PORT = 7000
local f_tos = Field.new("ip.dsfield")
local f_udp_dst = Field.new("udp.dstport")

local function dissect_query(buf, pinfo, t)
  if buf:len() < 5 then return end
  t:add(f.qid, buf(0, 4))
  t:add(f.l, buf(4, 1))
  local l = buf(4, 1):uint()
  local at = 5
  for _ = 1, l do
    if at + 8 > buf:len() then return end
    t:add(f.bucket_key, buf(at, 8))
    at = at + 8
  end
  if at + 2 > buf:len() then return end
  t:add(f.dim, buf(at, 2))
  local dim = buf(at, 2):uint()
  if dim > 0 and at + 2 + 4 * dim <= buf:len() then t:add(f.vector, buf(at + 2, 4 * dim)) end
  pinfo.cols.info = string.format("NetSHa query %d, L=%d", buf(0, 4):uint(), l)
end

local function dissect_answers(buf, pinfo, t)
  t:add(f.query_count, buf(0, 1))
  local nq = buf(0, 1):uint()
  local at, total = 1, 0
  for _ = 1, nq do
    if at + 6 > buf:len() then break end
    local num = buf(at + 4, 2):uint()
    local len = math.min(6 + 12 * num, buf:len() - at)
    local q = t:add(f.block, buf(at, len))
    q:set_text(string.format("Query %d: %d answers", buf(at, 4):uint(), num))
    q:add(f.qid, buf(at, 4))
    q:add(f.num, buf(at + 4, 2))
    at = at + 6
    for _ = 1, num do
      if at + 12 > buf:len() then break end
      local a = q:add(f.answer, buf(at, 12))
      a:set_text(string.format("<%d, %g>", buf(at, 4):uint(), buf(at + 4, 8):float()))
      a:add(f.data_id, buf(at, 4))
      a:add(f.distance, buf(at + 4, 8))
      at = at + 12
      total = total + 1
    end
  end
  pinfo.cols.info = string.format("NetSHa answers: %d queries, %d answers", nq, total)
end

local function heuristic(buf, pinfo, tree)
  local tos = f_tos()
  if tos == nil or bit.band(tos.value, 0x01) == 0 or buf:len() < 1 then return false end
  pinfo.cols.protocol = "NetSHa"
  local t = tree:add(netsha, buf(), "NetSHa")
  local dst = f_udp_dst()
  if dst ~= nil and dst.value == QUERY_PORT then dissect_query(buf, pinfo, t) else dissect_answers(buf, pinfo, t) end
  return true
end

netsha:register_heuristic("udp", heuristic)
