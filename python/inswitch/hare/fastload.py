"""The native fast path of the Hare client for load generation (`_native.hare_load`:
`hostlib::hare::loadgen` driven by `ports::hareload`, the GIL released).

A closed loop over a fixed key set: `window` requests in flight, each with a sequence
number matching its reply, a per-request timeout and retransmission, the agent's "retry"
answer backed off and sent again, and every GET reply's value checked against what the key
holds (a PUT is never in flight with another request of its key, so each GET has exactly
one right answer; this generator must be the only writer of its keys). It speaks the same
protocol to the same agents through the same switch as `inswitch.hare.Client`: keys go to
agent `crc32(key) % len(servers)`, replies come back to port 7371.

    r = fastload.run(["10.0.0.3"], keys, initial, ops, op_keys, duration=3.0)
    r.stats["mismatches"]   # GET replies with a wrong value (must be 0)
    r.recv_ns - r.send_ns   # latency of every completed operation (numpy)"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from inswitch import _native  # type: ignore[attr-defined]
from inswitch.hare import wire
from inswitch.hare.client import server_index

OP_GET, OP_PUT = 0, 1


def unsupported(workload: str, shift: str, clients: int) -> Optional[str]:
    """Why this engine cannot run a load (None: it can). It replays a fixed stream and
    checks each GET's value as the only writer of its keys, so a second writing client
    would make its own acknowledged writes look lost."""
    from inswitch.hare import ycsb

    if shift != "none" or workload == "ycsb-d":
        return "--engine native replays a fixed stream: it needs --shift none and a workload other than ycsb-d (use --engine python)"
    if clients > 1 and set(ycsb.WORKLOADS[workload]) != {"read"}:
        return (f"--engine native checks values as the only writer of its keys: {workload} writes, so it needs --clients 1 "
                "(or the read-only ycsb-c, or --engine python)")
    return None
#: `check` column: the GET's value was right / wrong / not checked (a PUT, a failure, or
#: a key whose last PUT was never answered).
CHECK_OK, CHECK_MISMATCH, CHECK_UNCHECKED = 1, 0, 2


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

    @property
    def correct(self) -> bool:
        """No wrong value, nothing malformed."""
        return self.stats["mismatches"] == 0 and self.stats["malformed"] == 0


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
) -> LoadRun:
    """`ops[i]` (OP_GET / OP_PUT) on key index `op_keys[i]`, repeated in order for
    `duration` seconds from `start_ns` (monotonic ns; 0: now), then up to `drain` seconds
    for the requests in flight. `initial[j]` is what `keys[j]` holds at the start (None:
    absent)."""
    if not available():
        raise RuntimeError("this build of inswitch._native has no hare_load (rebuild the extension)")
    ops_b = np.ascontiguousarray(ops, dtype=np.uint8).tobytes()
    keys_b = np.ascontiguousarray(op_keys, dtype="<u4").tobytes()
    d = _native.hare_load(
        [f"{s}:{port}" for s in servers], [bytes(k) for k in keys], [server_index(k, len(servers)) for k in keys], list(initial), ops_b, keys_b,
        window=window, key_field=key_field, value_size=value_size, field_size=field_size, timeout=timeout, retries=retries, client=client,
        duration=duration, drain=drain, start_ns=start_ns, bind=bind)
    return LoadRun(d["send_ns"], d["recv_ns"], d["op"], d["key"], d["hit"].astype(bool), d["status"], d["check"], dict(d["stats"]),
                   d["start_ns"], d["stop_ns"], d["end_ns"], [(bool(k), None if v is None else bytes(v)) for k, v in d["expected"]])
