"""YCSB's core workloads A, B, C, D and F, with YCSB's own generators (Cooper et al.,
SoCC 2010; `site.ycsb.generator`): the Zipfian of Gray et al. with constant 0.99,
scrambled over the key space by FNV-1a-64 exactly as `ScrambledZipfianGenerator` does
(a Zipfian over 10^10 items, hashed, modulo the record count), and "latest" for D
(`SkewedLatestGenerator`: a Zipfian over the records inserted so far, counted back from
the newest). Operation mixes are the published ones:

- A: 50% read, 50% update; B: 95% read, 5% update; C: 100% read;
- D: 95% read, 5% insert (reads skewed to the latest inserts);
- F: 50% read, 50% read-modify-write.

A popularity shift (`shift`, from `apps/hare/workload.py`: hot-in, random,
coldest-to-top, hot-out) permutes which record each popularity rank lands on."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Optional

import numpy as np

from inswitch.apps.hare.workload import shifted

WORKLOADS = {
    "ycsb-a": {"read": 0.5, "update": 0.5},
    "ycsb-b": {"read": 0.95, "update": 0.05},
    "ycsb-c": {"read": 1.0},
    "ycsb-d": {"read": 0.95, "insert": 0.05},
    "ycsb-f": {"read": 0.5, "rmw": 0.5},
}
ZIPFIAN_CONSTANT = 0.99
#: ScrambledZipfianGenerator's item count and its precomputed zeta(10^10, 0.99).
SCRAMBLED_ITEMS = 10_000_000_000
SCRAMBLED_ZETAN = 26.46902820178302
FNV_OFFSET_64 = 0xCBF29CE484222325
FNV_PRIME_64 = 1099511628211


def fnvhash64(val: int) -> int:
    """YCSB's `Utils.fnvhash64` (FNV-1a over the 8 bytes of a long, then Math.abs)."""
    h = FNV_OFFSET_64
    v = val & 0xFFFFFFFFFFFFFFFF
    for _ in range(8):
        h ^= v & 0xFF
        v >>= 8
        h = (h * FNV_PRIME_64) & 0xFFFFFFFFFFFFFFFF
    if h >= 1 << 63:
        h -= 1 << 64
    return abs(h) if h != -(1 << 63) else h & 0xFFFFFFFFFFFFFFFF


def zeta(n: int, theta: float) -> float:
    return float(np.sum(1.0 / np.power(np.arange(1, n + 1, dtype=np.float64), theta)))


class Zipfian:
    """YCSB's `ZipfianGenerator` over [0, items): item 0 the most popular."""

    def __init__(self, items: int, theta: float = ZIPFIAN_CONSTANT, zetan: Optional[float] = None, rng: Optional[random.Random] = None) -> None:
        self.items, self.theta = items, theta
        self.rng = rng or random.Random(0)
        self.zeta2 = zeta(2, theta)
        self.alpha = 1.0 / (1.0 - theta)
        self.set_items(items, zetan)

    def set_items(self, items: int, zetan: Optional[float] = None) -> None:
        """Grow the range (YCSB recomputes zeta incrementally; we keep a running sum)."""
        if zetan is None:
            if getattr(self, "_zn", None) is not None and items >= self.items:
                zetan = self._zn + float(np.sum(1.0 / np.power(np.arange(self.items + 1, items + 1, dtype=np.float64), self.theta)))
            else:
                zetan = zeta(items, self.theta)
        self.items, self._zn = items, zetan
        self.eta = (1 - (2.0 / items) ** (1 - self.theta)) / (1 - self.zeta2 / zetan)

    def next(self) -> int:
        u = self.rng.random()
        uz = u * self._zn
        if uz < 1.0:
            return 0
        if uz < 1.0 + 0.5**self.theta:
            return 1
        return min(self.items - 1, int(self.items * (self.eta * u - self.eta + 1) ** self.alpha))


def fnvhash64_np(v: np.ndarray) -> np.ndarray:
    """`fnvhash64` over an array (uint64 arithmetic wraps as Java's long does)."""
    x = v.astype(np.uint64)
    h = np.full(x.shape, FNV_OFFSET_64, dtype=np.uint64)
    for _ in range(8):
        h ^= x & np.uint64(0xFF)
        x >>= np.uint64(8)
        h *= np.uint64(FNV_PRIME_64)
    return np.abs(h.view(np.int64))


def scrambled_draws(items: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """`n` draws of ScrambledZipfian(items), vectorised (same formula as `Zipfian.next`)."""
    theta = ZIPFIAN_CONSTANT
    z = Zipfian.__new__(Zipfian)
    z.items, z.theta, z.zeta2, z.alpha = SCRAMBLED_ITEMS, theta, zeta(2, theta), 1.0 / (1.0 - theta)
    z.set_items(SCRAMBLED_ITEMS, SCRAMBLED_ZETAN)
    u = rng.random(n)
    uz = u * SCRAMBLED_ZETAN
    tail = np.minimum(SCRAMBLED_ITEMS - 1, np.floor(SCRAMBLED_ITEMS * np.power(z.eta * u - z.eta + 1, z.alpha))).astype(np.int64)
    ranks = np.where(uz < 1.0, 0, np.where(uz < 1.0 + 0.5**theta, 1, tail))
    return fnvhash64_np(ranks) % items


class ScrambledZipfian:
    """YCSB's `ScrambledZipfianGenerator` over [0, items)."""

    def __init__(self, items: int, rng: random.Random) -> None:
        self.items = items
        self.z = Zipfian(SCRAMBLED_ITEMS, ZIPFIAN_CONSTANT, SCRAMBLED_ZETAN, rng)

    def rank(self) -> int:
        """The underlying Zipfian draw (before scrambling)."""
        return self.z.next()

    def next(self) -> int:
        return fnvhash64(self.z.next()) % self.items


class Latest:
    """YCSB's `SkewedLatestGenerator`: the newest record most popular."""

    def __init__(self, records: int, rng: random.Random) -> None:
        self.records = records
        self.z = Zipfian(records, ZIPFIAN_CONSTANT, rng=rng)

    def inserted(self) -> int:
        """A new record's index (the insert counter)."""
        i = self.records
        self.records += 1
        self.z.set_items(self.records)
        return i

    def next(self) -> int:
        return self.records - 1 - self.z.next()


@dataclass
class YcsbOp:
    kind: str  # read, update, insert, rmw
    record: int


class Workload:
    """One client's operation stream. `shift(kind, count)` moves popularity."""

    def __init__(self, name: str, records: int, seed: int = 1, shift_seed: int = 0) -> None:
        if name not in WORKLOADS:
            raise ValueError(f"workload must be one of {', '.join(WORKLOADS)}")
        self.name, self.records = name, records
        self.rng = random.Random(seed)
        self.mix = list(WORKLOADS[name].items())
        self.latest = Latest(records, self.rng) if name == "ycsb-d" else None
        self.zipf = ScrambledZipfian(records, self.rng)
        # Every client of a run shifts the same way: the shift has its own seed.
        self.shift_seed = shift_seed
        self._np = np.random.default_rng(shift_seed)
        #: position (by popularity) of each record the generator yields, and the record
        #: at each position now (None until the first shift).
        self.pos_of: Optional[np.ndarray] = None
        self.current: Optional[np.ndarray] = None

    def popularity_order(self, draws: int = 1_000_000) -> np.ndarray:
        """Records from most to least popular under the scrambled Zipfian (estimated by
        drawing with the shift seed, so every client finds the same order)."""
        counts = np.bincount(scrambled_draws(self.records, draws, np.random.default_rng(self.shift_seed)), minlength=self.records)
        return np.lexsort((np.arange(self.records), -counts))

    def prepare_shifts(self) -> None:
        """Find the popularity order now (it takes a moment), not at the first shift."""
        if self.current is None:
            order = self.popularity_order()
            self.pos_of = np.empty(self.records, dtype=np.int64)
            self.pos_of[order] = np.arange(self.records)
            self.current = order

    def shift(self, kind: str, count: int) -> None:
        """A hotspot shift of `apps/hare/workload.py` (hot-in: the `count` coldest records
        become the hottest, ...), applied to the records' popularity order."""
        self.prepare_shifts()
        self.current = shifted(self.current, kind, count, self._np)

    def _pick(self) -> int:
        if self.latest is not None:
            return self.latest.next()
        r = self.zipf.next()
        if self.current is None or r >= len(self.current):
            return r
        assert self.pos_of is not None
        return int(self.current[self.pos_of[r]])

    def next(self) -> YcsbOp:
        u = self.rng.random()
        acc = 0.0
        kind = self.mix[-1][0]
        for k, p in self.mix:
            acc += p
            if u < acc:
                kind = k
                break
        if kind == "insert":
            assert self.latest is not None
            return YcsbOp("insert", self.latest.inserted())
        return YcsbOp(kind, self._pick())


def record_key(i: int) -> bytes:
    """YCSB's key naming (`user` + the hashed index, as `orderedinserts=false` does)."""
    return b"user%d" % fnvhash64(i)


def field_value(i: int, version: int, client: int, size: int) -> bytes:
    """A value that names its record, writer and version (so every write is distinct)."""
    head = b"%x.%x.%x:" % (i, client, version)
    return (head + b"x" * size)[: max(size, len(head))]
