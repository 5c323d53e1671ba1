"""PyTorch through the switch: a `torch.distributed` backend and a DDP communication hook.

One line in a training script::

    import inswitch.torch  # registers the "inswitch" backend
    dist.init_process_group(backend="inswitch", init_method=..., rank=r, world_size=n)

`allreduce` of float32 CPU tensors with SUM goes through the switch's `allreduce` program
(SwitchML-style: per-chunk exponent round, 32-bit fixed point, exactly once; see
docs/allreduce.md). Everything else (other reductions or dtypes, broadcast, barrier,
allgather, ...) goes to a Gloo process group built on the same store, and each kind of
fallback is logged once.

Scripts that keep Gloo use :func:`switch_hook` instead::

    ddp.register_comm_hook(inswitch.torch.worker_from_env(), inswitch.torch.switch_hook)

The worker's place in the switch job comes from the environment (set by whoever installed
the job, e.g. `inswitch train`): `INSWITCH_JOB`, `INSWITCH_SLOTS`, `INSWITCH_DEST` (any
`ip:port` whose path crosses the switch), `INSWITCH_BIND` (this worker's `ip:port`, the one
the controller wrote in the switch's `worker_addr`), optionally `INSWITCH_RTO_S`. The
worker id in the switch is the process group's rank: the controller's `install` must list
the workers in rank order (worker `r` at position `r`), and the switch admits id `r` only
from the port its entry gives `r` (`allreduce_worker_not_on_port` otherwise), so a host's
ranks must be consecutive.
"""

import logging
import os
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from inswitch import _native

log = logging.getLogger("inswitch.torch")

BACKEND = "inswitch"


@dataclass
class Stats:
    """What went through the switch and what fell back."""

    allreduce_calls: int = 0
    allreduce_s: float = 0.0
    elements: int = 0
    fallbacks: dict[str, int] = field(default_factory=dict)


def worker_from_env(rank: int | None = None, world_size: int | None = None) -> Any:
    """An `inswitch._native.AllreduceWorker` for this process, from the INSWITCH_* variables."""
    env = os.environ
    missing = [k for k in ("INSWITCH_JOB", "INSWITCH_SLOTS", "INSWITCH_DEST", "INSWITCH_BIND") if k not in env]
    if missing:
        raise RuntimeError(f"inswitch backend: set {', '.join(missing)} (the switch job this worker belongs to)")
    rank = dist.get_rank() if rank is None else rank
    world_size = dist.get_world_size() if world_size is None else world_size
    return _native.AllreduceWorker(env["INSWITCH_BIND"], env["INSWITCH_DEST"], int(env["INSWITCH_JOB"]), rank, world_size,
                               int(env["INSWITCH_SLOTS"]), float(env.get("INSWITCH_RTO_S", "0.002")))


def _op_name(op: Any) -> str:
    for n in ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM"):
        if hasattr(dist.ReduceOp, n) and op == getattr(dist.ReduceOp, n):
            return n
    return str(op)


def _through_switch(worker: Any, t: torch.Tensor) -> None:
    """SUM `t` (float32, CPU) in place over the job's workers."""
    flat = t.detach().contiguous().view(-1).numpy()
    out = worker.allreduce_f32(flat)
    t.copy_(torch.from_numpy(np.asarray(out)).view_as(t))


class _DoneWork(dist._Work):
    """A finished Work: the switch allreduce is synchronous (the GIL is released meanwhile)."""

    def __init__(self, tensors: list[torch.Tensor]) -> None:
        super().__init__()
        self._fut: torch.futures.Future[Any] = torch.futures.Future()
        self._fut.set_result(tensors)

    def wait(self, timeout: timedelta | None = None) -> bool:  # noqa: ARG002 - torch's signature
        return True

    def is_completed(self) -> bool:
        return True

    def get_future(self) -> torch.futures.Future[Any]:
        return self._fut


class InswitchProcessGroup(dist.ProcessGroup):
    """SUM allreduce of float32 CPU tensors through the switch; the rest through Gloo."""

    def __init__(self, store: dist.Store, rank: int, size: int, timeout: timedelta) -> None:
        super().__init__(rank, size)
        self._gloo = dist.ProcessGroupGloo(dist.PrefixStore("inswitch-gloo", store), rank, size, timeout)
        self.worker = worker_from_env(rank, size)
        self.stats = Stats()

    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        return BACKEND

    @property
    def name(self) -> str:  # type: ignore[override]
        return BACKEND

    def _fallback(self, what: str) -> None:
        n = self.stats.fallbacks.get(what, 0)
        self.stats.fallbacks[what] = n + 1
        if n == 0:
            log.warning("inswitch: %s is not done by the switch; falling back to Gloo", what)

    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> dist._Work:
        op = getattr(opts, "reduceOp", dist.ReduceOp.SUM) if opts is not None else dist.ReduceOp.SUM
        ok = op == dist.ReduceOp.SUM and all(t.dtype == torch.float32 and t.device.type == "cpu" for t in tensors)
        if not ok:
            dtypes = ",".join(sorted({str(t.dtype) for t in tensors}))
            self._fallback(f"allreduce({_op_name(op)}, {dtypes})")
            return self._gloo.allreduce(tensors, opts) if opts is not None else self._gloo.allreduce(tensors)
        t0 = time.perf_counter()
        for t in tensors:
            _through_switch(self.worker, t)
            self.stats.elements += t.numel()
        self.stats.allreduce_calls += 1
        self.stats.allreduce_s += time.perf_counter() - t0
        return _DoneWork(tensors)

    # Everything else: Gloo, said once per kind.
    def broadcast(self, tensors: list[torch.Tensor], opts: Any) -> dist._Work:
        self._fallback("broadcast")
        return self._gloo.broadcast(tensors, opts)

    def barrier(self, opts: Any = None) -> dist._Work:
        self._fallback("barrier")
        return self._gloo.barrier(opts) if opts is not None else self._gloo.barrier()

    def allgather(self, output: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any = None) -> dist._Work:
        self._fallback("allgather")
        return self._gloo.allgather(output, inputs, opts) if opts is not None else self._gloo.allgather(output, inputs)

    def reduce(self, tensors: list[torch.Tensor], opts: Any) -> dist._Work:
        self._fallback("reduce")
        return self._gloo.reduce(tensors, opts)

    def gather(self, output: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any) -> dist._Work:
        self._fallback("gather")
        return self._gloo.gather(output, inputs, opts)

    def scatter(self, output: list[torch.Tensor], inputs: list[list[torch.Tensor]], opts: Any) -> dist._Work:
        self._fallback("scatter")
        return self._gloo.scatter(output, inputs, opts)

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any) -> dist._Work:
        self._fallback("allreduce_coalesced")
        return self._gloo.allreduce_coalesced(tensors, opts)


def _create(store: dist.Store, rank: int, size: int, timeout: timedelta) -> InswitchProcessGroup:
    return InswitchProcessGroup(store, rank, size, timeout)


def register() -> None:
    """Register the "inswitch" backend (idempotent; done on import)."""
    if BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, _create, devices=["cpu"])


# No `from __future__ import annotations` in this module: DDP checks that a hook's
# `bucket` annotation is dist.GradBucket itself, not a string.
def switch_hook(worker: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: average a float32 gradient bucket through the switch (other
    dtypes through the process group, i.e. Gloo, logged)."""
    buf = bucket.buffer()
    n = dist.get_world_size()
    if buf.dtype != torch.float32 or buf.device.type != "cpu":
        log.warning("inswitch hook: %s bucket on %s is not done by the switch; falling back to the process group", buf.dtype, buf.device)
        return dist.all_reduce(buf.div_(n), async_op=True).get_future().then(lambda f: f.value()[0])
    _through_switch(worker, buf)
    buf.div_(n)
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(buf)
    return fut


register()
