"""NetCache's controller actions (Jin et al., SOSP 2017, as Hare §III describes them), over
any switch that offers the in-process switch's control calls (`_native.SimSwitch`, or
`redisrack.P4rtSwitch` over P4Runtime): one copy for the trace replay (`kvsim`) and the
rack with real Redis (`redisrack`).

- `install(key)`: a reported hot key goes into a free slot, or replaces the coldest of a
  sample of cached keys if that one is colder than the report threshold: table delete,
  value registers, hit counter, table insert, valid bit (the switch-OS path);
- `clear()`: the statistics period ends (sketch, Bloom filter and hit counters zeroed).

`mark(key, moving)` is called around each change (the rack marks the key moving at its
storage agent so no write slips between reading the value and installing it)."""

from __future__ import annotations

from typing import Any, Callable, Optional

from inswitch.apps.hare.framework import STATE_EMPTY, STATE_VALID

STATISTICS = [f"cms_{i}" for i in range(4)] + [f"bloom_{i}" for i in range(3)] + ["cache_hits"]


class NetCacheController:
    def __init__(self, sw: Any, slots: int, value_size: int, threshold: int, sample: int = 128, mark: Optional[Callable[[bytes, bool], None]] = None) -> None:
        self.sw, self.value_size, self.threshold, self.sample = sw, value_size, threshold, sample
        self.mark = mark or (lambda key, moving: None)
        self.cached: dict[bytes, int] = {}
        self.free = list(range(slots - 1, -1, -1))
        self.table_ops = self.offloads = self.evictions = 0

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
            self.mark(old, True)
            try:
                self.sw.table_write("netcache", "cache", "delete", [bytes([len(old)]), old], "", [])
                self.sw.register_write("netcache", "obj_state", slot, STATE_EMPTY)
            finally:
                self.mark(old, False)
            del self.cached[old]
            self.evictions += 1
            self.table_ops += 2
        self.mark(key, True)
        try:
            v = value_of(key)
            for w in range(self.value_size // 4):
                self.sw.register_write("netcache", f"value_{w}", slot, int.from_bytes(v[4 * w : 4 * w + 4], "big"))
            self.sw.register_write("netcache", "cache_hits", slot, 0)
            self.sw.table_write("netcache", "cache", "insert", [bytes([len(key)]), key], "cache_hit", [slot.to_bytes(2, "big")])
            self.sw.register_write("netcache", "obj_state", slot, STATE_VALID)
        finally:
            self.mark(key, False)
        self.table_ops += self.value_size // 4 + 3
        self.cached[key] = slot
        self.offloads += 1
        return True

    def clear(self) -> None:
        for r in STATISTICS:
            self.sw.register_write("netcache", r, None, 0)
            self.table_ops += 1
