"""The lock manager served to real client processes in a rack (`inswitch locks --backend
real`): Hare (dynamic offloading, the locks' dirty state moved on and off the switch),
the NetLock-style static baseline (the initially hottest locks offloaded once) and no
offloading, each in the same rack, measured on the wall clock.

Client hosts run `lockgen` (closed-loop lock clients on UDP 7371); storage hosts run the
lock server agent (`agent.py --app lock`: `lockapp.LockServer`, the K3 application); the
switch runs `hare_lock`, granting and queueing offloaded locks itself (waiters' grants
through `lock_hosts` and a recirculated clone, session 91). This process is the
controller: the K3 framework (`framework.Hare`) over P4Runtime and the agents' Unix
sockets, as for the KV store (`redisrack`).

Every run is checked: the holds every client recorded ([grant received, release sent],
one monotonic clock for the machine) never put an exclusive hold beside any other hold of
the same lock (`mutex_violations`), and every request was answered (`lost_requests`).

Each agent keeps its lock table in a write-ahead journal in its host's directory
(`lockapp.LockJournal`, replayed at its start), so a `kill -9` of an agent mid-run
(`kill_agent_at`) loses no grant, release or waiter; the run reports the window the agent
was down (`agent_restarts`)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from inswitch.apps.hare import framework
from inswitch.apps.hare.lockapp import KEY, QUEUE
from inswitch.apps.hare.lockgen import orders
from inswitch.apps.hare.redisrack import AgentLink, Marks, NoControl, RackParams, RedisRack, RemoteServer, RoundControl, start_together, step

LOCK_RACK_SYSTEMS = ("hare", "netlock", "none")
GRANT_SESSION = 91
PORT_RECIRC = 0xFFF1


@dataclass
class LockRackParams:
    n_locks: int = 2000
    cache: int = 64
    clients: int = 2
    clients_per_host: int = 8
    servers: int = 2
    hold_s: float = 1e-3
    retry_s: float = 2e-4
    excl_ratio: float = 0.5
    alpha: float = 0.99
    duration: float = 4.0
    shift_at: Optional[float] = 2.0
    batch: int = 16
    t_wait: float = 0.1
    seed: int = 5
    lost_s: float = 2.0
    #: An unanswered request is sent again after this long (0: never; None: longer than
    #: any wait in a queue, `resend_after`): what carries a client across a lock
    #: server's restart. Only the servers answer a retransmission from their table: the
    #: switch would queue it twice, so a waiter must never be taken for lost.
    resend_s: Optional[float] = None
    workdir: Optional[str] = None
    #: kill -9 lock agent `kill_agent` this many seconds into each run, and start it again
    #: (its table replayed from its journal); None: no kill.
    kill_agent_at: Optional[float] = None
    kill_agent: int = 0


def resend_after(lp: LockRackParams) -> float:
    """When an unanswered request is sent again: a waiter has at most every other client
    ahead of it, each holding once, so twice that (and a quarter second for the machine's
    stalls) is longer than any answer can take from a live server or the switch."""
    if lp.resend_s is not None:
        return lp.resend_s
    return 0.25 + 2 * lp.clients * lp.clients_per_host * lp.hold_s


def lock_key(i: int) -> bytes:
    return int(i).to_bytes(KEY, "big")


def lock_server_of(key: bytes, servers: int) -> int:
    """A lock's server: its id modulo the servers (as in the trace replay)."""
    return int.from_bytes(key, "big") % servers


class LockRemoteServer(RemoteServer):
    """A lock agent as the framework sees a backend server: its state is dirty on the
    switch, so eviction brings it home (`datamv_back`)."""

    DATAMV_PACKETS_TO_SWITCH = QUEUE + 1
    DATAMV_PACKETS_TO_SERVER = QUEUE + 2

    def datamv_switch2server(self, key: bytes, slot: int) -> None:
        r = self.link.call(cmd="datamv_back", key=key.hex(), slot=slot)
        if not r.get("ok"):
            raise RuntimeError(f"agent {self.idx}: moving a lock home failed: {r.get('error')}")


class LockControl(RoundControl):
    """The K3 framework over the lock agents; `dynamic` False is NetLock's static
    offloading: the `cache` initially hottest locks, once, at the start.

    An agent that dies under a round (`AgentDown`) cuts it short as for the KV store
    (`RoundControl`); the framework's undo never drops a lock's state from the switch
    before it is home (`Hare.abandon`, `Hare.home_or_stay`)."""

    def __init__(self, sw: Any, links: list[AgentLink], p: LockRackParams, dynamic: bool) -> None:
        servers = [LockRemoteServer(i, link) for i, link in enumerate(links)]
        fp = framework.FrameworkParams(p.cache, p.batch, p.t_wait, 1e12, 1e12, "age")
        self.fw = framework.Hare(sw, "hare_lock", KEY, servers, lambda k: lock_server_of(k, len(links)), fp)
        self.fw.moving = Marks(links, lambda k: lock_server_of(k, len(links)))
        for s in servers:
            s.moving = self.fw.moving
        self.dynamic = dynamic
        if not dynamic:
            o0, _o1 = orders(p.n_locks, p.cache, p.seed)
            for lock in o0[: p.cache]:
                self.fw.offload(lock_key(int(lock)), self.fw.emat.free_slot())

    def step(self, now: float) -> None:
        if self.dynamic and self.cut_short(lambda: self.fw.tick(now)):
            self.fw.next_round = max(self.fw.next_round, now + self.fw.p.t_wait)

    def moves_redone(self) -> int:
        return self.fw.moves_redone

    def counters(self) -> dict[str, int]:
        return {"offloads": self.fw.offloads, "evictions": self.fw.evictions, "table_ops": self.fw.table_ops, "packet_ops": self.fw.packet_ops,
                "undo_homes": self.fw.undo_homes, "undo_stays": self.fw.undo_stays, **self.round_counters()}


class LockRack(RedisRack):
    """The rack of `redisrack` with lock agents and no Redis."""

    def __init__(self, lp: LockRackParams, name: Optional[str] = None) -> None:
        self.lp = lp
        super().__init__(RackParams(clients=lp.clients, servers=lp.servers, cache=lp.cache, batch=lp.batch, t_wait=lp.t_wait, key_field=KEY, workdir=lp.workdir), name=name)
        if name is None:
            self.name = self.name.replace("hr", "hl", 1)

    def start_redis(self, i: int) -> None:
        """No store: the lock servers keep their tables in memory, and journal them."""

    def journal(self, i: int) -> Path:
        return self.sdir(i) / "locks.journal"

    def agent_argv(self, i: int, ctl: str) -> list[str]:
        return [sys.executable, "-m", "inswitch.apps.hare.agent", "--app", "lock", "--idx", str(i), "--ctl", ctl,
                "--switch-dst", self.client_hosts[0].ip, "--k", str(self.lp.batch), "--journal", str(self.journal(i))]

    def use(self, system: str) -> Any:  # type: ignore[override]
        from inswitch.p4rt import SwitchClient
        from inswitch.topology import control

        if system not in LOCK_RACK_SYSTEMS:
            raise ValueError(f"system must be one of {', '.join(LOCK_RACK_SYSTEMS)}")
        assert self.client is not None
        progs = ["forward"] + ([f"hare_lock:key={KEY}:slots={self.lp.cache}"] if system != "none" else [])
        self.client.set_pipeline(progs)
        self.client.close()
        control.program_forwarding(self.st.switch.p4runtime, self.st.hosts, len(self.st.hosts))
        self.client = SwitchClient(self.st.switch.p4runtime)
        from inswitch.apps.hare.redisrack import P4rtSwitch

        self.sw = P4rtSwitch(self.client, KEY)
        if system != "none":
            for h in self.storage_hosts:
                self.client.insert_entry("hare_lock.control_ports", {"ig_intr_md.ingress_port": h.port}, "hare_lock.allow_control")
            for h in self.client_hosts:
                ip = int.from_bytes(bytes(int(x) for x in h.ip.split(".")), "big")
                self.client.insert_entry("hare_lock.lock_hosts", {"hdr.ipv4.dst_addr": ip}, "hare_lock.set_host", {"port": h.port, "mac": int(h.mac.replace(":", ""), 16)})
            self.client.set_clone_session(GRANT_SESSION, [PORT_RECIRC])
        self.sw.take_packet_ins()
        self.system = system
        for i in range(self.lp.servers):
            self.stop_agent(i)
            self.journal(i).unlink(missing_ok=True)  # a new system starts with no lock held
            self.start_agent(i)
        if system == "none":
            return NoControl()
        return LockControl(self.sw, self.links, self.lp, dynamic=system == "hare")

    def run_locks(self, system: str, control: Any, progress: Optional[Callable[[float], None]] = None) -> dict[str, Any]:  # noqa: C901
        lp = self.lp
        procs, outs = [], []
        for c, h in enumerate(self.client_hosts):
            out = self.dir / f"{system}-locks{c}.json"
            outs.append(out)
            args = {"clients": lp.clients_per_host, "client_base": c * lp.clients_per_host, "servers": lp.servers, "server_ips": self.server_ips,
                    "n_locks": lp.n_locks, "cache": lp.cache, "seed": lp.seed, "alpha": lp.alpha, "excl_ratio": lp.excl_ratio,
                    "hold_s": lp.hold_s, "retry_s": lp.retry_s, "lost_s": lp.lost_s, "resend_s": resend_after(lp), "start_ns": None, "duration": lp.duration,
                    "shift_at": lp.shift_at, "out": str(out)}
            procs.append(subprocess.Popen(self.in_host(h, [sys.executable, "-m", "inswitch.apps.hare.lockgen", json.dumps(args)]),
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        start_ns = start_together(procs)
        t0 = start_ns / 1e9
        # The control loop's clock runs from the first run that drives it (as in
        # `RedisRack._drive`): a loop that goes on into another run keeps its pace.
        if getattr(control, "epoch", None) is None:
            control.epoch = t0
        errors: list[str] = []
        kills: list[tuple[float, float]] = []
        while any(pr.poll() is None for pr in procs):
            now = time.monotonic() - t0
            if lp.kill_agent_at is not None and not kills and now >= lp.kill_agent_at:
                # between two control steps, as `RedisRack._drive`: the clients' requests
                # to it go unanswered until its restart has replayed its journal
                kills.append(self.kill9("agent", lp.kill_agent))
                continue
            if now >= 0:
                step(control, time.monotonic() - control.epoch, errors)
                if progress:
                    progress(min(1.0, now / lp.duration))
            time.sleep(0.005)
        for pr in procs:
            if pr.returncode != 0:
                raise RuntimeError(f"lock client failed: {pr.stderr.read()[-2000:] if pr.stderr else ''}")
        results = [json.loads(o.read_text()) for o in outs]
        out = measure(results, start_ns, lp, control, errors, [link.call(cmd="stats")["counters"] for link in self.links])
        out["agent_restarts"] = [restart_report(results, start_ns, lp, lp.kill_agent, a - t0, b - t0) for a, b in kills]
        return out


def mutex_violations(holds: list[list[Any]]) -> tuple[int, list[str]]:
    """Pairs of holds of one lock that overlap in time with at least one exclusive; a few
    examples. `holds`: [lock, exclusive, start_ns, end_ns, client]."""
    by_lock: dict[int, list[tuple[int, int, bool, int]]] = {}
    for lock, excl, a, b, c in holds:
        by_lock.setdefault(int(lock), []).append((int(a), int(b), bool(excl), int(c)))
    n, ex = 0, []
    for lock, hs in by_lock.items():
        hs.sort()
        for i, (a, b, x, c) in enumerate(hs):
            for a2, b2, x2, c2 in hs[i + 1 :]:
                if a2 >= b:
                    break
                if x or x2:
                    n += 1
                    if len(ex) < 5:
                        ex.append(f"lock {lock}: client {c} ({'X' if x else 'S'}) and {c2} ({'X' if x2 else 'S'}) overlap {(b - a2) / 1e3:.1f} us")
    return n, ex


def measure(results: list[dict[str, Any]], start_ns: int, lp: LockRackParams, control: Any, errors: list[str], agents: list[dict[str, int]]) -> dict[str, Any]:
    holds = [h for r in results for h in r["holds"]]
    samples = np.array([s for r in results for s in r["samples"]], dtype=np.int64).reshape(-1, 2)
    t = (samples[:, 0] - start_ns) / 1e9
    lat = samples[:, 1] / 1e3
    ends = np.array([h[3] for h in holds], dtype=np.int64)
    te = (ends - start_ns) / 1e9
    n_sec = int(np.ceil(lp.duration))
    thr = [float(((te >= s) & (te < s + 1)).sum()) for s in range(n_sec)]
    p99s = [float(np.percentile(lat[(t >= s) & (t < s + 1)], 99)) if ((t >= s) & (t < s + 1)).any() else None for s in range(n_sec)]
    viol, examples = mutex_violations(holds)
    st = {k: sum(r["stats"][k] for r in results) for k in results[0]["stats"]} if results else {}
    return {
        "throughput_tps": float(((te >= 0) & (te < lp.duration)).sum() / lp.duration),
        "p50_us": float(np.percentile(lat, 50)) if len(lat) else None,
        "p99_us": float(np.percentile(lat, 99)) if len(lat) else None,
        "p999_us": float(np.percentile(lat, 99.9)) if len(lat) else None,
        "correct": viol == 0 and st.get("lost", 0) == 0 and not errors,
        "mutex_violations": viol,
        "violation_examples": examples,
        "lost_requests": st.get("lost", 0),
        "lost_examples": [e for r in results for e in r.get("lost_examples", [])][:5],
        "holds": len(holds),
        "clients": st,
        "series": {"bucket_s": 1.0, "throughput_tps": thr, "p99_us": p99s},
        "control": control.counters(),
        "control_errors": errors,
        "agents": agents,
    }


def restart_report(results: list[dict[str, Any]], start_ns: int, lp: LockRackParams, agent: int, killed_s: float, back_s: float) -> dict[str, Any]:
    """An agent's kill -9 and restart in a run: when (seconds into it), how long it was
    down (`down_s`: the kill to its restart's READY, its journal replayed), and the holds
    ended per second before the kill and after the restart (every lock server's)."""
    ends = np.array([h[3] for r in results for h in r["holds"]], dtype=np.int64)
    te = (ends - start_ns) / 1e9
    after = max(lp.duration - back_s, 1e-9)
    return {"agent": agent, "killed_at_s": round(killed_s, 4), "back_at_s": round(back_s, 4), "down_s": round(back_s - killed_s, 4),
            "tps_before": float(((te >= 0) & (te < killed_s)).sum() / max(killed_s, 1e-9)) if killed_s > 0 else None,
            "tps_after": float(((te >= back_s) & (te < lp.duration)).sum() / after) if back_s < lp.duration else None}


def run_all(systems: list[str], lp: LockRackParams, progress: Optional[Any] = None) -> dict[str, Any]:
    out: dict[str, Any] = {"config": {**asdict(lp), "backend": "real",
                                      "path": "real processes in a rack: lock server agents, the switch daemon running hare_lock, lock clients in client namespaces; wall-clock time"},
                           "systems": {}}
    with LockRack(lp) as rack:
        for name in systems:
            task = progress.add_task(name, total=1.0) if progress else None
            ctl = rack.use(name)
            out["systems"][name] = rack.run_locks(name, ctl, (lambda f, task=task: progress.update(task, completed=f)) if progress else None)
    return out
