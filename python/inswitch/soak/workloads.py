"""One round of each soak workload, checked against its reference as its own command checks
it: WordCount (every count equal to a Counter's), NetSHa (every query's top K equal to the
search's without a switch), the KV workload (Hare in front of Redis: the history checker,
no stale read, no lost write) and INaaS tenants (each reads what it wrote, never the other's
registers). Each round returns `{"correct": bool, ...}` with what it saw of restarts."""

from __future__ import annotations

import time
from typing import Any, Callable

WORKLOADS = ("wordcount", "netsha", "kv", "inaas")


def wordcount_round(name: str, fault: str, n: int) -> dict[str, Any]:
    """A WordCount job in switch mode, DAIET and SwitchAgg in turn."""
    from inswitch.apps.wordcount import job

    program = ("daiet", "switchagg")[n % 2]
    spec = job.JobSpec(zipf=1.0, words=60_000, vocab=5_000, seed=1 + n, mappers=2, reducers=2, program=program,
                       timeout_s=90.0, rack=name, where="netns", fault=fault)
    doc = job.run(spec, ["switch"])
    run = doc["runs"]["switch"]
    return {"correct": bool(run["correct"] and run["wrong_keys"] == 0), "program": program, "keys": run["keys"],
            "wrong_keys": run["wrong_keys"], "fallback": bool(run.get("fallback")),
            "switch_restarts": len(run.get("switch_restarts", []))}


def netsha_round(name: str, fault: str, n: int) -> dict[str, Any]:
    """NetSHa queries through a rack, each top K compared with the search without a switch."""
    import numpy as np

    from inswitch.apps.netsha.datasets import random_dataset
    from inswitch.apps.netsha.rack import run_rack_search
    from inswitch.apps.netsha.search import SearchConfig, run_search

    ds = random_dataset(1500, 100, seed=8 + n)
    cfg = SearchConfig(servers=3, k=10, concurrency=10)
    m = run_rack_search(ds, cfg, name, fault=fault)["modes"]["netsha-rack"]
    ref = run_search(ds, cfg, ["tlsh"], keep_topk=True)["modes"]["tlsh"]
    wrong = sum(not np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(m["topk_distances"], ref["topk_distances"]))
    wrong += abs(len(m["topk_distances"]) - len(ref["topk_distances"]))
    rec = m.get("recovery", {})
    return {"correct": wrong == 0, "queries": len(ref["topk_distances"]), "wrong_queries": int(wrong),
            "retried_queries": m.get("retried_queries", 0), "switch_restarts": len(m.get("switch_restarts", [])),
            "incomplete_after_first_pass": rec.get("incomplete_after_first_pass", 0), "direct_queries": rec.get("direct_queries", 0),
            "report_packets": rec.get("report_packets", 0)}


def inaas_round(name: str, fault: str, n: int) -> dict[str, Any]:
    """Two tenants behind the goalkeeper: A writes then reads its registers, B reads A's
    (refused, zeros), writes its own and reads them back."""
    from inswitch.apps.inaas.rack import run_on_rack

    r = run_on_rack(name, seconds=10.0, fault=fault)
    a, b = r["tenant_a"], r["tenant_b"]
    checks = {
        "a_reads_its_writes": a[-1].get("status") == [1] * 20 and a[-1].get("values") == [1000 + j for j in range(20)],
        "b_refused_a": b[0].get("status") == [2] * 20 and all(v == 0 for v in b[0].get("values", [1])),
        "b_reads_its_writes": b[-1].get("values") == [2000 + j for j in range(20)],
        "none_lost": all(not x.get("lost") for x in a + b),
    }
    return {"correct": all(checks.values()), **{k: bool(v) for k, v in checks.items()},
            "lost_requests": sum(1 for x in a + b if x.get("lost")),
            "switch_restarts": len(r.get("switch_restarts", []))}


class KvLoop:
    """The KV workload: one long-lived rack (its switch is the one the soak measures and
    restarts), Redis and the storage agents up for the whole soak, Hare's controller in this
    process; each round is a YCSB-A run through real client processes, checked."""

    def __init__(self, name: str, fault: str, seconds: float, workdir: str | None) -> None:
        from inswitch.apps.hare import redisrack as rr

        self.p = rr.RackParams(clients=1, servers=2, records=400, cache=64, batch=16, duration=seconds, workload="ycsb-a",
                               shift="hot-in", shift_count=100, shift_at=seconds / 2, window=16, workdir=workdir, fault=fault)
        self.rack = rr.RedisRack(self.p, name=name)

    def __enter__(self) -> "KvLoop":
        self.rack.up()
        self.rack.use("hare")
        return self

    def __exit__(self, *exc: object) -> None:
        self.rack.down()

    def pids(self) -> dict[str, int]:
        """The long-lived processes of the KV hosts (Redis servers, storage agents)."""
        out = {f"redis{i}": r.pid for i, r in enumerate(self.rack.redis) if r is not None}
        out.update({f"agent{i}": a.pid for i, a in enumerate(self.rack.agents) if a is not None})
        return out

    def round(self, n: int) -> dict[str, Any]:
        # The store goes on from the previous round (the switch's cache with it): what
        # Redis holds now is this round's initial state for the checker.
        init = self.rack.read_back(sorted(self.rack.initial())) if n else None
        r = self.rack.run_load("hare", self.rack.control, initial=init)
        return {"correct": bool(r["correct"]), "operations": r["operations"], "stale_reads": r["stale_reads"],
                "lost_writes": r["lost_writes"], "linearizable": r["linearizable"], "hit_rate": r["hit_rate"],
                "control_errors": r["control_errors"], "switch_restarts": len(r["switch_restarts"]),
                "reinstalled_generations": r["reinstalled_generations"], "recovered_s": r.get("recovered_s"),
                **({"restart_note": r["restart_note"]} if r.get("restart_note") else {})}


ROUNDS: dict[str, Callable[[str, str, int], dict[str, Any]]] = {
    "wordcount": wordcount_round, "netsha": netsha_round, "inaas": inaas_round,
}


def timed(f: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """A round's result with its start and end (wall clock); an exception is a failed round."""
    t0 = time.time()
    try:
        out = f()
    except Exception as e:
        # The whole message: a rack that failed to start puts its switch's log tail on the
        # lines after the first.
        out = {"correct": False, "error": f"{type(e).__name__}: {str(e)}"[:2000]}
    return {"start": t0, "end": time.time(), **out}
