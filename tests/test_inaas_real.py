"""`inswitch tenants run --real`: the tenants as processes in a rack around the switch
process, wall clock, each against its host-only version in the same run. Every answer is
checked by the adapters against the same references as the model's run (a dict for KV,
exact sums for aggregation, the host's copy of the Bloom filter, Paxos's learners' logs
against the proposed values with no two values chosen for one instance)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from inswitch.topology.state import process_tag

from test_file_ports import read_pcapng

ROOT = os.geteuid() == 0


def _run(args: list[str], tmp_path: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "INSWITCH_RUN_DIR": str(tmp_path / "run")}  # the ledger's home: this test's own
    return subprocess.run([sys.executable, "-m", "inswitch", "tenants", "run", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=tmp_path, env=env)


def test_real_accepts_the_attacker_and_refuses_unknown_apps_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    # `--real --attacker` was refused ("not available") until the attacker ran as a process.
    from inswitch.apps.inaas import real

    monkeypatch.setattr(real.os, "geteuid", lambda: 0)
    real.check_args(["kv", "bloom"], True)
    with pytest.raises(real.RealRunError, match="--real cannot run nosuch") as e:
        real.check_args(["kv", "nosuch"], True)
    assert "\n" not in str(e.value)


@pytest.mark.skipif(ROOT, reason="checks the error without root")
def test_real_needs_root(tmp_path: Path) -> None:
    cp = _run(["--real", "--apps", "kv"], tmp_path)
    assert cp.returncode == 2 and "needs root" in cp.stderr, cp.stderr


def test_sim_says_it_is_the_model(tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    cp = _run(["--apps", "kv", "--json", str(out)], tmp_path)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert json.loads(out.read_text())["mode"].startswith("model:")
    assert "— model" in cp.stdout


@pytest.mark.skipif(not ROOT, reason="needs root: network namespaces, veth pairs, AF_PACKET")
def test_real_tenants_in_a_rack(tmp_path: Path) -> None:
    from inswitch.topology import netns

    name = f"inr{process_tag()}"
    out = tmp_path / "r.json"
    caps = tmp_path / "caps"
    cp = _run(["--real", "--apps", "kv,dense,bloom,paxos", "--attacker", "--name", name, "--seed", "3", "--json", str(out), "--pcap", str(caps)],
              tmp_path, timeout=180)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert "real processes" in cp.stdout
    r = json.loads(out.read_text())
    assert r["mode"].startswith("real processes")
    assert set(r["apps"]) == {"kv", "dense", "bloom", "paxos"}
    assert r["real"]["programs"] == "forward,inaas_paxos,allreduce"
    for app, f in r["apps"].items():
        assert f["finished"] and f["correct"] and f["wrong_results"] == 0, (app, f)
        assert math.isfinite(f["inaas"]) and f["inaas"] > 0 and math.isfinite(f["host_only"]) and f["host_only"] > 0, (app, f)
        assert f["speedup"] > 0
        c = f["client"]
        if app == "dense":
            continue  # its gradients go through the allreduce program: checked below
        # Real frames went through the switch and came back; some answered by the switch
        # itself (not the goalkeeper), and the host-only phase reached its server.
        # (Paxos's only ordinary requests take its leases, through the goalkeeper; its
        # answers from the switch are Paxos frames, checked below.)
        assert c["completed"] > 0 and (app == "paxos" or c["via_goalkeeper"] < c["completed"]), (app, c)
        assert c["baseline_received"] > 0, (app, c)
    assert r["apps"]["kv"]["hit_ratio"] > 0
    # Paxos ran with its acceptors in the switch: the proposer's frames were answered
    # (and the learners' logs equal the values, checked in the adapter: `correct`).
    px = r["apps"]["paxos"]
    assert px["acceptors_in_switch"] is True
    assert px["client"]["paxos_frames_received"] > 0
    # Its host-only version is Paxos too: the same proposer and learners, phases 1 and 2
    # against three acceptor processes, every value delivered in order, safe.
    assert px["host_only_kind"].startswith("paxos") and px["host_violations"] == [] and px["host_gap_free"] is True, px
    assert px["host_delivered"] == [150, 150, 150] and px["host_proposer"]["rounds"] == 1, px
    assert len(px["host_acceptors"]) == 3 and all(a["promised"] > 0 and a["voted"] >= 150 for a in px["host_acceptors"]), px
    assert px["client"]["host_paxos_received"] > 0
    # The dense tenant trained the digits MLP through the switch's allreduce program under
    # its leased job, and again with the exact float sum (each gradient echoed through the
    # switch by its server): the same model to the quantization's precision.
    d = r["apps"]["dense"]
    assert d["dml_steps"] > 0 and d["dml_replicas_identical"] and d["dml_failed"] == {}, d
    assert d["dml_accuracy_exact_sum"] > 0.7, "the model learns at all"
    assert abs(d["dml_accuracy_switch"] - d["dml_accuracy_exact_sum"]) <= 0.02 and d["max_weight_diff"] < 1e-2, d
    assert d["allreduce_packets_sent"] > 0 and d["client"]["baseline_received"] > 0, d
    # Once its lease ended, its own job id and a job id never leased were refused: no
    # answer, and every probe packet counted as an unknown-job drop by the switch.
    lease = d["allreduce_lease"]
    assert lease["uid"] > 0 and lease["held_s"] > 0 and lease["unleased_refused"], lease
    assert {p["what"] for p in d["unleased_probes"]} == {"own job after its lease", "never leased"}
    assert not any(p["answered"] for p in d["unleased_probes"])
    assert 2 <= lease["unknown_job_drops_during_host_phase"] <= lease["unleased_probe_packets"], lease
    # While it held, the job id sent from another host's port (the server's) was refused
    # too: unanswered, dropped at stage 0 as an unknown job (the training above, which
    # matches the exact sum, shows it added nothing).
    assert lease["forged_port_refused"] and 1 <= lease["forged_port_drops"] <= lease["forged_port_probe_packets"], lease
    # From a port that is a job's (the probe job's last id is on the server's port, its
    # others on the tenant's, as the tenant's four share its port), worker 0's id was
    # refused: unanswered, each packet that arrived counted as not on its port; the same
    # port's own id was admitted (absorbed), so it was the id that was refused.
    assert lease["forged_worker_port"] == lease["forged_port"] != lease["forged_worker_tenant_port"], lease
    assert lease["forged_worker_id"] == 0 and lease["forged_worker_tenant_port_ids"] == [0, d["dml_workers"] - 1], lease
    assert lease["forged_worker_refused"] and 1 <= lease["forged_worker_drops"] <= lease["forged_worker_probe_packets"], lease
    assert lease["forged_worker_own_id_admitted"] and lease["forged_worker_own_id_absorbed"] >= 1, lease
    b = r["apps"]["bloom"]
    assert b["bloom_fp_probes_answered_by_switch"] == b["bloom_fp_probes"] > 0
    assert abs(b["bloom_fp_rate"] - b["bloom_fp_host_copy"]) < 1e-12  # every answer is the host copy's
    assert 0 < b["bloom_fp_rate"] < 0.06
    assert r["cross_tenant_violations"] == 0
    for line in r["ledger"]:
        if line["tenant"] == "dense#0":
            assert line["alu_ops"] == 0, line  # no INaaS register used: it aggregates in the allreduce program
            continue
        assert line["leases"] == line["goalkeeper_leases"] and line["alu_ops"] > 0, line
        # Billed from measured holds (the goalkeeper's grant log), never above the full term.
        assert 0 < line["held_s_measured"] <= line["register_seconds_full_term"], line
        assert line["register_seconds"] == line["held_s_measured"] and "goalkeeper" in line["pricing"], line
    # Bloom's leases outlive the run (never preempted): the full term counts each for the
    # whole run, rack set-up included; measured, each is held from its grant on.
    (bl,) = [line for line in r["ledger"] if line["tenant"] == "bloom#0"]
    assert bl["lease_s"] == pytest.approx(r["wall_us"] / 1e6) and bl["held_s_measured"] < bl["register_seconds_full_term"], bl
    assert "register·s charged: measured holds" in cp.stdout and "held·s measured" in cp.stdout
    # The attacker, a process on its own host after the tenants' phases (as in the model):
    # its frames reached the switch and were counted there (forged uids and the victim's
    # replays on its port, its own random reads as mismatches), read over P4Runtime by the
    # controller's `Detection`, which flagged it and no one else.
    a = r["attack"]
    assert r["attacker_detected"] is True and a["detected"] is True, a
    assert 0 < a["detection_time_us"] < 1_000_000, a
    assert a["attacker_values_leaked"] == 0 and a["attacker_reads"] > 0 and a["attacker_replies"] > 0, a
    assert a["legitimate_tenants_flagged"] == [], a
    sent = a["frames_sent"]
    assert sent["forged_uid"] > 0 and sent["replayed"] > 0 and sent["own_uid_reads"] > 0, a
    # The forged and replayed frames are counted on the attacker's port (at most one count
    # each; a frame the loaded switch process did not read in time is not), and nothing of
    # the attack is counted against a tenant, the victim included.
    assert (sent["forged_uid"] + sent["replayed"]) // 2 <= a["forged_on_port"] <= sent["forged_uid"] + sent["replayed"], a
    assert a["attacker_mismatches"] > 0, a
    assert set(a["tenant_mismatches_during_attack"]) == {"kv#0", "dense#0", "bloom#0", "paxos#0"}
    assert all(v == 0 for v in a["tenant_mismatches_during_attack"].values()), a
    assert "attacker detected: True" in cp.stdout
    # `--pcap`: every switch port captured; the tenants' INaaS frames (EtherType 0x88B6)
    # are in the captures, in both directions of the goalkeeper's port and the tenants'.
    assert r["real"]["pcap"] == str(caps.resolve()) and str(caps.resolve()) in cp.stdout
    files = sorted(caps.glob("port*.pcapng"))
    assert len(files) == r["real"]["hosts"], files
    inaas_frames = {f.name: sum(fr[12:14] == b"\x88\xb6" for fr in read_pcapng(f)) for f in files}
    assert sum(v > 0 for v in inaas_frames.values()) >= 1 + len(r["apps"]), inaas_frames
    assert not netns.leftovers(name)


def test_pcap_and_attack_during_are_refused_where_they_cannot_work(tmp_path: Path) -> None:
    for args, hint in ((["--apps", "kv", "--pcap", str(tmp_path / "c")], "--pcap"),
                       (["--apps", "kv", "--attacker", "--attack-during", "inaas"], "--attack-during"),
                       (["--apps", "kv", "--attack-during", "sometime"], "--attack-during")):
        cp = _run(args, tmp_path)
        assert cp.returncode == 2 and hint in cp.stderr and "Traceback" not in cp.stderr, (args, cp.stderr)


@pytest.mark.skipif(not ROOT, reason="needs root: network namespaces, veth pairs, AF_PACKET")
def test_table2_real_experiment_quick(tmp_path: Path) -> None:
    cp = subprocess.run([sys.executable, "-m", "inswitch", "experiment", "inaas-table2-real", "--quick", "--out", str(tmp_path)],
                        capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    r = json.loads((tmp_path / "inaas-table2-real.json").read_text())
    assert r["correct"] is True
    assert r["mode"].startswith("real processes")
    for n in ("1x", "2x"):
        assert r[f"run_{n}"]["real"]["mode"].startswith("real processes")
        assert r[f"run_{n}"]["model"]["mode"].startswith("model:")
        assert r[f"run_{n}"]["real"]["cross_tenant_violations"] == 0
    for a in ("dense", "kv", "bloom", "paxos"):
        for n in ("1", "2"):
            assert r["speedup"][a][n] > 0 and r["model"]["speedup"][a][n] > 0
    rows = {row["quantity"]: row for row in r["comparison"]}
    assert "KV store (average latency) 1x, real" in rows and "KV store (average latency) 1x, model" in rows
    assert (tmp_path / "inaas-table2-real.png").stat().st_size > 0


@pytest.mark.skipif(not ROOT, reason="needs root: network namespaces, veth pairs, AF_PACKET")
def test_attack_real_experiment_quick(tmp_path: Path) -> None:
    cp = subprocess.run([sys.executable, "-m", "inswitch", "experiment", "inaas-attack-real", "--quick", "--out", str(tmp_path)],
                        capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    r = json.loads((tmp_path / "inaas-attack-real.json").read_text())
    assert r["correct"] is True and r["mode"].startswith("real processes")
    # Real processes (after the tenants' phases, as the model), the model, and real
    # processes with the attack during the tenants' INaaS phase (working tenants not flagged).
    for d in (r, r["model"], r["during_inaas_phase"]):
        assert d["detected"] is True and d["detection_time_us"] > 0, d
        assert d["attacker_values_leaked"] == 0 and d["cross_tenant_violations"] == 0 and d["legitimate_tenants_flagged"] == [], d
        assert d["forged_on_port"] > 0 and d["attacker_mismatches"] > 0, d
    assert all(v == 0 for v in r["tenant_mismatches_during_attack"].values()), r
    assert r["during_inaas_phase"]["correct"] is True
    assert set(r["during_inaas_phase"]["tenant_mismatches_during_attack"]) == {"kv#0", "sparse#0", "bloom#0"}
    rows = {row["quantity"]: row for row in r["comparison"]}
    assert rows["attacker detected, real (wall µs)"]["ours"] == r["detection_time_us"]
    assert rows["attacker detected, model (simulated µs)"]["ours"] == r["model"]["detection_time_us"]
    assert (tmp_path / "inaas-attack-real.png").stat().st_size > 0


def test_real_refuses_without_root_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    # The same check as test_real_needs_root, for runs as root (the uid is the only input).
    from inswitch.apps.inaas import real

    monkeypatch.setattr(real.os, "geteuid", lambda: 1000)
    with pytest.raises(real.RealRunError, match="needs root") as e:
        real.check_args(["kv"], False)
    assert "\n" not in str(e.value)


def test_paxos_crash_option_is_checked_in_one_line(tmp_path: Path) -> None:
    for args in (["--paxos-crash-at", "1"], ["--paxos-crash-at", "0"], ["--paxos-crash-at", "nan"], ["--apps", "paxos", "--paxos-crash-at", "0.5"],
                 ["--real", "--apps", "kv", "--paxos-crash-at", "0.5"]):
        cp = _run(args, tmp_path)
        assert cp.returncode == 2, (args, cp.stdout + cp.stderr)
        assert "--paxos-crash-at" in cp.stderr and len(cp.stderr.strip().splitlines()) == 1, (args, cp.stderr)


def test_paxos_zombie_option_is_checked_in_one_line(tmp_path: Path) -> None:
    for args in (["--apps", "paxos", "--paxos-zombie"], ["--apps", "paxos", "--paxos-crash-at", "0.5", "--paxos-zombie"],
                 ["--real", "--apps", "paxos", "--paxos-zombie"]):
        cp = _run(args, tmp_path)
        assert cp.returncode == 2, (args, cp.stdout + cp.stderr)
        assert "--paxos-zombie" in cp.stderr and len(cp.stderr.strip().splitlines()) == 1, (args, cp.stderr)


def test_zombie_duels_option_is_checked_in_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from inswitch.apps.inaas import real

    monkeypatch.setattr(real.os, "geteuid", lambda: 0)
    real.check_args(["paxos"], False, 0.4, True, False, True)
    for args, msg in (((0.4, False, False, True), "--paxos-zombie-duels needs --paxos-zombie"),
                      ((0.4, True, True, True), "either fights at its ballot or duels above it")):
        with pytest.raises(real.RealRunError, match=msg) as e:
            real.check_args(["paxos"], False, *args)
        assert "\n" not in str(e.value)
    cp = _run(["--apps", "paxos", "--paxos-zombie-duels"], tmp_path)
    assert cp.returncode == 2 and "--paxos-zombie-duels" in cp.stderr and len(cp.stderr.strip().splitlines()) == 1, cp.stderr


def test_duel_figures_allow_the_zombies_values_but_check_its_decisions() -> None:
    """In a duel the zombie's values may be chosen (it took over above the refusal); what
    it saw chosen must be in every log at its instance. Without the duel the same logs are
    a violation (a value proposed only at its stale ballot delivered)."""
    from inswitch.apps.inaas.real import _crash_figures

    logs = [[5, 6, -1, 7]] * 3
    report = {"logs": logs, "learner_violations": [], "must_deliver": [6, 7], "first_decision_at": 1.0, "detected_at": 0.5,
              "last_heard_at": 0.4, "leading_at": 0.9, "ballot": 514, "gap_free": True, "delivered": [4, 4, 4],
              "rounds": 3, "duels": 2, "final_ballot": 1538}
    z = {"values": [-1, -2], "decided_after_resume": [(2, 769, -1)], "resumed_at": 2.0, "ballot": 257, "ballot_at_report": 1793,
         "rounds": 3, "duels": 3, "refused": 9, "resent": 0, "frames_sent": 100, "relay_sent": 1}
    crash = {"killed_at": 0.0, "returncode": -9, "decided": [(0, 5)], "zombie": z, "resumed_at": 2.0}
    f = _crash_figures(report, crash, 0.4, zombie=True, duels=True)
    assert f["violations"] == [] and f["zombie_duel_rounds"] == 3 and f["survivor_duel_rounds"] == 2 and f["ballot_rounds"] == 6, f
    assert f["zombie_values_in_logs"] == 1 and f["survivor_final_ballot"] == 1538
    z2 = {**z, "decided_after_resume": [(2, 769, -2)]}  # it saw -2 chosen at 2; the logs hold -1
    f = _crash_figures(report, {**crash, "zombie": z2}, 0.4, zombie=True, duels=True)
    assert any("instance 2: value -2" in v for v in f["violations"]), f["violations"]
    f = _crash_figures(report, crash, 0.4, zombie=True)
    assert any("value -1, proposed only by the zombie" in v for v in f["violations"]), f["violations"]


@pytest.mark.slow
@pytest.mark.skipif(not ROOT, reason="needs root: network namespaces, veth pairs, AF_PACKET")
def test_real_paxos_zombie_duel_of_ballots_settles(tmp_path: Path) -> None:
    """The zombie run with a duel of ballots (`--paxos-zombie-duels`): the resumed zombie,
    refused, backs off and runs phase 1 above the ballot that refused it; the backup, then
    refused, does the same. The duel is bounded (the zombie defers after 3 rounds, and is
    killed 300 ms after its resume), the survivor delivers all its values, and every
    learner's log is equal, gap-free, with no instance decided twice differently."""
    from inswitch.topology import netns

    name = f"pxh{process_tag()}"
    out = tmp_path / "d.json"
    cp, p, _seed = _zombie_run(["--paxos-zombie-duels"], name, out, tmp_path, duels=True)
    assert p["zombie_duels"] is True and p["zombie_resumed_after_takeover"] is True, p
    # It duelled: above the refusal at least once, each time with a higher ballot.
    assert 1 <= p["zombie_duel_rounds"] <= 3 and p["zombie_ballot_at_kill"] > p["survivor_ballot"] > p["zombie_ballot"], p
    assert p["ballot_rounds"] == p["zombie_rounds"] + p["survivor_rounds"] and p["ballot_rounds"] >= 2, p
    assert p["violations"] == [] and p["gap_free"] is True, p
    d = p["delivered"]
    assert len(d) == 3 and len(set(d)) == 1 and d[0] >= p["values_by_survivor"], p
    assert p["correct"] and p["finished"] and p["killed_by_signal"] == 9, p
    lp = p["latency_percentiles"]["inaas"]
    assert 0 < lp["p50_us"] <= lp["p99_us"], lp
    assert "duelled:" in cp.stdout
    assert not netns.leftovers(name)


def test_fighting_zombie_and_fault_options_are_checked_in_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from inswitch.apps.inaas import real

    monkeypatch.setattr(real.os, "geteuid", lambda: 0)
    real.check_args(["paxos"], False, 0.4, True, True)
    with pytest.raises(real.RealRunError, match="--paxos-zombie-fights needs --paxos-zombie") as e:
        real.check_args(["paxos"], False, 0.4, False, True)
    assert "\n" not in str(e.value)
    # The model's tenants see loss only (Paxos's own faults: `_native.paxos_run`); ranges: the CLI walk.
    cp = _run(["--apps", "paxos", "--dup", "0.2"], tmp_path)
    assert cp.returncode == 2 and "--dup" in cp.stderr and len(cp.stderr.strip().splitlines()) == 1, cp.stderr


def test_paxos_safety_checker_flags_each_kind_of_violation() -> None:
    from inswitch.apps.inaas.adapters import paxos_safety

    ok, gap_free = paxos_safety([[5, 6, 7], [5, 6, 7]], [], [6, 7], [(0, 5)])
    assert ok == [] and gap_free
    # A learner behind the others (not gap-free, not a violation unless it misses a value).
    assert paxos_safety([[5, 6, 7], [5, 6]], [], [6], [(0, 5)]) == ([], False)
    found, _ = paxos_safety([[5, 6, 7], [5, 9, 7]], [], [], [])
    assert len(found) == 1 and "instance 1" in found[0]
    found, _ = paxos_safety([[5, 6, 7], [5, 6, 7]], [], [], [(1, 8)])  # the dead leader's choice changed
    assert len(found) == 2 and all("value 8" in f for f in found)
    found, _ = paxos_safety([[5], [5]], [], [], [(2, 8)])  # ... or lost
    assert len(found) == 2 and all("not delivered" in f for f in found)
    found, _ = paxos_safety([[5, 6], [5, 6]], [], [6, 7], [])  # a survivor value missing
    assert len(found) == 2
    assert paxos_safety([[5]], ["instance 0: decided 5, then 6"], [], [])[0] == ["instance 0: decided 5, then 6"]


def _votes(*vs: tuple[int, int, int, int]) -> bytes:
    import struct

    return b"".join(struct.pack("<QBIi", *v) for v in vs)


def test_paxos_backup_is_silent_until_it_takes_over_above_the_ballots_it_saw() -> None:
    """The backup of a crash run (`_native.InaasPaxosHosts(lead=False)`): no frame before its
    takeover (a proposer that prepared early would fight the leader), the learners fed by
    relayed votes, then phase 1 on every slot of the window with a ballot above the
    leader's."""
    from inswitch import _native

    mac, gk = bytes.fromhex("020000000002"), bytes.fromhex("020000000001")
    b = _native.InaasPaxosHosts(7, mac, gk, 0, 4, 0, 1000, 3, proposer_id=2, lead=False)
    b.propose(11)
    assert b.step(5_000) == ([], []) and b.ballot == 0
    leader = 1 << 8 | 1
    # Instance 0 chosen at the leader's ballot (two acceptors); learner 2 missed it.
    for learner in (0, 1):
        assert b.on_votes(learner, _votes((0, 0, leader, 9), (0, 1, leader, 9))) == 2
    assert b.delivered() == [1, 1, 0] and b.logs() == ([[9], [9], []], [])
    assert not b.gap_free()
    ballot = b.take_over(6_000)
    assert ballot > leader and ballot & 0xFF == 2 and b.ballot == ballot
    frames, _ = b.step(6_000)
    # Phase 1 on the window above the learners' common prefix (0): every slot of the ring.
    assert len(frames) == 4 and not b.leading
    assert all(_native.InaasPaxosHosts.is_paxos(f) for f in frames)
    # A leader with its learners elsewhere: its votes leave as bytes; none yet.
    a = _native.InaasPaxosHosts(7, mac, gk, 0, 4, 0, 1000, learners=0)
    assert len(a.step(0)[0]) == 4 and a.take_votes() == b"" and a.ballot == leader
    # The zombie's knobs: it defers to a higher ballot; its counters.
    assert a.defer is False and a.stepped_down is None
    a.defer = True
    assert a.defer and a.stats() == {"sent": 4, "resent": 0, "refused": 0, "no_lease": 0, "rounds": 1, "duels": 0} and a.decisions() == []
    with pytest.raises(ValueError):
        _native.InaasPaxosHosts(7, mac, gk, 0, 4, 0, 1000, learners=0, lead=False)


@pytest.mark.skipif(not ROOT, reason="needs root: network namespaces, veth pairs, AF_PACKET")
def test_real_paxos_leader_killed_backup_takes_over(tmp_path: Path) -> None:
    """Two proposer processes of the paxos tenant on two hosts, the leader SIGKILLed after
    40 % of the values with the switch dropping 2 % of all frames; the backup (with the
    learners) detects the silence, takes over with a higher ballot through phase 1 on the
    switch's acceptors and proposes the rest."""
    from inswitch.topology import netns

    name = f"pxc{process_tag()}"
    out = tmp_path / "c.json"
    cp = _run(["--real", "--apps", "paxos", "--loss", "0.02", "--paxos-crash-at", "0.4", "--seed", "2", "--name", name, "--json", str(out)], tmp_path, timeout=120)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    p = json.loads(out.read_text())["apps"]["paxos"]
    # The leader's process really died of SIGKILL, after its share of the values.
    assert p["killed_by_signal"] == 9, p
    assert p["values_by_dead_leader"] == 60 and p["values_by_survivor"] == 90, p  # QUICK: 150 values
    # The takeover: detected after 100 ms without a datagram from the leader (which may
    # have gone quiet a little before its kill on a loaded machine), phase 1 done, then
    # decisions, with a ballot above the dead leader's (1 << 8 | 1).
    assert p["took_over"] is True, p
    assert p["detection_ms"] - p["leader_last_heard_ms"] >= 100, p
    # Detection before the kill (negative) is a leader suspected while alive: on a loaded
    # machine it can fall silent for 100 ms; safe (the two duel until the kill), checked below.
    assert p["detection_ms"] <= p["phase1_done_ms"] <= p["takeover_ms"] < 5_000, p
    assert p["survivor_ballot"] > 257 and p["survivor_ballot"] & 0xFF == 2, p
    # Safety (`paxos_safety` on every learner's log): equal logs, what the dead leader saw
    # chosen unchanged at its instance, every survivor value delivered; gap-free.
    assert p["violations"] == [] and p["gap_free"] is True, p
    d = p["delivered"]
    assert len(d) == 3 and len(set(d)) == 1, p
    # The survivor's 90 values are in the logs besides what the dead leader got chosen:
    # without a working takeover there would be only the latter. A leader suspected while
    # alive (detection before the kill) duels the backup and may see some survivor values
    # chosen: those instances are counted once. After the kill it can have seen none.
    assert p["dead_leader_decisions_seen"] > 0 and p["dead_leader_instances_seen"] > 0, p
    overlap = p["dead_leader_decisions_of_survivor_values"]
    assert overlap == 0 or p["detection_ms"] < 0, p
    assert d[0] >= p["values_by_survivor"] + p["dead_leader_instances_seen"] - overlap, p
    # The switch's acceptors, read right after the kill, held values chosen at the dead
    # leader's ballot: each is in every log at its instance (no violation above).
    assert p["chosen_in_switch_by_dead_leader"] > 0, p
    assert p["correct"] and p["finished"] and p["wrong_results"] == 0, p
    assert math.isfinite(p["inaas"]) and math.isfinite(p["host_only"]), p
    assert "leader SIGKILLed (signal 9)" in cp.stdout and "took over: True" in cp.stdout
    assert not netns.leftovers(name)


def _zombie_run(extra: list[str], name: str, out: Path, tmp_path: Path, duels: bool = False) -> tuple[subprocess.CompletedProcess[str], dict, str]:
    """A real Paxos run whose leader is stopped at 0.4 s and resumed as a zombie (`extra`:
    more options), safe in every try. A leader that stalls 100 ms on a loaded machine is
    suspected, and deposed, before its stop: no zombie then (it has nothing stale to send).
    Such a run must still be safe; the next seed is tried, until a leader stopped while
    still leading. Returns the last run, its paxos result and its seed."""
    for seed in ("2", "3", "4"):
        cp = _run(["--real", "--apps", "paxos", "--loss", "0.02", "--paxos-crash-at", "0.4", "--paxos-zombie", *extra, "--seed", seed,
                   "--name", name, "--json", str(out)], tmp_path, timeout=120)
        assert cp.returncode == 0, cp.stdout + cp.stderr
        p = json.loads(out.read_text())["apps"]["paxos"]
        # In a duel the zombie takes over legitimately: its values may be chosen.
        assert p["violations"] == [] and p["gap_free"] is True and (duels or p["zombie_values_decided"] == 0), p
        if not p["zombie_deposed_before_stop"]:
            break
    assert not p["zombie_deposed_before_stop"], "three leaders in a row deposed before their stop"
    return cp, p, seed


@pytest.mark.skipif(not ROOT, reason="needs root: network namespaces, veth pairs, AF_PACKET")
def test_real_paxos_zombie_leader_is_refused_by_the_switch(tmp_path: Path) -> None:
    """The leader SIGSTOPped at its crash point (40 % of the values) instead of killed, with
    the switch dropping 2 % of all frames; the backup takes over; the runner SIGCONTs the
    old leader after the backup's first decision. The zombie, with its stale state and
    ballot, proposes fresh values (no one else does) and really sends them: the switch's
    acceptors, promised to the backup's higher ballot, refuse them, it steps down, and none
    of its values is ever decided; the logs stay equal and gap-free."""
    from inswitch.topology import netns

    name = f"pxz{process_tag()}"
    out = tmp_path / "z.json"
    cp, p, _seed = _zombie_run([], name, out, tmp_path)
    assert p["zombie"] is True and p["took_over"] is True, p
    # Resumed after the backup's first decision (phase 1 on every slot done), then killed.
    assert p["zombie_resumed_after_takeover"] is True and p["takeover_ms"] <= p["zombie_resumed_ms"] < p["zombie_killed_ms"], p
    assert p["killed_by_signal"] == 9, p
    # It sent after its resume (its own counter of raw frames to the switch), at its old
    # ballot, and the acceptors' refusals came back: the frames reached the switch.
    assert p["zombie_ballot"] == 257 and p["survivor_ballot"] > 257, p
    assert p["zombie_frames_sent"] > 0 and p["zombie_values_proposed"] == 8, p
    assert p["zombie_refusals"] >= 3, p
    # A correct proposer: it stepped down to the backup's ballot on the first refusal.
    assert p["zombie_stepped_down_to"] == p["survivor_ballot"] and p["zombie_stepped_down_ms"] is not None, p
    # None of its proposals after the resume decided (in no learner's log, nor as it saw).
    assert p["zombie_values_decided"] == 0, p
    # Safety as in the plain crash run: equal, gap-free logs with every survivor value.
    assert p["violations"] == [] and p["gap_free"] is True, p
    d = p["delivered"]
    assert len(d) == 3 and len(set(d)) == 1 and d[0] >= p["values_by_survivor"], p
    assert p["correct"] and p["finished"] and p["wrong_results"] == 0, p
    assert "zombie leader (ballot 257)" in cp.stdout
    assert not netns.leftovers(name)


@pytest.mark.skipif(not ROOT, reason="needs root: network namespaces, veth pairs, AF_PACKET")
def test_real_paxos_fighting_zombie_under_duplication_and_reordering(tmp_path: Path) -> None:
    """The zombie run with a zombie that fights (`--paxos-zombie-fights`: it ignores every
    refusal and keeps proposing and resending at its old ballot until it is killed), on
    switch ports that duplicate and reorder frames besides losing them (the switch's
    `--fault`; this kernel has no sch_netem for `tc netem` on the veths):
    the acceptors refuse it all along, none of its values is decided, and the survivor's
    log still completes, equal and gap-free in every learner."""
    from inswitch.topology import netns

    name = f"pxl{process_tag()}"
    out = tmp_path / "f.json"
    cp, p, seed = _zombie_run(["--paxos-zombie-fights", "--dup", "0.2", "--reorder", "0.2"], name, out, tmp_path)
    # The switch's ports duplicated and reordered (its seeded fault injector), besides the loss.
    real = json.loads(out.read_text())["real"]
    assert real["dup"] == 0.2 and real["reorder"] == 0.2 and real["fault"] == f"loss=0.02,dup=0.2,reorder=0.2,seed={seed}", real
    # It fought: resumed after the takeover, sent, was refused, kept its ballot and resent
    # (a deferring zombie sends one burst and goes quiet), never stepped down.
    assert p["zombie"] is True and p["zombie_fights"] is True and p["zombie_resumed_after_takeover"] is True, p
    assert p["zombie_ballot"] == 257 and p["zombie_ballot_at_kill"] == 257 and p["survivor_ballot"] > 257, p
    assert p["zombie_stepped_down_to"] is None, p
    assert p["zombie_refusals"] >= 3 and p["zombie_retransmissions"] > 0 and p["zombie_frames_sent"] > p["zombie_values_proposed"], p
    # Safety and completion: what the plain crash run checks, under the faults.
    assert p["zombie_values_decided"] == 0 and p["violations"] == [] and p["gap_free"] is True, p
    d = p["delivered"]
    assert len(d) == 3 and len(set(d)) == 1 and d[0] >= p["values_by_survivor"], p
    assert p["correct"] and p["finished"] and p["wrong_results"] == 0 and p["killed_by_signal"] == 9, p
    assert math.isfinite(p["inaas"]), p
    assert "fought: still at ballot 257" in cp.stdout and "loss=0.02,dup=0.2,reorder=0.2" in cp.stdout
    assert not netns.leftovers(name)
