"""SwitchAgg's configuration module seen from the controller (SwitchAgg §4.2.2, Table 1's
Configure): per tree its parent port, number of children and operation, and an even share
of the engines' memory; the ACK and flush clone sessions the program relies on; the
exactly-once registers reset for a new job. All through P4Runtime (`SwitchClient`).

The numbers mirror `crates/programs/src/switchagg/mod.rs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

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


def configure(client: SwitchClient, trees: Sequence[Tree], child_ports: Iterable[int]) -> None:
    """Install `trees` (memory split evenly among them, in order), the ACK sessions of
    `child_ports` and the flush session, and reset the job registers."""
    if not trees or len(trees) > 255:
        raise ValueError("1..255 trees")
    for i, t in enumerate(trees):
        if t.op not in OPS:
            raise ValueError(f"operation {t.op!r}: one of {', '.join(OPS)}")
        client.insert_entry(
            "switchagg.tree_config",
            {"tree_id": t.tree_id},
            "switchagg.set_tree",
            {"parent_port": t.parent_port, "children": t.children, "op": OPS[t.op], "region": i, "regions": len(trees), "up_child": t.up_child},
        )
    for p in child_ports:
        if not 0 <= p < 1024 - ACK_SESSION_BASE:
            raise ValueError(f"child port {p}: ACK sessions cover ports 0..{1023 - ACK_SESSION_BASE}")
        client.set_clone_session(ACK_SESSION_BASE + p, [(p, ACK_RID)])
    client.set_clone_session(FLUSH_SESSION, [SDN_PORT_RECIRCULATE])
    for r in JOB_REGISTERS:
        client.write_register(r, None, 0)
