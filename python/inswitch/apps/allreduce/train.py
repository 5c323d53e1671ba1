"""`inswitch train`: data-parallel training with the gradients averaged in the switch or by
Gloo, the workers processes in a rack.

A rack of N hosts runs `forward,allreduce`; the controller installs one allreduce job (its
memory partition, admitted from its workers' ports only, multicast group and the workers'
addresses); each mode then starts N
`train_worker` processes, one per host, the same seed in both modes. Gloo's traffic (and the
store) goes through the same switch by `forward`; the switch's allreduce packets are taken
by their UDP port.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

MODES = ("gloo", "switch")
#: Slots of the job's pool (the window of each worker: 64 x 32 values in flight).
SLOTS = 256
WORKER_UDP_PORT = 7075
STORE_PORT = 29517


class TrainError(Exception):
    """A run that cannot start or did not finish (one line for the user)."""


@dataclass(frozen=True)
class TrainSpec:
    model: str = "mlp"
    data: str = "digits"
    workers: int = 4
    modes: tuple[str, ...] = MODES
    loss: float = 0.0
    epochs: int = 5
    seed: int = 1
    lr: float = 0.05
    batch: int = 16
    timeout_s: float = 600.0


def collect_workers(procs: list[subprocess.Popen[str]], timeout_s: float, label: str) -> list[dict[str, Any]]:
    """Each worker's last JSON line, in rank order, within one shared deadline; the first
    worker that fails or times out is a TrainError naming it (`label` r). Every worker still
    running is killed on the way out."""
    outs = []
    deadline = time.monotonic() + timeout_s
    try:
        for r, p in enumerate(procs):
            try:
                out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise TrainError(f"{label} {r} did not finish within {timeout_s:g} s") from None
            doc = _last_json(out)
            if p.returncode != 0 or doc is None:
                tail = (err.strip().splitlines() or ["(no output)"])[-1]
                raise TrainError(f"{label} {r} failed (exit {p.returncode}): {tail}")
            outs.append(doc)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return outs


def _last_json(out: str) -> dict[str, Any] | None:
    for line in reversed(out.strip().splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return None


def run_mode(spec: TrainSpec, mode: str, st: Any, workdir: Path, progress: Callable[[str], None]) -> dict[str, Any]:
    from inswitch.topology import netns

    hosts = st.hosts
    procs = []
    weights = workdir / f"weights-{mode}.pt"
    master = hosts[0].ip
    for r, h in enumerate(hosts):
        env = {
            "INSWITCH_JOB": "1",
            "INSWITCH_SLOTS": str(SLOTS),
            # Any address across the switch: the switch takes the packets by UDP port.
            "INSWITCH_DEST": f"{hosts[(r + 1) % len(hosts)].ip}:7074",
            "INSWITCH_BIND": f"{h.ip}:{WORKER_UDP_PORT}",
            "GLOO_SOCKET_IFNAME": h.ifname or "eth0",
        }
        doc = {"rank": r, "world": len(hosts), "mode": mode, "init_method": f"tcp://{master}:{STORE_PORT + (1 if mode == 'switch' else 0)}",
               "model": spec.model, "epochs": spec.epochs, "seed": spec.seed, "lr": spec.lr, "batch": spec.batch,
               "weights": str(weights), "env": env, "ifname": h.ifname or "eth0"}
        path = workdir / f"{mode}-{r}.json"
        path.write_text(json.dumps(doc))
        argv = netns.netns_argv(h.netns, [sys.executable, "-m", "inswitch.apps.allreduce.train_worker", str(path)])
        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    progress(f"{mode}: {len(procs)} workers training")
    outs = collect_workers(procs, spec.timeout_s, f"{mode}: worker")
    r0 = outs[0]
    n = len(outs)
    return {
        "final_accuracy": r0["final_accuracy"],
        "curve": r0["curve"],
        "epoch_s": sum(sum(o["epoch_s"]) for o in outs) / n / max(1, spec.epochs),
        "epoch_s_each": r0["epoch_s"],
        "allreduce_s": sum(o["allreduce_s"] for o in outs) / n,
        "allreduce_calls": r0["allreduce_calls"],
        "bytes_sent_per_worker": sum(o["bytes_sent"] for o in outs) / n,
        "bytes_received_per_worker": sum(o["bytes_received"] for o in outs) / n,
        "retransmissions": sum((o["switch"] or {}).get("retransmissions", 0) for o in outs) if mode == "switch" else None,
        "fallbacks": r0["fallbacks"],
        "weights": str(weights),
    }


def install_job(st: Any) -> None:
    from inswitch.apps.allreduce import controller
    from inswitch.p4rt import SwitchClient

    spec = controller.plan([(1, len(st.hosts))], SLOTS)[0]
    workers = [controller.WorkerAddr(port=h.port, mac=h.mac, ip=h.ip, udp_port=WORKER_UDP_PORT) for h in st.hosts]
    with SwitchClient(st.switch.p4runtime) as c:
        controller.install(c, spec, workers)


def max_weight_diff(a: str, b: str) -> float:
    import torch

    wa, wb = torch.load(a), torch.load(b)
    return max(float((wa[k] - wb[k]).abs().max()) for k in wa)


def run(spec: TrainSpec, progress: Callable[[str], None] = lambda s: None, rack_name: str | None = None) -> dict[str, Any]:
    import os

    from inswitch.topology.rack import Rack
    from inswitch.topology.state import process_tag

    if os.geteuid() != 0:
        raise TrainError("the training rack needs root (network namespaces)")
    if spec.data != "digits":
        raise TrainError(f"--data must be digits, not {spec.data!r}")
    rack = Rack()
    name = rack_name or f"tr{process_tag()}"
    rack.down(name)
    fault = f"loss={spec.loss},seed={spec.seed}" if spec.loss else None
    progress(f"building a rack of {spec.workers} hosts around the switch (forward,allreduce)")
    doc: dict[str, Any] = {"model": spec.model, "data": spec.data, "workers": spec.workers, "epochs": spec.epochs,
                           "loss": spec.loss, "seed": spec.seed, "runs": {}}
    try:
        st = rack.up(spec.workers, name=name, programs="forward,allreduce", p4runtime="127.0.0.1:0", metrics="127.0.0.1:0", fault=fault)
        install_job(st)
        with tempfile.TemporaryDirectory(prefix="inswitch-train-") as tmp:
            for mode in spec.modes:
                doc["runs"][mode] = run_mode(spec, mode, st, Path(tmp), progress)
            if all(m in doc["runs"] for m in MODES):
                doc["max_weight_diff"] = max_weight_diff(doc["runs"]["switch"]["weights"], doc["runs"]["gloo"]["weights"])
            for r in doc["runs"].values():
                r.pop("weights")
    finally:
        rack.down(name)
    return doc


def plot(doc: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for mode, r in doc["runs"].items():
        # One point per epoch (accuracy measured after it), no invented starting point.
        t = [c[0] for c in r["curve"]]
        a = [c[1] * 100 for c in r["curve"]]
        ax.plot(t, a, marker="o", label=f"{mode} (final {r['final_accuracy'] * 100:.1f}%)")
    ax.set_title(f"{doc['model']} on digits, {doc['workers']} workers" + (f", loss {doc['loss']:g}" if doc["loss"] else ""))
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel("test accuracy (%)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
