"""`inswitch switch --ring-frames N`: the receive ring of every AF_PACKET port has the slots
asked for (rounded up to whole 64 KiB blocks of 40 slots at a 1500-byte MTU), as the port reports it in the
ready file and as the process has it mapped (/proc/PID/smaps), and bad values are refused
in one line with exit status 2. Fabrics give their switches `FABRIC_RING_FRAMES`
(tests/test_fabric.py checks that it reaches every switch).

The veth tests need root.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from inswitch.topology import netns
from inswitch.topology.state import process_tag

# A slot at a 1500-byte MTU: 80 bytes of ring header + 4 of alignment room + the largest
# frame (1500 + 14 of Ethernet + 8 of two VLAN tags), 16-aligned.
SLOT = -(-(80 + 4 + 1500 + 22) // 16) * 16  # 1616
BLOCK = 1 << 16
PER_BLOCK = BLOCK // SLOT  # 40


def ring_of(asked: int) -> dict[str, int]:
    """The ring the kernel sets up for `asked` slots (independent of the port's code)."""
    blocks = -(-asked // PER_BLOCK)
    return {"slots": blocks * PER_BLOCK, "bytes": blocks * BLOCK}


@pytest.mark.parametrize("bad", ["5", "31", "65537", "x", "1.5", ""])
def test_bad_ring_frames_is_one_line_and_status_2(bad: str) -> None:
    cp = subprocess.run([sys.executable, "-m", "inswitch", "switch", "--ports", "memory:2", "--ring-frames", bad],
                        capture_output=True, text=True, timeout=60)
    assert cp.returncode == 2, cp
    lines = cp.stderr.strip().splitlines()
    assert len(lines) == 1 and "--ring-frames" in lines[0] and "[32, 65536]" in lines[0], cp.stderr


def test_fabric_up_refuses_a_bad_ring_frames_before_anything_is_made() -> None:
    cp = subprocess.run([sys.executable, "-m", "inswitch", "fabric", "up", "--topology", "leaf-spine:1,1,1", "--name", "rngx",
                         "--ring-frames", "0"], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 2 and len(cp.stderr.strip().splitlines()) == 1 and "--ring-frames" in cp.stderr, cp
    assert not netns.leftovers("rngx-")


def test_native_data_plane_refuses_an_out_of_range_ring() -> None:
    from inswitch import _native

    for bad in (0, 31, 65537):
        with pytest.raises(ValueError, match="rx_ring_frames"):
            _native.Dataplane(["forward"], "memory:1", rx_ring_frames=bad)


def _socket_mappings_kb(pid: int) -> list[int]:
    """Sizes (kB) of the process's mappings of sockets: the AF_PACKET rings."""
    out, cur = [], None
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split()
        if len(head) >= 5 and "-" in head[0] and ":" not in head[0]:
            cur = head[5] if len(head) > 5 else ""
        elif line.startswith("Size:") and cur is not None and cur.startswith("socket:"):
            out.append(int(line.split()[1]))
    return out


@pytest.mark.netns
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: veth pairs and AF_PACKET")
@pytest.mark.parametrize("asked", [None, 256])
def test_ring_frames_reaches_every_port(tmp_path: Path, asked: int | None) -> None:
    tag = f"rng{process_tag()[-3:]}{'d' if asked is None else 's'}"
    ifs = [f"{tag}a{i}" for i in range(2)]
    for i, dev in enumerate(ifs):
        netns.ip("link", "add", dev, "type", "veth", "peer", "name", f"{tag}b{i}")
    proc = None
    try:
        for i, dev in enumerate(ifs):
            netns.ip("link", "set", dev, "up")
            netns.ip("link", "set", f"{tag}b{i}", "up")
        ready = tmp_path / "ready.json"
        argv = [sys.executable, "-m", "inswitch", "switch", "--ports", "veth:" + ",".join(ifs), "--p4runtime", "127.0.0.1:0",
                "--metrics", "off", "--ready-file", str(ready)] + ([] if asked is None else ["--ring-frames", str(asked)])
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), proc.communicate(timeout=10) if proc.poll() is not None else "not ready in 60 s"
        doc = json.loads(ready.read_text())
        want = ring_of(4096 if asked is None else asked)
        assert doc["rx_rings"] == [want, want]
        # What the process has mapped: one ring per port, that size (no transmit ring: the
        # switch sends with sendmmsg).
        assert _socket_mappings_kb(proc.pid) == [want["bytes"] // 1024] * 2
    finally:
        if proc is not None:
            proc.terminate()
            out, _ = proc.communicate(timeout=20)
            if asked is not None:
                assert f"receive ring of {ring_of(asked)['slots']} slots" in " ".join(out.split())
        for dev in ifs:
            subprocess.run(["ip", "link", "del", dev], capture_output=True)


@pytest.mark.netns
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: namespaces, veth pairs and AF_PACKET")
def test_rack_up_ring_frames_reaches_the_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    from inswitch.topology.rack import Rack

    monkeypatch.setenv("INSWITCH_RACK_PORTS", "veth")  # AF_PACKET ports (xdp: ports have no such ring)
    name = f"rng{process_tag()[-3:]}r"
    rack = Rack()
    try:
        st = rack.up(2, name=name, mode="netns", ring_frames=64)
        assert "--ring-frames" in st.switch.argv and st.switch.argv[st.switch.argv.index("--ring-frames") + 1] == "64"
        deadline = time.monotonic() + 30
        doc: dict = {}
        while time.monotonic() < deadline and not doc.get("rx_rings"):
            try:
                doc = json.loads(Path(st.switch.ready_file).read_text())
            except (OSError, ValueError):
                time.sleep(0.1)
        assert doc["rx_rings"] == [ring_of(64)] * 2
    finally:
        rack.down(name)
    assert not netns.leftovers(f"{name}-")
