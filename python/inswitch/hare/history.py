"""Linearizability of each key as a read/write register, over the operations every client
recorded (invocation and completion times on the machine's monotonic clock).

`linearizable` is Porcupine's algorithm (Lowe's extension of Wing & Gong's search with a
cache of (linearized set, state) already seen; github.com/anishathalye/porcupine,
`checkSingle`): walk the history's call/return events, linearize a pending call when the
register allows its result, backtrack at a return whose call could not be placed.
`brute_force` tries every order consistent with real time (for tests on small histories).

`stale_reads` counts reads the issue's rule refuses: a read must return the value of the
latest write completed before it started, or of a write concurrent with it.
`lost_writes` counts keys whose stored value is not one a last write could have left."""

from __future__ import annotations

import bisect
import itertools
from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

#: (key, kind "get"|"set", value (None: absent / deleted), invoked, completed)
Record = tuple[bytes, str, Optional[bytes], int, int]


@dataclass(frozen=True)
class Operation:
    kind: str
    value: Optional[bytes]
    call: int
    ret: int


def by_key(records: Iterable[Record]) -> dict[bytes, list[Operation]]:
    out: dict[bytes, list[Operation]] = defaultdict(list)
    for k, kind, v, c, r in records:
        out[k].append(Operation(kind, v, c, r))
    return out


def linearizable(ops: Sequence[Operation], init: Optional[bytes]) -> bool:
    """Porcupine's search for one register starting at `init`.

    Operations are numbered by invocation time, and the cache keys a linearized set by its
    lowest unlinearized operation and the bits above it: the same set (so the same
    search), but a key of the operations still in play rather than of the whole history,
    so a long history (a native load generator's hundreds of thousands of operations on a
    hot key) does not fill memory with one bitset of all of them per step."""
    ops = sorted(ops, key=lambda o: o.call)
    n = len(ops)
    if n == 0:
        return True
    # Events: calls sort before returns at the same instant (they overlap).
    events = sorted([(o.call, 0, i) for i, o in enumerate(ops)] + [(o.ret, 1, i) for i, o in enumerate(ops)])
    # Doubly linked list over events; index n*2 is the head sentinel.
    m = len(events)
    nxt = list(range(1, m + 1)) + [0]
    prv = [m] + list(range(0, m - 1)) + [0]
    head = m
    nxt[head], prv[head] = 0, head
    nxt[m - 1] = -1
    ret_pos = [0] * n
    for pos, (_t, is_ret, i) in enumerate(events):
        if is_ret:
            ret_pos[i] = pos
    prv[0] = head

    def unlink(p: int) -> None:
        a, b = prv[p], nxt[p]
        nxt[a] = b
        if b != -1:
            prv[b] = a

    def relink(p: int) -> None:
        a, b = prv[p], nxt[p]
        nxt[a] = p
        if b != -1:
            prv[b] = p

    cache: set[tuple[int, int, Optional[bytes]]] = set()
    stack: list[tuple[int, Optional[bytes]]] = []
    state, lin = init, 0
    e = nxt[head]
    while nxt[head] != -1:
        _t, is_ret, i = events[e]
        if not is_ret:
            o = ops[i]
            ok = o.kind == "set" or o.value == state
            new_state = o.value if o.kind == "set" else state
            if ok:
                new_lin = lin | (1 << i)
                low = (~new_lin & (new_lin + 1)).bit_length() - 1  # lowest operation not linearized
                seen = (low, new_lin >> low, new_state)
                if seen not in cache:
                    cache.add(seen)
                    stack.append((e, state))
                    state, lin = new_state, new_lin
                    unlink(e)
                    unlink(ret_pos[i])
                    e = nxt[head]
                    continue
            e = nxt[e]
        else:
            if not stack:
                return False
            e, state = stack.pop()
            i = events[e][2]
            lin &= ~(1 << i)
            relink(ret_pos[i])
            relink(e)
            e = nxt[e]
    return True


def brute_force(ops: Sequence[Operation], init: Optional[bytes]) -> bool:
    """Some order of all operations, each after every operation that returned before it
    was called, in which every read returns the register's value."""
    for perm in itertools.permutations(range(len(ops))):
        pos = {i: p for p, i in enumerate(perm)}
        if any(ops[a].ret < ops[b].call and pos[a] > pos[b] for a in range(len(ops)) for b in range(len(ops))):
            continue
        state, good = init, True
        for i in perm:
            o = ops[i]
            if o.kind == "set":
                state = o.value
            elif o.value != state:
                good = False
                break
        if good:
            return True
    return False


def stale_reads(ops: Sequence[Operation], init: Optional[bytes]) -> int:
    """Reads returning neither the latest write completed before them nor a concurrent one.

    A write w is superseded for read r when another write w2 ran entirely between them
    (w.ret < w2.call, w2.ret < r.call): with C the latest call of a write completed
    before r started, the allowed writes are those with w.ret >= C and w.call <= r.ret
    (and the initial value when no write completed before r)."""
    writes = sorted((o for o in ops if o.kind == "set"), key=lambda o: o.ret)
    rets = [w.ret for w in writes]
    prefix_max_call: list[int] = []
    m = -1
    for w in writes:
        m = max(m, w.call)
        prefix_max_call.append(m)
    by_value: dict[Optional[bytes], list[Operation]] = defaultdict(list)
    for w in writes:
        by_value[w.value].append(w)
    bad = 0
    for r in ops:
        if r.kind != "get":
            continue
        n_before = bisect.bisect_left(rets, r.call)  # writes with ret < r.call
        if n_before == 0:
            if r.value == init or any(w.call <= r.ret for w in by_value.get(r.value, ())):
                continue
            bad += 1
            continue
        c = prefix_max_call[n_before - 1]
        if not any(w.ret >= c and w.call <= r.ret for w in by_value.get(r.value, ())):
            bad += 1
    return bad


#: The completion time recorded for a write never acknowledged (it may land at any time, or
#: never): `check` callers record such writes with it and list them in `unacked`.
UNACKED = 1 << 62


def may_remain(ops: Sequence[Operation], init: Optional[bytes], unacked: Iterable[Optional[bytes]] = ()) -> set[Optional[bytes]]:
    """Values the store may hold after all operations: an acknowledged write no other
    acknowledged write follows in real time (or the initial value when none completed),
    or an unacknowledged one (which may also never have landed, so it hides nothing)."""
    writes = [o for o in ops if o.kind == "set" and o.ret < UNACKED]
    latest_call = max((w.call for w in writes), default=-1)
    last = {w.value for w in writes if w.ret >= latest_call}
    return (last or {init}) | set(unacked)


def stale_reads_naive(ops: Sequence[Operation], init: Optional[bytes]) -> int:
    """The rule as written (quadratic per read): for tests."""
    writes = [o for o in ops if o.kind == "set"]
    bad = 0
    for r in ops:
        if r.kind != "get":
            continue
        allowed = {w.value for w in writes if w.call <= r.ret and not any(w.ret < w2.call and w2.ret < r.call for w2 in writes)}
        if not any(w.ret < r.call for w in writes):
            allowed.add(init)
        if r.value not in allowed:
            bad += 1
    return bad


@dataclass
class Verdict:
    keys: int
    operations: int
    linearizable: bool
    nonlinearizable_keys: list[str]
    stale_reads: int
    lost_writes: Optional[int]


def check(records: Iterable[Record], init: dict[bytes, Optional[bytes]], final: Optional[dict[bytes, Optional[bytes]]] = None, unacked: Optional[dict[bytes, list[Optional[bytes]]]] = None) -> Verdict:
    """Every key of `records`; `final` (the store read back after the run) for lost writes."""
    keys = by_key(records)
    bad_keys, stale, lost, n = [], 0, 0, 0
    for k, ops in keys.items():
        n += len(ops)
        i = init.get(k)
        if not linearizable(ops, i):
            bad_keys.append(k.decode(errors="replace"))
        stale += stale_reads(ops, i)
        if final is not None and final.get(k) not in may_remain(ops, i, (unacked or {}).get(k, [])):
            lost += 1
    return Verdict(len(keys), n, not bad_keys, bad_keys[:20], stale, lost if final is not None else None)
