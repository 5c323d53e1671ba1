"""Typed access to the native module and the program-set description it produces."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from inswitch import _native

ControlPlaneError = _native.ControlPlaneError


def program_names() -> list[str]:
    return list(_native.program_names())


def is_program(name: str) -> bool:
    """A known program name, or a sized spec of one (`hare:key=64:value=64:slots=256`,
    colons between parameters so a spec fits in a comma-separated program list)."""
    if name in program_names():
        return True
    if ":" not in name or "," in name:
        return False
    try:
        program_set_info([name])
    except (ValueError, RuntimeError):
        return False
    return True


def target_names() -> list[str]:
    return list(_native.target_names())


def split_programs(spec: str | list[str]) -> list[str]:
    """`"forward,daiet"` or a list -> a clean list of names (order kept, no blanks)."""
    items = spec.split(",") if isinstance(spec, str) else spec
    names = [s.strip() for s in items if s.strip()]
    if not names:
        raise ValueError("no program named")
    return names


@dataclass(frozen=True)
class ProgramSetInfo:
    """Declarations and P4Runtime ids of a program set (what the P4Info is built from)."""

    raw: dict[str, Any]

    @property
    def programs(self) -> list[dict[str, Any]]:
        return self.raw["programs"]

    @property
    def names(self) -> list[str]:
        return [p["decl"]["name"] for p in self.programs]

    def _ids(self, kind: str) -> dict[str, int]:
        """`{"prog.obj": id}` for tables, actions, registers or digests."""
        out: dict[str, int] = {}
        decl_key = {"tables": "tables", "actions": "actions", "registers": "registers", "digests": "digests"}[kind]
        for p in self.programs:
            for obj, pid in zip(p["decl"][decl_key], p["ids"][kind]):
                out[f'{p["decl"]["name"]}.{obj["name"]}'] = pid
        return out

    def table_id(self, name: str) -> int:
        return _lookup(self._ids("tables"), name, "table")

    def action_id(self, name: str) -> int:
        return _lookup(self._ids("actions"), name, "action")

    def register_id(self, name: str) -> int:
        return _lookup(self._ids("registers"), name, "register")

    def digest_id(self, name: str) -> int:
        return _lookup(self._ids("digests"), name, "digest")


def _lookup(ids: dict[str, int], name: str, kind: str) -> int:
    if name in ids:
        return ids[name]
    short = [k for k in ids if k.split(".", 1)[1] == name]
    if len(short) == 1:
        return ids[short[0]]
    if len(short) > 1:
        raise KeyError(f"{kind} name {name!r} is ambiguous: {', '.join(short)}")
    raise KeyError(f"no {kind} {name!r} (known: {', '.join(sorted(ids))})")


@lru_cache(maxsize=32)
def _set_json(names: tuple[str, ...], target: str | None) -> str:
    return _native.program_set_json(list(names), target)


def program_set_info(programs: list[str], target: str | None = None) -> ProgramSetInfo:
    """The set as a switch with `target` builds it (default: the model's own limits): a
    program sized by the target (inaas) has that switch's arrays."""
    return ProgramSetInfo(json.loads(_set_json(tuple(programs), target)))


def resources(programs: list[str], target: str) -> dict[str, Any]:
    return json.loads(_native.resources_json(programs, target))
