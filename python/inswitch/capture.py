"""Captures of an in-process switch (`_native.SimSwitch`) on simulated time: the same
pcapng files a switch process writes with `--pcap` (`DIR/port{N}.pcapng`, direction in
each frame; `cpu.pcapng` for packet-outs and packet-ins), written by the switch's own
writer (`_native.PcapWriter`), stamped with the simulation's clock."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from inswitch import _native


class CapturedSim:
    """Wraps a `SimSwitch`: every frame into and out of `process` and `packet_out` is
    recorded; everything else is passed through. `clock()` gives simulated seconds."""

    def __init__(self, sw: Any, num_ports: int, out_dir: Path, clock: Callable[[], float]) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        self._sw, self._clock, self.dir = sw, clock, out_dir
        self._ports = [_native.PcapWriter(str(out_dir / f"port{i}.pcapng"), f"sim{i}") for i in range(num_ports)]
        self._cpu = _native.PcapWriter(str(out_dir / "cpu.pcapng"), "cpu")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sw, name)

    def _t(self) -> int:
        return max(0, int(self._clock() * 1e9))

    def process(self, port: int, frames: list[bytes]) -> list[tuple[int, bytes]]:
        t = self._t()
        for f in frames:
            self._ports[port].write(f, t, True)
        out = self._sw.process(port, frames)
        for p, f in out:
            if p < len(self._ports):
                self._ports[p].write(bytes(f), t, False)
        return out

    def packet_out(self, frame: bytes) -> list[bytes]:
        t = self._t()
        self._cpu.write(frame, t, True)
        ins = self._sw.packet_out(frame)
        for f in ins:
            self._cpu.write(bytes(f), t, False)
        return ins

    def take_packet_ins(self) -> list[bytes]:
        ins = self._sw.take_packet_ins()
        t = self._t()
        for f in ins:
            self._cpu.write(bytes(f), t, False)
        return ins

    def close(self) -> None:
        for w in [*self._ports, self._cpu]:
            w.close()
