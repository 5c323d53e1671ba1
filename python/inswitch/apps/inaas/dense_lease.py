"""The INaaS controller's side of the `dense` tenant on real processes: it leases the
tenant a job partition of the switch's `allreduce` program (docs/inaas.md, "The dense
tenant trains through the allreduce program").

The lease is the job's `allreduce.jobs` entries ((ingress port, job id) -> pool base,
slots, workers, seen base, multicast group, the port's worker ids; one per port of the
tenant's workers, here its host's, which allows all their ids), written over P4Runtime in one write when the tenant's INaaS phase starts and
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
    worker = int(sys.argv[7]) if len(sys.argv) > 7 else 0
    w = _native.AllreduceWorker(src, dest, job, worker, n, 1, rto_s)
    try:
        w.allreduce_i32(np.ones(32, np.int32), timeout_s=wait_s)
        answered = True
    except TimeoutError:
        answered = False
    print(json.dumps({"answered": answered, "packets_sent": int(dict(w.stats())["packets_sent"])}))
''')

#: The forged-worker probe's job: a one-slot job of the controller's own (no tenant is
#: given this id) laid out as the dense tenant is, its first `workers` ids on the tenant's
#: host port, plus one more id on the forger's port. From that port, a legitimate one for
#: the job, the forger sends as worker 0 (an id of the tenant's port) and then under its
#: own id: the switch must drop the first (`allreduce_worker_not_on_port`) and admit the
#: second (absorbed: the slot waits for the others). The dense tenant's own job has one
#: port, which allows all its ids, so it cannot show the check itself.
WORKER_PROBE_JOB = 0x7FFE


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
        self.forged_worker: dict[str, Any] | None = None

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

    def probe_forged_worker(self, forger: Any) -> None:
        """Install the forged-worker probe's job (`WORKER_PROBE_JOB`: ids 0..workers-1 on
        the first dense tenant's host port, id `workers` on `forger`'s), send from
        `forger` as worker 0 and then as itself, record the switch's answer and drops for
        each, and remove the job."""
        from inswitch.p4rt import SwitchClient

        if not self.jobs:
            return
        i = min(self.jobs)
        host, last = self.tenants[i][1], self.jobs[max(self.jobs)]
        n = self.workers + 1
        spec = ar.JobSpec(job=WORKER_PROBE_JOB, slots=1, pool_base=last.pool_base + last.slots,
                          seen_base=last.seen_base + last.slots * self.workers, group=last.group + 1, rid_base=last.rid_base + self.workers)
        addrs = self._addrs(i) + [ar.WorkerAddr(port=forger.port, mac=forger.mac, ip=forger.ip, udp_port=FORGED_SRC_PORT)]
        dest = f"{host.ip}:{ar.UDP_PORT}"
        with SwitchClient(self.p4runtime) as c:
            ar.install(c, spec, addrs)
            try:
                out: dict[str, Any] = {"job": spec.job, "port": forger.port, "port_ids": [self.workers, self.workers],
                                       "tenant_port": host.port, "tenant_port_ids": [0, self.workers - 1]}
                for what, worker in (("forged", 0), ("own", self.workers)):
                    before = (self.drops("allreduce_worker_not_on_port"), self.drops("allreduce_absorbed"))
                    got = self._probe(forger, dest, spec.job, n, worker)
                    out[what] = {**got, "worker": worker, "not_on_port_drops": self.drops("allreduce_worker_not_on_port") - before[0],
                                 "absorbed": self.drops("allreduce_absorbed") - before[1]}
            finally:
                ar.remove(c, spec.job)
                c.delete_multicast_group(spec.group)
        self.forged_worker = out

    def _probe(self, forger: Any, dest: str, job: int, n: int, worker: int) -> dict[str, Any]:
        from inswitch.topology import netns

        cp = netns.in_netns(forger.netns or "", [sys.executable, "-c", FORGED_PROBE, f"{forger.ip}:{FORGED_SRC_PORT}", dest, str(job),
                                                 str(n), str(FORGED_WAIT_S), str(FORGED_RTO_S), str(worker)], timeout=60, check=True)
        return dict(json.loads(cp.stdout.strip().splitlines()[-1]))

    def drops(self, reason: str) -> int:
        """The switch's drop counter for `reason` (every port, every job)."""
        from inswitch.topology.control import scrape_metrics

        return int(sum(v for name, labels, v in scrape_metrics(self.metrics)
                       if name == "inswitch_drops_total" and labels.get("reason") == reason))

    def unknown_job_drops(self) -> int:
        return self.drops("allreduce_unknown_job")

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
                "forged_port_refused": not f["answered"] and 0 < f["drops"] <= f["packets_sent"],
                **self._forged_worker_report()}

    def _forged_worker_report(self) -> dict[str, Any]:
        f = self.forged_worker
        if f is None:
            return {}
        forged, own = f["forged"], f["own"]
        return {"forged_worker_job": f["job"], "forged_worker_port": f["port"], "forged_worker_id": forged["worker"],
                "forged_worker_port_ids": f["port_ids"], "forged_worker_tenant_port": f["tenant_port"],
                "forged_worker_tenant_port_ids": f["tenant_port_ids"],
                "forged_worker_probe_packets": forged["packets_sent"], "forged_worker_drops": forged["not_on_port_drops"],
                # The same port's own id is admitted (absorbed, never counted as not on port):
                # the drop is the id's, not the port's.
                "forged_worker_own_id_packets": own["packets_sent"], "forged_worker_own_id_absorbed": own["absorbed"],
                "forged_worker_own_id_admitted": not own["answered"] and own["not_on_port_drops"] == 0 and own["absorbed"] > 0,
                # Not answered, and every packet that reached the switch dropped before `seen`.
                "forged_worker_refused": not forged["answered"] and 0 < forged["not_on_port_drops"] <= forged["packets_sent"]}
