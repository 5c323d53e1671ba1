"""Seeded YCSB-style workloads for Hare: Zipf popularity (plain or scrambled), read-only or
with writes, and the popularity changes of the paper (the N coldest objects moved to the
top) and of the issue (hot-in, random, hot-out: 200 keys changed per period).

A trace is generated once and replayed against every system."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

SHIFTS = ("none", "coldest-to-top", "hot-in", "random", "hot-out")


@dataclass
class Trace:
    """Queries in issue order: time (s), key index, whether it is a PUT."""

    t: np.ndarray
    key: np.ndarray
    put: np.ndarray
    n_keys: int
    #: Times at which popularity changed.
    shift_times: list[float] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.t)


def zipf_cdf(n: int, alpha: float) -> np.ndarray:
    """CDF over ranks 0..n-1 with P(rank r) ∝ 1/(r+1)^alpha."""
    w = 1.0 / np.power(np.arange(1, n + 1, dtype=np.float64), alpha)
    c = np.cumsum(w)
    return c / c[-1]


def initial_order(n: int, scrambled: bool, rng: np.random.Generator) -> np.ndarray:
    """rank -> key index. Scrambled (YCSB's scrambled Zipfian): hot keys spread over the key
    space instead of being the lowest indexes."""
    return rng.permutation(n) if scrambled else np.arange(n)


def shifted(order: np.ndarray, shift: str, count: int, rng: np.random.Generator) -> np.ndarray:
    """The popularity order after one change of `count` keys."""
    n = len(order)
    count = max(0, min(count, n))
    if shift in ("coldest-to-top", "hot-in"):
        return np.concatenate([order[n - count :], order[: n - count]])
    if shift == "hot-out":
        return np.concatenate([order[count:], order[:count]])
    if shift == "random":
        o = order.copy()
        a = rng.choice(n, size=count, replace=False)
        b = rng.choice(n, size=count, replace=False)
        o[a], o[b] = order[b], order[a]
        return o
    return order


def generate(
    n_keys: int,
    rate: float,
    duration: float,
    alpha: float = 0.99,
    write_ratio: float = 0.0,
    scrambled: bool = False,
    shift: str = "none",
    shift_at: float | None = None,
    shift_count: int = 200,
    shift_period: float = 1.0,
    seed: int = 1,
) -> Trace:
    """Poisson arrivals at `rate`/s for `duration` s. `coldest-to-top` changes once at
    `shift_at`; hot-in / random / hot-out change `shift_count` keys every `shift_period`
    seconds from `shift_at` on."""
    if shift not in SHIFTS:
        raise ValueError(f"shift must be one of {', '.join(SHIFTS)}")
    rng = np.random.default_rng(seed)
    n_q = int(rate * duration)
    t = np.sort(rng.uniform(0.0, duration, n_q))
    cdf = zipf_cdf(n_keys, alpha)
    ranks = np.minimum(np.searchsorted(cdf, rng.uniform(0.0, 1.0, n_q)), n_keys - 1)
    order = initial_order(n_keys, scrambled, rng)
    key = np.empty(n_q, dtype=np.int64)
    shifts: list[float] = []
    if shift == "none" or shift_at is None:
        bounds = [0.0, duration + 1]
    elif shift == "coldest-to-top":
        bounds = [0.0, shift_at, duration + 1]
    else:
        bounds = [0.0] + list(np.arange(shift_at, duration, shift_period)) + [duration + 1]
    lo = 0
    for i in range(len(bounds) - 1):
        if i > 0:
            order = shifted(order, shift, shift_count, rng)
            shifts.append(float(bounds[i]))
        hi = int(np.searchsorted(t, bounds[i + 1]))
        key[lo:hi] = order[ranks[lo:hi]]
        lo = hi
    put = rng.uniform(0.0, 1.0, n_q) < write_ratio
    return Trace(t=t, key=key, put=put, n_keys=n_keys, shift_times=shifts)


def key_bytes(i: int, size: int) -> bytes:
    """Key `i` as `size` bytes: readable (`key000000000042....`) when there is room, else
    the index in binary (still one key per index)."""
    k = f"key{i:012d}".encode()
    if size >= len(k):
        return (k + b"." * size)[:size]
    if i >= 256**size:
        raise ValueError(f"{size}-byte keys cannot tell {i + 1} keys apart")
    return int(i).to_bytes(size, "big")


def value_bytes(i: int, version: int, size: int) -> bytes:
    """A value that names its key and version, so a stale read is visible."""
    head = int(i).to_bytes(4, "big") + int(version).to_bytes(4, "big")
    return (head + bytes((i + version + j) & 0xFF for j in range(max(0, size - 8))))[:size]
