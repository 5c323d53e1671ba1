"""YCSB generators against their definitions: the Zipfian's probabilities, the scramble
(FNV-1a-64 as YCSB's Utils.fnvhash64), "latest" skewed to the newest inserts, and the
published operation mixes."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest

from inswitch.hare import ycsb


def test_fnvhash64_matches_ycsb() -> None:
    # Reference: FNV-1a over the 8 little-end bytes, as a signed long, then Math.abs.
    def ref(v: int) -> int:
        h = 0xCBF29CE484222325
        for i in range(8):
            h = ((h ^ ((v >> (8 * i)) & 0xFF)) * 1099511628211) % (1 << 64)
        s = h - (1 << 64) if h >= 1 << 63 else h
        return abs(s)

    vals = [0, 1, 2, 255, 256, 12345678901, (1 << 40) + 7]
    for v in vals:
        assert ycsb.fnvhash64(v) == ref(v)
    assert ycsb.fnvhash64_np(np.array(vals, dtype=np.int64)).tolist() == [ref(v) for v in vals]


def test_zipfian_frequencies_match_the_distribution() -> None:
    n, draws = 50, 200_000
    z = ycsb.Zipfian(n, 0.99, rng=random.Random(3))
    got = np.bincount([z.next() for _ in range(draws)], minlength=n) / draws
    p = 1.0 / np.power(np.arange(1, n + 1), 0.99)
    p /= p.sum()
    # The two exact head cases and the approximated tail: within 1% absolute each, and
    # total variation under 3% (Gray et al.'s method is approximate past rank 1).
    assert abs(got[0] - p[0]) < 0.01 and abs(got[1] - p[1]) < 0.01
    assert 0.5 * np.abs(got - p).sum() < 0.03


def test_scrambled_zipfian_hottest_key_and_spread() -> None:
    n, draws = 1000, 100_000
    s = ycsb.ScrambledZipfian(n, random.Random(5))
    c = Counter(s.next() for _ in range(draws))
    hottest = ycsb.fnvhash64(0) % n
    p0 = 1.0 / ycsb.SCRAMBLED_ZETAN  # rank 0's probability in YCSB's 10^10-item Zipfian
    assert c.most_common(1)[0][0] == hottest
    assert abs(c[hottest] / draws - p0) < 0.01 + p0 * 0.2
    # scrambled: the hot keys are not the low indexes
    top10 = [k for k, _ in c.most_common(10)]
    assert sorted(top10) != list(range(10))
    assert all(0 <= k < n for k in c)


def test_latest_prefers_the_newest_records() -> None:
    lat = ycsb.Latest(1000, random.Random(2))
    for _ in range(10):
        lat.inserted()
    assert lat.records == 1010
    c = Counter(lat.next() for _ in range(50_000))
    newest = 1009
    p0 = 1.0 / ycsb.zeta(1010, 0.99)
    assert c.most_common(1)[0][0] == newest
    assert abs(c[newest] / 50_000 - p0) < 0.015
    assert all(0 <= k <= newest for k in c)


@pytest.mark.parametrize("name", sorted(ycsb.WORKLOADS))
def test_operation_mixes_are_the_published_ones(name: str) -> None:
    w = ycsb.Workload(name, 500, seed=11)
    ops = Counter(w.next().kind for _ in range(20_000))
    for kind, p in ycsb.WORKLOADS[name].items():
        assert abs(ops[kind] / 20_000 - p) < 0.015, (kind, ops)
    assert set(ops) <= set(ycsb.WORKLOADS[name])


def test_hotspot_shift_makes_the_coldest_records_hottest() -> None:
    w = ycsb.Workload("ycsb-c", 1000, seed=1, shift_seed=4)
    order = w.popularity_order()
    before = Counter(w.next().record for _ in range(50_000))
    assert before.most_common(1)[0][0] == order[0]
    w.shift("hot-in", 200)
    after = Counter(w.next().record for _ in range(50_000))
    # hot-in (workload.shifted): the 200 coldest move to the top, in order
    assert after.most_common(1)[0][0] == order[800]
    assert after[order[0]] < before[order[0]] / 3
    # the load carried by the top 10 positions is the same, now on other records
    top_before = sum(before[r] for r in order[:10])
    top_after = sum(after[r] for r in order[800:810])
    assert abs(top_after - top_before) < 0.1 * top_before
    # every client with the same shift seed shifts the same way
    w2 = ycsb.Workload("ycsb-c", 1000, seed=99, shift_seed=4)
    w2.shift("hot-in", 200)
    assert (w2.current == w.current).all()
