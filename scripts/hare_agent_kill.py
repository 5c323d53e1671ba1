"""kill -9 of a storage agent in the middle of an offloading round, for Hare, NetCache and
DySO, both ways (`agent-round`: the round's request meets the dead agent;
`agent-round-restart`: the agent is back before the request goes on), in one Redis rack:
per run, whether it was correct, how long the host answered nothing, the hit rate in the
second before the kill and the second after the restart, and the controller's
`interrupted_rounds` / `moves_redone`. One JSON line per run, then a summary per case.
Needs root, redis-server.

    PYTHONPATH=python python scripts/hare_agent_kill.py [REPS]
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from inswitch.apps.hare import redisrack as rr

CASES = [(s, k) for s in ("hare", "netcache", "dyso") for k in ("agent-round", "agent-round-restart")]


def main(reps: int) -> None:
    p = rr.RackParams(clients=1, servers=2, records=400, cache=64, batch=16, duration=4.0, workload="ycsb-a", shift="hot-in", shift_count=100, shift_at=1.0,
                      window=16, workdir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    rows: list[dict[str, Any]] = []
    with rr.RedisRack(p) as rack:
        for rep in range(reps):
            for system, kind in CASES:
                out = rack.run_load(system, rack.use(system), fault=(kind, 1.5, 0))
                f = out["fault"]
                row = {"system": system, "kind": kind, "rep": rep, "correct": out["correct"], "stale_reads": out["stale_reads"], "lost_writes": out["lost_writes"],
                       "client_errors": f["client_errors"], "unacked_writes": f["unacked_writes"], "during": f["during"]["cmd"],
                       "restarted_after_s": f["restarted_after_s"], "unavailable_s": f["unavailable_s"],
                       "hit_rate_before": f["hit_rate_before"], "hit_rate_after": f["hit_rate_after"],
                       "interrupted_rounds": out["control"]["interrupted_rounds"], "moves_redone": out["control"]["moves_redone"]}
                rows.append(row)
                print(json.dumps(row), flush=True)
    for system, kind in CASES:
        mine = [r for r in rows if (r["system"], r["kind"]) == (system, kind)]
        span = {k: [min(r[k] for r in mine), max(r[k] for r in mine)] for k in ("unavailable_s", "restarted_after_s", "hit_rate_before", "hit_rate_after", "moves_redone")}
        print(json.dumps({"system": system, "kind": kind, "runs": len(mine), "all_correct": all(r["correct"] for r in mine), **span}))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
