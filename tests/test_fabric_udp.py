"""The unprivileged fabric (`fabric up --mode udp`, what `auto` picks without root): every
switch its own process whose ports are UDP sockets on loopback, each switch-to-switch link two
ports that are each other's fixed peers, hosts userspace stacks (`TunnelHost`) on their links.

Nothing here needs root. Run as root, the fabric's commands run as `nobody` (setpriv), so
the test proves they need no privilege at all (with `auto` resolving to udp); where `nobody`
cannot run this Python, as root with every capability dropped and `--mode udp` (as the UDP
rack's test does). Run as a user, they simply run as that user."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from inswitch.switchd.cli import _ports
from inswitch.topology import netns, restarts, switchproc
from inswitch.topology.fabric.fabric import Fabric, marker, status_json
from inswitch.topology.state import process_tag, state_dir
from inswitch.topology.tunnel import split_addr, tunnel_host_class

NOBODY = 65534
PYTHONPATH = str(Path(__file__).resolve().parent.parent / "python")


class Unprivileged:
    """How this test runs the fabric's CLI without privileges."""

    def __init__(self, run_dir: str) -> None:
        self.run_dir = run_dir
        self.env = {**os.environ, "INSWITCH_RUN_DIR": run_dir, "PYTHONDONTWRITEBYTECODE": "1"}
        self.prefix: list[str] = []
        self.python = sys.executable
        self.real_user = os.geteuid() != 0  # auto means udp only for a user who is not root
        if os.geteuid() != 0:
            return
        if not shutil.which("setpriv"):
            pytest.skip("setpriv (util-linux) is needed to run the fabric without root's privileges")
        nobody = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
        paths = sysconfig.get_paths()
        sys_python = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
        candidates = [(sys.executable, PYTHONPATH),
                      # A venv whose interpreter lives under /root: the system's same version, the venv's packages.
                      (sys_python, os.pathsep.join([PYTHONPATH, paths["purelib"], paths["platlib"]]))]
        for python, pypath in candidates:
            env = {**self.env, "HOME": run_dir, "PYTHONPATH": pypath}
            # The switches are started by the fabric's own process: it must be able to run itself.
            check = ("import subprocess, sys; sys.exit(subprocess.run([sys.executable, '-c', "
                     "'import inswitch._native, grpc, typer']).returncode)")
            probe = subprocess.run(nobody + [python, "-c", check], env=env,
                                   capture_output=True, timeout=60) if os.path.exists(python) else None
            if probe is not None and probe.returncode == 0:
                self.prefix, self.python, self.env, self.real_user = nobody, python, env, True
                return
        # uid 0 without any capability: cannot make namespaces or raw sockets either.
        self.prefix = ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--no-new-privs"]
        self.env["PYTHONPATH"] = PYTHONPATH

    @property
    def mode(self) -> list[str]:
        """`auto` must pick udp for a user; uid 0 without capabilities must ask for it."""
        return ["--mode", "auto"] if self.real_user else ["--mode", "udp"]

    def fabric(self, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.prefix + [self.python, "-m", "inswitch", "fabric", *args], env=self.env,
                              capture_output=True, text=True, timeout=timeout, cwd=self.run_dir)


@pytest.fixture(scope="module")
def unpriv() -> Iterator[Unprivileged]:
    run_dir = tempfile.mkdtemp(prefix="inswitch-fabric-udp-")
    os.chmod(run_dir, 0o777)  # nobody's state directories go here
    old = os.environ.get("INSWITCH_RUN_DIR")
    os.environ["INSWITCH_RUN_DIR"] = run_dir  # so this process reads the same states
    try:
        yield Unprivileged(run_dir)
    finally:
        if old is None:
            os.environ.pop("INSWITCH_RUN_DIR", None)
        else:
            os.environ["INSWITCH_RUN_DIR"] = old
        shutil.rmtree(run_dir, ignore_errors=True)


def _proc_status(pid: int) -> dict[str, str]:
    return dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)


def _spine_totals(js: dict[str, Any]) -> tuple[int, int]:
    rx = tx = 0
    for name, sw in js["switches"].items():
        if name.startswith("spine"):
            rx += sum(p["rx_packets"] for p in sw["ports"].values())
            tx += sum(p["tx_packets"] for p in sw["ports"].values())
    return rx, tx


def _status(u: Unprivileged, name: str, cli: bool = False) -> dict[str, Any]:
    """`fabric status --json -` run unprivileged, or the same JSON read here (quicker)."""
    if not cli:
        return status_json(Fabric().status(name))
    cp = u.fabric("status", "--name", name, "--json", "-")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    return json.loads(cp.stdout)


def _all_free(addrs: list[str]) -> bool:
    for a in addrs:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.bind(split_addr(a))
            except OSError:
                return False
    return True


def test_udp_fabric_routes_across_the_spines_without_privileges(unpriv: Unprivileged) -> None:
    """leaf-spine:2,2,1 up without privileges; h1 (leaf1) reaches h2 (leaf2) by ping and by
    UDP through the spines, whose counters account for exactly those packets; a killed leaf
    is restarted by the supervisor with its routing; after `kill -9` of the supervisor and a
    switch, `up` refuses the name and `down` leaves no process, no state and no bound port."""
    if tunnel_host_class() is None:
        pytest.skip("inswitch._native.TunnelHost is not in this build")
    u = unpriv
    name = f"u{process_tag()}"[:6]
    try:
        up = u.fabric("up", "--topology", "leaf-spine:2,2,1", "--name", name, *u.mode)
        assert up.returncode == 0, up.stdout + up.stderr
        assert "UDP-tunnel mode" in up.stdout
        st = Fabric().state(name)
        assert st.mode == "udp" and len(st.switches) == 4 and len(st.hosts) == 2
        # Every switch is its own unprivileged process.
        for sw in st.switches:
            assert switchproc.is_alive(sw.pid, sw.ready_file)
            ps = _proc_status(sw.pid)
            assert int(ps["CapEff"].split()[0], 16) == 0, f"{sw.plan.name} runs with capabilities"
            if u.prefix[:2] == ["setpriv", f"--reuid={NOBODY}"]:
                assert ps["Uid"].split()[1] == str(NOBODY)
        assert netns.leftovers(f"{name}-") == []  # no namespace, no interface
        # Each link: two loopback addresses, each end bound to one and peering with the other.
        bound = {sw.plan.name: dict(e.split(">") for e in sw.ports.removeprefix("udp:").split(","))
                 for sw in st.switches}
        addrs = []
        for ln in st.links:
            assert ln.a_udp and ln.b_udp and ln.a_udp != ln.b_udp
            addrs += [ln.a_udp, ln.b_udp]
            for (node, own, peer) in ((ln.endpoints.split(" -- ")[0].split(":")[0], ln.a_udp, ln.b_udp),
                                      (ln.endpoints.split(" -- ")[1].split(":")[0], ln.b_udp, ln.a_udp)):
                if node in bound:
                    assert bound[node][own] == peer, (ln.endpoints, bound[node])
                else:  # a host: its NIC is this end, its switch port the other
                    h = st.host(node)
                    assert (h.tunnel_nic, h.tunnel) == (own, peer)
        assert len(set(addrs)) == len(addrs) == 12
        h1, h2 = st.host("h1"), st.host("h2")
        assert (h1.switch, h2.switch) == ("leaf1", "leaf2")

        js = _status(u, name, cli=True)
        assert js["mode"] == "udp" and all(sw["alive"] for sw in js["switches"].values())
        assert all(h["tunnel"] and h["tunnel_nic"] for h in js["hosts"].values())
        rx0, tx0 = _spine_totals(js)
        ping = u.fabric("ping", "--name", name, "h1", "h2", "--count", "3", "--timeout", "2")
        assert ping.returncode == 0 and "3/3 replies" in ping.stdout, ping.stdout + ping.stderr
        js = _status(u, name)
        rx1, tx1 = _spine_totals(js)
        # 3 echo requests up through a spine, 3 replies back: nothing else crosses a spine
        # (ARP stays within a leaf; hosts know their gateway's MAC).
        assert (rx1 - rx0, tx1 - tx0) == (6, 6), js["switches"]

        # UDP both ways, checked against what was sent (the same userspace stacks, here).
        from inswitch.topology.tunnel import attach_host

        cls = tunnel_host_class()
        a, b = attach_host(cls, h1), attach_host(cls, h2)
        try:
            b.udp_bind(7000)
            a.udp_bind(7001)
            sent = [f"datagram {i} from h1".encode() * (1 + i % 7) for i in range(40)]
            for p in sent:
                a.udp_send(h2.ip, 7000, 7001, p)
            got: list[tuple[str, int, bytes]] = []
            deadline = time.monotonic() + 10
            while len(got) < len(sent) and time.monotonic() < deadline:
                got += b.udp_recv(7000, timeout=0.5)
            assert [(s, p) for s, p, _ in got] == [(h1.ip, 7001)] * len(sent)
            assert sorted(bytes(d) for _, _, d in got) == sorted(sent)
            for _, _, d in got:
                b.udp_send(h1.ip, 7001, 7000, bytes(d)[::-1])
            back: list[tuple[str, int, bytes]] = []
            deadline = time.monotonic() + 10
            while len(back) < len(sent) and time.monotonic() < deadline:
                back += a.udp_recv(7001, timeout=0.5)
            assert sorted(bytes(d) for _, _, d in back) == sorted(p[::-1] for p in sent)
        finally:
            a.close()
            b.close()
        rx2, tx2 = _spine_totals(_status(u, name))
        assert (rx2 - rx1, tx2 - tx1) == (80, 80)

        # exec: nothing to exec in, said in one line.
        ex = u.fabric("exec", "--name", name, "h1", "--", "true")
        assert ex.returncode == 1 and "UDP-tunnel mode" in ex.stderr and "Traceback" not in ex.stderr

        # kill -9 of leaf2: restarted on the same UDP ports with its routing.
        leaf2 = next(sw for sw in st.switches if sw.plan.name == "leaf2")
        os.kill(leaf2.pid, signal.SIGKILL)
        deadline = time.monotonic() + 40
        rec: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            rec = [r for r in restarts.read(st.restarts_file) if r.get("switch") == "leaf2"]
            if rec and ("forwarding_at" in rec[-1] or "error" in rec[-1]):
                break
            time.sleep(0.1)
        assert rec and "forwarding_at" in rec[-1], rec
        res, _ = Fabric().ping("h1", "h2", name=name, count=2)
        assert res.received == 2, res

        # A crash: the supervisor and a spine killed outright; the next `up` refuses the
        # name, `down` cleans up from names alone.
        st = Fabric().state(name)
        assert st.supervisor_pid
        os.kill(st.supervisor_pid, signal.SIGKILL)
        os.kill(st.switches[0].pid, signal.SIGKILL)
        again = u.fabric("up", "--topology", "leaf-spine:2,2,1", "--name", name, *u.mode)
        assert again.returncode == 1 and f"fabric down --name {name}" in again.stderr, again.stderr
        down = u.fabric("down", "--name", name)
        assert down.returncode == 0, down.stdout + down.stderr
        assert switchproc.find_by_marker(marker(name)) == []
        assert not any(switchproc.is_alive(s.pid, s.ready_file) for s in st.switches)
        assert not state_dir(name).exists()
        assert _all_free(addrs), "a link's UDP port is still bound"
    finally:
        Fabric().down(name)


def test_netns_only_options_are_refused_in_udp_mode(unpriv: Unprivileged) -> None:
    u = unpriv
    name = f"r{process_tag()}"[:6]
    cases = [
        (["--emulate-machines"], "--emulate-machines needs --mode netns"),
        (["--machine", "m1"], "--machine needs --mode netns"),
        (["--link-default", "rate=10mbit"], "link properties are tc qdiscs"),
    ]
    for extra, why in cases:
        cp = u.fabric("up", "--topology", "leaf-spine:2,1,1", "--name", name, *u.mode, *extra)
        assert cp.returncode == 2, (extra, cp.stdout + cp.stderr)
        lines = [ln for ln in cp.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and why in lines[0] and "Traceback" not in cp.stderr, (extra, cp.stderr)
    if u.real_user:
        cp = u.fabric("up", "--topology", "leaf-spine:2,1,1", "--name", name, "--mode", "netns")
        assert cp.returncode == 1 and "netns mode needs root" in cp.stderr, cp.stderr
    assert not state_dir(name).exists()


def test_switch_cli_checks_the_udp_link_form() -> None:
    assert _ports("udp:127.0.0.1:5>127.0.0.1:6,127.0.0.1:7>127.0.0.1:8") == "udp:127.0.0.1:5>127.0.0.1:6,127.0.0.1:7>127.0.0.1:8"
    for bad in ("udp:127.0.0.1:5>", "udp:127.0.0.1:5>127.0.0.1:x", "udp:5>6", "udp:127.0.0.1:5>127.0.0.1:6,"):
        with pytest.raises(ValueError, match="HOST:PORT>PEERHOST:PEERPORT"):
            _ports(bad)
