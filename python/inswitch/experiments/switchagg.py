"""SwitchAgg's experiments (SwitchAgg §2.2 Fig. 2, §6.2 Fig. 9 and Table 2) on the
`switchagg` program, in memory (`_native.switchagg_run`, `_native.switchagg_line_rate`).

Sizes are scaled down from the paper's (gigabytes of pairs, megabytes of block RAM) to
what one core runs in about a minute; the ratios that matter (key variety to memory,
workload to key variety) are kept in the paper's range, and each result states them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np

from inswitch import keys as keyset
from inswitch.experiments import Experiment, PaperNumber

Progress = Callable[[str], None]


# ---- workloads ---------------------------------------------------------------------------


def key_table(n: int, lengths: tuple[int, int], seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    """`n` distinct keys with lengths uniform in `lengths` (inclusive): (bytes as uint8, offsets)."""
    rng = np.random.default_rng(seed)
    lo, hi = lengths
    lens = rng.integers(lo, hi + 1, n).astype(np.int64)
    off = np.zeros(n + 1, dtype=np.int64)
    off[1:] = np.cumsum(lens)
    if lo < 4:
        raise ValueError("keys of at least 4 bytes (a unique 4-byte id starts each)")
    buf = np.full(int(off[-1]), ord("."), dtype=np.uint8)
    # A unique 4-byte id (big-endian) at the start of every key; the rest is filler.
    ids = np.arange(n, dtype=np.int64)
    for d in range(4):
        buf[off[:-1] + d] = (ids >> (8 * (3 - d))) & 0xFF
    return buf, off


def sample(n_keys: int, m: int, zipf: float | None, seed: int) -> np.ndarray:
    """`m` key ids, uniform or Zipf(`zipf`) over `n_keys` (rank 1 = id 0)."""
    rng = np.random.default_rng(seed)
    if zipf is None:
        return rng.integers(0, n_keys, m)
    w = 1.0 / np.arange(1, n_keys + 1, dtype=np.float64) ** zipf
    cdf = np.cumsum(w)
    cdf /= cdf[-1]
    return np.minimum(np.searchsorted(cdf, rng.random(m)), n_keys - 1)


def gather(table: tuple[np.ndarray, np.ndarray], ids: np.ndarray) -> tuple[bytes, bytes]:
    """Keys `ids` of `table` back to back: (keys, uint64 offsets), as `_native` takes them."""
    out, new = keyset.gather(*table, ids)
    return out.tobytes(), new.tobytes()


def run_job(table, ids: np.ndarray, **kw: Any) -> dict[str, Any]:
    from inswitch import _native

    keys, offs = gather(table, ids)
    values = np.ones(len(ids), dtype=np.uint32).tobytes()
    r = dict(_native.switchagg_run(keys, offs, values, **kw))
    counts = np.bincount(ids, minlength=len(table[1]) - 1)
    r["correct"] = bool(r["complete"]) and _result_equals(r, table, counts)
    r["distinct_keys"] = int(np.count_nonzero(counts))
    for k in ("result_trees", "result_keys", "result_offsets", "result_values"):
        r.pop(k, None)
    return r


def _result_equals(r: dict[str, Any], table, counts: np.ndarray) -> bool:
    """The reducers' result equals a Counter of the input (compared as sorted arrays)."""
    rk, ro = r["result_keys"], np.frombuffer(r["result_offsets"], dtype=np.uint64)
    rv = np.frombuffer(r["result_values"], dtype=np.uint32)
    got = {rk[int(ro[i]) : int(ro[i + 1])]: int(rv[i]) for i in range(len(rv))}
    buf, off = table
    nz = np.nonzero(counts)[0]
    if len(got) != len(nz):
        return False
    raw = buf.tobytes()
    return all(got.get(raw[int(off[i]) : int(off[i + 1])]) == int(counts[i]) for i in nz)


def formula3(n: float, m: float, c: float) -> float:
    """SwitchAgg's formula (3): reduction ratio of uniform data, N keys, M pairs, memory C pairs."""
    return 1.0 - n / m if n <= c else (1.0 / n - 1.0 / m) * c


# Fixed 14-byte keys: 20-byte pairs on the wire (the paper's 16 B key + 4 B value), all in
# group 1 (slots of 16 bytes): one FPE of 1/8 of the memory, buckets of 4 slots.
FIG2_KEY = 14
SLOTS = 4


def group1_slots(fpe_bytes: int) -> int:
    bucket = 1 + SLOTS * (1 + 4 + 16)
    return max(1, (fpe_bytes // 8) // bucket) * SLOTS


#: The `switchagg` program's engines as it is built (`Config::default`): FPE and BPE bytes.
PROGRAM_FPE_BYTES = 4 << 20
PROGRAM_BPE_BYTES = 256 << 20
GROUPS = 8


def region_slots(group: int, regions: int, fpe_bytes: int = PROGRAM_FPE_BYTES, bpe_bytes: int = PROGRAM_BPE_BYTES) -> int:
    """Slots one tree has for keys of `group` (lengths 8g+1..8g+8) when the controller splits
    every engine memory into `regions` (`configuration::region`): FPE and BPE together, as
    `crates/programs/src/switchagg/mod.rs` sizes them (bucket words of 4 slots per group)."""
    bucket = 1 + SLOTS * (1 + 4 + 8 * (group + 1))
    total = 0
    for mem in (fpe_bytes, bpe_bytes):
        words = max(1, (mem // GROUPS) // bucket)
        total += (words // regions) * SLOTS
    return total


# ---- Fig. 2 ---------------------------------------------------------------------------------


def run_fig2(quick: bool, progress: Progress) -> dict[str, Any]:
    m = 200_000 if quick else 2_000_000
    mems = [128 << 10, 512 << 10] if quick else [256 << 10, 1 << 20, 4 << 20]
    varieties = [100, 400, 1_600, 6_400, 25_600, 102_400] if quick else [250, 1_000, 4_000, 16_000, 64_000, 256_000, 1_000_000]
    table = key_table(max(varieties), (FIG2_KEY, FIG2_KEY))
    curves = []
    for fpe in mems:
        c = group1_slots(fpe)
        pts = []
        for n in varieties:
            progress(f"fig2(a): memory {fpe >> 10} KB, {n} keys")
            ids = sample(n, m, None, seed=n)
            r = run_job(table, ids, mappers=3, fpe_bytes=fpe, bpe_bytes=0)
            pts.append({"keys": n, "pairs": m, "measured": r["reduction_ratio"], "formula3": formula3(n, m, c), "correct": r["correct"], "fpe_evictions": r["fpe_evictions"]})
        curves.append({"fpe_bytes": fpe, "capacity_pairs": c, "points": pts})
    # Fig. 2(b): hops, key variety beyond one switch's memory (the paper: 64M keys, 128 MB).
    fpe = mems[0]
    c = group1_slots(fpe)
    n_h = 8 * c
    m_h = 4 * n_h if quick else 8 * n_h
    hops = [1, 2, 3, 4]
    table_h = key_table(n_h, (FIG2_KEY, FIG2_KEY), seed=11)
    by_dist = {}
    for dist, z in (("uniform", None), ("zipf0.99", 0.99)):
        ids = sample(n_h, m_h, z, seed=5)
        rows = []
        for h in hops:
            progress(f"fig2(b): {dist}, {h} hops")
            r = run_job(table_h, ids, mappers=3, fpe_bytes=fpe, bpe_bytes=0, topology="chain", hops=h)
            rows.append({"hops": h, "measured": r["reduction_ratio"], "correct": r["correct"]})
        by_dist[dist] = rows
    uni = [row["measured"] for row in by_dist["uniform"]]
    # The largest key variety that still fits the largest memory vs one well beyond.
    last = curves[-1]
    fits = [p for p in last["points"] if p["keys"] <= last["capacity_pairs"] // 4]
    over = [p for p in curves[0]["points"] if p["keys"] >= 10 * curves[0]["capacity_pairs"]]
    return {
        "pairs": m,
        "key_bytes": FIG2_KEY,
        "pair_bytes_on_wire": FIG2_KEY + 6,
        "curves": curves,
        "hops": {"fpe_bytes": fpe, "capacity_pairs": c, "keys": n_h, "pairs": m_h, "by_distribution": by_dist},
        "reduction_fits": fits[-1]["measured"] if fits else None,
        "reduction_10x_memory": over[0]["measured"] if over else None,
        "hops_uniform_spread": max(uni) - min(uni),
        "all_correct": all(p["correct"] for cur in curves for p in cur["points"]) and all(r["correct"] for rows in by_dist.values() for r in rows),
        "max_abs_gap_to_formula3": max(abs(p["measured"] - p["formula3"]) for cur in curves for p in cur["points"]),
    }


def plot_fig2(result: dict[str, Any], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for i, cur in enumerate(result["curves"]):
        xs = [p["keys"] for p in cur["points"]]
        color = f"C{i}"
        a.plot(xs, [p["measured"] for p in cur["points"]], "o-", color=color, label=f"measured, FPE {cur['fpe_bytes'] >> 10} KB (C={cur['capacity_pairs']})")
        fx = np.logspace(np.log10(min(xs)), np.log10(max(xs)), 200)
        a.plot(fx, [formula3(x, result["pairs"], cur["capacity_pairs"]) for x in fx], "--", color=color, label="formula (3)")
    a.set_xscale("log")
    a.set_xlabel("key variety N")
    a.set_ylabel("reduction ratio")
    a.set_title(f"(a) {result['pairs']} uniform pairs of {result['pair_bytes_on_wire']} B")
    a.legend(fontsize=7)
    h = result["hops"]
    for dist, rows in h["by_distribution"].items():
        b.plot([r["hops"] for r in rows], [r["measured"] for r in rows], "o-", label=dist)
    b.set_xlabel("aggregation hops")
    b.set_xticks([r["hops"] for r in next(iter(h["by_distribution"].values()))])
    b.set_ylabel("reduction ratio")
    b.set_ylim(0, 1)
    b.set_title(f"(b) {h['keys']} keys, C={h['capacity_pairs']} per switch (Theorem 2.2)")
    b.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)


# ---- Fig. 9 ---------------------------------------------------------------------------------


def run_fig9(quick: bool, progress: Progress) -> dict[str, Any]:
    # Paper: key variety fixed, workloads 2-16 GB, FPE 4-32 MB, M-32MB with the BPE.
    n_keys = 5_000 if quick else 100_000
    multiples = [2, 4] if quick else [2, 4, 8, 16]
    fpes = [1 << 10, 4 << 10] if quick else [16 << 10, 32 << 10, 64 << 10, 128 << 10]
    bpe = 2 << 20 if quick else 64 << 20
    table = key_table(n_keys, (16, 64))
    series: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for dist, z in (("uniform", None), ("zipf0.99", 0.99)):
        series[dist] = {}
        configs = [(f"S-{f >> 10}KB", f, 0) for f in fpes] + [(f"M-{fpes[-1] >> 10}KB", fpes[-1], bpe)]
        for label, f, b in configs:
            rows = []
            for k in multiples:
                progress(f"fig9: {dist}, {label}, workload {k}x keys")
                ids = sample(n_keys, k * n_keys, z, seed=k)
                r = run_job(table, ids, mappers=3, fpe_bytes=f, bpe_bytes=b)
                rows.append(
                    {
                        "workload_pairs": k * n_keys,
                        "distinct_keys": r["distinct_keys"],
                        "reduction_ratio": r["reduction_ratio"],
                        # What aggregating every key once would give (pair bytes vary, so approximate).
                        "bound_every_key_once": 1.0 - r["distinct_keys"] / (k * n_keys),
                        "correct": r["correct"],
                        "fpe_evictions": r["fpe_evictions"],
                        "bpe_evictions": r["bpe_evictions"],
                    }
                )
            series[dist][label] = rows
    big = f"S-{fpes[-1] >> 10}KB"
    m = f"M-{fpes[-1] >> 10}KB"
    return {
        "keys": n_keys,
        "key_lengths": [16, 64],
        "fpe_bytes": fpes,
        "bpe_bytes": bpe,
        "scale_note": "memory and key variety scaled down ~250x from the paper; key variety / FPE capacity kept in the paper's range",
        "series": series,
        "uniform_single_level_max": max(r["reduction_ratio"] for lab, rows in series["uniform"].items() if lab.startswith("S-") for r in rows),
        "uniform_largest_fpe": max(r["reduction_ratio"] for r in series["uniform"][big]),
        "zipf_multi_level_max": max(r["reduction_ratio"] for r in series["zipf0.99"][m]),
        "uniform_multi_level_max": max(r["reduction_ratio"] for r in series["uniform"][m]),
        # Every key kept somewhere: the best any aggregation can do is 1 - distinct keys/pairs.
        "zipf_bound_every_key_once": max(r["bound_every_key_once"] for r in series["zipf0.99"][m]),
        "uniform_bound_every_key_once": max(r["bound_every_key_once"] for r in series["uniform"][m]),
        "all_correct": all(r["correct"] for d in series.values() for rows in d.values() for r in rows),
    }


def plot_fig9(result: dict[str, Any], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, (dist, ser) in zip(axes, result["series"].items()):
        labels = list(ser)
        ks = [r["workload_pairs"] for r in ser[labels[0]]]
        width = 0.8 / len(labels)
        for i, lab in enumerate(labels):
            ax.bar(np.arange(len(ks)) + i * width, [r["reduction_ratio"] for r in ser[lab]], width, label=lab)
        ax.set_xticks(np.arange(len(ks)) + 0.4 - width / 2)
        ax.set_xticklabels([f"{k // result['keys']}x" for k in ks])
        ax.set_xlabel(f"workload (pairs / {result['keys']} keys)")
        ax.set_title(dist)
    axes[0].set_ylabel("reduction ratio")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)


# ---- Table 2 --------------------------------------------------------------------------------


def run_table2(quick: bool, progress: Progress) -> dict[str, Any]:
    from inswitch import _native

    n_keys = 5_000 if quick else 200_000
    sizes = [20_000, 40_000] if quick else [250_000, 500_000, 1_000_000, 2_000_000]
    table = key_table(n_keys, (16, 64))
    rows = []
    for m in sizes:
        progress(f"table2: {m} pairs at line rate")
        ids = sample(n_keys, m, 0.99, seed=m)
        keys, offs = gather(table, ids)
        vals = np.ones(m, dtype=np.uint32).tobytes()
        r = dict(_native.switchagg_line_rate(keys, offs, vals, ports=3, load=1.0, fpe_bytes=4 << 20, bpe_bytes=256 << 20))
        r["pairs"] = m
        rows.append(r)
    loads = []
    ids = sample(n_keys, sizes[0], 0.99, seed=3)
    keys, offs = gather(table, ids)
    vals = np.ones(sizes[0], dtype=np.uint32).tobytes()
    for load in (0.25, 0.5, 0.75, 1.0):
        progress(f"table2: offered load {load}")
        r = dict(_native.switchagg_line_rate(keys, offs, vals, ports=3, load=load, fpe_bytes=4 << 20, bpe_bytes=256 << 20))
        r["load"] = load
        loads.append(r)
    # The software model's own rate on the same pairs (aggregation only, one core).
    progress("table2: software model rate")
    sw_pairs, sw_secs, sw_rate = _native.switchagg_bench(keys, offs, vals, mappers=3, fpe_bytes=4 << 20, bpe_bytes=256 << 20, duration=0.5 if quick else 2.0)
    sw_gbps = sw_rate * loads[-1]["mapper_bytes_per_pair"] * 8 / 1e9
    # Beyond the design: 8-byte keys all in one group overrun its FPE.
    small = key_table(n_keys, (4, 8), seed=9)
    keys, offs = gather(small, ids)
    stress = dict(_native.switchagg_line_rate(keys, offs, vals, ports=3, load=1.0, fpe_bytes=4 << 20, bpe_bytes=256 << 20))
    return {
        "keys": n_keys,
        "key_lengths": [16, 64],
        "ports": 3,
        "port_gbps": 10,
        "rows": rows,
        "loads": loads,
        "stress_short_keys": stress,
        "max_full_ratio": max(r["full_ratio"] for r in rows),
        "software_pairs_per_s": sw_rate,
        "software_gbps": sw_gbps,
        "software_bench": {"pairs": sw_pairs, "seconds": sw_secs},
        "all_correct": all(r["correct"] for r in rows + loads),
    }


def plot_table2(result: dict[str, Any], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    loads = result["loads"]
    a.plot([r["offered_gbps"] for r in loads], [r["processed_gbps"] for r in loads], "o-", label="FPGA model (Table 3 cycles)")
    a.axhline(result["software_gbps"], color="C1", ls="--", label="software model, measured")
    top = max(r["offered_gbps"] for r in loads)
    a.plot([0, top], [0, top], ":", color="grey", label="processed = offered")
    a.set_xlabel("offered load, Gbit/s (3 x 10G ports)")
    a.set_ylabel("processed, Gbit/s")
    a.legend(fontsize=8)
    rows = result["rows"]
    paper = [0.044, 0.032, 0.028, 0.042]  # Table 2, 2-16 GB workloads
    x = np.arange(len(rows))
    ours = [100 * r["full_ratio"] for r in rows]
    b.bar(x - 0.2, paper[: len(rows)], 0.4, label="paper (2, 4, 8, 16 GB)")
    b.bar(x + 0.2, ours, 0.4, label="ours (FPGA cycle model)")
    for i, v in enumerate(ours):
        b.annotate(f"{v:.3g} %", (x[i] + 0.2, v), ha="center", va="bottom", fontsize=8)
    b.set_xticks(x)
    b.set_xticklabels([str(r["pairs"]) for r in rows])
    b.set_xlabel("pairs (workload)")
    b.set_ylabel("FIFO-full writes, %")
    st = result["stress_short_keys"]
    b.set_title(f"8-byte keys in one group: {100 * st['full_ratio']:.1f} % full", fontsize=9)
    b.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)



# ---- Figs. 10 and 11 ---------------------------------------------------------------------------
#
# §6.3: WordCount, 3 mappers and one reducer, Zipf 0.99 words, key variety fixed and the
# workload 2x to 16x of it, with and without SwitchAgg. Here the real job
# (`inswitch wordcount --program switchagg`): mapper and reducer processes in a rack of
# network namespaces around the switch process running forward + switchagg, checked against
# a Counter. "Without" is the usual TCP shuffle (and the same UDP protocol with the switch
# only forwarding). The mappers send every pair (no local combiner: the paper's mappers
# generate key-value pairs and the switch aggregates them). Job time is wall time on this shared 2-core machine; CPU utilisation is
# the reducer processes' CPU time (getrusage) over the job time.


def _fig10_11_config(quick: bool) -> dict[str, Any]:
    if quick:
        return {"mappers": 3, "reducers": 1, "vocab": 2_000, "multiples": [8]}
    return {"mappers": 3, "reducers": 1, "vocab": 50_000, "multiples": [2, 4, 8, 16]}


def run_fig10_11(quick: bool, progress: Progress) -> dict[str, Any]:
    from inswitch.apps.wordcount.job import JobError, JobSpec, run as run_wc
    from inswitch.topology.state import process_tag

    cfg = _fig10_11_config(quick)
    rows = []
    for k in cfg["multiples"]:
        words = k * cfg["vocab"]
        spec = JobSpec(zipf=0.99, words=words, vocab=cfg["vocab"], seed=k, mappers=cfg["mappers"], reducers=cfg["reducers"],
                       program="switchagg", combiner=False, rack=f"sax{process_tag()}", where="netns", timeout_s=300)
        try:
            doc = run_wc(spec, ["tcp", "switch"], lambda s, k=k: progress(f"workload {k}x keys: {s}"))
        except JobError as e:
            raise RuntimeError(f"switchagg-fig10-11: {e}") from None
        row: dict[str, Any] = {"multiple": k, "words": words, "correct": doc["correct"]}
        for m, run in doc["runs"].items():
            job_s = float(run["job_s"]) or 1e-9
            row[m] = {
                "job_s": run["job_s"],
                "reducer_cpu_s": run["reducer_cpu_s"],
                "reducer_cpu_utilisation": run["reducer_cpu_s"] / (job_s * cfg["reducers"]),
                "reducer_pairs": run["reducer_pairs"],
                "mapper_pairs": run["mapper_pairs"],
                "fallback": run["fallback"],
            }
        row["job_time_switch_over_tcp"] = row["switch"]["job_s"] / max(row["tcp"]["job_s"], 1e-9)
        row["reducer_cpu_switch_over_tcp"] = row["switch"]["reducer_cpu_s"] / max(row["tcp"]["reducer_cpu_s"], 1e-9)
        row["pair_reduction"] = 1.0 - row["switch"]["reducer_pairs"] / max(row["switch"]["mapper_pairs"], 1)
        rows.append(row)
    last = rows[-1]
    return {
        "config": cfg,
        "rows": rows,
        "job_time_switch_over_tcp_largest": last["job_time_switch_over_tcp"],
        "reducer_cpu_switch_over_tcp_largest": last["reducer_cpu_switch_over_tcp"],
        "pair_reduction_largest": last["pair_reduction"],
        "all_correct": all(r["correct"] for r in rows),
        "any_fallback": any(r["switch"]["fallback"] for r in rows),
        "paper": "Fig. 10: at 16 GB the completion time falls by more than 50 %; Fig. 11: the higher the reduction, the lower the CPU utilisation",
        "scale_note": "workload / key variety 2x-16x as the paper (2-16 GB over 1 GB of keys), in words, not gigabytes",
    }


def plot_fig10_11(result: dict[str, Any], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    x = np.arange(len(rows))
    modes = [m for m in ("tcp", "udp", "switch") if m in rows[0]]
    label = {"tcp": "without (TCP shuffle)", "udp": "without (UDP, switch forwards)", "switch": "with SwitchAgg"}
    w = 0.8 / len(modes)
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    for i, m in enumerate(modes):
        a.bar(x + i * w, [r[m]["job_s"] for r in rows], w, label=label[m])
        b.bar(x + i * w, [100 * r[m]["reducer_cpu_utilisation"] for r in rows], w, label=label[m])
    for ax in (a, b):
        ax.set_xticks(x + 0.4 - w / 2, [f"{r['multiple']}x" for r in rows])
        ax.set_xlabel(f"workload (words / {result['config']['vocab']} distinct)")
    a.set_ylabel("job completion time (s, wall)")
    a.set_title("Fig. 10 (paper: > 50 % less at 16x)", fontsize=9)
    b.set_ylabel("reducer CPU utilisation, %")
    b.set_title("Fig. 11 (paper: lower with more reduction)", fontsize=9)
    a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)


EXPERIMENTS = [
    Experiment(
        name="switchagg-fig2",
        paper="SwitchAgg",
        figure="Fig. 2",
        description="reduction ratio vs key variety for several memory sizes beside formula (3); and vs hops (Theorem 2.2)",
        run=run_fig2,
        plot=plot_fig2,
        numbers=[
            PaperNumber("reduction when the memory holds every key", "> 80 %", "reduction_fits", scale=100),
            PaperNumber("reduction at key variety 10x the memory", "< 10 %", "reduction_10x_memory", scale=100),
            PaperNumber("largest gap measured vs formula (3)", "(model)", "max_abs_gap_to_formula3"),
            PaperNumber("uniform data: reduction spread over 1-4 hops", "~0 (Theorem 2.2)", "hops_uniform_spread"),
            PaperNumber("reducer result equals a Counter", "-", "all_correct"),
        ],
    ),
    Experiment(
        name="switchagg-fig9",
        paper="SwitchAgg",
        figure="Fig. 9",
        description="reduction ratio, uniform vs Zipf 0.99 keys, FPE memory sizes, with and without the back-end engine",
        run=run_fig9,
        plot=plot_fig9,
        numbers=[
            PaperNumber("uniform, FPE only (4-16 MB)", "< 5 %", "uniform_single_level_max", scale=100),
            PaperNumber("uniform, largest FPE (32 MB)", "< 10 %", "uniform_largest_fpe", scale=100),
            PaperNumber("Zipf 0.99 with the BPE (M-32MB)", "99 % or higher", "zipf_multi_level_max", scale=100),
            PaperNumber("Zipf: bound 1 - distinct keys/pairs (our largest workload)", "-", "zipf_bound_every_key_once"),
            PaperNumber("uniform with the BPE", "rising", "uniform_multi_level_max"),
            PaperNumber("uniform: bound 1 - distinct keys/pairs", "-", "uniform_bound_every_key_once"),
            PaperNumber("reducer result equals a Counter", "-", "all_correct"),
        ],
    ),
    Experiment(
        name="switchagg-table2",
        paper="SwitchAgg",
        figure="Table 2",
        description="the engines keep up with the ports: FIFO-full ratio at line rate (FPGA cycle model) and the software model's measured rate",
        run=run_table2,
        plot=plot_table2,
        numbers=[
            PaperNumber("FIFO-full time ratio at line rate", "0.028-0.044 %", "max_full_ratio", scale=100),
            PaperNumber("software model, pairs/s (one core)", "-", "software_pairs_per_s"),
            PaperNumber("software model, Gbit/s of mapper traffic", "(FPGA: 4 x 10G)", "software_gbps"),
            PaperNumber("reducer result equals a Counter", "-", "all_correct"),
        ],
    ),
    Experiment(
        name="switchagg-fig10-11",
        paper="SwitchAgg",
        figure="Figs. 10-11",
        description="WordCount job completion time and reducer CPU utilisation with and without SwitchAgg (real processes in a rack)",
        run=run_fig10_11,
        plot=plot_fig10_11,
        numbers=[
            PaperNumber("job time with / without (TCP), largest workload", "< 0.5 (16 GB)", "job_time_switch_over_tcp_largest"),
            PaperNumber("reducer CPU with / without (TCP), largest workload", "lower (no value given)", "reducer_cpu_switch_over_tcp_largest"),
            PaperNumber("pairs removed by the switch, largest workload", "-", "pair_reduction_largest"),
            PaperNumber("reducer result equals a Counter", "-", "all_correct"),
        ],
        needs_root=True,
    ),
]
