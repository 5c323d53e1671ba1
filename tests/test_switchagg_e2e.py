"""SwitchAgg end to end with real processes: the exactly-once host side
(`_native.agg_map` / `agg_reduce` with protocol "switchagg") on loopback, and WordCount in a
rack of network namespaces around a switch running "forward,switchagg" configured by the
switchagg controller, each checked against a Counter over the same input. Racks are named
`sagg2*` and always taken down (the job's teardown)."""

from __future__ import annotations

import collections
import os
import threading

import numpy as np
import pytest

from inswitch import _native
from inswitch.apps.wordcount import job as job_mod
from inswitch.apps.wordcount.job import JobSpec, run

ROOT = os.geteuid() == 0


def _pairs(words: list[bytes]) -> tuple[bytes, np.ndarray]:
    offs = np.zeros(len(words) + 1, dtype=np.uint64)
    offs[1:] = np.cumsum([len(x) for x in words])
    return b"".join(words), offs


#: Keys of every kind SwitchAgg must carry: short ones the engines aggregate, 64 bytes (the
#: last group), 65..255 bytes (no engine: through intact), longer than a SwitchAgg key
#: (escaped in pieces), binary bytes.
LONG = [b"L" * 64, b"M" * 65, b"N" * 255, b"O" * 256, bytes(range(256)) + b"tail" * 100, b"\x00\xffbin"]


@pytest.mark.parametrize("mode", ["udp", "switch"])
def test_switchagg_protocol_loopback(mode: str) -> None:
    """Without a switch: udp mode is the host-side protocol from the start; switch mode sees
    a mapper's in-network packet reach the reducer directly and falls back. Both exact."""
    base = 47700 if mode == "udp" else 47800
    words = [[f"w{(i * 7 + m) % 60}".encode() for i in range(3000)] + LONG for m in range(3)]
    ref = collections.Counter(w for ws in words for w in ws)
    res: dict[object, object] = {}
    mappers = [f"127.0.0.1:{base + 1 + i}" for i in range(3)]

    def reduce() -> None:
        res["r"] = _native.agg_reduce("switchagg", f"127.0.0.1:{base}", 3, mappers, "sum", 20.0, mode=mode)

    def map_(i: int) -> None:
        blob, offs = _pairs(words[i])
        n = len(words[i])
        res[i] = _native.agg_map("switchagg", mappers[i], [(3, f"127.0.0.1:{base}")], i, "sum",
                                 np.zeros(n, np.uint16), blob, offs, np.ones(n, np.uint32), 20.0, mode=mode)

    threads = [threading.Thread(target=reduce)] + [threading.Thread(target=map_, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    blob, offs, vals, st = res["r"]  # type: ignore[misc]
    got = {blob[offs[i]:offs[i + 1]]: int(vals[i]) for i in range(len(vals))}
    assert got == dict(ref)
    assert st["completed"] and st["fallback"] == (mode == "switch")
    for i in range(3):
        assert res[i]["completed"] and res[i]["packets_sent"] > 0  # type: ignore[index]


def test_switchagg_refuses_what_it_cannot_carry() -> None:
    with pytest.raises(ValueError, match="longer than"):
        blob, offs = _pairs([b"k" * 5000])
        _native.agg_map("switchagg", "127.0.0.1:47900", [(3, "127.0.0.1:47901")], 0, "sum",
                        np.zeros(1, np.uint16), blob, offs, np.ones(1, np.uint32), 1.0)


def _check(doc: dict) -> None:
    assert set(doc["runs"]) == {"udp", "switch"}
    for m in ("udp", "switch"):
        r = doc["runs"][m]
        assert r["correct"], (m, r["wrong_examples"], r["misplaced_keys"])
        assert r["wrong_keys"] == 0 and r["misplaced_keys"] == 0
        assert r["keys"] == doc["distinct_words"]
    assert doc["correct"] is True


needs_rack = [
    pytest.mark.netns,
    pytest.mark.skipif(not ROOT, reason="needs root: a rack of network namespaces"),
    pytest.mark.skipif(job_mod.switch_program_available("switchagg") is not None,
                       reason=f"switchagg unavailable: {job_mod.switch_program_available('switchagg')}"),
]


@needs_rack[0]
@needs_rack[1]
@needs_rack[2]
def test_wordcount_switchagg_in_a_rack() -> None:
    """`inswitch wordcount --zipf 1.0 --words 20000 --vocab 2000 --mode switch --program
    switchagg`: exact, aggregated by the switch (no fallback), fewer pairs at the reducers."""
    doc = run(JobSpec(zipf=1.0, words=20_000, vocab=2_000, mappers=4, reducers=2, program="switchagg",
                      rack=f"sa{os.getpid()}w", where="netns", timeout_s=90), ["switch"])
    _check(doc)
    sw = doc["runs"]["switch"]
    # The job was set up by Launch -> Configure -> Ack before its mappers started.
    la = sw["launch"]
    assert la["started"] and la["launches"] >= 1 and la["switch_acks"] >= 1 and la["switches"][0]["installs"] == 1
    assert sw["fallback"] is False, [r.get("fallback_reason") for r in sw["per_reducer"]]
    assert sw["reducer_pairs"] < 0.75 * sw["mapper_pairs"], (sw["reducer_pairs"], sw["mapper_pairs"])
    # Fewer bytes at the reducers than the udp baseline (the flush sends no empty packets).
    assert doc["reduction"] > 0.2, doc["reduction"]


@needs_rack[0]
@needs_rack[1]
@needs_rack[2]
def test_wordcount_switchagg_in_a_rack_under_loss() -> None:
    """3% of frames lost on every switch port: retransmissions, the switch's sequence check
    and (when a switch-to-reducer packet is lost) the host fallback keep the counts exact."""
    doc = run(JobSpec(zipf=0.5, words=40_000, vocab=8_000, mappers=3, reducers=2, loss=0.03, seed=11, program="switchagg",
                      rack=f"sa{os.getpid()}l", where="netns", timeout_s=90), ["switch"])
    _check(doc)
    sw = doc["runs"]["switch"]
    assert sw["switch_lost_frames"] > 0
    # A lost mapper packet or ACK is retransmitted; a lost switch->reducer packet makes the
    # reducer fall back: either way the loss was repaired, not absent.
    assert sw["retransmissions"] > 0 or sw["fallback"], sw


@pytest.fixture(scope="module")
def sagg_switch(switchd_factory):  # type: ignore[no-untyped-def]
    """One `forward,switchagg` switch over memory:5, shared by this module's P4Runtime tests."""
    return switchd_factory("--program", "forward,switchagg", "--ports", "memory:5")


def test_switchagg_trees_install_and_reinstall_over_p4runtime(sagg_switch) -> None:  # type: ignore[no-untyped-def]
    """The wordcount job's switchagg install on a real `inswitch switch` (forward+switchagg):
    one tree per reducer rooted at its port, every mapper a child, the root reporting as
    SWITCH_CHILD_MIN; a second job with the same tree ids replaces them."""
    from types import SimpleNamespace

    from inswitch.apps.switchagg.controller import SWITCH_CHILD_MIN
    from inswitch.p4rt import SwitchClient

    sw = sagg_switch
    hosts = [SimpleNamespace(port=p) for p in range(5)]
    env = SimpleNamespace(p4runtime=sw.p4runtime, rack_state=SimpleNamespace(hosts=hosts), fabric_state=None, launch=None,
                          map_addr=lambda i: f"10.0.0.{1 + i}:7000", reduce_addr=lambda j: f"10.0.0.{100 + j}:7001")
    for op in ("sum", "max"):
        spec = JobSpec(zipf=1.0, mappers=3, reducers=2, program="switchagg", op=op)
        acks = job_mod.install_trees(env, spec, [1, 2], lambda s: None)  # type: ignore[arg-type]
        assert acks[0]["trees"] == [1, 2]
        # Installed through SwitchAgg's task launch: Configure (again if its Ack was slow,
        # installed once), Ack, then the master's Ack.
        assert env.launch["started"] and env.launch["switch_acks"] >= 1 and env.launch["master_acks_sent"] == 1
        assert env.launch["switches"][0]["installs"] == 1
    with SwitchClient(sw.p4runtime) as c:
        got = {next(iter(e["match"].values())): e["params"] for e in c.read_entries("switchagg.tree_config")}
    assert set(got) == {1, 2}
    for tree, port in ((1, 3), (2, 4)):
        p = got[tree]
        assert (p["parent_port"], p["children"], p["op"], p["up_child"], p["regions"]) == (port, 3, 2, SWITCH_CHILD_MIN, 2)


def test_switchagg_launch_gates_on_the_switch_ack(sagg_switch) -> None:  # type: ignore[no-untyped-def]
    """Launch → Configure → Ack against a real switch: the first two Configures are lost,
    so the switch has no tree until the controller retries; the master's Ack comes only
    after the switch installed its trees and acknowledged."""
    from inswitch.apps.switchagg import launch
    from inswitch.apps.switchagg.controller import Tree
    from inswitch.p4rt import SwitchClient

    sw = sagg_switch
    routes = {7: Tree(7, parent_port=3, children=2, op="min", up_child=5), 9: Tree(9, parent_port=2, children=2)}
    agent = launch.SwitchAgent(sw.p4runtime, routes, [0, 1])
    seen_by_switch: list[int] = []
    real = agent.on_packet

    def on_packet(data: bytes) -> bytes | None:
        with SwitchClient(sw.p4runtime) as c:
            seen_by_switch.append(sum(next(iter(e["match"].values())) in routes for e in c.read_entries("switchagg.tree_config")))
        return real(data)

    agent.on_packet = on_packet  # type: ignore[method-assign]
    doc = launch.launch([agent], ["10.0.0.9", "10.0.0.10"], ["10.0.0.1", "10.0.0.2"], rto_s=0.3, lose_configures=2)
    assert doc["started"] and doc["configures_lost"] == 2 and doc["configure_retransmissions"] >= 2
    assert doc["switch_acks"] >= 1 and doc["master_acks_sent"] == 1 and doc["switches"][0]["installs"] == 1
    assert doc["ack_s"] >= 0.6, "two retransmission timeouts passed before the Ack"
    assert seen_by_switch[0] == 0, "no tree on the switch before the first Configure reached it"
    with SwitchClient(sw.p4runtime) as c:
        got = {next(iter(e["match"].values())): e["params"] for e in c.read_entries("switchagg.tree_config")}
    # Regions: an even split in the Configure's order.
    assert got[7] == {"parent_port": 3, "children": 2, "op": 1, "region": 0, "regions": 2, "up_child": 5}
    assert got[9]["region"] == 1 and got[9]["parent_port"] == 2
    with SwitchClient(sw.p4runtime) as c:  # leave the shared switch as found
        for t in routes:
            c.delete_entry("switchagg.tree_config", {"tree_id": t})
    # A switch that never answers: no start.
    dead = launch.SwitchAgent(sw.p4runtime, routes, [0, 1])
    with pytest.raises(launch.LaunchError, match="no Ack"):
        launch.launch([dead], ["10.0.0.9", "10.0.0.10"], [], timeout_s=0.3, rto_s=0.05, lose_configures=1000)


@needs_rack[0]
@needs_rack[1]
@needs_rack[2]
def test_experiment_fig10_11_quick(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`inswitch experiment switchagg-fig10-11 --quick` (one rack job, ~20 s): the counts are
    exact in every mode, the switch removed most of the Zipf pairs before the reducer, and
    the PNG is written."""
    from inswitch.experiments import all_experiments, lookup

    e = all_experiments()["switchagg-fig10-11"]
    res = e.run(True, lambda s: None)
    assert res["all_correct"] and not res["any_fallback"]
    row = res["rows"][-1]
    # Every mapper pair reaches a reducer unaggregated without the switch's engines.
    assert row["tcp"]["reducer_pairs"] == row["tcp"]["mapper_pairs"] == row["words"]
    assert row["switch"]["reducer_pairs"] < 0.5 * row["switch"]["mapper_pairs"]
    for n in e.numbers:
        assert lookup(res, n.ours_key) is not None, n.ours_key
    e.plot(res, tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 0
