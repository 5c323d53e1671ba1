"""Packet traces (docs/trace.md): the switch daemon's trace sessions, the records decoded for
people, and their text form.

The data plane records (pisa::trace); this module decodes a record's values the way
`inswitch tables list` and `registers read` do (p4rt/decode.py: MACs as MACs, IPv4 as
dotted quads, register cells split into their named fields by the P4Info) and renders one
line per event. `Sessions` is what switchd serves over HTTP: `POST /api/trace` arms,
`GET /api/trace?session=ID` collects finished records, `POST /api/trace/stop` disarms.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from inswitch.p4rt import decode
from inswitch.p4rt.schema import P4InfoIndex

#: Most packets one session traces (a session is for looking at a few packets).
MAX_COUNT = 10_000
#: Longest a session stays armed.
MAX_TIMEOUT = 3600.0
#: A session nobody polled for this long is disarmed (a client that died).
ABANDONED_S = 15.0
#: A record is complete when none of its copies made an event for this long.
QUIET_S = 0.05


def _int(hexstr: str) -> int:
    return int(hexstr, 16) if hexstr else 0


def _params(ps: list[dict[str, Any]]) -> dict[str, str]:
    return {p["name"]: decode.show(int(p["value"]), p["name"], int(p["bits"])) for p in ps}


def _port(p: Any) -> str:
    return "none" if p is None else str(p)


def decode_event(ev: dict[str, Any], schema: Optional[P4InfoIndex]) -> dict[str, Any]:
    """One event with its values decoded (added keys; the raw ones stay) and `text`, its
    line in the readable trace."""
    kind = ev["event"]
    out = dict(ev)
    prog = ev.get("program")
    if kind == "received":
        owner = ev.get("owner")
        out["text"] = (f"received on port {ev['port']}, {ev['len']} bytes: {ev['headers']}; parser: "
                       + (f"{owner}'s packet (after {ev.get('base')})" if owner else f"ordinary traffic ({ev.get('base') or 'no base program'})"))
    elif kind == "pass":
        where = f"port {_port(ev['port'])}" if ev["gress"] == "egress" else (f"recirculation {ev['recirculations']}" if ev["recirculations"] else f"port {_port(ev['port'])}")
        extra = (", clone" if ev.get("clone") else "") + (f", rid {ev['rid']}" if ev.get("rid") else "")
        out["text"] = f"{prog} {ev['gress']} pass ({where}{extra})"
    elif kind == "table":
        t = schema.tables.by_id.get(ev.get("table_id")) if schema is not None and ev.get("table_id") is not None else None
        fields = list(t.fields) if t else []
        key: dict[str, str] = {}
        for i, k in enumerate(ev["key"]):
            name, bits = (fields[i].name, fields[i].bitwidth) if i < len(fields) else (k["name"], k["bits"])
            key[name] = decode.show(_int(k["value"]), name, bits)
        params = _params(ev["params"])
        out["key_decoded"], out["params_decoded"] = key, params
        name = t.alias if t else f"{prog}.{ev['table']}"
        keytext = ", ".join(f"{k}={v}" for k, v in key.items())
        ptext = ", ".join(f"{k}={v}" for k, v in params.items())
        out["text"] = f"table {name} [{keytext}]: {'hit' if ev['hit'] else 'miss'} -> {ev['action']}({ptext})"
    elif kind == "selector":
        params = _params(ev["params"])
        out["params_decoded"] = params
        out["text"] = f"selector {prog}.{ev['profile']}: -> {ev['action']}({', '.join(f'{k}={v}' for k, v in params.items())})"
    elif kind == "register":
        r = schema.registers.by_id.get(ev.get("register_id")) if schema is not None and ev.get("register_id") is not None else None
        name = r.alias if r else f"{prog}.{ev['register']}"
        if r is not None and r.fields:
            before, after = decode.cell(r, int(ev["before"])), decode.cell(r, int(ev["after"]))
            out["before_fields"], out["after_fields"] = before, after
            bt = ", ".join(f"{k}={v}" for k, v in before.items())
            at = ", ".join(f"{k}={v}" for k, v in after.items())
            out["text"] = f"register {name}[{ev['index']}]: {bt} -> {at}"
        else:
            out["text"] = f"register {name}[{ev['index']}]: {ev['before']} -> {ev['after']}"
    elif kind == "memory":
        out["text"] = f"memory {prog}.{ev['memory']} word {ev['word']}: {ev['before']} -> {ev['after']}"
    elif kind == "hash":
        out["text"] = f"hash {prog}.{ev['unit']} = {ev['value']} ({ev['value']:#x})"
    elif kind == "digest":
        out["text"] = f"digest {prog}.{ev['digest']} to the controller"
    elif kind == "violation":
        out["text"] = f"violation by {prog}: {ev['kind']} (the packet is dropped)"
    elif kind == "ingress_result":
        parts = []
        if ev.get("drop"):
            d = ev["drop"]
            parts.append(f"drop ({d['reason']}" + (f", by {d['program']})" if d.get("program") else ")"))
        elif ev.get("multicast"):
            m = ev["multicast"]
            parts.append(f"multicast group {m['group']} to ports {', '.join(map(str, m['ports'])) or 'none'}")
        elif ev["egress_port"] == "recirculate":
            parts.append("recirculate")
        elif ev["egress_port"] == "cpu":
            parts.append("to the controller (PacketIn)")
        elif ev["egress_port"] is None:
            parts.append("no port chosen (dropped: no_route)")
        else:
            parts.append(f"to port {ev['egress_port']}")
        if ev.get("clone"):
            c = ev["clone"]
            parts.append(f"clone session {c['session']} to {', '.join(map(str, c['ports'])) or 'nothing'}")
        out["text"] = "traffic manager: " + "; ".join(parts)
    elif kind == "drop":
        out["text"] = f"dropped: {ev['reason']}" + (f" (by {ev['program']})" if ev.get("program") else "")
    elif kind == "transmit":
        out["text"] = f"sent on port {ev['port']}, {ev['len']} bytes"
    else:
        out["text"] = json.dumps(ev, sort_keys=True)
    return out


def decode_record(rec: dict[str, Any], schema: Optional[P4InfoIndex]) -> dict[str, Any]:
    return {"id": rec["id"], "truncated": rec["truncated"], "events": [decode_event(e, schema) for e in rec["events"]]}


def render(rec: dict[str, Any], n: int) -> str:
    """One packet's block: a title line, then one indented line per event."""
    evs = rec["events"]
    first = evs[0]["text"] if evs else "(no events)"
    lines = [f"packet {n}: {first}"]
    for e in evs[1:]:
        indent = "  " if e["event"] in ("pass", "ingress_result", "drop", "transmit") else "    "
        lines.append(indent + e["text"])
    if rec.get("truncated"):
        lines.append("  (more events than a record keeps; the rest are not shown)")
    return "\n".join(lines)


@dataclass
class _Session:
    id: int
    match: str
    count: int
    deadline: float
    last_poll: float
    sent: int = 0
    pending: list[dict[str, Any]] = field(default_factory=list)


class SessionError(Exception):
    def __init__(self, msg: str, status: int = 400) -> None:
        super().__init__(msg)
        self.status = status


class Sessions:
    """One trace session at a time over a data plane (`dp.trace_arm`/`dp.trace_take`).
    Arming observes and changes nothing the packets see, so it is allowed on the switch's
    read-only HTTP address (docs/trace.md); a session ends after its count, its timeout,
    or when its client stops polling."""

    def __init__(self, dp: Any, schema: Callable[[], Optional[P4InfoIndex]], clock: Callable[[], float] = time.monotonic) -> None:
        self.dp = dp
        self.schema = schema
        self.clock = clock
        self.lock = threading.Lock()
        self.cur: Optional[_Session] = None
        self.next_id = 1

    def _expire(self, now: float) -> None:
        s = self.cur
        if s is not None and (now > s.deadline or now - s.last_poll > ABANDONED_S or s.sent >= s.count):
            self.dp.trace_arm(None)
            self.cur = None

    def arm(self, match: str, count: int, timeout: float) -> dict[str, Any]:
        if not isinstance(match, str) or not match.strip():
            raise SessionError("`match` must be a non-empty expression")
        if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_COUNT:
            raise SessionError(f"`count` must be an integer in [1, {MAX_COUNT}]")
        if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not 0 < timeout <= MAX_TIMEOUT:
            raise SessionError(f"`timeout` must be a number of seconds in (0, {MAX_TIMEOUT:g}]")
        with self.lock:
            now = self.clock()
            self._expire(now)
            if self.cur is not None:
                raise SessionError(f"another trace session ({self.cur.match!r}) is running; it ends by itself within {max(0.0, self.cur.deadline - now):.0f} s", 409)
            try:
                self.dp.trace_arm(match, count)
            except ValueError as e:
                raise SessionError(f"bad match expression: {e}") from None
            s = _Session(self.next_id, match, count, now + float(timeout), now)
            self.next_id += 1
            self.cur = s
            return {"session": s.id, "match": match, "count": count, "timeout": timeout}

    def poll(self, session: int) -> dict[str, Any]:
        with self.lock:
            s = self.cur
            if s is None or s.id != session:
                raise SessionError(f"no trace session {session} (it ended or never was)", 404)
            now = self.clock()
            s.last_poll = now
            got = json.loads(self.dp.trace_take(QUIET_S))
            schema = self.schema()
            recs = [decode_record(r, schema) for r in got["records"]]
            recs = recs[: max(0, s.count - s.sent)]
            s.sent += len(recs)
            done = s.sent >= s.count or now > s.deadline
            doc = {"session": s.id, "packets": recs, "matched": got["matched"], "skipped": got["skipped"], "done": done}
            if done:
                self.dp.trace_arm(None)
                self.cur = None
            return doc

    def stop(self, session: int) -> dict[str, Any]:
        with self.lock:
            if self.cur is not None and self.cur.id == session:
                self.dp.trace_arm(None)
                self.cur = None
                return {"stopped": True}
            return {"stopped": False}
