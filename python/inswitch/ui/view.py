"""The JSON a switch's web view serves (`/api/...`), built from a `decode.Reader` and the
data plane's counters. One class for the switch daemon (a reader over its own device) and
for tests; `inswitch ui` proxies these same endpoints of each switch it shows.

Endpoints (all GET, JSON):
  /api/topology           this switch alone: {"switches": [...], "hosts": [], "links": []}
  /api/counters           the data plane's counters (ports, programs, drops by reason) + time
  /api/pipeline           programs, tables (with entry counts) and registers (with fields)
  /api/table?name=T       one table, entries decoded (at most `limit`, default 500)
  /api/register?name=R[&index=I]  cells decoded; all cells with `index` absent, zero cells
                          left out unless `zeros=1`, at most `limit` (default 512) listed
  /api/systems            one panel per system the switch runs (ui/systems.py)
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable, Mapping, Optional

from inswitch.p4rt import decode

from . import systems

DEFAULT_TABLE_LIMIT = 500
DEFAULT_CELL_LIMIT = 512
MAX_TOPOLOGY_PORTS = 32


class ApiError(Exception):
    """A bad request: HTTP status and a one-line message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _int_arg(q: Mapping[str, str], key: str, default: Optional[int], lo: int = 0) -> Optional[int]:
    if key not in q or q[key] == "":
        return default
    v = q[key].strip()
    if not v.isdigit() or int(v) < lo:
        raise ApiError(400, f"{key} must be an integer >= {lo}, not {v!r}")
    return int(v)


class SwitchView:
    """JSON documents about one switch. `counters` returns the data plane's counters
    document (`Dataplane.counters_json()`, parsed); `name` labels it in the topology."""

    def __init__(self, reader: decode.Reader, counters: Callable[[], dict[str, Any]], programs: Callable[[], list[str]], port_names: list[str], name: str = "s1") -> None:
        self.reader = reader
        self.counters_fn = counters
        self.programs_fn = programs
        self.port_names = port_names
        self.name = name

    def topology(self) -> dict[str, Any]:
        """The switch and, as its neighbours, its ports (a switch alone does not know what is
        cabled to them); `inswitch ui` knows the hosts instead."""
        shown = self.port_names[:MAX_TOPOLOGY_PORTS]
        return {
            "switches": [{"name": self.name, "base": "", "ports": self.port_names, "programs": self.programs_fn()}],
            "hosts": [{"name": p, "ip": p, "short": f"p{i}", "kind": "port"} for i, p in enumerate(shown)],
            "links": [{"a": p, "b": self.name, "switch": self.name, "port": i} for i, p in enumerate(shown)],
        }

    def counters(self) -> dict[str, Any]:
        doc = self.counters_fn()
        doc["time"] = time.time()
        return doc

    def pipeline(self) -> dict[str, Any]:
        schema = self.reader.schema
        tables = []
        for t in schema.tables:
            try:
                count = decode.table_entries(self.reader, t.alias, limit=0)["count"]
            except Exception:  # a table the reader cannot read still shows up, uncounted
                count = None
            tables.append({"table": t.alias, "name": t.name, "size": t.size, "count": count, "keys": [{"name": f.name, "kind": f.kind, "bits": f.bitwidth} for f in t.fields]})
        return {"programs": self.programs_fn(), "tables": tables, "registers": [decode.register_info(r) for r in schema.registers]}

    def table(self, q: Mapping[str, str]) -> dict[str, Any]:
        name = q.get("name", "")
        limit = _int_arg(q, "limit", DEFAULT_TABLE_LIMIT)
        try:
            return decode.table_entries(self.reader, name, limit)
        except KeyError as e:
            raise ApiError(404, str(e.args[0])) from None

    def register(self, q: Mapping[str, str]) -> dict[str, Any]:
        name = q.get("name", "")
        index = _int_arg(q, "index", None)
        limit = _int_arg(q, "limit", DEFAULT_CELL_LIMIT)
        zeros = q.get("zeros") == "1"
        try:
            doc = decode.register_cells(self.reader, name, index, nonzero=not zeros and index is None)
        except KeyError as e:
            raise ApiError(404, str(e.args[0])) from None
        except IndexError as e:
            raise ApiError(400, str(e)) from None
        doc["listed_of"] = len(doc["cells"])
        doc["cells"] = doc["cells"][:limit]
        return doc

    def systems(self) -> dict[str, Any]:
        return {"panels": systems.panels(self.reader, self.programs_fn(), self.counters_fn())}

    def get(self, path: str, q: Mapping[str, str]) -> dict[str, Any]:
        """The document for an /api path; ApiError for an unknown one or a bad query."""
        routes: dict[str, Callable[[], dict[str, Any]]] = {
            "/api/topology": self.topology,
            "/api/counters": self.counters,
            "/api/pipeline": self.pipeline,
            "/api/table": lambda: self.table(q),
            "/api/register": lambda: self.register(q),
            "/api/systems": self.systems,
        }
        fn = routes.get(path)
        if fn is None:
            raise ApiError(404, f"no endpoint {path}; try {', '.join(routes)}")
        return fn()


#: Integers above this lose digits as JavaScript numbers (doubles); the API sends them as
#: decimal strings, which the page shows as they are (a 64-bit register cell is common).
MAX_SAFE_INTEGER = 2**53 - 1


def _js_safe(doc: Any) -> Any:
    if isinstance(doc, bool):
        return doc
    if isinstance(doc, int):
        return str(doc) if abs(doc) > MAX_SAFE_INTEGER else doc
    if isinstance(doc, dict):
        return {k: _js_safe(v) for k, v in doc.items()}
    if isinstance(doc, (list, tuple)):
        return [_js_safe(v) for v in doc]
    return doc


def encode(doc: Any) -> bytes:
    return json.dumps(_js_safe(doc), separators=(",", ":")).encode()
