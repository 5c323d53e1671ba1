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
    assert r["stages_used"] == 3  # stage 2: ipv4_ecmp and its selector's hash unit
    assert r["stateful_alus_total"] == 2
    assert r["parse_depth_bytes"] == 38  # Ethernet, IPv4, the L4 ports ECMP hashes
    assert r["register_bits_total"] == 2 * 512 * 64
    assert {t["name"]: t["entries"] for t in r["tables"]} == {"forward.l2_smac": 4096, "forward.l2_dmac": 4096, "forward.ipv4_lpm": 1024, "forward.ipv4_ecmp": 1024}
    assert r["tcam_blocks_total"] == 4
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


def test_stateful_alu_instructions_are_reported() -> None:
    # forward's counters are declared instructions: one update per half, no condition.
    r = json.loads(run("forward", "--target", "tofino1", "--json", "-").stdout)
    acts = {f"{reg['name']}.{a['name']}": a for reg in r["registers"] for a in reg["actions"]}
    assert acts["forward.rx_port_counters.count"] == {"name": "count", "checked": True, "conditions": 0, "updates_lo": 1, "updates_hi": 1, "outputs": 0}
    assert r["unchecked_alus"] == []
    assert r["target"]["salu_conditions"] == 2 and r["target"]["salu_output_words"] == 1
    # A program with Rust bodies left is flagged, in the JSON and in the text.
    d = json.loads(run("forward,inaas", "--json", "-").stdout)
    kv = sorted(f"{reg['name']}.reduce" for reg in d["registers"] if reg["name"].startswith("inaas.kv_"))
    assert kv and sorted(d["unchecked_alus"]) == kv
    assert all(a["conditions"] <= 2 for reg in d["registers"] for a in reg["actions"] if a["checked"])
    cp = run("forward,inaas")
    assert cp.returncode == 0 and "unchecked ALU" in cp.stdout and "inaas.kv_0.reduce" in cp.stdout


def test_converted_programs_have_no_unchecked_alu() -> None:
    # allreduce: every action declared, and a pool array's sum and max are two actions that
    # fit one Tofino 1 stateful ALU each. The per-program list of what is left is the
    # programs crate's `unchecked_alus_are_the_listed_ones`.
    r = json.loads(run("forward,allreduce", "--target", "tofino1", "--json", "-").stdout)
    assert r["fits"] and r["unchecked_alus"] == []
    acts = {f"{reg['name']}.{a['name']}": a for reg in r["registers"] for a in reg["actions"]}
    assert acts["allreduce.pool_0.sum"]["checked"] and acts["allreduce.pool_0.max"]["updates_lo"] == 2
    # hare: OO-Stat aging is fetch, then age on a second pass (no shift in a stateful ALU).
    h = json.loads(run("forward,hare", "--target", "tofino1", "--json", "-").stdout)
    assert h["fits"] and h["unchecked_alus"] == []
    # netsha, the default (issue 19), is the configuration that fits tofino1.
    assert json.loads(run("forward,netsha", "--target", "tofino1", "--json", "-").stdout)["fits"]
    # netsha-tofino1: the two-way qid lookup as one array per way (two conditions each) and
    # Algorithm 1's state as progress (stage 3) and state (stage 4); still 12 stages.
    n = json.loads(run("forward,netsha-tofino1", "--target", "tofino1", "--json", "-").stdout)
    assert n["fits"] and n["unchecked_alus"] == []
    acts = {f"{reg['name']}.{a['name']}": a for reg in n["registers"] for a in reg["actions"]}
    assert acts["netsha-tofino1.qid_0.claim"]["conditions"] == 2 and acts["netsha-tofino1.state.insert"]["conditions"] == 2
    # daiet: the spillover bucket's counter is two arrays of declared instructions (ring in
    # stage 9, busy bits and storers in stage 11), and daiet still fits tofino1.
    d = json.loads(run("forward,daiet", "--target", "tofino1", "--json", "-").stdout)
    assert d["fits"] and d["unchecked_alus"] == []
    acts = {f"{reg['name']}.{a['name']}": a for reg in d["registers"] for a in reg["actions"]}
    assert acts["daiet.spill_ring.store"]["checked"] and acts["daiet.spill_ring.store"]["conditions"] == 2
    assert acts["daiet.spill_busy.check"]["checked"]
    # The Paxos acceptors use two output words: fine on tofino2, more than tofino1 has.
    p = json.loads(run("forward,inaas_paxos", "--target", "tofino2", "--json", "-").stdout)
    assert not any(a.startswith("inaas_paxos.paxos_") or a.endswith(".commit") for a in p["unchecked_alus"])
    acts = {f"{reg['name']}.{a['name']}": a for reg in p["registers"] for a in reg["actions"]}
    assert acts["inaas_paxos.paxos_round_0.prepare"]["outputs"] == 2
    # inaas: the lease check is two declared arrays (deadline, holder); only reduce is left.
    assert p["fits"] and p["stages_used"] == 20
    assert {a.rsplit(".", 1)[1] for a in p["unchecked_alus"]} == {"reduce"}
    assert acts["inaas_paxos.lease_deadline_0.take"]["checked"] and acts["inaas_paxos.lease_0.check"]["checked"]


def test_switch_refuses_a_set_that_does_not_fit_its_target() -> None:
    # Table 1's NetSHa (`netsha-unbounded`) needs 18 stages; on tofino1 the switch refuses
    # to load it, naming the objects beyond the pipeline, before serving anything.
    cp = subprocess.run([sys.executable, "-m", "inswitch", "switch", "--program", "forward,netsha-unbounded", "--ports", "memory:2",
                         "--target", "tofino1", "--metrics", "off", "--p4runtime", "127.0.0.1:0"], capture_output=True, text=True, timeout=60)
    out = cp.stdout + cp.stderr
    assert cp.returncode == 2, out
    assert "do not fit tofino1" in out and "netsha-unbounded.slot_id_7" in out and "Traceback" not in out
