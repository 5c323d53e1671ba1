"""The aggregation host side from Python (`_native.agg_map` / `agg_reduce`) on loopback,
no switch: the udp baseline is exact, and switch mode without a switch falls back to
host-side aggregation and is exact too. Checked against a Counter."""

from __future__ import annotations

import collections
import threading

import numpy as np
import pytest

from inswitch import _native


def _pairs(words: list[str]) -> tuple[bytes, np.ndarray]:
    b = [w.encode() for w in words]
    offs = np.zeros(len(b) + 1, dtype=np.uint64)
    offs[1:] = np.cumsum([len(x) for x in b])
    return b"".join(b), offs


@pytest.mark.parametrize("mode", ["udp", "switch"])
def test_agg_map_reduce_loopback(mode: str) -> None:
    base = 47400 if mode == "udp" else 47500
    words = [[f"w{(i * 7 + m) % 60}" for i in range(3000)] + ["long-key-" * 5, "ünïcødé"] for m in range(2)]
    ref = collections.Counter(w for ws in words for w in ws)
    res: dict[object, object] = {}
    mappers = [f"127.0.0.1:{base + 1 + i}" for i in range(2)]

    def reduce() -> None:
        res["r"] = _native.agg_reduce("daiet", f"127.0.0.1:{base}", 3, mappers, "sum", 20.0, mode=mode)

    def map_(i: int) -> None:
        blob, offs = _pairs(words[i])
        n = len(words[i])
        res[i] = _native.agg_map(
            "daiet", mappers[i], [(3, f"127.0.0.1:{base}")], i, "sum",
            np.zeros(n, np.uint16), blob, offs, np.ones(n, np.uint32), 20.0, mode=mode,
        )

    threads = [threading.Thread(target=reduce)] + [threading.Thread(target=map_, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    blob, offs, vals, st = res["r"]  # type: ignore[misc]
    got = {blob[offs[i]:offs[i + 1]].decode(): int(vals[i]) for i in range(len(vals))}
    assert got == dict(ref)
    assert st["completed"] and st["fallback"] == (mode == "switch")
    assert st["bytes"] > 0 and st["packets"] > 0
    for i in range(2):
        assert res[i]["completed"] and res[i]["packets_sent"] > 0  # type: ignore[index]
