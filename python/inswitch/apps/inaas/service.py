"""Typed wrapper of `inswitch._native.InaasService`: requests as numpy arrays in, finished
requests as numpy arrays out."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from inswitch import _native

READ, WRITE, SWAP, REDUCE, COLLECT, COMPUTE, BLOOM_INSERT, BLOOM_QUERY = range(8)
#: Bloom hash functions: segments 0..BLOOM_HASHES, one switch array each
#: (crates/programs/src/inaas/bloom.rs).
BLOOM_HASHES = 3
ITEMS = 20


@dataclass
class Done:
    """Finished requests of one tenant: one row per request, 20 columns per item."""

    seq: np.ndarray  # u32
    latency_us: np.ndarray  # u64
    via_goalkeeper: np.ndarray  # bool
    gave_up: np.ndarray  # bool
    status: np.ndarray  # (n, 20) u8: 0 no item, 1 done, 2 miss
    value: np.ndarray  # (n, 20) i64


class Service:
    """The switch, the goalkeeper and the tenants, on simulated time (µs)."""

    def __init__(self, ports: int = 128, seed: int = 1, hop_us: int = 1, host_us: int = 2) -> None:
        self.raw = _native.InaasService(ports, seed)
        self.raw.hop_us = hop_us
        self.raw.host_us = host_us

    @property
    def now_us(self) -> int:
        return int(self.raw.now_us)

    def set_loss(self, p: float) -> None:
        self.raw.loss = float(p)

    def submit(self, t: int, segs, idxs, ops, keys, values, op: int = 0) -> int:
        return int(
            self.raw.submit(
                t,
                np.asarray(segs, dtype=np.uint8).tobytes(),
                np.asarray(idxs, dtype="<u2").tobytes(),
                np.asarray(ops, dtype=np.uint8).tobytes(),
                (np.asarray(keys, dtype=np.int64) & 0xFFFFFFFF).astype("<u4").tobytes(),
                np.asarray(values, dtype="<i4").tobytes(),
                op,
            )
        )

    def take(self, t: int) -> Done:
        s, lat, gk, gu, st, val = self.raw.take_completions(t)
        n = len(gk)
        return Done(
            np.frombuffer(s, dtype="<u4"),
            np.frombuffer(lat, dtype="<u8"),
            np.frombuffer(gk, dtype=np.uint8).astype(bool),
            np.frombuffer(gu, dtype=np.uint8).astype(bool),
            np.frombuffer(st, dtype=np.uint8).reshape(n, ITEMS),
            np.frombuffer(val, dtype="<i8").reshape(n, ITEMS),
        )

    def baseline(self, t: int, server: int, req_id: int, body: bytes = b"") -> None:
        self.raw.submit_baseline(t, server, int(req_id).to_bytes(4, "little") + body)

    def take_baseline(self, t: int) -> tuple[np.ndarray, np.ndarray, list[bytes]]:
        a, b, p = self.raw.take_baseline(t)
        return np.frombuffer(a, dtype="<u8"), np.frombuffer(b, dtype="<u8"), list(p)

    def run(self, us: int) -> None:
        self.raw.run(int(us))

    def run_for(self, us: int) -> None:
        """Advance exactly `us` of simulated time."""
        self.raw.run_for(int(us))
