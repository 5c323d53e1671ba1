"""Variable-length keys laid end to end: one byte buffer and `n + 1` offsets (key i is
`buf[offsets[i]:offsets[i + 1]]`), the form in which keys cross into the native code. The
array operations here keep a key set of millions as arrays, never a Python object per key.
"""

from __future__ import annotations

import numpy as np

#: Keys gathered per step: the byte index arrays cost 16 bytes per key byte of a step.
GATHER_STEP = 1 << 16


def offsets_of(lens: np.ndarray) -> np.ndarray:
    """The uint64 offsets (`n + 1`, the first 0) of keys of lengths `lens` laid end to end."""
    offsets = np.zeros(len(lens) + 1, dtype=np.uint64)
    np.cumsum(lens, out=offsets[1:])
    return offsets


def pack(keys: list[bytes]) -> tuple[bytes, np.ndarray]:
    """`keys` laid end to end, and their offsets."""
    return b"".join(keys), offsets_of(np.fromiter((len(k) for k in keys), dtype=np.uint64, count=len(keys)))


def gather(buf: np.ndarray, offsets: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The keys `ids` (in that order, repeats allowed) of the key set (`buf` uint8,
    `offsets`), laid end to end: (uint8 bytes, uint64 offsets). Byte j of the result comes
    from its key's source at the same distance from the key's start, gathered a step of
    keys at a time so the index arrays stay small."""
    ids = np.asarray(ids, dtype=np.int64)
    src = np.asarray(offsets, dtype=np.int64)
    lens = src[ids + 1] - src[ids]
    new = offsets_of(lens)
    out = np.empty(int(new[-1]), dtype=np.uint8)
    for a in range(0, len(ids), GATHER_STEP):
        b = min(a + GATHER_STEP, len(ids))
        lo, hi = int(new[a]), int(new[b])
        pos = np.repeat(src[ids[a:b]] - new[a:b].astype(np.int64), lens[a:b]) + np.arange(lo, hi, dtype=np.int64)
        out[lo:hi] = buf[pos]
    return out, new
