"""File ports (`--ports pcap:IN:OUT,...`, bmv2's --use-files): a capture of a few hundred
frames replayed through `forward` with L2 entries, checked frame for frame against what the
program's L2 rules say, computed here from the frames alone. The captures are written and
read by this file's own pcap/pcapng code, not the switch's."""

from __future__ import annotations

import random
import struct
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from inswitch import _native, native

PORTS = 4


def mac(i: int) -> bytes:
    return bytes([2, 0, 0, 0, 0x7A, i])


def write_pcap(path: Path, frames: list[bytes]) -> None:
    """Classic pcap, little-endian, microsecond stamps, Ethernet."""
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)]
    for i, f in enumerate(frames):
        out.append(struct.pack("<IIII", i, 0, len(f), len(f)) + f)
    path.write_bytes(b"".join(out))


def read_pcapng(path: Path) -> list[bytes]:
    """The frames of every Enhanced Packet Block (little-endian files, as the switch writes)."""
    b = path.read_bytes()
    frames, o = [], 0
    assert struct.unpack_from("<I", b, 0)[0] == 0x0A0D0D0A
    while o < len(b):
        kind, total = struct.unpack_from("<II", b, o)
        assert struct.unpack_from("<I", b, o + total - 4)[0] == total
        if kind == 6:
            caplen = struct.unpack_from("<I", b, o + 20)[0]
            frames.append(b[o + 28 : o + 28 + caplen])
        o += total
    return frames


def make_inputs(rng: random.Random, n: int) -> dict[int, list[bytes]]:
    """Frames per ingress port: to a known host (another port), from a known or unknown
    source, some runts; payload carries (ingress port, sequence) so each is identifiable."""
    inputs: dict[int, list[bytes]] = {p: [] for p in range(PORTS)}
    for seq in range(n):
        port = rng.randrange(PORTS)
        if rng.random() < 0.05:
            inputs[port].append(bytes([seq % 256]) * rng.randrange(1, 14))  # runt: no Ethernet header
            continue
        dst = rng.choice([p for p in range(PORTS) if p != port])
        src = mac(port) if rng.random() < 0.8 else bytes([2, 0, 0, 0, 0x7B, rng.randrange(256)])
        payload = struct.pack(">HI", port, seq) + bytes(rng.randrange(256) for _ in range(rng.randrange(40, 200)))
        inputs[port].append(mac(dst) + src + b"\x88\xb5" + payload)
    return inputs


def expected(inputs: dict[int, list[bytes]]) -> dict[int, list[bytes]]:
    """forward's L2 rules with l2_dmac = {mac(p): p}: a frame of at least 14 bytes leaves the
    port its destination names, unchanged; a shorter one is dropped as malformed."""
    out: dict[int, list[bytes]] = defaultdict(list)
    for frames in inputs.values():
        for f in frames:
            if len(f) >= 14:
                out[f[5]].append(f)  # mac(p) ends in p
    return out


def install_l2(dp: object) -> None:
    info = native.program_set_info(["forward"])
    for p in range(PORTS):
        dp.table_write("insert", info.table_id("l2_dmac"), [("exact", 1, mac(p))], 0, info.action_id("l2_forward"), [(1, bytes([p]))])  # type: ignore[attr-defined]
        dp.table_write("insert", info.table_id("l2_smac"), [("exact", 1, mac(p))], 0, info.action_id("nop"), [])  # type: ignore[attr-defined]


def spec(tmp: Path) -> str:
    return "pcap:" + ",".join(f"{tmp}/in{p}.pcap:{tmp}/out{p}.pcapng" for p in range(PORTS))


@pytest.mark.parametrize("pipes", [1, 2])
def test_replay_through_forward_matches_the_l2_rules(tmp_path: Path, pipes: int) -> None:
    """With 2 pipes half the frames cross between pipes: done must wait for those too."""
    inputs = make_inputs(random.Random(20 + pipes), 400)
    for p, frames in inputs.items():
        write_pcap(tmp_path / f"in{p}.pcap", frames)
    dp = _native.Dataplane(["forward"], spec(tmp_path), pipes=pipes, hold_replay=True)
    try:
        install_l2(dp)
        assert dp.replay_done() is False  # held: nothing replayed yet
        dp.start_replay()
        deadline = time.monotonic() + 30
        while not dp.replay_done():
            assert time.monotonic() < deadline, "replay did not finish"
            time.sleep(0.01)
    finally:
        dp.stop()
    want = expected(inputs)
    total = 0
    for p in range(PORTS):
        got = read_pcapng(tmp_path / f"out{p}.pcapng")
        total += len(got)
        # Same frames, byte for byte; and each ingress port's frames in the order it sent them
        # (ports are read in turn, so streams from different ports interleave).
        assert sorted(got) == sorted(want[p]), f"port {p}"
        for src in range(PORTS):
            assert [f for f in got if f[14:16] == struct.pack(">H", src)] == [f for f in want[p] if f[14:16] == struct.pack(">H", src)]
    assert total == sum(len(v) for v in want.values()) > 300


def test_switch_command_exits_when_the_replay_is_done(tmp_path: Path) -> None:
    frames = make_inputs(random.Random(7), 200)
    for p in range(PORTS):
        write_pcap(tmp_path / f"in{p}.pcap", frames[p])
    # --l2 controller: no standalone learning, whose result would depend on timing.
    cmd = [sys.executable, "-m", "inswitch", "switch", "--ports", spec(tmp_path), "--p4runtime", "127.0.0.1:0", "--metrics", "off", "--l2", "controller"]
    cp = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stderr
    n_in = sum(len(v) for v in frames.values())
    assert f"replay done: {n_in} frames replayed" in cp.stdout
    # Without entries every well-formed frame floods to group 1, which has no members: the
    # outputs are valid and empty.
    assert all(read_pcapng(tmp_path / f"out{p}.pcapng") == [] for p in range(PORTS))


def test_malformed_input_is_one_line_and_status_2(tmp_path: Path) -> None:
    write_pcap(tmp_path / "bad.pcap", [bytes(60)] * 3)
    (tmp_path / "bad.pcap").write_bytes((tmp_path / "bad.pcap").read_bytes()[:-30])  # cut inside the 3rd frame
    cmd = [sys.executable, "-m", "inswitch", "switch", "--ports", f"pcap:{tmp_path}/bad.pcap:{tmp_path}/o.pcapng", "--p4runtime", "127.0.0.1:0", "--metrics", "off"]
    cp = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert cp.returncode == 2, cp.stderr
    lines = [line for line in cp.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "claims 60 bytes; the file ends first" in lines[0] and "bad.pcap" in lines[0], cp.stderr
    assert "Traceback" not in cp.stderr
    cmd[cmd.index("--ports") + 1] = f"pcap:{tmp_path}/missing.pcap:{tmp_path}/o.pcapng"
    cp = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert cp.returncode == 2 and "missing.pcap: No such file" in cp.stderr and len(cp.stderr.strip().splitlines()) == 1, cp.stderr
