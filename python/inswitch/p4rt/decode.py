"""Switch state decoded for people: table entries with MACs as MACs, IPv4 addresses as
dotted quads and LPM prefixes as `10.0.0.0/24`; register cells split into the named fields
the P4Info's `@cell_fields` annotation gives (`forward.rx_port_counters[0]` as packets and
bytes, not one packed number).

Everything here reads through a `Reader`: anything with a P4Info index (`schema`) and a
P4Runtime `read(entities)`. `SwitchClient` is one (over gRPC); the switch daemon's web view
wraps its own device in another (`switchd.web.LocalReader`), so the command line, the Python
API and the web page show the same decoding.
"""

from __future__ import annotations

import ipaddress
from typing import Any, Optional, Protocol, Sequence

from p4.v1 import p4runtime_pb2

from . import bytestrings
from .schema import FieldInfo, P4InfoIndex, RegisterInfo, TableInfo


class Reader(Protocol):
    """What decoding reads through. A reader may also offer `register_values(info, index)
    -> [(index, value)]`, used instead of `read` for registers (the switch daemon's own
    reader does: a P4Runtime entity per cell costs ~50 µs, 3 s for a 64K-cell array)."""

    @property
    def schema(self) -> P4InfoIndex: ...

    def read(self, entities: Sequence[p4runtime_pb2.Entity]) -> list[p4runtime_pb2.Entity]: ...


def _kind_of(name: str, bitwidth: int) -> str:
    """How to show a value of field `name`: "mac", "ipv4", "ipv6" or "int". By width, with
    the name to tell a 32-bit address from a 32-bit number."""
    low = name.lower()
    if bitwidth == 48 and ("mac" in low or "addr" in low or "ethernet" in low):
        return "mac"
    if bitwidth == 32 and ("ipv4" in low or low.endswith(("_ip", ".ip", "ip_addr")) or ("ip" in low and "addr" in low)):
        return "ipv4"
    if bitwidth == 128 and "ipv6" in low:
        return "ipv6"
    return "int"


def show(value: int, name: str, bitwidth: int) -> str:
    """One value as text: a MAC, an address, or a decimal number."""
    kind = _kind_of(name, bitwidth)
    if kind == "mac":
        return ":".join(f"{b:02x}" for b in value.to_bytes(6, "big"))
    if kind == "ipv4":
        return str(ipaddress.IPv4Address(value & 0xFFFF_FFFF))
    if kind == "ipv6":
        return str(ipaddress.IPv6Address(value))
    return str(value)


def show_match(fm: p4runtime_pb2.FieldMatch, f: Optional[FieldInfo]) -> str:
    name, bw = (f.name, f.bitwidth) if f else ("", 0)  # a field the P4Info does not name: a number
    kind = fm.WhichOneof("field_match_type")
    if kind == "exact":
        return show(bytestrings.to_int(fm.exact.value), name, bw)
    if kind == "optional":
        return show(bytestrings.to_int(fm.optional.value), name, bw)
    if kind == "lpm":
        return f"{show(bytestrings.to_int(fm.lpm.value), name, bw)}/{fm.lpm.prefix_len}"
    if kind == "ternary":
        v, m = bytestrings.to_int(fm.ternary.value), bytestrings.to_int(fm.ternary.mask)
        return f"{show(v, name, bw)} &&& {show(m, name, bw) if _kind_of(name, bw) != 'int' else hex(m)}"
    if kind == "range":
        return f"{show(bytestrings.to_int(fm.range.low), name, bw)}..{show(bytestrings.to_int(fm.range.high), name, bw)}"
    return "?"


def entry(schema: P4InfoIndex, te: p4runtime_pb2.TableEntry) -> dict[str, Any]:
    """One table entry: {"table", "match": {field: text}, "action", "params": {name: text},
    "priority"}; match fields the entry leaves out (don't-care) are `*`."""
    t = schema.tables.by_id.get(te.table_id)
    given = {fm.field_id: fm for fm in te.match}
    match: dict[str, str] = {}
    for f in t.fields if t else ():
        fm = given.pop(f.id, None)
        match[f.name] = show_match(fm, f) if fm is not None else "*"
    for fid, fm in given.items():
        match[str(fid)] = show_match(fm, None)
    a = te.action.action
    act = schema.actions.by_id.get(a.action_id)
    params: dict[str, str] = {}
    for p in a.params:
        info = act.param(p.param_id) if act else None
        params[info.name if info else str(p.param_id)] = show(bytestrings.to_int(p.value), info.name if info else "", info.bitwidth if info else 64)
    return {
        "table": t.alias if t else str(te.table_id),
        "match": match,
        "action": act.alias if act else str(a.action_id),
        "params": params,
        "priority": te.priority,
    }


def _table_entity(t: TableInfo, default: bool = False) -> p4runtime_pb2.Entity:
    ent = p4runtime_pb2.Entity()
    ent.table_entry.table_id = t.id
    ent.table_entry.is_default_action = default
    return ent


def table_entries(reader: Reader, table: str, limit: Optional[int] = None) -> dict[str, Any]:
    """A table decoded: {"table", "name", "size", "keys": [{name, kind, bits}], "entries":
    [...], "count", "default": {"action", "params"}}; at most `limit` entries listed
    (`count` is all of them)."""
    t = reader.schema.tables.get(table)
    got = [entry(reader.schema, e.table_entry) for e in reader.read([_table_entity(t)])]
    dflt = reader.read([_table_entity(t, default=True)])
    d = entry(reader.schema, dflt[0].table_entry) if dflt else None
    return {
        "table": t.alias,
        "name": t.name,
        "size": t.size,
        "keys": [{"name": f.name, "kind": f.kind, "bits": f.bitwidth} for f in t.fields],
        "count": len(got),
        "entries": got if limit is None else got[:limit],
        "default": {"action": d["action"], "params": d["params"]} if d else None,
    }


def cell(r: RegisterInfo, value: int) -> dict[str, int]:
    """A cell's named fields, or {"value": v} for a register without a field split."""
    if not r.fields:
        return {"value": value}
    return {f.name: f.get(value) for f in r.fields if not f.name.startswith("unused")}


def register_info(r: RegisterInfo) -> dict[str, Any]:
    return {
        "register": r.alias,
        "name": r.name,
        "size": r.size,
        "bits": r.bitwidth,
        "doc": r.doc,
        "fields": [{"name": f.name, "lsb": f.lsb, "bits": f.bits} for f in r.fields if not f.name.startswith("unused")],
    }


def register_cells(reader: Reader, name: str, index: Optional[int] = None, nonzero: bool = False) -> dict[str, Any]:
    """A register's cells decoded: register_info plus "cells": [{"index", "raw", fields...}]
    (every cell, or the one at `index`; with `nonzero`, only cells that are not 0) and
    "nonzero", how many cells are not 0."""
    r = reader.schema.registers.get(name)
    if index is not None and not 0 <= index < r.size:
        raise IndexError(f"register {r.alias} has {r.size} cells (0..{r.size - 1}); {index} is out of range")
    fast = getattr(reader, "register_values", None)
    if fast is not None:
        values = fast(r, index)
    else:
        ent = p4runtime_pb2.Entity()
        ent.register_entry.register_id = r.id
        if index is not None:
            ent.register_entry.index.index = index
        values = [(e.register_entry.index.index, bytestrings.to_int(e.register_entry.data.bitstring)) for e in reader.read([ent])]
    n = sum(1 for _, v in values if v)
    if nonzero:
        values = [(i, v) for i, v in values if v]
    return {**register_info(r), "nonzero": n, "cells": [{"index": i, "raw": v, **cell(r, v)} for i, v in values]}


def parse_cell_ref(text: str) -> tuple[str, Optional[int]]:
    """`forward.rx_port_counters[0]` -> ("forward.rx_port_counters", 0); no brackets: every
    cell. Raises ValueError for anything else."""
    s = text.strip()
    if not s:
        raise ValueError("empty register name")
    if "[" not in s:
        if "]" in s:
            raise ValueError(f"{text!r}: use NAME or NAME[INDEX]")
        return s, None
    name, _, rest = s.partition("[")
    if not rest.endswith("]") or not name:
        raise ValueError(f"{text!r}: use NAME or NAME[INDEX]")
    idx = rest[:-1].strip()
    if not idx.isdigit():
        raise ValueError(f"{text!r}: the index must be a non-negative integer")
    return name, int(idx)
