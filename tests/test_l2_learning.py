"""A standalone `inswitch switch --program forward` forwards out of the box: unknown
destinations flood, source MACs are learned through the `mac_learn` digest by the switch's
local control plane (the data plane cannot write its tables); a controller's first Write
takes over from empty tables."""

from __future__ import annotations

import time
from pathlib import Path

from inswitch import _native
from inswitch.p4rt.client import SwitchClient

from conftest import free_udp_ports, start_switch

MACS = [f"02:00:00:00:01:0{i + 1}" for i in range(3)]


def mac_int(m: str) -> int:
    return int(m.replace(":", ""), 16)


def dmac_ports(c: SwitchClient) -> dict[int, int]:
    """l2_dmac as {MAC as int: port}."""
    return {int(next(iter(e["match"].values()))): int(e["params"]["port"]) for e in c.read_entries("l2_dmac")}


def test_standalone_forward_learns_and_floods(tmp_path: Path) -> None:
    base = free_udp_ports(3)
    sw = start_switch(tmp_path / "sw", "--program", "forward", "--ports", f"udp:{base}:3")
    hosts = []
    try:
        assert "L2: learning MACs" in sw.log.read_text()
        hosts = [_native.TunnelHost(f"127.0.0.1:{base + i}", MACS[i], f"10.0.1.{i + 1}") for i in range(3)]
        time.sleep(0.1)
        # No controller has installed anything: ARP floods, replies are learned, pings pass.
        rtts = hosts[0].ping("10.0.1.2", count=3, timeout=2.0, interval=0.05)
        assert all(r is not None for r in rtts), rtts
        rtts = hosts[2].ping("10.0.1.1", count=2, timeout=2.0, interval=0.05)
        assert all(r is not None for r in rtts), rtts
        with SwitchClient(sw.p4runtime, require_primary=False) as c:
            learned = dmac_ports(c)
        # Each host learned on the port it sent from, and nothing else.
        assert learned == {mac_int(m): i for i, m in enumerate(MACS)}, learned

        # A controller's first write: learned entries and the flood group go, its own stay.
        with SwitchClient(sw.p4runtime) as c:
            c.insert_entry("l2_dmac", {"dst_addr": MACS[1]}, "l2_forward", {"port": 1})
            assert dmac_ports(c) == {mac_int(MACS[1]): 1}
            assert list(c.read_entries("l2_smac")) == []
    finally:
        for h in hosts:
            h.close()
        assert sw.stop(timeout=20) == 0  # a clean exit; generous: the machine may be loaded
