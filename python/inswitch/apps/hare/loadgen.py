"""One load-generating client process (run inside a client host's namespace by
`redisrack`): a YCSB stream through the Hare client library, closed loop with `window`
operations at once, every operation recorded for the checker. Its argument is a JSON
object (see `redisrack.RedisRack.run_load`); it writes a JSON result to `out`.

`engine`: "python" (the client library, every operation in the history for the
linearizability checker) or "native" (`inswitch.hare.fastload`: the same protocol, keys
and addressing from a native windowed loop with the GIL released). The native engine
records the same history (every completed operation's value and the writes never
acknowledged; to `out`.history.npz, unless `history` is false) and, as the only writing
client (`clients` 1 or a read-only workload), also checks every GET's value itself against
what the key holds; its samples go to `out`.samples.npy. It replays a precomputed stream
of the workload's operations (`stream_ops` of them, repeated); a hotspot shift is a remap
of the stream's keys switched at its time (the remap `Workload.shift` makes). ycsb-d is
drawn natively from YCSB's "latest" generator instead (its inserts grow the key set);
a shift moves nothing there, in either engine (reads follow the newest inserts)."""

from __future__ import annotations

import json
import resource
import sys
import time
from typing import Any

import numpy as np

from inswitch.apps.hare.redisrack import wait_start
from inswitch.hare import ycsb
from inswitch.hare.client import Client, HareError, Op


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def shift_remaps(w: ycsb.Workload, kind: str, count: int, n: int) -> list[np.ndarray]:
    """The `n` hotspot shifts the python engine makes (`w.shift(kind, count)`, the same
    shift seed in every client) as remaps of the records an unshifted stream draws:
    `Workload._pick` yields `current[pos_of[r]]` for a draw r."""
    if kind == "none" or n == 0:
        return []
    out = []
    w.prepare_shifts()
    for _ in range(n):
        w.shift(kind, count)
        assert w.current is not None and w.pos_of is not None
        out.append(w.current[w.pos_of].astype(np.uint32))
    return out


def native(p: dict[str, Any]) -> int:
    from inswitch.hare import fastload
    from inswitch.hare.client import server_index

    clients = p.get("clients", 1)
    problem = fastload.unsupported(p["workload"], p.get("shift", "none") if p.get("shift_times") else "none", clients)
    if problem:
        raise SystemExit(f"loadgen: {problem}")
    sole = fastload.sole_writer(p["workload"], clients)
    record = p.get("history", True)  # off: several writing clients go unchecked (the run says so)
    w = ycsb.Workload(p["workload"], p["records"], seed=p["seed"], shift_seed=p["shift_seed"])
    ops, op_keys = [], []
    latest = (ycsb.WORKLOADS["ycsb-d"]["read"], p["seed"]) if p["workload"] == "ycsb-d" else None
    while latest is None and len(ops) < p.get("stream_ops", 100_000):
        o = w.next()
        if o.kind in ("read", "rmw"):
            ops.append(fastload.OP_GET)
            op_keys.append(o.record)
        if o.kind != "read":
            ops.append(fastload.OP_PUT)
            op_keys.append(o.record)
    keys = [ycsb.record_key(r) for r in range(p["records"])]
    init = p.get("initial")
    initial = [ycsb.field_value(r, 0, 0, p["field_size"]) for r in range(p["records"])] if init is None else [None if init[k.hex()] is None else bytes.fromhex(init[k.hex()]) for k in keys]
    remaps = [] if latest else shift_remaps(w, p.get("shift", "none"), p.get("shift_count", 0), len(p.get("shift_times", [])))
    start = wait_start(p)
    shifts = [(int(start + t * 1e9), m) for t, m in zip(sorted(p.get("shift_times", [])), remaps)]
    c0 = cpu_s()
    r = fastload.run(p["servers"], keys, initial, ops, op_keys, key_field=p["key_field"], value_size=p["value_size"], field_size=p["field_size"],
                     window=p["window"], timeout=p.get("timeout", 0.3), retries=p.get("retries", 10), client=p["client"], duration=p["duration"],
                     start_ns=start, sole_writer=sole, history=record, shifts=shifts, reserve=p.get("reserve", 0), latest=latest)
    c1 = cpu_s()
    keys += [ycsb.record_key(i) for i in range(len(keys), len(r.expected))]  # ycsb-d's inserts
    if record:
        h = r.history_arrays()
        np.savez(p["out"] + ".history.npz", keys=np.array(keys, dtype=bytes), **h)
    st = r.stats
    samples = np.stack([r.recv_ns.astype(np.int64), (r.recv_ns - r.send_ns).astype(np.int64), (r.op == fastload.OP_GET).astype(np.int64), r.hit.astype(np.int64)], axis=1)
    np.save(p["out"] + ".samples.npy", samples)
    servers = np.array([server_index(k, len(p["servers"])) for k in keys], dtype=np.int64)
    miss = ~r.hit
    np.save(p["out"] + ".served.npy", np.stack([r.recv_ns[miss].astype(np.int64), servers[r.key[miss]]], axis=1))
    out = {
        "client": p["client"],
        "engine": "native",
        "history": [],
        "unacked": [],
        **({"history_npz": p["out"] + ".history.npz"} if record else {}),
        "samples_npy": p["out"] + ".samples.npy",
        "served_npy": p["out"] + ".served.npy",
        # what each key holds as far as this client knows: nothing when others write too
        "final": [[k.hex(), known, None if v is None else v.hex()] for k, (known, v) in zip(keys, r.expected)] if sole else [],
        "stats": {"ops": st["completed"], "gets": st["gets"], "hits": st["hits"], "retries": st["retries"], "timeouts": st["timeouts"],
                  "errors": st["errors"], "records": p["records"], "engine": "native", "value_mismatches": st["mismatches"],
                  "malformed_replies": st["malformed"], "late_replies": st["late"], "retransmits": st["retransmits"], "unchecked_gets": st["unchecked"], "inserts": st["inserts"],
                  "value_check": "each GET (only writer)" if sole else f"not checked ({clients} writing clients: the history is the check)",
                  "history": bool(record),
                  "unfinished": st["unfinished"], "send_failures": st["send_failures"], "issued": st["issued"],
                  "gave_up_after_retries": st.get("gave_up_after_retries", 0),
                  "run_start_ns": r.start_ns, "run_stop_ns": r.stop_ns, "cpu_s": round(c1 - c0, 4)},
    }
    with open(p["out"], "w") as f:
        json.dump(out, f)
    return 0


def main(argv: list[str]) -> int:
    p = json.loads(argv[0])
    if p.get("engine", "python") == "native":
        return native(p)
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
    c0 = cpu_s()
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
        "stats": {"ops": c.stats.ops, "gets": c.stats.gets, "hits": c.stats.hits, "retries": c.stats.retries, "timeouts": c.stats.timeouts, "errors": errors, "records": w.records,
                  "gave_up_after_retries": c.stats.gave_up_after_retries,
                  "engine": "python", "run_start_ns": start, "run_stop_ns": time.monotonic_ns(), "cpu_s": round(cpu_s() - c0, 4)},
    }
    with open(p["out"], "w") as f:
        json.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
