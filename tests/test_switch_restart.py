"""Issue 22 §2: a switch that dies comes back (the rack's supervisor restarts it on the same
ports and re-installs the rack's forwarding), the restart is recorded (`rack status`,
`/metrics`), and a WordCount job running through it (DAIET) still ends correct."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest

from conftest import rack_free_tcp_port
from inswitch.topology import Rack, control, load_state, switchproc
from inswitch.topology.state import RackState, process_tag
from test_rack_fallback import ETH_TEST, TunnelNic, attach, mac_bytes

PY = sys.executable


def wait_restarted(name: str, old_pid: int, timeout: float = 30.0) -> RackState:
    """The rack's state once its supervisor has recorded a restart after `old_pid` died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = load_state(name)
        if st and st.switch.pid != old_pid and any("forwarding_at" in r for r in st.extra.get("restarts", [])):
            return st
        time.sleep(0.05)
    raise AssertionError(f"no restart recorded: {load_state(name)}")


def generation(st: RackState) -> float:
    return next(v for n, _, v in control.scrape_metrics(st.switch.metrics) if n == "inswitch_switch_generation")


def test_killed_switch_is_restarted_on_the_same_ports_and_forwards_again(rack_factory) -> None:  # type: ignore[no-untyped-def]
    st: RackState = rack_factory("r", 2, mode="udp")
    assert generation(st) == 1
    old = st.switch.pid
    assert old is not None
    t_kill = time.time()
    os.kill(old, signal.SIGKILL)
    st2 = wait_restarted(st.name, old)
    rec = st2.extra["restarts"][0]
    assert rec["generation"] == 2 and rec["exit"] == "signal SIGKILL" and rec["died_at"] >= t_kill - 0.5
    assert rec["recovery_s"] < 15, rec
    assert (st2.switch.p4runtime, st2.switch.metrics, st2.switch.ports) == (st.switch.p4runtime, st.switch.metrics, st.switch.ports)
    assert switchproc.is_alive(st2.switch.pid, st2.switch.ready_file) and generation(st2) == 2
    # The same tunnel ports, the forwarding state installed again: a unicast frame gets across.
    h1, h2 = (TunnelNic(h) for h in st2.hosts)
    try:
        attach(h1, [h2])
        a, b = st2.hosts
        uni = mac_bytes(b.mac) + mac_bytes(a.mac) + ETH_TEST + b"after the restart".ljust(46, b".")
        h1.sock.send(uni)
        assert h2.recv_all() == [uni]
    finally:
        h1.close()
        h2.close()
    status = subprocess.run([PY, "-m", "inswitch", "rack", "status", "--name", st.name, "--json"],
                            capture_output=True, text=True, timeout=60)
    js = json.loads(status.stdout)
    assert js["switch_alive"] and js["switch_generation"] == 2 and len(js["switch_restarts"]) == 1
    text = subprocess.run([PY, "-m", "inswitch", "rack", "status", "--name", st.name],
                          capture_output=True, text=True, timeout=60).stdout
    assert "switch restarted" in text and "generation 2" in text and "SIGKILL" in text
    # `down` stops the supervisor first, so nothing comes back.
    rep = Rack().down(st.name)
    time.sleep(0.5)
    assert not switchproc.find_by_marker(st2.switch.ready_file), rep
