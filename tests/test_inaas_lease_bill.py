"""Register-seconds billed from measured lease holds (the goalkeeper's grant log), beside
the old full-term figure (leases x min(T, run))."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from inswitch.apps.inaas.controller import Prices, Region, bill, measured_holds
from inswitch.topology.state import process_tag

ROOT = os.geteuid() == 0


def test_hold_ends_at_takeover_deadline_or_run_end() -> None:
    # (segment, index, holder, granted at µs, term µs)
    grants = [
        (0, 5, 1, 100, 1_000),  # taken by holder 2 at 400, before its deadline 1100: 300
        (0, 5, 2, 400, 1_000),  # runs to its deadline 1400: 1000
        (0, 5, 1, 2_000, 1_000),  # the run ends at 2500: 500
        (3, 5, 1, 150, 50),  # another cell (same index, other segment): its deadline, 50
        (1, 7, 2, 10, 100),  # expired at 110, the same holder takes it again at 900: 100
        (1, 7, 2, 900, 10_000),  # run end: 1600
        (2, 9, 3, 3_000, 100),  # granted after the run's end: nothing
    ]
    assert measured_holds(grants, 2_500) == {1: 300 + 500 + 50, 2: 1_000 + 100 + 1_600, 3: 0}
    # A cell's grants need not come in time order.
    assert measured_holds(list(reversed(grants)), 2_500) == {1: 850, 2: 2_700, 3: 0}
    assert measured_holds([], 10) == {}


def test_bill_charges_the_measured_holds_and_keeps_the_full_term_beside() -> None:
    usage = {"alu_ops": 1000, "packets": 10, "mismatches": 0, "leases": 4}
    r = Region(0, 8, 1_000_000, 1_000_000)
    p = Prices()
    line = bill("kv#0", usage, 4, r, p, 3_000_000, held_us=1_500_000, clock="test")
    assert line["register_seconds_full_term"] == pytest.approx(4.0) and line["lease_s"] == 1.0
    assert line["register_seconds"] == line["held_s_measured"] == pytest.approx(1.5)
    assert line["pay_per_use_equivalent"] == pytest.approx(1000 * p.per_alu_op + 1.5 * p.per_register_second)
    assert line["charge"] == line["pay_per_use_equivalent"] and line["adds_up"]
    assert line["pricing"].startswith("measured holds") and "test" in line["pricing"]
    old = bill("kv#0", usage, 4, r, p, 3_000_000)
    assert old["register_seconds"] == pytest.approx(4.0) and old["held_s_measured"] is None and old["pricing"].startswith("full term")


@pytest.mark.skipif(not ROOT, reason="needs root: network namespaces, veth pairs, AF_PACKET")
def test_real_run_bills_measured_holds(tmp_path: Path) -> None:
    from inswitch.topology import netns

    name = f"lb{process_tag()}"[:10]
    out = tmp_path / "r.json"
    env = {**os.environ, "INSWITCH_RUN_DIR": str(tmp_path / "run")}
    cp = subprocess.run([sys.executable, "-m", "inswitch", "tenants", "run", "--real", "--apps", "bloom", "--name", name, "--json", str(out)],
                        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    r = json.loads(out.read_text())
    assert r["ledger_adds_up"] is True
    for line in r["ledger"]:
        assert line["leases"] == line["goalkeeper_leases"] > 0, line
        assert 0 < line["held_s_measured"] <= line["register_seconds_full_term"], line
        assert line["register_seconds"] == line["held_s_measured"] and "goalkeeper" in line["pricing"], line
    # Bloom's leases outlive the run (never preempted): the full term counts each for the
    # whole run, rack set-up included; measured, each is held from its grant on.
    (b,) = r["ledger"]
    assert b["tenant"] == "bloom#0" and b["lease_s"] == pytest.approx(r["wall_us"] / 1e6), b
    assert b["held_s_measured"] < b["register_seconds_full_term"], b
    assert "register·s charged: measured holds" in cp.stdout and "held·s measured" in cp.stdout
    assert not netns.leftovers(name)
