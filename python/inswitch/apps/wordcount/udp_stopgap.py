"""A stop-gap for the udp baseline while `inswitch._native.agg_map`/`agg_reduce` (the DAIET
host library, another branch) is not in the build: the same call shapes, plain reliable UDP
from mappers to reducers, no switch involvement. Used only when the native functions are
absent (`transport.native_agg()` is None).

Datagram: `<u8 type, u16 mapper, u32 seq, u16 pairs>` then pairs `<u16 key length, key, u32
value>`; type 1 data, 2 end (seq = number of data datagrams), 3 ack (reducer to mapper, echoes
mapper and seq). Mappers resend unacknowledged datagrams every RTO; reducers drop duplicates
by (mapper, seq), so each datagram is counted once.
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

import numpy as np

HDR = struct.Struct("!BHIH")
ACK = struct.Struct("!BHI")
PAIR_HDR = struct.Struct("!H")
VAL = struct.Struct("!I")
DATA, END, ACKT = 1, 2, 3
MTU_PAYLOAD = 1400
WINDOW = 256
RTO_S = 0.05


def _addr(a: str) -> tuple[str, int]:
    h, p = a.rsplit(":", 1)
    return h, int(p)


def _packets(mapper_id: int, keys: bytes, offs: list[int], vals: list[int], idx: list[int]) -> list[bytes]:
    out: list[bytes] = []
    body, n = bytearray(), 0
    for i in idx:
        k = keys[offs[i]:offs[i + 1]]
        if len(k) > 60000:
            raise ValueError(f"a key of {len(k)} bytes does not fit a UDP datagram")
        pair = PAIR_HDR.pack(len(k)) + k + VAL.pack(vals[i])
        if n and HDR.size + len(body) + len(pair) > MTU_PAYLOAD:
            out.append(HDR.pack(DATA, mapper_id, len(out), n) + body)
            body, n = bytearray(), 0
        body += pair
        n += 1
    if n:
        out.append(HDR.pack(DATA, mapper_id, len(out), n) + body)
    out.append(HDR.pack(END, mapper_id, len(out), 0))
    return out


def agg_map(bind: str, trees: list[tuple[int, str]], mapper_id: int, tree_of_pair: np.ndarray, keys: bytes,
            key_offsets: np.ndarray, values: np.ndarray, timeout_s: float) -> dict[str, Any]:
    t0 = time.monotonic()
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(_addr(bind))
    s.settimeout(RTO_S)
    offs, vals, tp = key_offsets.tolist(), values.tolist(), tree_of_pair.tolist()
    pending: dict[tuple[int, int], bytes] = {}
    dests = [_addr(a) for _, a in trees]
    for t in range(len(trees)):
        for seq, p in enumerate(_packets(mapper_id, keys, offs, vals, [i for i, x in enumerate(tp) if x == t])):
            pending[(t, seq)] = p
    by_addr = {d: t for t, d in enumerate(dests)}
    sent = nbytes = retrans = 0
    first = set()
    deadline = t0 + timeout_s
    try:
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"udp mapper {mapper_id}: {len(pending)} datagrams unacknowledged")
            for (t, seq), p in list(pending.items())[:WINDOW]:
                s.sendto(p, dests[t])
                sent += 1
                nbytes += len(p)
                if (t, seq) in first:
                    retrans += 1
                first.add((t, seq))
            end = time.monotonic() + RTO_S
            while time.monotonic() < end and pending:
                try:
                    msg, peer = s.recvfrom(64)
                except socket.timeout:
                    break
                if len(msg) == ACK.size and msg[0] == ACKT and peer in by_addr:
                    _, m, seq = ACK.unpack(msg)
                    if m == mapper_id:
                        pending.pop((by_addr[peer], seq), None)
    finally:
        s.close()
    return {"packets_sent": sent, "bytes_sent": nbytes, "retransmissions": retrans, "fallback": False,
            "elapsed_s": time.monotonic() - t0}


def agg_reduce(bind: str, tree_id: int, mappers: list[str], timeout_s: float) -> tuple[bytes, np.ndarray, np.ndarray, dict[str, Any]]:
    t0 = time.monotonic()
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_RCVBUFFORCE", 33), 16 << 20)
    except OSError:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 20)
    s.bind(_addr(bind))
    s.settimeout(0.1)
    M = len(mappers)
    seen: list[set[int]] = [set() for _ in range(M)]
    total: list[int | None] = [None] * M
    counts: dict[bytes, int] = {}
    packets = nbytes = pairs = 0
    deadline = t0 + timeout_s

    def complete() -> bool:
        return all(t is not None and len(seen[m]) == t + 1 for m, t in enumerate(total))

    try:
        while not complete():
            if time.monotonic() > deadline:
                raise TimeoutError(f"udp reducer {tree_id}: incomplete at the timeout")
            try:
                msg, peer = s.recvfrom(65535)
            except socket.timeout:
                continue
            packets += 1
            nbytes += len(msg)
            if len(msg) < HDR.size:
                continue
            typ, m, seq, n = HDR.unpack_from(msg)
            if m >= M or typ not in (DATA, END):
                continue
            s.sendto(ACK.pack(ACKT, m, seq), peer)
            if seq in seen[m]:
                continue  # a retransmission of a datagram already counted
            seen[m].add(seq)
            if typ == END:
                total[m] = seq
                continue
            pos = HDR.size
            for _ in range(n):
                (kl,) = PAIR_HDR.unpack_from(msg, pos)
                k = msg[pos + 2:pos + 2 + kl]
                (v,) = VAL.unpack_from(msg, pos + 2 + kl)
                counts[k] = counts.get(k, 0) + v
                pos += 6 + kl
                pairs += 1
        # Keep answering for a moment: a mapper whose last ack was lost resends.
        linger = time.monotonic() + 0.3
        while time.monotonic() < linger:
            try:
                msg, peer = s.recvfrom(65535)
            except socket.timeout:
                continue
            if len(msg) >= HDR.size:
                _, m, seq, _ = HDR.unpack_from(msg)
                s.sendto(ACK.pack(ACKT, m, seq), peer)
    finally:
        s.close()
    items = list(counts.items())
    lens = np.fromiter((len(k) for k, _ in items), dtype=np.uint64, count=len(items))
    offsets = np.zeros(len(items) + 1, dtype=np.uint64)
    np.cumsum(lens, out=offsets[1:])
    values = np.fromiter((v for _, v in items), dtype=np.uint64, count=len(items))
    return (b"".join(k for k, _ in items), offsets, values,
            {"packets": packets, "bytes": nbytes, "pairs": pairs, "fallback": False, "elapsed_s": time.monotonic() - t0})
