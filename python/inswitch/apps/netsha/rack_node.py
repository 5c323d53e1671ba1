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

If the switch dies meanwhile (the rack's state file, `--rack-state`, records it), the
answers it held and those in flight are lost: once it is back, the agent sends again every
query sent since a second before it died, and keeps each (query, id) answer once (a query's
top K over the union of its answers is its top K: every answer is a true candidate).
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time

import numpy as np

from inswitch import _native

QUERY_PORT = 7000
TOS_BIT = 0x01


# The formats are `wire::netsha`'s; encoding and parsing are the Rust ones, through
# `_native` (bytes of little-endian arrays across the boundary).


def encode_query(qid: int, keys: np.ndarray, vector: np.ndarray) -> bytes:
    """QID | L | L × key | DIM | DIM × f32 (wire::netsha::QueryRepr)."""
    k = np.asarray(keys, dtype="<i8").tobytes()
    v = np.asarray(vector, dtype="<f4").tobytes()
    return _native.netsha_query_encode(qid, k, v)


def decode_query(b: bytes) -> tuple[int, np.ndarray, np.ndarray] | None:
    q = _native.netsha_query_decode(b)
    if q is None:
        return None
    qid, k, v = q
    return qid, np.frombuffer(k, dtype="<i8").astype(np.int64), np.frombuffer(v, dtype="<f4").astype(np.float32)


def encode_answers(qid: int, ids: np.ndarray, dists: np.ndarray) -> bytes:
    """One NetSHa answer payload of one query block: Query# = 1, QID, NUM, (id, f64)×NUM."""
    n = len(ids)
    return _native.netsha_encode(np.full(n, qid, dtype="<u4").tobytes(), np.asarray(ids, dtype="<u4").tobytes(),
                                 np.asarray(dists, dtype="<f8").tobytes())


def decode_answers(b: bytes) -> list[tuple[int, int, float]]:
    """Every (qid, id, distance) of a NetSHa payload; nothing from a malformed one."""
    try:
        q, i, d = _native.netsha_decode(b)
    except ValueError:
        return []
    qs, ids, ds = np.frombuffer(q, "<u4"), np.frombuffer(i, "<u4"), np.frombuffer(d, "<f8")
    return [(int(a), int(x), float(y)) for a, x, y in zip(qs, ids, ds)]


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

    sent_at = [0.0] * len(qv)

    def send(queries: list[int]) -> None:
        for w in range(0, len(queries), args.concurrency):
            for q in queries[w : w + args.concurrency]:
                sent_at[q] = time.time()
                tx.sendto(encode_query(q, qk[q], qv[q]), (args.broadcast, QUERY_PORT))
            drain(args.wave_idle)

    wall0 = time.time()
    send(list(range(len(qv))))
    drain(args.idle)
    handled: set[int] = set()
    retried = 0
    while args.rack_state:
        from inswitch.topology import restarts

        new = [r for r in restarts.wait_back(args.rack_state, wall0) if r["generation"] not in handled]
        if not new:
            break
        for r in new:
            handled.add(r["generation"])
        died = min(float(r["died_at"]) for r in new)
        redo = [q for q in range(len(qv)) if sent_at[q] >= died - 1.0]
        retried += len(redo)
        send(redo)
        drain(args.idle)
    unique = sorted(set(got))
    print(json.dumps({"packets": packets, "answers": unique, "seconds": time.monotonic() - t0,
                      "retried_queries": retried, "restarts_seen": sorted(handled)}), flush=True)


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
    a.add_argument("--rack-state", default="", help="the rack's state.json: retry after a switch restart")
    args = p.parse_args(argv)
    server(args) if args.role == "server" else agent(args)


if __name__ == "__main__":
    main(sys.argv[1:])
