"""K3: an application written only as the three hooks runs under the framework.

A tiny read-only KV store defined here (process_query, datamv_server2switch,
datamv_switch2server) on the generic Hare switch program: the framework alone must offload
the exactly hottest keys (against a Counter), serve them from the switch with the right
values (against a dict), stop serving a key while it is being replaced, bring each evicted
key's data home before its slot is reused, and stay within 2×M table writes per
replacement.
"""

from __future__ import annotations

from collections import Counter

from inswitch import _native
from inswitch.apps.hare import framework as fw
from inswitch.apps.hare.framework import CLIENT, HareServer, Query, server_ep
from inswitch.apps.hare.workload import key_bytes

KF, VB, SLOTS, N_KEYS, SERVERS = 16, 8, 8, 40, 2
OP_GET, OP_GET_REPLY, FLAG_HIT = 1, 2, 0x01


class TinyKv(HareServer):
    """The whole host side of the application."""

    def __init__(self, idx: int, data: dict[bytes, bytes], moves: list[tuple[str, bytes, int]]) -> None:
        super().__init__(idx, SLOTS, KF)
        self.data = data
        self.moves = moves  # shared by the servers: the order of all data movements

    def process_query(self, q: Query) -> list[bytes]:
        self.update_statistic(q.key)
        return [self.frame(CLIENT, OP_GET_REPLY, q.key, self.data[q.key], q.seq)]

    def datamv_server2switch(self, key: bytes, slot: int) -> None:
        self.moves.append(("in", key, slot))
        self.control(fw.OP_DATAMV_TO_SWITCH, slot, self.data[key], key=key)

    def datamv_switch2server(self, key: bytes, slot: int) -> None:
        self.moves.append(("out", key, slot))


def _rig():
    sw = _native.SimSwitch(["forward", f"hare:key={KF},value={VB},slots={SLOTS}"], 1 + SERVERS)
    for h, port in [(1, 0), (0xFE, 0)] + [(2 + s, 1 + s) for s in range(SERVERS)]:
        sw.table_write("forward", "l2_dmac", "insert", [fw.mac(h)], "l2_forward", [port.to_bytes(2, "big")])
        sw.table_write("forward", "l2_smac", "insert", [fw.mac(h)], "nop", [])
    for s in range(SERVERS):
        sw.table_write("hare", "control_ports", "insert", [(1 + s).to_bytes(2, "big")], "allow_control", [])
    keys = [key_bytes(i, KF) for i in range(N_KEYS)]
    data = {k: bytes([i + 1]) * VB for i, k in enumerate(keys)}
    owner = {k: i % SERVERS for i, k in enumerate(keys)}
    moves: list[tuple[str, bytes, int]] = []
    servers = [TinyKv(s, {k: v for k, v in data.items() if owner[k] == s}, moves) for s in range(SERVERS)]
    for srv in servers:
        srv.send = lambda frames, port=1 + srv.idx: sw.process(port, frames)
    params = fw.FrameworkParams(SLOTS, SLOTS, 0.1, 10_000.0, 1_000_000.0, stats="clear")
    hare = fw.Hare(sw, "hare", KF, servers, owner.__getitem__, params)
    return sw, keys, data, owner, servers, hare


def _query(sw, servers, owner, data, keys_seq: list[bytes]) -> tuple[Counter, Counter]:
    """GETs through the switch and the servers; (switch hits, server-seen) per key. Every
    reply is checked against the dict."""
    frames = [_native.hare_frame(CLIENT, server_ep(owner[k]), OP_GET, k, KF, b"", n) for n, k in enumerate(keys_seq)]
    hits, seen = Counter(), Counter()
    replies = []
    out = []
    for lo in range(0, len(frames), 256):  # within the egress queues of one batch
        out.extend(sw.process(0, frames[lo : lo + 256]))
    for port, f in out:
        if port == 0:
            replies.append(f)
        else:
            q = Query.parse(f)
            assert q is not None
            seen[q.key] += 1
            for p2, r in sw.process(port, servers[port - 1].process_query(q)):
                assert p2 == 0
                replies.append(r)
    assert len(replies) == len(keys_seq)
    for r in replies:
        q = Query.parse(r)
        assert q is not None and q.op == OP_GET_REPLY
        assert q.value == data[q.key], "a reply carried a wrong value"
        if q.flags & FLAG_HIT:
            hits[q.key] += 1
    return hits, seen


def test_framework_offloads_the_hottest_and_moves_data_both_ways():
    sw, keys, data, owner, servers, hare = _rig()
    # Phase 1: key i asked 3 * (N - i) times; nothing is offloaded, the servers see all.
    phase1 = [k for i, k in enumerate(keys) for _ in range(3 * (N_KEYS - i))]
    hits, seen = _query(sw, servers, owner, data, phase1)
    assert not hits and seen == Counter(phase1)
    hare.round(0.1)
    hare.run_due(1.0)
    want1 = {k for k, _ in Counter(phase1).most_common(SLOTS)}
    assert set(hare.slots.values()) == want1
    assert hare.evictions == 0 and hare.offloads == SLOTS
    # Phase 2: the same keys again; exactly the offloaded ones hit the switch.
    hits, seen = _query(sw, servers, owner, data, phase1)
    assert set(hits) == want1 and all(hits[k] == Counter(phase1)[k] for k in want1)
    assert set(seen) == set(keys) - want1
    # Phase 3: popularity moves to the last 20 keys, each asked more than any key before.
    phase3 = [k for i, k in enumerate(keys[20:]) for _ in range(200 + 5 * i)]
    _query(sw, servers, owner, data, phase3)
    ops_before = hare.table_ops
    hare.round(0.2)
    want3 = {k for k, _ in Counter(phase3).most_common(SLOTS)}
    # Step 4 took effect at once: a key being replaced is no longer served by the switch,
    # and its server knows it is moving.
    old = sorted(want1)[0]
    assert servers[owner[old]].is_moving(old)
    hits, seen = _query(sw, servers, owner, data, [old])
    assert not hits and seen[old] == 1
    hare.run_due(1.0)
    assert set(hare.slots.values()) == want3
    assert hare.evictions == SLOTS and not hare.moving
    m = len(hare.emat.segments)
    assert hare.table_ops - ops_before <= 2 * m * SLOTS
    # Every evicted key's data came home (from the slot it was in) before its slot took
    # the new key: replay the movements against a slot table.
    table: dict[int, bytes] = {}
    for d, k, slot in servers[0].moves:
        if d == "out":
            assert table.pop(slot) == k
        else:
            assert slot not in table, "a slot was refilled before its data went home"
            table[slot] = k
    assert set(table.values()) == want3
    assert {k for d, k, _s in servers[0].moves if d == "out"} == want1
    # Phase 4: the new hot keys hit, the evicted ones do not.
    hits, _ = _query(sw, servers, owner, data, list(want3) + list(want1))
    assert set(hits) == want3
    assert "violation" not in sw.drops()


def test_a_server_dying_in_the_middle_of_a_round_leaves_nothing_half_done():
    # Server 0 dies in Step 5 of a replacement round, just after its data movement
    # reached the switch (so a slot holds part of a move that never finished). The round
    # fails with the server's error; the framework has undone the rest of it: no object
    # marked moving, the e-MAT and the slot map in step, every switch hit serving its
    # key's right value; with the server back, the next round offloads the hot keys.
    sw, keys, data, owner, servers, hare = _rig()
    phase1 = [k for i, k in enumerate(keys) for _ in range(3 * (N_KEYS - i))]
    _query(sw, servers, owner, data, phase1)
    hare.round(0.1)
    hare.run_due(1.0)
    phase3 = [k for i, k in enumerate(keys[20:]) for _ in range(200 + 5 * i)]
    _query(sw, servers, owner, data, phase3)
    dying = servers[0]
    moved = dying.datamv_server2switch

    def dies(key: bytes, slot: int) -> None:
        moved(key, slot)
        raise ConnectionError("server 0 died")

    dying.datamv_server2switch = dies  # type: ignore[method-assign]
    hare.round(0.2)
    try:
        hare.run_due(1.0)
        raise AssertionError("the round did not meet the dead server")
    except ConnectionError:
        pass
    assert not hare.moving and not any(s.moving for s in servers)
    assert len(hare.emat) == len(hare.slots) and all(hare.emat.slot_of(k) == s for s, k in hare.slots.items())
    assert len(hare.slots) < SLOTS, "the slot the failed move touched was freed"
    hits, _ = _query(sw, servers, owner, data, list(keys))  # each reply checked against the dict
    assert set(hits) == set(hare.slots.values())
    dying.datamv_server2switch = moved  # type: ignore[method-assign]
    _query(sw, servers, owner, data, phase3)
    hare.round(0.3)
    hare.run_due(2.0)
    want3 = {k for k, _ in Counter(phase3).most_common(SLOTS)}
    assert set(hare.slots.values()) == want3 and not hare.moving
    hits, _ = _query(sw, servers, owner, data, list(want3))
    assert set(hits) == want3
    assert "violation" not in sw.drops()
