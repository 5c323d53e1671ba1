"""Scapy layer for SwitchAgg packets (UDP port 7071; layout in `crates/wire/src/switchagg.rs`):
a type byte, then for Aggregation packets `flags, tree_id, op, reserved, child_id, seq,
num_pairs` and variable-length pairs `<key_len, value_len, key, value>`."""

from __future__ import annotations

from scapy.fields import (  # type: ignore[attr-defined]
    ByteEnumField,
    ByteField,
    FieldLenField,
    FlagsField,
    IntField,
    PacketListField,
    ShortField,
    StrLenField,
)
from scapy.layers.inet import UDP  # type: ignore[attr-defined]
from scapy.packet import Packet, bind_layers  # type: ignore[attr-defined]

UDP_PORT = 7071
TYPES = {1: "aggregation", 2: "launch", 3: "configure", 4: "ack"}
FLAG_NAMES = ["EOT", "ACK", "BYPASS", "CONTROL"]


class Pair(Packet):
    name = "SwitchAgg pair"
    fields_desc = [
        FieldLenField("key_len", None, length_of="key", fmt="B"),
        ByteField("value_len", 4),
        StrLenField("key", b"", length_from=lambda p: p.key_len),
        IntField("value", 0),
    ]

    def extract_padding(self, s: bytes) -> tuple[bytes, bytes]:
        return b"", s


def _pair_cls(pkt: "SwitchAgg", lst: list, cur: object, remain: bytes) -> type | None:
    return Pair if len(lst) < (pkt.num_pairs or 0) else None


class SwitchAgg(Packet):
    name = "SwitchAgg"
    fields_desc = [
        ByteEnumField("type", 1, TYPES),
        FlagsField("flags", 0, 8, FLAG_NAMES),
        ShortField("tree_id", 0),
        ByteEnumField("op", 0, {0: "sum", 1: "min", 2: "max"}),
        ByteField("reserved", 0),
        ShortField("child_id", 0),
        IntField("seq", 0),
        ShortField("num_pairs", None),
        PacketListField("pairs", [], next_cls_cb=_pair_cls),
    ]

    def post_build(self, p: bytes, pay: bytes) -> bytes:
        if self.num_pairs is None:
            p = p[:12] + len(self.pairs).to_bytes(2, "big") + p[14:]
        return p + pay


bind_layers(UDP, SwitchAgg, dport=UDP_PORT)
# ACKs come back from the switch with the ports swapped.
bind_layers(UDP, SwitchAgg, sport=UDP_PORT)
