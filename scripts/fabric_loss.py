"""Load across a running fabric and what the switches' receive rings dropped meanwhile:
iperf3 UDP (2 Gbit/s offered, 1,400 B) then TCP, each from the first host to a host on its
own leaf (1 switch) and to one on another leaf (3 switches); `rx_full` summed over every
switch port, from each switch's /metrics.

    PYTHONPATH=python python scripts/fabric_loss.py NAME [SECONDS]
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request

from inswitch.bench.fabric import udp_mbit
from inswitch.topology import netns
from inswitch.topology.fabric.fabric import FabricState


def ring_drops(st: FabricState) -> float:
    n = 0.0
    for s in st.switches:
        text = urllib.request.urlopen(f"http://{s.metrics}/metrics", timeout=5).read().decode()
        for line in text.splitlines():
            if line.startswith("inswitch_port_io_drops_total") and 'reason="rx_full"' in line:
                n += float(line.split()[-1])
    return n


def tcp_mbit(st: FabricState, src: str, dst: str, seconds: float) -> tuple[float, int]:
    """(Mbit/s received, retransmitted segments)."""
    s, d = st.host(src), st.host(dst)
    server = subprocess.Popen(netns.netns_argv(d.netns, ["iperf3", "-s", "-1", "-p", "5202"]),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        cp = subprocess.run(netns.netns_argv(s.netns, ["iperf3", "-c", d.ip, "-p", "5202", "-t", f"{seconds:g}", "-J"]),
                            capture_output=True, text=True, timeout=seconds + 30)
        end = json.loads(cp.stdout)["end"]
        return end["sum_received"]["bits_per_second"] / 1e6, int(end["sum_sent"].get("retransmits") or 0)
    finally:
        server.kill()
        server.wait()


def main(name: str, seconds: float) -> None:
    st = FabricState.load(name)
    if st is None:
        sys.exit(f"no fabric named {name!r}")
    h0 = st.hosts[0]
    same = next(h for h in st.hosts[1:] if h.switch == h0.switch)
    far = next(h for h in st.hosts if h.switch != h0.switch)
    d0 = ring_drops(st)
    one, three = udp_mbit(st, h0.name, same.name, seconds), udp_mbit(st, h0.name, far.name, seconds)
    d1 = ring_drops(st)
    t1, t3 = tcp_mbit(st, h0.name, same.name, seconds), tcp_mbit(st, h0.name, far.name, seconds)
    d2 = ring_drops(st)
    print(f"udp hop1 {one:.1f} hop3 {three:.1f} Mbit/s; rx_full during udp {d1 - d0:.0f}; "
          f"tcp hop1 {t1[0]:.1f} (retx {t1[1]}) hop3 {t3[0]:.1f} (retx {t3[1]}) Mbit/s; rx_full during tcp {d2 - d1:.0f}")


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 3.0)
