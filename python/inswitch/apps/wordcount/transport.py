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
from typing import Any

import numpy as np


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
        lens = np.fromiter((len(k) for k in keys), dtype=np.uint64, count=len(keys))
        offsets = np.zeros(len(keys) + 1, dtype=np.uint64)
        np.cumsum(lens, out=offsets[1:])
        return Pairs(b"".join(keys), offsets, np.asarray(vals, dtype=np.uint32))

    def items(self) -> list[tuple[bytes, int]]:
        o = self.offsets.tolist()
        return [(self.keys[o[i]:o[i + 1]], v) for i, v in enumerate(self.values.tolist())]


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


def agg_reduce(protocol: str, bind: str, tree_id: int, mappers: list[str], op: str, timeout_s: float,
               mode: str) -> tuple[Pairs, dict[str, Any]]:
    nat = _need_native()
    keys, offsets, values, stats = nat.agg_reduce(protocol, bind, tree_id, mappers, op, timeout_s, mode)
    return Pairs(bytes(keys), np.asarray(offsets, dtype=np.uint64), np.asarray(values, dtype=np.uint64)), dict(stats)


# ----- the TCP baseline ------------------------------------------------------------------

_FRAME_HDR = struct.Struct("!I")


def tcp_encode(pairs: Pairs) -> bytes:
    out = bytearray()
    for k, v in pairs.items():
        out += _FRAME_HDR.pack(len(k))
        out += k
        out += _FRAME_HDR.pack(v)
    return bytes(out)


def tcp_map(reducers: list[str], per_reducer: list[Pairs], timeout_s: float) -> dict[str, Any]:
    """Stream each reducer's pairs over its own TCP connection."""
    t0 = time.monotonic()
    sent = 0
    for addr, pairs in zip(reducers, per_reducer):
        host, port = addr.rsplit(":", 1)
        data = tcp_encode(pairs)
        deadline = time.monotonic() + timeout_s
        while True:  # the reducer may still be starting its listener
            try:
                s = socket.create_connection((host, int(port)), timeout=timeout_s)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        with s:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
            s.recv(1)  # the reducer closes once it has read everything
        sent += len(data)
    return {"bytes_sent": sent, "packets_sent": None, "retransmissions": 0, "fallback": False,
            "elapsed_s": time.monotonic() - t0}


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
    bufs: dict[socket.socket, bytearray] = {}
    done: list[bytearray] = []
    nbytes = 0
    segments: int | None = 0
    counts: dict[bytes, int] = {}
    while len(done) < mappers:
        if time.monotonic() > deadline:
            raise TimeoutError(f"tcp reducer: {len(done)} of {mappers} mappers finished before the timeout")
        for key, _ in sel.select(timeout=0.2):
            if key.data is None:
                c, _ = ls.accept()
                c.setblocking(False)
                bufs[c] = bytearray()
                sel.register(c, selectors.EVENT_READ, c)
                continue
            c = key.data
            chunk = c.recv(1 << 20)
            if chunk:
                bufs[c] += chunk
                nbytes += len(chunk)
                continue
            sel.unregister(c)
            n = _segs_in(c)
            segments = None if n is None or segments is None else segments + n
            c.close()
            buf = bufs.pop(c)
            _tcp_add(buf, counts)
            done.append(buf)
    sel.close()
    return counts, {"bytes": nbytes, "packets": None, "segments": segments, "fallback": False,
                    "pairs": sum(_tcp_pairs(b) for b in done), "elapsed_s": time.monotonic() - t0}


def _tcp_pairs(buf: bytearray) -> int:
    n, pos = 0, 0
    while pos < len(buf):
        (kl,) = _FRAME_HDR.unpack_from(buf, pos)
        pos += 8 + kl
        n += 1
    return n


def _tcp_add(buf: bytearray, counts: dict[bytes, int]) -> None:
    pos, end = 0, len(buf)
    unpack = _FRAME_HDR.unpack_from
    while pos < end:
        if pos + 4 > end:
            raise ValueError("tcp reducer: a truncated frame")
        (kl,) = unpack(buf, pos)
        k = bytes(buf[pos + 4:pos + 4 + kl])
        if pos + 8 + kl > end:
            raise ValueError("tcp reducer: a truncated frame")
        (v,) = unpack(buf, pos + 4 + kl)
        counts[k] = counts.get(k, 0) + v
        pos += 8 + kl
