"""Scapy layer for NetSHa answer packets (§3.3): UDP payload of IPv4 packets whose ToS
reserved bit is set. Query# (1 byte), then per query QID (4), NUM (2) and NUM pairs of
data id (4) and distance (8-byte double)."""

from __future__ import annotations

from scapy.fields import FieldLenField, IEEEDoubleField, IntField, PacketListField  # type: ignore[attr-defined]
from scapy.packet import Packet  # type: ignore[attr-defined]

#: The ToS bit that marks NetSHa packets.
TOS_BIT = 0x01


class NetshaAnswer(Packet):
    name = "NetSHa answer"
    fields_desc = [IntField("id", 0), IEEEDoubleField("distance", 0.0)]

    def extract_padding(self, s: bytes) -> tuple[bytes, bytes]:
        return b"", s


class NetshaQuery(Packet):
    name = "NetSHa query block"
    fields_desc = [
        IntField("qid", 0),
        FieldLenField("num", None, count_of="pairs", fmt="!H"),
        PacketListField("pairs", [], NetshaAnswer, count_from=lambda p: p.num),
    ]

    def extract_padding(self, s: bytes) -> tuple[bytes, bytes]:
        return b"", s


class Netsha(Packet):
    name = "NetSHa"
    fields_desc = [
        FieldLenField("query_count", None, count_of="queries", fmt="B"),
        PacketListField("queries", [], NetshaQuery, count_from=lambda p: p.query_count),
    ]
