"""The lock server's write-ahead journal (`lockapp.LockJournal`): random acquires,
releases, retransmissions and moves onto the switch and home; a crash after any byte the
journal's file held (cut inside each record and at its end; a compaction's file is
renamed in whole) replays to the table the live server had after its last whole record. Also the idempotence of retransmitted requests (lockgen's (client, seq))."""

from __future__ import annotations

import random
import struct
from collections import deque
from pathlib import Path
from typing import Any

from inswitch.apps.hare.lockapp import QUEUE, LockJournal, LockServer


def _server(path: Path, compact_at: int = 10_000) -> LockServer:
    s = LockServer(0, 4)
    s.journal = LockJournal(str(path), compact_at=compact_at)
    s.replay(s.journal.open())
    s.send = lambda frames: []  # type: ignore[method-assign]
    return s


def _replayed(path: Path) -> dict[str, Any]:
    s = LockServer(0, 4)
    s.replay(LockJournal.read(str(path))[0])
    return s.table()


class FakeSwitch:
    """The switch's copy of locks moved onto it, read back as `hare_lock` lays it out."""

    def __init__(self) -> None:
        self.held: dict[int, tuple[int, int, list[tuple[int, int, int, bool]]]] = {}
        self.reading: tuple[int, int, list[tuple[int, int, int, bool]]] = (0, 0, [])

    def control(self, op: int, slot: int, value: bytes, aux: int = 0, key: bytes = b"") -> bytes:
        holders, mode, q = self.reading
        if aux == QUEUE:
            return struct.pack(">II", 0, holders | (mode << 16))
        if aux == QUEUE + 1:
            mask = sum(1 << i for i, w in enumerate(q) if w[3])
            return struct.pack(">II", 0, 0 | (len(q) << 3) | (mask << 8))
        if aux < len(q):
            c, ip, sq, _x = q[aux]
            return struct.pack(">II", (c << 16) | sq, ip)
        return b""


def test_replay_of_every_prefix_equals_the_live_table(tmp_path: Path) -> None:
    rng = random.Random(17)
    path = tmp_path / "j"
    s = _server(path, compact_at=20)
    sw = FakeSwitch()
    s.control = sw.control  # type: ignore[method-assign]
    n_clients, locks = 6, [1, 2, 3]
    state: dict[int, tuple[str, int, int]] = {c: ("idle", 0, 0) for c in range(n_clients)}  # phase, lock, seq
    seq = 0
    # (file bytes after the step, live table after it, whether the step rewrote the file)
    steps: list[tuple[bytes, dict[str, Any], bool]] = [(path.read_bytes(), s.table(), True)]
    for _ in range(160):
        before = s.journal.compactions if s.journal else 0
        c = rng.randrange(n_clients)
        phase, lock, sq = state[c]
        r = rng.random()
        on = [lk for lk in (1, 2, 3) if lk in sw.held]
        if r < 0.08 or not locks:  # a lock onto the switch (its clients wait there), or home
            if on and (not locks or rng.random() < 0.5):
                lk = rng.choice(on)
                sw.reading = sw.held.pop(lk)
                s.datamv_switch2server(lk.to_bytes(4, "big"), 0)
                locks.append(lk)
            else:
                lk = rng.choice(locks)
                st = s.st(lk)
                sw.held[lk] = (st.holders, st.mode, list(st.queue or ())[:QUEUE])
                s.datamv_server2switch(lk.to_bytes(4, "big"), 0)
                locks.remove(lk)
        elif phase == "idle" and locks:
            seq += 1
            lk = rng.choice(locks)
            state[c] = ("acq", lk, seq)
            s.acquire(lk, c, 100 + c, seq, rng.random() < 0.5)
        elif phase == "acq" and lock in locks and rng.random() < 0.3:
            s.acquire(lock, c, 100 + c, sq, False)  # a retransmission: applied once
        elif phase == "held" and lock in locks:
            s.release(lock, c, sq, 100 + c)
            state[c] = ("released", lock, sq)
        elif phase == "released" and lock in locks:
            if rng.random() < 0.3:
                s.release(lock, c, sq, 100 + c)  # retransmitted: releases nothing
            state[c] = ("idle", 0, 0)
        s.commit()
        for cl, (ph, lk, q) in state.items():  # the grants this step sent
            if ph == "acq" and lk in locks and (cl, q) in s.st(lk).named:
                state[cl] = ("held", lk, q)
        steps.append((path.read_bytes(), s.table(), s.journal is not None and s.journal.compactions != before))
    assert s.journal is not None and s.journal.compactions >= 3, "compaction exercised"
    assert s.duplicates > 0, "retransmissions exercised"
    cut = tmp_path / "cut"
    checked = 0
    for (prev, t_prev, _), (cur, t_cur, rewrote) in zip(steps, steps[1:]):
        if rewrote or not cur.startswith(prev):  # renamed over whole: no prefix of it exists
            cut.write_bytes(cur)
            assert _replayed(cut) == t_cur
            continue
        # the record's every byte would do as well: a few cuts inside it, and its end
        for n in sorted({len(prev), len(prev) + 1, (len(prev) + len(cur)) // 2, len(cur) - 1, len(cur)} & set(range(len(prev), len(cur) + 1))):
            cut.write_bytes(cur[:n])
            assert _replayed(cut) == (t_cur if n == len(cur) else t_prev), n
            checked += 1
    assert checked > 300


def test_a_torn_last_record_is_cut_off_and_appends_go_on(tmp_path: Path) -> None:
    path = tmp_path / "j"
    s = _server(path)
    s.acquire(4, 1, 11, 1, True)
    s.commit()
    whole = path.read_bytes()
    s.acquire(4, 2, 12, 2, True)
    s.commit()
    path.write_bytes(path.read_bytes()[: len(whole) + 5])  # the kill cut the second write
    s2 = _server(path)
    assert s2.locks[4].holders == 1 and not s2.locks[4].queue
    s2.acquire(4, 2, 12, 2, True)  # the client retransmits: queued once
    s2.commit()
    assert _replayed(path) == s2.table()
    assert list(s2.locks[4].queue or ()) == [(2, 12, 2, True)]


def test_retransmissions_are_answered_from_the_table() -> None:
    s = LockServer(0, 4)
    assert s.acquire(9, 1, 11, 5, True) == [(1, 11, 5)]
    assert s.acquire(9, 1, 11, 5, True) == [(1, 11, 5)], "granted: granted again"
    assert s.acquire(9, 2, 12, 6, True) == [] and s.acquire(9, 2, 12, 6, True) == []
    assert len(s.locks[9].queue or ()) == 1, "queued once"
    assert s.release(9, 1, 5, 11) == [(2, 12, 6)]
    assert s.release(9, 1, 5, 11) == [], "a retransmitted release frees nothing"
    assert s.locks[9].holders == 1 and (2, 6) in s.locks[9].named
    assert s.acquire(9, 1, 11, 5, True) == [] and not s.locks[9].queue, "an acquire already released is stale"
    assert s.duplicates == 4
    # a holder granted on the switch (its count came home) is released by anyone's release
    s.home(10, 1, 2, deque())
    assert s.release(10, 3, 7, 13) == [] and s.locks[10].holders == 0
    assert sorted(s.reanswer()) == sorted([(7, 9, 2, 12, 6), (8, 9, 1, 11, 5), (8, 10, 3, 13, 7)])
