"""The DAIET controller: one aggregation tree per reducer, planned from the topology and
installed on every switch through P4Runtime.

Per tree and switch it writes a `daiet_trees` entry (tree id -> parent port, the tree's
register slot, its memory partition, its senders' slots, op, number of children, the
switch's own sender id), resets the tree's registers, and makes sure the clone sessions the
program uses exist (one ACK session per port, the flush walk's recirculation session). It
returns only when every switch has acknowledged: each entry and register is read back.

The constants mirror `crates/programs/src/daiet/mod.rs`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from p4.v1 import p4runtime_pb2

from inswitch.p4rt import bytestrings
from inswitch.p4rt.client import SwitchClient

#: Cells of each slice's key/value arrays, shared by the trees of one switch.
CELLS = 65536
#: Register slices (pairs aggregated per pass); each has its own `stack_top_{s}`.
SLICES = 4
#: Per-tree register slots (`MAX_TREES`).
MAX_TREES = 64
#: (tree, sender) slots of `seq_state`.
SENDER_SLOTS = 65536
#: ACK clone session of port p: ACK_SESSION_BASE + p.
ACK_SESSION_BASE = 512
#: The flush walk's clone session (to the recirculation port).
WALK_SESSION = 1023
#: Bytes an ACK copy keeps: Ethernet, IPv4, UDP, DAIET header.
ACK_FRAME_LEN = 56
#: P4Runtime's reserved recirculation port.
SDN_PORT_RECIRCULATE = 0xFFFFFFFA
#: Sender ids of switches start here, or after the last mapper's id when there are more mappers.
SWITCH_ID_BASE = 200
OPS = {"sum": 0, "min": 1, "max": 2}


@dataclass(frozen=True)
class TreeSpec:
    """One tree on one switch."""

    tree_id: int
    parent_port: int
    children: int
    op: str
    tree_idx: int
    part_base: int
    part_size: int
    switch_id: int = SWITCH_ID_BASE
    max_senders: int = 256

    @property
    def sender_base(self) -> int:
        return self.tree_idx * self.max_senders

    def params(self) -> dict[str, int]:
        packed = (OPS[self.op] << 48) | (self.children << 32) | (self.switch_id << 16) | self.max_senders
        return {
            "parent_port": self.parent_port,
            "tree_idx": self.tree_idx,
            "part_base": self.part_base,
            "part_size": self.part_size,
            "sender_base": self.sender_base,
            "op_children_id_senders": packed,
        }

    def check(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"tree {self.tree_id}: op must be one of {sorted(OPS)}")
        if self.part_size <= 0 or self.part_size & (self.part_size - 1):
            raise ValueError(f"tree {self.tree_id}: partition size {self.part_size} is not a power of two")
        if self.part_base + self.part_size > CELLS:
            raise ValueError(f"tree {self.tree_id}: partition [{self.part_base}, +{self.part_size}) beyond {CELLS} cells")
        if not 0 <= self.tree_idx < MAX_TREES:
            raise ValueError(f"tree {self.tree_id}: register slot {self.tree_idx} not in 0..{MAX_TREES - 1}")
        if self.sender_base + self.max_senders > SENDER_SLOTS:
            raise ValueError(f"tree {self.tree_id}: sender slots beyond {SENDER_SLOTS}")
        if self.switch_id >= self.max_senders:
            raise ValueError(f"tree {self.tree_id}: switch id {self.switch_id} must be below max_senders {self.max_senders}")


def _partition(n: int, cells: int = CELLS) -> int:
    """Largest power-of-two partition when `n` trees share `cells` evenly."""
    size = 1
    while size * 2 * n <= cells:
        size *= 2
    return size


def _senders(n: int) -> int:
    """Sender slots per tree for `n` senders (mappers and switches): a power of two, at least 256."""
    size = 256
    while size < n:
        size *= 2
    return size


def plan_single_switch(reducers: Mapping[int, int], n_mappers: int, op: str = "sum", cells: int = CELLS) -> list[TreeSpec]:
    """Trees on one switch: `reducers` maps tree id -> the reducer's switch port; every
    mapper (ids 0..n_mappers-1) is a child of every tree; memory split evenly. The switch's
    own sender id follows the mappers' (no fixed limit on mappers)."""
    size = _partition(len(reducers), cells)
    switch_id = max(SWITCH_ID_BASE, n_mappers)
    senders = _senders(switch_id + 1)
    return [
        TreeSpec(tree_id=t, parent_port=port, children=n_mappers, op=op, tree_idx=i, part_base=i * size, part_size=size, switch_id=switch_id, max_senders=senders)
        for i, (t, port) in enumerate(sorted(reducers.items()))
    ]


@dataclass
class Tor:
    """A ToR switch: its mappers' ports, its reducers (tree id -> port), its uplink."""

    name: str
    mapper_ports: list[int]
    uplink: int
    reducers: dict[int, int] = field(default_factory=dict)


def plan_two_level(tors: Sequence[Tor], agg_name: str, agg_downlinks: Mapping[str, int], op: str = "sum", cells: int = CELLS) -> dict[str, list[TreeSpec]]:
    """Trees over ToR switches under one aggregation switch. For a tree rooted at a reducer
    under ToR r: every other ToR with mappers aggregates its mappers and sends on its
    uplink; the aggregation switch aggregates those ToRs towards r; ToR r aggregates its own
    mappers and the aggregation switch towards the reducer. Each switch is one sender of its
    parent, with its own id."""
    trees = sorted((t, tor.name, port) for tor in tors for t, port in tor.reducers.items())
    size = _partition(len(trees), cells)
    # Mapper ids are 0..(all mappers - 1); the switches' ids follow.
    base = max(SWITCH_ID_BASE, sum(len(tor.mapper_ports) for tor in tors))
    ids = {tor.name: base + i for i, tor in enumerate(tors)}
    ids[agg_name] = base + len(tors)
    senders = _senders(ids[agg_name] + 1)
    plan: dict[str, list[TreeSpec]] = {tor.name: [] for tor in tors}
    plan[agg_name] = []
    for i, (t, root, port) in enumerate(trees):
        common = dict(tree_id=t, op=op, tree_idx=i, part_base=i * size, part_size=size, max_senders=senders)
        remote = [tor for tor in tors if tor.name != root and tor.mapper_ports]
        for tor in remote:
            plan[tor.name].append(TreeSpec(parent_port=tor.uplink, children=len(tor.mapper_ports), switch_id=ids[tor.name], **common))  # type: ignore[arg-type]
        if remote:
            plan[agg_name].append(TreeSpec(parent_port=agg_downlinks[root], children=len(remote), switch_id=ids[agg_name], **common))  # type: ignore[arg-type]
        root_tor = next(tor for tor in tors if tor.name == root)
        children = len(root_tor.mapper_ports) + (1 if remote else 0)
        plan[root].append(TreeSpec(parent_port=port, children=children, switch_id=ids[root], **common))  # type: ignore[arg-type]
    return plan


def plan_path(path: Sequence[tuple[str, int]], reducers: Mapping[int, int], n_mappers: int, op: str = "sum",
              cells: int = CELLS) -> dict[str, list[TreeSpec]]:
    """Trees along a path of switches (SwitchAgg's streamline, §2): `path` lists each
    switch and its port towards the next one, the mappers under the first, the reducers
    (tree id -> port on the last switch) under the last. The first switch aggregates the
    mappers, each next one the switch before it (one child); the last sends to the reducer.
    `cells`: the cells the trees share on each switch (less memory: fewer cells)."""
    size = _partition(len(reducers), cells)
    base = max(SWITCH_ID_BASE, n_mappers)
    senders = _senders(base + len(path))
    plan: dict[str, list[TreeSpec]] = {name: [] for name, _ in path}
    for i, (t, rport) in enumerate(sorted(reducers.items())):
        for k, (name, nxt) in enumerate(path):
            last = k == len(path) - 1
            plan[name].append(TreeSpec(tree_id=t, parent_port=rport if last else nxt, children=n_mappers if k == 0 else 1,
                                       op=op, tree_idx=i, part_base=i * size, part_size=size, switch_id=base + k,
                                       max_senders=senders))
    return plan


#: Per-tree registers reset for a fresh job; `spill_ring` and `spill_busy` are the spillover
#: bucket's counters (an abandoned job's drains or stores would otherwise keep the next END
#: waiting).
_PER_TREE = ("out_seq", "ends_seen", *(f"stack_top_{s}" for s in range(SLICES)), "spill_ring", "spill_busy", "spill_overflow")
#: Registers of a cell: the key's four words and the value, per slice.
_CELL_REGS = tuple(tuple((*(f"key{w}_{s}" for w in range(4)), f"value_{s}")) for s in range(SLICES))


def _read_cells(c: SwitchClient, reg: str, indexes: Sequence[int]) -> list[int]:
    """Values of `reg` at `indexes`, in one Read (reading a whole 65536-cell array takes
    seconds; the used part of a stack is usually far smaller)."""
    rid = c.schema.registers.get(reg).id
    ents = []
    for i in indexes:
        e = p4runtime_pb2.Entity()
        e.register_entry.register_id = rid
        e.register_entry.index.index = i
        ents.append(e)
    got = {e.register_entry.index.index: bytestrings.to_int(e.register_entry.data.bitstring) for e in c.read(ents)} if ents else {}
    return [got.get(i, 0) for i in indexes]


def _clear_stale_cells(c: SwitchClient, slots: Sequence[tuple[int, int, int]]) -> int:
    """Empty the cells an abandoned job left in tree slots `slots` ((slot, base, size): the
    slot and its partition in that job). A cell is claimed and pushed on its slice's index stack in
    the same pass, and only the flush pops it, so the stale cells are the stack's used
    part. Left in place, a stale key would still match the next job's pairs, which would
    aggregate into a cell on no stack and never be flushed: the reducer would complete,
    without fallback, with counts missing. Returns how many cells were cleared."""
    cleared = 0
    for s in range(SLICES):
        tops = dict(c.read_register(f"stack_top_{s}"))
        for slot, base, size in slots:
            top = min(tops.get(slot, 0), size)
            # A stack entry is a cell of the partition; anything else is not this job's.
            cells = [x for x in _read_cells(c, f"index_stack_{s}", [base + i for i in range(top)]) if base <= x < base + size]
            for k in range(0, len(cells), 2048):
                with c.batch():
                    for cell in cells[k:k + 2048]:
                        for reg in _CELL_REGS[s]:
                            c.write_register(reg, cell, 0)
            cleared += len(cells)
    return cleared


def _install_one(address: str, trees: Sequence[TreeSpec], num_ports: int, device_id: int = 1,
                 election_id: tuple[int, int] = (0, 1)) -> dict[str, object]:
    for t in trees:
        t.check()
    with SwitchClient(address, device_id=device_id, election_id=election_id) as c:
        old = c.read_entries("daiet_trees")
        existing = {e["match"]["hdr.daiet.tree_id"] for e in old}
        # Cells an abandoned job left behind (a finished flush empties every cell it
        # used) are cleared before the stacks are reset below: those of the slots the new
        # trees take over, and of any unfinished slot whose partition overlaps a new
        # tree's. Other unfinished slots may belong to a job still running: left alone.
        new = [(t.part_base, t.part_size) for t in trees]
        slots = {t.tree_idx for t in trees}
        dirty = set()
        for s in range(SLICES):
            dirty |= {i for i, v in c.read_register(f"stack_top_{s}") if v != 0}
        stale: set[tuple[int, int, int]] = set()
        for e in old:
            slot, base, size = (int(e["params"][k]) for k in ("tree_idx", "part_base", "part_size"))
            if slot in dirty and (slot in slots or any(base < nb + nn and nb < base + size for nb, nn in new)):
                stale.add((slot, base, size))
        cleared = _clear_stale_cells(c, sorted(stale)) if stale else 0
        with c.batch():
            for p in range(num_ports):
                c.set_clone_session(ACK_SESSION_BASE + p, [p], truncate_len=ACK_FRAME_LEN)
            c.set_clone_session(WALK_SESSION, [SDN_PORT_RECIRCULATE])
            for t in trees:
                if t.tree_id in existing:
                    c.modify_entry("daiet_trees", {"hdr.daiet.tree_id": t.tree_id}, "set_tree", t.params())
                else:
                    c.insert_entry("daiet_trees", {"hdr.daiet.tree_id": t.tree_id}, "set_tree", t.params())
        # A fresh job: the tree's counters, stack and its senders' sequence numbers start at 0.
        with c.batch():
            for t in trees:
                for reg in _PER_TREE:
                    c.write_register(reg, t.tree_idx, 0)
                for s in range(t.max_senders):
                    c.write_register("seq_state", t.sender_base + s, 0)
        # The acknowledgement: read everything back.
        got = {e["match"]["hdr.daiet.tree_id"]: e for e in c.read_entries("daiet_trees")}
        for t in trees:
            e = got.get(t.tree_id)
            if e is None or e["action"] != "set_tree" or e["params"] != t.params():
                raise RuntimeError(f"switch {address}: tree {t.tree_id} not installed as written: {e}")
            for reg in _PER_TREE:
                if c.read_register(reg, t.tree_idx)[0][1] != 0:
                    raise RuntimeError(f"switch {address}: {reg}[{t.tree_idx}] not reset")
        return {"address": address, "trees": [t.tree_id for t in trees], "clone_sessions": num_ports + 1, "stale_cells_cleared": cleared}


def install(switches: Mapping[str, Sequence[TreeSpec]], num_ports: int | Mapping[str, int] = 64,
            device_ids: Mapping[str, int] | None = None, election_id: tuple[int, int] = (0, 1)) -> list[dict[str, object]]:
    """Install trees on every switch (P4Runtime address -> its trees); returns one
    acknowledgement per switch once everything reads back as written. On a fabric each
    switch has its own port count and device id (by address), and its controller's
    election id (a switch refuses a primary below the highest it has seen)."""
    ports = (lambda a: num_ports[a]) if isinstance(num_ports, Mapping) else (lambda a: num_ports)
    ids = device_ids or {}
    return [_install_one(addr, trees, ports(addr), ids.get(addr, 1), election_id) for addr, trees in switches.items()]
