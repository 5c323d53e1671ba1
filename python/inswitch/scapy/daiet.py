"""Scapy layer for DAIET aggregation packets (UDP port 7070); the layout is documented in
`crates/wire/src/daiet.rs`. Fixed pairs are `FixedPair` (16-byte key, zero-padded, 32-bit
value; a key starting with a zero byte is a hole, an empty position); with the VARLEN
flag, `VarPair` (key length, value, key)."""

from __future__ import annotations

from scapy.fields import (  # type: ignore[attr-defined]
    ByteEnumField,
    ByteField,
    FieldLenField,
    FlagsField,
    IntField,
    PacketListField,
    ShortField,
    StrFixedLenField,
    StrLenField,
)
from scapy.layers.inet import UDP  # type: ignore[attr-defined]
from scapy.packet import Packet, bind_layers  # type: ignore[attr-defined]

UDP_PORT = 7070
FLAG_NAMES = ["END", "ACK", "BYPASS", "VARLEN", "FROM_SWITCH", "RESEND", "QUERY", "DONE"]


class FixedPair(Packet):
    name = "DAIET fixed pair"
    fields_desc = [StrFixedLenField("key", b"", 16), IntField("value", 0)]

    def extract_padding(self, s: bytes) -> tuple[bytes, bytes]:
        return b"", s


class VarPair(Packet):
    name = "DAIET variable-length pair"
    fields_desc = [FieldLenField("key_len", None, length_of="key", fmt="!H"), IntField("value", 0), StrLenField("key", b"", length_from=lambda p: p.key_len)]

    def extract_padding(self, s: bytes) -> tuple[bytes, bytes]:
        return b"", s


def _pair_cls(pkt: "Daiet", lst: list, cur: object, remain: bytes) -> type | None:
    if len(lst) >= pkt.num_pairs:
        return None
    return VarPair if pkt.flags & 0x08 else FixedPair


class Daiet(Packet):
    name = "DAIET"
    fields_desc = [
        ShortField("tree_id", 0),
        FlagsField("flags", 0, 8, FLAG_NAMES),
        ByteEnumField("op", 0, {0: "sum", 1: "min", 2: "max"}),
        ShortField("sender", 0),
        ShortField("epoch", 0),
        IntField("seq", 0),
        ByteField("num_pairs", None),
        ByteField("info", 0),
        PacketListField("pairs", [], next_cls_cb=_pair_cls),
    ]

    def post_build(self, p: bytes, pay: bytes) -> bytes:
        if self.num_pairs is None:
            p = p[:12] + bytes([len(self.pairs)]) + p[13:]
        return p + pay


bind_layers(UDP, Daiet, dport=UDP_PORT)
