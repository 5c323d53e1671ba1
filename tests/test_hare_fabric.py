"""Hare unchanged on the ToR of its servers inside a fabric (issue 16): `inswitch kvs
--backend redis --fabric leaf-spine:2,1,3`. The storage hosts (redis-server and agent each)
and the client are one leaf's hosts; only that leaf runs `forward,hare`, under Hare's
controller (its own P4Runtime role), the spine and the other leaf `forward` under the
fabric controller, whose routing stays on the ToR too. The run is checked exactly as on a
one-switch rack: every operation recorded, no stale read, no lost write (Redis read back).

Needs root and redis-server; the fabric is named `hfb…` and always taken down."""

from __future__ import annotations

import os
import shutil

import pytest

from inswitch.apps.hare import redisrack as rr
from inswitch.topology.state import process_tag

pytestmark = [
    pytest.mark.netns,
    pytest.mark.slow,  # a fabric of three switches comes up and goes down (~15 s in all)
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: network namespaces and veth pairs"),
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed"),
]


def test_hare_on_the_tor_of_a_fabric_serves_ycsb_b_correctly() -> None:
    from inswitch.topology import netns

    p = rr.RackParams(workload="ycsb-b", records=1000, duration=3.0, clients=1, servers=2, cache=64, batch=16, shift="none", window=16,
                      fabric="leaf-spine:2,1,3", workdir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    name = f"hfb{process_tag()[-3:]}"
    with rr.RedisRack(p, name=name, first="hare") as rack:
        programs = {s.plan.name: s.plan.program for s in rack.tor.state.switches}
        r = rack.run_load("hare", rack.use("hare"))
        mode = rack.mode()
        hosts = {h.name: h.switch for h in rack.client_hosts + rack.storage_hosts}
        with rack.tor.connect() as c:  # the fabric controller's routes are still on the ToR
            routes = c.read_entries("ipv4_lpm") + c.read_entries("ipv4_ecmp")
    assert not netns.leftovers(f"{name}-")
    assert programs == {"leaf1": ",".join(rr.program_of("hare", p)), "leaf2": "forward", "spine1": "forward"}, programs
    assert set(hosts.values()) == {"leaf1"} and len(hosts) == 3
    assert mode.startswith("the ToR (leaf1) of a fabric leaf-spine:2,1,3"), mode
    assert routes, "the ToR lost the fabric's routing"
    assert r["correct"] and r["linearizable"], (r["control_errors"], r["nonlinearizable_keys"])
    assert r["stale_reads"] == 0 and r["lost_writes"] == 0
    assert r["operations"] > 500 and r["throughput_ops"] > 0
    assert r["control"]["offloads"] > 0
    # once Hare has offloaded, the ToR answers part of the GETs
    assert r["series"]["hit_rate"][-1] > 0 and r["hit_rate"] > 0
