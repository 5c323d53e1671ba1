"""`inswitch resources`: the report's numbers for a known program, and clear errors."""

from __future__ import annotations

import json
import subprocess
import sys


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "inswitch", "resources", *args], capture_output=True, text=True, timeout=60)


def test_forward_on_tofino1_json() -> None:
    cp = run("forward", "--target", "tofino1", "--json", "-")
    assert cp.returncode == 0, cp.stderr
    r = json.loads(cp.stdout)
    assert r["fits"] and r["problems"] == []
    assert r["stages_used"] == 2
    assert r["stateful_alus_total"] == 2
    assert r["parse_depth_bytes"] == 34
    assert r["register_bits_total"] == 2 * 512 * 64
    assert {t["name"]: t["entries"] for t in r["tables"]} == {"forward.l2_smac": 4096, "forward.l2_dmac": 4096, "forward.ipv4_lpm": 1024}
    assert r["tcam_blocks_total"] == 2
    assert r["target"]["stages"] == 12 and r["target"]["salus_per_stage"] == 4


def test_targets_differ_and_text_report_says_fits() -> None:
    t2 = json.loads(run("forward", "--target", "tofino2", "--json", "-").stdout)
    assert t2["target"]["stages"] == 20
    cp = run("forward")
    assert cp.returncode == 0 and "FITS" in cp.stdout


def test_bad_input_is_a_clear_error() -> None:
    for args in (("nope",), ("forward", "--target", "tofino9")):
        cp = run(*args)
        assert cp.returncode == 2
        assert "error:" in cp.stdout + cp.stderr and "Traceback" not in cp.stdout + cp.stderr
