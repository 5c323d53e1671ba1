"""WordCount on a fabric (`inswitch wordcount --fabric`): DAIET two-level trees over real
switch processes, the reducers' counts checked against a Counter over the input (inside
`run`, as for one switch), and the per-switch pair counts checked against what the hosts
sent and received: a leaf takes in exactly its mappers' pairs, the aggregation switch
exactly what the leaves sent up, the reducers exactly what the reducers' leaf sent down.

Needs root (about 15-20 s each: a 4-switch fabric, a udp and a switch run).
"""

from __future__ import annotations

import os

import pytest

from inswitch.apps.wordcount.job import JobSpec, run
from inswitch.topology import netns
from inswitch.topology.state import process_tag

pytestmark = [pytest.mark.netns,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root: namespaces, veth pairs, AF_PACKET")]

SPEC = "leaf-spine:3,1,2"


def _spec(loss: float, suffix: str) -> JobSpec:
    return JobSpec(zipf=1.1, words=20_000, vocab=2_000, seed=3, mappers=4, reducers=2, loss=loss, timeout_s=60,
                   fabric=SPEC, rack=f"w{process_tag()[-3:]}{suffix}")


def test_two_level_daiet_exact_and_every_level_accounted() -> None:
    spec = _spec(0.0, "a")
    doc = run(spec, ["switch"])
    assert not netns.leftovers(f"{spec.rack}-")
    assert doc["correct"], doc["runs"]["switch"]["wrong_examples"]
    assert doc["runs"]["udp"]["correct"]
    assert not doc["fallback"]
    place, sw, r = doc["placement"], doc["switches"], doc["runs"]["switch"]
    agg = place["aggregation"]
    leaves = {m["switch"] for m in place["mappers"]}
    root = {x["switch"] for x in place["reducers"]}
    assert len(leaves) >= 2 and not leaves & root, place
    # Each leaf took in exactly the pairs its own mappers sent (more if they retransmitted:
    # on a loaded machine a late ACK makes a mapper resend, and the leaf counts the copy).
    for leaf in leaves:
        mine = [m for m, p in zip(r["per_mapper"], place["mappers"]) if p["switch"] == leaf]
        sent = sum(m["pairs"] for m in mine)
        if any(m["retransmissions"] for m in mine):
            assert sw[leaf]["pairs_in"] >= sent, (leaf, sw[leaf], sent)
        else:
            assert sw[leaf]["pairs_in"] == sent, (leaf, sw[leaf], sent)
        assert 0 < sw[leaf]["reduction"] < 1
    # The aggregation switch took in what the leaves sent up, and sent the root leaf what it took in.
    assert sw[agg]["pairs_in"] == sum(sw[leaf]["pairs_out"] for leaf in leaves)
    (rl,) = root
    assert sw[rl]["pairs_in"] == sw[agg]["pairs_out"]
    assert sw[rl]["pairs_out"] == r["reducer_pairs"]
    assert sw[agg]["pairs_out"] < sw[agg]["pairs_in"]
    assert r["reducer_pairs"] < doc["runs"]["udp"]["reducer_pairs"]


def test_two_level_daiet_exact_under_loss_on_every_link() -> None:
    spec = _spec(0.02, "b")
    doc = run(spec, ["switch"])
    assert not netns.leftovers(f"{spec.rack}-")
    assert doc["correct"], doc["runs"]["switch"]["wrong_examples"]
    assert doc["runs"]["switch"]["switch_lost_frames"] > 0
    assert doc["runs"]["switch"]["retransmissions"] > 0


def test_tree_along_a_path_of_three_switches_accounts_every_hop(tmp_path) -> None:
    from inswitch.experiments.switchagg_hops import chain

    topo = tmp_path / "chain3.yml"
    topo.write_text(chain(3, 3, 1).to_yaml())
    spec = JobSpec(zipf=0.0, words=20_000, vocab=4_000, seed=2, mappers=3, reducers=1, timeout_s=60, fabric=str(topo),
                   tree_cells=256, rack=f"w{process_tag()[-3:]}c")
    doc = run(spec, ["switch"])
    assert not netns.leftovers(f"{spec.rack}-")
    assert doc["correct"], doc["runs"]["switch"]["wrong_examples"]
    assert doc["placement"]["path"] == ["s1", "s2", "s3"]
    sw, r = doc["switches"], doc["runs"]["switch"]
    if r["retransmissions"]:  # see above: a resent copy is counted again
        assert sw["s1"]["pairs_in"] >= r["mapper_pairs"]
    else:
        assert sw["s1"]["pairs_in"] == r["mapper_pairs"]
    assert sw["s2"]["pairs_in"] == sw["s1"]["pairs_out"]
    assert sw["s3"]["pairs_in"] == sw["s2"]["pairs_out"]
    assert sw["s3"]["pairs_out"] == r["reducer_pairs"]
    # 4,000 keys in 1,024 cells: the first switch cannot hold them all; later ones still merge some.
    assert 0 < sw["s1"]["reduction"] < 0.5
    assert sw["s2"]["pairs_out"] <= sw["s2"]["pairs_in"]


def _experiment(name: str, tmp_path) -> dict:
    import json
    import subprocess
    import sys

    cp = subprocess.run([sys.executable, "-m", "inswitch", "experiment", name, "--quick", "--out", str(tmp_path)],
                        capture_output=True, text=True, timeout=600)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    assert (tmp_path / f"{name}.png").stat().st_size > 0
    return json.loads((tmp_path / f"{name}.json").read_text())


@pytest.mark.slow  # ~35 s; test_two_level_daiet_exact_and_every_level_accounted covers the path
def test_daiet_two_level_quick(tmp_path) -> None:
    doc = _experiment("daiet-two-level", tmp_path)
    assert doc["correct"] is True
    lv = doc["levels"]
    assert lv["aggregation"]["pairs_in"] == lv["leaves"]["pairs_out"]
    assert doc["two_level"]["mapper_pairs"] == doc["one_switch"]["mapper_pairs"]  # the same input
    assert 0 < doc["leaf_reduction"] < 1 and 0 < doc["one_switch"]["reduction"] < 1


@pytest.mark.slow  # ~45 s (six fabrics); test_switchagg_tree_along_a_path_of_three_switches covers the path
def test_switchagg_hops_quick(tmp_path) -> None:
    """The default aggregation node is the switchagg program (SwitchAgg's theorem), its tree
    given 1/255 of the engines; the key variety is beyond that memory."""
    from inswitch.experiments.switchagg import formula3

    doc = _experiment("switchagg-hops", tmp_path)
    assert doc["all_correct"] is True
    assert doc["program"] == "switchagg" and "switchagg program" in doc["notes"][0]
    assert doc["capacity_pairs"] == sum(doc["capacity_by_group"].values())
    for rows in doc["by_distribution"].values():
        assert [r["hops"] for r in rows] == [1, 2, 3]
        assert all(r["formula3"] == round(formula3(r["keys"], r["pairs"], doc["capacity_pairs"]), 4) for r in rows)
        # the per-group split of the input is the job's: every key and every pair sent
        for r in rows:
            assert sum(g["keys"] for g in r["keys_by_group"].values()) == r["keys"]
            assert sum(g["pairs"] for g in r["keys_by_group"].values()) == r["pairs"]
        # More hops never undo a reduction: each switch forwards at most what it took in.
        assert all(a["measured"] <= b["measured"] + 1e-9 for a, b in zip(rows, rows[1:]))
    assert doc["by_distribution"]["uniform"][0]["keys"] > doc["capacity_pairs"]


@pytest.mark.slow  # ~45 s: a fabric, a job long enough to kill a switch in, its restart
def test_two_level_daiet_exactly_once_when_a_leaf_is_killed_mid_job() -> None:
    """kill -9 of a leaf with mappers while they send: the fabric's supervisor restarts it
    and reinstalls its routing, the job puts its (empty) trees and its path back, the hosts
    fall back to host-side aggregation; the counts are still exactly the Counter's, and the
    run says so. (Before the trees were put back, the restarted leaf forwarded its mappers'
    packets untouched and the spine counted their ENDs: 3 runs in 4 were short.)"""
    import signal
    import threading

    from inswitch.topology.fabric.fabric import FabricState

    spec = JobSpec(zipf=1.0, words=300_000, vocab=30_000, seed=4, mappers=4, reducers=2, timeout_s=90,
                   fabric=SPEC, rack=f"w{process_tag()[-3:]}k")
    killed: list[int] = []

    def progress(msg: str) -> None:
        if msg.startswith("switch:") and "mappers running" in msg and not killed:
            st = FabricState.load(spec.rack)
            assert st is not None
            leaf = next(s for s in st.switches if s.plan.name == "leaf1")
            killed.append(leaf.pid)
            # Mid-stream: after the mappers' map phase (~0.8 s here), before their ~2 s of sending end.
            threading.Timer(1.2, os.kill, (leaf.pid, signal.SIGKILL)).start()

    doc = run(spec, ["switch"], progress)
    assert killed
    assert not netns.leftovers(f"{spec.rack}-")
    assert doc["correct"], doc["runs"]["switch"]["wrong_examples"]
    r = doc["runs"]["switch"]
    assert [x["switch"] for x in r["switch_restarts"]] == ["leaf1"]
    assert "forwarding_at" in r["switch_restarts"][0]
    assert "leaf1" in r["restart_note"]
    # Killed after it acknowledged anything, the leaf's mappers stall and the reducers fall
    # back; killed before, the leaf's empty trees take the streams from the start. Exact
    # either way, and the run says which.
    assert r["fallback"] == ("fell back" in r["restart_note"])
    assert doc["switches"]["leaf1"]["restarted"] is True


def test_two_level_daiet_exact_across_two_machines_over_vxlan(tmp_path) -> None:
    """The same job on leaf-spine:3,1,2 spread over two emulated machines (leaf2 and its
    hosts on m2, the rest on m1): leaf2's mappers reach the spine only through the kernel
    VXLAN link, the counts are exact against the Counter and the spine took in exactly what
    both leaves sent up, the VXLAN leaf's included."""
    from inswitch.topology.fabric.generators import load_spec, split_machines

    topo = tmp_path / "two.clab.yml"
    topo.write_text(split_machines(load_spec(SPEC), 2).to_yaml())
    spec = JobSpec(zipf=1.1, words=20_000, vocab=2_000, seed=5, mappers=4, reducers=2, timeout_s=60,
                   fabric=str(topo), rack=f"w{process_tag()[-3:]}v")
    doc = run(spec, ["switch"])
    assert not netns.leftovers(f"{spec.rack}-")
    assert doc["correct"], doc["runs"]["switch"]["wrong_examples"]
    assert not doc["fallback"]
    assert any("kernel VXLAN links (UDP 4789): leaf2:p3 -- spine1:p2" in n for n in doc["notes"]), doc["notes"]
    place, sw = doc["placement"], doc["switches"]
    leaves = {m["switch"] for m in place["mappers"]}
    assert "leaf2" in leaves and place["aggregation"] == "spine1"
    assert sw["leaf2"]["pairs_out"] > 0
    assert sw["spine1"]["pairs_in"] == sum(sw[leaf]["pairs_out"] for leaf in leaves)
