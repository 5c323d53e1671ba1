"""Counts and latencies of control-plane operations.

The Hare paper's design rests on control-plane writes being much slower than packet
interactions with the switch, so we measure ours instead of assuming: every P4Runtime
operation (per update kind, per RPC, per PacketOut) is counted with its latency, and
/metrics reports them as Prometheus summaries (count, sum, quantiles over recent ops).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

QUANTILES = (0.5, 0.9, 0.99)


@dataclass
class _Op:
    count: int = 0
    errors: int = 0
    seconds: float = 0.0
    max_seconds: float = 0.0
    recent: deque[float] = field(default_factory=lambda: deque(maxlen=4096))


@dataclass(frozen=True)
class OpSummary:
    count: int
    errors: int
    seconds: float
    max_seconds: float
    quantiles: dict[float, float]


class OpStats:
    """Thread-safe per-operation counters. Operation names look like
    `write.table_entry.insert`, `write_rpc`, `read.register_entry`, `packet_out`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ops: dict[str, _Op] = {}
        self._events: dict[str, int] = {}
        self.started = time.time()

    def record(self, op: str, seconds: float, ok: bool = True) -> None:
        with self._lock:
            o = self._ops.get(op)
            if o is None:
                o = self._ops[op] = _Op()
            o.count += 1
            o.errors += 0 if ok else 1
            o.seconds += seconds
            o.max_seconds = max(o.max_seconds, seconds)
            o.recent.append(seconds)

    @contextmanager
    def timed(self, op: str) -> Iterator[None]:
        """Time the block; an exception counts as an error (and propagates)."""
        t0 = time.perf_counter()
        ok = False
        try:
            yield
            ok = True
        finally:
            self.record(op, time.perf_counter() - t0, ok)

    def count(self, event: str, n: int = 1) -> None:
        """Count an event that has no latency (a PacketIn delivered, a digest suppressed)."""
        with self._lock:
            self._events[event] = self._events.get(event, 0) + n

    def events(self) -> dict[str, int]:
        with self._lock:
            return dict(self._events)

    def snapshot(self) -> dict[str, OpSummary]:
        with self._lock:
            items = [(k, o.count, o.errors, o.seconds, o.max_seconds, sorted(o.recent)) for k, o in self._ops.items()]
        out = {}
        for k, count, errors, seconds, mx, recent in sorted(items):
            qs = {q: recent[min(len(recent) - 1, int(q * len(recent)))] for q in QUANTILES} if recent else {}
            out[k] = OpSummary(count, errors, seconds, mx, qs)
        return out
