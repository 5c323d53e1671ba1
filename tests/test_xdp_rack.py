"""A rack whose switch uses AF_XDP ports (the default; `INSWITCH_RACK_PORTS=veth` for AF_PACKET): traffic crosses it,
the XDP programs are attached while it runs and gone as soon as it is killed with SIGKILL,
and forcing XDP off gives a working rack over AF_PACKET, said in the switch's log.
Every other rack test runs over AF_XDP too, through the default."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from inswitch.topology import Rack, RackState, control, netns, switchproc

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="needs root: network namespaces, veth pairs and AF_XDP")


def xdp_attached(dev: str) -> bool:
    return "prog/xdp" in netns.ip("-d", "link", "show", "dev", dev).stdout


def ping(st: RackState, src: str, dst_ip: str) -> None:
    ns = st.host(src).netns
    assert ns
    subprocess.run(netns.netns_argv(ns, ["ping", "-n", "-c2", "-W2", dst_ip]), check=True, capture_output=True, timeout=20)


def switch_ifs(st: RackState) -> list[str]:
    return [h.switch_if for h in st.hosts if h.switch_if]


@needs_root
@pytest.mark.netns
def test_xdp_rack_forwards_and_kill9_detaches(rack_factory, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    # The default: no setting needed.
    monkeypatch.delenv("INSWITCH_RACK_PORTS", raising=False)
    monkeypatch.delenv("INSWITCH_XDP", raising=False)
    st: RackState = rack_factory("x", 2)
    assert st.switch.ports.startswith("xdp:")
    log = Path(st.switch.log).read_text()
    for dev in switch_ifs(st):
        assert f"xdp:{dev}(native,copy)" in log, log
        assert xdp_attached(dev)
    ping(st, "h1", st.host("h2").ip)
    # Per-ring counters of every XDP port are in /metrics (nothing dropped by a ping).
    ring = {(lab["port"], lab["reason"]): v for n, lab, v in control.scrape_metrics(st.switch.metrics)
            if n == "inswitch_port_io_drops_total" and lab["reason"] in ("rx_full", "rx_fill_empty", "rx_xdp_dropped", "tx_full")}
    assert sorted(ring) == sorted((str(p), r) for p in range(2) for r in ("rx_full", "rx_fill_empty", "rx_xdp_dropped", "tx_full"))
    assert not any(ring.values()), ring
    os.kill(int(st.extra["supervisor_pid"]), signal.SIGKILL)
    os.kill(st.switch.pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while switchproc.is_alive(st.switch.pid, st.switch.ready_file) and time.monotonic() < deadline:
        time.sleep(0.05)
    # The kernel removes a link-attached program with its last file descriptor: nothing is
    # left on the interfaces even before the rack is taken down.
    deadline = time.monotonic() + 5
    while any(xdp_attached(d) for d in switch_ifs(st)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(xdp_attached(d) for d in switch_ifs(st))
    assert Rack().down(st.name).found


@needs_root
@pytest.mark.netns
def test_forced_fallback_rack_runs_over_af_packet(rack_factory, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("INSWITCH_RACK_PORTS", "xdp")
    monkeypatch.setenv("INSWITCH_XDP", "off")
    st: RackState = rack_factory("f", 2)
    log = Path(st.switch.log).read_text()
    for dev in switch_ifs(st):
        assert f"AF_XDP unavailable on {dev} (INSWITCH_XDP=off); using AF_PACKET" in log, log
        assert not xdp_attached(dev)
    ping(st, "h1", st.host("h2").ip)
    ping(st, "h2", st.host("h1").ip)
