"""DAIET §4 on a fabric: the data reduction at each level of a two-level aggregation tree
(leaves, aggregation switch, the reducers' leaf), measured on real switch processes, beside
the one-switch tree over the same input (same words, same mappers, same reducers).

Both runs are `inswitch wordcount`: the one-switch tree in a rack (every mapper a child of
the one switch), the two-level tree with `--fabric` (mappers under several leaves, each leaf
a child of one spine; see `apps/wordcount/fabric.py`). Per switch, pairs in and out come
from its port counters. With enough memory for every key, both trees deliver each reducer
each of its keys once, so the whole tree's reduction is the same: what a second level buys
is less traffic on the links above the leaves (the leaves' own reduction), not a smaller
result at the reducer. DAIET reports no numbers for multi-level trees.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from inswitch.experiments import Experiment, PaperNumber
from inswitch.topology.state import process_tag


def _config(quick: bool) -> dict[str, Any]:
    if quick:
        return {"fabric": "leaf-spine:3,1,2", "mappers": 4, "reducers": 2, "words": 40_000, "vocab": 2_000, "zipf": 1.0}
    return {"fabric": "leaf-spine:4,1,3", "mappers": 9, "reducers": 2, "words": 400_000, "vocab": 20_000, "zipf": 1.0}


def _reduction(out: int, into: int) -> float | None:
    return round(1.0 - out / into, 4) if into else None


def levels(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The two-level run's switches grouped by level: pairs in and out summed over the level's
    switches, and its reduction."""
    place, sw = doc["placement"], doc["switches"]
    root = {r["switch"] for r in place["reducers"]}
    groups = {"leaves": [n for n in sw if n != place["aggregation"] and n not in root],
              "aggregation": [place["aggregation"]] if place["aggregation"] in sw else [],
              "reducers_leaf": [n for n in sw if n in root]}
    out = {}
    for level, names in groups.items():
        pin = sum(sw[n]["pairs_in"] for n in names)
        pout = sum(sw[n]["pairs_out"] for n in names)
        out[level] = {"switches": names, "pairs_in": pin, "pairs_out": pout, "reduction": _reduction(pout, pin)}
    return out


def run(quick: bool, progress: Callable[[str], None]) -> dict[str, Any]:
    from inswitch.apps.wordcount.job import JobError, JobSpec, run as run_job

    cfg = _config(quick)
    tag = process_tag()[-3:]
    common = dict(zipf=cfg["zipf"], words=cfg["words"], vocab=cfg["vocab"], seed=5, mappers=cfg["mappers"],
                  reducers=cfg["reducers"], program="daiet", where="netns", timeout_s=300)
    try:
        progress("one-switch tree (a rack)")
        one = run_job(JobSpec(rack=f"d2o{tag}", **common), ["switch"], progress)  # type: ignore[arg-type]
        progress(f"two-level tree ({cfg['fabric']})")
        two = run_job(JobSpec(rack=f"d2t{tag}", fabric=cfg["fabric"], **common), ["switch"], progress)  # type: ignore[arg-type]
    except JobError as e:
        raise RuntimeError(f"daiet-two-level: {e}") from None
    o, t = one["runs"]["switch"], two["runs"]["switch"]
    lv = levels(two)
    return {
        "config": cfg,
        "distinct_words": two["distinct_words"],
        "correct": one["correct"] and two["correct"],
        "fallback": bool(one.get("fallback") or two.get("fallback")),
        "placement": two["placement"],
        "switches": two["switches"],
        "levels": lv,
        "one_switch": {"mapper_pairs": o["mapper_pairs"], "reducer_pairs": o["reducer_pairs"],
                       "reduction": _reduction(o["reducer_pairs"], o["mapper_pairs"]),
                       "reducer_bytes": o["reducer_bytes"], "udp_reducer_bytes": one["runs"]["udp"]["reducer_bytes"]},
        "two_level": {"mapper_pairs": t["mapper_pairs"], "reducer_pairs": t["reducer_pairs"],
                      "reduction": _reduction(t["reducer_pairs"], t["mapper_pairs"]),
                      "reducer_bytes": t["reducer_bytes"], "udp_reducer_bytes": two["runs"]["udp"]["reducer_bytes"]},
        "leaf_reduction": lv["leaves"]["reduction"],
        "aggregation_reduction": lv["aggregation"]["reduction"],
        "notes": ["per-switch pairs are counted from the switch's port counters (frames in on the tree's child ports, "
                  "out on its parent port), and checked against the hosts' counts by tests/test_wordcount_fabric.py",
                  "a key can take one cell in each of the program's four register slices (the pair at position p of a "
                  "packet uses slice p % 4), so a switch sends a key up to four times; a leaf's flush re-packs its pairs, "
                  "so the next level merges them only partly, and the whole two-level tree ends above `distinct_words` "
                  "pairs at the reducers, and above the one-switch tree, which merges every mapper's pairs once",
                  "the reducers' leaf has only the aggregation switch as a child when no mapper shares it, so its "
                  "reduction is ~0: the aggregation switch already merged everything it forwards"],
    }


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lv = result["levels"]
    names = ["leaves", "aggregation", "reducers_leaf"]
    labels = ["leaves", "aggregation\nswitch", "reducers'\nleaf", "whole tree"]
    vals = [100 * (lv[n]["reduction"] or 0) for n in names] + [100 * (result["two_level"]["reduction"] or 0)]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    bars = ax.bar(range(len(vals)), vals, color=["tab:blue"] * 3 + ["tab:green"], label="two-level tree (ours)")
    one = 100 * (result["one_switch"]["reduction"] or 0)
    ax.axhline(one, color="tab:red", ls="--", label=f"one-switch tree, same input ({one:.1f} %)")
    for b, v in zip(bars, vals):
        ax.text(b.get_x() + b.get_width() / 2, v + 1, f"{v:.1f} %", ha="center")
    ax.set_xticks(range(len(vals)), labels)
    ax.set_ylabel("pair reduction at this level (%)")
    ax.set_ylim(0, 105)
    cfg = result["config"]
    ax.set_title(f"DAIET two-level tree on {cfg['fabric']}: {cfg['mappers']} mappers, {cfg['reducers']} reducers "
                 "(DAIET reports no multi-level numbers)", fontsize=10)
    ax.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


EXPERIMENTS = [
    Experiment(
        name="daiet-two-level",
        paper="DAIET (HotNets'17)",
        figure="§4 (aggregation trees), two levels",
        description="WordCount on a fabric: pair reduction at each level of a two-level tree vs the one-switch tree, same input",
        run=run,
        plot=plot,
        numbers=[
            PaperNumber("leaves' reduction", "-", "leaf_reduction", scale=100),
            PaperNumber("aggregation switch's reduction", "-", "aggregation_reduction", scale=100),
            PaperNumber("whole two-level tree", "-", "two_level.reduction", scale=100),
            PaperNumber("one-switch tree, same input", "-", "one_switch.reduction", scale=100),
        ],
        needs_root=True,
    ),
]
