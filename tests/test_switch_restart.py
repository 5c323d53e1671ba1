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
from typing import Any

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
    status = subprocess.run([PY, "-m", "inswitch", "rack", "status", "--name", st.name, "--json", "-"],
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


def job_spec(program: str, words: int, name: str = "") -> Any:
    from inswitch.apps.wordcount import job

    return job.JobSpec(zipf=1.0, words=words, vocab=20_000, seed=3, mappers=2, reducers=2, program=program,
                       timeout_s=60.0, rack=name, where="netns")


def mapper_rx(st: RackState, ports: range) -> float:
    """Packets the switch has received from the mappers' ports."""
    return sum(v for n, labels, v in control.scrape_metrics(st.switch.metrics)
               if n == "inswitch_port_rx_packets_total" and int(labels["port"]) in ports)


def run_job_killing_the_switch(program: str, after_packets: int, words: int) -> tuple[dict, float, float]:  # type: ignore[type-arg]
    """A WordCount job in switch mode whose switch gets `kill -9` once it has received
    `after_packets` packets from the mappers in the switch run (so it holds part of the
    aggregation); returns the job's document, when the kill happened and the packets seen."""
    from inswitch.apps.wordcount import job

    name = f"wk{process_tag()}"
    spec = job_spec(program, words, name)
    killed: list[float] = []
    seen: list[float] = []

    def kill_when_busy() -> None:
        st = load_state(name)
        assert st is not None and st.switch.pid
        mappers = range(spec.mappers)
        base = mapper_rx(st, mappers)
        deadline = time.monotonic() + 30
        while mapper_rx(st, mappers) - base < after_packets and time.monotonic() < deadline:
            time.sleep(0.01)
        seen.append(mapper_rx(st, mappers) - base)
        killed.append(time.time())
        os.kill(st.switch.pid, signal.SIGKILL)

    def progress(msg: str) -> None:
        if msg.startswith("switch: ") and "mappers running" in msg and not killed:
            threading.Thread(target=kill_when_busy, daemon=True).start()

    try:
        doc = job.run(spec, ["switch"], progress=progress)
    finally:
        Rack().down(name)
    assert killed, "the switch run never started"
    return doc, killed[0], seen[0]


def reference_counts(program: str, words: int) -> Counter[str]:
    from inswitch.apps.wordcount import job

    return job.reference(job_spec(program, words))


@pytest.mark.netns
@pytest.mark.parametrize("program", ["daiet", "switchagg"])
def test_wordcount_survives_a_switch_kill(program: str) -> None:
    """kill -9 of the switch while it aggregates (DAIET, SwitchAgg): the supervisor restarts
    it, the hosts see its registers empty (gaps, or a stream straight from the mappers) and
    fall back to host-side aggregation, and the job ends correct (every count equal to a
    Counter's) within a bounded time of the restart; the output says what happened and how
    long it took."""
    if os.geteuid() != 0:
        pytest.skip("switch mode needs a rack of network namespaces (root)")
    words = 400_000
    # 200 of the mappers' ~700 (switchagg) or more (daiet) packets: the counter is polled,
    # and on a loaded machine the kill lands up to ~140 packets later.
    doc, t_kill, seen = run_job_killing_the_switch(program, 200, words)
    # Mid-job: packets still to come at the kill. (The counter moves in bursts: switchagg's
    # 676-packet job showed exactly 338 at its kill twice, from a 200-packet trigger.)
    assert seen < doc["runs"]["switch"]["mapper_packets"], "the switch died after the job's packets, not mid-job"
    run = doc["runs"]["switch"]
    assert run["correct"] and run["wrong_keys"] == 0 and run["keys"] == len(reference_counts(program, words))
    assert run["fallback"], "the switch's aggregation state was lost: the hosts must have aggregated"
    [r] = run["switch_restarts"]
    assert r["exit"] == "signal SIGKILL" and abs(r["died_at"] - t_kill) < 1.0 and r["generation"] == 2
    assert r["recovery_s"] < 15, r
    assert run["recovered_s"] < 20, f"the job took {run['recovered_s']} s after the switch was back"
    assert doc["switch_restarts"] == [r]
    assert any("the switch died (signal SIGKILL)" in n and "forwarding again" in n for n in doc["notes"]), doc["notes"]


def kill_after_rx(name: str, ports: range, packets: int, killed: list[float]) -> None:
    """kill -9 the rack's switch once it has received `packets` more packets on `ports`."""
    st = load_state(name)
    assert st is not None and st.switch.pid
    base = mapper_rx(st, ports)
    deadline = time.monotonic() + 30
    while mapper_rx(st, ports) - base < packets and time.monotonic() < deadline:
        time.sleep(0.005)
    killed.append(time.time())
    os.kill(st.switch.pid, signal.SIGKILL)


@pytest.mark.netns
# ~15-35 s, most of it the servers' 10 s idle exit and the rack; not `slow`: the one NetSHa
# switch kill `make test` runs (issue 22)
def test_netsha_search_survives_a_switch_kill() -> None:
    """kill -9 of the switch while the agent's queries are out: the controller installs
    NetSHa's tables on the restarted switch, the agent sends again every query the dead
    switch may have held, and every query's top K equals the search's without a switch."""
    if os.geteuid() != 0:
        pytest.skip("the NetSHa rack needs network namespaces (root)")
    import numpy as np

    from inswitch.apps.netsha.datasets import random_dataset
    from inswitch.apps.netsha.rack import run_rack_search
    from inswitch.apps.netsha.search import SearchConfig, run_search

    ds = random_dataset(1500, 100, seed=8)
    cfg = SearchConfig(servers=3, k=10, concurrency=10)
    name = f"ns{process_tag()}k"
    killed: list[float] = []

    def progress(msg: str) -> None:
        if msg.startswith("agent:") and not killed:
            threading.Thread(target=kill_after_rx, args=(name, range(0, 1), 30, killed), daemon=True).start()

    r = run_rack_search(ds, cfg, name, progress=progress)
    assert killed
    m = r["modes"]["netsha-rack"]
    [rec] = m["switch_restarts"]
    assert rec["exit"] == "signal SIGKILL" and rec["generation"] == 2 and "forwarding_at" in rec
    assert m["reinstalled_generations"] == [2]
    # Every query sent since a second before the death is sent again: all of them when the
    # agent sent the whole batch within that second (a fast machine), some otherwise.
    assert 0 < m["retried_queries"] <= ds.queries.shape[0], m["retried_queries"]
    assert "retried" in m["restart_note"]
    ref = run_search(ds, cfg, ["tlsh"], keep_topk=True)["modes"]["tlsh"]
    for q, (a, b) in enumerate(zip(m["topk_distances"], ref["topk_distances"])):
        assert np.array_equal(np.asarray(a), np.asarray(b)), q
    assert m["recall"] == pytest.approx(ref["recall"], abs=1e-12)


@pytest.mark.netns
def test_inaas_tenants_survive_a_switch_kill() -> None:
    """kill -9 of the switch after tenant A's write: the controller registers the tenants on
    the restarted switch, A writes again (re-acquiring its leases) before its read, which
    returns what it wrote; B still cannot read A's registers and works on its own."""
    if os.geteuid() != 0:
        pytest.skip("INaaS on a rack needs network namespaces (root)")
    from inswitch.apps.inaas.rack import run_on_rack

    name = f"in{process_tag()}k"
    killed: list[float] = []

    def kill_after_first_reply() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            st = load_state(name)
            if st is not None and st.extra.get("ready"):
                break
            time.sleep(0.05)
        assert st is not None
        # Tenant A (host h2, port 1) got its write's reply: the switch holds A's values.
        base = None
        while time.monotonic() < deadline:
            tx = sum(v for n, labels, v in control.scrape_metrics(st.switch.metrics)
                     if n == "inswitch_port_tx_packets_total" and labels["port"] == "1")
            base = tx if base is None else base
            if tx > base:
                break
            time.sleep(0.005)
        killed.append(time.time())
        os.kill(st.switch.pid or 0, signal.SIGKILL)

    threading.Thread(target=kill_after_first_reply, daemon=True).start()
    r = run_on_rack(name, seconds=30, pause_a_s=5.0)
    assert killed
    a, b = r["tenant_a"], r["tenant_b"]
    [rec] = r["switch_restarts"]
    assert rec["exit"] == "signal SIGKILL" and "forwarding_at" in rec and r["reregistered_generations"] == [2]
    assert r["replayed_writes"] == {"a": 1, "b": 0}
    assert all(not x.get("lost") for x in a + b), (a, b)
    assert a[1]["status"] == [1] * 20 and a[1]["values"] == [1000 + j for j in range(20)]
    assert b[0]["status"] == [2] * 20 and all(v == 0 for v in b[0]["values"])
    assert b[2]["values"] == [2000 + j for j in range(20)]
    assert "registered the tenants again" in r["restart_note"]


HARE_SERVER = '''
import json, os, socket, struct, sys, time
KF = 128
def msg(op, key, value=b"", seq=0, slot=0, flags=0, status=0):
    return struct.pack("!BBBBIHHBBH", op, flags, len(key), KF, seq, slot, 0, len(value), status, 0) + key + bytes(KF - len(key)) + value
def parse(b):
    op, flags, kl, kf, seq, slot, aux, vl, status, _ = struct.unpack_from("!BBBBIHHBBH", b)
    return {"op": op, "flags": flags, "seq": seq, "slot": slot, "key": b[16:16 + kl], "value": b[16 + kf:16 + kf + vl]}
# The KV server: a dict; GET and PUT on UDP 7370, replies to the client's port 7371. Whenever
# the controller says (file `hare-replacing` in the rack's state dir: a generation) that the
# switch's slot is being (re)filled, it moves the offloaded key's current value there
# (DataMvToSwitch) and says so (`hare-moved`).
key, slot, deadline, sdir = sys.argv[1].encode(), int(sys.argv[2]), time.monotonic() + float(sys.argv[3]), sys.argv[4]
store = {key: b"v0-" + bytes(61)}
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 7370)); s.settimeout(0.05)
print("READY", flush=True)
moved, served = 0, 0
def want():
    try:
        return int(open(os.path.join(sdir, "hare-replacing")).read() or 0)
    except (OSError, ValueError):
        return 0
while time.monotonic() < deadline:
    g = want()
    if g > moved:
        s.sendto(msg(18, b"", store[key], slot=slot), ("10.0.0.1", 7370))
    try:
        b, peer = s.recvfrom(2048)
    except socket.timeout:
        continue
    m = parse(b)
    if m["op"] == 18 and m["flags"] & 2 and g > moved:
        moved = g
        open(os.path.join(sdir, "hare-moved.tmp"), "w").write(str(g)); os.replace(os.path.join(sdir, "hare-moved.tmp"), os.path.join(sdir, "hare-moved"))
    elif m["op"] == 1 and m["key"] == b"__stop__":
        break
    elif m["op"] == 1:
        served += 1
        s.sendto(msg(2, m["key"], store.get(m["key"], bytes(64)), m["seq"]), (peer[0], 7371))
    elif m["op"] == 3:
        store[m["key"]] = m["value"]
        s.sendto(msg(4, m["key"], m["value"], m["seq"]), (peer[0], 7371))
print(json.dumps({"served": served, "moved": moved}), flush=True)
'''

HARE_CLIENT = '''
import json, socket, struct, sys, time
KF = 128
def msg(op, key, value=b"", seq=0):
    return struct.pack("!BBBBIHHBBH", op, 0, len(key), KF, seq, 0, 0, len(value), 0, 0) + key + bytes(KF - len(key)) + value
key, seconds = sys.argv[1].encode(), float(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 7371)); s.settimeout(0.2)
out, seq = [], 0
def ask(op, v=b""):
    global seq
    seq += 1
    s.sendto(msg(op, key, v, seq), ("10.0.0.2", 7370))
    t = time.time()
    try:
        while True:
            b = s.recv(2048)
            op_, flags, kl, kf, sq = struct.unpack_from("!BBBBI", b)
            if sq == seq:
                vl = b[12]
                return {"t": t, "op": op_, "hit": bool(flags & 1), "value": b[16 + kf:16 + kf + vl].hex()}
    except socket.timeout:
        return {"t": t, "lost": True}
end = time.monotonic() + seconds
while time.monotonic() < end:
    out.append(ask(1)); time.sleep(0.02)
out.append(ask(3, b"v1-" + bytes(61)))
for _ in range(3):
    out.append(ask(1))
s.sendto(msg(1, b"__stop__"), ("10.0.0.2", 7370))
print(json.dumps(out), flush=True)
'''


@pytest.mark.netns
def test_hare_cache_is_refilled_after_a_switch_kill(rack_factory) -> None:  # type: ignore[no-untyped-def]
    """kill -9 of the switch while a client reads an offloaded key: the restarted switch's
    cache is empty, so the key is served by the server (never a wrong or stale value); the
    controller treats the slot as empty and refills it (e-MAT entries, REPLACING, the server
    moves the value again, VALID), after which the switch answers again."""
    if os.geteuid() != 0:
        pytest.skip("needs network namespaces (root)")
    from pathlib import Path

    from inswitch import _native
    from inswitch.apps.hare import kvsim
    from inswitch.p4rt import SwitchClient
    from inswitch.topology import netns, restarts

    st: RackState = rack_factory("h", 2, programs="forward,hare")
    h1, h2 = st.hosts
    sdir = Path(st.state_dir)
    key, slot = "/data/iot/owner=alice/device=thermostat-7", 0

    def fill(restart: dict | None = None) -> None:  # type: ignore[type-arg]
        """The controller's Steps 4-6 for one key, on an empty switch."""
        gen = restart["generation"] if restart else 1
        emat = _native.HareEmat(128, 8192)
        with SwitchClient(st.switch.p4runtime) as c:
            c.insert_entry("control_ports", {"ig_intr_md.ingress_port": h2.port}, "allow_control")
            cpu = lambda op, status: _native.hare_frame(kvsim.CPU, kvsim.server_ep(0), op, b"", 0, b"", 0, slot, 0, status, 0)  # noqa: E731
            c.packet_out(cpu(kvsim.OP_STATE_SET, kvsim.STATE_REPLACING))
            for mat, write, first, seg, index in emat.insert(key.encode(), slot):
                fields = ("hdr.hare.key_len", "hdr.hare.key_seg1") if mat == 0 else ("meta.emat_index", f"hdr.hare.key_seg{mat + 1}")
                c.insert_entry(f"emat_{mat + 1}", {fields[0]: int.from_bytes(first, "big"), fields[1]: int.from_bytes(seg, "big")}, "set_index", {"index": index})
            (sdir / "hare-replacing").write_text(str(gen))
            deadline = time.monotonic() + 15
            while (sdir / "hare-moved").read_text().strip() != str(gen) if (sdir / "hare-moved").exists() else True:
                assert time.monotonic() < deadline, "the server never moved the value"
                time.sleep(0.02)
            c.packet_out(cpu(kvsim.OP_STATE_SET, kvsim.STATE_VALID))
        refilled.append(time.time())

    refilled: list[float] = []
    server = subprocess.Popen(netns.netns_argv(h2.netns or "", [PY, "-c", HARE_SERVER, key, str(slot), "60", str(sdir)]),
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "READY"
        fill()
        with restarts.Watcher(sdir / "state.json", fill) as w:
            client = subprocess.Popen(netns.netns_argv(h1.netns or "", [PY, "-c", HARE_CLIENT, key, "9"]),
                                      stdout=subprocess.PIPE, text=True)
            time.sleep(1.5)
            t_kill = time.time()
            os.kill(st.switch.pid or 0, signal.SIGKILL)
            out, _ = client.communicate(timeout=60)
        stats = json.loads(server.communicate(timeout=30)[0].strip().splitlines()[-1])
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    assert not w.errors, w.errors
    got = json.loads(out.strip().splitlines()[-1])
    gets, put, after = got[:-4], got[-4], got[-3:]
    v0, v1 = (b"v0-" + bytes(61)).hex(), (b"v1-" + bytes(61)).hex()
    answered = [g for g in gets if not g.get("lost")]
    assert all(g["value"] == v0 for g in answered), "a wrong value was served"
    assert any(g["hit"] for g in answered if g["t"] < t_kill), "the switch served the key before the kill"
    assert len(refilled) == 2, "the controller refilled the cache once the switch was back"
    [rec] = restarts.read(sdir / "state.json", t_kill - 1)
    assert any(not g["hit"] for g in answered if rec["forwarding_at"] <= g["t"] < refilled[1]) or refilled[1] - rec["forwarding_at"] < 0.3, \
        "between the restart and the refill the server answered"
    assert any(g["hit"] for g in answered if g["t"] > refilled[1] + 0.1), "the refilled cache serves again"
    assert put["op"] == 4 and all(a["value"] == v1 and a["hit"] for a in after), (put, after)
    assert stats["moved"] == 2 and stats["served"] >= 1
