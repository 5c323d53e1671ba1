"""A fabric's topology: switches (`kind: inswitch`), hosts (`kind: linux`) and the links
between them, read from and written to the containerlab topology format (YAML):

    name: lab
    topology:
      nodes:
        leaf1: {kind: inswitch, program: forward, p4runtime: 9560, pipes: 1}
        h1:    {kind: linux, ipv4: 10.0.1.1/24}
      links:
        - endpoints: ["leaf1:p1", "h1:eth0"]
          delay: 1ms
          rate: 100mbit

Across machines (an inswitch extension of the format): every node names its `machine`, the
top-level `machines` gives each machine's underlay address, and a link between nodes on
two machines becomes a kernel VXLAN link (`vni` optional, unique per link):

    machines:
      m1: {underlay: 192.168.1.10}
      m2: {underlay: 192.168.1.11}

Everything is checked before anything is made, and every error names the file's line
(the loader keeps each key's and item's line). A switch interface is `pN` (N >= 1); the
switch's data-plane ports are its interfaces in the order of N, so `status` shows both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Optional

import yaml

from inswitch.topology.errors import RackError

SWITCH_KIND = "inswitch"
HOST_KIND = "linux"
TOP_KEYS = {"name", "prefix", "mgmt", "topology", "machines"}
MACHINE_KEYS = {"underlay"}
TOPOLOGY_KEYS = {"nodes", "links", "defaults", "kinds"}
SWITCH_KEYS = {"kind", "program", "p4runtime", "pipes", "machine", "image"}
HOST_KEYS = {"kind", "ipv4", "mac", "machine", "image"}
LINK_KEYS = {"endpoints", "delay", "jitter", "rate", "loss", "vni"}
#: VXLAN: the IANA port, and the VNI of the N-th link (0-based) of the file unless it sets `vni`.
VXLAN_PORT = 4789
VNI_BASE = 4096
MAX_VNI = (1 << 24) - 1
_NODE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,23}$")
_SWITCH_IF = re.compile(r"^p([1-9][0-9]{0,2})$")
_HOST_IF = re.compile(r"^[a-z][a-z0-9]{0,14}$")


class TopologyError(RackError):
    """A topology file or generator spec that cannot be built; says where (file:line)."""


# ---- YAML with line numbers --------------------------------------------------------------


class LineDict(dict):  # type: ignore[type-arg]
    """A mapping that remembers its own line and each key's line (1-based)."""

    line: int = 0
    lines: dict[Any, int]


class LineList(list):  # type: ignore[type-arg]
    line: int = 0
    lines: list[int]


class _Loader(yaml.SafeLoader):
    pass


def _mapping(loader: _Loader, node: yaml.MappingNode) -> LineDict:
    d = LineDict()
    d.line, d.lines = node.start_mark.line + 1, {}
    for k_node, v_node in node.value:
        k = loader.construct_object(k_node, deep=True)
        if k in d:
            raise TopologyError(f"line {k_node.start_mark.line + 1}: key {k!r} given twice "
                                f"(first on line {d.lines[k]})")
        d[k] = loader.construct_object(v_node, deep=True)
        d.lines[k] = k_node.start_mark.line + 1
    return d


def _sequence(loader: _Loader, node: yaml.SequenceNode) -> LineList:
    lst = LineList(loader.construct_object(n, deep=True) for n in node.value)
    lst.line, lst.lines = node.start_mark.line + 1, [n.start_mark.line + 1 for n in node.value]
    return lst


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _sequence)


def load_yaml(text: str, source: str = "<topology>") -> Any:
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except TopologyError as e:
        raise TopologyError(f"{source}: {e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        raise TopologyError(f"{source}: {where}not valid YAML ({getattr(e, 'problem', None) or e})") from None


# ---- the model ----------------------------------------------------------------------------


_UNITS_S = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
_UNITS_BPS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9}


def parse_time_ms(text: Any) -> float:
    """`1ms`, `250us`, `0.5s` (or a bare number of ms) -> milliseconds."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        v = float(text)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(s|ms|us)\s*", str(text))
        if not m:
            raise ValueError(f"{text!r} is not a time (e.g. 1ms, 250us, 0.5s)")
        v = float(m.group(1)) * _UNITS_S[m.group(2)] * 1e3
    if not 0 <= v <= 60_000:
        raise ValueError(f"{text!r} is outside 0..60s")
    return v


def parse_rate_mbit(text: Any) -> float:
    """`100mbit`, `1gbit`, `500kbit` (or a bare number of Mbit/s) -> Mbit/s."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        v = float(text)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(bit|kbit|mbit|gbit)\s*", str(text).lower())
        if not m:
            raise ValueError(f"{text!r} is not a rate (e.g. 100mbit, 1gbit, 500kbit)")
        v = float(m.group(1)) * _UNITS_BPS[m.group(2)] / 1e6
    if not 0 < v <= 100_000:
        raise ValueError(f"{text!r} is outside (0, 100gbit]")
    return v


def parse_loss_pct(text: Any) -> float:
    """`0.5%` (or a bare number of percent) -> percent."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        v = float(text)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*%?\s*", str(text))
        if not m:
            raise ValueError(f"{text!r} is not a loss percentage (e.g. 0.5%)")
        v = float(m.group(1))
    if not 0 <= v <= 100:
        raise ValueError(f"{text!r} is outside 0..100%")
    return v


@dataclass(frozen=True)
class LinkProps:
    """What `tc` applies on each end of a link (so in each direction): netem for delay,
    jitter and loss, tbf for a rate alone. None: not set."""

    delay_ms: Optional[float] = None
    jitter_ms: Optional[float] = None
    rate_mbit: Optional[float] = None
    loss_pct: Optional[float] = None

    def is_empty(self) -> bool:
        return all(v is None for v in (self.delay_ms, self.jitter_ms, self.rate_mbit, self.loss_pct))

    def over(self, default: "LinkProps") -> "LinkProps":
        """These properties, each unset one taken from `default`."""
        return LinkProps(*(a if a is not None else b for a, b in zip(self.astuple(), default.astuple())))

    def astuple(self) -> tuple[Optional[float], ...]:
        return (self.delay_ms, self.jitter_ms, self.rate_mbit, self.loss_pct)

    def to_yaml(self) -> dict[str, str]:
        out = {}
        if self.delay_ms is not None:
            out["delay"] = f"{self.delay_ms:g}ms"
        if self.jitter_ms is not None:
            out["jitter"] = f"{self.jitter_ms:g}ms"
        if self.rate_mbit is not None:
            out["rate"] = f"{self.rate_mbit:g}mbit"
        if self.loss_pct is not None:
            out["loss"] = f"{self.loss_pct:g}%"
        return out

    def describe(self) -> str:
        parts = []
        if self.delay_ms is not None:
            parts.append(f"delay {self.delay_ms:g}ms" + (f"±{self.jitter_ms:g}ms" if self.jitter_ms else ""))
        if self.rate_mbit is not None:
            parts.append(f"rate {self.rate_mbit:g}mbit")
        if self.loss_pct is not None:
            parts.append(f"loss {self.loss_pct:g}%")
        return ", ".join(parts) or "-"


def parse_link_props(d: dict[str, Any], where: str) -> LinkProps:
    """Link properties from a mapping with keys delay/jitter/rate/loss (`where` prefixes
    errors; a [`LineDict`] names each key's own line instead)."""
    vals: dict[str, Optional[float]] = {}
    for key, fn, attr in (("delay", parse_time_ms, "delay_ms"), ("jitter", parse_time_ms, "jitter_ms"),
                          ("rate", parse_rate_mbit, "rate_mbit"), ("loss", parse_loss_pct, "loss_pct")):
        if key in d:
            try:
                vals[attr] = fn(d[key])
            except ValueError as e:
                at = f"{where.rsplit(':', 2)[0]}:{d.lines[key]}: " if isinstance(d, LineDict) and where else where
                raise TopologyError(f"{at}{key}: {e}") from None
    props = LinkProps(**vals)
    if props.jitter_ms and props.delay_ms is None:
        raise TopologyError(f"{where}jitter needs a delay")
    return props


@dataclass
class Node:
    name: str
    kind: str
    line: int = 0
    program: str = "forward"
    p4runtime: Optional[int] = None  # TCP port; None: any free one
    pipes: int = 1
    ipv4: Optional[str] = None  # "A.B.C.D/LEN"
    mac: Optional[str] = None
    machine: Optional[str] = None

    @property
    def is_switch(self) -> bool:
        return self.kind == SWITCH_KIND

    def to_yaml(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        if self.is_switch:
            out["program"] = self.program
            if self.p4runtime is not None:
                out["p4runtime"] = self.p4runtime
            if self.pipes != 1:
                out["pipes"] = self.pipes
        else:
            if self.ipv4:
                out["ipv4"] = self.ipv4
            if self.mac:
                out["mac"] = self.mac
        if self.machine:
            out["machine"] = self.machine
        return out


@dataclass(frozen=True)
class Endpoint:
    node: str
    iface: str

    def __str__(self) -> str:
        return f"{self.node}:{self.iface}"


@dataclass
class Link:
    a: Endpoint
    b: Endpoint
    props: LinkProps = field(default_factory=LinkProps)
    line: int = 0
    vni: Optional[int] = None  # VXLAN network identifier (a link between machines)

    def to_yaml(self) -> dict[str, Any]:
        return {"endpoints": [str(self.a), str(self.b)], **self.props.to_yaml(),
                **({"vni": self.vni} if self.vni is not None else {})}


@dataclass
class Machine:
    """A machine a multi-machine fabric spans: its underlay address (where its VXLAN links
    end and its switches serve P4Runtime)."""

    name: str
    underlay: Optional[str] = None
    line: int = 0

    def to_yaml(self) -> dict[str, Any]:
        return {"underlay": self.underlay} if self.underlay else {}


@dataclass
class Topology:
    name: str
    nodes: dict[str, Node]
    links: list[Link]
    source: str = "<topology>"
    #: The top-level `machines` section (may be empty even when nodes name machines).
    machines: dict[str, Machine] = field(default_factory=dict)

    @property
    def machine_names(self) -> list[str]:
        """The machines the nodes name, sorted (empty: one machine)."""
        return sorted({n.machine for n in self.nodes.values() if n.machine})

    def link_machines(self, ln: Link) -> tuple[Optional[str], Optional[str]]:
        return self.nodes[ln.a.node].machine, self.nodes[ln.b.node].machine

    def is_cross(self, ln: Link) -> bool:
        """Whether the link joins two machines (a VXLAN link)."""
        a, b = self.link_machines(ln)
        return a != b

    def vni_of(self, ln: Link) -> int:
        return ln.vni if ln.vni is not None else VNI_BASE + self.links.index(ln)

    @property
    def switches(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.is_switch]

    @property
    def hosts(self) -> list[Node]:
        return [n for n in self.nodes.values() if not n.is_switch]

    def switch_ports(self, name: str) -> list[str]:
        """A switch's interfaces in data-plane port order (port i is the i-th)."""
        ifs = [ep.iface for ln in self.links for ep in (ln.a, ln.b) if ep.node == name]
        return sorted(ifs, key=lambda s: int(s[1:]))

    def port_of(self, ep: Endpoint) -> int:
        return self.switch_ports(ep.node).index(ep.iface)

    def to_yaml(self) -> str:
        doc: dict[str, Any] = {"name": self.name}
        if self.machines:
            doc["machines"] = {m.name: m.to_yaml() for m in self.machines.values()}
        doc["topology"] = {"nodes": {n.name: n.to_yaml() for n in self.nodes.values()},
                           "links": [ln.to_yaml() for ln in self.links]}
        return yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=120)


# ---- parsing and validation ---------------------------------------------------------------


def _at(source: str, line: int) -> str:
    return f"{source}:{line}: "


def _check_keys(d: LineDict, allowed: set[str], what: str, source: str) -> None:
    for k in d:
        if k not in allowed:
            raise TopologyError(f"{_at(source, d.lines[k])}unknown key {k!r} in {what} "
                                f"(allowed: {', '.join(sorted(allowed))})")


def _need(d: Any, typ: type, what: str, source: str, line: int) -> Any:
    if not isinstance(d, typ):
        kind = "a mapping" if typ is dict else "a list" if typ is list else typ.__name__
        raise TopologyError(f"{_at(source, line)}{what} must be {kind}")
    return d


def parse_topology(text: str, source: str = "<topology>") -> Topology:
    """Parse and validate a containerlab-format topology; the first problem raises
    [`TopologyError`] naming its line."""
    doc = load_yaml(text, source)
    _need(doc, dict, "the file", source, 1)
    _check_keys(doc, TOP_KEYS, "the file", source)
    name = doc.get("name")
    if not isinstance(name, str) or not name:
        raise TopologyError(f"{_at(source, doc.lines.get('name', doc.line))}`name` must be a non-empty string")
    topo = _need(doc.get("topology"), dict, "`topology`", source, doc.lines.get("topology", doc.line))
    _check_keys(topo, TOPOLOGY_KEYS, "`topology`", source)
    nodes_raw = _need(topo.get("nodes"), dict, "`topology.nodes`", source, topo.lines.get("nodes", topo.line))
    nodes: dict[str, Node] = {}
    for nname, nd in nodes_raw.items():
        line = nodes_raw.lines[nname]
        nname = str(nname)
        if not _NODE_NAME.match(nname):
            raise TopologyError(f"{_at(source, line)}bad node name {nname!r}: 1-24 letters, digits, _ starting with a letter")
        if nname.lower() in (n.lower() for n in nodes):
            raise TopologyError(f"{_at(source, line)}duplicate node name {nname!r}")
        nodes[nname] = _parse_node(nname, _need(nd, dict, f"node {nname}", source, line), source, line)
    links_raw = _need(topo.get("links", LineList()), list, "`topology.links`", source, topo.lines.get("links", topo.line))
    links = []
    for i, ld in enumerate(links_raw):
        line = links_raw.lines[i]
        links.append(_parse_link(_need(ld, dict, "a link", source, line), source, line))
    machines = _parse_machines(doc, source)
    t = Topology(name=name, nodes=nodes, links=links, source=source, machines=machines)
    validate(t)
    return t


def _parse_machines(doc: LineDict, source: str) -> dict[str, Machine]:
    if "machines" not in doc:
        return {}
    raw = _need(doc["machines"], dict, "`machines`", source, doc.lines["machines"])
    out: dict[str, Machine] = {}
    seen: dict[str, str] = {}
    for mname, md in raw.items():
        line = raw.lines[mname]
        mname = str(mname)
        if not _NODE_NAME.match(mname):
            raise TopologyError(f"{_at(source, line)}bad machine name {mname!r}: letters, digits, _ starting with a letter")
        md = _need(md if md is not None else LineDict(), dict, f"machine {mname}", source, line)
        _check_keys(md, MACHINE_KEYS, f"machine {mname}", source)
        m = Machine(mname, line=line)
        if "underlay" in md:
            at = _at(source, md.lines["underlay"])
            m.underlay = _check_underlay(md["underlay"], at, mname)
            if m.underlay in seen:
                raise TopologyError(f"{at}machine {mname}: underlay {m.underlay} is machine {seen[m.underlay]}'s too")
            seen[m.underlay] = mname
        out[mname] = m
    return out


def _check_underlay(v: Any, at: str, machine: str) -> str:
    import ipaddress

    try:
        a = ipaddress.IPv4Address(str(v)) if isinstance(v, str) else None
    except ValueError:
        a = None
    if a is None or a.is_multicast or a.is_unspecified or a.is_loopback or str(a) == "255.255.255.255":
        raise TopologyError(f"{at}machine {machine}: underlay must be the machine's unicast IPv4 address "
                            f"(e.g. 192.168.1.10), not {v!r}")
    return str(a)


def _parse_node(name: str, d: LineDict, source: str, line: int) -> Node:
    kind = d.get("kind")
    if kind not in (SWITCH_KIND, HOST_KIND):
        raise TopologyError(f"{_at(source, d.lines.get('kind', line))}node {name}: kind must be "
                            f"{SWITCH_KIND} (a switch) or {HOST_KIND} (a host), not {kind!r}")
    _check_keys(d, SWITCH_KEYS if kind == SWITCH_KIND else HOST_KEYS, f"{kind} node {name}", source)
    n = Node(name=name, kind=kind, line=line)

    def val(key: str, typ: type, check: Any = None) -> Any:
        v = d[key]
        at = _at(source, d.lines[key])
        if not isinstance(v, typ) or isinstance(v, bool):
            raise TopologyError(f"{at}node {name}: {key} must be {typ.__name__}, not {v!r}")
        if check is not None:
            try:
                return check(v)
            except ValueError as e:
                raise TopologyError(f"{at}node {name}: {key}: {e}") from None
        return v

    if "program" in d:
        n.program = val("program", str, _check_programs)
    if "p4runtime" in d:
        n.p4runtime = val("p4runtime", int, lambda v: _in_range(v, 1, 65535))
    if "pipes" in d:
        n.pipes = val("pipes", int, lambda v: _in_range(v, 1, 16))
    if "ipv4" in d:
        n.ipv4 = val("ipv4", str, _check_ipv4)
    if "mac" in d:
        n.mac = val("mac", str, _check_mac)
    if "machine" in d:
        n.machine = val("machine", str, lambda v: v if _NODE_NAME.match(v) else _bad("a machine name is letters, digits, _"))
    return n


def _bad(msg: str) -> Any:
    raise ValueError(msg)


def _in_range(v: int, lo: int, hi: int) -> int:
    if not lo <= v <= hi:
        raise ValueError(f"{v} is outside {lo}..{hi}")
    return v


def _check_programs(v: str) -> str:
    from inswitch.cliopts import PROGRAMS

    if PROGRAMS.check is None:  # pragma: no cover - PROGRAMS always has its check
        return v
    names = PROGRAMS.check(v).split(",")  # ValueError naming the problem
    if "forward" not in names:
        raise ValueError("a fabric switch runs `forward` (its routing), alone or with other programs")
    return ",".join(names)


def _check_ipv4(v: str) -> str:
    import ipaddress

    try:
        iface = ipaddress.IPv4Interface(v)
    except ValueError as e:
        raise ValueError(f"{e} (expected e.g. 10.0.1.1/24)") from None
    if "/" not in v or iface.network.prefixlen > 30 or iface.ip in (iface.network.network_address, iface.network.broadcast_address):
        raise ValueError(f"{v!r} is not a host address with a prefix of at most /30 (e.g. 10.0.1.1/24)")
    return str(iface)


def _check_mac(v: str) -> str:
    if not re.fullmatch(r"([0-9a-fA-F]{2}:){5}[0-9a-fA-F]{2}", v) or int(v[:2], 16) & 1:
        raise ValueError(f"{v!r} is not a unicast MAC address")
    return v.lower()


def _parse_link(d: LineDict, source: str, line: int) -> Link:
    _check_keys(d, LINK_KEYS, "a link", source)
    eps = d.get("endpoints")
    at = _at(source, d.lines.get("endpoints", line))
    if not isinstance(eps, list) or len(eps) != 2 or not all(isinstance(e, str) for e in eps):
        raise TopologyError(f"{at}a link's endpoints must be two strings NODE:IFACE, e.g. [\"s1:p1\", \"h1:eth0\"]")
    parsed = []
    for e in eps:
        node, sep, iface = e.partition(":")
        if not sep or not node or not iface:
            raise TopologyError(f"{at}endpoint {e!r} is not NODE:IFACE")
        parsed.append(Endpoint(node, iface))
    vni = None
    if "vni" in d:
        v = d["vni"]
        if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= MAX_VNI:
            raise TopologyError(f"{_at(source, d.lines['vni'])}a link's vni must be an integer 1..{MAX_VNI}, not {v!r}")
        vni = v
    return Link(parsed[0], parsed[1], parse_link_props(d, at), line, vni)


def validate(t: Topology) -> None:
    """Whole-topology checks: endpoints exist and are well named, no interface used twice,
    no link to itself, every host on exactly one switch, every switch reaches every other."""
    src = t.source
    used: dict[Endpoint, int] = {}
    host_links: dict[str, list[int]] = {}
    for ln in t.links:
        at = _at(src, ln.line)
        if ln.a.node == ln.b.node:
            raise TopologyError(f"{at}link {ln.a} -- {ln.b} connects {ln.a.node} to itself")
        for ep in (ln.a, ln.b):
            node = t.nodes.get(ep.node)
            if node is None:
                raise TopologyError(f"{at}dangling endpoint {ep}: there is no node {ep.node!r}")
            if node.is_switch and not _SWITCH_IF.match(ep.iface):
                raise TopologyError(f"{at}endpoint {ep}: a switch interface is pN (N 1-999), not {ep.iface!r}")
            if not node.is_switch and not _HOST_IF.match(ep.iface):
                raise TopologyError(f"{at}endpoint {ep}: bad interface name {ep.iface!r}")
            if ep in used:
                raise TopologyError(f"{at}interface {ep} is already used by the link on line {used[ep]}")
            used[ep] = ln.line
            if not node.is_switch:
                host_links.setdefault(ep.node, []).append(ln.line)
        if not t.nodes[ln.a.node].is_switch and not t.nodes[ln.b.node].is_switch:
            raise TopologyError(f"{at}link {ln.a} -- {ln.b} joins two hosts; hosts attach to switches")
    for h in t.hosts:
        lines = host_links.get(h.name, [])
        if not lines:
            raise TopologyError(f"{_at(src, h.line)}host {h.name} has no link")
        if len(lines) > 1:
            raise TopologyError(f"{_at(src, lines[1])}host {h.name} is on a second link (first on line {lines[0]}): "
                                "a host on two switches closes a loop that L2 flooding within a leaf cannot handle")
    if not t.switches:
        raise TopologyError(f"{_at(src, 1)}the topology has no switch (kind: {SWITCH_KIND})")
    _check_connected(t)
    _check_machines(t)


def _check_connected(t: Topology) -> None:
    adj: dict[str, set[str]] = {s.name: set() for s in t.switches}
    for ln in t.links:
        if ln.a.node in adj and ln.b.node in adj:
            adj[ln.a.node].add(ln.b.node)
            adj[ln.b.node].add(ln.a.node)
    first = t.switches[0].name
    seen, todo = {first}, [first]
    while todo:
        for nb in adj[todo.pop()]:
            if nb not in seen:
                seen.add(nb)
                todo.append(nb)
    for s in t.switches:
        if s.name not in seen:
            raise TopologyError(f"{_at(t.source, s.line)}switch {s.name} is not connected to switch {first}: "
                                "routing needs one connected fabric")


def _check_machines(t: Topology) -> None:
    machines = {n.machine for n in t.nodes.values()}
    if len(machines) > 1 and None in machines:
        n = next(n for n in t.nodes.values() if n.machine is None)
        raise TopologyError(f"{_at(t.source, n.line)}node {n.name} has no machine while others do: "
                            "give every node a machine, or none")
    if t.machines:
        for n in t.nodes.values():
            if n.machine is not None and n.machine not in t.machines:
                raise TopologyError(f"{_at(t.source, n.line)}node {n.name} is on machine {n.machine}, which "
                                    f"`machines` does not list (it lists {', '.join(t.machines)})")
    vnis: dict[int, int] = {}
    for ln in t.links:
        a, b = (t.nodes[ln.a.node], t.nodes[ln.b.node])
        if a.machine != b.machine and not (a.is_switch and b.is_switch):
            host, sw = (a, b) if not a.is_switch else (b, a)
            raise TopologyError(f"{_at(t.source, ln.line)}host {host.name} (machine {host.machine}) is linked to "
                                f"switch {sw.name} on machine {sw.machine}: a host is on its switch's machine "
                                "(only switch-to-switch links cross machines, as VXLAN links)")
        if ln.vni is not None and a.machine == b.machine:
            raise TopologyError(f"{_at(t.source, ln.line)}link {ln.a} -- {ln.b} sets a vni but stays on one machine "
                                "(only links between machines are VXLAN links)")
        if a.machine != b.machine:
            vni = t.vni_of(ln)
            if vni in vnis:
                raise TopologyError(f"{_at(t.source, ln.line)}link {ln.a} -- {ln.b} has VNI {vni}, as the link on "
                                    f"line {vnis[vni]} has")
            vnis[vni] = ln.line
