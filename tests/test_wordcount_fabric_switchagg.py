"""WordCount on a fabric with the `switchagg` program (`inswitch wordcount --fabric SPEC
--program switchagg`): two-level trees and a path of real switch processes, the reducers'
counts checked against a Counter over the input (inside `run`), and every switch's bytes
and pairs checked against what the hosts sent and received. SwitchAgg's pairs have
variable length, so `switches` reports bytes (`pair_bytes_*`: the frames' bytes beyond 56
of headers each; a leaf's pair bytes in are exactly its mappers', UDP payload minus the
14-byte SwitchAgg header per packet) and, from the program's own counters, pairs
(`pairs_*`, `reduction`).

Needs root (about 10-15 s each: a 4-switch fabric, a udp and a switch run).
"""

from __future__ import annotations

import os

import pytest

from inswitch.apps.switchagg.controller import MAX_CHILDREN, SWITCH_CHILD_MIN
from inswitch.apps.wordcount.job import JobSpec, run
from inswitch.topology import netns
from inswitch.topology.state import process_tag

pytestmark = [pytest.mark.netns,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root: namespaces, veth pairs, AF_PACKET")]

SPEC = "leaf-spine:3,1,2"
HDR = 14  # the SwitchAgg header (`wire::switchagg::HEADER_LEN`), in every packet's UDP payload


def _spec(loss: float, suffix: str, words: int = 20_000, vocab: int = 2_000) -> JobSpec:
    return JobSpec(zipf=1.1, words=words, vocab=vocab, seed=3, mappers=4, reducers=2, loss=loss, timeout_s=60,
                   program="switchagg", fabric=SPEC, rack=f"sf{process_tag()[-3:]}{suffix}")


def _pair_bytes(host: dict) -> int:
    return int(host["bytes_sent"]) - HDR * int(host["packets_sent"])


def test_two_level_switchagg_exact_and_every_level_accounted_in_bytes() -> None:
    spec = _spec(0.0, "a")
    doc = run(spec, ["switch"])
    assert not netns.leftovers(f"{spec.rack}-")
    assert doc["correct"], doc["runs"]["switch"]["wrong_examples"]
    assert doc["runs"]["udp"]["correct"]
    place, sw, r = doc["placement"], doc["switches"], doc["runs"]["switch"]
    # Why the reducers aggregated themselves, if they did (was a bare `assert not True`).
    assert not doc["fallback"], [(x.get("fallback_reason"), x.get("socket_drops")) for x in r["per_reducer"] if x.get("fallback")]
    agg = place["aggregation"]
    leaves = {m["switch"] for m in place["mappers"]}
    (rl,) = {x["switch"] for x in place["reducers"]}
    assert len(leaves) >= 2 and rl not in leaves, place
    # Every switch of the trees acknowledged; child ids: the root reports as the switch's
    # stream, the others each their own id below 256, above the mappers'.
    acks = {a["switch"]: a for a in r["controller"]}
    assert set(acks) == leaves | {agg, rl}
    # ... through SwitchAgg's task launch: a Configure to each, each installed once.
    assert r["launch"]["started"] and [x["installs"] for x in r["launch"]["switches"]] == [1] * len(acks)
    assert set(acks[rl]["up_child"].values()) == {SWITCH_CHILD_MIN}
    lower = [next(iter(set(acks[n]["up_child"].values()))) for n in leaves | {agg}]
    assert len(set(lower)) == len(lower) and all(spec.mappers <= u < MAX_CHILDREN for u in lower)
    # Pairs, from the switches' own counters (a packet's pairs counted once, so exact even
    # when a mapper resent): each leaf took its mappers' pairs, the aggregation switch what
    # the leaves sent up, the root leaf what the spine sent down, and the reducers got one
    # pair per word of the reference Counter.
    for leaf in leaves:
        mine = [m for m, p in zip(r["per_mapper"], place["mappers"]) if p["switch"] == leaf]
        assert sw[leaf]["pairs_in"] == sum(int(m["pairs"]) for m in mine), (leaf, sw[leaf])
        assert 0 < sw[leaf]["pairs_out"] < sw[leaf]["pairs_in"]
        assert sw[leaf]["reduction"] == round(1 - sw[leaf]["pairs_out"] / sw[leaf]["pairs_in"], 4)
    assert sum(sw[leaf]["pairs_in"] for leaf in leaves) == r["mapper_pairs"]
    assert sw[agg]["pairs_in"] == sum(sw[leaf]["pairs_out"] for leaf in leaves)
    assert sw[agg]["pairs_out"] < sw[agg]["pairs_in"]
    assert sw[rl]["pairs_in"] == sw[agg]["pairs_out"]
    assert sw[rl]["pairs_out"] == r["reducer_pairs"] == doc["distinct_words"]
    # Each leaf took in exactly its mappers' packets and pair bytes (more if they
    # retransmitted: on a loaded machine a late ACK makes a mapper resend, and the leaf
    # counts the copy).
    for leaf in leaves:
        mine = [m for m, p in zip(r["per_mapper"], place["mappers"]) if p["switch"] == leaf]
        sent, frames = sum(_pair_bytes(m) for m in mine), sum(m["packets_sent"] for m in mine)
        if any(m["retransmissions"] for m in mine):
            assert sw[leaf]["pair_bytes_in"] >= sent, (leaf, sw[leaf], sent)
        else:
            assert (sw[leaf]["pair_bytes_in"], sw[leaf]["frames_in"]) == (sent, frames), (leaf, sw[leaf], sent, frames)
        assert 0 < sw[leaf]["byte_reduction"] < 1
    # The aggregation switch took in what the leaves sent up and aggregated it; the root
    # leaf took in what the spine sent down, and the reducers got exactly what it sent them.
    assert sw[agg]["pair_bytes_in"] == sum(sw[leaf]["pair_bytes_out"] for leaf in leaves)
    assert sw[agg]["frames_in"] == sum(sw[leaf]["frames_out"] for leaf in leaves)
    assert sw[agg]["pair_bytes_out"] < sw[agg]["pair_bytes_in"]
    assert sw[rl]["pair_bytes_in"] == sw[agg]["pair_bytes_out"]
    assert sw[rl]["pair_bytes_out"] == sum(int(x["bytes"]) - HDR * int(x["packets"]) for x in r["per_reducer"])
    assert sw[rl]["frames_out"] == sum(int(x["packets"]) for x in r["per_reducer"])
    assert r["reducer_pairs"] < doc["runs"]["udp"]["reducer_pairs"]
    assert r["reducer_pairs"] == doc["distinct_words"]  # every word once: the trees merged every key


def test_two_level_switchagg_exact_under_loss_on_every_link() -> None:
    """2 % loss on every link (switch-to-switch links at both ends): a loss below a switch is
    repaired by the mappers' Go-Back-N; a loss between switches is a gap in a switch's
    numbered stream, the parent never completes, and the reducers fall back after their
    grace period. Exact either way, and the result says which."""
    # ~60 packets per mapper (SwitchAgg's short pairs fill fewer packets than DAIET's), so
    # 2 % loss on the mappers' links is all but sure to make some mapper resend.
    spec = _spec(0.02, "b", words=60_000, vocab=8_000)
    doc = run(spec, ["switch"])
    assert not netns.leftovers(f"{spec.rack}-")
    r = doc["runs"]["switch"]
    assert doc["correct"], r["wrong_examples"]
    assert r["switch_lost_frames"] > 0
    assert r["retransmissions"] > 0
    assert doc["fallback"] == any(x.get("fallback") for x in r["per_reducer"])
    assert ("hosts aggregated instead" in r.get("note", "")) == doc["fallback"]
    # The leaves count a packet's pairs once however often it was resent: never more than
    # the mappers' pairs, all of them when the trees completed.
    leaves = {m["switch"] for m in doc["placement"]["mappers"]}
    took = sum(doc["switches"][leaf]["pairs_in"] or 0 for leaf in leaves)
    assert took == r["mapper_pairs"] if not doc["fallback"] else took <= r["mapper_pairs"]


def test_switchagg_tree_along_a_path_of_three_switches(tmp_path) -> None:
    from inswitch.experiments.switchagg_hops import chain

    topo = tmp_path / "chain3.yml"
    topo.write_text(chain(3, 3, 1).to_yaml())
    spec = JobSpec(zipf=0.0, words=20_000, vocab=4_000, seed=2, mappers=3, reducers=1, timeout_s=60, fabric=str(topo),
                   program="switchagg", rack=f"sf{process_tag()[-3:]}c")
    doc = run(spec, ["switch"])
    assert not netns.leftovers(f"{spec.rack}-")
    assert doc["correct"], doc["runs"]["switch"]["wrong_examples"]
    assert not doc["fallback"]
    assert doc["placement"]["path"] == ["s1", "s2", "s3"]
    sw, r = doc["switches"], doc["runs"]["switch"]
    if not r["retransmissions"]:
        assert sw["s1"]["pair_bytes_in"] == sum(_pair_bytes(m) for m in r["per_mapper"])
    assert sw["s2"]["pair_bytes_in"] == sw["s1"]["pair_bytes_out"]
    assert sw["s3"]["pair_bytes_in"] == sw["s2"]["pair_bytes_out"]
    assert sw["s3"]["pair_bytes_out"] == sum(int(x["bytes"]) - HDR * int(x["packets"]) for x in r["per_reducer"])
    assert 0 < sw["s1"]["byte_reduction"] < 1
    assert r["reducer_pairs"] == doc["distinct_words"]


@pytest.mark.slow  # ~15-40 s: a fabric, a job, a switch killed and restarted (the wait for its restart)
def test_two_level_switchagg_exact_when_a_leaf_is_killed_mid_job() -> None:
    """kill -9 of a leaf with mappers while they send: the fabric's supervisor restarts it,
    the job puts its switchagg trees (registers empty) and its path back; a mapper the dead
    leaf had acknowledged anything of finds a gap there, stalls, and the reducers fall back.
    The counts are exactly the Counter's either way, and the run says which."""
    import signal
    import threading

    from inswitch.topology.fabric.fabric import FabricState

    spec = JobSpec(zipf=1.0, words=300_000, vocab=30_000, seed=4, mappers=4, reducers=2, timeout_s=90,
                   program="switchagg", fabric=SPEC, rack=f"sf{process_tag()[-3:]}k")
    killed: list[int] = []

    def progress(msg: str) -> None:
        if msg.startswith("switch:") and "mappers running" in msg and not killed:
            st = FabricState.load(spec.rack)
            assert st is not None
            leaf = next(s for s in st.switches if s.plan.name == "leaf1")
            killed.append(leaf.pid)
            # switchagg's job sends for ~1.2 s after this: 0.9 s is mid-stream.
            threading.Timer(0.9, os.kill, (leaf.pid, signal.SIGKILL)).start()

    doc = run(spec, ["switch"], progress)
    assert killed
    assert not netns.leftovers(f"{spec.rack}-")
    r = doc["runs"]["switch"]
    assert doc["correct"], r["wrong_examples"]
    assert [x["switch"] for x in r["switch_restarts"]] == ["leaf1"]
    assert r["fallback"] == ("fell back" in r["restart_note"])
    assert doc["switches"]["leaf1"]["restarted"] is True and doc["switches"]["leaf1"]["pair_bytes_in"] is None
    assert not any("putting the job's trees and path back" in n for n in doc["notes"]), doc["notes"]
