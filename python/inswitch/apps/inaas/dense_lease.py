"""The INaaS controller's side of the `dense` tenant on real processes: it leases the
tenant a job partition of the switch's `allreduce` program (docs/inaas.md, "The dense
tenant trains through the allreduce program").

The lease is the job's `allreduce.jobs` entries ((ingress port, job id) -> pool base,
slots, workers, seen base, multicast group; one per port of the tenant's workers, here its
host's), written over P4Runtime in one write when the tenant's INaaS phase starts and
deleted together when it ends. Without an entry for the packet's port and job the switch
drops it at ingress stage 0, before any register, and counts it (`allreduce_unknown_job`):
that is the isolation, from other tenants' hosts during the lease as from anyone after it.
The controller keeps uid -> job id (the allreduce header's job field is 16 bits, a uid 31).
"""

from __future__ import annotations

import json
import sys
import textwrap
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
#: UDP port of the forged-port probe on the host it runs from (not the tenant's).
FORGED_SRC_PORT = 7199
#: How long the forged-port probe waits for an answer (s), and its retransmission timeout:
#: as the tenant's own probes (`dense_train.PROBE_S`, `PROBE_RTO_S`).
FORGED_WAIT_S, FORGED_RTO_S = 0.15, 0.03

#: The forged-port probe: worker 0's first contribution to slot 0 under a live job id,
#: from a host whose port is not the job's. Admitted, it would take worker 0's place in
#: that slot (the real worker's packet then a "retransmission") and stall the job.
FORGED_PROBE = textwrap.dedent('''
    import json, sys
    import numpy as np
    from inswitch import _native
    src, dest, job, n, wait_s, rto_s = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
    w = _native.AllreduceWorker(src, dest, job, 0, n, 1, rto_s)
    try:
        w.allreduce_i32(np.ones(32, np.int32), timeout_s=wait_s)
        answered = True
    except TimeoutError:
        answered = False
    print(json.dumps({"answered": answered, "packets_sent": int(dict(w.stats())["packets_sent"])}))
''')


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
        self.forged: dict[int, dict[str, Any]] = {}

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
                    ar.remove(c, spec.job)
                    self.released[i] = time.monotonic()

    def probe_forged_port(self, forger: Any) -> None:
        """While the leases hold (before the tenants start), send each leased job's id from
        `forger`, a rack host on a port none of the job's workers is on; record whether the
        switch answered and how many packets it counted as unknown-job drops meanwhile."""
        from inswitch.topology import netns

        for i, spec in self.jobs.items():
            if i not in self.granted:
                continue
            dest = f"{self.tenants[i][1].ip}:{ar.UDP_PORT}"  # across the switch, which takes the UDP port
            before = self.unknown_job_drops()
            cp = netns.in_netns(forger.netns or "", [sys.executable, "-c", FORGED_PROBE, f"{forger.ip}:{FORGED_SRC_PORT}", dest, str(spec.job),
                                                     str(self.workers), str(FORGED_WAIT_S), str(FORGED_RTO_S)], timeout=60, check=True)
            got = json.loads(cp.stdout.strip().splitlines()[-1])
            self.forged[i] = {**got, "from_port": forger.port, "drops": self.unknown_job_drops() - before}

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
            "term": "granted when the tenant's INaaS phase starts, revoked (its allreduce.jobs entries deleted) when the phase ends",
            "unleased_probe_packets": sent,
            # Every dense tenant's probes count here (the switch counts by reason, not by job).
            "unknown_job_drops_during_host_phase": drops,
            "unleased_refused": bool(probes) and not any(p["answered"] for p in probes) and drops > 0,
            **self._forged_report(i),
        }

    def _forged_report(self, i: int) -> dict[str, Any]:
        f = self.forged.get(i)
        if f is None:
            return {}
        return {"forged_port": f["from_port"], "forged_port_probe_packets": f["packets_sent"], "forged_port_drops": f["drops"],
                # Not answered, and every packet that reached the switch dropped at stage 0.
                "forged_port_refused": not f["answered"] and 0 < f["drops"] <= f["packets_sent"]}
