"""`inswitch tenants run --real`: every tenant instance a process on its own host of one
rack, around the switch process running `forward,inaas`, on the wall clock; each against its
host-only version (the same adapter, its requests to a server process on the rack's server
host, through the same switch forwarding only) in the same rack and run. Needs root.

Rack: host 1 the goalkeeper (`rack.GOALKEEPER`, the native goalkeeper on AF_PACKET), hosts
2..N+1 one tenant instance each (`real_tenant.py`: the unchanged adapter of
`adapters.py` over real frames), host N+2 the host-only servers (one UDP echo process per
tenant, as the in-process service's servers echo). The controller registers every tenant
(uid, slot, lease cap) over P4Runtime, as `tenants rack` does. Both phases start together
for all tenants (the runner releases them with one `GO` each), so tenants run concurrently.

Times: the hosts are Python processes, far slower than the model's microsecond hosts, so
the adapters' timers are the model's times × `SCALE` of wall time (retransmission
timeouts), their request gaps and lease lengths × `GAP_SCALE`; what is measured (latencies, throughput) is
plain wall-clock µs. Loss is the switch's own drop (`--fault loss=P,seed=S`), on every
frame through it, INaaS and host-only alike. The ledger comes from the switch's per-tenant
registers (`tenant_usage`, `tenant_events`) read over P4Runtime and the goalkeeper's count.
"""

from __future__ import annotations

import dataclasses
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from inswitch.apps.inaas.adapters import QUICK, RTO_US, App, Sizes
from inswitch.apps.inaas.controller import KIND, MAX_LEASE_US, Prices, bill, schedule
from inswitch.apps.inaas.rack import GOALKEEPER, _free_port, _p4_name
from inswitch.apps.inaas.runner import BUDGET, HIGHER_IS_BETTER

#: Wall µs per model µs for the hosts' timers and leases (see the module's docstring).
SCALE = 50
#: Wall µs per model µs between two open-loop requests of one tenant (the model's 4 µs gap
#: becomes 4 ms). Host-only requests cross the switch twice and wake a Python echo server; at
#: 1 ms gaps, 4-6 tenants' host-only requests saturated the switch process on this shared
#: 2-core machine (host-only medians of several ms, a queue's length, not a path's cost).
GAP_SCALE = 1000
#: Wall µs per model µs of a lease: as the request gap, so a lease outlives a workload phase
#: as it does in the model (at the timers' ×50, FQ's and FCFS's 10 ms leases became 0.5 s,
#: shorter than a 1.2 s KV phase after its setup, and nearly every KV read went through the
#: goalkeeper).
LEASE_SCALE = GAP_SCALE
#: Applications that run as real processes (all of them).
REAL_APPS = ("kv", "sparse", "dense", "bloom", "paxos")
MODE = "real processes: switch process (forward + inaas), goalkeeper, tenants and host-only servers in a rack of namespaces, wall clock"

SERVER = textwrap.dedent('''
    import select, socket, sys
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_RCVBUFFORCE", 33), 8 << 20)
    except OSError:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.bind((sys.argv[1], int(sys.argv[2])))
    s.setblocking(False)
    print("READY", flush=True)
    n = 0
    while True:
        r, _, _ = select.select([s, sys.stdin], [], [], 1.0)
        if sys.stdin in r and sys.stdin.readline() == "":
            break
        if s in r:
            while True:
                try:
                    p, a = s.recvfrom(65536)
                except BlockingIOError:
                    break
                n += 1
                s.sendto(p, a)  # the host-only server: answers every request (an echo)
    print(n, flush=True)
''')


class RealRunError(RuntimeError):
    """A bad combination or a missing privilege, said in one line."""


def check_args(apps: list[str], attacker: bool) -> None:
    bad = [a for a in apps if a not in REAL_APPS]
    if bad:
        raise RealRunError(f"--real cannot run {', '.join(bad)} (known: {', '.join(REAL_APPS)})")
    if attacker:
        raise RealRunError("--attacker is not available with --real (its forged frames come from the in-process service); use --sim")
    if os.geteuid() != 0:
        raise RealRunError("--real needs root (network namespaces, veth pairs, AF_PACKET sockets); run it with sudo, or use --sim")


def real_sizes(quick: bool) -> Sizes:
    s = dataclasses.replace(QUICK if quick else Sizes())
    s.kv_gap_us *= GAP_SCALE
    s.bloom_gap_us *= GAP_SCALE
    s.paxos_gap_us *= GAP_SCALE
    s.server_us = 0  # the real servers' and parameter server's time is in the wall clock
    return s


def _line(p: subprocess.Popen[str], timeout: float, what: str, err: Path) -> str:
    """The child's next stdout line within `timeout` seconds."""
    assert p.stdout is not None
    fd = p.stdout.fileno()
    out = bytearray()
    end = time.monotonic() + timeout
    while True:
        left = end - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise RuntimeError(f"{what}: no answer within {timeout:.0f} s; {_tail(err)}")
        b = os.read(fd, 1)
        if not b:
            raise RuntimeError(f"{what} exited ({p.wait()}): {_tail(err)}")
        if b == b"\n":
            return out.decode(errors="replace").strip()
        out += b


def _tail(err: Path) -> str:
    try:
        lines = err.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no stderr)"
    return " | ".join(lines[-3:]) or "(no stderr)"


def run_tenants_real(
    apps: list[str],
    instances: int = 1,
    scheduler: str = "inaas",
    loss: float = 0.0,
    quick: bool = True,
    seed: int = 1,
    progress: Callable[[str], None] = lambda s: None,
    budget: int = BUDGET,
    subscribers: tuple[str, ...] = (),
    name: str = "inaasreal",
) -> dict[str, Any]:
    from inswitch.p4rt.client import SwitchClient
    from inswitch.topology import Rack, netns

    check_args(apps, False)
    sizes = real_sizes(quick)
    names = [a for a in apps for _ in range(instances)]
    regions = schedule(scheduler, names, budget, [a in subscribers for a in names])
    rng = np.random.default_rng(seed)
    uids: list[int] = []
    while len(uids) < len(names):
        u = int(rng.integers(1, 2**31 - 1))
        if u not in uids:
            uids.append(u)
    rack = Rack()
    progress(f"rack {name}: {len(names) + 2} hosts")
    t_run = time.monotonic()
    # Paxos's acceptors are the `inaas_paxos` program (inaas + acceptors; tofino2), which the
    # model's in-process service runs for every tenant; without Paxos, `inaas` (tofino1).
    programs = "forward,inaas_paxos" if "paxos" in names else "forward,inaas"
    st = rack.up(len(names) + 2, name=name, programs=programs, p4runtime=f"127.0.0.1:{_free_port()}",
                 metrics=f"127.0.0.1:{_free_port()}", fault=f"loss={loss},seed={seed}" if loss > 0 else None)
    procs: list[subprocess.Popen[str]] = []
    logs = Path(tempfile.mkdtemp(prefix=f"inswitch-{name}-"))
    try:
        gk, hosts, srv = st.hosts[0], st.hosts[1:-1], st.hosts[-1]
        scaled = [min(MAX_LEASE_US, r.lease_us * LEASE_SCALE) for r in regions]
        with SwitchClient(st.switch.p4runtime) as c:
            tenants_t, gkt = _p4_name(c, "tenants"), _p4_name(c, "goalkeeper")
            c.insert_entry(gkt, {"meta.zero": 0}, "set_goalkeeper", {"port": gk.port})
            for slot, (h, uid, r, lease) in enumerate(zip(hosts, uids, regions, scaled)):
                cap = min(MAX_LEASE_US, r.max_lease_us * LEASE_SCALE)
                for port in (h.port, gk.port):
                    c.insert_entry(tenants_t, {"ig_intr_md.ingress_port": port, "hdr.inaas.uid": uid}, "set_tenant", {"slot": slot, "max_lease_us": cap})
        py = sys.executable
        hexmac = lambda m: m.replace(":", "")  # noqa: E731

        def start(h: Any, argv: list[str], tag: str) -> subprocess.Popen[str]:
            with open(logs / f"{tag}.err", "w") as err:  # the child keeps its own descriptor
                p = subprocess.Popen(netns.netns_argv(h.netns or "", [py, *argv]), stdout=subprocess.PIPE, stderr=err, stdin=subprocess.PIPE, text=True)
            procs.append(p)
            return p

        limit_s = 30.0 if quick else 120.0
        gk_p = start(gk, ["-c", GOALKEEPER, gk.ifname or "", hexmac(gk.mac), str(20 * limit_s),
                          json.dumps([[u, KIND[a], lease] for u, a, lease in zip(uids, names, scaled)])], "goalkeeper")
        if _line(gk_p, 30, "goalkeeper", logs / "goalkeeper.err") != "READY":
            raise RuntimeError("goalkeeper did not start")
        servers: list[list[subprocess.Popen[str]]] = []
        ports: list[list[int]] = []
        for i, a in enumerate(names):
            # Paxos's host-only version: phase 2 to three acceptor hosts (three processes).
            ports.append([9100 + 4 * i + k for k in range(3 if a == "paxos" else 1)])
            servers.append([])
            for port in ports[-1]:
                sp = start(srv, ["-c", SERVER, srv.ip, str(port)], f"server{port}")
                if _line(sp, 30, f"server {port}", logs / f"server{port}.err") != "READY":
                    raise RuntimeError(f"server {port} did not start")
                servers[-1].append(sp)
        tenants: list[tuple[str, subprocess.Popen[str]]] = []
        counter: dict[str, int] = {}
        for i, (a, h, uid, r, lease) in enumerate(zip(names, hosts, uids, regions, scaled)):
            inst = counter.get(a, 0)
            counter[a] = inst + 1
            cfg = {"app": a, "inst": inst, "index": i, "seed": seed, "uid": uid, "mac": hexmac(h.mac), "gk_mac": hexmac(gk.mac),
                   "ifname": h.ifname, "ip": h.ip, "server_ip": srv.ip, "server_ports": ports[i], "lease_us": lease,
                   "rto_us": RTO_US * SCALE, "bl_rto_us": App.BL_RTO_US * SCALE, "scale": SCALE, "phase_limit_s": limit_s,
                   "region": dataclasses.asdict(r), "sizes": dataclasses.asdict(sizes)}
            tag = f"{a}{inst}"
            tenants.append((tag, start(h, ["-m", "inswitch.apps.inaas.real_tenant", json.dumps(cfg)], tag)))
        for phase in ("inaas", "host"):
            for tag, p in tenants:
                got = _line(p, 120, f"tenant {tag}", logs / f"{tag}.err")
                if got != f"READY {phase}":
                    raise RuntimeError(f"tenant {tag} said {got!r}")
            progress(f"{phase} phase: {len(tenants)} tenants")
            for _, p in tenants:
                assert p.stdin is not None
                p.stdin.write("GO\n")
                p.stdin.flush()
            for tag, p in tenants:
                got = _line(p, limit_s + 60, f"tenant {tag}", logs / f"{tag}.err")
                if got != f"DONE {phase}":
                    raise RuntimeError(f"tenant {tag} said {got!r}")
        results = []
        for tag, p in tenants:
            results.append(json.loads(_line(p, 60, f"tenant {tag}", logs / f"{tag}.err")))
            p.wait(timeout=10)
        run_us = int((time.monotonic() - t_run) * 1e6)
        with SwitchClient(st.switch.p4runtime) as c:
            usage = []
            for slot in range(len(names)):
                u = dict(c.read_register("tenant_usage", slot)).get(slot, 0)
                e = dict(c.read_register("tenant_events", slot)).get(slot, 0)
                usage.append({"alu_ops": u & 0xFFFFFFFF, "packets": u >> 32, "mismatches": e & 0xFFFFFFFF, "leases": e >> 32})
        served = []
        for group in servers:
            n = 0
            for sp in group:
                so, _ = sp.communicate(input="", timeout=10)
                n += int(so.strip().splitlines()[-1])
            served.append(n)
        gk_out, _ = gk_p.communicate(input="", timeout=30)
        gk_res = json.loads(gk_out.strip().splitlines()[-1])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=5)
        rack.down(name)
        shutil.rmtree(logs, ignore_errors=True)  # what a failure needs is in its message
    out_apps: dict[str, Any] = {}
    ledger = []
    per_app: dict[str, list[float]] = {}
    prices = Prices()
    for res, r, u, uid in zip(results, regions, usage, uids):
        a, inst = res["app"], res["inst"]
        key = a if instances == 1 else f"{a}#{inst}"
        inaas, host = float(res["inaas"]), float(res["host_only"])
        speed = (inaas / host) if HIGHER_IS_BETTER[a] else (host / inaas)
        fig = {"metric": res["figure"], "inaas": inaas, "host_only": host, "unit": "items/us" if HIGHER_IS_BETTER[a] else "us",
               "speedup": speed, "wrong_results": res["wrong"], "finished": res["finished"], "correct": res["wrong"] == 0 and res["finished"]}
        fig.update(res.get("extra", {}))
        fig["client"] = {**res["client"], "server_answered": served[len(out_apps)]}
        fig["wall_s"] = res["wall_s"]
        lp = res.get("latency_percentiles") or {}
        if lp:
            fig["latency_percentiles"] = lp
        if "inaas" in lp and "host" in lp:
            # The median's ratio beside the mean's: on a loaded machine a few scheduling
            # delays of milliseconds move the mean (Table II's metric) far more.
            fig["speedup_p50"] = lp["host"]["p50_us"] / lp["inaas"]["p50_us"]
        out_apps[key] = fig
        per_app.setdefault(a, []).append(speed)
        ledger.append(bill(f"{a}#{inst}", u, int(gk_res["leases"].get(str(uid), 0)), dataclasses.replace(r, lease_us=min(MAX_LEASE_US, r.lease_us * LEASE_SCALE)), prices, run_us))
    load = os.getloadavg()
    return {
        "apps": out_apps,
        "speedup_by_app": {k: float(np.mean(v)) for k, v in per_app.items()},
        "instances": instances,
        "scheduler": scheduler,
        "subscribers": list(subscribers),
        "loss": loss,
        "mode": MODE,
        "real": {"rack": name, "hosts": len(names) + 2, "programs": programs, "time_scale": SCALE, "request_gap_scale": GAP_SCALE, "lease_scale": LEASE_SCALE, "rto_us": RTO_US * SCALE, "baseline_rto_us": App.BL_RTO_US * SCALE,
                 "loss_by": "switch --fault loss" if loss > 0 else None, "load_average": list(load), "budget_registers_per_segment": budget},
        "cross_tenant_violations": int(sum(r["foreign"] for r in results)),
        "attacker_detected": None,
        "attack": None,
        "ledger": ledger,
        "ledger_adds_up": all(line["adds_up"] for line in ledger),
        "goalkeeper": gk_res["stats"],
        "wall_us": run_us,
    }

