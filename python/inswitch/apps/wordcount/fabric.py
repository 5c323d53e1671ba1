"""WordCount on a fabric (`inswitch wordcount --fabric SPEC`): mappers on hosts under
several leaves, reducers under another, DAIET two-level trees over the switches.

Placement: the reducers take the hosts of the last leaf; the mappers are dealt round-robin
over the other leaves (then the last leaf's remaining hosts). The *aggregation switch* is
a switch adjacent to every leaf used (a spine of a leaf-spine; an aggregation switch of one
fat-tree pod); the trees are `plan_two_level`'s: each leaf with mappers aggregates them
and sends on its uplink to the aggregation switch, which aggregates the leaves towards the
reducer's leaf, which aggregates its own mappers and the aggregation switch towards the
reducer.

The packets' path must be the tree's: the DAIET program picks each switch's egress port,
but the MAC addresses are the routing's (the base `forward` program runs first). So a job
pins its path at L2: every mapper reaches each reducer on-link (a /32 route and a permanent
neighbour entry with the reducer's MAC), and the switches of the tree forward the reducer's
MAC along it (`l2_dmac` -> the tree's parent port). The switch's ACKs are the data packet
with addresses swapped, so they reach the mapper by its own MAC. Everything else (the
reducers' replies, the TCP baseline) is routed as usual.

Per switch, `pairs_in` and `pairs_out` come from the switch's port counters over the switch
run: frames received on the tree's child ports and sent on its parent ports, each
`ACK_FRAME_LEN + PAIR_LEN * pairs` bytes long (an ACK or END: no pairs); see
docs/fabric.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from inswitch.apps.aggregation import controller as agg

#: Frame bytes of a DAIET packet without pairs (Ethernet, IPv4, UDP, DAIET header).
DAIET_FRAME_BASE = agg.ACK_FRAME_LEN
#: Bytes of one fixed-size (key, value) pair (`wire::daiet::PAIR_LEN`).
DAIET_PAIR_LEN = 20


class FabricJobError(RuntimeError):
    pass


@dataclass
class FabricLayout:
    """Where the job's processes and trees are on the fabric."""

    mappers: list[Any]  # HostPlan
    reducers: list[Any]  # HostPlan
    #: The aggregation switch of a two-level tree ("" for a path).
    agg: str
    #: leaf name -> its port towards the aggregation switch
    uplinks: dict[str, int]
    #: leaf name -> the aggregation switch's port towards it
    downlinks: dict[str, int]
    #: switch name -> (child ports, parent ports) of the trees there
    ports: dict[str, tuple[list[int], list[int]]] = field(default_factory=dict)
    #: A path instead (every mapper under its first switch, every reducer under its last):
    #: (switch, its port towards the next one; -1 on the last).
    path: list[tuple[str, int]] = field(default_factory=list)
    #: path switch -> its port towards the switch before it
    back: dict[str, int] = field(default_factory=dict)


def _neighbour_ports(topo: Any, name: str) -> dict[str, int]:
    """Switch `name`'s neighbours -> its port towards each (the first link, if several)."""
    out: dict[str, int] = {}
    for ln in topo.links:
        for me, other in ((ln.a, ln.b), (ln.b, ln.a)):
            if me.node == name and other.node not in out:
                out[other.node] = topo.port_of(me)
    return out


def place(topo: Any, hosts: list[Any], mappers: int, reducers: int) -> FabricLayout:
    """Choose the hosts of the mappers and reducers and the aggregation switch."""
    leaves: list[str] = []
    for h in hosts:
        if h.switch not in leaves:
            leaves.append(h.switch)
    if mappers + reducers > len(hosts):
        raise FabricJobError(f"the fabric has {len(hosts)} hosts; --mappers + --reducers is {mappers + reducers}")
    under = {lf: [h for h in hosts if h.switch == lf] for lf in leaves}
    root = leaves[-1]
    if reducers > len(under[root]):
        raise FabricJobError(f"the reducers share the last leaf ({root}, {len(under[root])} hosts): at most that many reducers")
    reds = under[root][:reducers]
    pool = [under[lf] for lf in leaves[:-1]] + [under[root][reducers:]]
    maps: list[Any] = []
    i = 0
    while len(maps) < mappers:
        for hs in pool:
            if i < len(hs) and len(maps) < mappers:
                maps.append(hs[i])
        i += 1
    used = sorted({h.switch for h in maps + reds}, key=leaves.index)
    if len({h.switch for h in maps}) == 1 and len(set(leaves) - {root}) <= 1:
        path = _path(topo, maps[0].switch, root)
        back = {path[k][0]: _neighbour_ports(topo, path[k][0])[path[k - 1][0]] for k in range(1, len(path))}
        return FabricLayout(maps, reds, "", {}, {}, path=path, back=back)
    switches = [n.name for n in topo.switches]
    common = [s for s in switches if s not in used and all(lf in _neighbour_ports(topo, s) for lf in used)]
    if not common:
        raise FabricJobError(f"no switch is adjacent to every leaf of the job ({', '.join(used)}): two-level trees need "
                             "one aggregation switch over the leaves (a leaf-spine fabric, or one pod of a fat-tree)")
    aggn = common[0]
    downs = _neighbour_ports(topo, aggn)
    ups = {lf: _neighbour_ports(topo, lf)[aggn] for lf in used}
    return FabricLayout(maps, reds, aggn, ups, {lf: downs[lf] for lf in used})


def _path(topo: Any, a: str, b: str) -> list[tuple[str, int]]:
    """The shortest switch path from `a` to `b` (breadth first, names in order), each switch
    with its port towards the next."""
    switches = {n.name for n in topo.switches}
    prev: dict[str, str] = {a: a}
    todo = [a]
    while todo and b not in prev:
        cur = todo.pop(0)
        for nb in _neighbour_ports(topo, cur):
            if nb in switches and nb not in prev:
                prev[nb] = cur
                todo.append(nb)
    if b not in prev:
        raise FabricJobError(f"no switch path from {a} to {b}")
    names = [b]
    while names[-1] != a:
        names.append(prev[names[-1]])
    names.reverse()
    return [(n, _neighbour_ports(topo, n)[names[i + 1]] if i + 1 < len(names) else -1) for i, n in enumerate(names)]


def plan_path_trees(lay: FabricLayout, tree_ids: list[int], op: str, cells: int) -> dict[str, list[agg.TreeSpec]]:
    reducers = {t: r.port for t, r in zip(tree_ids, lay.reducers)}
    plan = agg.plan_path(lay.path, reducers, len(lay.mappers), op=op, cells=cells)
    lay.ports = {}
    for k, (name, nxt) in enumerate(lay.path):
        kids = [h.port for h in lay.mappers] if k == 0 else [_port_back(lay, k)]
        lay.ports[name] = (kids, sorted(reducers.values()) if nxt < 0 else [nxt])
    return plan


def _port_back(lay: FabricLayout, k: int) -> int:
    """The port of path switch k towards switch k - 1 (recorded by `place`)."""
    return lay.back[lay.path[k][0]]


def plan_trees(lay: FabricLayout, tree_ids: list[int], op: str, cells: int = agg.CELLS) -> dict[str, list[agg.TreeSpec]]:
    """`plan_path` along a path layout, else `plan_two_level` over the job's leaves; also records each switch's child and
    parent ports (for `pairs_in`/`pairs_out`)."""
    leaves = list(lay.uplinks)
    tors = [agg.Tor(name=lf, mapper_ports=[h.port for h in lay.mappers if h.switch == lf], uplink=lay.uplinks[lf])
            for lf in leaves]
    if lay.path:
        return plan_path_trees(lay, tree_ids, op, cells)
    by = {t.name: t for t in tors}
    for t, r in zip(tree_ids, lay.reducers):
        by[r.switch].reducers[t] = r.port
    plan = agg.plan_two_level(tors, lay.agg, lay.downlinks, op=op, cells=cells)
    roots = {r.switch for r in lay.reducers}
    lay.ports = {}
    for tor in tors:
        if tor.name in roots:
            remote = any(x.mapper_ports for x in tors if x.name not in roots)
            lay.ports[tor.name] = (tor.mapper_ports + ([tor.uplink] if remote else []), sorted(tor.reducers.values()))
        elif tor.mapper_ports:
            lay.ports[tor.name] = (tor.mapper_ports, [tor.uplink])
    if plan.get(lay.agg):
        lay.ports[lay.agg] = ([lay.downlinks[t.name] for t in tors if t.name not in roots and t.mapper_ports],
                              sorted({lay.downlinks[r] for r in roots}))
    return {k: v for k, v in plan.items() if v}


def plan_switchagg_trees(lay: FabricLayout, tree_ids: list[int], op: str, regions: int | None = None) -> dict[str, Any]:
    """The same trees for the `switchagg` program (`apps.switchagg.controller.plan_path` /
    `plan_two_level`: child ids and `up_child` per level); records each switch's child and
    parent ports as `plan_trees` does. Returns switch name -> its `SwitchPlan`."""
    from inswitch.apps.switchagg import controller as sagg

    reducers = {t: r for t, r in zip(tree_ids, lay.reducers)}
    if lay.path:
        plan = sagg.plan_path(lay.path, {t: r.port for t, r in reducers.items()}, [h.port for h in lay.mappers], lay.back,
                              op=op)
    else:
        tors = [agg.Tor(name=lf, mapper_ports=[h.port for h in lay.mappers if h.switch == lf], uplink=lay.uplinks[lf])
                for lf in lay.uplinks]
        by = {t.name: t for t in tors}
        for t, r in reducers.items():
            by[r.switch].reducers[t] = r.port
        plan = sagg.plan_two_level(tors, lay.agg, lay.downlinks, len(lay.mappers), op=op)
    for sp in plan.values():
        sp.regions = regions
    lay.ports = {name: (list(sp.child_ports), sp.parent_ports) for name, sp in plan.items()}
    return plan


def _mac_int(mac: Any) -> int:
    return mac if isinstance(mac, int) else int(str(mac).replace(":", ""), 16)


def _program_l2(run: Any, dmac: list[tuple[str, int]], smac: list[str]) -> None:
    from inswitch.topology import control
    from inswitch.topology.fabric.controller import ELECTION_ID

    with control.connect(run.p4runtime, device_id=run.plan.device_id, election_id=ELECTION_ID, wait_s=10.0) as c:
        have = {_mac_int(e["match"]["hdr.ethernet.dst_addr"]) for e in c.read_entries("l2_dmac")}
        seen = {_mac_int(e["match"]["hdr.ethernet.src_addr"]) for e in c.read_entries("l2_smac")}
        with c.batch():
            for mac, port in dmac:
                if _mac_int(mac) not in have:
                    c.insert_entry("l2_dmac", {"hdr.ethernet.dst_addr": mac}, "l2_forward", {"port": port})
            for mac in smac:
                if _mac_int(mac) not in seen:
                    c.insert_entry("l2_smac", {"hdr.ethernet.src_addr": mac}, "nop", {})


def pin_paths(st: Any, lay: FabricLayout, program_l2: Callable[[Any, list[tuple[str, int]], list[str]], None] = _program_l2,
              only: str | None = None) -> None:
    """Make the tree's path the packets' path (see the module doc): on-link routes in the
    mappers, the reducers' MACs along the tree on the switches. `only`: that switch's part
    alone (a restarted switch: its tables start empty)."""
    from inswitch.topology import netns

    for m in ([] if only else lay.mappers):
        for r in lay.reducers:
            netns.ip("route", "replace", f"{r.ip}/32", "dev", m.ifname, netns=m.netns)
            netns.ip("neigh", "replace", r.ip, "lladdr", r.mac, "dev", m.ifname, "nud", "permanent", netns=m.netns)
    macs = [h.mac for h in lay.mappers + lay.reducers]
    nxt = dict(lay.path)
    for run in st.switches:
        name = run.plan.name
        if (name not in lay.uplinks and name != lay.agg and name not in nxt) or (only and name != only):
            continue
        dmac = []
        for r in lay.reducers:
            if name == r.switch:
                continue  # its own host: the fabric controller has it
            port = nxt[name] if lay.path else lay.downlinks[r.switch] if name == lay.agg else lay.uplinks[name]
            dmac.append((r.mac, port))
        own = {h.mac for h in st.hosts if h.switch == name}
        program_l2(run, dmac, [m for m in macs if m not in own])


def pairs_of(bytes_: int, packets: int) -> int:
    """DAIET pairs in `packets` frames of `bytes_` bytes in all (fixed-size pairs)."""
    return max(0, (bytes_ - packets * DAIET_FRAME_BASE) // DAIET_PAIR_LEN)


#: Frame bytes of a SwitchAgg packet without pairs (Ethernet 14, IPv4 20, UDP 8, header 14).
SWITCHAGG_FRAME_BASE = 14 + 20 + 8 + 14


def per_switch(lay: FabricLayout, before: dict[str, dict[int, dict[str, int]]],
               after: dict[str, dict[int, dict[str, int]]], program: str = "daiet",
               pairs: tuple[dict[str, tuple[int, int]], dict[str, tuple[int, int]]] | None = None) -> dict[str, dict[str, Any]]:
    """`switches` of the result: per switch of the trees, what came in on its child ports and
    went out on its parent ports over the run, and its reduction.

    daiet: `pairs_in`, `pairs_out`, `reduction` (1 - out / in), pairs from frame sizes
    (fixed 20-byte pairs). switchagg: its pairs have variable length (6 bytes + the key), so
    a frame's size does not say how many pairs it holds; `pairs_in` / `pairs_out` and
    `reduction` come from the program's own counters (`pairs`: (before, after) of each
    switch's `switchagg.pairs_in`/`pairs_out` sums; the switch counts a packet's pairs once,
    so unlike DAIET's a mapper's retransmission is not counted again), None without them.
    The bytes are there too: `frames_in`
    / `frames_out` and `bytes_in` / `bytes_out` (whole frames, as the ports counted them),
    `pair_bytes_in` / `pair_bytes_out` (the frames' bytes beyond the 56 of headers each: the
    pairs' bytes; ACKs and control packets carry none) and `byte_reduction`
    (1 - pair_bytes_out / pair_bytes_in)."""
    out: dict[str, dict[str, Any]] = {}
    for name, (kids, parents) in lay.ports.items():
        a, b = before.get(name, {}), after.get(name, {})

        def d(port: int, key: str) -> int:
            return int(b.get(port, {}).get(key, 0)) - int(a.get(port, {}).get(key, 0))

        role = f"hop {[n for n, _ in lay.path].index(name) + 1}" if lay.path else "aggregation" if name == lay.agg else "leaf (reducers)" if any(r.switch == name for r in lay.reducers) else "leaf"
        if program == "switchagg":
            fin, fout = sum(d(p, "rx_packets") for p in kids), sum(d(p, "tx_packets") for p in parents)
            bin_, bout = sum(d(p, "rx_bytes") for p in kids), sum(d(p, "tx_bytes") for p in parents)
            pin, pout = max(0, bin_ - SWITCHAGG_FRAME_BASE * fin), max(0, bout - SWITCHAGG_FRAME_BASE * fout)
            c0, c1 = (pairs[0].get(name), pairs[1].get(name)) if pairs else (None, None)
            cin, cout = (c1[0] - c0[0], c1[1] - c0[1]) if c0 is not None and c1 is not None else (None, None)
            out[name] = {"role": role, "pairs_in": cin, "pairs_out": cout,
                         "reduction": round(1.0 - cout / cin, 4) if cin and cout is not None else None,
                         "frames_in": fin, "frames_out": fout, "bytes_in": bin_, "bytes_out": bout,
                         "pair_bytes_in": pin, "pair_bytes_out": pout,
                         "byte_reduction": round(1.0 - pout / pin, 4) if pin else None}
            continue
        pin = sum(pairs_of(d(p, "rx_bytes"), d(p, "rx_packets")) for p in kids)
        pout = sum(pairs_of(d(p, "tx_bytes"), d(p, "tx_packets")) for p in parents)
        out[name] = {"role": role, "pairs_in": pin, "pairs_out": pout,
                     "reduction": round(1.0 - pout / pin, 4) if pin else None}
    return out
