"""NetCache's controller (`netcache_ctl`) on the in-process netcache program when the
storage agent behind an install dies or restarts in the middle of it: what the switch
serves afterwards is checked by GETs through it, against the store (a dict)."""

from __future__ import annotations

from typing import Optional

import pytest

from inswitch import _native
from inswitch.apps.hare import framework as fw
from inswitch.apps.hare.framework import CLIENT, Query, server_ep
from inswitch.apps.hare.netcache_ctl import NetCacheController
from inswitch.apps.hare.workload import key_bytes

KF, VB, SLOTS = 16, 8, 2
OP_GET, FLAG_HIT = 1, 0x01


def _switch() -> object:
    sw = _native.SimSwitch(["forward", f"netcache:key={KF},value={VB},slots={SLOTS},threshold=1000"], 2)
    for h, port in [(1, 0), (2, 1)]:
        sw.table_write("forward", "l2_dmac", "insert", [fw.mac(h)], "l2_forward", [port.to_bytes(2, "big")])
        sw.table_write("forward", "l2_smac", "insert", [fw.mac(h)], "nop", [])
    return sw


def _get(sw: object, key: bytes) -> Optional[bytes]:
    """A client's GET: the value when the switch answers it, None when it goes on to the server."""
    [(port, f)] = sw.process(0, [_native.hare_frame(CLIENT, server_ep(0), OP_GET, key, KF, b"", 1)])  # type: ignore[attr-defined]
    if port == 1:
        return None
    q = Query.parse(f)
    assert q is not None and q.flags & FLAG_HIT
    return q.value


class RestartedAgent(set):  # type: ignore[type-arg]
    """The rack's marks (`redisrack.Marks`) as an install sees them when the key's agent
    restarted right after the first mark: that mark is gone; one set again is held."""

    def __init__(self) -> None:
        super().__init__()
        self.marks = 0

    def add(self, key: bytes) -> None:  # type: ignore[override]
        self.marks += 1
        super().add(key)

    def held(self, key: bytes) -> bool:
        return key in self and self.marks >= 2


def test_an_install_cut_short_by_its_agent_leaves_the_slot_free_and_not_serving() -> None:
    sw = _switch()
    keys = [key_bytes(i, KF) for i in range(SLOTS + 1)]
    store = {k: bytes([i + 1]) * VB for i, k in enumerate(keys)}
    nc = NetCacheController(sw, SLOTS, VB, threshold=1)

    def dead(key: bytes) -> bytes:
        raise ConnectionError("the agent died")

    with pytest.raises(ConnectionError):
        nc.install(keys[0], dead)
    assert sorted(nc.free) == list(range(SLOTS)) and not nc.cached and not nc.moving
    assert _get(sw, keys[0]) is None
    # Dying at the second read (the mark was lost), after the entry went in: deleted again.
    lost = RestartedAgent()
    nc.moving = lost
    reads: list[bytes] = []

    def dies_second_time(key: bytes) -> bytes:
        if reads:
            raise ConnectionError("the new agent died too")
        reads.append(key)
        return store[key]

    with pytest.raises(ConnectionError):
        nc.install(keys[0], dies_second_time)
    assert not lost and not nc.cached and sorted(nc.free) == list(range(SLOTS))
    assert _get(sw, keys[0]) is None
    # The agent back: every slot is there to fill, each serving its key's value.
    nc.moving = set()
    for k in keys[1:]:
        assert nc.install(k, store.__getitem__)
    assert not nc.free and all(_get(sw, k) == store[k] for k in keys[1:])


def test_an_install_whose_agent_restarted_after_the_mark_serves_the_write_that_slipped_in() -> None:
    sw = _switch()
    key = key_bytes(0, KF)
    store = {key: b"\x01" * VB}
    nc = NetCacheController(sw, SLOTS, VB, threshold=1, moving=RestartedAgent())

    def value_of(k: bytes) -> bytes:
        v = store[k]
        store[k] = b"\x02" * VB  # a write the new agent (no mark) applied just after the read
        return v

    assert nc.install(key, value_of)
    assert nc.moves_redone == 1 and not nc.moving
    assert _get(sw, key) == b"\x02" * VB
