"""Issue 22 §6, briefly: `inswitch soak` (the harness `make soak` runs for 10 minutes) for
about half a minute with the KV workload, WordCount and INaaS tenants together under 1%
loss, duplication and reordering on every port and a kill -9 of the KV rack's switch in
the middle. Every round is checked against its reference by the harness; here we check
that the rounds overlapped, each was correct, one KV round ran through the restart and
recovered, the memory and descriptor figures are there, and nothing is left behind.
(NetSHa rounds take ~25 s each, too long for this test; `make soak` runs them.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

needs_rack = [
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: network namespaces"),
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed"),
]


def rack_test(f):  # type: ignore[no-untyped-def]
    for m in needs_rack:
        f = m(f)
    return f


@rack_test
def test_soak_briefly_with_a_switch_restart(tmp_path: Path) -> None:
    js, png = tmp_path / "soak.json", tmp_path / "soak.png"
    cp = subprocess.run([sys.executable, "-m", "inswitch", "soak", "--minutes", "0.5", "--workloads", "kv,wordcount,inaas",
                         "--sample", "1", "--json", str(js), "--png", str(png)], capture_output=True, text=True, timeout=240)
    doc = json.loads(js.read_text())
    wl = doc["workloads"]
    for w in ("kv", "wordcount", "inaas"):
        assert wl[w]["rounds"] >= 1 and wl[w]["correct_rounds"] == wl[w]["rounds"], (w, wl[w]["failed_rounds"])
    # the workloads overlapped in time
    assert max(v["first_start_s"] for v in wl.values()) < min(v["last_end_s"] for v in wl.values())
    r = doc["restart"]
    assert r["killed"] and r["new_pid"] not in (None, r["pid"]) and r["back_after_s"] < 15
    [through] = r["kv_rounds_through_restart"]
    assert through["correct"] and through["reinstalled_generations"] == [2] and "cache treated as empty" in through["restart_note"]
    assert doc["correct"] and doc["config"]["fault"].startswith("loss=0.01,dup=0.01,reorder=0.01")
    m = doc["switch_memory"]
    assert m["by_generation"]["2"]["rss_slope_mb_per_min"] is not None and m["rss_flat"] in (True, False)
    assert {"kv-redis0", "kv-agent0", "kv-worker"} <= set(doc["host_fds"])
    # the per-round workers are judged on what they report after each round's teardown
    for w in ("wordcount", "inaas"):
        h = doc["host_fds"][f"{w}-worker"]
        assert h["judged_on"] == "rounds" and h["rounds_judged"] >= 2 and h["growth"] is not None, h
        assert all(isinstance(r["fds_after"], int) and r["fds_after"] >= 3 for r in wl[w]["results"])
    assert doc["host_fds"]["kv-worker"]["judged_on"] == "samples"
    td = doc["teardown"]
    assert td["clean"] and not td["leftover_processes"] and not td["leftover_netns_and_links"] and td["processes_checked"] >= 8
    assert png.stat().st_size > 10_000
    assert cp.returncode == (0 if doc["ok"] else 1), cp.stderr[-2000:]
    assert "soak:" in cp.stdout and "teardown" in cp.stdout


def test_samples_after_the_deadline_are_not_judged() -> None:
    """The workers take their racks down after the deadline, the KV switch included; a
    sample taken while that switch exits (RSS 126 -> 78 MB, 24 -> 3 fds, as in a 10-minute
    run) must not turn its memory slope into a "leak" (-1.2 MB/min there)."""
    from inswitch.soak.run import Soak, SoakConfig

    s = Soak(SoakConfig(minutes=1, warmup_s=10))
    shutil.rmtree(s.dir)
    def sample(t: float, rss: float, fds: int) -> dict:
        return {"t": t, "switch_pid": 1, "generation": 1, "rss_mb": rss, "fds": fds, "hosts": {"kv-worker": fds}}
    s.samples = [sample(5.0 * i, 126.0 + 0.001 * i, 24) for i in range(13)] + [sample(65.0, 78.0, 3)]
    m = s.memory()
    assert m["rss_flat"] and m["by_generation"]["1"]["rss_mb_last"] == pytest.approx(126.01, abs=0.01)
    assert len(s.measured()) == 13 and s.host_fds()["kv-worker"]["last"] == 24


# ---- the descriptor verdict, on made-up series (no rack) ------------------------------------

ROUND_S, GAP_S, SAMPLE_S = 20.0, 0.5, 5.0


def fake_soak(minutes: float = 10.0):  # type: ignore[no-untyped-def]
    from inswitch.soak.run import Soak, SoakConfig

    s = Soak(SoakConfig(minutes=minutes, warmup_s=60.0, workloads=["netsha", "kv"]))
    shutil.rmtree(s.dir)
    s.t0 = 1_000.0
    s.events["netsha"].append({"event": "ready", "pid": 2, "pids": {}, "per_round_rack": True})
    s.events["kv"].append({"event": "ready", "pid": 3, "pids": {"redis0": 4}, "per_round_rack": False})
    return s


def in_round(t: float, leaked: int) -> int:
    """A NetSHa worker's descriptors at t (seconds from the start): 3 + leaked for GAP_S
    between rounds, 8, 11 or 9 (its rack coming up, queries, going down) in a round."""
    phase = t % ROUND_S
    if phase < GAP_S:
        return 3 + leaked
    return leaked + (8, 11, 9)[int(3 * (phase - GAP_S) / (ROUND_S - GAP_S))]


def run_fake(s, leak_per_round: int, seed: int, redis=lambda i: 10) -> None:  # type: ignore[no-untyped-def]
    """Rounds of ROUND_S over the soak, each reporting its count after the teardown; samples
    every SAMPLE_S at a random phase (jitter of up to a second, as a busy machine gives)."""
    import random

    rng = random.Random(seed)
    end = s.cfg.minutes * 60.0
    n, t = 0, 0.0
    while t + ROUND_S <= end:
        s.events["netsha"].append({"event": "round", "n": n, "correct": True, "start": s.t0 + t + GAP_S, "end": s.t0 + t + ROUND_S,
                                   "fds_after": 3 + leak_per_round * (n + 1), "rss_mb_after": 90.0})
        n, t = n + 1, t + ROUND_S
    i, t = 0, rng.uniform(0, SAMPLE_S)
    while t <= end:
        leaked = leak_per_round * int(t // ROUND_S)
        s.samples.append({"t": t, "switch_pid": 9, "generation": 1, "rss_mb": 120.0, "fds": 24,
                          "hosts": {"netsha-worker": in_round(t, leaked), "kv-redis0": redis(i), "kv-worker": 15}})
        i, t = i + 1, t + SAMPLE_S + rng.uniform(-1.0, 1.0)


def test_a_per_round_worker_is_judged_between_rounds_not_at_a_sampled_phase() -> None:
    """The 10-minute run's false alarm: NetSHa's worker goes 3 -> 8..11 -> 3 every round and
    the periodic samples caught it between rounds early on and never later (floor 3 then
    8): "growth". Judged on its own count after each teardown, it is flat."""
    from inswitch.soak.run import fd_growth

    s = fake_soak()
    run_fake(s, leak_per_round=0, seed=9)  # one of about a third of the seeds that fool the floor
    sampled = [x["hosts"]["netsha-worker"] for x in s.measured() if x["t"] >= s.cfg.warmup_s]
    assert 3 in sampled[: len(sampled) // 2] and 3 not in sampled[len(sampled) // 2:], sampled
    assert fd_growth(sampled) > 0  # what the floor of the samples says
    h = s.host_fds()
    assert h["netsha-worker"]["growth"] == 0 and all(v["growth"] <= 0 for v in h.values()), h["netsha-worker"]
    assert h["netsha-worker"]["judged_on"] == "rounds" and h["netsha-worker"]["rounds_judged"] == 28 and h["kv-redis0"]["growth"] == 0 and h["kv-worker"]["judged_on"] == "samples"


def test_many_sampled_phases_pass_and_a_leak_of_one_per_round_fails() -> None:
    for seed in range(20):
        s = fake_soak()
        run_fake(s, leak_per_round=0, seed=seed)
        assert s.host_fds()["netsha-worker"]["growth"] == 0, seed  # the sampled floor says > 0 for about a third
        s = fake_soak()
        run_fake(s, leak_per_round=1, seed=seed)
        h = s.host_fds()["netsha-worker"]
        assert h["growth"] >= 10 and h["last"] - h["first"] == h["rounds_judged"] - 1, (seed, h)
    # a short soak: four rounds after the warm-up (6, 7, 8, 9) still show the leak
    s = fake_soak(minutes=2.0)
    run_fake(s, leak_per_round=1, seed=0)
    h = s.host_fds()["netsha-worker"]
    assert h["rounds_judged"] == 4 and h["between_rounds"] == [6, 7, 8, 9] and h["growth"] == 2, h


def test_jitter_between_rounds_is_not_growth() -> None:
    from inswitch.soak.run import round_fd_growth

    assert round_fd_growth([3, 4, 3, 3, 3, 5, 3, 4, 3, 3]) == 0  # caught high now and then
    assert round_fd_growth([3, 3, 3, 3, 3, 4, 4, 4, 4, 4]) == 1  # one more kept open for good
    assert round_fd_growth([3]) is None


def test_a_leaking_long_lived_process_fails() -> None:
    """Redis (sampled, as the KV switch and the agents are) gaining a descriptor every
    minute: growth, and the soak's verdict says so."""
    s = fake_soak()
    run_fake(s, leak_per_round=0, seed=3, redis=lambda i: 10 + i // 12)
    h = s.host_fds()
    assert h["kv-redis0"]["judged_on"] == "samples" and h["kv-redis0"]["growth"] >= 3, h["kv-redis0"]
    assert h["netsha-worker"]["growth"] == 0
