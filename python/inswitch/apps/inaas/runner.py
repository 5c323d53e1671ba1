"""`inswitch tenants run`: applications as separate tenants of one switch, concurrently;
each against its host-only version in the same run; the ledger; an attacker.

Everything runs in process on `InaasService` (the switch model with `forward` + `inaas`,
the goalkeeper, tenant hosts and servers as ports) on simulated time: a link hop is
`hop_us`, a server spends `server_us` per request, the goalkeeper `host_us` per packet.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from inswitch.apps.inaas.adapters import APPS, QUICK, App, Sizes
from inswitch.apps.inaas.controller import Detection, Prices, bill, schedule
from inswitch.apps.inaas.service import ITEMS, READ, Service

#: Per-segment register budget the scheduler divides (a slice of the 32768 per segment,
#: small enough that the schedulers differ).
BUDGET = 512
#: Which way "speedup" is computed per application (Table II's metrics).
HIGHER_IS_BETTER = {"kv": False, "sparse": True, "dense": True, "bloom": False, "paxos": False}


def ledger_path() -> Path:
    """Where `tenants run` keeps the last ledger and `tenants ledger` finds it: beside the
    racks' state (`topology.state.run_root`), so it does not depend on the working
    directory. (`-` is never a character of a rack name, so no rack's directory is this.)"""
    from inswitch.topology.state import run_root

    return run_root() / "inaas-ledger.json"


def _attack(svc: Service, det: Detection, apps: list[App], until_us: int, rng: np.random.Generator) -> dict[str, Any]:
    """An attacker tenant: forged uids, replays of a victim's packets from its own port,
    random keys over the whole memory with its own uid. Reports detection and leaks."""
    port = svc.raw.new_port()
    att = svc.raw.add_tenant(port, "kv", 1000, 1000, False, 1000)
    victim = apps[0].t
    start = svc.now_us
    # Windows count from now: what tenants did before is not held against them.
    det.last["attacker"] = 0
    for a in apps:
        det.last[f"{a.name}#{a.inst}"] = int(svc.raw.switch_usage(a.t)["mismatches"])
    leaked = 0
    reads = 0
    flagged_at: Optional[int] = None
    step = 0
    while svc.now_us < until_us and step < 400:
        step += 1
        kind = step % 3
        if kind == 0:
            svc.raw.inject_raw(port, svc.raw.forge_uid_frame(att, int(rng.integers(1, 2**31 - 1)), int(rng.integers(0, ITEMS)), int(rng.integers(0, 512)), int(rng.integers(1, 2**31))))
        elif kind == 1:
            segs = list(range(ITEMS))
            f = svc.raw.forge_frame(victim, bytes(segs), np.arange(ITEMS, dtype="<u2").tobytes(), bytes([READ] * ITEMS), np.arange(1, ITEMS + 1, dtype="<u4").tobytes(), bytes(4 * ITEMS))
            svc.raw.inject_raw(port, f)
        else:
            idxs = rng.integers(0, BUDGET, size=ITEMS)
            keys = rng.integers(1, 4000, size=ITEMS)
            svc.submit(att, list(range(ITEMS)), idxs, [READ] * ITEMS, keys, [0] * ITEMS)
            reads += ITEMS
        svc.run_for(2)
        d = svc.take(att)
        # The attacker wrote nothing: anything it reads back is someone else's.
        leaked += int(((d.status == 1) & (d.value != 0)).sum())
        mism = svc.raw.switch_usage(att)["mismatches"] + svc.raw.forged_on_port(port)
        if (svc.now_us - start) % det.window_us < 2 or step % 25 == 0:
            if det.observe(svc.now_us, "attacker", int(mism)) and flagged_at is None:
                flagged_at = svc.now_us
            for a in apps:
                det.observe(svc.now_us, f"{a.name}#{a.inst}", int(svc.raw.switch_usage(a.t)["mismatches"]))
    svc.run(100_000)
    d = svc.take(att)
    leaked += int(((d.status == 1) & (d.value != 0)).sum())
    return {
        "detected": flagged_at is not None,
        "detection_time_us": (flagged_at - start) if flagged_at is not None else None,
        "attacker_reads": reads,
        "attacker_values_leaked": leaked,
        "forged_on_port": int(svc.raw.forged_on_port(port)),
        "attacker_mismatches": int(svc.raw.switch_usage(att)["mismatches"]),
        "legitimate_tenants_flagged": sorted(n for n in det.flagged if n != "attacker"),
        "log": det.log,
    }


def run_tenants(
    apps: list[str],
    instances: int = 1,
    scheduler: str = "inaas",
    loss: float = 0.0,
    attacker: bool = False,
    quick: bool = True,
    seed: int = 1,
    progress: Callable[[str], None] = lambda s: None,
    budget: int = BUDGET,
    subscribers: tuple[str, ...] = (),
) -> dict[str, Any]:
    sizes = QUICK if quick else Sizes()
    rng = np.random.default_rng(seed)
    svc = Service(ports=8 + 12 * len(apps) * instances, seed=seed)
    names = [a for a in apps for _ in range(instances)]
    regions = schedule(scheduler, names, budget, [a in subscribers for a in names])
    objs: list[App] = []
    counter: dict[str, int] = {}
    for a, r in zip(names, regions):
        i = counter.get(a, 0)
        counter[a] = i + 1
        app = APPS[a](svc, r, i, sizes, rng)
        app.setup()
        objs.append(app)
    progress("set up")
    svc.set_loss(loss)
    results: dict[str, dict[str, float]] = {}
    for phase in ("inaas", "host"):
        for o in objs:
            o.prepare(phase)
        svc.run(100_000)
        for o in objs:
            o.begin(phase)
        t0 = svc.now_us
        limit = t0 + (200_000 if quick else 2_000_000)
        while not all(o.finished() for o in objs) and svc.now_us < limit:
            for o in objs:
                if not o.finished():
                    o.step()
            svc.run_for(1)
        for o in objs:
            if hasattr(o, "check") and phase == "inaas":
                o.check()
            results.setdefault(f"{o.name}#{o.inst}", {})[phase] = o.figure_value()
        progress(f"{phase} phase done")
    svc.set_loss(0.0)
    out_apps: dict[str, Any] = {}
    for o in objs:
        key = o.name if instances == 1 else f"{o.name}#{o.inst}"
        r = results[f"{o.name}#{o.inst}"]
        inaas, host = r["inaas"], r["host"]
        speed = (inaas / host) if HIGHER_IS_BETTER[o.name] else (host / inaas)
        fig = {
            "metric": o.figure,
            "inaas": inaas,
            "host_only": host,
            "unit": "items/us" if HIGHER_IS_BETTER[o.name] else "us",
            "speedup": speed,
            "wrong_results": o.wrong,
            "finished": o.finished(),
            "correct": o.wrong == 0 and o.finished(),
        }
        if hasattr(o, "extra"):
            fig.update(o.extra())
        fig["client"] = dict(svc.raw.client_stats(o.t))
        out_apps[key] = fig
    det = Detection()
    attack = _attack(svc, det, objs, svc.now_us + 2_000, rng) if attacker else None
    prices = Prices()
    ledger = []
    run_us = svc.now_us
    # The model's own goalkeeper's holds (per tenant index): from when it got each grant.
    held = svc.raw.goalkeeper_held_us(run_us)
    for o, r in zip(objs, regions):
        usage = dict(svc.raw.switch_usage(o.t))
        line = bill(f"{o.name}#{o.inst}", usage, int(svc.raw.goalkeeper_leases(o.t)), r, prices, run_us,
                    held_us=held.get(o.t, 0), clock="model: the goalkeeper's grant log on simulated time")
        ledger.append(line)
    per_app: dict[str, list[float]] = {}
    for o in objs:
        per_app.setdefault(o.name, []).append(out_apps[o.name if instances == 1 else f"{o.name}#{o.inst}"]["speedup"])
    return {
        **tenants_result(out_apps, per_app, instances, scheduler, subscribers, loss,
                         "model: in-process switch (forward + inaas), goalkeeper, tenants and servers on simulated time",
                         int(sum(o.foreign for o in objs)), attack, ledger),
        "model": {"hop_us": 1, "goalkeeper_us_per_packet": 2, "server_us_per_request": sizes.server_us, "budget_registers_per_segment": budget},
        "goalkeeper": dict(svc.raw.goalkeeper_stats()),
        "switch": {
            "violations": int(svc.raw.violations()),
            "recirculations": int(svc.raw.recirculations()),
            "malformed_drops": int(svc.raw.drops("malformed")),
            "forged_uid_drops": int(svc.raw.drops("inaas_forged_uid")),
            "lost_frames": int(svc.raw.lost_frames()),
        },
        "simulated_us": svc.now_us,
    }


def tenants_result(out_apps: dict[str, Any], per_app: dict[str, list[float]], instances: int, scheduler: str, subscribers: Any, loss: float,
                   mode: str, foreign: int, attack: Optional[dict[str, Any]], ledger: list[dict[str, Any]]) -> dict[str, Any]:
    """The keys every `tenants run` result has, the model's and the real one's alike:
    per-application figures, the run's settings, `mode`, cross-tenant violations (reads of
    another tenant's values, `foreign`, plus what an attacker got), the attack, the ledger."""
    return {
        "apps": out_apps,
        "speedup_by_app": {k: float(np.mean(v)) for k, v in per_app.items()},
        "instances": instances,
        "scheduler": scheduler,
        "subscribers": list(subscribers),
        "loss": loss,
        "mode": mode,
        "cross_tenant_violations": foreign + (attack["attacker_values_leaked"] if attack else 0),
        "attacker_detected": bool(attack["detected"]) if attack else None,
        "attack": attack,
        "ledger": ledger,
        "ledger_adds_up": all(line["adds_up"] for line in ledger),
    }


def save_ledger(result: dict[str, Any], path: Path | None = None) -> Path:
    """Write the ledger (atomically) and return where."""
    from inswitch.output import replace_json

    return replace_json(path or ledger_path(), {"ledger": result["ledger"], "scheduler": result["scheduler"], "instances": result["instances"],
                                                 "mode": result.get("mode", "")})
