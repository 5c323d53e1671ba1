"""A P4Info, indexed: entities by id and by name, fields and params by id and name.

The server checks every request against this (ids exist, widths fit); the client resolves
the names a user types ("l2_dmac", "forward.l2_dmac", "dst_addr") through it. It reads
only the P4Info, so it works for any P4Info, not only ones inswitch generated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Generic, Iterable, Iterator, TypeVar

from p4.config.v1 import p4info_pb2, p4types_pb2

MATCH_KIND = {
    p4info_pb2.MatchField.EXACT: "exact",
    p4info_pb2.MatchField.LPM: "lpm",
    p4info_pb2.MatchField.TERNARY: "ternary",
    p4info_pb2.MatchField.RANGE: "range",
    p4info_pb2.MatchField.OPTIONAL: "optional",
}


@dataclass(frozen=True)
class FieldInfo:
    id: int
    name: str
    bitwidth: int
    kind: str  # exact | lpm | ternary | range | optional

    @property
    def short(self) -> str:
        return self.name.rsplit(".", 1)[-1]


@dataclass(frozen=True)
class ParamInfo:
    id: int
    name: str
    bitwidth: int


@dataclass(frozen=True)
class ActionInfo:
    id: int
    name: str
    alias: str
    params: tuple[ParamInfo, ...]

    def param(self, key: str | int) -> ParamInfo:
        for p in self.params:
            if p.id == key or p.name == key:
                return p
        raise KeyError(f"action {self.alias} has no parameter {key!r} (has: {', '.join(p.name for p in self.params) or 'none'})")


@dataclass(frozen=True)
class TableInfo:
    id: int
    name: str
    alias: str
    fields: tuple[FieldInfo, ...]
    actions: dict[int, int]  # action id -> ActionRef scope
    const_default_action_id: int
    size: int
    #: The action profile implementing the table (0: none, entries take actions directly).
    implementation_id: int = 0

    @cached_property  # asked twice per table write; a frozen dataclass's fields never change
    def needs_priority(self) -> bool:
        return any(f.kind in ("ternary", "range", "optional") for f in self.fields)

    def field_by_id(self, fid: int) -> FieldInfo | None:
        for f in self.fields:
            if f.id == fid:
                return f
        return None

    def field(self, key: str | int) -> FieldInfo:
        """By id, full name ("hdr.ethernet.dst_addr") or last component ("dst_addr")."""
        for f in self.fields:
            if f.id == key or f.name == key:
                return f
        short = [f for f in self.fields if f.short == key]
        if len(short) == 1:
            return short[0]
        raise KeyError(f"table {self.alias} has no match field {key!r} (has: {', '.join(f.name for f in self.fields) or 'none'})")


@dataclass(frozen=True)
class ActionProfileInfo:
    id: int
    name: str
    alias: str
    table_ids: tuple[int, ...]
    with_selector: bool
    size: int
    max_group_size: int


@dataclass(frozen=True)
class CellField:
    """A named bit field of a register cell: bits lsb .. lsb+bits-1."""

    name: str
    lsb: int
    bits: int

    def get(self, cell: int) -> int:
        return (cell >> self.lsb) & ((1 << self.bits) - 1)


_CELL_FIELDS = re.compile(r'^@cell_fields\("([^"]*)"\)$')
_CELL_FIELD = re.compile(r"^(\w+)\[(\d+):(\d+)\]$")


def cell_fields(annotations: Iterable[str]) -> tuple[CellField, ...]:
    """The fields an `@cell_fields("packets[31:0],bytes[63:32]")` annotation names (see
    p4info.cell_fields_annotation), least significant first; () without one."""
    for a in annotations:
        m = _CELL_FIELDS.match(a.strip())
        if not m:
            continue
        out = []
        for part in filter(None, (p.strip() for p in m.group(1).split(","))):
            f = _CELL_FIELD.match(part)
            if f is None or int(f.group(2)) < int(f.group(3)):
                return ()  # malformed: show the cell as one number rather than guess
            out.append(CellField(f.group(1), int(f.group(3)), int(f.group(2)) - int(f.group(3)) + 1))
        return tuple(sorted(out, key=lambda c: c.lsb))
    return ()


@dataclass(frozen=True)
class RegisterInfo:
    id: int
    name: str
    alias: str
    bitwidth: int
    size: int
    fields: tuple[CellField, ...] = ()
    doc: str = ""


@dataclass(frozen=True)
class DigestInfo:
    id: int
    name: str
    alias: str
    fields: tuple[tuple[str, int], ...]  # (name, bitwidth) of each struct member, in order


T = TypeVar("T", TableInfo, ActionInfo, RegisterInfo, DigestInfo, ActionProfileInfo)


@dataclass
class _Kind(Generic[T]):
    label: str
    by_id: dict[int, T] = field(default_factory=dict)
    by_name: dict[str, T] = field(default_factory=dict)

    def add(self, obj: T) -> None:
        self.by_id[obj.id] = obj
        self.by_name.setdefault(obj.name, obj)
        self.by_name.setdefault(obj.alias, obj)

    def get(self, key: str | int) -> T:
        """By id, name, alias, or a dotted suffix of the name that only one object has."""
        if isinstance(key, int):
            if key in self.by_id:
                return self.by_id[key]
            raise KeyError(f"no {self.label} with id 0x{key:08x}")
        hit = self.by_name.get(key)
        if hit is not None:
            return hit
        hits = [o for o in self.by_id.values() if o.name.endswith("." + key)]
        if len(hits) == 1:
            return hits[0]
        if hits:
            raise KeyError(f"{self.label} name {key!r} is ambiguous: {', '.join(o.name for o in hits)}")
        raise KeyError(f"no {self.label} {key!r} (known: {', '.join(sorted(o.name for o in self.by_id.values())) or 'none'})")

    def __iter__(self) -> Iterator[T]:
        return iter(self.by_id.values())

    def __contains__(self, key: int) -> bool:
        return key in self.by_id


def _bitwidth(spec: p4types_pb2.P4DataTypeSpec) -> int:
    if spec.WhichOneof("type_spec") != "bitstring":
        raise ValueError("only bit<W> types are supported here")
    bs = spec.bitstring
    kind = bs.WhichOneof("type_spec")
    return int(getattr(bs, kind).bitwidth) if kind else 0


class P4InfoIndex:
    """Lookups over one P4Info."""

    def __init__(self, p4: p4info_pb2.P4Info) -> None:
        self.p4info = p4
        self.tables: _Kind[TableInfo] = _Kind("table")
        self.actions: _Kind[ActionInfo] = _Kind("action")
        self.registers: _Kind[RegisterInfo] = _Kind("register")
        self.digests: _Kind[DigestInfo] = _Kind("digest")
        for a in p4.actions:
            self.actions.add(ActionInfo(a.preamble.id, a.preamble.name, a.preamble.alias or a.preamble.name, tuple(ParamInfo(p.id, p.name, p.bitwidth) for p in a.params)))
        for t in p4.tables:
            fields = tuple(FieldInfo(f.id, f.name, f.bitwidth, MATCH_KIND.get(f.match_type, "other")) for f in t.match_fields)
            self.tables.add(TableInfo(t.preamble.id, t.preamble.name, t.preamble.alias or t.preamble.name, fields, {r.id: r.scope for r in t.action_refs}, t.const_default_action_id, t.size, t.implementation_id))
        self.action_profiles: _Kind[ActionProfileInfo] = _Kind("action profile")
        for ap in p4.action_profiles:
            self.action_profiles.add(ActionProfileInfo(ap.preamble.id, ap.preamble.name, ap.preamble.alias or ap.preamble.name,
                                                       tuple(ap.table_ids), ap.with_selector, ap.size, ap.max_group_size))
        for r in p4.registers:
            self.registers.add(RegisterInfo(r.preamble.id, r.preamble.name, r.preamble.alias or r.preamble.name, _bitwidth(r.type_spec), r.size, cell_fields(r.preamble.annotations), r.preamble.doc.brief))
        for d in p4.digests:
            self.digests.add(DigestInfo(d.preamble.id, d.preamble.name, d.preamble.alias or d.preamble.name, self._struct_fields(d.type_spec)))
        self.packet_in: dict[int, tuple[str, int]] = {}
        self.packet_out: dict[int, tuple[str, int]] = {}
        for c in p4.controller_packet_metadata:
            target = {"packet_in": self.packet_in, "packet_out": self.packet_out}.get(c.preamble.name)
            if target is not None:
                for m in c.metadata:
                    target[m.id] = (m.name, m.bitwidth)

    def _struct_fields(self, spec: p4types_pb2.P4DataTypeSpec) -> tuple[tuple[str, int], ...]:
        kind = spec.WhichOneof("type_spec")
        if kind == "bitstring":
            return (("value", _bitwidth(spec)),)
        if kind == "struct":
            st = self.p4info.type_info.structs[spec.struct.name]
            return tuple((m.name, _bitwidth(m.type_spec)) for m in st.members)
        raise ValueError(f"digest type {kind} is not supported")

    def table_actions(self, t: TableInfo) -> Iterable[ActionInfo]:
        return (self.actions.by_id[a] for a in t.actions if a in self.actions)
