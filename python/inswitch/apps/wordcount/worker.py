"""The mapper and reducer processes: `python -m inswitch.apps.wordcount.worker SPEC.json`.

Each is an ordinary process (in a rack host's network namespace, or on loopback) that reads
its job from a JSON spec written by the job runner and prints one JSON line of statistics
at the end; a reducer also writes its (word, count) result to an .npz file for the runner
to check against the reference.
"""

from __future__ import annotations

import itertools
import json
import resource
import sys
import time
# np.savez imports zipfile on first use: at the end of the reducer's measured work.
import zipfile  # noqa: F401
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np

from inswitch import keys as keyset
from inswitch.apps.wordcount import spool, transport, words
from inswitch.apps.wordcount.spool import Spools
from inswitch.apps.wordcount.transport import Pairs


#: Words tokenised and packed at a time without a combiner.
MAP_CHUNK = 1 << 16


def _partition(items: Iterable[tuple[bytes, int]], R: int) -> list[Pairs]:
    """Combined (key, count) items, one `Pairs` per reducer."""
    parts: list[list[tuple[bytes, int]]] = [[] for _ in range(R)]
    for k, n in items:
        parts[words.reducer_of(k, R)].append((k, n))
    return [Pairs.from_items(p) for p in parts]


def _partition_chunks(chunks: Iterable[tuple[Pairs, np.ndarray]], R: int) -> list[Pairs]:
    """Pairs that arrive in chunks, each with its pairs' reducers: one `Pairs` per reducer,
    in input order."""
    per: list[list[Pairs]] = [[] for _ in range(R)]
    for p, reducer in chunks:
        for r in range(R):
            per[r].append(p.select(reducer == r))
    return [Pairs.concat(c) for c in per]


def _text_chunks(files: list[list[Any]], R: int) -> Iterator[tuple[Pairs, np.ndarray]]:
    """(word, 1) for every word of the file ranges, `MAP_CHUNK` words at a time."""
    for path, start, end in files:
        it = words.iter_words_range(path, start, end)
        while batch := [w.encode() for w in itertools.islice(it, MAP_CHUNK)]:
            yield Pairs.of_keys(batch), np.fromiter((words.reducer_of(k, R) for k in batch), dtype=np.int64, count=len(batch))


def _map_input(spec: dict[str, Any]) -> tuple[list[Pairs], int]:
    """This mapper's (key, value) pairs, one `Pairs` per reducer, and how many words it read.

    A local combiner is on by default, as in Hadoop WordCount and in DAIET's evaluation (each
    mapper's intermediate data holds a word once per partition): it is what a real job does,
    and it makes the switch's job the harder one — only aggregation *across* mappers is left
    for it, so the reduction we measure is not inflated by repeats one mapper could have
    summed itself. `combiner: false` sends one pair `(word, 1)` per occurrence: the input is
    read and packed a chunk at a time into arrays, so the pairs cost their key bytes and
    about 14 bytes each, not a Python object per word (the worker spools them to disk
    instead: `_run_spooled_mapper`)."""
    inp = spec["input"]
    R = spec["reducers"]
    combiner = spec.get("combiner", True)
    if not combiner:
        parts = _partition_chunks(_pair_chunks(spec), R)
        return parts, sum(len(p) for p in parts)  # a pair per word
    if "zipf" in inp:
        z = inp["zipf"]
        enc = [w.encode() for w in words.vocabulary(z["vocab"], z["seed"])]
        cnt = words.zipf_counts(z["alpha"], z["words"], z["vocab"], z["seed"], z["mappers"], spec["mapper_id"])
        return _partition(_shuffled(spec, [(enc[j], n) for j, n in enumerate(cnt.tolist()) if n]), R), int(cnt.sum())
    c: Counter[str] = Counter()
    for path, start, end in inp["files"]:
        c.update(words.iter_words_range(path, start, end))
    return _partition(_shuffled(spec, [(w.encode(), n) for w, n in c.items()]), R), sum(c.values())


def _shuffled(spec: dict[str, Any], pairs: list[tuple[bytes, int]]) -> list[tuple[bytes, int]]:
    """The combiner's pairs in a random order of this mapper's own (seeded by the job's seed
    and the mapper id) when the spec asks (`shuffle`), else as they are: in the vocabulary's
    (or first occurrence's) order, the same order in every mapper, so what a switch with
    too little memory merges depends on how far apart in time the mappers send each key."""
    if not spec.get("shuffle"):
        return pairs
    perm = np.random.default_rng([int(spec.get("shuffle_seed", 0)), int(spec["mapper_id"]), 0x534855]).permutation(len(pairs))
    return [pairs[i] for i in perm.tolist()]


def _pair_chunks(spec: dict[str, Any]) -> Iterator[tuple[Pairs, np.ndarray]]:
    """Without a combiner: (word, 1) per occurrence of the mapper's input, a chunk at a time,
    with each pair's reducer."""
    inp = spec["input"]
    R = spec["reducers"]
    if "zipf" not in inp:
        yield from _text_chunks(inp["files"], R)
        return
    z = inp["zipf"]
    enc = [w.encode() for w in words.vocabulary(z["vocab"], z["seed"])]
    vocab = Pairs.of_keys(enc)
    red = np.fromiter((words.reducer_of(k, R) for k in enc), dtype=np.int64, count=len(enc))
    share = words.zipf_share(z["words"], z["mappers"], spec["mapper_id"])
    for r in words.iter_zipf_ranks(z["alpha"], share, z["vocab"], z["seed"], spec["mapper_id"]):
        yield vocab.take(r), red[r]


def run_mapper(spec: dict[str, Any], spec_path: Path | None = None) -> dict[str, Any]:
    """A mapper; without a combiner its pairs are spooled beside `spec_path` (the job's
    spec file) instead of held in memory."""
    if not spec.get("combiner", True) and spec_path is not None:
        res = _run_spooled_mapper(spec, spec_path.parent)
    else:
        res = _run_mapper(spec)
    res["max_rss_mb"] = _max_rss_mb()
    return res


def _run_spooled_mapper(spec: dict[str, Any], directory: Path) -> dict[str, Any]:
    """Read the input a chunk at a time into one spool file per reducer, then send the
    spools: memory bounded by a chunk and a window of packets, whatever the input size."""
    t0 = time.monotonic()
    mode = spec["mode"]
    # Words longer than the protocol carries go to their reducer over TCP (see `_run_mapper`).
    limit = None if mode == "tcp" else spec.get("max_key_len")
    with Spools(directory, spec["mapper_id"], spec["tree_ids"], limit) as sp:
        nwords = 0
        for pairs, reducer in _pair_chunks(spec):
            sp.add(pairs, reducer)
            nwords += len(pairs)
        sp.close()
        side = sp.side_pairs()
        map_s = time.monotonic() - t0
        if mode == "tcp":
            stats = spool.tcp_send_spools(spec["reducer_addrs"], sp.paths, spec["timeout_s"])
        else:
            trees = [(t, a) for t, a in zip(spec["tree_ids"], spec["reducer_addrs"])]
            stats = transport.agg_map_spool(spec["protocol"], spec["bind"], trees, spec["mapper_id"], spec["op"],
                                            sp.paths, spec["timeout_s"], mode)
            if limit is not None:
                _side_channel(spec, side, stats)
        stats["spool_bytes"] = sp.bytes
    return _map_result(spec, nwords, nwords, map_s, t0, stats)


def _map_result(spec: dict[str, Any], nwords: int, npairs: int, map_s: float, t0: float,
                stats: dict[str, Any]) -> dict[str, Any]:
    """A mapper's line for the runner: its counts, times and the sender's stats."""
    return {"role": "map", "mapper_id": spec["mapper_id"], "words": nwords, "pairs": npairs,
            "map_s": map_s, "job_s": time.monotonic() - t0, **{k: v for k, v in stats.items() if k != "elapsed_s"},
            "send_s": stats.get("elapsed_s")}


def _side_channel(spec: dict[str, Any], side: list[Pairs], stats: dict[str, Any]) -> None:
    """Send the keys too long for the protocol over TCP, after the aggregation streams."""
    sc = transport.tcp_map(spec["reducer_addrs"], side, spec["timeout_s"])
    stats["side_channel_pairs"] = sum(len(p) for p in side)
    stats["side_channel_bytes"] = sc["bytes_sent"]
    stats["bytes_sent"] = int(stats.get("bytes_sent") or 0) + sc["bytes_sent"]


def _run_mapper(spec: dict[str, Any]) -> dict[str, Any]:
    t0 = time.monotonic()
    parts, nwords = _map_input(spec)
    npairs = sum(len(p) for p in parts)
    map_s = time.monotonic() - t0
    mode = spec["mode"]
    if mode == "tcp":
        stats = transport.tcp_map(spec["reducer_addrs"], parts, spec["timeout_s"])
    else:
        # Words longer than the protocol carries (the runner sets the limit only when the
        # input has one) go to their reducer over TCP once the aggregation streams are done.
        limit = spec.get("max_key_len")
        side: list[Pairs] = []
        if limit is not None:
            side = [p.select(p.key_lens() > limit) for p in parts]
            parts = [p.select(p.key_lens() <= limit) for p in parts]
        pairs = Pairs.concat(parts)
        tree_of_pair = np.repeat(np.arange(len(parts), dtype=np.uint16), [len(p) for p in parts])
        trees = [(t, a) for t, a in zip(spec["tree_ids"], spec["reducer_addrs"])]
        stats = transport.agg_map(spec["protocol"], spec["bind"], trees, spec["mapper_id"], spec["op"],
                                  tree_of_pair, pairs, spec["timeout_s"], mode)
        if limit is not None:
            _side_channel(spec, side, stats)
    return _map_result(spec, nwords, npairs, map_s, t0, stats)


def _iface_counters(iface: str | None) -> tuple[int, int] | None:
    if not iface:
        return None
    base = Path("/sys/class/net") / iface / "statistics"
    try:
        return int((base / "rx_packets").read_text()), int((base / "rx_bytes").read_text())
    except OSError:
        return None


def run_reducer(spec: dict[str, Any]) -> dict[str, Any]:
    mode = spec["mode"]
    wire0 = _iface_counters(spec.get("iface"))
    side = mode != "tcp" and spec.get("max_key_len") is not None  # see transport: the side channel
    ls = transport.tcp_listen(spec["bind"]) if mode == "tcp" or side else None
    # Loaded before the measured part: its first import was ~40 ms of every reducer's CPU.
    transport.native_agg()
    print("READY", flush=True)
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.monotonic()
    if ls is not None and not side:
        counts, stats = transport.tcp_reduce(ls, len(spec["mapper_addrs"]), spec["timeout_s"])
        ls.close()
        items = list(counts.items())
    else:
        pairs, stats = transport.agg_reduce(spec["protocol"], spec["bind"], spec["tree_id"], spec["mapper_addrs"],
                                            spec["op"], spec["timeout_s"], mode)
        # The switch delivers aggregated pairs, but a key may still arrive more than once
        # (spillover, several switches, host fallback): the reducer adds them up.
        agg: dict[bytes, int] = {}
        for k, v in pairs.items():
            agg[k] = agg.get(k, 0) + v
        if ls is not None:  # the side channel, after every mapper's streams
            long_counts, sc = transport.tcp_reduce(ls, len(spec["mapper_addrs"]), spec["timeout_s"])
            ls.close()
            for k, n in long_counts.items():
                agg[k] = agg.get(k, 0) + n
            stats["side_channel_pairs"] = sc["pairs"]
            stats["side_channel_bytes"] = sc["bytes"]
            stats["side_channel_segments"] = sc["segments"]
            stats["bytes"] = int(stats.get("bytes") or 0) + sc["bytes"]
            stats["pairs"] = int(stats.get("pairs") or 0) + sc["pairs"]
            if stats.get("packets") is not None:
                stats["packets"] = None if sc["segments"] is None else int(stats["packets"]) + sc["segments"]
        items = list(agg.items())
    ru_rx = resource.getrusage(resource.RUSAGE_SELF)
    # MapReduce's reducer output is sorted by key (DAIET: "the received data ... require a
    # complete sort operation"): part of the reducer's work in every mode.
    items.sort()
    blob, offsets = keyset.pack([k for k, _ in items])
    out = Pairs(blob, offsets, np.fromiter((v for _, v in items), dtype=np.uint64, count=len(items)))
    np.savez(spec["out"], keys=np.frombuffer(out.keys, dtype=np.uint8), offsets=out.offsets, values=out.values)
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    wire1 = _iface_counters(spec.get("iface"))
    res: dict[str, Any] = {
        "role": "reduce", "tree_id": spec["tree_id"], "keys": len(items),
        "cpu_s": _cpu(ru0, ru1),
        # Of which receiving and merging the pairs; the rest is the sorted output.
        "receive_cpu_s": _cpu(ru0, ru_rx),
        "wall_s": time.monotonic() - t0,
        **{k: v for k, v in stats.items() if k != "elapsed_s"},
    }
    res["max_rss_mb"] = _max_rss_mb()
    if wire0 and wire1:
        res["wire_packets"] = wire1[0] - wire0[0]
        res["wire_bytes"] = wire1[1] - wire0[1]
    return res


def _max_rss_mb() -> float | None:
    """This process's peak resident set (VmHWM, in MB). Not `ru_maxrss`: that also keeps the
    high-water mark of the image before exec, i.e. of the runner this worker was forked from."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


def _cpu(a: resource.struct_rusage, b: resource.struct_rusage) -> float:
    """User and system CPU seconds between two `getrusage` samples."""
    return (b.ru_utime - a.ru_utime) + (b.ru_stime - a.ru_stime)


def load_result(path: str | Path) -> dict[bytes, int]:
    z = np.load(path)
    keys = z["keys"].tobytes()
    o = z["offsets"].tolist()
    return {keys[o[i]:o[i + 1]]: v for i, v in enumerate(z["values"].tolist())}


def main(argv: list[str]) -> int:
    path = Path(argv[1])
    spec = json.loads(path.read_text())
    try:
        res = run_mapper(spec, path) if spec["role"] == "map" else run_reducer(spec)
    except Exception as e:  # one line for the runner, not a traceback in a namespace
        print(json.dumps({"role": spec["role"], "error": f"{type(e).__name__}: {e}"}), flush=True)
        return 1
    print(json.dumps(res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
