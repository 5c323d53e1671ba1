"""`inswitch switch --pcap DIR`: each port's traffic in a pcapng file that scapy and tshark
read, with the right frames in the right direction."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest
from scapy.layers.inet import ICMP, IP

from inswitch import _native
from inswitch.p4rt.client import SwitchClient
from inswitch.scapy import DIRECTION_IN, DIRECTION_OUT, capture_files, read_capture

from conftest import free_udp_ports, start_switch


def test_pings_through_the_switch_are_captured_per_port(tmp_path: Path) -> None:
    base = free_udp_ports(2)
    pcap = tmp_path / "pcap"
    sw = start_switch(tmp_path / "sw", "--program", "forward", "--ports", f"udp:{base}:2", "--pcap", str(pcap))
    hosts = []
    try:
        with SwitchClient(sw.p4runtime) as c:
            for port in (0, 1):
                c.insert_entry("l2_dmac", {"dst_addr": f"02:00:00:00:00:0{port + 1}"}, "l2_forward", {"port": port})
            c.set_multicast_group(1, [0, 1])
        hosts = [_native.TunnelHost(f"127.0.0.1:{base + i}", f"02:00:00:00:00:0{i + 1}", f"10.0.0.{i + 1}") for i in (0, 1)]
        time.sleep(0.1)
        rtts = hosts[0].ping("10.0.0.2", count=3, timeout=2.0, interval=0.05)
        assert all(r is not None for r in rtts), rtts
    finally:
        for h in hosts:
            h.close()
        assert sw.stop() == 0  # a clean exit flushes the capture files

    # Port 0: three echo requests in, three replies out (plus ARP).
    p0 = read_capture(pcap / "port0.pcapng")
    req_in = [p for p, d in p0 if d == DIRECTION_IN and p.haslayer(ICMP) and p[ICMP].type == 8]
    rep_out = [p for p, d in p0 if d == DIRECTION_OUT and p.haslayer(ICMP) and p[ICMP].type == 0]
    assert len(req_in) == 3 and len(rep_out) == 3
    assert all(p[IP].src == "10.0.0.1" and p[IP].dst == "10.0.0.2" for p in req_in)
    # Port 1 saw the same requests leave the switch, unchanged.
    p1 = read_capture(pcap / "port1.pcapng")
    req_out = [p for p, d in p1 if d == DIRECTION_OUT and p.haslayer(ICMP) and p[ICMP].type == 8]
    assert [bytes(p) for p in req_out] == [bytes(p) for p in req_in]

    if shutil.which("tshark") is None:
        pytest.skip("tshark not installed")
    out = subprocess.run(["tshark", "-r", str(pcap / "port0.pcapng"), "-Y", "icmp", "-T", "fields", "-e", "icmp.type", "-e", "frame.p2p_dir"],
                         capture_output=True, text=True, timeout=60, check=True).stdout.split("\n")
    rows = [line.split("\t") for line in out if line.strip()]
    assert sorted(r[0] for r in rows) == ["0", "0", "0", "8", "8", "8"]


def _tshark_count(path: Path) -> int:
    out = subprocess.run(["tshark", "-r", str(path), "-T", "fields", "-e", "frame.number"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return len([x for x in out.split() if x.strip()])


def test_capture_is_readable_while_the_switch_runs_and_rotates_by_size(tmp_path: Path) -> None:
    if shutil.which("tshark") is None:
        pytest.skip("tshark not installed")
    import socket

    from scapy.layers.inet import UDP
    from scapy.layers.l2 import Ether

    base = free_udp_ports(2)
    pcap = tmp_path / "pcap"
    # 0.02 MB = 20,000 bytes: each 1,000-byte frame takes a 1,044-byte block.
    sw = start_switch(tmp_path / "sw", "--program", "forward", "--ports", f"udp:{base}:2", "--pcap", str(pcap), "--pcap-size", "0.02")
    frames = [bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP(src="10.0.0.1", dst="10.0.0.2")
                    / UDP(sport=1000 + i, dport=9) / (bytes([i % 256]) * 958)) for i in range(100)]
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for f in frames[:5]:
                s.sendto(f, ("127.0.0.1", base))
            # Read while the switch runs: the frames are there without a stop.
            deadline = time.monotonic() + 5
            while _tshark_count(pcap / "port0.pcapng") < 5 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert _tshark_count(pcap / "port0.pcapng") == 5
            assert sw.proc.poll() is None
            for f in frames[5:]:
                s.sendto(f, ("127.0.0.1", base))
                time.sleep(0.001)
        time.sleep(0.5)
        files = capture_files(pcap, 0)
        # 100 KB of frames in files of 20 KB: at least four of them, each valid on its own.
        assert len(files) >= 4, files
        assert [p.name for p in files] == ["port0.pcapng"] + [f"port0.{k}.pcapng" for k in range(1, len(files))]
        counts = [_tshark_count(p) for p in files]
        assert all(c > 0 for c in counts) and sum(counts) == 100, counts
        assert all(p.stat().st_size < 20_000 + 64 * 1044 for p in files)
    finally:
        assert sw.stop() == 0
    got = [bytes(p) for f in files for p, d in read_capture(f) if d == DIRECTION_IN]
    assert got == frames
