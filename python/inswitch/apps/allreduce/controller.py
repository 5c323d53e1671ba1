"""Install an allreduce job on a switch through P4Runtime.

A job gets a partition of the switch's memory (`slots` slots from `pool_base`, and
`slots * workers` seen-cells from `seen_base`), one `jobs` entry per port of its workers
(key (ingress port, job id), the same partition in each: the switch admits the job's
packets only from those ports; each entry also names the worker ids of that port,
`worker_range` = first << 16 | count, and the switch drops any other id from it as
`allreduce_worker_not_on_port`: so the workers of one port must have contiguous ids, their
positions in the `workers` list), a multicast group of its workers' ports, and
one `worker_addr` entry per worker (replica id -> MAC, IPv4, UDP port, and the switch's
source addresses) so each multicast copy of a result reaches its worker's socket. The constants mirror
`crates/programs/src/allreduce/mod.rs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from inswitch.p4rt.client import SwitchClient, Update

#: Slots shared by the jobs of one switch (`POOL_SLOTS`).
POOL_SLOTS = 16384
#: Seen-cells (`SEEN_CELLS`): a job takes slots x workers of them.
SEEN_CELLS = 1 << 19
#: Replica ids `worker_addr` holds (`MAX_REPLICAS`).
MAX_REPLICAS = 4096
#: UDP port the switch takes allreduce packets on (`wire::allreduce::UDP_PORT`).
UDP_PORT = 7074


@dataclass(frozen=True)
class WorkerAddr:
    """Where a worker is: its switch port, MAC, IPv4 address and UDP port."""

    port: int
    mac: str
    ip: str
    udp_port: int


@dataclass(frozen=True)
class JobSpec:
    job: int
    slots: int
    pool_base: int
    seen_base: int
    group: int
    rid_base: int

    def check(self, workers: int) -> None:
        if not 1 <= self.slots <= 65535 or self.pool_base + self.slots > POOL_SLOTS:
            raise ValueError(f"job {self.job}: slots [{self.pool_base}, +{self.slots}) beyond the switch's {POOL_SLOTS}")
        if self.seen_base + self.slots * workers > SEEN_CELLS:
            raise ValueError(f"job {self.job}: {self.slots} slots x {workers} workers beyond the {SEEN_CELLS} seen-cells")
        if self.rid_base + workers > MAX_REPLICAS:
            raise ValueError(f"job {self.job}: replica ids beyond {MAX_REPLICAS}")


def plan(jobs: Sequence[tuple[int, int]], slots: int) -> list[JobSpec]:
    """Partitions for jobs `(job id, workers)` side by side, `slots` slots each."""
    out, pool, seen, rid = [], 0, 0, 0
    for i, (job, workers) in enumerate(jobs):
        spec = JobSpec(job=job, slots=slots, pool_base=pool, seen_base=seen, group=100 + i, rid_base=rid)
        spec.check(workers)
        out.append(spec)
        pool, seen, rid = pool + slots, seen + slots * workers, rid + workers
    return out


#: The source of the switch's multicast results: an address no worker has (a worker's own
#: address as a source is a "martian" its kernel drops).
SWITCH_MAC = "02:00:00:00:fe:fe"


def switch_ip(workers: Sequence[WorkerAddr]) -> str:
    """An address in the workers' /24 that none of them has (the highest free one)."""
    import ipaddress

    used = {w.ip for w in workers}
    net = ipaddress.ip_network(f"{workers[0].ip}/24", strict=False)
    for a in reversed(list(net.hosts())):
        if str(a) not in used:
            return str(a)
    raise ValueError("no free address for the switch in the workers' subnet")


#: The fields of `allreduce.jobs`'s key.
JOB_PORT_FIELD, JOB_FIELD = "ig_intr_md.ingress_port", "hdr.allreduce.job"


def job_ports(workers: Sequence[WorkerAddr]) -> list[int]:
    """The switch ports a job's `jobs` entries are keyed on: one per port of its workers."""
    return sorted({w.port for w in workers})


def port_ranges(workers: Sequence[WorkerAddr]) -> dict[int, tuple[int, int]]:
    """Port -> (first worker id, workers on it): worker `i` is `workers[i]`. The switch
    checks a packet's worker id against its port's range (one subtract and compare), so
    a port's workers must be contiguous in `workers`; refused (ValueError) otherwise."""
    out: dict[int, tuple[int, int]] = {}
    for i, w in enumerate(workers):
        first, n = out.get(w.port, (i, 0))
        if first + n != i:
            raise ValueError(f"workers on port {w.port} are not contiguous (ids {first}..{first + n - 1} and {i}): "
                             "give each host's workers consecutive ids")
        out[w.port] = (first, n + 1)
    return out


def worker_range(first: int, count: int) -> int:
    """The `worker_range` action parameter: first worker id << 16 | workers on the port
    (one 32-bit parameter, as a `set_job` has at most six)."""
    return first << 16 | count


def remove(client: SwitchClient, job: int) -> int:
    """Delete every `jobs` entry of `job` (all its ports) at once; how many there were.
    Its packets are then dropped at ingress stage 0 (`allreduce_unknown_job`)."""
    ups = []
    for e in client.read_entries("allreduce.jobs"):
        if e["match"].get(JOB_FIELD) == job:
            ups.append(client.table_update(Update.DELETE, "allreduce.jobs", e["match"]))
    if ups:
        client.write(ups)
    return len(ups)


def install(client: SwitchClient, spec: JobSpec, workers: Sequence[WorkerAddr]) -> None:
    """Write the job's entries and group (replacing any left by an earlier job of that id)."""
    src_ip = switch_ip(workers)
    spec.check(len(workers))
    ranges = port_ranges(workers)
    remove(client, spec.job)
    old = {next(iter(e["match"].values())) for e in client.read_entries("allreduce.worker_addr")}
    for i, w in enumerate(workers):
        rid = spec.rid_base + i
        if rid in old:
            client.delete_entry("allreduce.worker_addr", {"eg_intr_md.rid": rid})
        client.insert_entry("allreduce.worker_addr", {"eg_intr_md.rid": rid}, "allreduce.set_addr",
                            {"mac": w.mac, "ip": w.ip, "port": w.udp_port, "src_mac": SWITCH_MAC, "src_ip": src_ip})
    client.set_multicast_group(spec.group, [(w.port, spec.rid_base + i) for i, w in enumerate(workers)])
    # Every port's entry in one write, after the group and addresses it points to; each
    # with its port's worker ids.
    params = {"pool_base": spec.pool_base, "slots": spec.slots, "workers": len(workers), "seen_base": spec.seen_base, "group": spec.group}
    client.write([client.table_update(Update.INSERT, "allreduce.jobs", {JOB_PORT_FIELD: p, JOB_FIELD: spec.job}, "allreduce.set_job",
                                      {**params, "worker_range": worker_range(*ranges[p])})
                  for p in job_ports(workers)])
