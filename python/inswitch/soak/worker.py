"""One soak workload in a process of its own: rounds, each checked, until a deadline; one JSON
line per event on stdout (`ready` with the long-lived processes' pids, `round` with this
process's descriptors and memory right after it, `done`).

    python -m inswitch.soak.worker kv skab12kv --fault loss=0.01 --until 1795717000 --kv-seconds 10

A SIGTERM ends it after the running round; its rack is taken down either way."""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import sys
import time
from types import FrameType
from typing import Any, Optional

from inswitch.soak import workloads

stopping = False


def emit(**event: Any) -> None:
    print(json.dumps(event), flush=True)


def after_round() -> dict[str, Any]:
    """This process's open descriptors and resident memory right after a round, its rack
    taken down: back at its baseline unless something of the round stayed open. Garbage
    is collected first, so a socket waiting in a reference cycle does not count (that
    would be jitter, not growth)."""
    from inswitch.soak.run import proc_fds, proc_rss_mb

    gc.collect()
    rss = proc_rss_mb(os.getpid())
    return {"fds_after": proc_fds(os.getpid()), "rss_mb_after": None if rss is None else round(rss, 2)}


def on_term(signum: int, frame: Optional[FrameType]) -> None:
    global stopping
    stopping = True


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="inswitch.soak.worker")
    ap.add_argument("workload", choices=workloads.WORKLOADS)
    ap.add_argument("name")
    ap.add_argument("--fault", required=True)
    ap.add_argument("--until", type=float, required=True, help="no round starts after this (epoch seconds)")
    ap.add_argument("--kv-seconds", type=float, default=10.0)
    ap.add_argument("--workdir", default=None)
    a = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, on_term)
    n = 0
    if a.workload == "kv":
        with workloads.KvLoop(a.name, a.fault, a.kv_seconds, a.workdir) as kv:
            emit(event="ready", pid=os.getpid(), pids=kv.pids(), per_round_rack=False)
            while not stopping and time.time() < a.until:
                emit(event="round", n=n, **workloads.timed(lambda: kv.round(n)), **after_round())
                n += 1
    else:
        emit(event="ready", pid=os.getpid(), pids={}, per_round_rack=True)
        f = workloads.ROUNDS[a.workload]
        while not stopping and time.time() < a.until:
            emit(event="round", n=n, **workloads.timed(lambda: f(a.name, a.fault, n)), **after_round())
            n += 1
    emit(event="done", rounds=n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
