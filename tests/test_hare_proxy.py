"""The RESP proxy and the storage agent on loopback, with a real redis-server behind the
agent (no switch: the client talks to the agent directly), checked against the same
commands sent to Redis itself; RESP parsing as a property test against redis-py's
command encoder."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inswitch.hare import resp, wire
from inswitch.hare.client import Client
from inswitch.hare.proxy import Proxy

redis = pytest.importorskip("redis")


def _pack(args: list[bytes]) -> bytes:
    """redis-py's own encoding of a command (the reference encoder)."""
    return b"".join(redis.connection.Connection().pack_command(*args))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([b"GET", b"SET", b"MGET", b"hset"]), st.lists(st.binary(max_size=40), max_size=5)).map(lambda t: [t[0], *t[1]]), min_size=1, max_size=8),
       st.lists(st.integers(1, 30), min_size=1, max_size=20))
def test_resp_parser_reads_what_redis_py_writes(cmds: list[list[bytes]], cuts: list[int]) -> None:
    data = b"".join(_pack(c) for c in cmds)
    p, got, at = resp.Parser(), [], 0
    for n in cuts * (len(data) // max(1, sum(cuts)) + 1):
        p.feed(data[at : at + n])
        at += n
        while (c := p.command()) is not None:
            got.append(c)
        if at >= len(data):
            break
    assert got == cmds


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_resp_garbage_is_refused_cleanly(data: bytes) -> None:
    p = resp.Parser()
    p.feed(data)
    try:
        while p.command() is not None:
            pass
    except resp.RespError:
        pass  # refused: the only failure allowed


def test_reply_encoding() -> None:
    assert resp.encode(None) == b"$-1\r\n"
    assert resp.encode(resp.Simple("OK")) == b"+OK\r\n"
    assert resp.encode(3) == b":3\r\n"
    assert resp.encode([b"a", None]) == b"*2\r\n$1\r\na\r\n$-1\r\n"
    assert resp.encode(resp.RespErrorReply("ERR x\r\ny")) == b"-ERR x  y\r\n"


# ---- against a real Redis ---------------------------------------------------------------------

needs_redis = pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed (scripts/install-deps.sh)")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server not installed")
    d = tmp_path_factory.mktemp("hare-proxy")
    sock = str(d / "redis.sock")
    rs = subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", sock, "--dir", str(d), "--appendonly", "yes", "--appendfsync", "always", "--save", ""], stdout=subprocess.DEVNULL)
    agent = None
    try:
        r = redis.Redis(unix_socket_path=sock)
        for _ in range(200):
            try:
                r.ping()
                break
            except redis.exceptions.ConnectionError:
                time.sleep(0.05)
        agent = subprocess.Popen([sys.executable, "-m", "inswitch.apps.hare.agent", "--idx", "0", "--redis", sock, "--ctl", str(d / "agent.sock"), "--bind", "127.0.0.1", "--port", "0"],
                                 stdout=subprocess.PIPE, text=True)
        assert agent.stdout is not None
        port = int(agent.stdout.readline().split()[1])
        client = Client(["127.0.0.1"], port=port, bind=("127.0.0.1", 0), timeout=0.5)
        proxy = Proxy(client, ("127.0.0.1", 0))
        stop = threading.Event()
        th = threading.Thread(target=proxy.serve_forever, args=(stop.is_set,), daemon=True)
        th.start()
        yield {"redis": r, "proxy": proxy, "port": port, "ctl": str(d / "agent.sock"), "client": client}
        stop.set()
        th.join(5)
        proxy.close()
        client.close()
    finally:
        if agent is not None:
            agent.kill()
            agent.wait()
        rs.terminate()
        rs.wait(10)


def _px(stack: dict) -> "redis.Redis":
    host, port = stack["proxy"].address
    return redis.Redis(host=host, port=port, socket_timeout=10)


@needs_redis
def test_commands_match_redis(stack: dict) -> None:
    px, ref = _px(stack), stack["redis"]
    results = []
    for c in (px, ref):
        pre = b"px:" if c is px else b"ref:"
        out = [c.ping(), c.set(pre + b"a", b"1"), c.get(pre + b"a"), c.get(pre + b"missing"), c.set(pre + b"b", b""),
               c.mget([pre + b"a", pre + b"b", pre + b"zz"]), c.exists(pre + b"a", pre + b"zz", pre + b"a"),
               c.delete(pre + b"a", pre + b"zz"), c.get(pre + b"a"), c.exists(pre + b"a")]
        results.append(out)
    assert results[0] == results[1]
    # written through: Redis itself holds what the proxy set
    assert ref.get(b"px:b") == b"" and ref.get(b"px:a") is None


@needs_redis
def test_unknown_commands_and_oversize_are_refused_whole(stack: dict) -> None:
    px, ref = _px(stack), stack["redis"]
    with pytest.raises(redis.exceptions.ResponseError, match="unknown command 'HSET'"):
        px.execute_command("HSET", "h", "f", "v")
    with pytest.raises(redis.exceptions.ResponseError, match="key of 65 bytes"):
        px.set(b"k" * 65, b"v")
    with pytest.raises(redis.exceptions.ResponseError, match="value of 64 bytes"):
        px.set(b"big", b"v" * 64)
    px.set(b"keep", b"1")
    with pytest.raises(redis.exceptions.ResponseError, match="key of 70 bytes"):
        px.delete(b"keep", b"x" * 70)
    assert ref.get(b"keep") == b"1" and px.get(b"keep") == b"1"  # nothing half-applied
    with pytest.raises(redis.exceptions.ResponseError, match="wrong number of arguments"):
        px.execute_command("GET")


@needs_redis
def test_10000_pipelined_commands_answered_in_order(stack: dict) -> None:
    px = _px(stack)
    pipe = px.pipeline(transaction=False)
    want = []
    for i in range(5000):
        k = b"p%d" % (i % 97)
        pipe.set(k, b"%d" % i)
        pipe.get(k)
        want += [True, b"%d" % i]
    assert pipe.execute() == want


@needs_redis
def test_protocol_garbage_is_answered_counted_and_closed(stack: dict) -> None:
    before = stack["proxy"].counters["protocol_errors"]
    host, port = stack["proxy"].address
    with socket.create_connection((host, port), timeout=5) as s:
        s.sendall(b"*2\r\n$3\r\nGET\r\n:oops\r\n")
        data = s.recv(1000)
        assert data.startswith(b"-ERR Protocol error")
        assert s.recv(1000) == b""  # closed
    assert stack["proxy"].counters["protocol_errors"] == before + 1
    assert _px(stack).ping()


@needs_redis
def test_agent_counts_malformed_packets(stack: dict) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(b"\x01\x00", ("127.0.0.1", stack["port"]))
        s.sendto(wire.Msg(99, b"k", key_field=8).encode(), ("127.0.0.1", stack["port"]))
    time.sleep(0.2)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
        c.connect(stack["ctl"])
        c.sendall(b'{"cmd": "stats"}\n')
        counters = json.loads(c.makefile().readline())["counters"]
    assert counters["malformed"] >= 1 and counters["unknown_op"] >= 1
    assert stack["client"].get(b"px:b") == b""  # still serving


@needs_redis
def test_hello_switches_protocol_for_the_replies_after_it(stack: dict) -> None:
    host, port = stack["proxy"].address
    with socket.create_connection((host, port), timeout=5) as s:
        s.sendall(resp.encode_command([b"GET", b"nope"]) + resp.encode_command([b"HELLO", b"3"]) + resp.encode_command([b"GET", b"nope"]))
        data = b""
        while not data.endswith(b"_\r\n"):
            data += s.recv(4096)
    assert data.startswith(b"$-1\r\n%")  # RESP2 nil, then HELLO's map in RESP3
    assert data.endswith(b"_\r\n")  # RESP3 nil


@needs_redis
def test_client_api_errors_and_results(stack: dict) -> None:
    from inswitch.hare import Client as PublicClient
    from inswitch.hare import Timeout, TooLarge

    c = stack["client"]
    assert PublicClient is Client
    c.set(b"api:a", b"x" * 63)
    assert c.get(b"api:a") == b"x" * 63 and stack["redis"].get(b"api:a") == b"x" * 63
    assert c.mget([b"api:a", b"api:none"]) == [b"x" * 63, None]
    assert c.exists(b"api:a", b"api:none") == 1
    assert c.delete(b"api:a", b"api:none") == 1 and c.get(b"api:a") is None
    before = c.stats.ops
    with pytest.raises(TooLarge):
        c.mget([b"ok", b"k" * 65])
    with pytest.raises(TooLarge):
        c.set(b"ok", b"v" * 64)
    with pytest.raises(TooLarge):
        c.get(b"")
    assert c.stats.ops == before  # nothing was sent
    # nobody at this port: retried, then Timeout (the write is reported unacknowledged)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as hole:
        hole.bind(("127.0.0.1", 0))
        dead = Client(["127.0.0.1"], port=hole.getsockname()[1], bind=("127.0.0.1", 0), timeout=0.02, retries=2)
        with pytest.raises(Timeout):
            dead.set(b"k", b"v")
        assert dead.unacked and dead.unacked[0][:2] == (b"k", b"v")
        dead.close()


@needs_redis
def test_a_moving_objects_writes_wait_and_its_reads_are_served(stack: dict) -> None:
    """The state manager's mark at the agent: while `k` moves, a PUT is answered retry and
    not applied; a GET is answered from Redis; after the move the PUT applies."""

    def ctl(req: dict) -> dict:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
            c.connect(stack["ctl"])
            c.sendall(json.dumps(req).encode() + b"\n")
            return json.loads(c.makefile().readline())

    def ask(m: wire.Msg) -> wire.Msg:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(5)
            s.sendto(m.encode(), ("127.0.0.1", stack["port"]))
            return wire.Msg.decode(s.recv(2048))

    stack["redis"].set(b"mv", b"old")
    assert ctl({"cmd": "move", "key": b"mv".hex(), "on": True})["ok"]
    r = ask(wire.Msg(wire.OP_PUT, b"mv", wire.cell(b"new", 64), 7, key_field=64))
    assert r.status & wire.STATUS_RETRY and stack["redis"].get(b"mv") == b"old"
    g = ask(wire.Msg(wire.OP_GET, b"mv", b"", 8, key_field=64))
    assert not g.status & wire.STATUS_RETRY and wire.uncell(g.value) == b"old"
    assert ctl({"cmd": "move", "key": b"mv".hex(), "on": False})["ok"]
    r = ask(wire.Msg(wire.OP_PUT, b"mv", wire.cell(b"new", 64), 9, key_field=64))
    assert r.op == wire.OP_PUT_REPLY and r.status == 0 and stack["redis"].get(b"mv") == b"new"
