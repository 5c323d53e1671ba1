"""Carrying forwarding state across a pipeline change (RECONCILE_AND_COMMIT).

Loading a program set rebuilds every pipe from scratch, so to "preserve the forwarding
state" we read what is worth keeping before the change and write it back after: the entries
and default actions of tables whose programs stay, multicast groups, clone sessions and
digest settings. Registers are data-plane state that packets keep changing; they start over.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from p4.v1 import p4runtime_pb2

from .pipeline import Pipeline
from .status import P4RTError, invalid

if TYPE_CHECKING:
    from .device import Device, EntryKey, PreMeta


@dataclass
class Carryover:
    tables: dict[int, Any] = field(default_factory=dict)  # table id -> table_read() result
    changed_defaults: set[int] = field(default_factory=set)
    entry_meta: dict["EntryKey", tuple[int, bytes]] = field(default_factory=dict)
    default_meta: dict[int, tuple[int, bytes]] = field(default_factory=dict)
    mcast: list[Any] = field(default_factory=list)
    clone: list[Any] = field(default_factory=list)
    pre_meta: dict[tuple[str, int], "PreMeta"] = field(default_factory=dict)
    digests: dict[int, p4runtime_pb2.DigestEntry.Config] = field(default_factory=dict)


def take(dev: "Device", new: Pipeline) -> Carryover:
    """What of the current state `new` can keep (read before the change)."""
    old = dev.pipeline
    keep = [t for t in old.index.tables if t.id in new.index.tables and new.index.tables.by_id[t.id].name == t.name]
    c = Carryover()
    c.tables = {t.id: dev.call(dev.dp.table_read, t.id) for t in keep}
    for t in keep:
        init = next(x for x in old.p4info.tables if x.preamble.id == t.id).initial_default_action
        daid, dparams = c.tables[t.id][1]
        if daid != init.action_id or [v for _, v in dparams] != [a.value for a in init.arguments]:
            c.changed_defaults.add(t.id)
    c.entry_meta = {k: v for k, v in dev.entry_meta.items() if k[0] in c.tables}
    c.default_meta = {k: v for k, v in dev.default_meta.items() if k in c.tables}
    c.mcast = dev.call(dev.dp.mcast_group_read, None)
    c.clone = dev.call(dev.dp.clone_session_read, None)
    c.pre_meta = dict(dev.pre_meta)
    c.digests = {d: cfg for d, cfg in dev.digest_configs.items() if d in new.index.digests}
    return c


def give(dev: "Device", c: Carryover) -> None:
    """Write the carried state into the freshly loaded pipeline."""
    dp = dev.dp
    try:
        for tid, (entries, (daid, dparams)) in c.tables.items():
            for matches, prio, aid, params in entries:
                dev.call(dp.table_write, "insert", tid, list(matches), prio, aid, list(params))
            if tid in c.changed_defaults:
                dev.call(dp.table_set_default, tid, daid, list(dparams))
        for gid, reps in c.mcast:
            dev.call(dp.mcast_group_write, "insert", gid, list(reps))
        for sid, reps, trunc in c.clone:
            dev.call(dp.clone_session_write, "insert", sid, list(reps), trunc)
        for did, cfg in c.digests.items():
            dev.call(dp.digest_config, did, True)
            dev.digest_configs[did] = cfg
    except P4RTError as e:
        raise invalid(f"the forwarding state could not be carried over to the new pipeline: {e.message}") from None
    dev.entry_meta.update(c.entry_meta)
    dev.default_meta.update(c.default_meta)
    dev.pre_meta.update(c.pre_meta)
