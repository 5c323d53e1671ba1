"""The unprivileged rack: the switch's ports are UDP tunnels on loopback and hosts are whoever
attaches to them. Nothing here may need root, so the CLI test runs with every capability
dropped (uid 0 without capabilities cannot make namespaces or raw sockets), or as the
invoking user when that is not root already."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import rack_free_tcp_port
from inswitch.topology.state import Host, process_tag
from inswitch.topology import Rack, RackError, RackState, control, load_state, netns, switchproc
from inswitch.topology.tunnel import split_addr, tunnel_host_class

PY = sys.executable
ETH_TEST = b"\x88\xb5"  # IEEE local experimental EtherType


def mac_bytes(mac: str) -> bytes:
    return bytes(int(x, 16) for x in mac.split(":"))


#: A broadcast `attach` floods until every NIC has one; NICs never report it.
PROBE = b"\xff" * 6 + b"\x02\x00\x00\x00\x00\xee" + ETH_TEST + b"attach probe".ljust(46, b".")


class TunnelNic:
    """A bare "NIC" on a tunnel port: sends and receives raw Ethernet frames as datagrams."""

    def __init__(self, host: Host) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(split_addr(host.tunnel_nic or ""))  # the one source the port accepts
        self.sock.connect(split_addr(host.tunnel or ""))
        self.sock.settimeout(2.0)

    def recv_all(self, quiet: float = 0.3, first: float = 2.0) -> list[bytes]:
        """Frames until none came for `quiet` (`first` for the first one: a loaded switch
        may take longer than `quiet` to forward), attach probes left out."""
        frames = []
        self.sock.settimeout(first)
        try:
            while True:
                f = self.sock.recv(4096)
                if f != PROBE:
                    frames.append(f)
                self.sock.settimeout(quiet)
        except socket.timeout:
            return frames

    def close(self) -> None:
        self.sock.close()


def attach(sender: TunnelNic, others: list[TunnelNic], timeout: float = 10.0) -> None:
    """Wait until the switch forwards between the NICs (it may still be installing its MAC
    table, and a fixed sleep only assumes the switch process ran in time): `sender` floods
    probes until each of `others` has one."""
    pending = list(others)
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        sender.sock.send(PROBE)
        for n in list(pending):
            n.sock.settimeout(0.05)
            try:
                if n.sock.recv(4096) == PROBE:
                    pending.remove(n)
            except socket.timeout:
                pass
    assert not pending, "the switch never learned every tunnel NIC's address"


def drops(st: RackState, reason: str) -> float:
    """The switch-wide drop counter for `reason` from /metrics (`inswitch_drops_total`)."""
    return sum(v for name, labels, v in control.scrape_metrics(st.switch.metrics)
               if name == "inswitch_drops_total" and labels.get("reason") == reason)


def no_privileges() -> list[str]:
    """A command prefix that drops every capability (keeping uid, so the venv stays readable)."""
    if os.geteuid() != 0:
        return []
    if not shutil.which("setpriv"):
        pytest.skip("setpriv (util-linux) is needed to drop root's capabilities")
    return ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--no-new-privs"]


@pytest.fixture(scope="module")
def udp_rack(rack_factory) -> RackState:  # type: ignore[no-untyped-def]
    return rack_factory("u", 3, mode="udp")


def test_udp_rack_describes_hosts_and_makes_no_namespaces(udp_rack: RackState) -> None:
    st = load_state(udp_rack.name)
    assert st is not None and st.mode == "udp"
    base = int(st.switch.ports.split(":")[1])
    assert st.switch.ports == f"udp:{base}:3@127.0.0.1:{base + 3}"
    for i, h in enumerate(st.hosts, start=1):
        assert (h.name, h.mac, h.ip, h.port) == (f"h{i}", f"02:00:00:00:00:0{i}", f"10.0.0.{i}", i - 1)
        assert h.tunnel == f"127.0.0.1:{base + i - 1}" and h.netns is None
        assert h.tunnel_nic == f"127.0.0.1:{base + 3 + i - 1}"
    assert switchproc.is_alive(st.switch.pid, st.switch.ready_file)
    assert not netns.leftovers(f"{st.name}-")
    with pytest.raises(RackError, match="UDP-tunnel mode"):
        Rack().exec(f"{st.name}-h1", ["true"])


def test_udp_rack_switches_frames_and_counts_runts(udp_rack: RackState) -> None:
    """Unicast goes to the one port the MAC table names, broadcast floods to every other port,
    and frames shorter than an Ethernet header (which only a tunnel can deliver) are dropped
    and counted as malformed while forwarding carries on."""
    h1, h2, h3 = (TunnelNic(h) for h in udp_rack.hosts)
    try:
        attach(h1, [h2, h3])  # h1's probes also teach port 0 where h1 is
        a, b = udp_rack.host("h1"), udp_rack.host("h2")
        uni = mac_bytes(b.mac) + mac_bytes(a.mac) + ETH_TEST + b"unicast h1->h2".ljust(46, b".")
        bcast = b"\xff" * 6 + mac_bytes(a.mac) + ETH_TEST + b"broadcast from h1".ljust(46, b".")
        h1.sock.send(uni)
        h1.sock.send(bcast)
        assert h2.recv_all() == [uni, bcast]
        assert h3.recv_all() == [bcast]
        assert h1.recv_all(first=0.3) == []  # the flood skips the ingress port
        before = drops(udp_rack, "malformed")
        runts = [bytes(range(n)) for n in range(1, 14)] * 4
        for r in runts:
            h3.sock.send(r)
        h1.sock.send(uni)
        assert h2.recv_all() == [uni]
        deadline = time.monotonic() + 3
        while drops(udp_rack, "malformed") - before < len(runts) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert drops(udp_rack, "malformed") - before == len(runts)
        assert switchproc.is_alive(udp_rack.switch.pid, udp_rack.switch.ready_file)
        c = control.read_port_counters(udp_rack.switch.p4runtime, [0, 1, 2])
        assert c[0]["rx_packets"] >= 3 and c[1]["tx_packets"] >= 3
    finally:
        for n in (h1, h2, h3):
            n.close()


def test_udp_rack_ping(udp_rack: RackState) -> None:
    if tunnel_host_class() is None:
        with pytest.raises(RackError, match="TunnelHost"):
            Rack().ping("h1", "h2", name=udp_rack.name, count=1)
        pytest.skip("inswitch._native.TunnelHost is not in this build yet (the clear error was checked)")
    res, _ = Rack().ping("h1", "h2", name=udp_rack.name, count=3, timeout=2.0)
    assert res.received == 3, res


def test_cli_udp_rack_needs_no_privileges() -> None:
    """`rack up` / `status` / `ping` / `exec` / `down` with no capabilities at all: the switch
    itself must also run without any (checked in /proc), and nothing is left behind."""
    name = f"t{process_tag()}p"
    cli = no_privileges() + [PY, "-m", "inswitch", "rack"]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(cli + list(args), capture_output=True, text=True, timeout=60)

    try:
        up = run("up", "--hosts", "2", "--name", name, "--mode", "udp",
                 "--p4runtime", f"127.0.0.1:{rack_free_tcp_port()}", "--metrics", f"127.0.0.1:{rack_free_tcp_port()}")
        assert up.returncode == 0, up.stdout + up.stderr
        st = Rack().state(name)
        status_lines = Path(f"/proc/{st.switch.pid}/status").read_text().splitlines()
        cap_eff = next(line.split()[1] for line in status_lines if line.startswith("CapEff:"))
        assert int(cap_eff, 16) == 0, f"the switch runs with capabilities {cap_eff}"
        status = run("status", "--name", name, "--json", "-")
        assert status.returncode == 0, status.stderr
        js = json.loads(status.stdout)
        assert js["switch_alive"] and js["state"]["mode"] == "udp" and len(js["state"]["hosts"]) == 2
        ex = run("exec", f"{name}-h1", "--", "true")
        assert ex.returncode == 1 and "UDP-tunnel mode" in ex.stderr and "Traceback" not in ex.stderr
        ping = run("ping", "h1", "h2", "--name", name, "--count", "1")
        if tunnel_host_class() is None:
            assert ping.returncode == 1 and "TunnelHost" in ping.stderr and "Traceback" not in ping.stderr
        else:
            assert ping.returncode == 0, ping.stdout + ping.stderr
        down = run("down", "--name", name)
        assert down.returncode == 0, down.stderr
        assert not switchproc.is_alive(st.switch.pid, st.switch.ready_file)
        assert not Path(st.state_dir).exists()
    finally:
        Rack().down(name)


def port_io_drops(st: RackState, port: int, reason: str) -> float:
    """One switch port's I/O-layer drop counter from /metrics (`inswitch_port_io_drops_total`)."""
    return sum(v for name, labels, v in control.scrape_metrics(st.switch.metrics)
               if name == "inswitch_port_io_drops_total" and labels.get("reason") == reason
               and labels.get("port") == str(port))


def test_udp_tunnel_cannot_be_hijacked(udp_rack: RackState) -> None:
    """Issue 22 §4: another local process that sends one datagram to h2's tunnel port must not
    receive h2's frames (the port's peer is fixed when the rack is built), and its datagram is
    dropped and counted (`rx_foreign` in /metrics)."""
    h1, h2 = (TunnelNic(h) for h in udp_rack.hosts[:2])
    thief = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        attach(h1, [h2])
        thief.bind(("127.0.0.1", 0))
        port = udp_rack.host("h2").port
        before = port_io_drops(udp_rack, port, "rx_foreign")
        thief.sendto(PROBE, split_addr(udp_rack.host("h2").tunnel or ""))
        a, b = udp_rack.host("h1"), udp_rack.host("h2")
        uni = mac_bytes(b.mac) + mac_bytes(a.mac) + ETH_TEST + b"for h2 only".ljust(46, b".")
        deadline = time.monotonic() + 3
        while port_io_drops(udp_rack, port, "rx_foreign") - before < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        h1.sock.send(uni)
        assert h2.recv_all() == [uni], "the registered host lost its frames"
        thief.settimeout(0.5)
        with pytest.raises(socket.timeout):
            got = thief.recv(4096)
            pytest.fail(f"the hijacker received {got!r}")
        assert port_io_drops(udp_rack, port, "rx_foreign") - before == 1
    finally:
        for n in (h1, h2):
            n.close()
        thief.close()
