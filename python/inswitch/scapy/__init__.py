"""Scapy support: read the switch's captures, and (as in-network protocols are added) one
scapy layer per protocol, so tests craft and check packets independently of the Rust
encoder and users can dissect captures.

The switch writes one pcapng file per port (`inswitch switch --pcap DIR` makes
`DIR/port{N}.pcapng`), with each packet's direction in the EPB flags; with `--pcap-size`
the port's later files are `port{N}.1.pcapng`, `port{N}.2.pcapng`, ... (`capture_files`).
"""

from __future__ import annotations

from pathlib import Path

from scapy.all import Packet, PcapNgReader  # type: ignore[attr-defined]

#: EPB flags bits 0-1: 1 = inbound (into the switch), 2 = outbound.
DIRECTION_IN = 1
DIRECTION_OUT = 2


def capture_files(directory: str | Path, port: int) -> list[Path]:
    """A port's capture files in the order they were written (rotation by size)."""
    d = Path(directory)
    first = d / f"port{port}.pcapng"
    later = sorted(d.glob(f"port{port}.*.pcapng"), key=lambda p: int(p.name.split(".")[1]))
    return ([first] if first.exists() else []) + later


def read_capture(path: str | Path) -> list[tuple[Packet, int]]:
    """Packets of one port's capture with their direction (DIRECTION_IN / DIRECTION_OUT)."""
    out: list[tuple[Packet, int]] = []
    with PcapNgReader(str(path)) as r:
        for p in r:
            flags = getattr(p, "direction", None)
            if flags is None:
                flags = (getattr(p, "flags", 0) or 0) & 0x3
            out.append((p, int(flags)))
    return out
