"""The native fast path of the Hare client for load generation (`_native.hare_load`:
`hostlib::hare::loadgen` driven by `ports::hareload`, the GIL released).

A closed loop over a fixed key set: `window` requests in flight, each with a sequence
number matching its reply, a per-request timeout and retransmission, the agent's "retry"
answer backed off and sent again. As the only writer of its keys (`sole_writer`) it checks
every GET reply's value against what the key holds (a PUT is never in flight with another
request of its key, so each GET has exactly one right answer); with other writers it
cannot, and `history` (on by default) is the check: every completed operation's value and
the PUTs never acknowledged, for `hare.history.check` (`records`). It speaks the same
protocol to the same agents through the same switch as `inswitch.hare.Client`: keys go to
agent `crc32(key) % len(servers)`, replies come back to port 7371.

    r = fastload.run(["10.0.0.3"], keys, initial, ops, op_keys, duration=3.0)
    r.stats["mismatches"]   # GET replies with a wrong value (must be 0)
    r.recv_ns - r.send_ns   # latency of every completed operation (numpy)
    recs, unacked = r.records(keys)   # the history, for hare.history.check"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from inswitch import _native  # type: ignore[attr-defined]
from inswitch.hare import history, wire
from inswitch.hare.client import server_index

OP_GET, OP_PUT = 0, 1


def unsupported(workload: str, shift: str, clients: int) -> Optional[str]:
    """Why this engine cannot run a load (None: it can). It replays a fixed stream of key
    indices (a hotspot shift is a key remap switched at its time), or for ycsb-d draws
    from YCSB's "latest" generator natively (`latest`), so every workload runs; none is
    refused today (kept so callers ask)."""
    return None


def sole_writer(workload: str, clients: int) -> bool:
    """Whether each client is the only writer of the keys it writes (so it can check each
    GET's value itself): one client, or a workload that does not write."""
    from inswitch.hare import ycsb

    return clients <= 1 or set(ycsb.WORKLOADS[workload]) == {"read"}
#: `check` column: the GET's value was right / wrong / not checked (a PUT, a failure, or
#: a key whose last PUT was never answered).
CHECK_OK, CHECK_MISMATCH, CHECK_UNCHECKED = 1, 0, 2
#: `present` column of the history: a value, absent, no value (a failed operation or a
#: malformed cell).
PRESENT, ABSENT, NO_VALUE = 1, 0, 2


def available() -> bool:
    """Whether this build has the native load generator."""
    return hasattr(_native, "hare_load")


@dataclass
class LoadRun:
    """One row per completed operation (numpy arrays), the counters, and what each key
    holds at the end as far as the generator knows (`(known, value)`)."""

    send_ns: np.ndarray
    recv_ns: np.ndarray
    op: np.ndarray
    key: np.ndarray
    hit: np.ndarray
    status: np.ndarray
    check: np.ndarray
    stats: dict[str, int]
    start_ns: int
    stop_ns: int
    end_ns: int
    expected: list[tuple[bool, Optional[bytes]]]
    #: The history (None when not recorded): one `cells` row (the value as a cell) and
    #: `present` flag per completed operation, and the PUTs never acknowledged.
    cells: Optional[np.ndarray] = None
    present: Optional[np.ndarray] = None
    unacked_key: Optional[np.ndarray] = None
    unacked_send_ns: Optional[np.ndarray] = None
    unacked_cells: Optional[np.ndarray] = None

    @property
    def correct(self) -> bool:
        """No wrong value, nothing malformed."""
        return self.stats["mismatches"] == 0 and self.stats["malformed"] == 0

    def history_arrays(self) -> dict[str, np.ndarray]:
        """The history as arrays (what `records` reads; `np.savez` keeps it across a
        process boundary): `key`, `op`, `invoked`, `completed`, `present`, `cells` of every
        operation answered without the error status (a GET whose cell was malformed is left
        out: it is a mismatch), and `unacked_key`, `unacked_invoked`, `unacked_cells`."""
        if self.cells is None or self.present is None or self.unacked_key is None:
            raise ValueError("this run recorded no history (history=False)")
        keep = np.flatnonzero(((self.status & wire.STATUS_ERROR) == 0) & (self.present != NO_VALUE))
        return {"key": self.key[keep], "op": self.op[keep], "invoked": self.send_ns[keep], "completed": self.recv_ns[keep],
                "present": self.present[keep], "cells": self.cells[keep], "unacked_key": self.unacked_key,
                "unacked_invoked": self.unacked_send_ns, "unacked_cells": self.unacked_cells}

    def records(self, keys: Sequence[bytes]) -> tuple[list[history.Record], list[tuple[bytes, Optional[bytes], int]]]:
        """The history as `hare.history.Record`s and the unacknowledged PUTs (`records`)."""
        return records(self.history_arrays(), keys)


def records(h: Any, keys: Sequence[bytes]) -> tuple[list[history.Record], list[tuple[bytes, Optional[bytes], int]]]:
    """A native run's history (`LoadRun.history_arrays`, or its `np.load`ed file) as the rows
    `hare.Client` records: (key, "get"|"set", value (None: absent), invoked, completed) in
    completion order, and the PUTs never acknowledged as (key, value, invoked)."""

    def value(row: np.ndarray, present: int) -> Optional[bytes]:
        return row[1:1 + int(row[0])].tobytes() if present == PRESENT else None

    kinds = ("get", "set")
    recs = [(keys[k], kinds[o], value(row, pr), a, b)
            for k, o, pr, a, b, row in zip(h["key"].tolist(), h["op"].tolist(), h["present"].tolist(), h["invoked"].tolist(), h["completed"].tolist(), h["cells"])]
    unacked = [(keys[k], value(row, PRESENT), t) for k, t, row in zip(h["unacked_key"].tolist(), h["unacked_invoked"].tolist(), h["unacked_cells"])]
    return recs, unacked


def run(
    servers: Sequence[str],
    keys: Sequence[bytes],
    initial: Sequence[Optional[bytes]],
    ops: Any,
    op_keys: Any,
    *,
    port: int = wire.PORT_SERVER,
    key_field: int = 64,
    value_size: int = 64,
    field_size: int = 32,
    window: int = 64,
    timeout: float = 0.3,
    retries: int = 10,
    client: int = 1,
    duration: float = 3.0,
    drain: float = 1.0,
    start_ns: int = 0,
    bind: str = f"0.0.0.0:{wire.PORT_CLIENT}",
    sole_writer: bool = True,
    history: bool = True,
    shifts: Sequence[tuple[int, Any]] = (),
    reserve: int = 0,
    latest: Optional[tuple[float, int]] = None,
) -> LoadRun:
    """`ops[i]` (OP_GET / OP_PUT) on key index `op_keys[i]`, repeated in order for
    `duration` seconds from `start_ns` (monotonic ns; 0: now), then up to `drain` seconds
    for the requests in flight. `initial[j]` is what `keys[j]` holds at the start (None:
    absent). `sole_writer`: no other client writes these keys (each GET's value is then
    checked). `history`: record every operation's value (`LoadRun.records`). `shifts`:
    (monotonic ns, remap) in time order, `remap[j]` the key index issued for the stream's
    key `j` from then on. `reserve`: operations to make room for before the run.
    `latest`: (read fraction, seed): YCSB-D (`hostlib::hare::ycsb`) in place of `ops` and
    `op_keys` (pass them empty): reads from YCSB's "latest" distribution over the records,
    the rest inserts of the next record (`ycsb.record_key(len(keys))` on, absent until
    then); `expected` then covers the inserted keys too (key index = record index)."""
    if not available():
        raise RuntimeError("this build of inswitch._native has no hare_load (rebuild the extension)")
    ops_b = np.ascontiguousarray(ops, dtype=np.uint8).tobytes()
    keys_b = np.ascontiguousarray(op_keys, dtype="<u4").tobytes()
    d = _native.hare_load(
        [f"{s}:{port}" for s in servers], [bytes(k) for k in keys], [server_index(k, len(servers)) for k in keys], list(initial), ops_b, keys_b,
        window=window, key_field=key_field, value_size=value_size, field_size=field_size, timeout=timeout, retries=retries, client=client,
        duration=duration, drain=drain, start_ns=start_ns, bind=bind, sole_writer=sole_writer, history=history,
        shifts=[(int(t), np.ascontiguousarray(m, dtype="<u4").tobytes()) for t, m in shifts], reserve=reserve, latest=latest)
    return LoadRun(d["send_ns"], d["recv_ns"], d["op"], d["key"], d["hit"].astype(bool), d["status"], d["check"], dict(d["stats"]),
                   d["start_ns"], d["stop_ns"], d["end_ns"], [(bool(k), None if v is None else bytes(v)) for k, v in d["expected"]],
                   d.get("cells"), d.get("present"), d.get("unacked_key"), d.get("unacked_send_ns"), d.get("unacked_cells"))
