"""The rack as a real switch between real processes: hosts in network namespaces, the
inswitch switch process on the veth ends, traffic from the kernels' own stacks.

Needs root (namespaces, veth, AF_PACKET). Every rack is made through `rack_factory`
(conftest.py), which takes it down at the end of the module whatever happened.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from inswitch.topology.state import process_tag

from inswitch.topology import Rack, RackError, RackState, netns
from inswitch.topology import control, rack as rack_mod, state as state_mod, switchproc

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="needs root: network namespaces, veth pairs and AF_PACKET")
PY = sys.executable

# ---------------------------------------------------------------------------------------
# Helper programs run inside the hosts' namespaces (ordinary processes, ordinary sockets).

UDP_RECV = textwrap.dedent('''
    # Receive a file over UDP with go-back-N acks (so a dropped datagram is resent, and what
    # is checked is integrity, not luck); print the sha256 of what arrived.
    import hashlib, socket, struct, sys, time
    port, deadline = int(sys.argv[1]), time.monotonic() + float(sys.argv[2])
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_RCVBUFFORCE", 33), 8 << 20)
    s.bind(("0.0.0.0", port)); s.settimeout(0.5)
    print("READY", flush=True)
    chunks, nxt, total = None, 0, None
    while time.monotonic() < deadline:
        try:
            msg, peer = s.recvfrom(65535)
        except socket.timeout:
            continue
        kind = msg[:1]
        if kind == b"D":
            seq, total = struct.unpack_from("!II", msg, 1)
            if chunks is None:
                chunks = [None] * total
            chunks[seq] = msg[9:]
            while nxt < total and chunks[nxt] is not None:
                nxt += 1
        elif kind == b"P":
            s.sendto(b"A" + struct.pack("!I", nxt), peer)
        elif kind == b"F":
            data = b"".join(chunks or [])
            for _ in range(3):
                s.sendto(b"Z", peer)
            print(hashlib.sha256(data).hexdigest(), len(data), flush=True)
            sys.exit(0)
    sys.exit("receiver timed out")
''')

UDP_SEND = textwrap.dedent('''
    import hashlib, random, socket, struct, sys, time
    dst, port, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    data = random.Random(7).randbytes(size)
    CH, W = 1400, 128
    chunks = [data[i:i + CH] for i in range(0, size, CH)]
    total, base, rounds = len(chunks), 0, 0
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect((dst, port)); s.settimeout(0.3)
    deadline = time.monotonic() + 60
    while base < total and time.monotonic() < deadline:
        rounds += 1
        for seq in range(base, min(base + W, total)):
            s.send(b"D" + struct.pack("!II", seq, total) + chunks[seq])
        s.send(b"P")
        try:
            while True:
                msg = s.recv(64)
                if msg[:1] == b"A":
                    base = max(base, struct.unpack_from("!I", msg, 1)[0])
                    break
        except socket.timeout:
            pass
    for _ in range(20):
        s.send(b"F")
        try:
            if s.recv(64)[:1] == b"Z":
                break
        except socket.timeout:
            pass
    print(hashlib.sha256(data).hexdigest(), size, rounds, -(-total // W), flush=True)
''')

TCP_RECV = textwrap.dedent('''
    import hashlib, socket, sys
    srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", int(sys.argv[1]))); srv.listen(1); srv.settimeout(float(sys.argv[2]))
    print("READY", flush=True)
    c, _ = srv.accept(); c.settimeout(float(sys.argv[2]))
    h, n = hashlib.sha256(), 0
    while True:
        b = c.recv(1 << 16)
        if not b:
            break
        h.update(b); n += len(b)
    print(h.hexdigest(), n, flush=True)
''')

TCP_SEND = textwrap.dedent('''
    import hashlib, random, socket, sys
    data = random.Random(11).randbytes(int(sys.argv[3]))
    c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
    c.sendall(data); c.shutdown(socket.SHUT_WR)
    while c.recv(4096):
        pass
    print(hashlib.sha256(data).hexdigest(), len(data), flush=True)
''')

GARBAGE = textwrap.dedent('''
    # Random garbage frames from a raw socket: random bytes of random lengths 1..1600, half of
    # them with made-up or misleading EtherTypes, for DURATION seconds at RATE frames/s. The
    # kernel itself refuses frames shorter than an Ethernet header (EINVAL) or longer than the
    # MTU (EMSGSIZE): those are counted apart, they never reach the switch. So are frames
    # whose EtherType says VLAN but that are too short to hold the tag: the kernel's receive
    # path untags every VLAN frame and drops those (< 14 + 4 + 2 bytes) before any packet
    # socket sees them.
    import errno, json, random, socket, sys, time
    duration, rate = float(sys.argv[1]), float(sys.argv[2])
    rng = random.Random(int(sys.argv[3]))
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW); s.bind(("eth0", 0))
    res = {"sent": 0, "sent_bytes": 0, "runt_refused": 0, "oversize_refused": 0, "other_errors": 0,
           "short_vlan": 0}
    print("START", flush=True)
    t0, i = time.monotonic(), 0
    while time.monotonic() - t0 < duration:
        f = bytearray(rng.randbytes(rng.randint(1, 1600)))
        if len(f) >= 14 and rng.random() < 0.5:
            f[12:14] = rng.choice([b"\\x88\\xb5", b"\\xff\\xff", b"\\x00\\x01", b"\\x08\\x00", b"\\x08\\x06", b"\\x81\\x00"])
        try:
            s.send(bytes(f)); res["sent"] += 1; res["sent_bytes"] += len(f)
            res["short_vlan"] += f[12:14] in (b"\\x81\\x00", b"\\x88\\xa8") and len(f) < 20
        except OSError as e:
            key = {errno.EINVAL: "runt_refused", errno.EMSGSIZE: "oversize_refused"}.get(e.errno, "other_errors")
            res[key] += 1
        i += 1
        lag = t0 + i / rate - time.monotonic()
        if lag > 0:
            time.sleep(lag)
    print(json.dumps(res), flush=True)
''')


def write_script(tmp: Path, name: str, text: str) -> Path:
    p = tmp / name
    p.write_text(text)
    return p


def in_host(st: RackState, host: str, argv: list[str]) -> list[str]:
    ns = st.host(host).netns
    assert ns
    return netns.netns_argv(ns, argv)


def run_in(st: RackState, host: str, argv: list[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
    cp = subprocess.run(in_host(st, host, argv), capture_output=True, text=True, timeout=timeout)
    assert cp.returncode == 0, f"{argv} in {host} failed ({cp.returncode}): {cp.stderr or cp.stdout}"
    return cp


class Helper:
    """A helper program running in a host, its stdout read line by line by a thread (so a
    wait for a line has a timeout and never misses one already buffered)."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout
        for line in self.proc.stdout:
            self.lines.put(line.strip())
        self.lines.put(None)

    def line(self, timeout: float) -> str:
        """The next line of output, or a test failure naming the program and its stderr."""
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            self.stop()
            pytest.fail(f"no output from {self.proc.args!r} within {timeout} s; stderr: {self._stderr()}")
        if line is None:
            pytest.fail(f"{self.proc.args!r} exited ({self.proc.wait(5)}) without output; stderr: {self._stderr()}")
        return line

    def _stderr(self) -> str:
        return self.proc.stderr.read() if self.proc.stderr and self.proc.poll() is not None else ""

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def start_in(st: RackState, host: str, argv: list[str]) -> Helper:
    return Helper(in_host(st, host, argv))


def snmp(st: RackState, host: str) -> dict[str, dict[str, int]]:
    """/proc/net/snmp of a host's namespace: {"Tcp": {...}, "Udp": {...}, ...}."""
    lines = run_in(st, host, ["cat", "/proc/net/snmp"]).stdout.splitlines()
    out: dict[str, dict[str, int]] = {}
    for head, vals in zip(lines[::2], lines[1::2]):
        proto, keys = head.split(":", 1)
        out[proto] = dict(zip(keys.split(), map(int, vals.split(":", 1)[1].split())))
    return out


def csum_errors(st: RackState, host: str) -> dict[str, int]:
    s = snmp(st, host)
    return {"tcp": s["Tcp"].get("InCsumErrors", 0), "udp": s["Udp"].get("InCsumErrors", 0),
            "ip_hdr": s["Ip"].get("InHdrErrors", 0)}


def counters(st: RackState) -> dict[int, dict[str, int]]:
    return control.read_port_counters(st.switch.p4runtime, [h.port for h in st.hosts])


# ---------------------------------------------------------------------------------------
# Validation: no root or namespaces needed, nothing is made.

@pytest.mark.parametrize("kw, msg", [
    ({"hosts": 0}, "--hosts must be 1..250"),
    ({"hosts": 251}, "--hosts must be 1..250"),
    ({"hosts": 2, "subnet": "10.0.0.1/24"}, "bad subnet"),
    ({"hosts": 2, "subnet": "fe80::/64"}, "bad subnet"),
    ({"hosts": 9, "subnet": "10.0.0.0/29"}, "room for 6 hosts"),
    ({"hosts": 2, "name": "Bad-Name"}, "bad rack name"),
    ({"hosts": 2, "name": "waytoolongname"}, "bad rack name"),
    ({"hosts": 2, "p4runtime": "9559"}, "HOST:PORT"),
])
def test_up_validates_before_making_anything(kw: dict, msg: str) -> None:
    kw.setdefault("name", "tval")
    with pytest.raises(RackError, match=msg):
        Rack().up(mode="udp", **kw)
    assert not state_mod.state_dir(kw["name"]).exists()


def test_netns_mode_without_root_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rack_mod.os, "geteuid", lambda: 1000)
    with pytest.raises(RackError, match="netns mode needs root"):
        Rack().up(2, name="tval", mode="netns")
    assert rack_mod.resolve_mode("auto") == "udp"


def test_missing_rack_and_bad_host_are_clear_errors() -> None:
    with pytest.raises(RackError, match="no rack named 'tnone'"):
        Rack().status("tnone")
    with pytest.raises(RackError, match="no rack named 'tnone'"):
        Rack().exec("tnone-h1", ["true"])
    assert Rack().down("tnone").found is False


# ---------------------------------------------------------------------------------------
# The 4-host rack.

@pytest.fixture(scope="module")
def rack4(rack_factory) -> RackState:  # type: ignore[no-untyped-def]
    if not ROOT:
        pytest.skip("needs root: network namespaces, veth pairs and AF_PACKET")
    return rack_factory("a", 4)


@needs_root
@pytest.mark.netns
def test_state_and_hosts_are_as_planned(rack4: RackState) -> None:
    st = state_mod.load_state(rack4.name)
    assert st is not None and st.mode == "netns" and st.extra["ready"] is True
    assert [h.mac for h in st.hosts] == [f"02:00:00:00:00:0{i}" for i in range(1, 5)]
    assert [h.ip for h in st.hosts] == [f"10.0.0.{i}" for i in range(1, 5)]
    assert switchproc.is_alive(st.switch.pid, st.switch.ready_file)
    for h in st.hosts:
        link = run_in(st, h.name, ["ip", "-o", "link", "show", "eth0"]).stdout
        assert h.mac in link and "mtu 1500" in link
        feats = run_in(st, h.name, ["ethtool", "-k", "eth0"]).stdout
        assert "tx-checksumming: off" in feats
        assert h.switch_if and "PROMISC" in netns.ip("-o", "link", "show", h.switch_if).stdout
        assert Path(f"/proc/sys/net/ipv6/conf/{h.switch_if}/disable_ipv6").read_text().strip() == "1"
        assert "h4" in Path(f"/etc/netns/{h.netns}/hosts").read_text()
        assert "PERMANENT" not in run_in(st, h.name, ["ip", "neigh", "show"]).stdout  # ARP crosses the switch
    with pytest.raises(RackError, match="rack down"):
        Rack().up(2, name=rack4.name)


@needs_root
@pytest.mark.netns
def test_all_pairs_ping_crosses_the_switch(rack4: RackState) -> None:
    """Every host pings every other by name (ARP included: nothing is static). The switch's own
    counters, read over P4Runtime, account for every echo, and no kernel bridge exists that
    could have carried them instead."""
    before = counters(rack4)
    pairs = [(a.name, b.name) for a in rack4.hosts for b in rack4.hosts if a is not b]
    for a, b in pairs:
        cp = subprocess.run(in_host(rack4, a, ["ping", "-n", "-c1", "-W2", b]), capture_output=True, text=True, timeout=10)
        assert cp.returncode == 0, f"{a} -> {b}: {cp.stdout}{cp.stderr}"
    after = counters(rack4)
    n_per_host = 2 * (len(rack4.hosts) - 1)  # each host sends 3 requests and 3 replies
    for h in rack4.hosts:
        rx = after[h.port]["rx_packets"] - before[h.port]["rx_packets"]
        tx = after[h.port]["tx_packets"] - before[h.port]["tx_packets"]
        assert rx >= n_per_host and tx >= n_per_host, (h.name, rx, tx)
        assert after[h.port]["rx_bytes"] - before[h.port]["rx_bytes"] >= n_per_host * 98
    total_rx = sum(after[p]["rx_packets"] - before[p]["rx_packets"] for p in after)
    assert total_rx >= 2 * len(pairs)
    bridges = netns.ip("-o", "link", "show", "type", "bridge").stdout
    for h in rack4.hosts:
        assert h.switch_if and netns.link_master(h.switch_if) is None
        assert h.switch_if not in bridges


@needs_root
@pytest.mark.netns
def test_udp_transfer_h1_to_h2_is_intact(rack4: RackState, tmp_path: Path) -> None:
    size = 4 << 20
    recv = start_in(rack4, "h2", [PY, str(write_script(tmp_path, "urecv.py", UDP_RECV)), "9000", "40"])
    try:
        assert recv.line(10) == "READY"
        before = csum_errors(rack4, "h2")
        sent = run_in(rack4, "h1", [PY, str(write_script(tmp_path, "usend.py", UDP_SEND)), "10.0.0.2", "9000", str(size)], timeout=60)
        got = recv.line(20).split()
        sha, n, rounds, min_rounds = sent.stdout.split()
        assert got == [sha, str(size)] and int(n) == size
        # resends are allowed (a loaded machine may drop a burst) but must stay the exception
        assert int(rounds) <= 3 * int(min_rounds) + 5, f"too many resends: {rounds} rounds for {min_rounds} windows"
        assert csum_errors(rack4, "h2") == before
    finally:
        recv.stop()


@needs_root
@pytest.mark.netns
def test_tcp_transfer_h1_to_h3_is_intact_with_good_checksums(rack4: RackState, tmp_path: Path) -> None:
    size = 20 << 20
    srv = start_in(rack4, "h3", [PY, str(write_script(tmp_path, "trecv.py", TCP_RECV)), "9001", "30"])
    try:
        assert srv.line(10) == "READY"
        before = {h: csum_errors(rack4, h) for h in ("h1", "h3")}
        segs_before = snmp(rack4, "h3")["Tcp"]["InSegs"]
        sent = run_in(rack4, "h1", [PY, str(write_script(tmp_path, "tsend.py", TCP_SEND)), "h3", "9001", str(size)], timeout=60)
        got = srv.line(30).split()
        assert got == sent.stdout.split() and int(got[1]) == size
        # The receiver's kernel verified every checksum (offloads are off on the veth, so a bad
        # one would be counted and the segment dropped): none may have failed.
        assert {h: csum_errors(rack4, h) for h in ("h1", "h3")} == before
        assert snmp(rack4, "h3")["Tcp"]["InSegs"] - segs_before >= size // 1500
    finally:
        srv.stop()


@needs_root
@pytest.mark.netns
def test_garbage_frames_do_not_disturb_forwarding(rack4: RackState, tmp_path: Path) -> None:
    """h4 sprays random garbage while h1 flood-pings h2: the flow loses (almost) nothing, the
    switch survives, and its counters and metrics account for the garbage."""
    duration, rate = 2.5, 20000.0
    m_before = metrics_by_name(rack4)
    c_before = counters(rack4)
    h4_tx_before = if_tx_packets(rack4, "h4")
    junk = start_in(rack4, "h4", [PY, str(write_script(tmp_path, "junk.py", GARBAGE)), str(duration), str(rate), "3"])
    try:
        assert junk.line(10) == "START"
        # flood ping for most of the garbage's duration (-w: a deadline, not a count)
        flood = subprocess.run(in_host(rack4, "h1", ["ping", "-n", "-q", "-f", "-w", "2", "10.0.0.2"]),
                               capture_output=True, text=True, timeout=30)
        res = json.loads(junk.line(30))
    finally:
        junk.stop()
    assert res["sent"] > duration * rate * 0.5 and res["other_errors"] == 0, res
    tx, rx = ping_counts(flood.stdout)
    # At the deadline an echo may still be in flight; beyond that allow 0.5 %.
    assert tx > 1000 and tx - rx <= 2 + tx // 200, flood.stdout
    assert switchproc.is_alive(rack4.switch.pid, rack4.switch.ready_file), switchproc.log_tail(rack4.switch.log)
    c_after = counters(rack4)
    h4_sent = if_tx_packets(rack4, "h4") - h4_tx_before
    port4 = rack4.host("h4").port
    # Everything h4's interface sent (the garbage and any frame of h4's own kernel, e.g. an
    # ARP probe) reached the switch, except short VLAN frames where the kernel untags before
    # the switch's socket (AF_PACKET; AF_XDP sees them).
    reached = res["sent"] - res["short_vlan"]
    assert reached <= c_after[port4]["rx_packets"] - c_before[port4]["rx_packets"] <= h4_sent, (res, h4_sent)
    # The switch still forwards normally afterwards.
    for b in ("h2", "h3", "h4"):
        run_in(rack4, "h1", ["ping", "-n", "-c1", "-W2", b])
    m_after = metrics_by_name(rack4)
    check_garbage_metrics(m_before, m_after, res, port4)


def if_tx_packets(st: RackState, host: str) -> int:
    """Frames the host's eth0 has sent (its kernel's counter)."""
    return int(run_in(st, host, ["cat", "/sys/class/net/eth0/statistics/tx_packets"]).stdout)


def ping_counts(out: str) -> tuple[int, int]:
    """(transmitted, received) from ping's summary line."""
    line = next(x for x in out.splitlines() if "packets transmitted" in x)
    parts = line.split(",")
    return int(parts[0].split()[0]), int(parts[1].split()[0])


def metrics_by_name(st: RackState) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(n, tuple(sorted(l.items()))): v for n, l, v in control.scrape_metrics(st.switch.metrics)}


def check_garbage_metrics(before: dict, after: dict, res: dict, port: int) -> None:
    """/metrics agrees: the garbage port received every frame sent. Frames shorter than an
    Ethernet header cannot cross a veth (the sender's kernel refuses them, counted as
    `runt_refused`), so here the malformed-drop counter must not move: every garbage frame
    that reached the switch was at least a header long and was forwarded or flooded. (The
    UDP-tunnel test, where runts do reach the switch, checks that they are counted.)"""
    assert res["runt_refused"] > 0

    def delta(name: str, **labels: str) -> float:
        ks = [k for k in after if k[0] == name and all((lk, lv) in k[1] for lk, lv in labels.items())]
        return sum(after[k] - before.get(k, 0.0) for k in ks)

    assert delta("inswitch_port_rx_packets_total", port=str(port)) >= res["sent"] - res["short_vlan"]
    assert delta("inswitch_mcast_replicas_total") > 0  # unknown destinations were flooded
    assert delta("inswitch_drops_total", reason="malformed") == 0


# ---------------------------------------------------------------------------------------
# Taking racks down.

def assert_rack_gone(name: str) -> None:
    assert not [n for n in netns.netns_list() if n.startswith(f"{name}-")]
    assert not [d for d in netns.link_names() if d.startswith(f"{name}-")]
    assert not list(Path("/etc/netns").glob(f"{name}-*"))
    assert not state_mod.state_dir(name).exists()
    marker = rack_mod.ready_marker(name)
    pg = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    assert pg.returncode == 1, f"processes left: {pg.stdout}"


@needs_root
@pytest.mark.netns
def test_down_after_kill9_cleans_everything(rack_factory) -> None:  # type: ignore[no-untyped-def]
    st: RackState = rack_factory("k", 2)
    assert st.switch.pid
    # The whole rack crashes: its supervisor (which would restart the switch) and the switch.
    os.kill(int(st.extra["supervisor_pid"]), signal.SIGKILL)
    os.kill(st.switch.pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while switchproc.is_alive(st.switch.pid, st.switch.ready_file) and time.monotonic() < deadline:
        time.sleep(0.05)
    s = Rack().status(st.name)
    assert not s.switch_alive and s.counters is None and s.counters_error
    # a process left running inside a host must not keep anything alive
    sleeper = subprocess.Popen(in_host(st, "h1", ["sleep", "300"]))
    try:
        rep = Rack().down(st.name)
        assert rep.found
        assert_rack_gone(st.name)
        assert sleeper.wait(5) is not None
    finally:
        sleeper.kill()


@needs_root
@pytest.mark.netns
def test_down_without_state_file_and_interrupted_up(rack_factory, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    st: RackState = rack_factory("s", 2)
    Path(st.state_dir, "state.json").unlink()
    assert Rack().down(st.name).stopped == sorted([st.switch.pid, int(st.extra["supervisor_pid"])])
    assert_rack_gone(st.name)

    def interrupt(*a: object, **k: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(switchproc, "wait_ready", interrupt)
    with pytest.raises(KeyboardInterrupt):
        rack_factory("i", 3)
    assert_rack_gone(f"t{process_tag()}i")


@needs_root
@pytest.mark.netns
def test_cli_end_to_end(tmp_path: Path) -> None:
    name = f"t{process_tag()}c"
    cli = [PY, "-m", "inswitch", "rack"]

    def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(cli + list(args), capture_output=True, text=True, timeout=timeout)

    import socket

    # The default P4Runtime and metrics ports are taken (as by a first rack): `up` without
    # --p4runtime/--metrics must pick free ones, not fail.
    held = []
    for port in (9559, 9100):
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
            s.listen()
            held.append(s)
        except OSError:
            s.close()  # already taken by someone else: just as good
    try:
        up = run("up", "--hosts", "2", "--name", name)
        assert up.returncode == 0, up.stdout + up.stderr
        # Progress, a line per step, before the summary.
        steps = [line.strip() for line in up.stdout.splitlines()]
        assert any(x.startswith("starting the switch") for x in steps) and any(x.startswith("installing the MAC table") for x in steps), up.stdout
        st = json.loads(run("status", "--name", name, "--json", "-").stdout)["state"]["switch"]
        assert not st["p4runtime"].endswith(":9559") and not st["metrics"].endswith(":9100"), st
        assert not st["p4runtime"].endswith(":0") and not st["metrics"].endswith(":0"), st
        again = run("up", "--hosts", "2", "--name", name)
        assert again.returncode == 1 and "rack down" in again.stderr and "Traceback" not in again.stderr
        ping = run("exec", f"{name}-h1", "--", "ping", "-c1", "-W2", "h2")
        assert ping.returncode == 0, ping.stdout + ping.stderr
        assert run("exec", "h2", "--name", name, "--", "sh", "-c", "exit 7").returncode == 7
        bad = run("exec", f"{name}-h9", "--", "true")
        assert bad.returncode == 1 and "no host 'h9'" in bad.stderr and "Traceback" not in bad.stderr
        rping = run("ping", "h1", "h2", "--name", name, "--count", "2")
        assert rping.returncode == 0 and "2 received" in rping.stdout, rping.stdout + rping.stderr
        status = run("status", "--name", name)
        assert status.returncode == 0 and "alive" in status.stdout and "h2" in status.stdout, status.stdout + status.stderr
        js = json.loads(run("status", "--name", name, "--json", "-").stdout)
        assert js["switch_alive"] and js["counters"]["0"]["rx_packets"] >= 3
        down = run("down", "--name", name)
        assert down.returncode == 0 and "down" in down.stdout
        assert_rack_gone(name)
        missing = run("status", "--name", name)
        assert missing.returncode == 1 and "no rack named" in missing.stderr and "Traceback" not in missing.stderr
    finally:
        for s in held:
            s.close()
        Rack().down(name)


def test_cli_fault_injection(tmp_path: Path) -> None:
    """`rack up --fault`: the switch drops frames on its ports' receive side as asked (a
    ping crosses two receive sides, so with loss 0.5 about a quarter come back), and a bad
    spec is refused before anything is made."""
    from conftest import rack_free_tcp_port

    name = f"t{process_tag()}f"
    cli = [PY, "-m", "inswitch", "rack"]

    def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(cli + list(args), capture_output=True, text=True, timeout=timeout)

    bad = run("up", "--hosts", "2", "--name", name, "--fault", "loss=2")
    assert bad.returncode == 2 and "outside 0..1" in bad.stdout + bad.stderr and "Traceback" not in bad.stderr
    assert_rack_gone(name)
    try:
        up = run("up", "--hosts", "2", "--name", name, "--fault", "loss=0.5,seed=7", "--p4runtime",
                 f"127.0.0.1:{rack_free_tcp_port()}", "--metrics", f"127.0.0.1:{rack_free_tcp_port()}")
        assert up.returncode == 0 and "faults loss=0.5" in up.stdout, up.stdout + up.stderr
        # Static neighbours would avoid ARP; ARP frames are dropped too, so the count of
        # replies stays well inside (0, all) with 40 probes.
        ping = run("exec", f"{name}-h1", "--", "ping", "-c40", "-i0.02", "-W1", "h2")
        got = int(ping.stdout.split(" received")[0].rsplit(" ", 1)[-1]) if " received" in ping.stdout else 0
        assert 0 < got < 30, ping.stdout + ping.stderr
        # `rack status` shows what the injector dropped: h1's 40 requests (and its ARP)
        # entered port 0, either counted as received or as a fault drop.
        js = json.loads(run("status", "--name", name, "--json", "-").stdout)
        rx, fd = js["counters"]["0"]["rx_packets"], js["fault_drops"]["0"]["rx_fault"]
        assert 0 < fd and rx + fd >= 40, js
        assert 0 < js["fault_drops"]["1"]["rx_fault"]
        text = run("status", "--name", name).stdout
        assert "rx fault drops" in text and str(fd) in text.split(), text
    finally:
        Rack().down(name)
    assert_rack_gone(name)


@needs_root
@pytest.mark.netns
def test_down_when_links_vanish_under_it(rack_factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """Teardown is idempotent: an object already gone is success. A namespace is deleted
    and a veth pair added behind the rack's back, and every `ip link del` meets the race a namespace's deletion
    causes (the veth's name still resolves, then the kernel has removed it: "RTNETLINK
    answers: No such device"), reproduced by an `ip` first on PATH that deletes the link
    for real and then answers as ip does in that race. `down` must succeed and leave
    nothing, state directory included (before: it raised and left the state, so the next
    `rack up` said the rack exists); a real error is still reported."""
    import shutil

    st: RackState = rack_factory("v", 2)
    real_ip = shutil.which("ip")
    assert real_ip
    wrapper = tmp_path / "ip"
    wrapper.write_text(textwrap.dedent(f'''\
        #!/bin/sh
        if [ "$1" = link ] && [ "$2" = del ]; then
            {real_ip} "$@" || exit $?
            echo "RTNETLINK answers: No such device" >&2
            exit 2
        fi
        exec {real_ip} "$@"
    '''))
    wrapper.chmod(0o755)
    subprocess.run([real_ip, "netns", "del", st.hosts[0].netns], check=True)
    # A veth pair of the rack's name in the root namespace (as an interrupted `up` leaves):
    # deleting namespaces does not take it down, so `down` deletes it link by link.
    subprocess.run([real_ip, "link", "add", f"{st.name}-zz", "type", "veth", "peer", "name", f"{st.name}-zy"], check=True)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    rep = Rack().down(st.name)
    assert rep.found
    assert_rack_gone(st.name)
    assert not state_mod.state_dir(st.name).exists()
    # Other failures are still errors.
    fail = subprocess.CompletedProcess(["ip", "link", "del"], 2, "", "RTNETLINK answers: Operation not permitted")
    assert not netns._gone(fail)
