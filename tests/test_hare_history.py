"""The per-key linearizability checker (Porcupine's algorithm) against hand-made histories
and against a brute-force search over small random ones."""

from __future__ import annotations

import random

from inswitch.hare import history
from inswitch.hare.history import Operation as O


def test_hand_made_linearizable() -> None:
    # w(1) overlaps r()->1 and r()->0: both orders exist.
    ops = [O("set", b"1", 0, 10), O("get", b"1", 2, 4), O("get", b"0", 3, 5)]
    assert history.linearizable(ops, b"0")
    assert history.stale_reads(ops, b"0") == 0
    # sequential write then read of it
    assert history.linearizable([O("set", b"a", 0, 1), O("get", b"a", 2, 3)], None)
    # a delete (set to None) then a read of absent
    assert history.linearizable([O("set", b"a", 0, 1), O("set", None, 2, 3), O("get", None, 4, 5)], b"x")


def test_hand_made_not_linearizable() -> None:
    # a stale read: the write completed before the read started
    stale = [O("set", b"1", 0, 1), O("get", b"0", 2, 3)]
    assert not history.linearizable(stale, b"0")
    assert history.stale_reads(stale, b"0") == 1
    # new-old inversion: r1 sees 1, then a later read sees 0, with the write still open
    inv = [O("set", b"1", 0, 100), O("get", b"1", 10, 20), O("get", b"0", 30, 40)]
    assert not history.linearizable(inv, b"0")
    # a value nobody wrote
    assert not history.linearizable([O("get", b"zz", 0, 1)], b"0")


def test_lost_write_detected() -> None:
    recs = [(b"k", "set", b"1", 0, 1), (b"k", "set", b"2", 2, 3)]
    assert history.check(recs, {b"k": b"0"}, {b"k": b"2"}).lost_writes == 0
    assert history.check(recs, {b"k": b"0"}, {b"k": b"1"}).lost_writes == 1
    # an unacknowledged write may or may not have landed
    assert history.check(recs, {b"k": b"0"}, {b"k": b"9"}, {b"k": [b"9"]}).lost_writes == 0


def test_an_unacknowledged_write_that_never_landed_is_no_lost_write() -> None:
    """A write that timed out (recorded as it is in the KV runs: completion `UNACKED`, listed
    in `unacked`) may never have reached the store: the value before it may remain. An
    acknowledged write is still required."""
    unacked = [(b"k", "set", b"9", 5, history.UNACKED)]
    assert history.check(unacked, {b"k": b"0"}, {b"k": b"0"}, {b"k": [b"9"]}).lost_writes == 0
    assert history.check(unacked, {b"k": b"0"}, {b"k": b"9"}, {b"k": [b"9"]}).lost_writes == 0
    acked_then_unacked = [(b"k", "set", b"1", 0, 1)] + unacked
    assert history.check(acked_then_unacked, {b"k": b"0"}, {b"k": b"1"}, {b"k": [b"9"]}).lost_writes == 0
    assert history.check(acked_then_unacked, {b"k": b"0"}, {b"k": b"0"}, {b"k": [b"9"]}).lost_writes == 1


def test_porcupine_agrees_with_brute_force_on_random_small_histories() -> None:
    rng = random.Random(7)
    seen = {True: 0, False: 0}
    for _ in range(1500):
        n = rng.randint(1, 6)
        ops = []
        for _ in range(n):
            c = rng.randint(0, 20)
            r = c + rng.randint(0, 8)
            if rng.random() < 0.45:
                ops.append(O("set", rng.choice([b"a", b"b", b"c", None]), c, r))
            else:
                ops.append(O("get", rng.choice([b"a", b"b", b"c", None, b"0"]), c, r))
        want = history.brute_force(ops, b"0")
        assert history.linearizable(ops, b"0") == want, ops
        assert history.stale_reads(ops, b"0") == history.stale_reads_naive(ops, b"0"), ops
        if history.stale_reads(ops, b"0"):
            assert not want  # a stale read is never linearizable
        seen[want] += 1
    assert seen[True] > 100 and seen[False] > 100  # both outcomes exercised
