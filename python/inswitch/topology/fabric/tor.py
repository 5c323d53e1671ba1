"""An application on the ToR of its hosts inside a fabric (INaaS's `tenants rack --fabric`,
Hare's `kvs --backend redis --fabric`): the fabric comes up with one leaf running the
application's program set and every other switch `forward`; the fabric controller installs
the routing on all of them, as always, and again on one the supervisor restarts. The
application's controller only adds its own state on the ToR (and again after a restart of
that switch, which `restarts.read(Tor.state.restarts_file)` shows with `switch`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ContextManager

from inswitch.topology.fabric.fabric import Fabric, FabricState, SwitchRun
from inswitch.topology.fabric.model import Topology
from inswitch.topology.fabric.plan import HostPlan


@dataclass
class Tor:
    """A fabric that is up, and the leaf the application runs on."""

    state: FabricState
    run: SwitchRun
    #: The ToR's hosts (in the fabric's order), and every other leaf's.
    hosts: list[HostPlan]
    others: list[HostPlan]

    @property
    def name(self) -> str:
        return self.run.plan.name

    def connect(self, wait_s: float = 10.0) -> ContextManager[Any]:
        """A P4Runtime session on the ToR as the fabric controller (its election id on the
        default role): for what the application installs between the fabric's writes."""
        from inswitch.topology import control
        from inswitch.topology.fabric.controller import ELECTION_ID

        return control.connect(self.run.p4runtime, device_id=self.run.plan.device_id, election_id=ELECTION_ID, wait_s=wait_s)

    def program_routing(self) -> None:
        """The fabric controller's routing on the ToR again (after its pipeline was replaced)."""
        from inswitch.topology.fabric import controller
        from inswitch.topology.fabric.plan import routes

        topo, plan = self.state.topo(), self.state.plan()
        controller.program_switch(topo, plan, self.run.plan, self.run.p4runtime, routes(topo, plan)[self.name])

    def down(self) -> None:
        Fabric().down(self.state.name)


def leaves(topo: Topology) -> dict[str, list[str]]:
    """The switches with hosts attached (leaves), in the topology's order, and their hosts."""
    hosts = {n.name for n in topo.hosts}
    under: dict[str, list[str]] = {}
    for ln in topo.links:
        for e, o in ((ln.a, ln.b), (ln.b, ln.a)):
            if o.node in hosts and e.node not in hosts:
                under.setdefault(e.node, []).append(o.node)
    return under


def leaf_with(topo: Topology, need: int) -> str | None:
    """The first switch with at least `need` hosts attached (None: there is none)."""
    return next((sw for sw, hs in leaves(topo).items() if len(hs) >= need), None)


def up(spec: str, name: str, program: str, need: int, fault: str | None = None, tor: str | None = None) -> Tor:
    """Bring up a fabric of `spec` whose first leaf with at least `need` hosts (or the
    leaf `tor`) runs `program` (it must include `forward`, the routing) and every other
    switch `forward`."""
    from inswitch.topology.fabric.generators import load_spec

    topo = load_spec(spec)
    if tor is None:
        tor = leaf_with(topo, need)
    elif len(leaves(topo).get(tor, [])) < need:
        raise ValueError(f"{spec}: {tor} has fewer than {need} hosts")
    if tor is None:
        raise ValueError(f"{spec} has no leaf with {need} hosts")
    for n in topo.switches:
        n.program = program if n.name == tor else "forward"
    fab = Fabric()
    fab.down(name)
    try:
        st = fab.up(topo, name=name, fault=fault)
    except BaseException:
        fab.down(name)
        raise
    run = next(r for r in st.switches if r.plan.name == tor)
    return Tor(st, run, [h for h in st.hosts if h.switch == tor], [h for h in st.hosts if h.switch != tor])
