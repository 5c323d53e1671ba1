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
from inswitch.scapy import DIRECTION_IN, DIRECTION_OUT, read_capture

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
