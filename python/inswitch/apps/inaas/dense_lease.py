"""The INaaS controller's side of the `dense` tenant on real processes: it leases the
tenant a job partition of the switch's `allreduce` program (docs/inaas.md, "The dense
tenant trains through the allreduce program").

The lease is the job's `allreduce.jobs` entry (job id -> pool base, slots, workers, seen
base, multicast group), written over P4Runtime when the tenant's INaaS phase starts and
deleted when it ends. Without the entry the switch drops the tenant's packets at ingress
stage 0, before any register, and counts them (`allreduce_unknown_job`): that is the
isolation. The controller keeps uid -> job id (the allreduce header's job field is 16 bits,
a uid 31).
"""

from __future__ import annotations

import time
from typing import Any

from inswitch.apps.allreduce import controller as ar

#: Slots of each dense job (the worker's window: 64 x 32 values in flight, as `inswitch train`).
SLOTS = 256
#: First UDP port of the tenant's workers on its host (one per worker, then two probes).
PORT_BASE = 7100
#: A job id no tenant is ever given: the never-leased probe's.
UNLEASED_JOB = 0x7FFF
#: The digits MLP's training per phase: (epochs, batch per worker, learning rate) at quick
#: sizes (22 steps of 4 workers: about 80 % accuracy, and 2-3 s of a shared 2-core machine)
#: and full sizes (`inswitch train`'s defaults: 110 steps).
TRAINING = {True: (2, 32, 0.2), False: (5, 16, 0.05)}


class DenseLeases:
    def __init__(self, p4runtime: str, metrics: str, tenants: dict[int, tuple[int, Any]], workers: int) -> None:
        """`tenants`: tenant index -> (uid, its rack host), for every dense tenant."""
        self.p4runtime, self.metrics, self.tenants, self.workers = p4runtime, metrics, tenants, workers
        specs = ar.plan([(1 + i, workers) for i in sorted(tenants)], SLOTS)
        self.jobs: dict[int, ar.JobSpec] = dict(zip(sorted(tenants), specs))
        self.granted: dict[int, float] = {}
        self.released: dict[int, float] = {}
        self.drops_before = 0
        self.drops_after = 0

    def job_config(self, i: int, server_ip: str, seed: int, quick: bool) -> dict[str, Any]:
        """What the tenant's process needs: its job id, window, where to send (any address
        across the switch: the switch takes allreduce packets by UDP port)."""
        return {"job": self.jobs[i].job, "slots": SLOTS, "dest": f"{server_ip}:{ar.UDP_PORT}", "port_base": PORT_BASE,
                "epochs": TRAINING[quick][0], "batch": TRAINING[quick][1], "lr": TRAINING[quick][2], "seed": seed, "unleased_job": UNLEASED_JOB}

    def _addrs(self, i: int) -> list[ar.WorkerAddr]:
        h = self.tenants[i][1]
        # Every worker of the tenant is on its one host: one replica id per worker, all on
        # the host's port, each to its own UDP port.
        return [ar.WorkerAddr(port=h.port, mac=h.mac, ip=h.ip, udp_port=PORT_BASE + w) for w in range(self.workers)]

    def grant_all(self) -> None:
        from inswitch.p4rt import SwitchClient

        if not self.jobs:
            return
        with SwitchClient(self.p4runtime) as c:
            for i, spec in self.jobs.items():
                ar.install(c, spec, self._addrs(i))
                self.granted[i] = time.monotonic()

    def revoke_all(self) -> None:
        from inswitch.p4rt import SwitchClient

        if not self.jobs:
            return
        with SwitchClient(self.p4runtime) as c:
            for i, spec in self.jobs.items():
                if i in self.granted and i not in self.released:
                    c.delete_entry("allreduce.jobs", {"hdr.allreduce.job": spec.job})
                    self.released[i] = time.monotonic()

    def unknown_job_drops(self) -> int:
        from inswitch.topology.control import scrape_metrics

        return int(sum(v for name, labels, v in scrape_metrics(self.metrics)
                       if name == "inswitch_drops_total" and labels.get("reason") == "allreduce_unknown_job"))

    def report(self, i: int, probes: list[dict[str, Any]]) -> dict[str, Any]:
        spec = self.jobs[i]
        sent = sum(int(p["packets_sent"]) for p in probes)
        drops = self.drops_after - self.drops_before
        return {
            "uid": self.tenants[i][0], "job": spec.job, "slots": spec.slots, "pool_base": spec.pool_base, "seen_base": spec.seen_base,
            "workers": self.workers, "group": spec.group,
            "held_s": (self.released[i] - self.granted[i]) if i in self.released and i in self.granted else None,
            "term": "granted when the tenant's INaaS phase starts, revoked (its allreduce.jobs entry deleted) when the phase ends",
            "unleased_probe_packets": sent,
            # Every dense tenant's probes count here (the switch counts by reason, not by job).
            "unknown_job_drops_during_host_phase": drops,
            "unleased_refused": bool(probes) and not any(p["answered"] for p in probes) and drops > 0,
        }
