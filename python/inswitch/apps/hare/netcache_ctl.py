"""NetCache's controller actions (Jin et al., SOSP 2017, as Hare §III describes them), over
any switch that offers the in-process switch's control calls (`_native.SimSwitch`, or
`redisrack.P4rtSwitch` over P4Runtime): one copy for the trace replay (`kvsim`) and the
rack with real Redis (`redisrack`).

- `install(key)`: a reported hot key goes into a free slot, or replaces the coldest of a
  sample of cached keys if that one is colder than the report threshold: table delete,
  value registers, hit counter, table insert, valid bit (the switch-OS path);
- `clear()`: the statistics period ends (sketch, Bloom filter and hit counters zeroed).

`moving` is the set of keys being changed (the rack passes its marks, mirrored at each
key's storage agent, so no write slips between reading the value and installing it). An
install an agent's death cuts short is undone (the caller sees the error); one whose
agent restarted after the mark (`framework.mark_lost`) is marked again and its value
read and written again before its slot serves (`moves_redone`)."""

from __future__ import annotations

from typing import Any, Callable, Optional

from inswitch.apps.hare.framework import STATE_EMPTY, STATE_VALID, mark_lost, unmark

STATISTICS = [f"cms_{i}" for i in range(4)] + [f"bloom_{i}" for i in range(3)] + ["cache_hits"]


class NetCacheController:
    def __init__(self, sw: Any, slots: int, value_size: int, threshold: int, sample: int = 128, moving: Optional[set[bytes]] = None) -> None:
        self.sw, self.value_size, self.threshold, self.sample = sw, value_size, threshold, sample
        self.moving: set[bytes] = moving if moving is not None else set()
        self.cached: dict[bytes, int] = {}
        self.free = list(range(slots - 1, -1, -1))
        self.table_ops = self.offloads = self.evictions = 0
        #: Installs whose key's agent restarted after the mark: marked, read, written again.
        self.moves_redone = 0

    def install(self, key: bytes, value_of: Callable[[bytes], bytes]) -> bool:
        """Cache `key` (its value from `value_of`); False when every sampled key is hotter."""
        if key in self.cached:
            return False
        if self.free:
            slot = self.free.pop()
        else:
            items = list(self.cached.items())[: self.sample]
            counts = [(self.sw.register_read("netcache", "cache_hits", s), k, s) for k, s in items]
            self.table_ops += len(counts)
            c, old, slot = min(counts)
            if c >= self.threshold:
                return False
            self.moving.add(old)
            try:
                self.sw.table_write("netcache", "cache", "delete", [bytes([len(old)]), old], "", [])
                self.sw.register_write("netcache", "obj_state", slot, STATE_EMPTY)
            finally:
                unmark(self.moving, old)
            del self.cached[old]
            self.evictions += 1
            self.table_ops += 2
        try:
            self.moving.add(key)
            self.write_value(slot, value_of(key))
            self.sw.register_write("netcache", "cache_hits", slot, 0)
            self.sw.table_write("netcache", "cache", "insert", [bytes([len(key)]), key], "cache_hit", [slot.to_bytes(2, "big")])
            self.cached[key] = slot
            if mark_lost(self.moving, key):
                # Its agent restarted since the mark: a write may have been applied after the
                # read, its reply finding no entry to refresh. The slot does not serve yet:
                # mark the key at the new agent, read and write its value again.
                self.moving.add(key)
                self.write_value(slot, value_of(key))
                self.moves_redone += 1
            self.sw.register_write("netcache", "obj_state", slot, STATE_VALID)
        except Exception:
            self.undo(key, slot)
            raise
        finally:
            unmark(self.moving, key)
        self.table_ops += self.value_size // 4 + 3
        self.offloads += 1
        return True

    def write_value(self, slot: int, v: bytes) -> None:
        for w in range(self.value_size // 4):
            self.sw.register_write("netcache", f"value_{w}", slot, int.from_bytes(v[4 * w : 4 * w + 4], "big"))

    def undo(self, key: bytes, slot: int) -> None:
        """An install that failed (its agent died) leaves the slot free and not serving:
        never set valid, its entry (if in) deleted, so no half-written value is served."""
        if self.cached.pop(key, None) is not None:
            self.sw.table_write("netcache", "cache", "delete", [bytes([len(key)]), key], "", [])
        self.free.append(slot)

    def clear(self) -> None:
        for r in STATISTICS:
            self.sw.register_write("netcache", r, None, 0)
            self.table_ops += 1
