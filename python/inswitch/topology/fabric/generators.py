"""Topology generators and the SPEC every `fabric` command takes: `leaf-spine:L,S,H` (L
leaves, S spines, H hosts per leaf), `fat-tree:K` (Al-Fares et al.: K pods of K/2 edge and
K/2 aggregation switches, (K/2)^2 cores, K/2 hosts per edge), or a topology file."""

from __future__ import annotations

from pathlib import Path

from inswitch.topology.fabric.model import (
    HOST_KIND, SWITCH_KIND, Endpoint, Link, Machine, Node, Topology, TopologyError, parse_topology, validate)

MAX_SWITCH_PORTS = 64


def leaf_spine(leaves: int, spines: int, hosts_per_leaf: int, name: str = "leafspine") -> Topology:
    if not (1 <= leaves <= 32 and 1 <= spines <= 16 and 1 <= hosts_per_leaf <= 32):
        raise TopologyError("leaf-spine:LEAVES,SPINES,HOSTS_PER_LEAF takes 1-32 leaves, 1-16 spines, 1-32 hosts per leaf")
    nodes: dict[str, Node] = {}
    links: list[Link] = []
    for s in range(1, spines + 1):
        nodes[f"spine{s}"] = Node(f"spine{s}", SWITCH_KIND)
    for lf in range(1, leaves + 1):
        nodes[f"leaf{lf}"] = Node(f"leaf{lf}", SWITCH_KIND)
    h = 0
    for lf in range(1, leaves + 1):
        for i in range(1, hosts_per_leaf + 1):
            h += 1
            nodes[f"h{h}"] = Node(f"h{h}", HOST_KIND)
            links.append(Link(Endpoint(f"leaf{lf}", f"p{i}"), Endpoint(f"h{h}", "eth0")))
        for s in range(1, spines + 1):
            links.append(Link(Endpoint(f"leaf{lf}", f"p{hosts_per_leaf + s}"), Endpoint(f"spine{s}", f"p{lf}")))
    t = Topology(name=name, nodes=nodes, links=links, source=f"leaf-spine:{leaves},{spines},{hosts_per_leaf}")
    validate(t)
    return t


def fat_tree(k: int, name: str = "fattree") -> Topology:
    if k < 2 or k % 2 or k > 8:
        raise TopologyError(f"fat-tree:K takes an even K from 2 to 8, not {k}")
    half = k // 2
    nodes: dict[str, Node] = {}
    links: list[Link] = []
    for c in range(1, half * half + 1):
        nodes[f"core{c}"] = Node(f"core{c}", SWITCH_KIND)
    h = 0
    for pod in range(k):
        for i in range(half):
            nodes[f"agg{pod * half + i + 1}"] = Node(f"agg{pod * half + i + 1}", SWITCH_KIND)
        for i in range(half):
            edge = f"edge{pod * half + i + 1}"
            nodes[edge] = Node(edge, SWITCH_KIND)
            for j in range(half):
                h += 1
                nodes[f"h{h}"] = Node(f"h{h}", HOST_KIND)
                links.append(Link(Endpoint(edge, f"p{j + 1}"), Endpoint(f"h{h}", "eth0")))
            for a in range(half):  # edge i, uplink a -> agg a of the pod, its downlink i
                links.append(Link(Endpoint(edge, f"p{half + a + 1}"), Endpoint(f"agg{pod * half + a + 1}", f"p{i + 1}")))
        for a in range(half):  # agg a -> cores a*half+1 .. a*half+half, each on its port pod+1
            for j in range(half):
                links.append(Link(Endpoint(f"agg{pod * half + a + 1}", f"p{half + j + 1}"),
                                  Endpoint(f"core{a * half + j + 1}", f"p{pod + 1}")))
    t = Topology(name=name, nodes=nodes, links=links, source=f"fat-tree:{k}")
    validate(t)
    return t


def _ints(text: str, n: int, spec: str) -> list[int]:
    parts = text.split(",")
    if len(parts) != n or not all(p.strip().isdigit() for p in parts):
        raise TopologyError(f"bad topology spec {spec!r}: expected {n} comma-separated numbers after the colon")
    return [int(p) for p in parts]


def load_spec(spec: str) -> Topology:
    """A generator spec or a topology file, validated."""
    kind, sep, rest = spec.partition(":")
    if sep and kind == "leaf-spine":
        return leaf_spine(*_ints(rest, 3, spec))
    if sep and kind == "fat-tree":
        return fat_tree(*_ints(rest, 1, spec))
    path = Path(spec)
    if not path.is_file():
        raise TopologyError(f"topology {spec!r} is neither leaf-spine:L,S,H, fat-tree:K nor a readable file")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise TopologyError(f"cannot read topology file {spec}: {e}") from None
    return parse_topology(text, source=str(path))


def split_machines(t: Topology, machines: int) -> Topology:
    """`t` spread over `machines` machines `m1..mN`: the leaves (switches with hosts) dealt
    round-robin, each host on its leaf's machine, the other switches dealt round-robin too;
    `machines` lists each with a placeholder underlay address 192.0.2.N (TEST-NET-1: fine
    for `--emulate-machines`, to be replaced by the real addresses on real machines). The
    links between machines become VXLAN links."""
    if not 2 <= machines <= 16:
        raise TopologyError(f"a fabric is split over 2-16 machines, not {machines}")
    leaf_of = {}
    for ln in t.links:
        for me, other in ((ln.a, ln.b), (ln.b, ln.a)):
            if not t.nodes[me.node].is_switch:
                leaf_of[me.node] = other.node
    leaves = [s.name for s in t.switches if s.name in leaf_of.values()]
    others = [s.name for s in t.switches if s.name not in leaves]
    if len(t.switches) < machines:
        raise TopologyError(f"{t.source} has {len(t.switches)} switches: too few for {machines} machines")
    where = {name: f"m{i % machines + 1}" for i, name in enumerate(leaves)}
    where.update({name: f"m{i % machines + 1}" for i, name in enumerate(others)})
    where.update({h: where[sw] for h, sw in leaf_of.items()})
    nodes = {n.name: Node(**{**n.__dict__, "machine": where[n.name]}) for n in t.nodes.values()}
    ms = {f"m{i}": Machine(f"m{i}", f"192.0.2.{i}") for i in range(1, machines + 1)}
    out = Topology(name=t.name, nodes=nodes, links=list(t.links), source=t.source, machines=ms)
    validate(out)
    return out
