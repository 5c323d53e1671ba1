"""NetSHa §3.5/§3.6 in the regime they are for: a stream of queries, more in flight than
registers (`arrival="stream"`), where register replacement and the best-effort counter λ
decide how many queries the switch reduces (Figs. 20 and 23, quick sizes)."""

from __future__ import annotations

import numpy as np
import pytest

from inswitch.apps.netsha.datasets import random_dataset
from inswitch.apps.netsha.search import SearchConfig, run_search


@pytest.mark.parametrize("lam", [0.0, 0.25, 1.0])
def test_stream_with_replacements_keeps_the_exact_top_k(lam: float) -> None:
    """Replaced registers flush their answers and bypassed queries go on unreduced: the
    agent's top K is the servers' top K without the switch (TLSH) whatever λ does."""
    ds = random_dataset(1500, 40, seed=3)
    cfg = SearchConfig(k=10, servers=4, registers=8, lam=lam, per_packet=8, arrival="stream", query_gap_ns=2_000, concurrency=40)
    r = run_search(ds, cfg, ["netsha", "tlsh"], keep_topk=True)
    c = r["modes"]["netsha"]["switch_counters"]["switch0"]
    assert (c["replacements"] > 0) == (lam > 0)
    assert c["bypass_collision"] > 0, "the stream must contend for registers"
    for a, b in zip(r["modes"]["netsha"]["topk_distances"], r["modes"]["tlsh"]["topk_distances"]):
        np.testing.assert_array_equal(a, b)


def test_fig20_quick_replacement_beats_bypass_forwarding_under_load() -> None:
    from inswitch.experiments import all_experiments

    r = all_experiments()["netsha-fig20"].run(True, lambda s: None)
    assert r["switch"] == "tofino1"
    low = next(p for p in r["points"] if p["query_rate"] == 1.0)
    # A quarter of the registers busy: nothing to replace, the two are the same run.
    assert low["replacement"]["replacements"] == 0
    assert low["bf_over_replacement_packets"] == 1.0
    # As many queries in flight as registers: BF forwards many queries unreduced.
    assert r["bf_over_replacement_packets"] > 1.2
    assert r["bf_over_replacement_answers"] > 1.2
    assert r["replacement"]["recall"] == r["bypass_forwarding"]["recall"]


def test_fig23_quick_lambda_matters() -> None:
    from inswitch.experiments import all_experiments

    r = all_experiments()["netsha-fig23"].run(True, lambda s: None)
    pts = r["points"]
    assert pts[0]["lambda"] == 0.0 and pts[0]["replacements"] == 0
    assert r["normalized_agent_packets_lambda_032"] < 0.8
    assert pts[-1]["replacements"] > 0
    assert len({p["recall"] for p in pts}) == 1, "λ changes the cost, never the answers"
