"""Fabrics as real processes: every switch its own `inswitch switch`, hosts in namespaces,
veth links, one controller. Checked against references computed here without the switches:
every pair of hosts reaches every other with the TTL the hop count predicts, the ECMP spine
of every flow is the one a CRC-32 of its 5-tuple picks (zlib's), a shaped link delays by
what the topology says, and `fabric down` leaves nothing after a `kill -9`.

Needs root. Each fabric is taken down at the end of its test whatever happened.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import textwrap
import time
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from inswitch.topology import netns, switchproc
from inswitch.topology.fabric.fabric import Fabric, FabricState, marker
from inswitch.topology.fabric.generators import load_spec
from inswitch.topology.state import process_tag, state_dir

pytestmark = [pytest.mark.netns,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root: namespaces, veth pairs, AF_PACKET")]


@pytest.fixture
def fabric() -> Iterator[tuple[Fabric, list[str]]]:
    """A Fabric and a list the test appends fabric names to; all are taken down and checked
    gone afterwards."""
    fab, made = Fabric(), []
    yield fab, made
    problems = []
    for name in made:
        try:
            fab.down(name)
            left = netns.leftovers(f"{name}-") + switchproc.find_by_marker(marker(name))
            if left:
                problems.append(f"{name}: {left}")
        except Exception as e:
            problems.append(f"{name}: {e}")
    assert not problems, problems


def _name(suffix: str) -> str:
    """A fabric name of this test process (at most 6 characters: it prefixes interfaces)."""
    return f"f{process_tag()[-3:]}{suffix}"


def _ping(st: FabricState, src: str, dst_ip: str) -> tuple[bool, int | None]:
    h = st.host(src)
    cp = subprocess.run(netns.netns_argv(h.netns, ["ping", "-n", "-c", "1", "-W", "3", dst_ip]),
                        capture_output=True, text=True, timeout=20)
    ttl = None
    for line in cp.stdout.splitlines():
        if "ttl=" in line:
            ttl = int(line.split("ttl=", 1)[1].split()[0])
    return cp.returncode == 0, ttl


def _routers_between(topo, a: str, b: str) -> int:
    """Switches a packet from host a to host b crosses that route it (L3 hops), from the
    raw links: 0 on one leaf (L2), else the switch-path length + 1."""
    leaf = {}
    adj: dict[str, set[str]] = {}
    for ln in topo.links:
        for x, y in ((ln.a.node, ln.b.node), (ln.b.node, ln.a.node)):
            if topo.nodes[x].is_switch and topo.nodes[y].is_switch:
                adj.setdefault(x, set()).add(y)
            elif not topo.nodes[x].is_switch:
                leaf[x] = y
    if leaf[a] == leaf[b]:
        return 0
    dist, todo = {leaf[a]: 0}, [leaf[a]]
    while todo:
        n = todo.pop(0)
        for m in adj.get(n, ()):
            if m not in dist:
                dist[m] = dist[n] + 1
                todo.append(m)
    return dist[leaf[b]] + 1


def _all_pairs(st: FabricState) -> dict[tuple[str, str], tuple[bool, int | None]]:
    pairs = [(a.name, b) for a in st.hosts for b in st.hosts if a.name != b.name]
    with ThreadPoolExecutor(max_workers=16) as ex:
        res = ex.map(lambda p: _ping(st, p[0], p[1].ip), pairs)
        return {(a, b.name): r for (a, b), r in zip(pairs, res)}


def _check_all_pairs(st: FabricState) -> None:
    topo = st.topo()
    got = _all_pairs(st)
    bad = {k: v for k, v in got.items() if not v[0]}
    assert not bad, f"{len(bad)} of {len(got)} pairs failed: {sorted(bad)[:8]}"
    for (a, b), (_, ttl) in got.items():
        assert ttl == 64 - _routers_between(topo, a, b), (a, b, ttl)


def test_leaf_spine_all_pairs_ping(fabric) -> None:
    fab, made = fabric
    name = _name("ls")
    made.append(name)
    st = fab.up("leaf-spine:2,2,2", name=name)
    # One process per switch, each its own P4Runtime endpoint and device id.
    assert len({s.pid for s in st.switches}) == 4 and all(switchproc.is_alive(s.pid, s.ready_file) for s in st.switches)
    assert len({s.p4runtime for s in st.switches}) == 4
    assert sorted(s.plan.device_id for s in st.switches) == [1, 2, 3, 4]
    # No kernel bridge anywhere: every switch port is a plain veth end with no master.
    for s in st.switches:
        for dev in s.plan.ifaces:
            assert netns.link_master(dev) is None
    # Every port of every switch has the fabric's receive ring, not the switch's default.
    from inswitch.topology.fabric.fabric import FABRIC_RING_FRAMES
    from test_switch_rings import ring_of

    for s in st.switches:
        assert json.loads(Path(s.ready_file).read_text())["rx_rings"] == [ring_of(FABRIC_RING_FRAMES)] * len(s.plan.ifaces)
    _check_all_pairs(st)
    status = fab.status(name)
    assert all(sw.alive and sw.counters for sw in status.switches)
    # Per-program counters (from each switch's /metrics): every switch ran forward on
    # the pings, and per-port rx counters add up to at least the passes' worth of traffic.
    assert all(sw.programs["forward"]["ingress_passes"] > 0 for sw in status.switches)
    for sw in status.switches:
        assert sum(c["rx_packets"] for c in sw.counters.values()) == sw.programs["forward"]["ingress_passes"]


@pytest.mark.slow
def test_fat_tree_all_pairs_ping(fabric) -> None:
    """fat-tree:4: 20 switch processes, 16 hosts, 240 pairs (ECMP on edges and aggs)."""
    fab, made = fabric
    name = _name("ft")
    made.append(name)
    st = fab.up("fat-tree:4", name=name)
    assert len(st.switches) == 20 and len(st.hosts) == 16
    _check_all_pairs(st)


SENDER = textwrap.dedent("""
    import socket, sys
    dst, dport, first, flows, repeat = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    for sport in range(first, first + flows):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("0.0.0.0", sport))
        for _ in range(repeat):
            s.sendto(b"x" * 32, (dst, dport))
        s.close()
""")
SINK = "import socket,time; s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.bind(('0.0.0.0',5555)); print('ready',flush=True); time.sleep(60)"


def _spine_rx(fab: Fabric, name: str) -> dict[str, int]:
    s = fab.status(name)
    return {sw.name: sum(c["rx_packets"] for c in (sw.counters or {}).values()) for sw in s.switches if sw.name.startswith("spine")}


def test_ecmp_spreads_flows_over_spines_and_keeps_each_flow_on_one(fabric) -> None:
    fab, made = fabric
    name = _name("ec")
    made.append(name)
    st = fab.up("leaf-spine:2,2,1", name=name)
    h1, h2 = st.host("h1"), st.host("h2")
    sink = subprocess.Popen(netns.netns_argv(h2.netns, [sys.executable, "-c", SINK]), stdout=subprocess.PIPE, text=True)
    try:
        assert sink.stdout is not None and sink.stdout.readline().strip() == "ready"
        before = _spine_rx(fab, name)
        flows, repeat, first = 200, 3, 20000
        subprocess.run(netns.netns_argv(h1.netns, [sys.executable, "-c", SENDER, h2.ip, "5555", str(first), str(flows), str(repeat)]),
                       check=True, timeout=60)
        # The reference: leaf1's group lists its uplinks in port order (spine1, spine2); a
        # flow's member is CRC-32(src, dst, proto, sport, dport) mod 2.
        want = {"spine1": 0, "spine2": 0}
        src, dst = bytes(map(int, h1.ip.split("."))), bytes(map(int, h2.ip.split(".")))
        for sport in range(first, first + flows):
            key = src + dst + bytes([17]) + struct.pack("!HH", sport, 5555)
            want[f"spine{zlib.crc32(key) % 2 + 1}"] += repeat
        deadline = time.monotonic() + 5
        while True:
            after = _spine_rx(fab, name)
            got = {k: after[k] - before[k] for k in after}
            if got == want or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert got == want, f"per-spine packets {got}, the 5-tuple hash says {want}"
        assert min(want.values()) > flows * repeat // 4, want  # and they do spread
    finally:
        sink.kill()
        sink.wait()


def _shaped_file(tmp_path: Path, props: str) -> str:
    """Three hosts on one switch; h1's link carries `props` (one "key: value" line)."""
    path = tmp_path / "shaped.clab.yml"
    path.write_text("name: shaped\ntopology:\n  nodes:\n    s1: {kind: inswitch}\n"
                    "    h1: {kind: linux}\n    h2: {kind: linux}\n    h3: {kind: linux}\n  links:\n"
                    f"    - endpoints: [\"s1:p1\", \"h1:eth0\"]\n      {props}\n"
                    "    - endpoints: [\"s1:p2\", \"h2:eth0\"]\n    - endpoints: [\"s1:p3\", \"h3:eth0\"]\n")
    return str(path)


def test_link_delay_is_applied_or_refused_up_front(fabric, tmp_path: Path) -> None:
    """With the kernel's netem: a 15 ms link delays an echo both ways (h1's end the request,
    the switch's end, which sends through its qdisc, the reply). Without netem (some kernels
    lack CONFIG_NET_SCH_NETEM): `up` refuses with one clear error and makes nothing."""
    fab, made = fabric
    name = _name("dl")
    made.append(name)
    spec = _shaped_file(tmp_path, "delay: 15ms")
    if not netns.qdisc_available("netem", f"{name}-probe"):
        cp = subprocess.run([sys.executable, "-m", "inswitch", "fabric", "up", "-t", spec, "-n", name], capture_output=True, text=True, timeout=60)
        assert cp.returncode == 1 and "netem" in cp.stderr and len(cp.stderr.strip().splitlines()) == 1, cp.stderr
        assert netns.leftovers(f"{name}-") == [] and not state_dir(name).exists()
        return
    st = fab.up(spec, name=name)
    h1, h2 = st.host("h1"), st.host("h2")
    cp = subprocess.run(netns.netns_argv(h1.netns, ["ping", "-n", "-c", "3", "-i", "0.2", h2.ip]), capture_output=True, text=True, timeout=30)
    rtts = [float(line.split("time=")[1].split()[0]) for line in cp.stdout.splitlines() if "time=" in line]
    assert len(rtts) == 3 and min(rtts) >= 30.0, cp.stdout
    assert "netem" in fab.status(name).qdiscs[st.links[0].a_if]


TCP_SINK = textwrap.dedent("""
    import socket, sys, time
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", 5001)); s.listen(1)
    print("ready", flush=True)
    c, _ = s.accept(); n = 0; t0 = None
    while True:
        b = c.recv(1 << 16)
        if not b:
            break
        if t0 is None:
            t0 = time.monotonic()
        n += len(b)
    print(n, time.monotonic() - t0, flush=True)
""")
TCP_SEND = "import socket,sys; s=socket.create_connection((sys.argv[1],5001)); s.sendall(b'x'*int(sys.argv[2])); s.close()"


def _mbit(st: FabricState, src: str, dst: str, nbytes: int) -> float:
    """TCP goodput from host src to host dst, measured by the receiver."""
    d = st.host(dst)
    sink = subprocess.Popen(netns.netns_argv(d.netns, [sys.executable, "-c", TCP_SINK]), stdout=subprocess.PIPE, text=True)
    try:
        assert sink.stdout is not None and sink.stdout.readline().strip() == "ready"
        subprocess.run(netns.netns_argv(st.host(src).netns, [sys.executable, "-c", TCP_SEND, d.ip, str(nbytes)]), check=True, timeout=60)
        n, secs = sink.stdout.readline().split()
        assert int(n) == nbytes
        return int(n) * 8 / float(secs) / 1e6
    finally:
        sink.kill()
        sink.wait()


def test_link_rate_is_applied_both_ways_and_shown(fabric, tmp_path: Path) -> None:
    """A 20 Mbit/s link (tbf on each end) caps TCP both ways: h1 -> h2 by h1's end, h2 -> h1
    by the switch's end (the switch sends through the qdisc); an unshaped pair is faster."""
    fab, made = fabric
    name = _name("rt")
    made.append(name)
    st = fab.up(_shaped_file(tmp_path, "rate: 20mbit"), name=name)
    out_ = _mbit(st, "h1", "h2", 2_500_000)
    in_ = _mbit(st, "h2", "h1", 2_500_000)
    free = _mbit(st, "h3", "h2", 2_500_000)
    assert 8 <= out_ <= 23 and 8 <= in_ <= 23, (out_, in_)
    assert free > 2 * max(out_, in_), (free, out_, in_)
    s = fab.status(name)
    assert "tbf" in s.qdiscs[st.links[0].a_if] and "rate 20Mbit" in s.qdiscs[st.links[0].a_if]
    doc = json.loads(subprocess.run([sys.executable, "-m", "inswitch", "fabric", "status", "--name", name, "--json", "-"],
                                    capture_output=True, text=True, timeout=60).stdout)
    assert doc["links"][0]["rate"] == "20mbit" and "tbf" in json.dumps(doc["links"][0]["qdisc"])
    assert doc["links"][1]["qdisc"] == {}


def test_down_after_kill_9_leaves_nothing(fabric) -> None:
    fab, made = fabric
    name = _name("k9")
    made.append(name)
    st = fab.up("leaf-spine:2,1,1", name=name)
    victim = st.switches[0]
    os.kill(victim.pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while switchproc.is_alive(victim.pid, victim.ready_file) and time.monotonic() < deadline:
        time.sleep(0.05)
    cp = subprocess.run([sys.executable, "-m", "inswitch", "fabric", "status", "--name", name], capture_output=True, text=True, timeout=60)
    # Dead and shown so, unless the supervisor already restarted it (a new process) before
    # `status` ran: a race that a loaded machine's slow `status` start can lose.
    now = FabricState.load(name)
    restarted = now is not None and now.switches[0].pid != victim.pid and switchproc.is_alive(now.switches[0].pid, now.switches[0].ready_file)
    assert (cp.returncode == 1 and "not running" in cp.stdout) or (restarted and cp.returncode == 0), (restarted, cp.stdout)
    cp = subprocess.run([sys.executable, "-m", "inswitch", "fabric", "down", "--name", name], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stderr
    assert netns.leftovers(f"{name}-") == []
    assert switchproc.find_by_marker(marker(name)) == []
    assert not any(switchproc.is_alive(s.pid, s.ready_file) for s in st.switches)
    assert not state_dir(name).exists()
    # A fabric's name is not a rack's: `rack down` refuses it (and `fabric down` a rack's).
    fab.up("leaf-spine:1,1,1", name=name)
    cp = subprocess.run([sys.executable, "-m", "inswitch", "rack", "down", "--name", name], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 1 and "is a fabric" in cp.stderr and netns.leftovers(f"{name}-")
    fab.down(name)
    # Down again: nothing to do, still exit 0.
    cp = subprocess.run([sys.executable, "-m", "inswitch", "fabric", "down", "--name", name], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0 and "nothing to do" in cp.stdout


def test_killed_switch_is_restarted_with_its_routing(fabric) -> None:
    """kill -9 of a leaf: the fabric's supervisor starts it again on the same ports and
    P4Runtime address, the controller's routes come back (ping across the fabric works
    again, with the TTL of the same path), the restart is recorded; `down` takes the
    supervisor and the new switch too."""
    from inswitch.topology import restarts

    fab, made = fabric
    name = _name("rs")
    made.append(name)
    st = fab.up("leaf-spine:2,1,1", name=name)
    ok, ttl = _ping(st, "h1", st.host("h2").ip)
    assert ok
    victim = next(s for s in st.switches if s.plan.name == "leaf1")
    t = time.time()
    os.kill(victim.pid, signal.SIGKILL)
    deadline = time.monotonic() + 15
    while not restarts.read(st.restarts_file, t - 1) and time.monotonic() < deadline:
        time.sleep(0.05)
    (rec,) = restarts.wait_back(st.restarts_file, t - 1, timeout=60)
    assert rec["switch"] == "leaf1" and "forwarding_at" in rec and "error" not in rec, rec
    now = FabricState.load(name)
    assert now is not None
    new = next(s for s in now.switches if s.plan.name == "leaf1")
    assert new.pid != victim.pid and switchproc.is_alive(new.pid, new.ready_file)
    assert json.loads(Path(new.ready_file).read_text())["p4runtime"] == victim.p4runtime
    # Restarted with the same command line: the fabric's rings too.
    from inswitch.topology.fabric.fabric import FABRIC_RING_FRAMES
    from test_switch_rings import ring_of

    assert json.loads(Path(new.ready_file).read_text())["rx_rings"] == [ring_of(FABRIC_RING_FRAMES)] * len(new.plan.ifaces)
    assert _ping(st, "h1", st.host("h2").ip) == (True, ttl)
    cp = subprocess.run([sys.executable, "-m", "inswitch", "fabric", "status", "--name", name, "--json", "-"],
                        capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stderr
    shown = json.loads(cp.stdout)
    assert [r["switch"] for r in shown["restarts"]] == ["leaf1"] and shown["switches"]["leaf1"]["pid"] == new.pid
    cp = subprocess.run([sys.executable, "-m", "inswitch", "fabric", "status", "--name", name], capture_output=True, text=True, timeout=60)
    assert "restart: leaf1 died" in cp.stdout
    fab.down(name)
    assert switchproc.find_by_marker(marker(name)) == [] and netns.leftovers(f"{name}-") == []


def test_bad_topology_is_refused_before_anything_is_made(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text("name: x\ntopology:\n  nodes:\n    s1: {kind: inswitch}\n  links:\n    - endpoints: [\"s1:p1\", \"h9:eth0\"]\n")
    name = _name("bad")
    cp = subprocess.run([sys.executable, "-m", "inswitch", "fabric", "up", "--topology", str(bad), "--name", name],
                        capture_output=True, text=True, timeout=60)
    assert cp.returncode == 2 and len(cp.stderr.strip().splitlines()) == 1, cp.stderr
    assert "bad.yml:6: dangling endpoint h9:eth0" in cp.stderr
    assert netns.leftovers(f"{name}-") == [] and not state_dir(name).exists()


def test_pcap_captures_every_switch_while_running(fabric, tmp_path: Path) -> None:
    """`fabric up --pcap DIR`: each switch writes DIR/SWITCH/port{N}.pcapng, readable (by
    scapy) while the fabric runs, holding the pings that crossed it."""
    from scapy.layers.inet import ICMP, IP

    from inswitch.scapy import read_capture

    fab, made = fabric
    name = _name("pc")
    made.append(name)
    st = fab.up("leaf-spine:2,1,1", name=name, pcap=str(tmp_path / "cap"))
    a, b = st.hosts[0], st.hosts[-1]
    ok, _ = _ping(st, a.name, b.ip)
    assert ok
    time.sleep(0.3)
    for sw in st.switches:
        files = sorted((tmp_path / "cap" / sw.plan.name).glob("port*.pcapng"))
        assert len(files) == len(sw.plan.ifaces), (sw.plan.name, files)
        echoes = [p for f in files for p, _ in read_capture(f) if IP in p and ICMP in p and p[IP].src == a.ip and p[IP].dst == b.ip]
        # Every switch lies on the one path from a leaf to the other through the spine.
        assert echoes, f"{sw.plan.name}: no echo request from {a.ip} to {b.ip} in {files}"


def test_two_machines_joined_by_kernel_vxlan(fabric, tmp_path: Path) -> None:
    """`fabric up --emulate-machines`: leaf-spine:2,1,2 over two "machines" (network
    namespaces with underlay addresses, joined by a veth pair of MTU 1550), leaf2 and its
    hosts on m2, the rest on m1. The leaf2-spine1 link is a pair of kernel VXLAN devices
    whose sockets live in the machine namespaces: every pair pings with the hop count's TTL,
    each VXLAN end's kernel counters and the underlay count the crossing frames, a capture
    on m2's underlay shows them as UDP 4789 with the link's VNI, and a full-size frame
    crosses without fragmenting the underlay."""
    from inswitch.topology.fabric.fabric import machine_netns, vxlan_counters
    from inswitch.topology.fabric.generators import split_machines

    fab, made = fabric
    name = _name("vx")
    made.append(name)
    spec = tmp_path / "two.clab.yml"
    spec.write_text(split_machines(load_spec("leaf-spine:2,1,2"), 2).to_yaml())
    t0 = time.monotonic()
    cp = subprocess.run([sys.executable, "-m", "inswitch", "fabric", "up", "--topology", str(spec), "--name", name,
                         "--emulate-machines"], capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    up_s = time.monotonic() - t0
    assert "machine m2: underlay 192.0.2.2, 1 VXLAN links" in cp.stdout, cp.stdout
    st = FabricState.load(name)
    assert st is not None and st.emulated and st.underlay == {"m1": "192.0.2.1", "m2": "192.0.2.2"}
    (vx,) = [ln for ln in st.links if ln.vni is not None]
    assert vx.endpoints == "leaf2:p3 -- spine1:p2" and {vx.a_machine, vx.b_machine} == {"m1", "m2"}
    # Both ends are kernel VXLAN devices (not veth), tunnelling to the other machine's underlay
    # address on UDP 4789, their sockets in a machine namespace (link-netns).
    for dev, peer in ((vx.a_if, vx.b_machine), (vx.b_if, vx.a_machine)):
        info = json.loads(netns.ip("-d", "-j", "link", "show", "dev", dev).stdout)[0]
        data = info["linkinfo"]["info_data"]
        assert info["linkinfo"]["info_kind"] == "vxlan" and data["id"] == vx.vni and data["port"] == 4789, info
        assert data["remote"] == st.underlay[peer] and "link_netnsid" in info and info["mtu"] == 1500, info
    ns1, ns2 = machine_netns(name, "m1"), machine_netns(name, "m2")
    assert json.loads(netns.ip("-j", "link", "show", "dev", "ul0", netns=ns2).stdout)[0]["mtu"] == 1550
    before = vxlan_counters(st)
    ul_before = {ns: netns.link_stats("ul0", netns=ns) for ns in (ns1, ns2)}
    cap = subprocess.Popen(netns.netns_argv(ns2, ["tcpdump", "-n", "-l", "-i", "ul0", "udp", "port", "4789"]),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.0)  # tcpdump attached
        _check_all_pairs(st)
        # A full-size frame (1500-byte IP packet, DF) crosses the tunnel whole.
        m2_host = next(h for h in st.hosts if h.machine == "m2")
        h = st.hosts[0]
        big = subprocess.run(netns.netns_argv(h.netns, ["ping", "-n", "-c", "1", "-W", "3", "-M", "do", "-s", "1472", m2_host.ip]),
                             capture_output=True, text=True, timeout=20)
        assert big.returncode == 0, big.stdout + big.stderr
        time.sleep(0.5)
    finally:
        cap.send_signal(signal.SIGINT)
        out, err = cap.communicate(timeout=10)
    # 2 hosts on each machine: 8 ordered cross pairs, each one request and one reply across.
    crossed = 2 * 2 * 2
    after = vxlan_counters(st)
    for dev in (vx.a_if, vx.b_if):
        assert after[dev]["tx_packets"] - before[dev]["tx_packets"] >= crossed // 2 + 1, (dev, before, after)
        assert after[dev]["rx_packets"] - before[dev]["rx_packets"] >= crossed // 2 + 1, (dev, before, after)
    for ns in (ns1, ns2):
        ul = netns.link_stats("ul0", netns=ns)
        assert ul["tx_packets"] - ul_before[ns]["tx_packets"] >= crossed // 2 + 1, (ns, ul_before[ns], ul)
    # tcpdump prints each VXLAN packet as the outer line then the inner frame's line.
    rows = out.splitlines()
    pairs = [(rows[i], rows[i + 1]) for i in range(len(rows) - 1) if f"vni {vx.vni}" in rows[i]]
    assert all(".4789: VXLAN" in o for o, _ in pairs), pairs[:4]
    for src, dst in (("192.0.2.1", "192.0.2.2"), ("192.0.2.2", "192.0.2.1")):
        inner = [i for o, i in pairs if f" {src}." in o and f" > {dst}.4789" in o]
        assert sum("ICMP echo request" in i for i in inner) >= crossed // 2, (src, out[-3000:] + err)
    assert any("length 1480" in i for _, i in pairs), out[-2000:]
    snmp = netns.in_netns(ns1, ["cat", "/proc/net/snmp"], timeout=10, check=True).stdout.splitlines()
    ip_keys, ip_vals = (ln.split()[1:] for ln in snmp if ln.startswith("Ip:"))
    assert dict(zip(ip_keys, ip_vals))["FragCreates"] == "0"
    # One controller reaches every switch's P4Runtime endpoint: status reads them all.
    s = fab.status(name)
    assert all(sw.alive and sw.counters for sw in s.switches), [(sw.name, sw.error) for sw in s.switches]
    print(f"two-machine leaf-spine:2,1,2 up in {up_s:.1f} s; VXLAN {vx.a_if}: {after[vx.a_if]}")


def test_three_machines_joined_by_a_lan_and_kernel_vxlan(fabric) -> None:
    """Three or more machines are not cabled back to back: `make_underlay` joins them
    through a bridge in a LAN namespace of their own (the machines' switch, off the fabric's
    data path). leaf-spine:3,1,1 over m1..m3: each leaf and its host on its own machine, the
    spine on m1, so two of the three leaf-spine links are VXLAN links, to two different
    remote machines. Every pair of hosts pings across with the hop count's TTL, and each
    VXLAN device tunnels to its own peer's underlay address."""
    from inswitch.topology.fabric.fabric import lan_netns, machine_netns, vxlan_counters
    from inswitch.topology.fabric.generators import split_machines

    fab, made = fabric
    name = _name("v3")
    made.append(name)
    topo = split_machines(load_spec("leaf-spine:3,1,1"), 3)
    st = fab.up(topo, name=name, emulate_machines=True)
    assert st.emulated and st.underlay == {"m1": "192.0.2.1", "m2": "192.0.2.2", "m3": "192.0.2.3"}
    assert {h.machine for h in st.hosts} == {"m1", "m2", "m3"}
    vxs = [ln for ln in st.links if ln.vni is not None]
    assert len(vxs) == 2 and len({ln.vni for ln in vxs}) == 2, vxs
    assert {frozenset((ln.a_machine, ln.b_machine)) for ln in vxs} == {frozenset(("m1", "m2")), frozenset(("m1", "m3"))}
    # The LAN: one bridge, one port per machine.
    ports = json.loads(netns.ip("-j", "link", "show", "master", "lan", netns=lan_netns(name)).stdout)
    assert len(ports) == 3, ports
    for ln in vxs:
        for dev, peer in ((ln.a_if, ln.b_machine), (ln.b_if, ln.a_machine)):
            data = json.loads(netns.ip("-d", "-j", "link", "show", "dev", dev).stdout)[0]["linkinfo"]["info_data"]
            assert (data["id"], data["remote"]) == (ln.vni, st.underlay[peer]), (dev, data)
    before = vxlan_counters(st)
    _check_all_pairs(st)
    after = vxlan_counters(st)
    # 3 hosts, 6 ordered pairs; every pair crosses at least one VXLAN link (no two hosts
    # share a machine), each device at least once each way.
    for ln in vxs:
        for dev in (ln.a_if, ln.b_if):
            assert after[dev]["tx_packets"] > before[dev]["tx_packets"] and after[dev]["rx_packets"] > before[dev]["rx_packets"], dev
    fab.down(name)
    assert not netns.leftovers(f"{name}-") and lan_netns(name) not in netns.ip("netns", "list").stdout
    assert all(machine_netns(name, m) not in netns.ip("netns", "list").stdout for m in st.underlay)


def test_each_machine_builds_its_own_part_with_fabric_up_machine(fabric, tmp_path: Path) -> None:
    """What two real hosts run: `fabric up --topology FILE --machine m1` on one and `--machine
    m2` on the other, each a separate process in its own network namespace (a "host" with
    only its underlay address, as `nsenter --net` gives it; the namespaces are joined by a
    veth pair). Each builds only its own part: its switches serve P4Runtime on its underlay
    address, its end of the link to the other machine is a VXLAN device made in place, and
    its switches are programmed by it. Every pair of hosts pings with the hop count's TTL,
    and `fabric status` on m1 reads m2's switch over TCP across the underlay."""
    from inswitch.topology.fabric.fabric import machine_netns, make_underlay
    from inswitch.topology.fabric.generators import split_machines

    fab, made = fabric
    a, b, ul = _name("ma"), _name("mb"), _name("mu")
    made.extend([a, b, ul])
    make_underlay(ul, {"m1": "192.0.2.1", "m2": "192.0.2.2"})
    spec = tmp_path / "two.clab.yml"
    topo = split_machines(load_spec("leaf-spine:2,1,2"), 2)
    spec.write_text(topo.to_yaml())

    def on(machine: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["nsenter", f"--net=/run/netns/{machine_netns(ul, machine)}", sys.executable, "-m", "inswitch",
                               "fabric", *args], capture_output=True, text=True, timeout=120)

    # m2 first: a VXLAN device sends to its peer whether or not the peer is up yet.
    for machine, name in (("m2", b), ("m1", a)):
        cp = on(machine, "up", "--topology", str(spec), "--name", name, "--machine", machine)
        assert cp.returncode == 0, cp.stdout + cp.stderr
        assert f"is up (machine {machine}'s part)" in cp.stdout, cp.stdout
    sa, sb = FabricState.load(a), FabricState.load(b)
    assert sa is not None and sb is not None and (sa.machine, sb.machine) == ("m1", "m2")
    assert [s.plan.name for s in sa.switches if not s.remote] == ["spine1", "leaf1"]
    assert [s.plan.name for s in sb.switches if not s.remote] == ["leaf2"]
    assert {s.plan.name: s.p4runtime for s in sa.switches} == {"spine1": "192.0.2.1:9560", "leaf1": "192.0.2.1:9561",
                                                               "leaf2": "192.0.2.2:9562"}
    # m1's end of the link to m2: a VXLAN device made in m1's own namespace (no link-netns).
    (vx,) = [ln for ln in sa.links if ln.vni is not None]
    m1_end = vx.a_if if vx.a_machine == "m1" else vx.b_if
    info = json.loads(netns.ip("-d", "-j", "link", "show", "dev", m1_end, netns=machine_netns(ul, "m1")).stdout)[0]
    data = info["linkinfo"]["info_data"]
    assert info["linkinfo"]["info_kind"] == "vxlan" and (data["local"], data["remote"], data["port"]) == ("192.0.2.1", "192.0.2.2", 4789)
    # All pairs, each ping from the part that owns the source host.
    pairs = [(st, h, o) for st in (sa, sb) for h in st.hosts if h.machine == st.machine for o in st.hosts if o.name != h.name]
    with ThreadPoolExecutor(max_workers=8) as ex:
        got = list(ex.map(lambda p: (p[1].name, p[2].name, _ping(p[0], p[1].name, p[2].ip)), pairs))
    assert len(got) == 12 and all(ok for _, _, (ok, _) in got), got
    for src, dst, (_, ttl) in got:
        assert ttl == 64 - _routers_between(topo, src, dst), (src, dst, ttl)
    # m1's status reaches m2's switch over TCP on the underlay; it forwarded the pings.
    cp = on("m1", "status", "--name", a, "--json", "-")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    doc = json.loads(cp.stdout)
    assert all(s["alive"] for s in doc["switches"].values()) and doc["switches"]["leaf2"]["remote"]
    assert all(p["rx_packets"] > 0 for p in doc["switches"]["leaf2"]["ports"].values()), doc["switches"]["leaf2"]
    assert doc["hosts"]["h3"]["machine"] == "m2" and doc["underlay"] == {"m1": "192.0.2.1", "m2": "192.0.2.2"}
