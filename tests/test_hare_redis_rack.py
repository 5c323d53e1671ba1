"""Hare, NetCache, DySO and no caching in front of real redis-servers in a rack (issue 17):
`redis-benchmark -t get,set -n 20000` through `inswitch kvs proxy` in a client host, with
the switch daemon, the storage agents and each system's controller running; then a short
YCSB-A run with a hotspot shift through the client library. Every operation is recorded
and checked (per-key linearizability, stale reads, lost writes against Redis read back).

Needs root (namespaces), redis-server and redis-benchmark; the rack is named `hr<pid>`
and always taken down."""

from __future__ import annotations

import os
import shutil

import pytest

from inswitch.apps.hare import redisrack as rr

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: network namespaces and veth pairs"),
    pytest.mark.skipif(shutil.which("redis-server") is None or shutil.which("redis-benchmark") is None, reason="redis-server / redis-benchmark not installed"),
]


@pytest.fixture(scope="module")
def rack():
    from inswitch.topology import netns

    p = rr.RackParams(clients=1, servers=2, records=400, cache=64, batch=16, duration=2.0, workload="ycsb-a", shift="hot-in", shift_count=100, shift_at=1.0, window=16,
                         workdir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    r = rr.RedisRack(p)
    r.up()
    try:
        yield r
    finally:
        r.down()
        assert not netns.leftovers(f"{r.name}-")


@pytest.mark.parametrize("system", rr.RACK_SYSTEMS)
def test_redis_benchmark_and_ycsb_through_each_system(rack: rr.RedisRack, system: str) -> None:
    ctl = rack.use(system)
    h = rack.client_hosts[0]
    with rr.ControlThread(ctl) as ct:
        px = rr.ProxyInHost(rack, h)
        try:
            b = rr.redis_benchmark(rack, h, "127.0.0.1", px.port, 20000, 100)
        finally:
            doc = px.stop()
    assert set(b) == {"GET", "SET"} and b["GET"]["rps"] > 0 and b["SET"]["rps"] > 0
    assert doc["stats"]["ops"] == 40000, "every request of redis-benchmark answered through Hare"
    assert doc["counters"]["protocol_errors"] == 0
    v = px.verdict(doc, {})
    assert v.stale_reads == 0 and v.lost_writes == 0 and v.linearizable, v
    assert not ct.errors
    # Redis holds, for every key redis-benchmark wrote, a value it wrote
    written = {bytes.fromhex(k): bytes.fromhex(v) for k, kind, v, *_ in doc["history"] if kind == "set"}
    assert written and set(rack.read_back(sorted(written)).values()) <= set(written.values())
    if system == "none":
        assert doc["stats"]["hits"] == 0
    else:
        assert doc["stats"]["hits"] > 0, "the switch served part of the GETs"

    # YCSB-A (50% updates, distinct values) with a hotspot shift, every read checked.
    r = rack.run_load(system, rack.use(system) if system != "none" else ctl)
    assert r["stale_reads"] == 0 and r["lost_writes"] == 0 and r["linearizable"], r["nonlinearizable_keys"]
    assert r["correct"] and r["operations"] > 500
    assert (r["hit_rate"] > 0) == (system != "none")


@pytest.mark.parametrize("what", ["agent", "redis"])
def test_kill9_mid_run_loses_no_acknowledged_write(rack: rr.RedisRack, what: str) -> None:
    """SIGKILL of a storage host's agent or Redis in the middle of a Hare run (YCSB-A,
    half writes): every acknowledged write is in Redis afterwards (lost_writes == 0), no
    read is stale (the switch never serves a value the store lost), and the outage is
    reported."""
    ctl = rack.use("hare")
    r = rack.run_load("hare", ctl, fault=(what, 1.0, 0))
    f = r["fault"]
    assert f["process"] == what and f["unavailable_s"] is not None
    # nothing answers from that host while its process is down (replies in flight aside)
    assert 0 < f["restarted_after_s"] <= f["unavailable_s"] + 0.05
    assert r["lost_writes"] == 0 and r["stale_reads"] == 0 and r["linearizable"], r["nonlinearizable_keys"]
    assert r["hit_rate"] > 0


@pytest.mark.parametrize("system", ["hare", "netcache", "dyso"])
def test_switch_kill9_mid_run_refills_the_cache(rack: rr.RedisRack, system: str) -> None:
    """kill -9 of the rack's switch in the middle of a run (YCSB-A) of each caching system:
    the supervisor restarts it with forwarding only; the controller sees the new generation,
    treats the cache as empty (a fresh control loop, no moving mark left at the agents, the
    agents' record of what the switch holds forgotten), loads the system again and refills
    the cache. No read is stale, no acknowledged write lost, and the run reports the restart
    and how long the cache took to serve again."""
    old = (rack.p.duration, rack.p.netcache_threshold)
    # NetCache reports a key at `threshold` hits per statistics period (1 s): on a loaded
    # machine the clients slow to a few hundred ops/s and 16 left the cache nearly empty
    # before the death (hit rate under 0.05), which is not what this test is about. 4 keeps
    # the hottest keys reported at that rate; the switch is loaded with it at `use` and at
    # the re-install after the restart.
    rack.p.duration, rack.p.netcache_threshold = 7.0, 4
    try:
        r = rack.run_load(system, rack.use(system), fault=("switch", 2.0, 0))
    finally:
        rack.p.duration, rack.p.netcache_threshold = old
    assert r["stale_reads"] == 0 and r["lost_writes"] == 0 and r["linearizable"], r["nonlinearizable_keys"]
    assert r["correct"], r["control_errors"]
    [rec] = r["switch_restarts"]
    assert rec["exit"] == "signal SIGKILL" and "forwarding_at" in rec
    assert r["reinstalled_generations"] == [rec["generation"]]
    # the refilled cache serves again, within a bounded time of the death
    assert r["recovered_s"] is not None and r["recovered_s"] < 8, r["cache_recoveries"]
    assert "cache treated as empty" in r["restart_note"] and "refilled" in r["restart_note"]
    assert r["control"]["offloads"] > 0
    # and refills soon: the hit rate back to half what it was before the death. DySO's
    # analyzer refills in one round (0.05 s): a loop that still believed the dead switch
    # held its cells takes ~2.7 s here (measured); Hare's rounds (t_wait) and NetCache's
    # reports (threshold, Bloom filter cleared each second) take up to ~1.4 s.
    [c] = r["cache_recoveries"]
    assert c["hit_rate_before"] > 0.05 and c["refill_s"] is not None and c["refill_s"] < {"dyso": 1.5}.get(system, 3.0), c


def test_switch_recovery_skips_a_dead_agent(rack: rr.RedisRack) -> None:
    """The controller's recovery from a switch restart lifts every moving mark at the
    agents; an agent that is down at that moment has none to lift (its marks died with
    its process; a new one starts with none): the recovery skips it and counts it
    (`agents_down_at_recovery`) instead of failing, and lifts the marks at the others.
    With the agent back, the next run (YCSB-A) is correct and no write waits on a mark:
    the keys marked before, one at each agent, are written like any other."""
    import signal

    ctl = rack.use("hare")
    marked = {}
    for k in (rr.ycsb.record_key(r) for r in range(rack.p.records)):
        marked.setdefault(rr.server_index(k, rack.p.servers), k)
        if len(marked) == rack.p.servers:
            break
    for k in marked.values():
        ctl.moving.add(k)
    rack.stop_agent(0, signal.SIGKILL)
    try:
        new = rack.recover(ctl)
    finally:
        rack.start_agent(0)
    assert rack.agents_down_at_recovery == 1
    assert isinstance(new, rr.HareControl) and not new.moving and new.retired == [ctl.counters()]
    old = rack.p.duration
    rack.p.duration = 1.2  # short: the fast suite's budget
    try:
        r = rack.run_load("hare", new)
    finally:
        rack.p.duration = old
    assert r["correct"] and r["lost_writes"] == 0 and r["stale_reads"] == 0 and r["linearizable"], (r["control_errors"], r["nonlinearizable_keys"])
    assert sum(c["errors"] for c in r["clients"]) == 0, r["clients"]
    assert r["hit_rate"] > 0 and r["control"]["offloads"] > 0


@pytest.mark.slow
def test_switch_and_agent_kill9_together(rack: rr.RedisRack) -> None:
    """kill -9 of the rack's switch and of a storage agent at once (`switch-agent`): the
    agent is still down when the controller recovers from the restart (it is started
    again after), which the recovery skips and reports (`agents_down`); the run stays
    correct and the cache refills."""
    old = rack.p.duration
    rack.p.duration = 7.0
    try:
        r = rack.run_load("hare", rack.use("hare"), fault=("switch-agent", 2.0, 0))
    finally:
        rack.p.duration = old
    assert r["stale_reads"] == 0 and r["lost_writes"] == 0 and r["linearizable"], r["nonlinearizable_keys"]
    assert r["correct"], r["control_errors"]
    [c] = r["cache_recoveries"]
    assert c["agents_down"] == 1 and "1 agent(s) down at the recovery" in r["restart_note"], c
    assert r["recovered_s"] is not None and r["control"]["offloads"] > 0


def test_dyso_offload_churn_stays_correct(rack: rr.RedisRack) -> None:
    """DySO in the rack: its analyzer offloads the locally hottest keys of each r-MAT row
    with packets from the agents; with hot-in shifts (and a QO-Record that misses switch
    hits) cells are overwritten many times a second. Through that churn, under YCSB-A (half
    writes), no read is stale and no acknowledged write is lost."""
    r = rack.run_load("dyso", rack.use("dyso"))
    c = r["control"]
    assert c["offloads"] > c["evictions"] > 20, c
    assert r["stale_reads"] == 0 and r["lost_writes"] == 0 and r["linearizable"], r["nonlinearizable_keys"]
    assert r["correct"] and r["hit_rate"] > 0
    assert sum(a["queries"] for a in r["agents"]) > 0


# NetCache's redo after a restart is in the default run as `test_hare_netcache_ctl` (in
# process, deterministic); here in the rack too, with the slow ones.
@pytest.mark.parametrize(("system", "kind"), [("hare", "agent-round"), ("hare", "agent-round-restart"), ("netcache", "agent-round"),
                                            pytest.param("netcache", "agent-round-restart", marks=pytest.mark.slow), ("dyso", "agent-round")])
def test_agent_kill9_during_an_offloading_round(rack: rr.RedisRack, system: str, kind: str) -> None:
    """kill -9 of a storage host's agent while the controller is in the middle of an
    offloading round (at a request only a round makes: Hare's mark or data movement,
    NetCache's read of a marked key's value, DySO's offload packet), under YCSB-A (half
    writes) with a hotspot shift: no acknowledged write is lost, no read is stale (the
    cache never serves a value the store no longer has), the round's other objects are
    not left marked (their writes are answered again), and the controller goes on
    offloading after the agent is back. Two ways: the round's request meets the dead agent
    (the round is undone: `interrupted_rounds`), or the agent is already back when the
    request goes on, with none of the round's marks (a move whose mark was lost is done
    again before its slot serves: `moves_redone`). DySO marks nothing, so only the first
    way can hurt it: its cut offloads are done in a later round (`moves_redone`)."""
    old = rack.p.duration
    rack.p.duration = 4.0 if system == "hare" else 3.0
    try:
        r = rack.run_load(system, rack.use(system), fault=(kind, 1.2, 0))
    finally:
        rack.p.duration = old
    f = r["fault"]
    assert f["during"]["cmd"] in rr.ROUND_REQUESTS[system], f
    assert f["unavailable_s"] is not None and f["restarted_after_s"] > 0
    assert r["lost_writes"] == 0 and r["stale_reads"] == 0 and r["linearizable"], r["nonlinearizable_keys"]
    assert r["correct"], (r["control_errors"], r["control"])
    # nothing stays marked: not at the controller, and every write was answered
    assert not rack.control.moving, rack.control.moving
    assert f["unacked_writes"] == 0 and f["client_errors"] == 0, (f, r["clients"])
    if system == "netcache":  # the cut install's slot is not lost to the cache
        nc = rack.control.nc
        assert len(nc.cached) + len(nc.free) == rack.p.cache and not set(nc.cached.values()) & set(nc.free), (len(nc.cached), nc.free)
    if kind == "agent-round":
        assert r["control"]["interrupted_rounds"] >= 1, r["control"]
    if (system, kind, f["during"]["cmd"]) in (("hare", "agent-round-restart", "datamv"), ("netcache", "agent-round-restart", "cell"), ("dyso", "agent-round", "datamv")):
        # Hare's / NetCache's object was marked at the killed agent; DySO's cut offload
        assert r["control"]["moves_redone"] >= 1, r["control"]
    # offloading went on after the restart: the hit rate in the last second is at least
    # half that of the first (before the kill; hot-in shifts every second from 1.0 s)
    hr = r["series"]["hit_rate"]
    assert hr[0] and hr[-1] is not None and hr[-1] > 0.5 * hr[0], r["series"]
