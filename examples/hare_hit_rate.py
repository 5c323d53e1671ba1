"""Hare's switch hit rate, read while a key-value workload runs.

A seeded Zipf trace of GETs replays against the in-process switch running `forward` +
`hare` (simulated time: no root, no network); halfway through, the coldest keys become the
hottest, and Hare offloads them. The progress callback reads the live counters — queries
answered by the switch over all GETs so far — as the run goes.

    python examples/hare_hit_rate.py [--keys 2000] [--duration 1.0]
"""

from __future__ import annotations

import argparse

from inswitch.apps.hare.kvsim import KvParams, KvRun
from inswitch.apps.hare.workload import generate


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keys", type=int, default=2000)
    ap.add_argument("--duration", type=float, default=1.0, help="simulated seconds")
    ap.add_argument("--cache", type=int, default=128, help="objects the switch holds")
    a = ap.parse_args()

    # keys, rate (qps), duration, Zipf skew, write ratio, scrambled, shift, shift time,
    # keys shifted, shift repeat, seed
    trace = generate(a.keys, 10_000.0, a.duration, 0.99, 0.0, False, "coldest-to-top", a.duration / 2, a.cache, 1.0, 1)
    run = KvRun("hare", trace, KvParams(n_keys=a.keys, key_size=16, value_size=16, cache=a.cache, batch=32))
    seen: list[float] = []

    def progress(done: float) -> None:
        # Live: the run's own counters, not its final report.
        gets, hits = int(run.m.gets.sum()), int(run.m.hits.sum())
        if gets and (not seen or done - seen[-1] >= 0.1):
            seen.append(done)
            print(f"{done:4.0%} of the trace: {gets:6d} GETs, switch hit rate so far {hits / gets:.3f}")

    res = run.run(progress)
    print(f"stable hit rate {res['stable_hit_rate']:.3f}, after the shift {res['recovered_hit_rate']:.3f}, "
          f"{res['offloads']} offloads, answers correct: {res['correct']}")
    return 0 if res["correct"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
