"""SwitchAgg Theorem 2.2 on real processes: the reduction ratio of an aggregation tree along
a path of 1, 2 and 3 switches (a "streamline", SwitchAgg §2, Fig. 2(b)), with a key variety
beyond one switch's memory, for uniform and Zipf data, with formula (3) beside.

Each point is `inswitch wordcount --fabric CHAIN`: a fabric whose switches form a chain, the
mappers under the first switch, the reducer under the last, one aggregation tree along the
path, every switch its own process. Reduction = 1 - pairs at the reducer / pairs the mappers
sent (M); N = distinct words. Each mapper sends its (combined) pairs in a random order of its
own (`shuffle_pairs`): in the vocabulary's order, the same in every mapper, a switch without
room for every key merges the mappers' copies of a key only if they arrive close together,
and the measured reduction followed the mappers' relative timing (0.10 to 0.25 at one
switch in three runs of the same job), where formula (3) assumes no particular order.

`--program switchagg` (the default: it is SwitchAgg's theorem): the aggregation node is the
`switchagg` program (FPE + BPE, `apps.switchagg.controller.plan_path`). Its engines are
4 MB + 256 MB in this build, far beyond a key variety real processes send in seconds, so
the controller gives the tree 1/255 of every engine memory (`regions` = 255 in its
`tree_config` entry, the largest the 8-bit field takes): C = the tree's slots for the keys'
lengths (3-12 bytes: groups 1 and 2, `switchagg.region_slots`). Formula (3) is given for
one memory of C (`formula3`) and summed over the key-length groups, each with its own
memory as the program has it (`formula3_groups`).

`--program daiet`: the aggregation node is the `daiet` program with a per-tree memory set
by the controller (`tree_cells` cells per register slice, four slices: C = 4 x tree_cells
pairs). Formula (3) assumes a memory that fills up to C: a hash table with one-element
buckets (DAIET's) passes colliding keys on before it is full, so it sits below it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Callable

from inswitch.experiments import Experiment, PaperNumber
from inswitch.experiments.switchagg import formula3
from inswitch.topology.fabric.model import HOST_KIND, SWITCH_KIND, Endpoint, Link, Node, Topology
from inswitch.topology.state import process_tag

HOPS = (1, 2, 3)


def chain(hops: int, mappers: int, reducers: int) -> Topology:
    """Switches s1..sHOPS in a line; the mappers' hosts on s1, the reducers' on the last."""
    nodes = {f"s{i}": Node(f"s{i}", SWITCH_KIND) for i in range(1, hops + 1)}
    links = []
    port = {i: 0 for i in range(1, hops + 1)}

    def nxt(i: int) -> str:
        port[i] += 1
        return f"p{port[i]}"

    for h in range(1, mappers + reducers + 1):
        nodes[f"h{h}"] = Node(f"h{h}", HOST_KIND)
        sw = 1 if h <= mappers else hops
        links.append(Link(Endpoint(f"s{sw}", nxt(sw)), Endpoint(f"h{h}", "eth0")))
    for i in range(1, hops):
        links.append(Link(Endpoint(f"s{i}", nxt(i)), Endpoint(f"s{i + 1}", nxt(i + 1))))
    return Topology(name=f"chain{hops}", nodes=nodes, links=links, source=f"chain of {hops}")


PROGRAMS = ("switchagg", "daiet")
#: switchagg: the engines split into this many regions, the tree taking one.
SWITCHAGG_REGIONS = 255


def _config(quick: bool, program: str = "daiet") -> dict[str, Any]:
    if program == "switchagg":  # C is ~16,000 slots (1/255 of the engines): more keys than that
        if quick:
            return {"mappers": 3, "reducers": 1, "words": 60_000, "vocab": 30_000, "regions": SWITCHAGG_REGIONS}
        return {"mappers": 3, "reducers": 1, "words": 300_000, "vocab": 60_000, "regions": SWITCHAGG_REGIONS}
    if quick:
        return {"mappers": 3, "reducers": 1, "words": 30_000, "vocab": 6_000, "tree_cells": 256}
    return {"mappers": 3, "reducers": 1, "words": 300_000, "vocab": 60_000, "tree_cells": 2048}


def _group(word: str) -> int:
    """The switchagg key-length group of a word (`payload_analyzer::group_of`)."""
    return (len(word.encode()) - 1) // 8


def _by_group(alpha: float, cfg: dict[str, Any], seed: int) -> dict[int, tuple[int, int]]:
    """group -> (distinct keys N_g, pairs the mappers send M_g: each mapper's distinct words,
    the combiner's output) of the job's input."""
    import numpy as np

    from inswitch.apps.wordcount import words

    voc = words.vocabulary(cfg["vocab"], seed)
    groups = np.array([_group(w) for w in voc])
    seen = np.zeros(cfg["vocab"], dtype=bool)
    sent: dict[int, int] = {}
    for i in range(cfg["mappers"]):
        c = words.zipf_counts(alpha, cfg["words"], cfg["vocab"], seed, cfg["mappers"], i) > 0
        seen |= c
        for g in np.unique(groups[c]).tolist():
            sent[g] = sent.get(g, 0) + int(np.count_nonzero(c & (groups == g)))
    return {g: (int(np.count_nonzero(seen & (groups == g))), m) for g, m in sorted(sent.items())}


def run(quick: bool, progress: Callable[[str], None], program: str = "switchagg") -> dict[str, Any]:
    from inswitch.apps.wordcount.job import JobError, JobSpec, run as run_job
    from inswitch.experiments.switchagg import region_slots

    if program not in PROGRAMS:
        raise ValueError(f"--program must be one of {', '.join(PROGRAMS)}")
    cfg = _config(quick, program)
    seed = 7
    if program == "switchagg":
        cap_by_group = {g: region_slots(g, cfg["regions"]) for g in range(2)}  # keys of 3-12 bytes
        cap = sum(cap_by_group.values())
    else:
        cap_by_group = {}
        cap = 4 * cfg["tree_cells"]
    tag = process_tag()[-3:]
    by_dist: dict[str, list[dict[str, Any]]] = {}
    correct = True
    with tempfile.TemporaryDirectory(prefix="switchagg-hops-") as tmp:
        for dist, alpha in (("uniform", 0.0), ("zipf1.1", 1.1)):
            groups = _by_group(alpha, cfg, seed) if program == "switchagg" else {}
            rows = []
            for h in HOPS:
                progress(f"{dist}: a path of {h} switch{'es' if h > 1 else ''} ({program})")
                path = Path(tmp) / f"chain{h}.yml"
                path.write_text(chain(h, cfg["mappers"], cfg["reducers"]).to_yaml())
                spec = JobSpec(zipf=alpha, words=cfg["words"], vocab=cfg["vocab"], seed=seed, mappers=cfg["mappers"],
                               reducers=cfg["reducers"], where="netns", timeout_s=300, fabric=str(path), program=program,
                               tree_cells=cfg.get("tree_cells"), switchagg_regions=cfg.get("regions"),
                               shuffle_pairs=True, rack=f"sh{tag}{h}")
                try:
                    doc = run_job(spec, ["switch"], progress)
                except JobError as e:
                    raise RuntimeError(f"switchagg-hops: {e}") from None
                r = doc["runs"]["switch"]
                m, n = r["mapper_pairs"], doc["distinct_words"]
                correct = correct and doc["correct"]
                row = {"hops": h, "pairs": m, "keys": n, "reducer_pairs": r["reducer_pairs"],
                       "measured": round(1 - r["reducer_pairs"] / m, 4) if m else None,
                       "formula3": round(formula3(n, m, cap), 4), "correct": doc["correct"],
                       "fallback": doc.get("fallback"), "switches": doc.get("switches")}
                if groups:
                    # Each group has its own memory: the pairs formula (3) leaves, summed.
                    left = sum(mg * (1 - formula3(ng, mg, cap_by_group.get(g, 0) or 1)) for g, (ng, mg) in groups.items())
                    row["formula3_groups"] = round(1 - left / m, 4) if m else None
                    row["keys_by_group"] = {str(g): {"keys": ng, "pairs": mg} for g, (ng, mg) in groups.items()}
                rows.append(row)
            by_dist[dist] = rows
    uni = [r["measured"] for r in by_dist["uniform"] if r["measured"] is not None]
    if program == "switchagg":
        note = (f"the aggregation node is the switchagg program (FPE + BPE), the tree given 1/{cfg['regions']} of every engine "
                f"memory: C = {cap:,} slots for keys of 3-12 bytes ({', '.join(f'group {g + 1}: {c:,}' for g, c in cap_by_group.items())}); "
                "formula3 takes one memory of C, formula3_groups each key-length group with its own")
    else:
        note = ("the aggregation node is the daiet program with C = 4 x tree_cells pairs per tree (see the module doc); "
                "the switches of a path see the first switch's leftovers, which collide again in their own tables")
    note += "; each mapper sends its pairs in its own random order"
    return {
        "program": program,
        "config": cfg,
        "capacity_pairs": cap,
        "capacity_by_group": {str(g + 1): c for g, c in cap_by_group.items()} or None,
        "by_distribution": by_dist,
        "all_correct": correct,
        "hops_uniform_spread": round(max(uni) - min(uni), 4) if uni else None,
        "uniform_1hop": by_dist["uniform"][0]["measured"],
        "uniform_1hop_formula3": by_dist["uniform"][0]["formula3"],
        "uniform_1hop_formula3_groups": by_dist["uniform"][0].get("formula3_groups"),
        "notes": [note],
    }


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (dist, rows), color in zip(result["by_distribution"].items(), ("tab:blue", "tab:orange")):
        ax.plot([r["hops"] for r in rows], [100 * r["measured"] for r in rows], "o-", color=color, label=f"{dist} (ours)")
        ax.plot([r["hops"] for r in rows], [100 * r["formula3"] for r in rows], "--", color=color, alpha=0.6,
                label=f"{dist}: formula (3) (uniform model, one hop)")
        if all(r.get("formula3_groups") is not None for r in rows):
            ax.plot([r["hops"] for r in rows], [100 * r["formula3_groups"] for r in rows], ":", color=color, alpha=0.6,
                    label=f"{dist}: formula (3) per key-length group")
    ax.set_xticks(list(HOPS))
    ax.set_xlabel("aggregation hops (switches on the path)")
    ax.set_ylabel("reduction ratio (%)")
    cfg = result["config"]
    ax.set_title(f"SwitchAgg Theorem 2.2 on real switch processes ({result.get('program', 'daiet')}): {cfg['vocab']:,} keys, "
                 f"C = {result['capacity_pairs']:,} pairs",
                 fontsize=10)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


EXPERIMENTS = [
    Experiment(
        name="switchagg-hops",
        paper="SwitchAgg (2019)",
        figure="Theorem 2.2, Fig. 2(b)",
        description="reduction vs hops 1-3 on a chain of real switch processes (--program switchagg|daiet), key variety beyond one switch's memory, formula (3) beside",
        run=run,
        plot=plot,
        numbers=[
            PaperNumber("uniform data: reduction spread over 1-3 hops", "~0 (Theorem 2.2)", "hops_uniform_spread",
                        why="a later switch aggregates some of the keys the first passed on: it sees only what the first "
                            "evicted at bucket collisions (before its memory was full) and flushed, fewer keys per bucket than "
                            "the first saw, while formula (3)'s memory fills first"),
            PaperNumber("uniform data, one hop: reduction", "-", "uniform_1hop", scale=100),
            PaperNumber("formula (3) for the same N, M, C", "-", "uniform_1hop_formula3", scale=100),
            PaperNumber("formula (3) per key-length group (switchagg)", "-", "uniform_1hop_formula3_groups", scale=100),
        ],
        needs_root=True,
        programs=PROGRAMS,
    ),
]
