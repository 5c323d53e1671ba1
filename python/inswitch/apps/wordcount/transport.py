"""How mappers' pairs reach the reducers.

- `tcp`: the classic MapReduce shuffle. Each mapper opens one TCP connection per reducer and
  streams its pairs as frames `<u32 key length, key, u32 value>` (network order); the
  reducer reads every connection to its end and adds the values up.
- `udp` / `switch`: `inswitch._native.agg_map` / `agg_reduce` (hostlib's aggregation sender
  and receiver, the exactly-once protocol), in mode "udp" (plain UDP to the reducers) or
  "switch" (aggregated by the switch's program on the way).
- The side channel: a word longer than the protocol's longest key (`max_key_len`: what one
  frame carries, as a switch neither reassembles nor creates packets) cannot ride in its
  packets and is never truncated: such pairs go from the mapper to their reducer over TCP, in the TCP
  shuffle's frames, after the mapper's aggregation streams are done. The runner turns it on
  only when the input has such a word; its bytes and segments count as the reducer's.

Pairs cross into the native code as one bytes blob of keys with uint64 offsets and a uint32
value array, never as a Python object per pair.
"""

from __future__ import annotations

import selectors
import socket
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from inswitch import keys as keyset


U32_MAX = (1 << 32) - 1


@dataclass
class Pairs:
    """Pairs as arrays: keys concatenated in `keys`, key i is keys[offsets[i]:offsets[i+1]]."""

    keys: bytes
    offsets: np.ndarray  # uint64, n + 1
    values: np.ndarray  # uint32 (map side) or uint64 (reduce side)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @staticmethod
    def from_items(items: list[tuple[bytes, int]]) -> "Pairs":
        """From (key, count) items. A count above 2^32 - 1 (a 4-byte value on the wire)
        becomes several pairs of the same key, which the sum puts back together."""
        keys: list[bytes] = []
        vals: list[int] = []
        for k, v in items:
            while v > U32_MAX:
                keys.append(k)
                vals.append(U32_MAX)
                v -= U32_MAX
            keys.append(k)
            vals.append(v)
        blob, offsets = keyset.pack(keys)
        return Pairs(blob, offsets, np.asarray(vals, dtype=np.uint32))

    def items(self) -> list[tuple[bytes, int]]:
        o = self.offsets.tolist()
        return [(self.keys[o[i]:o[i + 1]], v) for i, v in enumerate(self.values.tolist())]

    # Whole-array operations: a mapper without a combiner holds one pair per word of its
    # share, so pairs stay in these arrays (about 14 bytes and the key per pair) and are
    # never turned into Python objects one by one.

    @staticmethod
    def empty() -> "Pairs":
        return Pairs(b"", np.zeros(1, dtype=np.uint64), np.zeros(0, dtype=np.uint32))

    @staticmethod
    def of_keys(keys: list[bytes], value: int = 1) -> "Pairs":
        """Each key once with the same value."""
        blob, offsets = keyset.pack(keys)
        return Pairs(blob, offsets, np.full(len(keys), value, dtype=np.uint32))

    def key_lens(self) -> np.ndarray:
        return np.diff(self.offsets)

    def take(self, idx: np.ndarray) -> "Pairs":
        """The pairs at positions `idx` (in that order, repeats allowed)."""
        idx = np.asarray(idx, dtype=np.int64)
        keys, offsets = keyset.gather(np.frombuffer(self.keys, dtype=np.uint8), self.offsets, idx)
        return Pairs(keys.tobytes(), offsets, self.values[idx])

    def select(self, mask: np.ndarray) -> "Pairs":
        """The pairs where `mask` is true, in order."""
        return self.take(np.flatnonzero(mask))

    @staticmethod
    def concat(parts: list["Pairs"]) -> "Pairs":
        if not parts:
            return Pairs.empty()
        offsets = keyset.offsets_of(np.concatenate([p.key_lens() for p in parts]))
        return Pairs(b"".join(p.keys for p in parts), offsets, np.concatenate([p.values for p in parts]))


# ----- the native aggregation protocol (udp and switch modes) ------------------------------

def native_agg() -> Any | None:
    """`inswitch._native` if it has the aggregation sender/receiver, else None."""
    try:
        from inswitch import _native  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _native if hasattr(_native, "agg_map") and hasattr(_native, "agg_reduce") else None


def _need_native() -> Any:
    nat = native_agg()
    if nat is None:
        raise RuntimeError("udp and switch modes need inswitch._native.agg_map/agg_reduce (the aggregation host library), which this build lacks")
    return nat


def max_key_len(protocol: str) -> int:
    """The longest key `protocol` carries whole in its packets."""
    return int(_need_native().agg_max_key_len(protocol))


def agg_map(protocol: str, bind: str, trees: list[tuple[int, str]], mapper_id: int, op: str,
            tree_of_pair: np.ndarray, pairs: Pairs, timeout_s: float, mode: str) -> dict[str, Any]:
    nat = _need_native()
    return dict(nat.agg_map(protocol, bind, trees, mapper_id, op, tree_of_pair, pairs.keys,
                            pairs.offsets, pairs.values, timeout_s, mode))


def agg_map_spool(protocol: str, bind: str, trees: list[tuple[int, str]], mapper_id: int, op: str,
                  spool_paths: list[Path], timeout_s: float, mode: str) -> dict[str, Any]:
    """`agg_map` for pairs in spool files (see `spool`), one per tree, read as they are sent."""
    nat = _need_native()
    return dict(nat.agg_map_spool(protocol, bind, trees, mapper_id, op, [str(p) for p in spool_paths], timeout_s, mode))


def agg_reduce(protocol: str, bind: str, tree_id: int, mappers: list[str], op: str, timeout_s: float,
               mode: str) -> tuple[Pairs, dict[str, Any]]:
    nat = _need_native()
    keys, offsets, values, stats = nat.agg_reduce(protocol, bind, tree_id, mappers, op, timeout_s, mode)
    return Pairs(bytes(keys), np.asarray(offsets, dtype=np.uint64), np.asarray(values, dtype=np.uint64)), dict(stats)


# ----- the TCP baseline ------------------------------------------------------------------

_FRAME_HDR = struct.Struct("!I")


def tcp_encode(pairs: Pairs) -> bytes:
    """The pairs as TCP shuffle frames `<u32 key length, key, u32 value>`, built with array
    operations (a frame per pair, no Python object per pair)."""
    n = len(pairs)
    lens = pairs.key_lens().astype(np.int64)
    if np.any(lens > U32_MAX) or np.any(pairs.values > U32_MAX):
        raise ValueError("a TCP frame carries keys and values below 2^32")
    starts = np.zeros(n, dtype=np.int64)
    np.cumsum(lens[:-1] + 8, out=starts[1:])
    out = np.empty(int(lens.sum()) + 8 * n, dtype=np.uint8)
    four = np.arange(4, dtype=np.int64)
    out[(starts[:, None] + four).ravel()] = lens.astype(">u4").view(np.uint8)
    shift = np.repeat(starts + 4 - pairs.offsets[:-1].astype(np.int64), lens)
    out[np.arange(int(pairs.offsets[-1]), dtype=np.int64) + shift] = np.frombuffer(pairs.keys, dtype=np.uint8)
    out[((starts + 4 + lens)[:, None] + four).ravel()] = pairs.values.astype(">u4").view(np.uint8)
    return out.tobytes()


def tcp_map(reducers: list[str], per_reducer: list[Pairs], timeout_s: float) -> dict[str, Any]:
    """Stream each reducer's pairs over its own TCP connection."""
    def send(s: socket.socket, r: int) -> int:
        data = tcp_encode(per_reducer[r])
        s.sendall(data)
        return len(data)
    return tcp_send_each(reducers, timeout_s, send)


def tcp_send_each(reducers: list[str], timeout_s: float, send: Callable[[socket.socket, int], int]) -> dict[str, Any]:
    """One TCP connection per reducer in turn: `send(sock, r)` writes reducer r's frames and
    returns the bytes written; the mapper's stats."""
    t0 = time.monotonic()
    sent = 0
    for r, addr in enumerate(reducers):
        with tcp_connect(addr, timeout_s) as s:
            sent += send(s, r)
            s.shutdown(socket.SHUT_WR)
            s.recv(1)  # the reducer closes once it has read everything
    return {"bytes_sent": sent, "packets_sent": None, "retransmissions": 0, "fallback": False,
            "elapsed_s": time.monotonic() - t0}


def tcp_connect(addr: str, timeout_s: float) -> socket.socket:
    """A connection to a reducer's `ip:port`, retried while it may still be starting its
    listener."""
    host, port = addr.rsplit(":", 1)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return socket.create_connection((host, int(port)), timeout=timeout_s)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def tcp_listen(bind: str) -> socket.socket:
    host, port = bind.rsplit(":", 1)
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((host, int(port)))
    ls.listen(128)
    return ls


# `struct tcp_info`'s `tcpi_segs_in` (Linux >= 4.2): segments received on a connection.
_TCPI_SEGS_IN = struct.Struct("=I")
_TCPI_SEGS_IN_AT = 140


def _segs_in(c: socket.socket) -> int | None:
    try:
        info = c.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    except (OSError, AttributeError):
        return None
    if len(info) < _TCPI_SEGS_IN_AT + 4:
        return None
    return int(_TCPI_SEGS_IN.unpack_from(info, _TCPI_SEGS_IN_AT)[0])


def tcp_reduce(ls: socket.socket, mappers: int, timeout_s: float) -> tuple[dict[bytes, int], dict[str, Any]]:
    """Accept one connection from each mapper, read each to its end, add the values up.
    Stats: payload `bytes`, `segments` received (TCP_INFO, None where unknown)."""
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    sel = selectors.DefaultSelector()
    ls.setblocking(False)
    sel.register(ls, selectors.EVENT_READ, None)
    bufs: dict[socket.socket, bytearray] = {}  # each connection's partial frame
    done = 0
    npairs = 0
    nbytes = 0
    segments: int | None = 0
    counts: dict[bytes, int] = {}
    while done < mappers:
        if time.monotonic() > deadline:
            raise TimeoutError(f"tcp reducer: {done} of {mappers} mappers finished before the timeout")
        for key, _ in sel.select(timeout=0.2):
            if key.data is None:
                c, _ = ls.accept()
                c.setblocking(False)
                bufs[c] = bytearray()
                sel.register(c, selectors.EVENT_READ, c)
                continue
            c = key.data
            chunk = c.recv(1 << 20)
            buf = bufs[c]
            if chunk:
                buf += chunk
                nbytes += len(chunk)
                used, n = tcp_add_frames(buf, counts)
                del buf[:used]
                npairs += n
                continue
            sel.unregister(c)
            n = _segs_in(c)
            segments = None if n is None or segments is None else segments + n
            c.close()
            if bufs.pop(c):
                raise ValueError("tcp reducer: a truncated frame at the end of a mapper's stream")
            done += 1
    sel.close()
    return counts, {"bytes": nbytes, "packets": None, "segments": segments, "fallback": False,
                    "pairs": npairs, "elapsed_s": time.monotonic() - t0}


def tcp_add_frames(buf: bytearray | bytes, counts: dict[bytes, int]) -> tuple[int, int]:
    """Add the whole frames at the start of `buf` into `counts`: (bytes used, frames). A
    partial frame at the end is left for the next read."""
    pos, end, n = 0, len(buf), 0
    unpack = _FRAME_HDR.unpack_from
    while pos + 4 <= end:
        (kl,) = unpack(buf, pos)
        if pos + 8 + kl > end:
            break
        k = bytes(buf[pos + 4:pos + 4 + kl])
        (v,) = unpack(buf, pos + 4 + kl)
        counts[k] = counts.get(k, 0) + v
        pos += 8 + kl
        n += 1
    return pos, n
