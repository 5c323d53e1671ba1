"""The P4Info of a program set, its device config, and how to tell two P4Infos apart.

inswitch programs are Rust, not P4, so there is no compiler to emit a P4Info: we derive it
from the declarations the data plane publishes (`ProgramSetInfo`). The switch daemon and a
controller derive it the same way, so a controller that sends the P4Info it built for
"forward" gets exactly the ids the switch uses. The "device config" handed to
SetForwardingPipelineConfig is just the list of program names as JSON: the switch already
holds every program's code.
"""

from __future__ import annotations

import json
import zlib
from typing import Any, Iterable

from google.protobuf import text_format
from p4.config.v1 import p4info_pb2, p4types_pb2

import inswitch
from inswitch import native
from inswitch.native import ProgramSetInfo

from . import bytestrings

ARCH = "pisa"

#: Controller-header metadata ids (the only field of each header).
PACKET_IN_INGRESS_PORT = 1
PACKET_OUT_EGRESS_PORT = 1
#: Bit width of the port fields of the controller headers.
PORT_METADATA_BITS = 16
#: packet_out egress_port value meaning "send through the ingress pipeline".
THROUGH_INGRESS = 0xFFFF

_MATCH_TYPES = {
    "exact": p4info_pb2.MatchField.EXACT,
    "ternary": p4info_pb2.MatchField.TERNARY,
    "lpm": p4info_pb2.MatchField.LPM,
    "optional": p4info_pb2.MatchField.OPTIONAL,
}


def controller_header_id(name: str) -> int:
    """A stable id with the controller-header prefix (0x04) for `packet_in`/`packet_out`."""
    return (p4info_pb2.P4Ids.CONTROLLER_HEADER << 24) | (zlib.crc32(name.encode()) & 0xFFFFFF)


def _aliases(qualified: Iterable[str]) -> dict[str, str]:
    """Short name where it is unique in the set (the common case: one program), else the
    qualified "program.object" name."""
    names = list(qualified)
    short = [n.split(".", 1)[1] for n in names]
    return {n: (s if short.count(s) == 1 else n) for n, s in zip(names, short)}


def _doc(msg: Any, text: str) -> None:
    if text:
        msg.doc.brief = text


def build_p4info(info: ProgramSetInfo) -> p4info_pb2.P4Info:
    """The P4Info of a program set. Deterministic: the same set gives the same bytes."""
    p4 = p4info_pb2.P4Info()
    names = info.names
    p4.pkg_info.name = "+".join(names)
    p4.pkg_info.version = inswitch.__version__
    p4.pkg_info.arch = ARCH
    p4.pkg_info.organization = "inswitch"
    p4.pkg_info.doc.brief = "; ".join(f'{p["decl"]["name"]}: {p["decl"].get("doc", "")}' for p in info.programs)

    def qualified(kind: str) -> list[str]:
        return [f'{p["decl"]["name"]}.{o["name"]}' for p in info.programs for o in p["decl"][kind]]

    alias = {kind: _aliases(qualified(kind)) for kind in ("tables", "actions", "registers", "digests")}
    alias["action_profiles"] = _aliases([f'{p["decl"]["name"]}.{o["name"]}' for p in info.programs
                                         for o in p["decl"].get("action_profiles", [])])

    for prog in info.programs:
        decl, ids = prog["decl"], prog["ids"]
        pname = decl["name"]
        action_ids = ids["actions"]
        for t, tid in zip(decl["tables"], ids["tables"]):
            tab = p4.tables.add()
            qn = f"{pname}.{t['name']}"
            tab.preamble.id = tid
            tab.preamble.name = qn
            tab.preamble.alias = alias["tables"][qn]
            _doc(tab.preamble, t.get("doc", ""))
            for i, k in enumerate(t["keys"], start=1):
                mf = tab.match_fields.add()
                mf.id = i
                mf.name = k["name"]
                mf.bitwidth = k["bits"]
                mf.match_type = _MATCH_TYPES[k["kind"]]
            for a in t["actions"]:
                tab.action_refs.add().id = action_ids[a]
            if t["default_action"] not in t["actions"]:
                ref = tab.action_refs.add()
                ref.id = action_ids[t["default_action"]]
                ref.scope = p4info_pb2.ActionRef.DEFAULT_ONLY
            if t.get("const_default"):
                tab.const_default_action_id = action_ids[t["default_action"]]
            dflt = decl["actions"][t["default_action"]]
            tab.initial_default_action.action_id = action_ids[t["default_action"]]
            for j, (pdecl, v) in enumerate(zip(dflt["params"], t.get("default_params", [])), start=1):
                arg = tab.initial_default_action.arguments.add()
                arg.param_id = j
                arg.value = bytestrings.from_int(int(v), pdecl["bits"])
            tab.size = t["size"]
        table_ids = ids["tables"]
        for ap, apid in zip(decl.get("action_profiles", []), ids.get("action_profiles", [])):
            prof = p4.action_profiles.add()
            qn = f"{pname}.{ap['name']}"
            prof.preamble.id = apid
            prof.preamble.name = qn
            prof.preamble.alias = alias["action_profiles"][qn]
            _doc(prof.preamble, ap.get("doc", ""))
            prof.table_ids.extend(table_ids[t] for t in ap["tables"])
            prof.with_selector = ap["max_group_size"] > 0
            prof.size = ap["size"]
            prof.max_group_size = ap["max_group_size"]
            for t in ap["tables"]:
                next(tab for tab in p4.tables if tab.preamble.id == table_ids[t]).implementation_id = apid
        for a, aid in zip(decl["actions"], action_ids):
            act = p4.actions.add()
            qn = f"{pname}.{a['name']}"
            act.preamble.id = aid
            act.preamble.name = qn
            act.preamble.alias = alias["actions"][qn]
            _doc(act.preamble, a.get("doc", ""))
            for i, prm in enumerate(a["params"], start=1):
                p = act.params.add()
                p.id = i
                p.name = prm["name"]
                p.bitwidth = prm["bits"]
        for r, rid in zip(decl["registers"], ids["registers"]):
            reg = p4.registers.add()
            qn = f"{pname}.{r['name']}"
            reg.preamble.id = rid
            reg.preamble.name = qn
            reg.preamble.alias = alias["registers"][qn]
            _doc(reg.preamble, r.get("doc", ""))
            reg.type_spec.bitstring.bit.bitwidth = r["cell_bits"]
            reg.size = r["size"]
            if r.get("fields"):
                reg.preamble.annotations.append(cell_fields_annotation([(f["name"], f["bits"]) for f in r["fields"]]))
        for d, did in zip(decl["digests"], ids["digests"]):
            dig = p4.digests.add()
            qn = f"{pname}.{d['name']}"
            dig.preamble.id = did
            dig.preamble.name = qn
            dig.preamble.alias = alias["digests"][qn]
            _doc(dig.preamble, d.get("doc", ""))
            struct_name = f"{qn}_t"
            dig.type_spec.struct.name = struct_name
            st = p4.type_info.structs[struct_name]
            for f in d["fields"]:
                m = st.members.add()
                m.name = f["name"]
                m.type_spec.bitstring.bit.bitwidth = f["bits"]

    pin = p4.controller_packet_metadata.add()
    pin.preamble.id = controller_header_id("packet_in")
    pin.preamble.name = pin.preamble.alias = "packet_in"
    pin.preamble.annotations.append('@controller_header("packet_in")')
    _doc(pin.preamble, "PacketIn metadata: the port the packet arrived on (0xFFF0 = the CPU port)")
    md = pin.metadata.add()
    md.id, md.name, md.bitwidth = PACKET_IN_INGRESS_PORT, "ingress_port", PORT_METADATA_BITS
    pout = p4.controller_packet_metadata.add()
    pout.preamble.id = controller_header_id("packet_out")
    pout.preamble.name = pout.preamble.alias = "packet_out"
    pout.preamble.annotations.append('@controller_header("packet_out")')
    _doc(pout.preamble, "PacketOut metadata: egress_port sends the packet straight out of that port; 0xFFFF or no metadata sends it through the ingress pipeline")
    md = pout.metadata.add()
    md.id, md.name, md.bitwidth = PACKET_OUT_EGRESS_PORT, "egress_port", PORT_METADATA_BITS
    return p4


def cell_fields_annotation(fields: list[tuple[str, int]]) -> str:
    """`@cell_fields("packets[31:0],bytes[63:32]")` for fields given least significant
    first: how a register cell splits into named fields (the declaration's `cell_fields`).
    P4Info has no other place for this while the cell stays a bit<W> on the wire, which
    keeps every existing reader of the register working. See docs/ui.md."""
    parts, lsb = [], 0
    for name, bits in fields:
        parts.append(f"{name}[{lsb + bits - 1}:{lsb}]")
        lsb += bits
    return f'@cell_fields("{",".join(parts)}")'


def p4info_for(programs: list[str], target: str | None = None) -> p4info_pb2.P4Info:
    """The P4Info of the named programs, as a switch with `target` loads them."""
    return build_p4info(native.program_set_info(programs, target))


def to_text(p4: p4info_pb2.P4Info) -> str:
    return text_format.MessageToString(p4)


def from_text(text: str) -> p4info_pb2.P4Info:
    p4 = p4info_pb2.P4Info()
    text_format.Merge(text, p4, allow_unknown_field=True)
    return p4


# ---- device config ---------------------------------------------------------------------------


def device_config(programs: list[str]) -> bytes:
    """The p4_device_config for a program set: `{"programs": [...]}` as UTF-8 JSON."""
    return json.dumps({"programs": list(programs)}, separators=(",", ":")).encode()


def parse_device_config(data: bytes) -> list[str]:
    """Program names from a device config: the JSON above, the program-set JSON the data
    plane publishes (`{"programs": [{"decl": {"name": ...}}]}`), or "forward,daiet"."""
    try:
        text = bytes(data).decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ValueError("the device config is not UTF-8 text") from None
    if not text:
        raise ValueError("the device config is empty; it names the programs to load")
    if text.startswith("{"):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"the device config is not valid JSON: {e}") from None
        progs = doc.get("programs") if isinstance(doc, dict) else None
        if isinstance(progs, str):
            progs = progs.split(",")
        if not isinstance(progs, list):
            raise ValueError('the device config JSON must have a "programs" list')
        names = [p["decl"]["name"] if isinstance(p, dict) else p for p in progs]
    else:
        names = text.split(",")
    if not all(isinstance(n, str) for n in names):
        raise ValueError("program names in the device config must be strings")
    out = [n.strip() for n in names if n.strip()]
    if not out:
        raise ValueError("the device config names no program")
    return out


# ---- comparing P4Infos -----------------------------------------------------------------------


def _struct_members(p4: p4info_pb2.P4Info, spec: p4types_pb2.P4DataTypeSpec) -> tuple[Any, ...]:
    kind = spec.WhichOneof("type_spec")
    if kind == "bitstring":
        return ("bit", spec.bitstring.bit.bitwidth)
    if kind == "struct":
        st = p4.type_info.structs.get(spec.struct.name)
        if st is None:
            return ("struct?", spec.struct.name)
        return tuple((m.name, _struct_members(p4, m.type_spec)) for m in st.members)
    return (kind,)


def _entities(p4: p4info_pb2.P4Info) -> list[tuple[str, int, str, tuple[Any, ...]]]:
    """(kind, id, name, what a client relies on) for every entity, in P4Info order."""
    out: list[tuple[str, int, str, tuple[Any, ...]]] = []
    for t in p4.tables:
        fields = tuple((f.id, f.name, f.bitwidth, f.match_type) for f in t.match_fields)
        refs = tuple(sorted((r.id, r.scope) for r in t.action_refs))
        out.append(("table", t.preamble.id, t.preamble.name, (("match fields", fields), ("actions", refs), ("size", t.size), ("const default action", t.const_default_action_id))))
    for a in p4.actions:
        out.append(("action", a.preamble.id, a.preamble.name, (("params", tuple((p.id, p.name, p.bitwidth) for p in a.params)),)))
    for r in p4.registers:
        out.append(("register", r.preamble.id, r.preamble.name, (("type", _struct_members(p4, r.type_spec)), ("size", r.size))))
    for d in p4.digests:
        out.append(("digest", d.preamble.id, d.preamble.name, (("type", _struct_members(p4, d.type_spec)),)))
    for c in p4.controller_packet_metadata:
        out.append(("controller header", c.preamble.id, c.preamble.name, (("metadata", tuple((m.id, m.name, m.bitwidth) for m in c.metadata)),)))
    for kind in ("counters", "direct_counters", "meters", "direct_meters", "action_profiles", "value_sets", "externs"):
        for obj in getattr(p4, kind):
            pre = getattr(obj, "preamble", None)
            out.append((kind.rstrip("s").replace("_", " "), pre.id if pre else 0, pre.name if pre else "?", ()))
    return out


def first_difference(expected: p4info_pb2.P4Info, given: p4info_pb2.P4Info) -> str | None:
    """None if `given` describes the same entities (ids, names, fields, widths) as
    `expected`; otherwise a sentence naming the first thing that differs. Documentation,
    aliases and package info are not compared: they do not change what a client sends."""
    ours = _entities(expected)
    theirs = {(k, i): (n, d) for k, i, n, d in _entities(given)}
    for kind, eid, name, details in ours:
        got = theirs.pop((kind, eid), None)
        if got is None:
            return f"the P4Info has no {kind} {name!r} (id 0x{eid:08x})"
        gname, gdetails = got
        if gname != name:
            return f"{kind} id 0x{eid:08x} is named {gname!r} in the P4Info but {name!r} on the switch"
        for (what, mine), (_, yours) in zip(details, gdetails):
            if mine != yours:
                return f"{kind} {name!r}: {what} differ ({_first_mismatch(yours, mine)})"
    if theirs:
        (kind, eid), (name, _) = next(iter(theirs.items()))
        return f"the P4Info has {kind} {name!r} (id 0x{eid:08x}) which the switch's programs do not have"
    return None


def _first_mismatch(theirs: Any, ours: Any) -> str:
    """For tuples of per-item tuples (fields, params), name the first item that differs."""
    if isinstance(theirs, tuple) and isinstance(ours, tuple) and len(theirs) == len(ours):
        for a, b in zip(theirs, ours):
            if a != b:
                return f"P4Info has {a}, the switch has {b}"
    return f"P4Info has {theirs}, the switch has {ours}"
