"""Scapy layer for INaaS frames (EtherType 0x88B6; layout in crates/wire/src/inaas.rs):
craft and dissect them independently of the Rust encoder."""

from __future__ import annotations

from scapy.all import Ether, Packet, bind_layers  # type: ignore[attr-defined]
from scapy.fields import ByteField, IntField, PacketListField, ShortField, SignedIntField, X3BytesField, XByteField

ETHERTYPE = 0x88B6
ITEMS = 20
BITMAPS = ("valid", "read", "write", "reduce", "compute", "failed", "preempted", "overflow")


class InaasItem(Packet):
    name = "INaaS item"
    fields_desc = [ShortField("idx", 0), IntField("key", 0), SignedIntField("value", 0)]

    def extract_padding(self, s: bytes) -> tuple[bytes, bytes]:
        return b"", s


class INaaS(Packet):
    name = "INaaS"
    fields_desc = [
        ByteField("op", 0),
        XByteField("flags", 0),
        IntField("seq", 0),
        IntField("timestamp", 0),
        IntField("time_limit", 0),
        IntField("uid", 0),
        *[X3BytesField(b, 0) for b in BITMAPS],
        PacketListField("items", [], InaasItem, count_from=lambda p: ITEMS),
    ]


bind_layers(Ether, INaaS, type=ETHERTYPE)


def frame(src: str, dst: str, items: list[tuple[int, int, int]], **fields: int) -> Ether:
    """An INaaS frame with 20 items (missing ones zero)."""
    its = [InaasItem(idx=i, key=k, value=v) for i, k, v in items] + [InaasItem() for _ in range(ITEMS - len(items))]
    return Ether(src=src, dst=dst, type=ETHERTYPE) / INaaS(items=its, **fields)
