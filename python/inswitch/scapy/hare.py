"""Scapy layer for Hare messages (UDP ports 7370 and 7371): the format of
crates/wire/src/hare.rs, written independently of the Rust encoder."""

from __future__ import annotations

from scapy.fields import ByteEnumField, ByteField, FieldLenField, FlagsField, IntField, ShortField, StrLenField  # type: ignore[attr-defined]
from scapy.layers.inet import UDP  # type: ignore[attr-defined]
from scapy.packet import Packet, bind_layers  # type: ignore[attr-defined]

PORT_SERVER, PORT_CLIENT = 7370, 7371

OPS = {
    1: "GET", 2: "GET_REPLY", 3: "PUT", 4: "PUT_REPLY", 5: "ACQUIRE", 6: "RELEASE", 7: "GRANT", 8: "RELEASE_ACK",
    16: "STAT_FETCH", 17: "STATE_SET", 18: "DATAMV_TO_SWITCH", 19: "DATAMV_TO_SERVER",
}


class Hare(Packet):
    name = "Hare"
    fields_desc = [
        ByteEnumField("op", 1, OPS),
        FlagsField("flags", 0, 8, ["HIT", "DONE", "GRANT_NEXT"]),
        ByteField("key_len", None),
        FieldLenField("key_field", None, length_of="key", fmt="B"),
        IntField("seq", 0),
        ShortField("hit_index", 0),
        ShortField("aux", 0),
        FieldLenField("value_len", None, length_of="value", fmt="B"),
        ByteField("status", 0),
        ShortField("reserved", 0),
        StrLenField("key", b"", length_from=lambda p: p.key_field),
        StrLenField("value", b"", length_from=lambda p: p.value_len),
    ]

    def post_build(self, p: bytes, pay: bytes) -> bytes:
        if self.key_len is None:
            p = p[:2] + bytes([len(self.key.rstrip(b"\0"))]) + p[3:]
        return p + pay

    def meaningful_key(self) -> bytes:
        return bytes(self.key[: self.key_len])


bind_layers(UDP, Hare, dport=PORT_SERVER)
bind_layers(UDP, Hare, dport=PORT_CLIENT)
