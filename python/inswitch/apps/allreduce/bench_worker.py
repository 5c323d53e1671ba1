"""One process of `inswitch bench allreduce` (run inside a rack host).

`python -m inswitch.apps.allreduce.bench_worker SPEC.json`: for each tensor size, times
`reps` allreduces of a float32 tensor through the switch (`inswitch._native.AllreduceWorker`)
and through Gloo (`torch.distributed`, ring over TCP, same rack), checks the switch's result
against Gloo's, and prints one JSON line.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from inswitch.apps.allreduce.train_worker import if_bytes


def main() -> None:
    spec: dict[str, Any] = json.loads(Path(sys.argv[1]).read_text())
    os.environ.update(spec["env"])
    import torch
    import torch.distributed as dist

    from inswitch.torch import worker_from_env

    torch.set_num_threads(1)
    rank, world = spec["rank"], spec["world"]
    dist.init_process_group("gloo", init_method=spec["init_method"], rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=300))
    worker = worker_from_env(rank, world)
    ifname = spec["ifname"]
    out = []
    for mb in spec["sizes_mb"]:
        n = int(mb * (1 << 20)) // 4
        x = np.random.RandomState(rank * 7 + n).standard_normal(n).astype(np.float32)
        row: dict[str, Any] = {"size_mb": mb, "workers": world}
        for mode in ("switch", "gloo"):
            times = []
            rx0, tx0 = if_bytes(ifname)
            for _ in range(spec["reps"]):
                dist.barrier()
                t0 = time.perf_counter()
                if mode == "switch":
                    res = worker.allreduce_f32(x, spec["timeout_s"])
                else:
                    t = torch.from_numpy(x.copy())
                    dist.all_reduce(t)
                    gl = t.numpy()
                times.append(time.perf_counter() - t0)
            rx1, tx1 = if_bytes(ifname)
            # Barriers are a few hundred bytes each; the tensor's traffic dominates.
            row[f"{mode}_s"] = float(np.median(times))
            row[f"{mode}_bytes_sent"] = (tx1 - tx0) / spec["reps"]
            row[f"{mode}_bytes_received"] = (rx1 - rx0) / spec["reps"]
        scale = float(np.abs(gl).max()) or 1.0
        row["max_rel_diff"] = float(np.abs(res - gl).max()) / scale
        out.append(row)
    dist.barrier()
    dist.destroy_process_group()
    print(json.dumps({"rank": rank, "results": out, "switch": worker.stats()}), flush=True)


if __name__ == "__main__":
    main()
