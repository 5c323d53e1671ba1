"""The fabric controller: one P4Runtime client per switch (primary by election id on each),
installing the routing `plan.routes` computes (see `plan.py`):

- `l2_dmac`: each own host's MAC -> its port; the switch's router MAC -> `l3_route`
- `l2_smac`: own hosts' and neighbouring routers' MACs -> `nop` (no learning digests)
- multicast group 1 (the flood group): the switch's host ports only, so ARP stays in a leaf
- `ipv4_lpm`: one next hop -> `set_nexthop`; several -> an ECMP group of the action
  selector (`ipv4_ecmp`, members `set_nexthop`, hashed on the 5-tuple), when the program has it
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from inswitch.topology import control
from inswitch.topology.errors import RackError
from inswitch.topology.fabric.model import Topology
from inswitch.topology.fabric.plan import FabricPlan, NextHop, Route, SwitchPlan, routes

#: The controller's election id on every switch (a second controller with a higher one
#: would take over; `status` reads as a backup and never contends).
ELECTION_ID = (0, 10)
ECMP_TABLE = "ipv4_ecmp"
ECMP_PROFILE = "ecmp_selector"


def _neighbours(topo: Topology, plan: FabricPlan, sw: SwitchPlan) -> set[str]:
    by_name = {s.name: s for s in plan.switches}
    out = set()
    for ln in topo.links:
        for me, other in ((ln.a, ln.b), (ln.b, ln.a)):
            if me.node == sw.name and other.node in by_name:
                out.add(by_name[other.node].mac)
    return out


def _hop_params(h: NextHop) -> dict[str, Any]:
    return {"port": h.port, "dmac": h.dmac, "smac": h.smac}


def has_ecmp(c: Any) -> bool:
    p4 = c.p4info()
    return any(t.preamble.name.endswith(ECMP_TABLE) for t in p4.tables) and \
        any(a.preamble.name.endswith(ECMP_PROFILE) for a in p4.action_profiles)


def install_routes(c: Any, rts: list[Route], ecmp: bool) -> int:
    """Install `rts` on one switch (inside the caller's batch); returns the ECMP groups made."""
    groups = 0
    members: dict[tuple[int, str, str], int] = {}
    for r in rts:
        if len(r.nexthops) == 1 or not ecmp:
            # Without a selector a multi-path route takes its first next hop (no ECMP).
            c.insert_entry("ipv4_lpm", {"hdr.ipv4.dst_addr": r.prefix}, "set_nexthop", _hop_params(r.nexthops[0]))
            continue
        ids = []
        for h in r.nexthops:
            key = (h.port, h.dmac, h.smac)
            if key not in members:
                members[key] = len(members) + 1
                c.insert_member(ECMP_PROFILE, members[key], "set_nexthop", _hop_params(h))
            ids.append(members[key])
        groups += 1
        c.insert_group(ECMP_PROFILE, groups, ids)
        c.insert_entry(ECMP_TABLE, {"hdr.ipv4.dst_addr": r.prefix}, group=groups)
    return groups


def program_switch(topo: Topology, plan: FabricPlan, sw: SwitchPlan, address: str, rts: list[Route]) -> dict[str, int]:
    hosts = [h for h in plan.hosts if h.switch == sw.name]
    with control.sigint_deferred(), control.connect(address, device_id=sw.device_id, election_id=ELECTION_ID,
                                                     wait_s=10.0) as c:
        try:
            ecmp = has_ecmp(c)
            with c.batch():
                for h in hosts:
                    c.insert_entry("l2_dmac", {"hdr.ethernet.dst_addr": h.mac}, "l2_forward", {"port": h.port})
                    c.insert_entry("l2_smac", {"hdr.ethernet.src_addr": h.mac}, "nop", {})
                c.insert_entry("l2_dmac", {"hdr.ethernet.dst_addr": sw.mac}, "l3_route", {})
                for mac in sorted(_neighbours(topo, plan, sw)):
                    c.insert_entry("l2_smac", {"hdr.ethernet.src_addr": mac}, "nop", {})
            with c.batch():
                groups = install_routes(c, rts, ecmp)
            if hosts:
                c.set_multicast_group(control.FLOOD_GROUP, sorted(h.port for h in hosts))
        except RackError:
            raise
        except Exception as e:  # P4RuntimeError, KeyError for a program without these tables
            raise RackError(f"programming switch {sw.name} through P4Runtime ({address}) failed: {e}") from e
    return {"routes": len(rts), "ecmp_groups": groups, "hosts": len(hosts)}


def program_fabric(topo: Topology, plan: FabricPlan, addresses: dict[str, str],
                   only: set[str] | None = None) -> dict[str, dict[str, int]]:
    """Program every switch (a few at a time: each is its own process), or those named in
    `only` (a machine's part of a fabric across machines); per switch, what was installed."""
    rts = routes(topo, plan)
    with ThreadPoolExecutor(max_workers=4) as ex:
        futs = {sw.name: ex.submit(program_switch, topo, plan, sw, addresses[sw.name], rts[sw.name])
                for sw in plan.switches if only is None or sw.name in only}
        return {name: f.result() for name, f in futs.items()}
