"""RESP, the Redis protocol, as much as a proxy needs: an incremental parser of client
commands (arrays of bulk strings, and inline commands) and an encoder of replies in RESP2
or, after `HELLO 3`, RESP3 (which differs for our replies only in nil and maps).

Bad input is refused with `RespError` (the connection is answered `-ERR ...` and closed,
as Redis does), never an exception of another kind; limits keep a hostile client from
making us buffer without bound."""

from __future__ import annotations

from typing import Optional, Union

#: Largest bulk string and most arguments we accept (Redis: 512 MB and 1M+; ours only
#: ever carry keys and small values).
MAX_BULK = 1 << 20
MAX_ARGS = 1 << 16
MAX_INLINE = 64 * 1024

Reply = Union[None, int, bytes, str, "RespErrorReply", list["Reply"]]


class RespError(ValueError):
    """A protocol error: the client sent something that is not RESP."""


class RespErrorReply(str):
    """A reply that is an error (`-ERR ...`)."""


class Simple(str):
    """A simple-string reply (`+OK`)."""


class Map(dict):  # type: ignore[type-arg]
    """A map reply (RESP3 `%`; a flat array in RESP2), e.g. HELLO's."""


def encode(r: Reply, proto: int = 2) -> bytes:
    """One reply: None is nil, bytes a bulk string, int an integer, `Simple` a simple
    string, `RespErrorReply` an error, a list an array, `Map` a map."""
    if r is None:
        return b"_\r\n" if proto == 3 else b"$-1\r\n"
    if isinstance(r, Map):
        flat = [x for kv in r.items() for x in kv]
        if proto == 3:
            return b"%%%d\r\n" % len(r) + b"".join(encode(x, proto) for x in flat)
        return encode(flat, proto)
    if isinstance(r, RespErrorReply):
        return b"-" + str(r).replace("\r", " ").replace("\n", " ").encode() + b"\r\n"
    if isinstance(r, Simple):
        return b"+" + str(r).encode() + b"\r\n"
    if isinstance(r, bool):
        raise TypeError("no RESP2 boolean")
    if isinstance(r, int):
        return b":%d\r\n" % r
    if isinstance(r, (bytes, bytearray)):
        return b"$%d\r\n%s\r\n" % (len(r), bytes(r))
    if isinstance(r, str):
        b = r.encode()
        return b"$%d\r\n%s\r\n" % (len(b), b)
    if isinstance(r, list):
        return b"*%d\r\n" % len(r) + b"".join(encode(x, proto) for x in r)
    raise TypeError(f"cannot encode {type(r).__name__}")


def encode_command(args: list[bytes]) -> bytes:
    """A command as a client sends it (array of bulk strings)."""
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


class Parser:
    """Feed bytes, take complete commands (lists of arguments) in order."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.pos = 0

    def feed(self, data: bytes) -> None:
        if self.pos:
            del self.buf[: self.pos]
            self.pos = 0
        self.buf += data

    def _line(self, at: int, limit: int) -> Optional[tuple[bytes, int]]:
        end = self.buf.find(b"\r\n", at)
        if end < 0:
            if len(self.buf) - at > limit:
                raise RespError("line too long")
            return None
        return bytes(self.buf[at:end]), end + 2

    @staticmethod
    def _int(b: bytes, what: str) -> int:
        if not b or not (b.isdigit() or (b[:1] == b"-" and b[1:].isdigit())):
            raise RespError(f"invalid {what}")
        return int(b)

    def command(self) -> Optional[list[bytes]]:
        """The next complete command, or None when more bytes are needed."""
        at = self.pos
        if at >= len(self.buf):
            return None
        if self.buf[at] != ord("*"):
            got = self._line(at, MAX_INLINE)
            if got is None:
                return None
            line, self.pos = got
            args = line.split()
            return args if args else self.command()
        got = self._line(at + 1, 32)
        if got is None:
            return None
        n_b, at = got
        n = self._int(n_b, "multibulk length")
        if n > MAX_ARGS:
            raise RespError("invalid multibulk length")
        args: list[bytes] = []
        for _ in range(max(0, n)):
            if at >= len(self.buf):
                return None
            if self.buf[at] != ord("$"):
                raise RespError(f"expected '$', got '{chr(self.buf[at])}'")
            got = self._line(at + 1, 32)
            if got is None:
                return None
            l_b, at = got
            ln = self._int(l_b, "bulk length")
            if not 0 <= ln <= MAX_BULK:
                raise RespError("invalid bulk length")
            if len(self.buf) < at + ln + 2:
                return None
            if self.buf[at + ln : at + ln + 2] != b"\r\n":
                raise RespError("bulk string not terminated by CRLF")
            args.append(bytes(self.buf[at : at + ln]))
            at += ln + 2
        self.pos = at
        return args if args else self.command()
