"""Hare messages as UDP payloads (the format of `crates/wire/src/hare.rs`: a 16-byte
header, the key padded to the key field, the value), and the value *cell* our hosts put
in the value: the switch keeps fixed-size values, so a Redis value of any length up to
`size - 1` bytes travels as `[length][bytes][zero padding]`, and a missing key as
`[0xFF][padding]` (so a deleted key is cached as absent, never as its old value)."""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Optional

HEADER = struct.Struct("!BBBBIHHBBH")
OP_GET, OP_GET_REPLY, OP_PUT, OP_PUT_REPLY = 1, 2, 3, 4
OP_STAT_FETCH, OP_STATE_SET, OP_DATAMV_TO_SWITCH, OP_DATAMV_TO_SERVER = 16, 17, 18, 19
FLAG_HIT, FLAG_DONE = 0x01, 0x02
PORT_SERVER, PORT_CLIENT = 7370, 7371
#: Ethernet + IPv4 + UDP: where a Hare message starts in a frame.
L4_END = 14 + 20 + 8
MAX_KEY = 255
MAX_VALUE = 255
#: Reply status bits of our storage agent (the switch does not read a reply's status).
STATUS_EXISTED = 0x01  # a DEL (PUT of the absent cell) removed a key
STATUS_ERROR = 0x40  # the store failed; the operation was not applied
STATUS_RETRY = 0x80  # the object is moving (Hare's state manager): ask again
NIL = 0xFF
#: Where the 32-bit request sequence number sits in the header. The switch echoes it in a
#: control packet's DONE reply, so a reply is matched to its request, never to a late
#: duplicate of an earlier one with the same op and slot (DySO's are all slot 0).
SEQ_OFFSET = 4


class WireError(ValueError):
    """A payload that is not a Hare message."""


@dataclass
class Msg:
    op: int
    key: bytes
    value: bytes = b""
    seq: int = 0
    flags: int = 0
    slot: int = 0
    aux: int = 0
    status: int = 0
    key_field: int = 0

    def encode(self) -> bytes:
        kf = self.key_field or len(self.key)
        if len(self.key) > kf or kf > MAX_KEY or len(self.value) > MAX_VALUE:
            raise WireError("key or value too long for a Hare message")
        return HEADER.pack(self.op, self.flags, len(self.key), kf, self.seq, self.slot, self.aux, len(self.value), self.status, 0) + self.key + bytes(kf - len(self.key)) + self.value

    @staticmethod
    def decode(b: bytes) -> "Msg":
        if len(b) < HEADER.size:
            raise WireError("shorter than the Hare header")
        op, flags, kl, kf, seq, slot, aux, vl, status, _ = HEADER.unpack_from(b)
        if kl > kf or len(b) < HEADER.size + kf + vl:
            raise WireError("key or value runs past the payload")
        k = HEADER.size
        return Msg(op, bytes(b[k : k + kl]), bytes(b[k + kf : k + kf + vl]), seq, flags, slot, aux, status, kf)


class Seqs:
    """Fresh 32-bit sequence numbers for control requests. The first is random, so a
    restarted sender does not take a dead one's late replies as its own."""

    def __init__(self) -> None:
        self.last = int.from_bytes(os.urandom(4), "big")

    def next(self) -> int:
        self.last = (self.last + 1) & 0xFFFFFFFF
        return self.last


def with_seq(payload: bytes, seq: int) -> bytes:
    """The Hare message `payload` with its sequence number set to `seq` (mod 2**32)."""
    if len(payload) < HEADER.size:
        raise WireError("shorter than the Hare header")
    return payload[:SEQ_OFFSET] + (seq & 0xFFFFFFFF).to_bytes(4, "big") + payload[SEQ_OFFSET + 4 :]


def cell(value: Optional[bytes], size: int) -> bytes:
    """The `size`-byte cell of a value (None: the key does not exist)."""
    if value is None:
        return bytes([NIL]) + bytes(size - 1)
    if len(value) > size - 1:
        raise ValueError(f"value of {len(value)} bytes does not fit a {size}-byte cell")
    return bytes([len(value)]) + value + bytes(size - 1 - len(value))


def uncell(c: bytes) -> Optional[bytes]:
    """The value in a cell (None: absent)."""
    if not c:
        raise WireError("empty value cell")
    if c[0] == NIL:
        return None
    if 1 + c[0] > len(c):
        raise WireError("value cell length past its end")
    return bytes(c[1 : 1 + c[0]])
