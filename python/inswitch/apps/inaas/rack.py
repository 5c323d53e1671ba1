"""INaaS between real processes: a rack of network namespaces around the switch process
running `forward,inaas`, the goalkeeper and two tenants' adapters as ordinary processes on
AF_PACKET sockets (INaaS frames are Ethernet frames of their own EtherType, so not UDP).
The controller registers the tenants over P4Runtime. Needs root.

Tenant A writes 20 pairs (one per segment) and reads them back; tenant B reads A's
registers with A's keys (it must get nothing), then writes and reads its own.

A switch that dies and comes back (the rack's supervisor) holds no registration, no lease
and no value: the controller registers the tenants again (and says so in the rack's state
directory, `inaas-generation`), and each tenant, before its next operation, waits for that
and then writes again everything it had written, which takes its leases again.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
import time
from typing import Any, Callable

from inswitch.procs import first_line
from inswitch.topology import Rack, netns
from inswitch.topology.switchproc import free_local_port

ETHERTYPE = 0x88B6

GOALKEEPER = textwrap.dedent('''
    import json, select, socket, sys, time
    from inswitch import _native
    ifname, mac, seconds, tenants = sys.argv[1], bytes.fromhex(sys.argv[2]), float(sys.argv[3]), json.loads(sys.argv[4])
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x88B6))
    try:  # a burst of lease notifications must not overflow the socket (root: past rmem_max)
        s.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_RCVBUFFORCE", 33), 8 << 20)
    except OSError:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.bind((ifname, 0x88B6)); s.settimeout(0.1)
    gk = _native.InaasGoalkeeper(mac)
    for uid, kind, lease in tenants:
        gk.register_tenant(uid, kind, lease)
    print("READY", flush=True)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            f, addr = s.recvfrom(4096)
        except socket.timeout:
            if select.select([sys.stdin], [], [], 0)[0] and sys.stdin.readline() == "":
                break
            continue
        if addr[2] == socket.PACKET_OUTGOING:
            continue
        for o in gk.on_frame(f, time.monotonic_ns() // 1000):  # grants logged on the shared monotonic clock
            s.send(o)
        if select.select([sys.stdin], [], [], 0)[0] and sys.stdin.readline() == "":
            break  # the runner closed our stdin: done
    print(json.dumps({"stats": gk.stats(), "leases": {str(u): gk.leases(u) for u, _, _ in tenants}, "held_closed": gk.held_closed(), "open_grants": gk.open_grants()}), flush=True)
''')

TENANT = textwrap.dedent('''
    import json, socket, sys, time
    import numpy as np
    from inswitch import _native
    ifname, mac, gk_mac, uid, plan = sys.argv[1], bytes.fromhex(sys.argv[2]), bytes.fromhex(sys.argv[3]), int(sys.argv[4]), json.loads(sys.argv[5])
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x88B6))
    s.bind((ifname, 0x88B6)); s.settimeout(0.05)
    state, marker = sys.argv[6], sys.argv[7]
    from inswitch.topology import restarts
    t_start = time.time(); handled = set(); seen = []; replayed = 0
    out = []
    writes = []
    seq = 0
    def wait_registered(gen):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if int(open(marker).read().strip() or 0) >= gen:
                    return
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
    def op(ops, idx, keys, values):
        global seq
        seq += 1
        n = len(keys)
        args = (bytes(range(n)), np.full(n, idx, "<u2").tobytes(), bytes([ops] * n), np.asarray(keys, "<u4").tobytes(), np.asarray(values, "<i4").tobytes())
        frame = _native.inaas_frame(mac, gk_mac, uid, seq, 1_000_000, *args)
        t0 = time.monotonic(); sent = t0; got = None; tries = 1
        s.send(frame)
        while got is None and time.monotonic() - t0 < 5:
            if time.monotonic() - sent > 0.5:
                s.send(_native.inaas_frame(mac, gk_mac, uid, seq, 1_000_000, *args, flags=1)); sent = time.monotonic(); tries += 1
            try:
                f, addr = s.recvfrom(4096)
            except socket.timeout:
                continue
            if addr[2] == socket.PACKET_OUTGOING:
                continue
            r = _native.inaas_reply(f)
            if r and r[1] == seq:
                got = r
        if got is None:
            return {"seq": seq, "lost": True}
        st = list(np.frombuffer(got[3], np.uint8)[:n]); vals = list(np.frombuffer(got[4], "<i8")[:n])
        return {"seq": seq, "status": [int(x) for x in st], "values": [int(v) for v in vals], "via_goalkeeper": bool(got[2] & 0x08), "tries": tries, "rtt_us": (time.monotonic() - t0) * 1e6}
    for step in plan:
        if step[0] == "pause":
            time.sleep(step[1]); continue
        new = [r for r in restarts.wait_back(state, t_start) if r["generation"] not in handled]
        for r in new:
            handled.add(r["generation"]); seen.append(r["generation"])
            wait_registered(r["generation"])
            for w in writes:  # the switch lost them: write again (taking the leases again)
                op(*w); replayed += 1
        if step[0] == 1:
            writes.append(step)
        out.append(op(*step))
    print(json.dumps({"ops": out, "restarts_seen": seen, "replayed_writes": replayed}), flush=True)
''')

READ, WRITE = 0, 1


def _p4_name(client: Any, want: str) -> str:
    names = [t.preamble.name for t in client.p4info().tables]
    for n in names:
        if n == want or n.endswith("." + want):
            return n
    raise RuntimeError(f"no table {want} in {names}")


def _fabric_tor(spec: str, name: str, fault: str | None) -> tuple[Any, list[Any], Any, Callable[[], None]]:
    """A fabric of `spec` whose first leaf with three hosts runs `forward,inaas` (every other
    switch `forward`): the fabric state, those three hosts, the leaf's run, and the teardown."""
    from inswitch.topology.fabric import tor as fabric_tor

    try:
        t = fabric_tor.up(spec, name, "forward,inaas", 3, fault)
    except ValueError as e:
        raise ValueError(f"INaaS needs a leaf with three hosts (goalkeeper, two tenants): {e}") from None
    return t.state, t.hosts[:3], t.run, t.down


def run_on_rack(name: str = "inaas1", seconds: float = 20.0, pause_a_s: float = 0.0,
                pcap: str | None = None, fault: str | None = None, fabric: str | None = None) -> dict[str, Any]:
    """Bring a 3-host rack up, run the goalkeeper and two tenants, take it down. Tenant A
    waits `pause_a_s` between its write and its read (time for a switch to die).

    `fabric` (a spec such as leaf-spine:2,1,3): the same, unchanged, on the ToR of the three
    hosts inside a fabric (the first leaf with three hosts runs `forward,inaas`, the others
    `forward`); the fabric controller's routing stays, this controller adds the tenants on
    the ToR (the fabric controller's election id) and again after the supervisor restarts it."""
    from pathlib import Path

    from inswitch.p4rt.client import SwitchClient
    from inswitch.topology import control, restarts

    if fabric is not None and pcap:
        raise ValueError("pcap captures a rack's switch: not on a fabric")
    rack = Rack()
    tor_name = ""
    if fabric is not None:
        from inswitch.topology.fabric.controller import ELECTION_ID

        fst, tor_hosts, tor, down = _fabric_tor(fabric, name, fault)
        tor_name = tor.plan.name
        hosts_, state_file, state_dir = tor_hosts, fst.restarts_file, Path(fst.state_dir)

        def client() -> Any:
            return control.connect(tor.p4runtime, device_id=tor.plan.device_id, election_id=ELECTION_ID, wait_s=10.0)
    else:
        try:
            st = rack.up(3, name=name, programs="forward,inaas", p4runtime=f"127.0.0.1:{free_local_port()}", metrics=f"127.0.0.1:{free_local_port()}", pcap=pcap,
                           fault=fault)
        except Exception:
            rack.down(name)
            raise
        hosts_, state_file, state_dir = st.hosts, Path(st.state_dir) / "state.json", Path(st.state_dir)

        def client() -> Any:
            return SwitchClient(st.switch.p4runtime)

        def down() -> None:
            rack.down(name)
    procs: list[subprocess.Popen[str]] = []
    watcher: restarts.Watcher | None = None
    try:
        gk, ta, tb = hosts_
        uids = {"a": 0x1234567, "b": 0x7654321}
        marker = state_dir / "inaas-generation"

        def register(restart: dict[str, Any] | None = None) -> None:
            if restart is not None and tor_name and restart.get("switch") != tor_name:
                # Another switch of the fabric (its routing is the supervisor's): the
                # tenants' state on the ToR is intact, nothing to register again.
                marker.write_text(str(restart["generation"]))
                return
            with client() as c:
                tenants, gkt = _p4_name(c, "tenants"), _p4_name(c, "goalkeeper")
                c.insert_entry(gkt, {"meta.zero": 0}, "set_goalkeeper", {"port": gk.port})
                for slot, (h, uid) in enumerate(((ta, uids["a"]), (tb, uids["b"]))):
                    for port in (h.port, gk.port):
                        c.insert_entry(tenants, {"ig_intr_md.ingress_port": port, "hdr.inaas.uid": uid}, "set_tenant", {"slot": slot, "max_lease_us": 60_000_000})
            marker.write_text(str(restart["generation"] if restart else 1))

        register()
        watcher = restarts.Watcher(state_file, register).__enter__()
        t_start = time.time()
        hexmac = lambda m: m.replace(":", "")  # noqa: E731
        py = sys.executable
        gk_proc = subprocess.Popen(
            netns.netns_argv(gk.netns or "", [py, "-c", GOALKEEPER, gk.ifname or "", hexmac(gk.mac), str(seconds), json.dumps([[uids["a"], "kv", 60_000_000], [uids["b"], "kv", 60_000_000]])]),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.PIPE, text=True,
        )
        procs.append(gk_proc)
        assert gk_proc.stdout is not None
        if first_line(gk_proc) != "READY":
            raise RuntimeError("goalkeeper did not start: " + (gk_proc.stderr.read() if gk_proc.stderr else ""))
        keys = [100 + j for j in range(20)]
        plan_a = [[WRITE, 5, keys, [1000 + j for j in range(20)]], ["pause", pause_a_s], [READ, 5, keys, [0] * 20]]
        plan_b = [[READ, 5, keys, [0] * 20], [WRITE, 6, keys, [2000 + j for j in range(20)]], [READ, 6, keys, [0] * 20]]

        def tenant(h: Any, uid: int, plan: list) -> list[dict]:
            cp = subprocess.run(
                netns.netns_argv(h.netns or "", [py, "-c", TENANT, h.ifname or "", hexmac(h.mac), hexmac(gk.mac), str(uid), json.dumps(plan),
                                               str(state_file), str(marker)]),
                capture_output=True, text=True, timeout=60,
            )
            if cp.returncode != 0:
                raise RuntimeError(cp.stderr)
            return json.loads(cp.stdout.strip().splitlines()[-1])

        res_a = tenant(ta, uids["a"], plan_a)
        res_b = tenant(tb, uids["b"], plan_b)
        gk_out, gk_err = gk_proc.communicate(input="", timeout=seconds + 10)
        gk_res = json.loads(gk_out.strip().splitlines()[-1])
        watcher.__exit__(None, None, None)
        watcher_done, watcher = watcher, None
        recs = restarts.read(state_file, t_start)
        doc = {"mode": f"the ToR ({tor_name}) of a fabric {fabric}, real processes, AF_PACKET" if fabric is not None else "rack of network namespaces, real processes, AF_PACKET",
               "tenant_a": res_a["ops"], "tenant_b": res_b["ops"],
               "goalkeeper": gk_res, "switch_restarts": recs, "reregistered_generations": sorted(watcher_done.handled),
               "replayed_writes": {"a": res_a["replayed_writes"], "b": res_b["replayed_writes"]}}
        if recs:
            doc["restart_note"] = "; ".join(
                f"the switch died ({r['exit']}) and was forwarding again {r.get('recovery_s', '?')} s later (generation {r['generation']})"
                for r in recs) + (f"; the controller registered the tenants again, and the tenants wrote again "
                                  f"{res_a['replayed_writes'] + res_b['replayed_writes']} operations' worth of state (re-acquiring their leases)")
        return doc
    finally:
        if watcher is not None:
            watcher.__exit__(None, None, None)
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=5)
        down()
        time.sleep(0.1)
