"""The `dense` tenant of `tenants run --real`: a real model (the digits MLP of `inswitch
train`: 64-128-64-10, ReLU, SGD with momentum 0.9, in numpy: importing PyTorch took 10 s
of a tenant's start on this loaded machine) trained data-parallel by `workers` replicas in
the tenant's process, the gradients
summed by the switch's `allreduce` program in the job partition the INaaS controller leased
to this tenant (docs/inaas.md, "The dense tenant trains through the allreduce program").

- INaaS phase: every step, each replica's flat float32 gradient goes through its own
  `_native.AllreduceWorker` (one UDP port each on the tenant's host, the job id the
  controller assigned with the lease); the replicas run in threads (the native call
  releases the GIL) and each applies the switch's sum / workers.
- Host-only phase: the same seeded training, each replica's gradient sent to the tenant's
  server process (an echo standing in for a parameter server, as for the other
  aggregation tenants) in datagrams through the same switch, forwarding only, and summed
  exactly (float64) in numpy: the reference the switch-trained model is checked against.

Figure: throughput, gradient values aggregated per µs (workers x parameters x steps over
the phase's wall time). After the lease ends (the controller deletes the job's entry), the
host-only phase begins by sending allreduce packets under the old job id and under a job
id never leased: both must go unanswered (the switch's `allreduce_unknown_job` drops,
which the runner reads).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from inswitch.apps.inaas.adapters import App

#: Max |switch-trained weight - exact-sum weight| and accuracy difference tolerated
#: (the 32-bit fixed point of `hostlib::allreduce::quant`; `tests/test_train.py`'s bounds).
WEIGHT_TOL = 1e-2
ACCURACY_TOL = 0.02
#: Floats per host-only datagram (within a 1500-byte MTU with the 6-byte request head).
HOST_CHUNK = 350
#: The workers' retransmission timeout (s): `inswitch.torch`'s default (`INSWITCH_RTO_S`).
RTO_S = 0.002
#: How long an unleased probe waits for an answer (s), and its retransmission timeout.
PROBE_S = 0.15
PROBE_RTO_S = 0.03


class Mlp:
    """The MLP of `train_worker.build_model("mlp")` in numpy, float32: PyTorch's default
    `nn.Linear` initialisation (uniform within 1/sqrt(fan in), weights and biases), its
    cross-entropy gradient, and `torch.optim.SGD(momentum=0.9)`'s update."""

    SIZES = (64, 128, 64, 10)

    def __init__(self, seed: int, lr: float) -> None:
        rs = np.random.RandomState(seed)
        self.params: list[np.ndarray] = []
        for fan_in, fan_out in zip(self.SIZES, self.SIZES[1:]):
            b = 1.0 / np.sqrt(fan_in)
            self.params += [rs.uniform(-b, b, (fan_out, fan_in)).astype(np.float32), rs.uniform(-b, b, fan_out).astype(np.float32)]
        self.bufs = [np.zeros_like(p) for p in self.params]
        self.lr = np.float32(lr)

    @property
    def size(self) -> int:
        return sum(p.size for p in self.params)

    def logits(self, x: np.ndarray) -> np.ndarray:
        h = x
        for k in range(0, len(self.params), 2):
            h = h @ self.params[k].T + self.params[k + 1]
            if k + 2 < len(self.params):
                h = np.maximum(h, 0)
        return h

    def grad(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The mean cross-entropy's gradient on a batch, flat (parameters in order)."""
        acts = [x]
        for k in range(0, len(self.params) - 2, 2):
            acts.append(np.maximum(acts[-1] @ self.params[k].T + self.params[k + 1], 0))
        z = acts[-1] @ self.params[-2].T + self.params[-1]
        e = np.exp(z - z.max(axis=1, keepdims=True))
        d = e / e.sum(axis=1, keepdims=True)
        d[np.arange(len(y)), y] -= 1
        d /= len(y)
        out: list[np.ndarray] = []
        for k in range(len(self.params) - 2, -1, -2):
            out = [(d.T @ acts[k // 2]).reshape(-1), d.sum(axis=0)] + out
            if k:
                d = (d @ self.params[k]) * (acts[k // 2] > 0)
        return np.concatenate(out).astype(np.float32)

    def step(self, g: np.ndarray) -> None:
        k = 0
        for p, buf in zip(self.params, self.bufs):
            gi = g[k:k + p.size].reshape(p.shape)
            buf *= np.float32(0.9)
            buf += gi
            p -= self.lr * buf
            k += p.size

    def flat(self) -> np.ndarray:
        return np.concatenate([p.reshape(-1) for p in self.params])

    def accuracy(self, x: np.ndarray, y: np.ndarray) -> float:
        return float((self.logits(x).argmax(axis=1) == y).mean())


class DenseTrainApp(App):
    name = "dense"
    figure = "throughput"

    def setup(self) -> None:
        from inswitch import _native
        from inswitch.apps.allreduce.train_worker import digits_split

        cfg = self.svc.cfg  # type: ignore[attr-defined]
        self.ar: dict[str, Any] = dict(cfg["allreduce"])
        self.n = self.sz.workers
        self.t = self.tenant(self.name)
        self.members = [self.t] + [self.svc.raw.add_member(self.t, 0) for _ in range(self.n - 1)]
        self.server = self.svc.raw.add_server(0)
        self.xtr, self.ytr, self.xte, self.yte = digits_split()
        self.epochs = int(self.ar["epochs"])
        self.batch = int(self.ar["batch"])
        self.steps_per_epoch = len(self.xtr) // self.n // self.batch
        ip, port0 = cfg["ip"], int(self.ar["port_base"])
        self.workers = [_native.AllreduceWorker(f"{ip}:{port0 + w}", self.ar["dest"], int(self.ar["job"]), w, self.n, int(self.ar["slots"]), RTO_S)
                        for w in range(self.n)]
        self.results: dict[str, dict[str, Any]] = {}
        self.params = 0

    # ---- training ---------------------------------------------------------------------
    def begin(self, phase: str) -> None:
        super().begin(phase)
        if phase == "host":
            self.probes = self.probe_unleased()
            self.start_us = self.svc.now_us
        # Every replica, in both phases, from the same weights.
        self.models = [Mlp(int(self.ar["seed"]), float(self.ar["lr"])) for _ in range(self.n)]
        self.params = self.models[0].size
        self.shards = [np.arange(w, len(self.xtr), self.n) for w in range(self.n)]
        self.step_i = 0
        self.req = 0
        self.done_flag = False
        self.end_us: int | None = None
        self.failed = ""

    def grads(self) -> list[np.ndarray]:
        epoch, s = divmod(self.step_i, self.steps_per_epoch)
        out = []
        for w, m in enumerate(self.models):
            # A permutation of the worker's shard per (epoch, worker), the same in both phases.
            order = np.random.RandomState(int(self.ar["seed"]) * 1000 + epoch * 16 + w).permutation(self.shards[w])
            idx = order[s * self.batch:(s + 1) * self.batch]
            out.append(m.grad(self.xtr[idx], self.ytr[idx]))
        return out

    def through_switch(self, g: list[np.ndarray]) -> list[np.ndarray]:
        """Each replica's sum from the switch (all replicas in threads at once)."""
        out: list[Any] = [None] * self.n
        errs: list[str] = []

        def one(w: int) -> None:
            try:
                out[w] = np.asarray(self.workers[w].allreduce_f32(g[w], timeout_s=20.0), dtype=np.float32)
            except Exception as e:  # a revoked lease or a dead switch: the phase fails, said in the result
                errs.append(f"worker {w}: {e}")

        ts = [threading.Thread(target=one, args=(w,)) for w in range(self.n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        if errs:
            raise RuntimeError("; ".join(errs))
        return out

    def through_host(self, g: list[np.ndarray]) -> list[np.ndarray]:
        """The exact float sum, each gradient crossing the switch to the echo server and back
        in datagrams (resent after `BL_RTO_US` if lost)."""
        chunks = range(0, self.params, HOST_CHUNK)
        want = {}
        for w in range(self.n):
            for c in chunks:
                self.bl_send(self.members[w], self.server, self.req, g[w][c:c + HOST_CHUNK].tobytes())
                want[(w, self.req)] = c
                self.req += 1
        back = [np.zeros(self.params, np.float32) for _ in range(self.n)]
        limit = self.svc.now_us + 20_000_000
        while want and self.svc.now_us < limit:
            self.svc.poll(0.002)  # type: ignore[attr-defined]
            for w in range(self.n):
                for req, _, _, body in self.bl_take(self.members[w]):
                    c = want.pop((w, req), None)
                    if c is not None:
                        back[w][c:c + HOST_CHUNK] = np.frombuffer(body, np.float32)
        if want:
            raise RuntimeError(f"host-only: {len(want)} gradient datagrams never came back")
        s = np.sum(np.stack(back).astype(np.float64), axis=0).astype(np.float32)
        return [s] * self.n

    def step(self) -> None:
        if self.done_flag:
            return
        g = self.grads()
        try:
            sums = self.through_switch(g) if self.phase == "inaas" else self.through_host(g)
        except RuntimeError as e:
            self.failed = str(e)
            self.finish()
            return
        for w, m in enumerate(self.models):
            m.step(sums[w] / np.float32(self.n))
        self.step_i += 1
        if self.step_i >= self.epochs * self.steps_per_epoch:
            self.finish()

    def finish(self) -> None:
        self.end_us = self.svc.now_us
        self.done_flag = True
        flat = [m.flat() for m in self.models]
        acc = self.models[0].accuracy(self.xte, self.yte)
        res: dict[str, Any] = {
            "accuracy": acc, "steps": self.step_i, "weights": flat[0],
            # Every replica applied its own copy of the sum: any difference is a worker that
            # got another result.
            "replicas_identical": all(np.array_equal(flat[0], f) for f in flat[1:]),
            "failed": self.failed,
        }
        if self.phase == "inaas":
            res["switch_stats"] = [dict(w.stats()) for w in self.workers]
        self.results[self.phase] = res
        if self.phase == "host":
            self.verdict()

    def verdict(self) -> None:
        sw, ho = self.results.get("inaas"), self.results.get("host")
        if not sw or not ho:
            self.wrong += 1
            return
        self.max_weight_diff = float(np.max(np.abs(sw["weights"] - ho["weights"])))
        ok = (not sw["failed"] and not ho["failed"] and sw["replicas_identical"] and ho["replicas_identical"]
              and self.max_weight_diff < WEIGHT_TOL and abs(sw["accuracy"] - ho["accuracy"]) <= ACCURACY_TOL
              and not any(p["answered"] for p in self.probes))
        self.wrong += 0 if ok else 1

    def probe_unleased(self) -> list[dict[str, Any]]:
        """Allreduce packets under this tenant's job id once its lease is over, and under a
        job id never leased: the switch must answer neither."""
        from inswitch import _native

        cfg = self.svc.cfg  # type: ignore[attr-defined]
        out = []
        for i, (what, job) in enumerate((("own job after its lease", int(self.ar["job"])), ("never leased", int(self.ar["unleased_job"])))):
            w = _native.AllreduceWorker(f"{cfg['ip']}:{int(self.ar['port_base']) + self.n + i}", self.ar["dest"], job, 0, self.n, 1, PROBE_RTO_S)
            try:
                w.allreduce_i32(np.ones(32, np.int32), timeout_s=PROBE_S)
                answered = True
            except TimeoutError:
                answered = False
            st = dict(w.stats())
            out.append({"job": job, "what": what, "answered": answered, "packets_sent": st["packets_sent"], "packets_received": st["packets_received"]})
        return out

    def finished(self) -> bool:
        return self.done_flag

    def figure_value(self) -> float:
        n = self.n * self.params * self.step_i
        return n / max(1, (self.end_us or self.svc.now_us) - self.start_us)

    def extra(self) -> dict[str, Any]:
        sw, ho = self.results.get("inaas", {}), self.results.get("host", {})
        stats = sw.get("switch_stats") or []
        return {
            "dml_model": "mlp 64-128-64-10 on scikit-learn digits (the model of `inswitch train`, in numpy)",
            "dml_path": "switch allreduce program (SwitchML-class, quantized float32), job partition leased by the INaaS controller",
            "dml_reference": "the same seeded training, gradients summed exactly (float64) in numpy after an echo through the switch",
            "dml_workers": self.n,
            "dml_parameters": self.params,
            "dml_steps": sw.get("steps"),
            "dml_accuracy_switch": sw.get("accuracy"),
            "dml_accuracy_exact_sum": ho.get("accuracy"),
            "max_weight_diff": getattr(self, "max_weight_diff", None),
            "dml_replicas_identical": bool(sw.get("replicas_identical")) and bool(ho.get("replicas_identical")),
            "dml_failed": {k: v for k, v in (("inaas", sw.get("failed")), ("host", ho.get("failed"))) if v},
            "allreduce_job": int(self.ar["job"]),
            "allreduce_packets_sent": sum(s["packets_sent"] for s in stats),
            "allreduce_retransmissions": sum(s["retransmissions"] for s in stats),
            "unleased_probes": getattr(self, "probes", []),
        }
