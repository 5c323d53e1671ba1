"""The distributed search of NetSHa §3, §5: S servers each index a part of the dataset, an
agent selects servers per query, servers answer with candidates and distances in NetSHa
packets, the agent merges them into the top K.

Modes, all in one invocation over the same data and queries:
- `layered`: E2LSH exact-bucket servers (Layered-LSH style), the switch only forwards,
  server selection in software on the agent;
- `tlsh`: TLSH-style ternary servers, the switch only forwards, selection in software;
- `netsha`: TLSH-style servers, every switch on the path runs `programs::netsha`
  (reduction and aggregation); server selection in the switch (§4): the agent sends each
  query as a query packet (QID, its L bucket keys, the vector) and the servers' switch
  looks the keys up in its L selection tables (installed by `controller.py` from the
  servers' bucket directories) and multicasts the query to the servers selected; the
  servers that receive it answer;
- `netsha-agg`: as `netsha` with reduction off (Fig. 16 "Baseline+agg").

The network is the switch model in memory on virtual time (`_native.NetshaPath`); its
time in the split below is the wall time of the switch model processing the packets on
this machine, not of a wire.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Optional

import numpy as np

from inswitch import _native

from .controller import install_selection, table_size
from .datasets import Dataset, exact_knn
from .lsh import E2LshIndex, HashFamily, TernaryIndex, local_answers

MODES = ("netsha", "layered", "tlsh")
ALL_MODES = ("netsha", "netsha-agg", "layered", "tlsh")

#: The switch configurations (issue 19): `tofino1`, the default, is what fits a Tofino 1
#: (the `netsha` program: 6 slots, p = 4, a 256-byte parse, two condition units);
#: `unbounded` is Table 1 as the paper gives it (`netsha-unbounded`: 12 slots, p = 8, a
#: 1,514-byte parse, four condition units), which does not fit.
SWITCH_CONFIGS: dict[str, dict[str, int]] = {
    "tofino1": {"slots": 6, "ga": 4, "conds": 2, "depth": 256},
    "unbounded": {"slots": 12, "ga": 8, "conds": 4, "depth": 1514},
}
#: The program each configuration is built as (the rack loads programs by name).
SWITCH_PROGRAMS = {"tofino1": "netsha", "unbounded": "netsha-unbounded"}
#: How outputs (JSON, tables, plots) name a configuration.
SWITCH_LABELS = {"tofino1": "tofino1", "unbounded": "unbounded (does not fit tofino1)"}


@dataclass
class SearchConfig:
    servers: int = 4
    k: int = 50
    registers: int = 100
    #: Candidate registers per query for Algorithm 2 (1 or 2; must divide `registers`).
    ways: int = 2
    #: Condition units of the stateful ALU the program is built for (4: Tofino 2, 2: Tofino 1).
    conds: int = 2
    slots: int = 6
    ga: int = 4
    #: Parse depth of the switch (bytes): the longest answer packet it reduces.
    depth: int = 256
    #: Which of SWITCH_CONFIGS the switch parameters came from (`search_config`).
    switch_config: str = "tofino1"
    #: Phase 2 lowers r.T every ceil(K / n) full sends (issue 19); False: r.T stays the
    #: worst of the first K answers sent, as in Algorithm 1.
    tighten: bool = True
    lam: float = 0.2
    switches: int = 1
    reduction: str = "exact"
    #: LSH: tables, hashes per table, bucket width, ternary margin.
    tables: int = 10
    hashes: int = 6
    width: float = 32.0
    delta: float = 0.1
    #: Answers a server returns per query (its best candidates).
    cap: int = 100
    #: Queries in flight together (sent as one wave).
    concurrency: int = 25
    #: Answers per server packet (0: as many as the switch can reduce, at most 120).
    per_packet: int = 0
    #: Register timer (µs) and timer packet period (ns).
    timeout_us: int = 100
    period_ns: int = 500
    #: Virtual time between two servers' sends (ns): a wave of S servers takes S × gap.
    send_gap_ns: int = 20_000
    #: How the servers' answers of a wave reach the switch: `concurrent` (every server
    #: answers in parallel, as the paper's 24 server VMs do; their packets interleave in the
    #: switch) or `sequential` (one server after another).
    arrival: str = "concurrent"
    seed: int = 0
    #: `arrival="stream"` (Figs. 20, 23): queries arrive one after another, this many ns
    #: apart (the query rate); each query's servers answer together on its arrival. A
    #: register stays held until its timer, so with gap × registers < timeout more queries
    #: are in flight than registers, the regime replacement and λ are for (§3.5, §3.6).
    query_gap_ns: int = 250
    #: `--rack` loss recovery: asks through the switch of a query found incomplete before
    #: the agent asks its servers directly (0: directly at once).
    recovery_rounds: int = 3

    def spec(self, reduction: Optional[str] = None, select_size: int = 4096) -> str:
        return (
            f"netsha:registers={self.registers},ways={self.ways},slots={self.slots},ga={self.ga},k={self.k},lambda={self.lam},"
            f"reduction={reduction or self.reduction},timeout_us={self.timeout_us},period_ns={self.period_ns},"
            f"tables={self.tables},select_size={select_size},conds={self.conds},depth={self.depth},tighten={int(self.tighten)}"
        )

    def fits_tofino1(self) -> bool:
        return bool(_native_resources([self.spec(select_size=4096)], "tofino1")["fits"])

    def switch_label(self) -> str:
        """`tofino1`, or the unbounded label whenever the parameters do not fit tofino1."""
        return SWITCH_LABELS["tofino1"] if self.fits_tofino1() else SWITCH_LABELS["unbounded"]


def _native_resources(programs: list[str], target: str) -> dict[str, Any]:
    from inswitch.native import resources

    return resources(programs, target)


def search_config(switch_config: str = "tofino1", **over: Any) -> SearchConfig:
    """A SearchConfig whose switch parameters are `switch_config`'s unless given in `over`."""
    if switch_config not in SWITCH_CONFIGS:
        raise ValueError(f"switch configuration must be one of {', '.join(SWITCH_CONFIGS)}, not {switch_config}")
    base = {k: v for k, v in SWITCH_CONFIGS[switch_config].items() if over.get(k) is None}
    return SearchConfig(switch_config=switch_config, **base, **{k: v for k, v in over.items() if v is not None})


@dataclass
class Cluster:
    """The servers' indexes for one server-side method."""

    fam: HashFamily
    indexes: list[Any]
    #: (table, bucket key) -> bitmap of servers holding that bucket: the selection table.
    selection: dict[tuple[int, int], int] = field(default_factory=dict)
    per_server_keys: list[list[set[int]]] = field(default_factory=list)


def build_cluster(ds: Dataset, cfg: SearchConfig, ternary: bool) -> Cluster:
    fam = HashFamily(ds.base.shape[1], cfg.tables, cfg.hashes, cfg.width, cfg.seed)
    parts = np.array_split(np.arange(ds.base.shape[0]), cfg.servers)
    indexes: list[Any] = []
    for p in parts:
        data = ds.base[p]
        idx = TernaryIndex(fam, data, p, cfg.delta) if ternary else E2LshIndex(fam, data, p)
        indexes.append(idx)
    c = Cluster(fam, indexes)
    for s, idx in enumerate(indexes):
        keys = idx.bucket_keys
        c.per_server_keys.append([set(np.unique(keys[:, t]).tolist()) for t in range(cfg.tables)])
        for t in range(cfg.tables):
            for key in np.unique(keys[:, t]).tolist():
                c.selection[(t, key)] = c.selection.get((t, key), 0) | (1 << s)
    return c


def select_software(c: Cluster, qkeys: np.ndarray) -> list[int]:
    """The agent asks every server's bucket directory (Layered-LSH, TLSH)."""
    out = [s for s, tabs in enumerate(c.per_server_keys) if any(int(k) in tabs[t] for t, k in enumerate(qkeys))]
    return out or list(range(len(c.indexes)))


def select_table(c: Cluster, qkeys: np.ndarray) -> list[int]:
    """One exact-match lookup per hash table giving a server bitmap (NetSHa §4)."""
    bits = 0
    for t, k in enumerate(qkeys):
        bits |= c.selection.get((t, int(k)), 0)
    if bits == 0:
        return list(range(len(c.indexes)))
    return [s for s in range(len(c.indexes)) if bits >> s & 1]


def recall_f1(got_ids: list[np.ndarray], got_d: list[np.ndarray], true_ids: np.ndarray, true_d: np.ndarray, k: int) -> tuple[float, float]:
    """Recall@K as ann-benchmarks defines it (returned answers within the K-th true distance
    + 1e-3, over K), and F1 as the paper (precision over the answers returned, recall over
    the true K)."""
    rec, f1 = [], []
    for g_ids, g_d, t_ids, t_d in zip(got_ids, got_d, true_ids, true_d):
        thr = t_d[k - 1] + 1e-3
        rec.append(min(np.count_nonzero(g_d[:k] <= thr), k) / k)
        hit = len(np.intersect1d(g_ids[:k], t_ids[:k]))
        p = hit / max(len(g_ids[:k]), 1)
        r = hit / k
        f1.append(0.0 if hit == 0 else 2 * p * r / (p + r))
    return float(np.mean(rec)), float(np.mean(f1))


def top_k_per_query(nq: int, qids: np.ndarray, ids: np.ndarray, dists: np.ndarray, k: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The agent's merge: per query, the K smallest distances (vectorised sort)."""
    order = np.lexsort((ids, dists, qids))
    qids, ids, dists = qids[order], ids[order], dists[order]
    starts = np.searchsorted(qids, np.arange(nq), side="left")
    ends = np.searchsorted(qids, np.arange(nq), side="right")
    out_i, out_d = [], []
    for s, e in zip(starts, ends):
        # Duplicates (an answer reaching the agent twice) count once.
        u_ids, first = np.unique(ids[s:e], return_index=True)
        keep = np.sort(first)[:k] if len(first) > k else np.sort(first)
        sel = s + keep
        o = np.argsort(dists[sel], kind="stable")[:k]
        out_i.append(ids[sel][o])
        out_d.append(dists[sel][o])
    return out_i, out_d


def _send_stream(path: Any, cfg: SearchConfig, per_server: list[list[tuple[int, np.ndarray, np.ndarray]]], wave: range, w0: int, per_packet: int, now: int) -> int:
    """`arrival="stream"`: query q of the wave reaches the switch at now + (q − w0) × gap,
    all its servers' packets together; timers run in between. Returns the switch's time."""
    by_q: dict[int, list[tuple[int, np.ndarray, np.ndarray]]] = {}
    for s in range(cfg.servers):
        for q, i, d in per_server[s]:
            by_q.setdefault(q, []).append((s, i, d))
    gap = max(cfg.query_gap_ns, 1)
    step = max(min(cfg.period_ns, gap), 1)
    t = now
    for q in wave:
        at = now + (q - w0) * gap
        if at > t:
            t = path.settle(t, at, step)
        parts = by_q.get(q)
        if not parts:
            continue
        sv = np.concatenate([np.full(len(i), s, dtype=np.uint32) for s, i, _ in parts])
        ids = np.concatenate([i for _, i, _ in parts]).astype(np.uint32)
        d = np.concatenate([d for _, _, d in parts]).astype(np.float64)
        qs = np.full(len(ids), q, dtype=np.uint32)
        path.send_concurrent(sv.tobytes(), qs.tobytes(), ids.tobytes(), d.tobytes(), per_packet, max(t, at))
    end = now + len(wave) * gap
    if end > t:
        t = path.settle(t, end, step)
    return max(t, end)


def run_mode(
    mode: str,
    ds: Dataset,
    cfg: SearchConfig,
    cluster: Cluster,
    truth: tuple[np.ndarray, np.ndarray],
    progress: Optional[Callable[[int], None]] = None,
    keep_topk: bool = False,
) -> dict[str, Any]:
    netsha = mode.startswith("netsha")
    if netsha:
        spec = cfg.spec("off" if mode == "netsha-agg" else None, table_size(cluster.selection, cfg.tables))
        hops: list[Optional[str]] = [spec] * cfg.switches
    else:
        hops = [None] * cfg.switches
    # The same packets from the servers in every mode.
    per_packet = min(_native.netsha_answers_per_packet(cfg.spec()), 120)
    if cfg.per_packet:
        per_packet = min(per_packet, cfg.per_packet)
    path = _native.NetshaPath(hops, cfg.servers)
    if netsha:
        install_selection(path, cluster.selection)
    nq = ds.queries.shape[0]
    t_sel = t_search = t_net = t_agent = 0.0
    qproj = cluster.fam.project(ds.queries)
    qkeys = cluster.fam.keys(qproj)
    qvec = np.ascontiguousarray(ds.queries, dtype="<f4")
    dim = int(qvec.shape[1])
    switch_selected: list[list[int]] = []
    parts_q: list[np.ndarray] = []
    parts_i: list[np.ndarray] = []
    parts_d: list[np.ndarray] = []
    frames = 0
    # Packets the servers would send at 120 answers each (§3.3's full packet), whatever the
    # switch parses: what a forwarding-only mode's agent would receive from servers not
    # held to the NetSHa switch's parse depth.
    full_packets = 0
    now = 1_000
    for w0 in range(0, nq, cfg.concurrency):
        wave = range(w0, min(nq, w0 + cfg.concurrency))
        per_server: list[list[tuple[int, np.ndarray, np.ndarray]]] = [[] for _ in range(cfg.servers)]
        if netsha:
            # The wave's query packets through the switch's selection tables (§4).
            t0 = time.perf_counter()
            qs = np.arange(wave.start, wave.stop, dtype="<u4")
            bits = np.frombuffer(path.select(qs.tobytes(), qkeys[wave.start : wave.stop].astype("<i8").tobytes(), qvec[wave.start : wave.stop].tobytes(), cfg.tables, dim, now), dtype="<u4")
            t_sel += time.perf_counter() - t0
        for q in wave:
            if netsha:
                b = int(bits[q - wave.start])
                chosen = [s for s in range(cfg.servers) if b >> s & 1]
                switch_selected.append(chosen)
            else:
                t0 = time.perf_counter()
                chosen = select_software(cluster, qkeys[q])
                t_sel += time.perf_counter() - t0
            worst = 0.0
            for s in chosen:
                a = time.perf_counter()
                ids, d = local_answers(cluster.indexes[s], ds.queries[q], qkeys[q], qproj[q], cfg.cap)
                worst = max(worst, time.perf_counter() - a)
                if ids.size:
                    per_server[s].append((q, ids, d))
                    full_packets += -(-int(ids.size) // 120)
            t_search += worst
        t0 = time.perf_counter()
        if cfg.arrival == "stream":
            now = _send_stream(path, cfg, per_server, wave, w0, per_packet, now)
        elif cfg.arrival == "concurrent":
            flat = [(s, q, i, d) for s in range(cfg.servers) for q, i, d in per_server[s]]
            if flat:
                sv = np.concatenate([np.full(len(i), s, dtype=np.uint32) for s, _, i, _ in flat])
                qs = np.concatenate([np.full(len(i), q, dtype=np.uint32) for _, q, i, _ in flat])
                ids = np.concatenate([i for _, _, i, _ in flat]).astype(np.uint32)
                d = np.concatenate([d for _, _, _, d in flat]).astype(np.float64)
                path.send_concurrent(sv.tobytes(), qs.tobytes(), ids.tobytes(), d.tobytes(), per_packet, now)
            span = cfg.servers * cfg.send_gap_ns
            path.settle(now, now + span, max(cfg.period_ns, 1))
            now += span
        for s in range(cfg.servers) if cfg.arrival == "sequential" else ():
            if not per_server[s]:
                continue
            qs = np.concatenate([np.full(len(i), q, dtype=np.uint32) for q, i, _ in per_server[s]])
            ids = np.concatenate([i for _, i, _ in per_server[s]]).astype(np.uint32)
            d = np.concatenate([d for _, _, d in per_server[s]]).astype(np.float64)
            path.send(s, qs.tobytes(), ids.tobytes(), d.tobytes(), per_packet, now)
            # Timers run while the servers send (one timer packet per period).
            path.settle(now, now + cfg.send_gap_ns, max(cfg.period_ns, 1))
            now += cfg.send_gap_ns
        t_net += time.perf_counter() - t0
        t0 = time.perf_counter()
        f, bq, bi, bd = path.take_agent()
        frames += f
        parts_q.append(np.frombuffer(bq, dtype="<u4"))
        parts_i.append(np.frombuffer(bi, dtype="<u4"))
        parts_d.append(np.frombuffer(bd, dtype="<f8"))
        t_agent += time.perf_counter() - t0
        if progress:
            progress(len(wave))
    # Registers still holding answers are flushed by their timers.
    t0 = time.perf_counter()
    horizon = cfg.switches * (cfg.timeout_us * 1_000 + 2 * cfg.registers * cfg.period_ns) + 10_000
    path.settle(now, now + horizon, max(cfg.period_ns, 1))
    t_net += time.perf_counter() - t0
    t0 = time.perf_counter()
    f, bq, bi, bd = path.take_agent()
    frames += f
    parts_q.append(np.frombuffer(bq, dtype="<u4"))
    parts_i.append(np.frombuffer(bi, dtype="<u4"))
    parts_d.append(np.frombuffer(bd, dtype="<f8"))
    qids = np.concatenate(parts_q).astype(np.int64)
    ids = np.concatenate(parts_i).astype(np.int64)
    dists = np.concatenate(parts_d)
    got_i, got_d = top_k_per_query(nq, qids, ids, dists, cfg.k)
    t_agent += time.perf_counter() - t0
    rec, f1 = recall_f1(got_i, got_d, truth[0], truth[1], cfg.k)
    total = t_sel + t_search + t_net + t_agent
    split = {"selection": t_sel, "search": t_search, "network": t_net, "agent": t_agent}
    counters = {f"switch{h}": dict(path.counters(h)) for h in range(cfg.switches)} if netsha else {}
    extra: dict[str, Any] = {"topk_distances": got_d, "switch_selected": switch_selected} if keep_topk else {}
    return {
        **extra,
        "recall": rec,
        "f1": f1,
        "agent_packets": int(frames),
        "agent_answers": int(len(qids)),
        "total_s": total,
        "time_split_pct": {k: 100.0 * v / total if total else 0.0 for k, v in split.items()},
        "time_per_query_us": {k: 1e6 * v / max(nq, 1) for k, v in split.items()},
        "answers_per_packet": per_packet,
        "server_packets_at_120_answers": full_packets,
        "server_selection": "switch (query packets, selection tables)" if netsha else "software (agent)",
        "switch_counters": counters,
        "path": "in-memory switch model (_native.NetshaPath), virtual time",
    }


def run_search(
    ds: Dataset,
    cfg: SearchConfig,
    modes: list[str],
    progress: Optional[Callable[[str, int], None]] = None,
    keep_topk: bool = False,
) -> dict[str, Any]:
    """Every mode over the same data and queries; the JSON the CLI writes (with
    `keep_topk`, also each mode's per-query top-K distances, for tests)."""
    truth = exact_knn(ds.base, ds.queries, cfg.k)
    clusters: dict[bool, Cluster] = {}
    out: dict[str, Any] = {
        "dataset": ds.name,
        "base": int(ds.base.shape[0]),
        "queries": int(ds.queries.shape[0]),
        "dim": int(ds.base.shape[1]),
        "config": asdict(cfg),
        "switch": cfg.switch_label(),
        "modes": {},
    }
    for mode in modes:
        ternary = mode != "layered"
        if ternary not in clusters:
            clusters[ternary] = build_cluster(ds, cfg, ternary)
        cb = (lambda n, m=mode: progress(m, n)) if progress else None
        out["modes"][mode] = run_mode(mode, ds, cfg, clusters[ternary], truth, cb, keep_topk)
    m = out["modes"]
    if "netsha" in m and "layered" in m and m["layered"]["agent_packets"]:
        out["agent_packets_ratio"] = m["netsha"]["agent_packets"] / m["layered"]["agent_packets"]
        # Layered's switch only forwards, so its servers need not fit NetSHa's parse depth:
        # against its full 120-answer packets (the paper's Fig. 12 baseline).
        out["agent_packets_ratio_layered_full"] = m["netsha"]["agent_packets"] / max(m["layered"]["server_packets_at_120_answers"], 1)
    return out
