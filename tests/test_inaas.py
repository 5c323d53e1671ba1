"""INaaS (python/inswitch/apps/inaas): applications as tenants of one switch, on the
in-process service (switch model with forward + inaas, goalkeeper, simulated time).
Every figure is checked against a reference computed without the switch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from inswitch.topology.state import process_tag

from inswitch.apps.inaas.runner import run_tenants
from inswitch.apps.inaas.service import READ, REDUCE, WRITE, Service

ALL = ["kv", "sparse", "dense", "bloom", "paxos"]


def _check(r: dict) -> None:
    for name, f in r["apps"].items():
        assert f["finished"], name
        assert f["correct"], (name, f["wrong_results"])
    assert r["cross_tenant_violations"] == 0
    assert r["switch"]["violations"] == 0
    for line in r["ledger"]:
        # The goalkeeper was told of every lease the switch granted, no more, no less.
        assert line["leases"] == line["goalkeeper_leases"], line
        assert line["alu_ops"] > 0 and line["packets"] > 0


def test_inaas_fits_tofino1_beside_forward() -> None:
    cp = subprocess.run([sys.executable, "-m", "inswitch", "resources", "forward,inaas", "--target", "tofino1", "--json", "-"], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stderr
    r = json.loads(cp.stdout)
    assert r["fits"], r["problems"]
    assert r["stages_used"] == 12 and r["stateful_alus_total"] >= 43
    assert r["parse_depth_bytes"] == 256
    notes = [n for p in r["programs"] if p["name"] == "inaas" for n in p["notes"]]
    assert any("recirculation" in n for n in notes)
    # Built for tofino1: 13 segments a pass (deadline, holder, key-value arrays, 4 a stage).
    assert any(n.startswith("13 of the 20") for n in notes), notes
    assert "inaas.kv_12" in {g["name"] for g in r["registers"]} and "inaas.kv_13" not in {g["name"] for g in r["registers"]}


def test_all_apps_concurrently_correct_with_ledger() -> None:
    r = run_tenants(ALL, quick=True)
    _check(r)
    assert set(r["apps"]) == set(ALL)
    assert r["ledger_adds_up"]
    # Each app is measured against its host-only version in the same run.
    for f in r["apps"].values():
        assert f["speedup"] > 0 and f["host_only"] > 0
    assert r["apps"]["kv"]["hit_ratio"] > 0.3
    dense = r["apps"]["dense"]
    # Quantization: coarser scales lose accuracy; the one used is close to the float sum.
    err = dense["max_abs_error_by_scale"]
    assert err["scale_2^4"] > err["scale_2^8"] > err["scale_2^16"]
    assert dense["max_abs_error_vs_float"] == pytest.approx(err["scale_2^16"])


def test_bloom_membership_answered_by_the_switch() -> None:
    """The switch answers the Bloom tenant's lookups: every answer equals the host copy of
    the filter (checked inside the app: `correct`), and the false-positive rate it
    measures is the theoretical one for the filter's size, the paper's 2.4 %."""
    r = run_tenants(["kv", "bloom"], quick=True, seed=6)
    _check(r)
    b = r["apps"]["bloom"]
    assert b["bloom_fp_probes_answered_by_switch"] == b["bloom_fp_probes"] == 4000
    assert b["bloom_queries_answered_by_switch"] > 0
    assert b["bloom_fp_rate"] == b["bloom_fp_host_copy"]
    p = b["bloom_fp_theory"]
    assert p == pytest.approx(b["bloom_fp_paper"], abs=0.002)
    assert abs(b["bloom_fp_rate"] - p) <= 4 * (p * (1 - p) / 4000) ** 0.5 + 0.005, b


def test_loss_is_completed_by_goalkeeper() -> None:
    r = run_tenants(["kv", "sparse", "paxos"], quick=True, loss=0.02, seed=4)
    _check(r)
    assert r["switch"]["lost_frames"] > 0
    assert r["goalkeeper"]["retransmissions"] > 0


@pytest.mark.parametrize("sched", ["fcfs", "fq"])
def test_baseline_schedulers_stay_correct(sched: str) -> None:
    _check(run_tenants(["kv", "dense", "bloom"], instances=2, scheduler=sched, quick=True, seed=2))


def test_attacker_detected_and_nothing_leaks() -> None:
    r = run_tenants(["kv", "bloom"], quick=True, attacker=True, seed=3)
    _check(r)
    a = r["attack"]
    assert r["attacker_detected"] and a["detection_time_us"] is not None
    assert a["attacker_values_leaked"] == 0
    assert a["forged_on_port"] > 0 and a["attacker_mismatches"] > 0
    assert a["legitimate_tenants_flagged"] == []


def test_same_tenant_workers_reduce_concurrently() -> None:
    # Four hosts of one job add into the same registers in the same batch (one takes the
    # lease, the others find it being moved and go to the goalkeeper): exact sums.
    svc = Service(32, 9)
    t = svc.raw.add_tenant(svc.raw.new_port(), "reduce", 200, 200)
    members = [t] + [svc.raw.add_member(t, svc.raw.new_port()) for _ in range(3)]
    rng = np.random.default_rng(0)
    vals = rng.integers(-1000, 1000, size=(4, 20))
    for w, m in enumerate(members):
        svc.submit(m, list(range(20)), [7] * 20, [REDUCE] * 20, [(5 << 16) | w] * 20, vals[w])
    svc.run(100_000)
    for m in members:
        d = svc.take(m)
        assert (d.status[0] == 1).all()
    got = None
    for _ in range(3):
        svc.submit(t, list(range(20)), [7] * 20, [READ] * 20, [(5 << 16) | 0xF] * 20, [0] * 20)
        svc.run(100_000)
        d = svc.take(t)
        if (d.status[0] == 1).all():
            got = d.value[0]
            break
    assert got is not None and (got == vals.sum(axis=0)).all()
    # Another tenant cannot read it.
    o = svc.raw.add_tenant(svc.raw.new_port(), "reduce", 200, 200)
    svc.submit(o, [0], [7], [READ], [(5 << 16) | 0xF], [0])
    svc.run(100_000)
    assert svc.take(o).status[0, 0] == 2
    assert svc.raw.switch_usage(t)["leases"] == svc.raw.goalkeeper_leases(t)


def test_cli_run_json_and_ledger(tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    env = {**os.environ, "INSWITCH_RUN_DIR": str(tmp_path / "run")}  # the ledger's home: this test's own
    cp = subprocess.run(
        [sys.executable, "-m", "inswitch", "tenants", "run", "--apps", "kv,bloom,paxos", "--instances", "2", "--attacker", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
    )
    assert cp.returncode == 0, cp.stdout + cp.stderr
    r = json.loads(out.read_text())
    for k in ("apps", "cross_tenant_violations", "attacker_detected", "ledger"):
        assert k in r
    assert all("correct" in f for f in r["apps"].values())
    assert r["attacker_detected"] is True
    cp = subprocess.run([sys.executable, "-m", "inswitch", "tenants", "ledger"], capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env)
    assert cp.returncode == 0 and "ledger" in cp.stdout


@pytest.mark.parametrize("name", ["inaas-table2", "inaas-table3", "inaas-fig7", "inaas-attack"])
def test_experiments_quick(name: str, tmp_path: Path) -> None:
    from inswitch.experiments import all_experiments

    e = all_experiments()[name]
    res = e.run(True, lambda s: None)
    assert res.get("correct", True) in (True,)
    e.plot(res, tmp_path / f"{name}.png")
    assert (tmp_path / f"{name}.png").stat().st_size > 1000
    if name == "inaas-attack":
        assert res["cross_tenant_violations"] == 0 and res["detected"]


@pytest.mark.skipif(__import__("os").geteuid() != 0, reason="needs root: network namespaces, veth pairs, AF_PACKET")
def test_real_processes_on_a_rack() -> None:
    # The switch process (forward + inaas) between namespaces; goalkeeper and two tenants'
    # adapters are separate processes on AF_PACKET sockets; tenants registered over P4Runtime.
    from inswitch.apps.inaas.rack import run_on_rack
    from inswitch.topology import netns

    r = run_on_rack(f"inaas{process_tag()}", seconds=20)
    _check_real_run(r)
    assert not netns.leftovers("inaas")


@pytest.mark.netns
@pytest.mark.skipif(__import__("os").geteuid() != 0, reason="needs root: network namespaces, veth pairs, AF_PACKET")
def test_real_processes_unchanged_on_the_tor_of_a_fabric() -> None:
    # The same goalkeeper and tenants on the ToR of their hosts inside a leaf-spine fabric:
    # only that leaf runs forward,inaas, the fabric controller's routing stays, the tenants
    # are registered on the ToR alone; the same results as on a rack.
    from inswitch.apps.inaas.rack import run_on_rack
    from inswitch.topology import netns

    name = f"ia{process_tag()[-4:]}"
    r = run_on_rack(name, seconds=20, fabric="leaf-spine:2,1,3")
    assert r["mode"].startswith("the ToR (leaf1) of a fabric leaf-spine:2,1,3"), r["mode"]
    _check_real_run(r)
    assert not netns.leftovers(f"{name}-")


def _check_real_run(r: dict) -> None:
    a, b = r["tenant_a"], r["tenant_b"]
    assert all(not x.get("lost") for x in a + b)
    # A: the write takes 20 leases (through the goalkeeper), the read is answered by the switch.
    assert a[0]["status"] == [1] * 20 and a[0]["via_goalkeeper"]
    assert a[1]["status"] == [1] * 20 and not a[1]["via_goalkeeper"]
    assert a[1]["values"] == [1000 + j for j in range(20)]
    # B cannot read A's registers with A's keys; its own work normally.
    assert b[0]["status"] == [2] * 20 and all(v == 0 for v in b[0]["values"])
    assert b[2]["values"] == [2000 + j for j in range(20)] and not b[2]["via_goalkeeper"]
    # Each write takes its 20 leases once; a loaded machine can delay the answer past the
    # tenant's 0.5 s resend, and a resend the goalkeeper sees renews them (counted again).
    leases = r["goalkeeper"]["leases"]
    for uid, write in ((0x1234567, a[0]), (0x7654321, b[1])):
        assert 20 <= leases[str(uid)] <= 20 * write["tries"], (leases, write)
    assert set(leases) == {str(0x1234567), str(0x7654321)}


def test_subscription_is_priority_on_switch_memory() -> None:
    from inswitch.apps.inaas.controller import schedule

    apps = ["dense", "bloom", "paxos", "dense", "kv"]
    plain = schedule("fcfs", apps, 128)
    sub = schedule("fcfs", apps, 128, [False, False, False, False, True])
    # Last to arrive, the subscribed KV store still gets what it asks for, unshared.
    assert plain[-1].size < 96 or any(r.base == plain[-1].base for r in plain[:-1])
    assert sub[-1].size == 96 and sub[-1].subscription
    assert all(r.base >= sub[-1].base + sub[-1].size or r.base + r.size <= sub[-1].base for r in sub[:-1])
    fq = schedule("fq", apps, 120, [False, False, False, False, True])
    assert fq[-1].size == 2 * fq[0].size
    r = run_tenants(["kv", "bloom"], quick=True, subscribers=("kv",))
    plans = {line["tenant"]: line["plan"] for line in r["ledger"]}
    assert plans == {"kv#0": "subscription", "bloom#0": "pay-per-use"}


def test_scapy_layer_matches_the_rust_encoder() -> None:
    from inswitch import _native
    from inswitch.scapy.inaas import INaaS, frame

    segs = list(range(3))
    rust = _native.inaas_frame(
        bytes.fromhex("020000000001"), bytes.fromhex("020000000002"), 77, 5, 900,
        bytes(segs), np.array([4, 5, 6], "<u2").tobytes(), bytes([WRITE, READ, REDUCE]),
        np.array([10, 11, (3 << 16) | 2], "<u4").tobytes(), np.array([-1, 0, 9], "<i4").tobytes(),
    )
    ours = frame("02:00:00:00:00:01", "02:00:00:00:00:02", [(4, 10, -1), (5, 11, 0), (6, (3 << 16) | 4, 9)],
                 seq=5, time_limit=900, uid=77, valid=0b111, read=0b010, write=0b001, reduce=0b100)
    assert bytes(ours) == rust
    p = INaaS(rust[14:])
    assert p.uid == 77 and p.items[2].key == (3 << 16) | 4 and p.items[0].value == -1


def test_ledger_charges_add_up() -> None:
    from inswitch.apps.inaas.controller import Prices

    r = run_tenants(["kv", "bloom", "dense"], quick=True)
    p = Prices()
    for line in r["ledger"]:
        # Charged: the holds measured from the model's grant log, at most the full term.
        assert line["register_seconds_full_term"] == pytest.approx(line["leases"] * line["lease_s"])
        assert line["register_seconds"] == line["held_s_measured"] and line["pricing"].startswith("measured holds")
        assert 0 < line["register_seconds"] <= line["register_seconds_full_term"], line
        assert line["lease_s"] * 1e6 <= r["simulated_us"]
        pay = line["alu_ops"] * p.per_alu_op + line["register_seconds"] * p.per_register_second
        assert line["pay_per_use_equivalent"] == pytest.approx(pay)
        assert line["charge"] == pytest.approx(p.subscription if line["plan"] == "subscription" else pay)


def test_prepared_leases_are_taken_again_once_lapsed() -> None:
    """Real runs: the parameter server's registers, taken before the phase with a lease,
    lapse if the runner's wait for every tenant's READY outlasts half of it; the tenant
    then waits for the lapse and takes them again before its phase (else an attacker
    released with the phase takes them, and the tenant's own accesses count against it)."""
    import time

    from inswitch.apps.inaas.adapters import SparseApp

    calls: list[tuple[str, float]] = []

    class Svc:
        lease_us = 200_000  # 0.2 s

        def run(self, us: int) -> None:
            calls.append(("run", time.monotonic()))

    app = SparseApp.__new__(SparseApp)
    app.svc = Svc()  # type: ignore[assignment]
    app.prepare = lambda phase: calls.append((f"prepare {phase}", time.monotonic()))  # type: ignore[method-assign]
    assert app.renew_prepared("inaas", 0.05) is False  # most of the lease left: held at the phase's start
    assert app.renew_prepared("host", 0.5) is False  # host-only: nothing leased
    assert calls == []
    t0 = time.monotonic()
    assert app.renew_prepared("inaas", 0.15) is True
    assert [c for c, _ in calls] == ["prepare inaas", "run"]
    assert calls[0][1] - t0 >= 0.05  # not before the old lease lapsed (a holder cannot renew)
