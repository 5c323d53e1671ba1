"""K3, Hare's automatic offloading framework (§IV-D), host side and switch control plane.

An application is written as a backend server class derived from `HareServer` (the
paper's User class) that supplies only three functions:

- `process_query(query)`: answer one query that reached the server (the switch did not
  hit it), calling the built-in `update_statistic(key)` so NOO-Stat sees it;
- `datamv_server2switch(key, slot)`: move the object's application data onto the switch
  (control packets through the built-in `send`), while the slot is being replaced;
- `datamv_switch2server(key, slot)`: bring dirty application data back before the object
  is evicted (nothing for a store whose switch copy is never dirty).

Everything else is `Hare` here, one copy for every application: OO-Stat fetched by
packets, NOO-Stat integrated across servers, the analyzer's Steps 1–7 with batch size K,
the state manager (slots and objects being replaced are marked, so neither the switch nor
a server serves them inconsistently), the e-MAT updater (M-modifier, through the switch
OS), the pacing of each round by what its plane interactions cost, and the bookkeeping.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from inswitch import _native  # type: ignore[attr-defined]

OP_STAT_FETCH, OP_STATE_SET, OP_DATAMV_TO_SWITCH, OP_DATAMV_TO_SERVER = 16, 17, 18, 19
STATE_EMPTY, STATE_VALID, STATE_INVALID, STATE_REPLACING = 0, 1, 2, 3
PORT_SERVER, PORT_CLIENT = 7370, 7371

Endpoint = tuple[bytes, bytes, int]
#: Frames into the switch from a server's port; returns the frames the switch sent out.
SendFn = Callable[[list[bytes]], list[tuple[int, bytes]]]


def mac(i: int) -> bytes:
    return bytes([2, 0, 0, 0, 0, i])


def ip(i: int) -> bytes:
    return bytes([10, 0, 0, i])


CLIENT: Endpoint = (mac(1), ip(1), PORT_CLIENT)
CPU: Endpoint = (mac(0xFE), ip(0xFE), PORT_CLIENT)


def server_ep(s: int) -> Endpoint:
    return (mac(2 + s), ip(2 + s), PORT_SERVER)


@dataclass
class Query:
    """A received, parsed Hare message (the built-in `receive`)."""

    op: int
    flags: int
    seq: int
    hit_index: int
    aux: int
    status: int
    key: bytes
    value: bytes
    ip: bytes

    @staticmethod
    def parse(frame: bytes) -> Optional["Query"]:
        m = _native.hare_parse(frame)
        if m is None:
            return None
        return Query(m[0], m[1], m[2], m[3], m[4], m[5], bytes(m[6]), bytes(m[7]), bytes(m[8]))


class HareServer:
    """The User class: the framework's built-ins; applications override the three hooks."""

    #: Control packets each hook sends per object (the analyzer paces rounds by them).
    DATAMV_PACKETS_TO_SWITCH = 1
    DATAMV_PACKETS_TO_SERVER = 0

    def __init__(self, idx: int, k: int, key_field: int) -> None:
        self.idx = idx
        self.key_field = key_field
        self.noo = _native.NooStat(k)
        self.free_at = 0.0
        self.send: SendFn = lambda frames: []
        #: The state manager's objects being moved (shared with the framework).
        self.moving: set[bytes] = set()

    # ---- built-ins ---------------------------------------------------------------------

    @property
    def ep(self) -> Endpoint:
        return server_ep(self.idx)

    def is_moving(self, key: bytes) -> bool:
        return key in self.moving

    def update_statistic(self, key: bytes) -> None:
        self.noo.record(key)

    def frame(self, dst: Endpoint, op: int, key: bytes, value: bytes, seq: int = 0, hit_index: int = 0, aux: int = 0, status: int = 0) -> bytes:
        return _native.hare_frame(self.ep, dst, op, key, self.key_field, value, seq, hit_index, aux, status, 0)

    def control(self, op: int, slot: int, value: bytes, aux: int = 0, key: bytes = b"") -> bytes:
        """One data-movement packet to the switch; the value of its reply."""
        out = self.send([self.frame(self.ep, op, key, value, 0, slot, aux)])
        q = Query.parse(out[0][1]) if out else None
        return q.value if q else b""

    # ---- the application's hooks ---------------------------------------------------------

    def process_query(self, q: Query) -> list[bytes]:
        raise NotImplementedError

    def datamv_server2switch(self, key: bytes, slot: int) -> None:
        raise NotImplementedError

    def datamv_switch2server(self, key: bytes, slot: int) -> None:
        """No dirty data on the switch by default."""


def unmark(moving: set[bytes], key: bytes) -> None:
    """Lift `key`'s moving mark in a round that failed: a mark whose server died with it
    (the error the round met) is dropped here only, its new process never had it."""
    try:
        moving.discard(key)
    except Exception:
        set.discard(moving, key)


def mark_lost(moving: set[bytes], key: bytes) -> bool:
    """Whether `key` is marked here but no longer at its server: the server restarted
    since the mark (`held`, as the rack's marks know it), so a write of the object may have
    been applied in the middle of its move. Plain sets (one process) never lose a mark."""
    held = getattr(moving, "held", None)
    return held is not None and not held(key)


@dataclass
class FrameworkParams:
    slots: int
    batch: int
    t_wait: float
    table_rate: float
    packet_rate: float
    #: "age" (OO-Stat and NOO-Stat kept, halved every second) or "clear" (Step 7 clears
    #: them every round).
    stats: str = "age"


class Hare:
    """The framework's switch control plane: analyzer, state manager, e-MAT updater.

    `run_due(t)` applies the offloading processes that have finished by `t`; `tick(t)`
    starts the rounds due by `t` (every `t_wait`, unless the previous one is still busy).
    """

    def __init__(self, sw: object, program: str, key_field: int, servers: Sequence[HareServer], server_of: Callable[[bytes], int], p: FrameworkParams) -> None:
        self.sw, self.program, self.p = sw, program, p
        self.servers, self.server_of = servers, server_of
        self.emat = _native.HareEmat(key_field, p.slots)
        self.slots: dict[int, bytes] = {}
        #: A newly offloaded object's count from its server: it is not evicted for
        #: having no switch history.
        self.base: dict[int, int] = {}
        #: Objects being replaced (state manager): their servers answer "retry".
        self.moving: set[bytes] = set()
        self.busy_until = 0.0
        self.next_round = p.t_wait
        self.next_age = 1.0
        self.pending: list[tuple[float, Callable[[], None]]] = []
        self.table_ops = 0
        self.packet_ops = 0
        self.offloads = 0
        self.evictions = 0
        #: Moves done again because the object's server restarted mid-move (`offload`).
        self.moves_redone = 0
        #: Undone replacements of dirty objects (`abandon`): brought home and evicted, or
        #: left valid in their slots because their servers were down too.
        self.undo_homes = 0
        self.undo_stays = 0
        for srv in servers:
            srv.moving = self.moving

    # ---- plane interactions --------------------------------------------------------------

    def cpu(self, op: int, slot: int, status: int = 0, value: bytes = b"") -> list[bytes]:
        """A control packet from the switch CPU; the packets it sends back."""
        self.packet_ops += 1
        return self.sw.packet_out(_native.hare_frame(CPU, server_ep(0), op, b"", 0, value, 0, slot, 0, status, 0))  # type: ignore[attr-defined]

    def cpu_many(self, packets: list[tuple[int, int, int, bytes]]) -> list[list[bytes]]:
        """Several control packets `(op, slot, status, value)`, all sent before any answer
        is awaited when the switch can (`packet_out_many`); the answers in order."""
        frames = [_native.hare_frame(CPU, server_ep(0), op, b"", 0, value, 0, slot, 0, status, 0) for op, slot, status, value in packets]
        self.packet_ops += len(frames)
        many = getattr(self.sw, "packet_out_many", None)
        if many is not None:
            return many(frames)  # type: ignore[no-any-return]
        return [self.sw.packet_out(f) for f in frames]  # type: ignore[attr-defined]

    def write_emat(self, ops: list) -> None:
        for mat, write, first, seg, index in ops:
            self.sw.table_write(self.program, f"emat_{mat + 1}", write, [first, seg], "set_index", [index.to_bytes(2, "big")])  # type: ignore[attr-defined]
            self.table_ops += 1

    # ---- pacing --------------------------------------------------------------------------

    def run_due(self, now: float) -> None:
        while self.pending and self.pending[0][0] <= now:
            self.pending.pop(0)[1]()

    def tick(self, now: float) -> None:
        while now >= self.next_round:
            self.run_due(self.next_round)
            if self.next_round >= self.busy_until:
                self.round(self.next_round)
            self.next_round += self.p.t_wait
        self.run_due(now)

    # ---- Steps 1–7 -----------------------------------------------------------------------

    def round(self, now: float) -> None:
        p, K = self.p, self.p.batch
        aging = p.stats == "age" and now >= self.next_age
        if aging:
            self.next_age += 1.0
            for srv in self.servers:
                srv.noo.age()
            self.base = {k: v // 2 for k, v in self.base.items()}
        # Steps 1–2: OO-Stat of the offloaded objects, by packets (fetch, clear or halve).
        counts: list[tuple[int, bytes, int]] = []
        fetch = 1 if p.stats == "clear" else 2 if aging else 0
        offloaded = list(self.slots.items())
        for (slot, obj), pins in zip(offloaded, self.cpu_many([(OP_STAT_FETCH, slot, fetch, b"\0\0\0\0") for slot, _o in offloaded])):
            q = Query.parse(pins[0]) if pins else None
            c = struct.unpack(">I", q.value[:4])[0] if q else 0
            counts.append((c + (self.base.get(slot, 0) if p.stats == "age" else 0), obj, slot))
        o_switch = sorted(counts, key=lambda x: x[0])[:K]
        o_server = _native.noostat_integrate([s.noo.top() for s in self.servers], K)
        if p.stats == "clear":  # Step 7 for NOO-Stat (OO-Stat was fetched-and-cleared)
            for srv in self.servers:
                srv.noo.clear()
        # Step 3: the K globally hottest of O_switch and O_server.
        cand = [(c, o, True, s) for c, o, s in o_switch] + [(c, bytes(o), False, -1) for o, c in o_server]
        cand.sort(key=lambda x: -x[0])
        hot = {o for _c, o, _sw, _s in cand[:K]}
        newcomers = [(o, c) for c, o, on_switch, _s in cand[:K] if not on_switch and c > 0]
        victims = [(o, s) for _c, o, s in o_switch if o not in hot]
        free = [s for s in range(p.slots) if s not in self.slots]
        plan: list[tuple[Optional[bytes], bytes, int, int]] = []
        for o, c in newcomers:
            if free:
                plan.append((None, o, free.pop(0), c))
            elif victims:
                old, s = victims.pop(0)
                plan.append((old, o, s, c))
        if not plan:
            return
        # Step 4 (state manager): the replaced slots stop hitting, the moving objects are
        # answered "retry" by their servers, until Step 6.
        replacing: set[int] = set()
        try:
            for old, new, slot, _c in plan:
                self.moving.add(new)
                if old is not None:
                    self.moving.add(old)
                    self.cpu(OP_STATE_SET, slot, STATE_REPLACING)
                    replacing.add(slot)
        except Exception:
            self.abandon(plan, 0, replacing)
            raise
        # What Step 5 costs: e-MAT writes through the switch OS (at most 2×M per
        # replacement), the state and the application data by packets.
        m = len(self.emat.segments)
        table_ops = sum(2 * m if old is not None else m for old, _n, _s, _c in plan)
        packets = 0
        for old, new, _s, _c in plan:
            packets += 3 + type(self.servers[self.server_of(new)]).DATAMV_PACKETS_TO_SWITCH
            if old is not None:
                packets += type(self.servers[self.server_of(old)]).DATAMV_PACKETS_TO_SERVER
        cost = len(counts) / p.packet_rate + table_ops / p.table_rate + packets / p.packet_rate
        start = max(now, self.busy_until)
        self.busy_until = start + cost
        self.pending.append((self.busy_until, lambda: self.apply(plan)))
        self.pending.sort(key=lambda x: x[0])

    def apply(self, plan: list[tuple[Optional[bytes], bytes, int, int]]) -> None:
        """Step 5 (D-modifier and M-modifier), Step 6, Step 7 for the new slots."""
        for i, (old, new, slot, c) in enumerate(plan):
            home = False
            try:
                if (old is not None and self.emat.slot_of(old) != slot) or self.emat.slot_of(new) is not None:
                    self.moving.discard(new)
                    if old is not None:
                        self.moving.discard(old)
                        self.cpu(OP_STATE_SET, slot, STATE_VALID)
                    continue
                if old is not None:
                    self.servers[self.server_of(old)].datamv_switch2server(old, slot)
                    home = True
                    self.evictions += 1
                self.offload(new, slot, c, replacing=old)
                if old is not None:
                    self.moving.discard(old)
            except Exception:
                # Step 4 set the later replacements' slots replacing; nothing moved them yet.
                self.abandon(plan, i, {s for o, _n, s, _c in plan[i + 1 :] if o is not None}, failed_in_move=True, old_home=home)
                raise

    def dirty(self, key: bytes) -> bool:
        """Whether `key`'s application keeps data on the switch that its server lacks (a
        lock's holders and queue): such an object is never dropped from the switch before
        that data has gone home."""
        return type(self.servers[self.server_of(key)]).DATAMV_PACKETS_TO_SERVER > 0

    def drop(self, obj: bytes, slot: int) -> None:
        """Take `obj` out of the e-MAT and free `slot` (left as the switch has it)."""
        _slot, ops = self.emat.remove(obj)
        self.write_emat(ops)
        self.slots.pop(slot, None)
        self.base.pop(slot, None)

    def home_or_stay(self, old: bytes, slot: int) -> None:
        """Undo Step 4 for `old`, whose slot was set replacing: an object with dirty data
        goes home (its server takes the data as it is now, and answers for it from then
        on) and is evicted, since while the slot was replacing the switch may have dropped
        work its data implied (a lock's grant pass) that only its server redoes; if its
        server is down too, the object stays where it is, valid again (the reads of a
        move home change nothing on the switch). Other objects are valid again."""
        if self.dirty(old):
            try:
                self.servers[self.server_of(old)].datamv_switch2server(old, slot)
            except Exception:
                self.undo_stays += 1
            else:
                self.drop(old, slot)
                self.evictions += 1
                self.undo_homes += 1
                return
        self.cpu(OP_STATE_SET, slot, STATE_VALID)

    def abandon(self, plan: list[tuple[Optional[bytes], bytes, int, int]], first: int, replacing: set[int], failed_in_move: bool = False,
                old_home: bool = True) -> None:
        """A round that failed at `plan[first]` (a server died under it: the caller sees
        the error) leaves nothing half done: the entries before are complete; of the rest,
        no object stays marked moving (its server would answer its writes "retry" for
        good), and no slot serves a value that may not be its object's. The slots in
        `replacing` (set replacing by Step 4, untouched since) hold their objects' values:
        valid again. The entry that failed in Step 5 (`failed_in_move`) may have left part
        of a move in its slot: its replaced object is evicted (the e-MAT entry removed, the
        slot left replacing and free) and a later round offloads into it from scratch. The
        e-MAT and the slot map stay in step: `offload` books an object in before its last
        calls to the server.

        Dirty data (`dirty`, a lock's state) is never dropped: a replaced object whose move
        home had not finished (`old_home` False) stays in its slot, valid again (the
        failure was its own server's: the data has nowhere else to go); a slot Step 4 set
        replacing is undone by `home_or_stay`."""
        for j, (old, new, slot, _c) in enumerate(plan[first:]):
            if self.slots.get(slot) == new:
                pass  # complete but for the unmark
            elif self.emat.slot_of(new) == slot:  # in the e-MAT, not booked in: a move again failed
                self.drop(new, slot)
            elif old is not None and self.slots.get(slot) == old:
                if failed_in_move and j == 0:
                    if not old_home and self.dirty(old):
                        self.cpu(OP_STATE_SET, slot, STATE_VALID)
                        self.undo_stays += 1
                    else:
                        self.drop(old, slot)
                        if not old_home:  # `apply` counted it once home
                            self.evictions += 1
                elif slot in replacing:
                    self.home_or_stay(old, slot)
            for o in (new, old):
                if o is not None:
                    unmark(self.moving, o)

    def offload(self, new: bytes, slot: int, count: int = 0, replacing: Optional[bytes] = None) -> None:
        """Put `new` in `slot` (replacing the object there, whose data has gone home)."""
        self.cpu(OP_STATE_SET, slot, STATE_REPLACING)
        srv = self.servers[self.server_of(new)]
        srv.datamv_server2switch(new, slot)
        if replacing is None:
            ops = self.emat.insert(new, slot)
        else:
            _slot, ops = self.emat.replace(replacing, new)
        self.write_emat(ops)
        if mark_lost(self.moving, new):
            # The object's server restarted since its mark: a write may have reached the
            # store after the move read it, its reply finding no e-MAT entry to refresh.
            # Now the entry is in, every write's reply refreshes the slot: move it again.
            srv.datamv_server2switch(new, slot)
            self.moves_redone += 1
        self.cpu(OP_STAT_FETCH, slot, 1, b"\0\0\0\0")  # Step 7: the slot's counter restarts
        self.cpu(OP_STATE_SET, slot, STATE_VALID)  # Step 6
        self.base[slot] = count
        self.slots[slot] = new
        self.offloads += 1
        srv.noo.forget(new)
        self.moving.discard(new)
