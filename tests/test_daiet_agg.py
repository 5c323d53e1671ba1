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


def test_bench_aggregation_quick() -> None:
    from inswitch.bench import aggregation

    r = aggregation.run(duration=0.2)
    assert r["daiet_pair_updates_per_s"] > 0 and r["forward_pps"] > 0
    assert r["daiet_drops"] == 0
    # The bench compared every key's aggregate with the reference after its run.
    assert r["daiet_verified_keys"] >= 100
    assert 1.0 <= r["daiet_passes_per_packet"] <= 3.0
    # SwitchAgg too: per CPU-second, its flushed aggregate checked against the reference.
    assert r["switchagg_pair_updates_per_s"] > 0 and r["switchagg_pair_updates_per_wall_s"] > 0
    assert r["switchagg_verified_keys"] > 0
    assert r["switchagg_drops"] == 0


def test_scapy_layer_dissects_the_rust_encoder() -> None:
    """Datagrams the Rust sender puts on the wire dissect with the independent scapy
    layer into exactly the pairs given (fixed and variable-length, keys whole)."""
    import socket

    from inswitch.scapy.daiet import Daiet, FixedPair

    words = ["apple", "pear", "k" * 40, "apple", "zürich", ""] + [f"w{i}" for i in range(30)]
    blob, offs = _pairs(words)
    n = len(words)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    # Ports the kernel picks: fixed numbers in the ephemeral range can be taken by anything
    # else running on the machine.
    sock.bind(("127.0.0.1", 0))
    dest = f"127.0.0.1:{sock.getsockname()[1]}"
    sock.settimeout(2.0)
    t = threading.Thread(target=lambda: _native.agg_map("daiet", "127.0.0.1:0", [(4, dest)], 1, "sum",
                                                         np.zeros(n, np.uint16), blob, offs, np.arange(n, dtype=np.uint32), 0.3, mode="udp"))
    t.start()
    got: list[tuple[bytes, int]] = []
    seqs = set()
    try:
        while True:
            d = Daiet(sock.recv(2048))
            assert d.tree_id == 4 and d.sender == 1 and d.flags.BYPASS
            if d.seq in seqs:
                continue  # a retransmission: no ACKs come back here
            seqs.add(d.seq)
            for p in d.pairs:
                if isinstance(p, FixedPair) and p.key[:1] == b"\0":
                    continue  # a hole: an empty position (see wire::daiet)
                key = p.key.rstrip(b"\0") if isinstance(p, FixedPair) else p.key
                got.append((key, p.value))
            if d.flags.END:
                break
    finally:
        t.join(5)
        sock.close()
    assert sorted(got) == sorted((w.encode(), i) for i, w in enumerate(words))


def test_controller_plans_single_and_two_level_trees() -> None:
    from inswitch.apps.aggregation import controller as c

    single = c.plan_single_switch({1: 5, 2: 6, 3: 7}, n_mappers=4)
    assert [t.parent_port for t in single] == [5, 6, 7] and all(t.children == 4 for t in single)
    parts = sorted((t.part_base, t.part_size) for t in single)
    assert all(a[0] + a[1] <= b[0] for a, b in zip(parts, parts[1:])), "partitions do not overlap"
    for t in single:
        t.check()
    tors = [c.Tor("tor0", [1, 2], uplink=9, reducers={10: 3}), c.Tor("tor1", [1, 2, 3], uplink=9)]
    plan = c.plan_two_level(tors, "agg", {"tor0": 1, "tor1": 2})
    (t1,), (a,), (t0,) = plan["tor1"], plan["agg"], plan["tor0"]
    assert (t1.parent_port, t1.children) == (9, 3)  # tor1's mappers, up to the aggregation switch
    assert (a.parent_port, a.children) == (1, 1)  # tor1, down towards tor0
    assert (t0.parent_port, t0.children) == (3, 3)  # tor0's two mappers and the aggregation switch
    assert len({t0.switch_id, t1.switch_id, a.switch_id}) == 3
    many = c.plan_single_switch({1: 5}, n_mappers=1000)[0]
    many.check()
    assert many.switch_id >= 1000 and many.max_senders > many.switch_id, "no fixed limit on mappers"
