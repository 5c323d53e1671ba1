"""One data-parallel training process of `inswitch train` (run inside a rack host).

`python -m inswitch.apps.allreduce.train_worker SPEC.json`: trains the model on its shard of
scikit-learn's digits with DistributedDataParallel, the gradients averaged through the
switch (`--mode switch`: the "inswitch" backend) or Gloo (`--mode gloo`), evaluates on the
held-out set after every epoch, and prints one JSON line of figures. Rank 0 saves the final
weights for the switch-vs-Gloo comparison.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np


def digits_raw() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits as `load_digits` returns them (data, target), read from the
    package's CSV without importing scikit-learn: on a loaded machine its import costs
    seconds in every process that needs only these 1797 rows."""
    import gzip
    import importlib.util

    spec = importlib.util.find_spec("sklearn")  # finds the package, does not import it
    csv = Path(spec.origin).parent / "datasets" / "data" / "digits.csv.gz" if spec is not None and spec.origin else None
    if csv is None or not csv.exists():
        from sklearn.datasets import load_digits

        d = load_digits()
        return d.data, d.target
    with gzip.open(csv, "rt") as f:
        data = np.loadtxt(f, delimiter=",")
    return data[:, :-1], data[:, -1].astype(int)


def digits_split(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """scikit-learn's digits (8x8, 0..16) scaled to [0, 1]; a fixed 80/20 split."""
    data, target = digits_raw()
    x = (data / 16.0).astype(np.float32)
    y = target.astype(np.int64)
    order = np.random.RandomState(seed).permutation(len(x))
    cut = int(0.8 * len(x))
    tr, te = order[:cut], order[cut:]
    return x[tr], y[tr], x[te], y[te]


def build_model(kind: str) -> Any:
    import torch.nn as nn

    if kind == "mlp":
        return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10))
    if kind == "cnn":
        return nn.Sequential(nn.Unflatten(1, (1, 8, 8)), nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(32 * 16, 10))
    raise ValueError(f"model must be mlp or cnn, not {kind!r}")


def if_bytes(ifname: str) -> tuple[int, int]:
    """(rx bytes, tx bytes) of an interface of this network namespace (/proc/net/dev)."""
    for line in Path("/proc/net/dev").read_text().splitlines()[2:]:
        name, _, rest = line.partition(":")
        if name.strip() == ifname:
            f = rest.split()
            return int(f[0]), int(f[8])
    return 0, 0


def train(spec: dict[str, Any]) -> dict[str, Any]:
    os.environ.update(spec["env"])
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import inswitch.torch as ist

    torch.set_num_threads(1)
    rank, world, mode = spec["rank"], spec["world"], spec["mode"]
    dist.init_process_group(backend=ist.BACKEND if mode == "switch" else "gloo", init_method=spec["init_method"],
                            rank=rank, world_size=world, timeout=__import__("datetime").timedelta(seconds=120))
    xtr, ytr, xte, yte = digits_split()
    shard = np.arange(rank, len(xtr), world)
    torch.manual_seed(spec["seed"])
    model = build_model(spec["model"])
    ddp = DDP(model)
    comm = {"s": 0.0, "calls": 0}

    def timed(state, bucket):  # type: ignore[no-untyped-def]  # DDP checks the annotations: none, or the real classes
        # The same synchronous average in both modes, timed: all_reduce goes to the
        # group's backend (the switch, or Gloo).
        t0 = time.perf_counter()
        buf = bucket.buffer()
        dist.all_reduce(buf)
        buf.div_(world)
        comm["s"] += time.perf_counter() - t0
        comm["calls"] += 1
        fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
        fut.set_result(buf)
        return fut

    ddp.register_comm_hook(None, timed)
    opt = torch.optim.SGD(ddp.parameters(), lr=spec["lr"], momentum=0.9)
    lossf = torch.nn.CrossEntropyLoss()
    xte_t, yte_t = torch.from_numpy(xte), torch.from_numpy(yte)
    ifname = spec.get("ifname") or "eth0"
    rx0, tx0 = if_bytes(ifname)
    curve: list[tuple[float, float]] = []
    epoch_s: list[float] = []
    t_start = time.perf_counter()
    bs = spec["batch"]
    for epoch in range(spec["epochs"]):
        t0 = time.perf_counter()
        order = np.random.RandomState(spec["seed"] * 1000 + epoch).permutation(shard)
        ddp.train()
        # Every rank takes the same number of steps (shards differ by at most one sample).
        steps = len(xtr) // world // bs
        for s in range(steps):
            idx = order[s * bs:(s + 1) * bs]
            xb, yb = torch.from_numpy(xtr[idx]), torch.from_numpy(ytr[idx])
            opt.zero_grad()
            lossf(ddp(xb), yb).backward()
            opt.step()
        epoch_s.append(time.perf_counter() - t0)
        ddp.eval()
        with torch.no_grad():
            acc = float((model(xte_t).argmax(1) == yte_t).float().mean())
        curve.append((time.perf_counter() - t_start, acc))
    rx1, tx1 = if_bytes(ifname)
    pg = dist.distributed_c10d._get_default_group()
    fallbacks = dict(getattr(pg, "stats", ist.Stats()).fallbacks)
    if rank == 0:
        torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, spec["weights"])
    worker = getattr(pg, "worker", None)
    dist.barrier()
    dist.destroy_process_group()
    return {
        "rank": rank,
        "final_accuracy": curve[-1][1] if curve else None,
        "curve": curve,
        "epoch_s": epoch_s,
        "allreduce_s": comm["s"],
        "allreduce_calls": comm["calls"],
        "bytes_sent": tx1 - tx0,
        "bytes_received": rx1 - rx0,
        "switch": worker.stats() if worker is not None else None,
        "fallbacks": fallbacks,
    }


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    out = train(spec)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
