"""`inswitch bench allreduce`: float32 allreduce time through the switch against Gloo (ring
over TCP), in the same rack and run, for each tensor size and worker count.

JSON: `results`, one entry per (size, workers): `size_mb`, `workers`, `switch_s`, `gloo_s`
(median of the repetitions, the slowest worker's), `speedup` (gloo_s / switch_s),
`bytes_per_worker` (bytes a worker's interface sent per switch allreduce),
`gloo_bytes_per_worker`, `max_rel_diff` (switch result vs Gloo's, relative to its largest
value).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

from inswitch.apps.allreduce.train import SLOTS, WORKER_UDP_PORT, TrainError, collect_workers, install_job

STORE_PORT = 29537


def run_workers(st: Any, sizes_mb: list[float], reps: int, workdir: Path, timeout_s: float) -> list[dict[str, Any]]:
    from inswitch.topology import netns

    hosts = st.hosts
    procs = []
    for r, h in enumerate(hosts):
        env = {"INSWITCH_JOB": "1", "INSWITCH_SLOTS": str(SLOTS), "INSWITCH_DEST": f"{hosts[(r + 1) % len(hosts)].ip}:7074",
               "INSWITCH_BIND": f"{h.ip}:{WORKER_UDP_PORT}", "GLOO_SOCKET_IFNAME": h.ifname or "eth0"}
        doc = {"rank": r, "world": len(hosts), "init_method": f"tcp://{hosts[0].ip}:{STORE_PORT}", "sizes_mb": sizes_mb,
               "reps": reps, "env": env, "ifname": h.ifname or "eth0", "timeout_s": timeout_s}
        path = workdir / f"bench-{r}.json"
        path.write_text(json.dumps(doc))
        argv = netns.netns_argv(h.netns, [sys.executable, "-m", "inswitch.apps.allreduce.bench_worker", str(path)])
        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = collect_workers(procs, timeout_s, "bench worker")
    rows = []
    for i, first in enumerate(outs[0]["results"]):
        each = [o["results"][i] for o in outs]
        sw = max(e["switch_s"] for e in each)
        gl = max(e["gloo_s"] for e in each)
        n = len(each)
        rows.append({
            "size_mb": first["size_mb"], "workers": first["workers"], "switch_s": sw, "gloo_s": gl, "speedup": gl / sw,
            "bytes_per_worker": sum(e["switch_bytes_sent"] for e in each) / n,
            "bytes_received_per_worker": sum(e["switch_bytes_received"] for e in each) / n,
            "gloo_bytes_per_worker": sum(e["gloo_bytes_sent"] for e in each) / n,
            "max_rel_diff": max(e["max_rel_diff"] for e in each),
            "retransmissions": sum(o["switch"]["retransmissions"] for o in outs),
        })
    return rows


def run(workers: list[int], sizes_mb: list[float], reps: int, progress: Callable[[str], None], timeout_s: float = 900.0) -> dict[str, Any]:
    from inswitch.topology.rack import Rack
    from inswitch.topology.state import process_tag

    if os.geteuid() != 0:
        raise TrainError("the benchmark rack needs root (network namespaces)")
    results: list[dict[str, Any]] = []
    for n in workers:
        rack = Rack()
        name = f"ab{process_tag()}"
        rack.down(name)
        progress(f"{n} workers: building the rack (forward,allreduce)")
        try:
            st = rack.up(n, name=name, programs="forward,allreduce", p4runtime="127.0.0.1:0", metrics="127.0.0.1:0")
            install_job(st)
            with tempfile.TemporaryDirectory(prefix="inswitch-bench-") as tmp:
                progress(f"{n} workers: {', '.join(f'{s:g}' for s in sizes_mb)} MB, {reps} repetitions each")
                results += run_workers(st, sizes_mb, reps, Path(tmp), timeout_s)
        finally:
            rack.down(name)
    return {"results": results, "reps": reps,
            "note": "one software switch process (the pisa model, AF_PACKET on veth) on a shared 2-core machine; Gloo's TCP crosses the same switch"}
