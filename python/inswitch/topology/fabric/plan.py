"""What `fabric up` builds from a topology: kernel interface names, host addresses and MACs,
switch port numbers and router MACs, and the routes the controller installs.

Routing (the controller installs it, see `controller.py`): a *leaf* is a switch with hosts.
Hosts of one leaf share a subnet and reach each other at L2 (the leaf's `l2_dmac`, ARP
flooded to the leaf's host ports only, so no broadcast enters the fabric and switch loops
are harmless). Everything else is routed: a host's default gateway is its leaf's router
MAC, and every switch holds, per leaf subnet, the shortest-path next hops towards that leaf
(one: a direct `set_nexthop`; several: an ECMP group over them); a leaf holds a /32 per own
host.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Optional

from inswitch.topology.fabric.model import Endpoint, LinkProps, Topology, TopologyError

#: Interface names are at most 15 bytes: `{fabric}-s{switch}p{port}` must fit.
MAX_FABRIC_NAME = 6


def router_mac(index: int) -> str:
    return f"02:fa:00:00:{index >> 8:02x}:{index & 0xFF:02x}"


def host_mac(index: int) -> str:
    return f"02:00:00:00:{index >> 8:02x}:{index & 0xFF:02x}"


@dataclass
class SwitchPlan:
    name: str
    index: int  # 1-based; also the P4Runtime device id
    program: str
    pipes: int
    p4runtime_port: int  # 0: any free port
    mac: str  # router MAC (hosts' gateway, next-hop MAC for neighbours)
    ifaces: list[str]  # kernel interface of each data-plane port, in port order
    port_names: list[str]  # the topology's interface names (p1, ...), same order
    machine: Optional[str] = None

    @property
    def device_id(self) -> int:
        return self.index


@dataclass
class HostPlan:
    name: str
    index: int
    netns: str
    ifname: str
    mac: str
    ip: str
    prefix_len: int
    gateway: str
    gateway_mac: str
    switch: str
    port: int
    switch_if: str
    machine: Optional[str] = None
    #: UDP mode: the switch port's UDP address the host attaches to, and the host's own
    #: address (its "NIC"), the only source that switch port accepts.
    tunnel: Optional[str] = None
    tunnel_nic: Optional[str] = None


@dataclass
class LinkPlan:
    """One link as built: each end's kernel interface and the namespace it lives in (None:
    the root namespace, where switch ports are)."""

    endpoints: str  # "s1:p1 -- h1:eth0"
    a_if: str
    a_netns: Optional[str]
    b_if: str
    b_netns: Optional[str]
    props: LinkProps = field(default_factory=LinkProps)
    host_link: bool = False
    #: A link between machines: each end is a kernel VXLAN device with this VNI on its
    #: machine (a_if on a_machine, b_if on b_machine), tunnelling to the other's underlay.
    vni: Optional[int] = None
    a_machine: Optional[str] = None
    b_machine: Optional[str] = None
    #: UDP mode: each end's UDP address on loopback (the ends are each other's fixed peers).
    a_udp: Optional[str] = None
    b_udp: Optional[str] = None


@dataclass
class NextHop:
    port: int
    dmac: str
    smac: str


@dataclass
class Route:
    prefix: str  # "10.0.2.0/24" or "10.0.1.3/32"
    nexthops: list[NextHop]


@dataclass
class FabricPlan:
    name: str
    switches: list[SwitchPlan]
    hosts: list[HostPlan]
    links: list[LinkPlan]

    def switch(self, name: str) -> SwitchPlan:
        return next(s for s in self.switches if s.name == name)


def kernel_if(fabric: str, sw_index: int, iface: str) -> str:
    return f"{fabric}-s{sw_index}{iface}"


def plan_fabric(t: Topology, fabric: str, link_default: LinkProps = LinkProps()) -> FabricPlan:
    if len(fabric) > MAX_FABRIC_NAME:
        raise TopologyError(f"fabric name {fabric!r} is longer than {MAX_FABRIC_NAME} characters "
                            "(it prefixes interface names, at most 15 bytes)")
    switches: list[SwitchPlan] = []
    for i, s in enumerate(t.switches, start=1):
        names = t.switch_ports(s.name)
        switches.append(SwitchPlan(name=s.name, index=i, program=s.program, pipes=s.pipes,
                                   p4runtime_port=s.p4runtime or 0, mac=router_mac(i),
                                   ifaces=[kernel_if(fabric, i, n) for n in names], port_names=names,
                                   machine=s.machine))
    by_name = {s.name: s for s in switches}
    ports = set(s.p4runtime_port for s in switches if s.p4runtime_port)
    if len(ports) != len([s for s in switches if s.p4runtime_port]):
        raise TopologyError(f"{t.source}: two switches ask for the same p4runtime port")
    hosts = _plan_hosts(t, fabric, by_name)
    links = []
    for ln in t.links:
        ends = []
        for ep in (ln.a, ln.b):
            if ep.node in by_name:
                ends.append((kernel_if(fabric, by_name[ep.node].index, ep.iface), None))
            else:
                ends.append((ep.iface, f"{fabric}-{ep.node}"))
        host_link = any(ns is not None for _, ns in ends)
        am, bm = t.link_machines(ln)
        links.append(LinkPlan(endpoints=f"{ln.a} -- {ln.b}", a_if=ends[0][0], a_netns=ends[0][1],
                              b_if=ends[1][0], b_netns=ends[1][1], props=ln.props.over(link_default),
                              host_link=host_link, vni=t.vni_of(ln) if am != bm else None,
                              a_machine=am, b_machine=bm))
    return FabricPlan(name=fabric, switches=switches, hosts=hosts, links=links)


def _plan_hosts(t: Topology, fabric: str, by_name: dict[str, SwitchPlan]) -> list[HostPlan]:
    attach: dict[str, Endpoint] = {}  # host -> its switch endpoint
    host_if: dict[str, str] = {}
    for ln in t.links:
        for me, other in ((ln.a, ln.b), (ln.b, ln.a)):
            if me.node not in by_name:
                attach[me.node] = other
                host_if[me.node] = me.iface
    leaves = [s for s in by_name.values() if any(ep.node == s.name for ep in attach.values())]
    subnets: dict[str, ipaddress.IPv4Network] = {}
    for leaf in leaves:
        given = [ipaddress.IPv4Interface(h.ipv4) for h in t.hosts if h.ipv4 and attach[h.name].node == leaf.name]
        nets = {g.network for g in given}
        if len(nets) > 1:
            raise TopologyError(f"{t.source}: the hosts of leaf {leaf.name} are in different subnets "
                                f"({', '.join(map(str, sorted(nets)))}); a leaf's hosts share one subnet")
        subnets[leaf.name] = nets.pop() if nets else ipaddress.IPv4Network(f"10.0.{len(subnets) + 1}.0/24")
    items = list(subnets.items())
    for i, (a, na) in enumerate(items):
        for b, nb in items[i + 1:]:
            if na.overlaps(nb):
                raise TopologyError(f"{t.source}: the subnets of leaves {a} ({na}) and {b} ({nb}) overlap")
    out: list[HostPlan] = []
    taken: dict[str, set[ipaddress.IPv4Address]] = {leaf: set() for leaf in subnets}
    for h in t.hosts:
        if h.ipv4:
            ip = ipaddress.IPv4Interface(h.ipv4).ip
            if ip in taken[attach[h.name].node]:
                raise TopologyError(f"{t.source}:{h.line}: host {h.name}: address {ip} is taken")
            taken[attach[h.name].node].add(ip)
    for n, h in enumerate(t.hosts, start=1):
        sw = by_name[attach[h.name].node]
        net = subnets[sw.name]
        usable = list(net.hosts())
        if h.ipv4:
            ip = ipaddress.IPv4Interface(h.ipv4).ip
        else:
            free = [a for a in usable[:-1] if a not in taken[sw.name]]
            if not free:
                raise TopologyError(f"{t.source}:{h.line}: subnet {net} of leaf {sw.name} has no address left for {h.name}")
            ip = free[0]
            taken[sw.name].add(ip)
        gw = usable[-1]
        if gw in taken[sw.name]:
            raise TopologyError(f"{t.source}:{h.line}: {gw}, the last address of {net}, is leaf {sw.name}'s gateway")
        out.append(HostPlan(name=h.name, index=n, netns=f"{fabric}-{h.name}", ifname=host_if[h.name],
                            mac=h.mac or host_mac(n), ip=str(ip), prefix_len=net.prefixlen, gateway=str(gw),
                            gateway_mac=sw.mac, switch=sw.name, port=sw.port_names.index(attach[h.name].iface),
                            switch_if=kernel_if(fabric, sw.index, attach[h.name].iface), machine=h.machine))
    macs = [h.mac for h in out]
    if len(set(macs)) != len(macs):
        raise TopologyError(f"{t.source}: two hosts have the same MAC address")
    return out


def routes(t: Topology, plan: FabricPlan) -> dict[str, list[Route]]:
    """Per switch, its IPv4 routes (see the module docstring)."""
    by_name = {s.name: s for s in plan.switches}
    adj: dict[str, list[tuple[int, str]]] = {s.name: [] for s in plan.switches}  # (port, neighbour)
    for ln in t.links:
        if ln.a.node in by_name and ln.b.node in by_name:
            adj[ln.a.node].append((t.port_of(ln.a), ln.b.node))
            adj[ln.b.node].append((t.port_of(ln.b), ln.a.node))
    out: dict[str, list[Route]] = {s.name: [] for s in plan.switches}
    leaves: dict[str, list[HostPlan]] = {}
    for h in plan.hosts:
        leaves.setdefault(h.switch, []).append(h)
    for leaf, hosts in leaves.items():
        net = ipaddress.IPv4Interface(f"{hosts[0].ip}/{hosts[0].prefix_len}").network
        me = by_name[leaf]
        for h in hosts:
            out[leaf].append(Route(f"{h.ip}/32", [NextHop(h.port, h.mac, me.mac)]))
        dist = {leaf: 0}
        frontier = [leaf]
        while frontier:
            nxt = []
            for s in frontier:
                for _, nb in adj[s]:
                    if nb not in dist:
                        dist[nb] = dist[s] + 1
                        nxt.append(nb)
            frontier = nxt
        for s in plan.switches:
            if s.name == leaf:
                continue
            hops = [NextHop(port, by_name[nb].mac, s.mac) for port, nb in sorted(adj[s.name])
                    if dist.get(nb, -1) == dist[s.name] - 1]
            out[s.name].append(Route(str(net), hops))
    return out
