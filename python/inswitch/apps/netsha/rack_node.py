"""The processes of `inswitch search --rack`: a search server and the agent, each run inside
a rack host's namespace (`python -m inswitch.apps.netsha.rack_node server|agent ...`).

- server: holds its shard (an .npz written by the orchestrator), indexes it with the
  TLSH-style ternary index (the same seeded hash family as everyone), receives query
  packets (UDP port 7000, multicast to it by the switch's server selection), answers with
  its best candidates in NetSHa answer packets (ToS bit set, up to `per` answers each) to
  the agent.
- agent: sends every query as a query packet (ToS bit set) to the subnet's broadcast
  address in waves, receives the answers, and prints them as JSON.

Both stop on their own: the server after `idle` seconds without a query (and at most
`limit` seconds), the agent when no answer came for `idle` seconds after its last wave.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import time

import numpy as np

QUERY_PORT = 7000
TOS_BIT = 0x01


def encode_query(qid: int, keys: np.ndarray, vector: np.ndarray) -> bytes:
    """QID | L | L × key | DIM | DIM × f32 (wire::netsha::QueryRepr), big-endian."""
    k = np.asarray(keys, dtype=">i8").tobytes()
    v = np.asarray(vector, dtype=">f4").tobytes()
    return struct.pack("!IB", qid, len(keys)) + k + struct.pack("!H", len(vector)) + v


def decode_query(b: bytes) -> tuple[int, np.ndarray, np.ndarray] | None:
    if len(b) < 5:
        return None
    qid, l = struct.unpack_from("!IB", b, 0)
    h = 5 + 8 * l
    if l == 0 or len(b) < h + 2:
        return None
    (dim,) = struct.unpack_from("!H", b, h)
    if len(b) != h + 2 + 4 * dim:
        return None
    keys = np.frombuffer(b, dtype=">i8", count=l, offset=5).astype(np.int64)
    vec = np.frombuffer(b, dtype=">f4", count=dim, offset=h + 2).astype(np.float32)
    return qid, keys, vec


def encode_answers(qid: int, ids: np.ndarray, dists: np.ndarray) -> bytes:
    """One NetSHa answer payload of one query block: Query# = 1, QID, NUM, (id, f64)×NUM."""
    rec = np.empty(len(ids), dtype=[("id", ">u4"), ("d", ">f8")])
    rec["id"], rec["d"] = ids, dists
    return struct.pack("!BIH", 1, qid, len(ids)) + rec.tobytes()


def decode_answers(b: bytes) -> list[tuple[int, int, float]]:
    out: list[tuple[int, int, float]] = []
    if not b:
        return out
    at = 1
    for _ in range(b[0]):
        if len(b) < at + 6:
            return out
        qid, num = struct.unpack_from("!IH", b, at)
        at += 6
        if len(b) < at + 12 * num:
            return out
        rec = np.frombuffer(b, dtype=[("id", ">u4"), ("d", ">f8")], count=num, offset=at)
        out.extend((qid, int(i), float(d)) for i, d in zip(rec["id"], rec["d"]))
        at += 12 * num
    return out


def server(args: argparse.Namespace) -> None:
    from .lsh import HashFamily, TernaryIndex, local_answers

    z = np.load(args.shard)
    cfg = json.loads(args.config)
    fam = HashFamily(int(z["data"].shape[1]), cfg["tables"], cfg["hashes"], cfg["width"], cfg["seed"])
    index = TernaryIndex(fam, z["data"], z["ids"], cfg["delta"])
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    rx.bind(("0.0.0.0", QUERY_PORT))
    rx.settimeout(0.2)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, TOS_BIT)
    print("READY", flush=True)
    start = last = time.monotonic()
    served = sent = 0
    while time.monotonic() - last < args.idle and time.monotonic() - start < args.limit:
        try:
            b, _ = rx.recvfrom(65535)
        except socket.timeout:
            continue
        q = decode_query(b)
        if q is None:
            continue
        last = time.monotonic()
        qid, keys, vec = q
        proj = fam.project(vec[None, :])[0]
        ids, d = local_answers(index, vec, keys, proj, cfg["cap"])
        served += 1
        for s in range(0, len(ids), args.per):
            tx.sendto(encode_answers(qid, ids[s : s + args.per], d[s : s + args.per]), (args.agent, args.agent_port))
            sent += 1
    print(json.dumps({"served": served, "packets": sent}), flush=True)


def agent(args: argparse.Namespace) -> None:
    z = np.load(args.queries)
    qv, qk = z["vectors"], z["keys"]
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 24)
    rx.bind(("0.0.0.0", args.port))
    rx.settimeout(0.05)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
    tx.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, TOS_BIT)
    got: list[tuple[int, int, float]] = []
    packets = 0
    t0 = time.monotonic()
    deadline = t0 + args.limit

    def drain(idle: float) -> None:
        nonlocal packets
        last = time.monotonic()
        while time.monotonic() - last < idle and time.monotonic() < deadline:
            try:
                b, _ = rx.recvfrom(65535)
            except socket.timeout:
                continue
            packets += 1
            last = time.monotonic()
            got.extend(decode_answers(b))

    for w in range(0, len(qv), args.concurrency):
        for q in range(w, min(len(qv), w + args.concurrency)):
            tx.sendto(encode_query(q, qk[q], qv[q]), (args.broadcast, QUERY_PORT))
        drain(args.wave_idle)
    drain(args.idle)
    print(json.dumps({"packets": packets, "answers": got, "seconds": time.monotonic() - t0}), flush=True)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="rack_node")
    sub = p.add_subparsers(dest="role", required=True)
    s = sub.add_parser("server")
    s.add_argument("shard")
    s.add_argument("agent")
    s.add_argument("agent_port", type=int)
    s.add_argument("config")
    s.add_argument("--per", type=int, default=120)
    s.add_argument("--idle", type=float, default=10.0)
    s.add_argument("--limit", type=float, default=300.0)
    a = sub.add_parser("agent")
    a.add_argument("queries")
    a.add_argument("broadcast")
    a.add_argument("--port", type=int, default=7001)
    a.add_argument("--concurrency", type=int, default=25)
    a.add_argument("--wave-idle", type=float, default=0.3)
    a.add_argument("--idle", type=float, default=1.0)
    a.add_argument("--limit", type=float, default=300.0)
    args = p.parse_args(argv)
    server(args) if args.role == "server" else agent(args)


if __name__ == "__main__":
    main(sys.argv[1:])
