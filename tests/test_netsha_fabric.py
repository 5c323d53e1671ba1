"""NetSHa across switches (`inswitch search --rack --fabric`): the search servers under two
leaves of a leaf-spine fabric, the agent under the third, every switch running
`forward,netsha`. In one run: every switch on the path reducing, only the agent's leaf
reducing, none reducing. In exact mode the agent's top K must equal the top K of the search
without a switch for every query, in every mode.

The fabric tests need root (about 20 s: a 4-switch fabric, three measurements); fabrics
are named `nsf<pid tag>` and always taken down. The bad-input tests need nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest
from inswitch.topology.state import process_tag

ROOT = os.geteuid() == 0
SPEC = "leaf-spine:3,1,2"


def _search(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "inswitch", "search", "--base", "300", "--queries", "2", "--k", "5", *args],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args,hint", [
    (["--fabric", SPEC], "add --rack"),
    (["--rack", "--fabric", SPEC, "--pcap", "/tmp/nsf-pcap"], "--pcap"),
    (["--rack", "--fabric", SPEC, "--switches", "2"], "--switches"),
    (["--rack", "--fabric", SPEC, "--rack-name", "toolong7"], "at most 6 characters"),
    (["--rack", "--fabric", "ring:3"], "--fabric"),
])
def test_fabric_options_that_cannot_work_are_one_line_errors(args: list[str], hint: str) -> None:
    cp = _search(*args)
    assert cp.returncode == 2, cp.stdout + cp.stderr
    lines = [ln for ln in (cp.stdout + cp.stderr).splitlines() if ln.strip()]
    assert len(lines) == 1 and hint in lines[0] and "Traceback" not in lines[0], lines


@pytest.mark.netns
@pytest.mark.skipif(not ROOT, reason="needs root: namespaces, veth pairs, AF_PACKET")
def test_fabric_reduces_on_every_switch_and_equals_the_search_without_a_switch() -> None:
    from inswitch.apps.netsha.datasets import random_dataset
    from inswitch.apps.netsha.fabric import run_fabric_search
    from inswitch.apps.netsha.search import SearchConfig, run_search
    from inswitch.topology import netns

    ds = random_dataset(1500, 12, seed=8)
    # 8 answers leave room for one register output (7 answers) within the default's 256-B
    # parse; at 10 every send splits its packet, and the split copies outnumbered what
    # reduction saved (442 agent packets against 360 forwarding only; docs/netsha.md).
    cfg = SearchConfig(servers=3, k=10, concurrency=6, per_packet=8)
    name = f"nsf{process_tag()[-3:]}"
    t0 = time.monotonic()
    r = run_fabric_search(ds, cfg, SPEC, name)
    took = time.monotonic() - t0
    assert not netns.leftovers(f"{name}-"), "the fabric was taken down"
    assert took < 40, f"{took:.1f} s"
    f = r["fabric"]
    agent_leaf = f["agent"]["leaf"]
    server_leaves = {s["leaf"] for s in f["servers"]}
    assert len(server_leaves) == 2 and agent_leaf not in server_leaves, f
    # The reference without a switch: the same servers, selection and merge, forwarded only.
    ref = run_search(ds, cfg, ["tlsh"], keep_topk=True)["modes"]["tlsh"]
    for mode in ("fabric", "one_switch", "none"):
        m = r["modes"][mode]
        wrong = [q for q, (a, b) in enumerate(zip(m["topk_distances"], ref["topk_distances"])) if not np.array_equal(np.asarray(a), np.asarray(b))]
        assert len(m["topk_distances"]) == 12 and not wrong, (mode, wrong)
        assert m["recall"] == pytest.approx(ref["recall"], abs=1e-12), mode
        assert m["topk_equal_to_none"], mode
        assert r["agent_packets"][mode] == m["agent_packets"] and r["recall"][mode] == m["recall"]
    fab, one, none = (r["modes"][m] for m in ("fabric", "one_switch", "none"))
    # The agent's leaf selected the servers of every query (one query packet each) and sent
    # exactly the copies the bucket directories name, in every mode; no other switch did.
    # (Random shards hold every region, so here that is every server; pruning and the
    # replicas' addresses are `crates/programs/tests/netsha_select.rs`'s.)
    want = round(r["fabric"]["selected_servers_per_query"] * 12)
    for m in (fab, one, none):
        assert m["recovery"]["query_packets"] == 12 and m["recovery"]["incomplete_after_first_pass"] == 0, m["recovery"]
        for sw, e in m["switches"].items():
            assert (e["queries_selected"], e["query_copies"]) == ((12, want) if sw == agent_leaf else (0, 0)), (sw, e)
        assert m["recovery"]["server_reports"] == want
    # Every switch on the servers' paths reduced (dropped answers beyond its r.T) in the
    # fabric mode; only the agent's leaf did in one_switch; none did in none.
    on_path = {sw for p in f["paths"].values() for sw in p}
    assert on_path == set(f["switches"]), f["paths"]
    for sw in on_path:
        assert fab["switches"][sw]["dropped_by_threshold"] > 0, (sw, fab["switches"])
    for sw, e in one["switches"].items():
        assert (e["inserted"] > 0) == (sw == agent_leaf), one["switches"]
    answers = ("inserted", "dropped_by_threshold", "sent", "cleared")
    assert all(not any(e[k] for k in answers) for e in none["switches"].values()), none["switches"]
    # Forwarding only, every server packet reaches the agent; reducing, fewer packets and
    # fewer answers do. (Every switch against the agent's leaf alone is measured, not
    # asserted: it varies with the order the servers' packets meet in the switches.)
    assert none["agent_packets"] == none["server_packets"] == fab["server_packets"]
    assert fab["agent_packets"] < none["agent_packets"] and one["agent_packets"] < none["agent_packets"]
    assert fab["agent_answers"] < none["agent_answers"] and one["agent_answers"] < none["agent_answers"]


@pytest.mark.netns
@pytest.mark.slow  # ~35 s: 300 queries three times, a leaf killed and restarted
@pytest.mark.skipif(not ROOT, reason="needs root: namespaces, veth pairs, AF_PACKET")
def test_a_server_leaf_killed_mid_search_is_reprogrammed_and_the_top_k_stays_exact() -> None:
    """kill -9 of leaf1 (a server leaf) while every switch reduces: the fabric's supervisor
    restarts it with its routing, the search's controller installs its NetSHa entries and
    role again, the agent asks again the queries whose answers died with it, and every
    query's top K still equals the search's without a switch."""
    import signal
    import threading

    from inswitch.apps.netsha.datasets import random_dataset
    from inswitch.apps.netsha.fabric import run_fabric_search
    from inswitch.apps.netsha.search import SearchConfig, run_search
    from inswitch.topology import netns
    from inswitch.topology.fabric.fabric import FabricState

    ds = random_dataset(3000, 300, seed=9)
    cfg = SearchConfig(servers=3, k=10, concurrency=10, per_packet=10)
    name = f"nsk{process_tag()[-3:]}"
    started = threading.Event()
    killed: list[int] = []

    def killer() -> None:
        if started.wait(120):
            time.sleep(1.5)
            st = FabricState.load(name)
            assert st is not None
            run = next(r for r in st.switches if r.plan.name == "leaf1")
            assert run.pid
            os.kill(run.pid, signal.SIGKILL)
            killed.append(run.pid)

    th = threading.Thread(target=killer, daemon=True)
    th.start()
    r = run_fabric_search(ds, cfg, SPEC, name, lambda m: started.set() if m.startswith("fabric:") else None)
    th.join(5)
    assert killed and not netns.leftovers(f"{name}-")
    fab = r["modes"]["fabric"]
    recs = [x for x in fab["switch_restarts"] if x["switch"] == "leaf1"]
    assert recs and "forwarding_at" in recs[0], fab["switch_restarts"]
    assert recs[0]["generation"] in fab["reinstalled_generations"] and "reinstall_errors" not in fab
    assert fab["switches"]["leaf1"].get("restarted"), fab["switches"]["leaf1"]
    assert fab["switches"]["leaf1"]["dropped_by_threshold"] > 0, "reducing again after its restart"
    ref = run_search(ds, cfg, ["tlsh"], keep_topk=True)["modes"]["tlsh"]
    for mode in ("fabric", "one_switch", "none"):
        m = r["modes"][mode]
        wrong = [q for q, (a, b) in enumerate(zip(m["topk_distances"], ref["topk_distances"])) if not np.array_equal(np.asarray(a), np.asarray(b))]
        assert not wrong and not m["recovery"]["unrecovered"], (mode, wrong[:10], m["recovery"])
