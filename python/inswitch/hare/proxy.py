"""`inswitch kvs proxy`: a RESP endpoint in front of the Hare client, so unmodified Redis
clients (redis-benchmark, redis-cli, redis-py) run through Hare.

GET, SET (no options), DEL, MGET, EXISTS and PING; QUIT closes; HELLO 2|3 picks the
protocol version (redis-py 8 opens with HELLO 3). Any other command is
answered `-ERR unknown command 'NAME'`. A command is checked whole before anything is
sent (a key or value larger than the switch's fields is refused, nothing applied).
Commands from every connection are gathered each turn and run as one windowed batch
(each key's operations in their order), and every connection's replies go out in its
commands' order, so pipelining works. RESP that does not parse is answered
`-ERR Protocol error: ...`, counted, and the connection closed (as Redis does)."""

from __future__ import annotations

import selectors
import socket
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from inswitch.hare import resp
from inswitch.hare.client import Client, HareError, Op, TooLarge

#: Operations per batch (bounds what one timeout can fail).
MAX_BATCH = 1024
Build = Callable[[list[object]], resp.Reply]


def _err(msg: str) -> resp.RespErrorReply:
    return resp.RespErrorReply("ERR " + msg)


def plan(args: list[bytes], check: Callable[[Op], None]) -> tuple[list[Op], Optional[Build], Optional[resp.Reply]]:
    """A command -> (operations, how to build the reply from their results) or an
    immediate reply (errors, PING). Raises nothing."""
    name = args[0].decode("utf-8", "replace")
    cmd, rest = name.lower(), args[1:]

    def arity(ok: bool) -> Optional[resp.Reply]:
        return None if ok else _err(f"wrong number of arguments for '{cmd}' command")

    try:
        if cmd == "ping":
            if len(rest) > 1:
                return [], None, arity(False)
            return [], None, (rest[0] if rest else resp.Simple("PONG"))
        if cmd == "get":
            if len(rest) != 1:
                return [], None, arity(False)
            ops = [Op("get", rest[0])]
            build: Build = lambda r: r[0]  # type: ignore[return-value]  # noqa: E731
        elif cmd == "set":
            if len(rest) < 2:
                return [], None, arity(False)
            if len(rest) > 2:
                return [], None, _err(f"SET option '{rest[2].decode('utf-8', 'replace')}' is not supported through Hare")
            ops = [Op("set", rest[0], rest[1])]
            build = lambda r: resp.Simple("OK")  # noqa: E731
        elif cmd == "del":
            if not rest:
                return [], None, arity(False)
            ops = [Op("del", k) for k in rest]
            build = lambda r: sum(int(x) for x in r)  # type: ignore[arg-type]  # noqa: E731
        elif cmd == "mget":
            if not rest:
                return [], None, arity(False)
            ops = [Op("get", k) for k in rest]
            build = lambda r: list(r)  # type: ignore[arg-type]  # noqa: E731
        elif cmd == "exists":
            if not rest:
                return [], None, arity(False)
            ops = [Op("get", k) for k in rest]
            build = lambda r: sum(v is not None for v in r)  # noqa: E731
        else:
            shown = name if len(name) <= 64 else name[:64] + "..."
            return [], None, _err(f"unknown command '{shown}'")
        for op in ops:
            check(op)
        return ops, build, None
    except TooLarge as e:
        return [], None, _err(str(e))


@dataclass
class Conn:
    sock: socket.socket
    parser: resp.Parser = field(default_factory=resp.Parser)
    out: bytearray = field(default_factory=bytearray)
    closing: bool = False
    proto: int = 2


class Proxy:
    def __init__(self, client: Client, listen: tuple[str, int]) -> None:
        self.client = client
        self.lsn = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsn.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsn.bind(listen)
        self.lsn.listen(512)
        self.lsn.setblocking(False)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.lsn, selectors.EVENT_READ, None)
        self.conns: dict[int, Conn] = {}
        self.counters = {"connections": 0, "commands": 0, "protocol_errors": 0, "unknown_commands": 0, "store_errors": 0}

    @property
    def address(self) -> tuple[str, int]:
        return self.lsn.getsockname()  # type: ignore[no-any-return]

    def serve_forever(self, stop: Optional[Callable[[], bool]] = None) -> None:
        while not (stop and stop()):
            self.turn(0.2)

    def turn(self, timeout: float) -> None:
        """Read what every connection sent, run its complete commands, write replies."""
        ready: list[Conn] = []
        for key, ev in self.sel.select(timeout):
            if key.data is None:
                self._accept()
                continue
            c: Conn = key.data
            if ev & selectors.EVENT_WRITE:
                self._flush(c)
            if ev & selectors.EVENT_READ:
                try:
                    data = c.sock.recv(1 << 16)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    data = b""
                if not data:
                    self._close(c)
                    continue
                c.parser.feed(data)
                ready.append(c)
        if ready:
            self._run(ready)

    def _accept(self) -> None:
        try:
            s, _ = self.lsn.accept()
        except BlockingIOError:
            return
        s.setblocking(False)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c = Conn(s)
        self.conns[s.fileno()] = c
        self.sel.register(s, selectors.EVENT_READ, c)
        self.counters["connections"] += 1

    def _run(self, ready: list[Conn]) -> None:
        # [(conn, ops, build, reply, protocol)] in arrival order per connection; a reply
        # is encoded in the protocol in force after its command (HELLO 3's own reply is RESP3)
        items: list[tuple[Conn, list[Op], Optional[Build], Optional[resp.Reply], int]] = []
        for c in ready:
            while not c.closing:
                try:
                    args = c.parser.command()
                except resp.RespError as e:
                    self.counters["protocol_errors"] += 1
                    items.append((c, [], None, _err(f"Protocol error: {e}"), c.proto))
                    c.closing = True
                    break
                if args is None:
                    break
                self.counters["commands"] += 1
                if args[0].lower() == b"quit":
                    items.append((c, [], None, resp.Simple("OK"), c.proto))
                    c.closing = True
                    break
                if args[0].lower() == b"hello":
                    hello = self._hello(c, args[1:])
                    items.append((c, [], None, hello, c.proto))
                    continue
                ops, build, reply = plan(args, self.client.check)
                if reply is not None and isinstance(reply, resp.RespErrorReply) and "unknown command" in reply:
                    self.counters["unknown_commands"] += 1
                items.append((c, ops, build, reply, c.proto))
        # Run in batches of whole commands.
        i = 0
        while i < len(items):
            j, n = i, 0
            while j < len(items) and (n == 0 or n + len(items[j][1]) <= MAX_BATCH):
                n += len(items[j][1])
                j += 1
            ops = [op for it in items[i:j] for op in it[1]]
            try:
                results: Optional[list[object]] = self.client.execute(ops) if ops else []
                failure = ""
            except HareError as e:
                results, failure = None, str(e)
                self.counters["store_errors"] += 1
            at = 0
            for c, cops, build, reply, proto in items[i:j]:
                if reply is None:
                    assert build is not None
                    if results is None:
                        reply = _err(f"through Hare: {failure}")
                    else:
                        reply = build(results[at : at + len(cops)])
                    at += len(cops)
                c.out += resp.encode(reply, proto)
            i = j
        for c in {id(c): c for c in ready}.values():
            self._flush(c)

    @staticmethod
    def _hello(c: Conn, rest: list[bytes]) -> resp.Reply:
        if rest and rest[0] not in (b"2", b"3"):
            return resp.RespErrorReply("NOPROTO unsupported protocol version")
        if len(rest) > 1:
            return _err("HELLO options (AUTH, SETNAME) are not supported through Hare")
        if rest:
            c.proto = int(rest[0])
        return resp.Map({b"server": b"hare-proxy", b"version": b"7.0.0", b"proto": c.proto, b"id": 1, b"mode": b"standalone", b"role": b"master", b"modules": []})

    def _flush(self, c: Conn) -> None:
        while c.out:
            try:
                n = c.sock.send(c.out)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                c.out.clear()
                c.closing = True
                break
            del c.out[:n]
        if c.out:
            self.sel.modify(c.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, c)
        elif c.closing:
            self._close(c)
        else:
            try:
                self.sel.modify(c.sock, selectors.EVENT_READ, c)
            except (KeyError, ValueError):
                pass

    def _close(self, c: Conn) -> None:
        fd = c.sock.fileno()
        if fd >= 0 and fd in self.conns:
            self.sel.unregister(c.sock)
            del self.conns[fd]
        c.sock.close()

    def close(self) -> None:
        for c in list(self.conns.values()):
            self._close(c)
        self.sel.close()
        self.lsn.close()


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError("expected HOST:PORT")
    return host, int(port)


def parse_servers(text: str) -> list[str]:
    out = []
    for part in text.split(","):
        p = part.strip()
        try:
            socket.inet_aton(p)
        except OSError:
            raise ValueError(f"{p!r} is not an IPv4 address") from None
        if p.count(".") != 3:
            raise ValueError(f"{p!r} is not an IPv4 address")
        out.append(p)
    return out


def run(listen: tuple[str, int], servers: list[str], key_field: int, value_size: int, timeout: float,
        ready: Optional[Callable[[tuple[str, int]], Any]] = None, history: Optional[str] = None) -> None:
    """Serve until SIGTERM or SIGINT; with `history`, every operation is recorded and
    written there (JSON, as the load generators write it) on the way out."""
    import json
    import signal
    import sys

    hist: Optional[list] = [] if history else None
    signal.signal(signal.SIGTERM, lambda *_a: sys.exit(0))
    with Client(servers, key_field=key_field, value_size=value_size, timeout=timeout, window=128, history=hist) as c:
        p = Proxy(c, listen)
        if ready:
            ready(p.address)
        try:
            p.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            p.close()
            if history and hist is not None:
                with open(history, "w") as f:
                    json.dump({"history": [[k.hex(), kind, None if v is None else v.hex(), a, b] for k, kind, v, a, b in hist],
                               "unacked": [[k.hex(), None if v is None else v.hex(), t] for k, v, t in c.unacked],
                               "counters": p.counters, "stats": {"ops": c.stats.ops, "gets": c.stats.gets, "hits": c.stats.hits, "retries": c.stats.retries, "timeouts": c.stats.timeouts}}, f)
