"""One load-generating client process (run inside a client host's namespace by
`redisrack`): a YCSB stream through the Hare client library, closed loop with `window`
operations at once, every operation recorded for the checker. Its argument is a JSON
object (see `redisrack.RedisRack.run_load`); it writes a JSON result to `out`."""

from __future__ import annotations

import json
import sys
import time

from inswitch.apps.hare.redisrack import wait_start
from inswitch.hare import ycsb
from inswitch.hare.client import Client, HareError, Op


def main(argv: list[str]) -> int:
    p = json.loads(argv[0])
    hist: list = []
    c = Client(p["servers"], key_field=p["key_field"], value_size=p["value_size"], window=p["window"], timeout=p.get("timeout", 0.3), retries=p.get("retries", 10), history=hist, record_samples=True)
    w = ycsb.Workload(p["workload"], p["records"], seed=p["seed"], shift_seed=p["shift_seed"])
    if p.get("shift_times") and p["workload"] != "ycsb-d":
        w.prepare_shifts()
    start = wait_start(p)
    end = start + int(p["duration"] * 1e9)
    shifts = sorted(int(start + t * 1e9) for t in p.get("shift_times", []))
    while time.monotonic_ns() < start:
        time.sleep(0.001)
    version, errors = 0, 0
    while time.monotonic_ns() < end:
        while shifts and time.monotonic_ns() >= shifts[0]:
            shifts.pop(0)
            w.shift(p["shift"], p["shift_count"])
        ops = []
        for _ in range(p["window"]):
            o = w.next()
            key = ycsb.record_key(o.record)
            if o.kind in ("read", "rmw"):
                ops.append(Op("get", key))
            if o.kind != "read":
                version += 1
                ops.append(Op("set", key, ycsb.field_value(o.record, version, p["client"], p["field_size"])))
        try:
            c.execute(ops)
        except HareError:
            errors += 1
    out = {
        "client": p["client"],
        "history": [[k.hex(), kind, None if v is None else v.hex(), a, b] for k, kind, v, a, b in hist],
        "unacked": [[k.hex(), None if v is None else v.hex(), t] for k, v, t in c.unacked],
        "samples": c.stats.samples,
        "served": c.stats.served,
        "stats": {"ops": c.stats.ops, "gets": c.stats.gets, "hits": c.stats.hits, "retries": c.stats.retries, "timeouts": c.stats.timeouts, "errors": errors, "records": w.records},
    }
    with open(p["out"], "w") as f:
        json.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
