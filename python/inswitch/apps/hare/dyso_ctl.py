"""DySO's analyzer (Song et al., IFIP Networking 2022, as Hare §III-B2 and Fig. 6 describe
it), over any source of queried keys: one copy for the trace replay (`kvsim`) and the rack
with real Redis (`redisrack`).

Step 1: the queried objects recorded (QO-Record) are fetched; Step 2: they are counted
and, for every r-MAT row they touch, the locally hottest `columns` keys of that row are
wanted in the switch; Step 3: the modifier writes each wanted key not yet there into a
column of its row holding no wanted key (one packet: key, value, column); Step 4: every
second the counts are halved. A key can only live in its own row (the hash of the key),
which is what limits DySO's precision.

Keys are anything hashable and ordered (`kvsim` uses key indices, the rack key bytes);
`row_of` maps a key to its row."""

from __future__ import annotations

import zlib
from typing import Callable, Generic, Hashable, TypeVar

K = TypeVar("K", bound=Hashable)


def dyso_row(key: bytes, key_field: int, rows: int) -> int:
    """The r-MAT row of `key` as the dyso program hashes it: CRC-32 of the key length and
    the padded key field, masked to the (power-of-two) row count."""
    padded = key + b"\0" * (key_field - len(key))
    return zlib.crc32(bytes([len(key)]) + padded) & (rows - 1)


class DysoAnalyzer(Generic[K]):
    def __init__(self, columns: int, row_of: Callable[[K], int], age_every: float = 1.0) -> None:
        self.columns, self.row_of, self.age_every = columns, row_of, age_every
        self.counts: dict[K, float] = {}
        #: (row, column) -> the key the switch holds there.
        self.cells: dict[tuple[int, int], K] = {}
        self.next_age = age_every
        self.offloads = 0

    def record(self, counts: dict[K, float], now: float) -> set[int]:
        """Steps 1-2 and 4: add the fetched QO-Record (queries per key) to the counts, then
        age them when due; the rows the record touches."""
        for k, n in counts.items():
            self.counts[k] = self.counts.get(k, 0.0) + n
        if now >= self.next_age:
            self.next_age += self.age_every
            self.counts = {k: c / 2 for k, c in self.counts.items() if c >= 1.0}
        return {self.row_of(k) for k in counts}

    def changes(self, rows: set[int]) -> list[tuple[int, int, K]]:
        """Step 3's plan for the touched rows: (row, column, key) writes that put each row's
        locally hottest keys into the switch, over columns holding no wanted key."""
        per_row: dict[int, list[tuple[float, K]]] = {}
        for k, c in self.counts.items():
            r = self.row_of(k)
            if r in rows:
                per_row.setdefault(r, []).append((c, k))
        out: list[tuple[int, int, K]] = []
        for r, lst in per_row.items():
            lst.sort(key=lambda x: (-x[0], x[1]))
            want = [k for _c, k in lst[: self.columns]]
            have = {self.cells.get((r, c)) for c in range(self.columns)}
            free = [c for c in range(self.columns) if self.cells.get((r, c)) not in want]
            for k in want:
                if k not in have and free:
                    out.append((r, free.pop(0), k))
        return out

    def installed(self, row: int, column: int, key: K) -> None:
        self.cells[(row, column)] = key
        self.offloads += 1
