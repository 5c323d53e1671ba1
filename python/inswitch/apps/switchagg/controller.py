"""SwitchAgg's configuration module seen from the controller (SwitchAgg §4.2.2, Table 1's
Configure): per tree its parent port, number of children and operation, and an even share
of the engines' memory; the ACK and flush clone sessions the program relies on; the
exactly-once registers reset for a new job. All through P4Runtime (`SwitchClient`).

The numbers mirror `crates/programs/src/switchagg/mod.rs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from inswitch.p4rt import SwitchClient

#: Clone session of the ACK to the child on port p: ACK_SESSION_BASE + p, replica (p, ACK_RID).
ACK_SESSION_BASE = 0x200
ACK_RID = 0x0ACC
#: Clone session whose replica is the recirculation port (flush passes).
FLUSH_SESSION = 0x1FF
#: P4Runtime's number for the recirculation port (switchd maps it to the pipe's own).
SDN_PORT_RECIRCULATE = 0xFFFFFFFA
OPS = {"sum": 0, "min": 1, "max": 2}
#: Children per tree the program keeps sequence numbers for (`Config::max_children`).
MAX_CHILDREN = 256
#: `up_child` of a tree's root switch: the end hosts' exactly-once protocol takes a packet
#: from a child id this high as the switch's numbered stream
#: (`hostlib::aggregation::switchagg::SWITCH_CHILD_MIN`).
SWITCH_CHILD_MIN = 0x8000
#: Registers that hold a job's progress.
JOB_REGISTERS = ("switchagg.expected_seq", "switchagg.eot_count", "switchagg.up_seq")


@dataclass(frozen=True)
class Tree:
    """One aggregation tree at one switch."""

    tree_id: int
    #: Port towards the parent (the reducer, or the next switch).
    parent_port: int
    #: Children that send to this switch (mappers or switches below).
    children: int
    op: str = "sum"
    #: This switch's child id at its parent (when the parent is a switch).
    up_child: int = 0


def configure(client: SwitchClient, trees: Sequence[Tree], child_ports: Iterable[int], regions: int | None = None) -> None:
    """Install `trees` (memory split evenly among them, in order), the ACK sessions of
    `child_ports` and the flush session, and reset the job registers. `regions`: split every
    engine memory into that many equal regions instead (the trees take the first ones; each
    tree then has 1/regions of the memory: less memory for capacity experiments)."""
    if not trees or len(trees) > 255:
        raise ValueError("1..255 trees")
    regions = len(trees) if regions is None else regions
    if not len(trees) <= regions <= 255:
        raise ValueError(f"regions {regions}: at least the {len(trees)} trees, at most 255 (an 8-bit field)")
    for i, t in enumerate(trees):
        if t.op not in OPS:
            raise ValueError(f"operation {t.op!r}: one of {', '.join(OPS)}")
        client.insert_entry(
            "switchagg.tree_config",
            {"tree_id": t.tree_id},
            "switchagg.set_tree",
            {"parent_port": t.parent_port, "children": t.children, "op": OPS[t.op], "region": i, "regions": regions, "up_child": t.up_child},
        )
    for p in child_ports:
        if not 0 <= p < 1024 - ACK_SESSION_BASE:
            raise ValueError(f"child port {p}: ACK sessions cover ports 0..{1023 - ACK_SESSION_BASE}")
        client.set_clone_session(ACK_SESSION_BASE + p, [(p, ACK_RID)])
    client.set_clone_session(FLUSH_SESSION, [SDN_PORT_RECIRCULATE])
    for r in JOB_REGISTERS:
        client.write_register(r, None, 0)


# ----- trees over several switches (a fabric) ----------------------------------------------
#
# Every child of a tree at a switch has a child id, the key of its `expected_seq` row
# (< MAX_CHILDREN): a mapper its mapper id (0..mappers-1, given by the job), a switch the
# `up_child` its parent was told. So the switches' ids follow the mappers' (mappers + i, one
# per switch, unique over the whole plan, hence at every parent), and the switch whose
# parent is the reducer reports as SWITCH_CHILD_MIN: the end hosts' protocol takes only
# that as the switch's numbered stream (docs/switchagg.md).


@dataclass
class SwitchPlan:
    """What one switch of a multi-switch job gets: its trees (memory split evenly in this
    order) and the ports of its trees' children (one ACK clone session each)."""

    trees: list[Tree]
    child_ports: list[int]
    #: Memory regions the engines are split into (`configure`); None: one per tree.
    regions: int | None = None

    @property
    def parent_ports(self) -> list[int]:
        return sorted({t.parent_port for t in self.trees})


def _switch_ids(names: Sequence[str], n_mappers: int) -> dict[str, int]:
    ids = {n: n_mappers + i for i, n in enumerate(names)}
    if ids and max(ids.values()) >= MAX_CHILDREN:
        raise ValueError(f"{n_mappers} mappers and {len(names)} switches: child ids (mapper ids, then one per switch) "
                         f"must stay below {MAX_CHILDREN}")
    return ids


def plan_two_level(tors: Sequence[Any], agg_name: str, agg_downlinks: Mapping[str, int], n_mappers: int,
                   op: str = "sum") -> dict[str, SwitchPlan]:
    """Trees over ToR switches under one aggregation switch (the switchagg counterpart of
    `apps.aggregation.controller.plan_two_level`; `tors` are its `Tor`s: name, mapper_ports,
    uplink, reducers {tree id: port}). For a tree rooted at a reducer under ToR r: every other
    ToR with mappers aggregates them towards its uplink (its own child id at the aggregation
    switch), the aggregation switch aggregates those ToRs towards r (its child id at r), ToR r
    aggregates its own mappers and the aggregation switch towards the reducer (as
    SWITCH_CHILD_MIN). `n_mappers`: all the job's mappers (ids 0..n-1)."""
    ids = _switch_ids([t.name for t in tors] + [agg_name], n_mappers)
    plan: dict[str, SwitchPlan] = {}

    def at(name: str) -> SwitchPlan:
        return plan.setdefault(name, SwitchPlan([], []))

    def child(name: str, port: int) -> None:
        if port not in at(name).child_ports:
            at(name).child_ports.append(port)

    trees = sorted((t, tor.name, port) for tor in tors for t, port in tor.reducers.items())
    for t, root, port in trees:
        remote = [tor for tor in tors if tor.name != root and tor.mapper_ports]
        for tor in remote:
            at(tor.name).trees.append(Tree(t, tor.uplink, len(tor.mapper_ports), op, up_child=ids[tor.name]))
            for p in tor.mapper_ports:
                child(tor.name, p)
        if remote:
            at(agg_name).trees.append(Tree(t, agg_downlinks[root], len(remote), op, up_child=ids[agg_name]))
            for tor in remote:
                child(agg_name, agg_downlinks[tor.name])
        rt = next(tor for tor in tors if tor.name == root)
        at(root).trees.append(Tree(t, port, len(rt.mapper_ports) + (1 if remote else 0), op, up_child=SWITCH_CHILD_MIN))
        for p in rt.mapper_ports + ([rt.uplink] if remote else []):
            child(root, p)
    return plan


def plan_path(path: Sequence[tuple[str, int]], reducers: Mapping[int, int], mapper_ports: Sequence[int],
              back: Mapping[str, int], op: str = "sum") -> dict[str, SwitchPlan]:
    """Trees along a path of switches (SwitchAgg's streamline, §2; the switchagg counterpart of
    `apps.aggregation.controller.plan_path`): `path` lists each switch and its port towards the
    next, `back` each switch but the first its port towards the one before; the mappers
    (ports `mapper_ports`, ids 0..n-1) under the first, the reducers (tree id -> port on the
    last switch) under the last. Each switch has one child below it but the first."""
    ids = _switch_ids([n for n, _ in path], len(mapper_ports))
    plan: dict[str, SwitchPlan] = {}
    for k, (name, nxt) in enumerate(path):
        last = k == len(path) - 1
        kids = list(mapper_ports) if k == 0 else [back[name]]
        trees = [Tree(t, rport if last else nxt, len(mapper_ports) if k == 0 else 1, op,
                      up_child=SWITCH_CHILD_MIN if last else ids[name])
                 for t, rport in sorted(reducers.items())]
        plan[name] = SwitchPlan(trees, kids)
    return plan


def _params(t: Tree, region: int, regions: int) -> dict[str, int]:
    return {"parent_port": t.parent_port, "children": t.children, "op": OPS[t.op], "region": region, "regions": regions,
            "up_child": t.up_child}


def _clone_session(c: Any, session_id: int) -> list[tuple[int, int]] | None:
    """The replicas (port, instance) of clone session `session_id` as the switch reads it back."""
    from p4.v1 import p4runtime_pb2

    from inswitch.p4rt import bytestrings

    ent = p4runtime_pb2.Entity()
    ent.packet_replication_engine_entry.clone_session_entry.session_id = session_id
    try:
        got = c.read([ent])
    except Exception:
        return None
    for e in got:
        cs = e.packet_replication_engine_entry.clone_session_entry
        if cs.session_id == session_id:
            return [(r.egress_port if r.WhichOneof("port_kind") == "egress_port" else bytestrings.to_int(r.port), r.instance)
                    for r in cs.replicas]
    return None


def install(address: str, plan: SwitchPlan, device_id: int = 1, election_id: tuple[int, int] = (0, 1)) -> dict[str, Any]:
    """Install one switch's part of a plan over P4Runtime (as primary with `election_id`):
    tree ids left from an earlier job replaced, `configure`, then everything read back (the
    switch's acknowledgement): every tree entry as written, the ACK and flush clone sessions,
    the job registers at 0."""
    from inswitch.p4rt import SwitchClient

    with SwitchClient(address, device_id=device_id, election_id=election_id) as c:
        old = {next(iter(e["match"].values())) for e in c.read_entries("switchagg.tree_config")}
        for t in plan.trees:
            if t.tree_id in old:
                c.delete_entry("switchagg.tree_config", {"tree_id": t.tree_id})
        configure(c, plan.trees, plan.child_ports, plan.regions)
        got = {next(iter(e["match"].values())): e for e in c.read_entries("switchagg.tree_config")}
        for i, t in enumerate(plan.trees):
            e = got.get(t.tree_id)
            want = _params(t, i, plan.regions or len(plan.trees))
            if e is None or e["action"].rsplit(".", 1)[-1] != "set_tree" or e["params"] != want:
                raise RuntimeError(f"switch {address}: switchagg tree {t.tree_id} not installed as written: {e}")
        want = {ACK_SESSION_BASE + p: [(p, ACK_RID)] for p in plan.child_ports}
        for sid, replicas in want.items():
            if _clone_session(c, sid) != replicas:
                raise RuntimeError(f"switch {address}: ACK clone session {sid:#x} reads back as {_clone_session(c, sid)}")
        if _clone_session(c, FLUSH_SESSION) != [(SDN_PORT_RECIRCULATE, 0)]:
            raise RuntimeError(f"switch {address}: flush clone session {FLUSH_SESSION:#x} not installed")
        for r in JOB_REGISTERS:
            if any(v for _, v in c.read_register(r)):
                raise RuntimeError(f"switch {address}: {r} not reset")
    return {"address": address, "trees": [t.tree_id for t in plan.trees], "child_ports": list(plan.child_ports),
            "regions": plan.regions or len(plan.trees),
            "up_child": {t.tree_id: t.up_child for t in plan.trees}, "clone_sessions": len(plan.child_ports) + 1}
