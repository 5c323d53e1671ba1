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
    # Each leaf took in exactly the pairs its own mappers sent.
    for leaf in leaves:
        sent = sum(m["pairs"]
                   for m, p in zip(r["per_mapper"], place["mappers"]) if p["switch"] == leaf)
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
