"""DAIET in a rack, large jobs: the switch's final flush (thousands of packets per tree,
sent as fast as the switch's recirculation walks the table) must reach the reducer whole,
run after run, so the trees complete in the switch without the host-side fallback.

4 mappers, 2 reducers (one tree each), Pareto-skewed words over many keys; each run's
results equal a Counter. `python tests/test_daiet_flush.py --runs 10 --words 200000` repeats
the large runs by hand and prints the fallback rate and the kernel's drop counters.

Needs root (namespaces, veth, AF_PACKET). The rack is named `flushfix...` and always taken down.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from typing import Any, Iterator

import numpy as np
import pytest

from inswitch.apps.aggregation import controller
from inswitch.topology import Rack, RackState, netns

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: network namespaces, veth pairs and AF_PACKET"),
]

PY = sys.executable
N_MAPPERS = 4
N_REDUCERS = 2

# Words of a mapper: Pareto(0.8)-ranked keys over a vocabulary, the same in the mapper
# process and in the test's reference (same seed, same generator).
WORDS = textwrap.dedent('''
    import numpy as np
    def words(seed, n, vocab, scale):
        rng = np.random.default_rng(seed)
        ranks = np.minimum(np.floor(rng.pareto(0.8, n) * scale).astype(np.int64), vocab - 1)
        return ranks
''')

MAPPER = WORDS + textwrap.dedent('''
    import json, sys
    from inswitch import _native
    a = json.loads(sys.argv[1])
    ranks = words(a["seed"], a["n"], a["vocab"], a["scale"])
    ws = [f"k{r}".encode() for r in ranks.tolist()]
    offs = np.zeros(len(ws) + 1, dtype=np.uint64)
    offs[1:] = np.cumsum([len(w) for w in ws])
    st = _native.agg_map("daiet", a["bind"], [tuple(t) for t in a["trees"]], a["id"], "sum",
                         (ranks % len(a["trees"])).astype(np.uint16), b"".join(ws), offs,
                         np.ones(len(ws), np.uint32), a["timeout"], mode="switch")
    print(json.dumps(st), flush=True)
''')

REDUCER = textwrap.dedent('''
    import json, sys
    from inswitch import _native
    a = json.loads(sys.argv[1])
    blob, offs, vals, st = _native.agg_reduce("daiet", a["bind"], a["tree"], a["mappers"], "sum", a["timeout"], mode="switch")
    st["result"] = {blob[offs[i]:offs[i + 1]].decode(): int(vals[i]) for i in range(len(vals))}
    print(json.dumps(st), flush=True)
''')


def _free_tcp() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def _words(seed: int, n: int, vocab: int, scale: float) -> Any:
    ns: dict[str, Any] = {}
    exec(WORDS, ns)  # the very generator the mapper processes run
    return ns["words"](seed, n, vocab, scale)


def _udp_counters(ns: str) -> dict[str, int]:
    """The namespace's UDP counters (`/proc/net/snmp`): RcvbufErrors is a full socket buffer."""
    out = subprocess.run(netns.netns_argv(ns, ["cat", "/proc/net/snmp"]), capture_output=True, text=True, timeout=10).stdout
    lines = [line.split() for line in out.splitlines() if line.startswith("Udp:")]
    if len(lines) < 2:
        return {}
    return {k: int(v) for k, v in zip(lines[0][1:], lines[1][1:])}


def _switch_drops(st: RackState) -> dict[str, float]:
    """The switch's drop and queue counters from its metrics endpoint."""
    import urllib.request
    with urllib.request.urlopen(f"http://{st.switch.metrics}/metrics", timeout=5) as f:
        text = f.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or not any(w in line for w in ("drop", "full", "error", "recirc")):
            continue
        k, _, v = line.rpartition(" ")
        try:
            out[k] = float(v)
        except ValueError:
            pass
    return out


def up_rack(name: str) -> tuple[Rack, RackState]:
    r = Rack()
    return r, r.up(N_MAPPERS + N_REDUCERS, name=name, programs="forward,daiet", p4runtime=_free_tcp(), metrics=_free_tcp(), mode="netns")


def run_job(st: RackState, trees: tuple[int, int], n_words: int, vocab: int, seed: int, scale: float = 1.0, timeout: float = 60.0,
            active: int = N_MAPPERS, check: bool = True) -> dict[str, Any]:
    """One job: install the two trees (fresh registers), run 4 mappers and 2 reducers as
    processes in their namespaces, check each reducer against a Counter. With `check`
    False and fewer `active` mappers the switch never hears the last END, so it never
    flushes, and everyone times out: an abandoned job."""
    mappers, reducers = st.hosts[:N_MAPPERS], st.hosts[N_MAPPERS:]
    acks = controller.install({st.switch.p4runtime: controller.plan_single_switch({t: h.port for t, h in zip(trees, reducers)}, n_mappers=N_MAPPERS)},
                              num_ports=len(st.hosts))
    red_addrs = [f"{h.ip}:7070" for h in reducers]
    map_addrs = [f"{h.ip}:6001" for h in mappers]
    before = [_udp_counters(h.netns or "") for h in reducers]
    sw0 = _switch_drops(st)
    rps = [subprocess.Popen(netns.netns_argv(h.netns or "", [PY, "-c", REDUCER, json.dumps({"bind": red_addrs[i], "tree": trees[i], "mappers": map_addrs, "timeout": timeout})]),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i, h in enumerate(reducers)]
    time.sleep(0.3)  # the reducers' sockets are bound before the first flush can arrive
    mps = [subprocess.Popen(netns.netns_argv(h.netns or "", [PY, "-c", MAPPER, json.dumps({"bind": map_addrs[i], "trees": list(zip(trees, red_addrs)), "id": i,
                                                                                          "seed": seed * 100 + i, "n": n_words, "vocab": vocab, "scale": scale, "timeout": timeout})]),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i, h in enumerate(mappers[:active])]
    ref: list[collections.Counter[str]] = [collections.Counter() for _ in trees]
    for i in range(N_MAPPERS):
        ranks = _words(seed * 100 + i, n_words, vocab, scale)
        for r, c in zip(*np.unique(ranks, return_counts=True)):
            ref[int(r) % len(trees)][f"k{int(r)}"] += int(c)
    outs: list[dict[str, Any]] = []
    try:
        for p in mps:
            o, e = p.communicate(timeout=timeout + 30)
            assert p.returncode == 0, e
            assert json.loads(o)["completed"] or not check
        for p in rps:
            o, e = p.communicate(timeout=timeout + 30)
            assert p.returncode == 0, e
            outs.append(json.loads(o))
    finally:
        for p in [*rps, *mps]:
            if p.poll() is None:
                p.kill()
                p.wait()
    if not check:
        return {"stale_cells_cleared": acks[0]["stale_cells_cleared"]}
    after = [_udp_counters(h.netns or "") for h in reducers]
    sw1 = _switch_drops(st)
    switch_drops = {k: v - sw0.get(k, 0.0) for k, v in sw1.items() if v != sw0.get(k, 0.0)}
    for i, res in enumerate(outs):
        assert res["completed"], res
        if res["result"] != dict(ref[i]):
            got, want = res["result"], dict(ref[i])
            diff = {k: (got.get(k), want.get(k)) for k in set(got) | set(want) if got.get(k) != want.get(k)}
            stats = {k: v for k, v in res.items() if k != "result"}
            raise AssertionError(f"tree {trees[i]}: {len(diff)} of {len(want)} keys differ from the Counter, e.g. {list(diff.items())[:5]}; {stats}; switch counters changed: {switch_drops}")
        res["rcvbuf_errors"] = after[i].get("RcvbufErrors", 0) - before[i].get("RcvbufErrors", 0)
        res["in_datagrams"] = after[i].get("InDatagrams", 0) - before[i].get("InDatagrams", 0)
        del res["result"]
    return {"reducers": outs, "fallbacks": sum(bool(r["fallback"]) for r in outs), "switch_counters": switch_drops,
            "stale_cells_cleared": acks[0]["stale_cells_cleared"]}


@pytest.fixture(scope="module")
def rack() -> Iterator[RackState]:
    name = f"ff{os.getpid()}"
    r = Rack()
    try:
        yield r.up(N_MAPPERS + N_REDUCERS, name=name, programs="forward,daiet", p4runtime=_free_tcp(), metrics=_free_tcp(), mode="netns")
    finally:
        r.down(name)
        assert not netns.leftovers(f"{name}-")


def test_large_flush_reaches_the_reducer_every_run(rack: RackState) -> None:
    """Several jobs whose flushes are thousands of packets per tree: no run falls back, no
    datagram is dropped at the reducer's socket, and every result equals the Counter."""
    t0 = time.monotonic()
    for run in range(3):
        res = run_job(rack, (20 + 2 * run, 21 + 2 * run), n_words=40_000, vocab=20_000, seed=run + 1, scale=1000.0, timeout=30.0)
        for r in res["reducers"]:
            assert not r["fallback"], r["fallback_reason"]
            assert r["rcvbuf_errors"] == 0 and r["socket_drops"] == 0, r
            assert r["rcvbuf_bytes"] >= 8 << 20, f"the reducer's socket has a large buffer: {r['rcvbuf_bytes']}"
            # ~7,800 keys per tree: a flush of ~800 packets, several times what a default
            # (~208 KB) socket buffer holds while the reducer is not scheduled.
            assert r["packets"] > 600, f"the flush is large: {r['packets']} packets"
        assert time.monotonic() - t0 < 60


def test_job_after_an_abandoned_job_is_exact(rack: RackState) -> None:
    """A job abandoned midway (a mapper never came: no flush) leaves claimed cells
    in the switch. Installing the next job on the same tree slots must empty them: a stale
    key still matches the new job's pairs, which would then aggregate into a cell on no
    index stack and never be flushed (the reducer would complete, without fallback, with
    counts missing). The next job equals the Counter."""
    run_job(rack, (40, 41), n_words=20_000, vocab=20_000, seed=7, scale=1000.0, timeout=3.0, active=N_MAPPERS - 1, check=False)
    res = run_job(rack, (42, 43), n_words=20_000, vocab=20_000, seed=8, scale=1000.0, timeout=30.0)
    assert res["stale_cells_cleared"] > 0, "the first job was abandoned with cells in use"
    for r in res["reducers"]:
        assert not r["fallback"], r["fallback_reason"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--words", type=int, default=200_000)
    ap.add_argument("--vocab", type=int, default=20_000)
    ap.add_argument("--scale", type=float, default=1.0, help="Pareto draws times this, floored: more distinct keys, larger flushes")
    a = ap.parse_args()
    name = f"ff{os.getpid()}"
    r, st = up_rack(name)
    fallbacks = 0
    try:
        for run in range(a.runs):
            t = time.monotonic()
            res = run_job(st, (30 + 2 * run, 31 + 2 * run), a.words, a.vocab, seed=run + 1, scale=a.scale)
            fallbacks += res["fallbacks"]
            for x in res["reducers"]:
                print(json.dumps({"run": run, "s": round(time.monotonic() - t, 1), **{k: x[k] for k in ("fallback", "packets", "duplicates", "rcvbuf_errors", "socket_drops", "rcvbuf_bytes", "in_datagrams", "fallback_reason")}}), flush=True)
            print(json.dumps({"run": run, "switch_counters": res["switch_counters"]}), flush=True)
    finally:
        r.down(name)
    print(f"trees fallen back: {fallbacks} of {a.runs * N_REDUCERS}")


if __name__ == "__main__":
    main()
