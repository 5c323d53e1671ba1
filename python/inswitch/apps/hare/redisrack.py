"""Hare, NetCache, DySO and no caching in front of real Redis servers in a rack, driven
by real client processes, time measured (issue 17; `inswitch kvs --backend redis`).

The rack (`topology.Rack`, network namespaces and the switch daemon): client hosts
h1..hC run the load generators (`loadgen.py`) or the RESP proxy; storage hosts run
`redis-server` (append-only file, `appendfsync always`) and the storage agent
(`agent.py`). This process is the switch's controller: it loads each system's program
over P4Runtime in the same rack, installs what the system needs, and runs the system's
control loop while the clients run:

- hare: the K3 framework itself (`framework.Hare`) with the switch behind P4Runtime
  (`P4rtSwitch`: e-MAT writes as table writes, OO-Stat and slot states as PacketOuts
  answered by PacketIns) and the agents behind their Unix sockets (`RemoteServer`:
  NOO-Stat, the D-modifier, the state manager's marks);
- netcache: hot-key reports cloned to the controller, installed with register and table
  writes (the switch-OS path), values fetched from the key's agent, the key marked moving
  at its agent while it is installed (so no write slips between read and install);
- dyso: the analyzer (`dyso_ctl`, as in the trace replay) on the agents' QO-Record, each
  offload one packet from the key's agent (`DysoControl`);
- none: forwarding only.

Every run is checked: the recorded histories per key (`hare.history`), and Redis read
back for lost writes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from inswitch import _native  # type: ignore[attr-defined]
from inswitch.apps.hare import framework
from inswitch.apps.hare.dyso_ctl import DysoAnalyzer, dyso_row
from inswitch.apps.hare.netcache_ctl import NetCacheController
from inswitch.hare import fastload, history, wire, ycsb
from inswitch.hare.client import server_index
from inswitch.periodic import Periodic
from inswitch.topology import restarts
from inswitch.topology.switchproc import free_local_port

RACK_SYSTEMS = ("hare", "netcache", "dyso", "none")
#: The agent requests only an offloading round of each system makes, after which an agent
#: crash leaves the round half done: Hare's marks and data movements; NetCache's value
#: read (its key already marked at that agent); DySO's offload packet.
ROUND_REQUESTS = {"hare": ("move", "datamv"), "netcache": ("cell",), "dyso": ("datamv",)}
#: This controller's P4Runtime role on a fabric's ToR (`RedisRack.connect`).
FABRIC_ROLE = "kvs"
PORT_CPU = 0xFFF0
NETCACHE_REPORT_SESSION = 90


@dataclass
class RackParams:
    workload: str = "ycsb-b"
    records: int = 2000
    field_size: int = 32
    duration: float = 6.0
    shift: str = "hot-in"
    shift_count: int = 200
    #: Seconds into the run of the (first) shift; hot-in / random shift every second after.
    shift_at: Optional[float] = None
    clients: int = 2
    servers: int = 2
    window: int = 32
    cache: int = 128
    batch: int = 32
    t_wait: float = 0.2
    key_field: int = 64
    value_size: int = 64
    seed: int = 1
    netcache_threshold: int = 16
    #: DySO's r-MAT columns; its rows are `cache` / columns (a power of two).
    dyso_columns: int = 2
    #: Seconds between DySO's analyzer rounds (QO-Record fetch, offload).
    dyso_round_s: float = 0.05
    qo_record: int = 4096
    #: Where each Redis keeps its append-only file (None: the system's temp dir). On a
    #: tmpfs an fsync is nearly free: quicker tests, no durability across a reboot.
    workdir: Optional[str] = None
    #: The switch's seeded fault injection on every port (`loss=P,dup=P,reorder=P,seed=N`).
    fault: Optional[str] = None
    #: The load generators' engine (`loadgen.py`): "python", the client library with every
    #: operation in the checker's history; "native", `hare.fastload` (the same history,
    #: and each GET's value checked by the generator itself when it is the only writing
    #: client; ycsb-d drawn natively, its inserts growing the key set).
    engine: str = "python"
    #: The native engine records the history (off only to measure what it costs: the
    #: linearizability checker then does not run, and a run with several writing clients
    #: is not checked at all; `measure` reports null, not 0).
    native_history: bool = True
    #: A fabric spec (`leaf-spine:2,1,3`): the hosts are one leaf's, inside that fabric, and
    #: that leaf (their ToR) runs the system's programs under this controller while the
    #: fabric controller keeps the routing of every switch (None: a one-switch rack).
    fabric: Optional[str] = None
    #: On a fabric: the clients are hosts of the N-th leaf (switch with hosts, in the
    #: topology's order; 1 = the first), the storage hosts the ToR's; another leaf than the
    #: ToR puts the clients across the spine (None: the clients are the ToR's too).
    client_leaf: Optional[int] = None

    @property
    def dyso_rows(self) -> int:
        return 1 << max(0, (max(1, self.cache // self.dyso_columns) - 1).bit_length())

    def shift_times(self) -> list[float]:
        if self.shift == "none":
            return []
        t0 = self.shift_at if self.shift_at is not None else self.duration / 2
        if self.shift == "coldest-to-top":
            return [t0]
        return [float(t) for t in np.arange(t0, self.duration, 1.0)]


# ---- the switch behind P4Runtime ------------------------------------------------------------


def placement(spec: str, clients: int, servers: int, client_leaf: Optional[int]) -> tuple[str, str]:
    """The ToR (the storage hosts' leaf, running the system) and the clients' leaf on the
    fabric `spec`: without `client_leaf`, the first leaf with `clients + servers` hosts for
    both; with it, the clients under that leaf and the ToR the first leaf with room for the
    storage hosts (and the clients, if they share it). ValueError (one line) if none fits."""
    from inswitch.topology.fabric import tor
    from inswitch.topology.fabric.generators import load_spec

    under = tor.leaves(load_spec(spec))
    if client_leaf is None:
        t = next((sw for sw, hs in under.items() if len(hs) >= clients + servers), None)
        if t is None:
            raise ValueError(f"--fabric {spec} has no leaf with {clients + servers} hosts (--clients {clients} + --servers {servers})")
        return t, t
    names = list(under)
    if client_leaf > len(names):
        raise ValueError(f"--client-leaf {client_leaf}: --fabric {spec} has {len(names)} leaves")
    cl = names[client_leaf - 1]
    if len(under[cl]) < clients:
        raise ValueError(f"--client-leaf {client_leaf}: {cl} has {len(under[cl])} hosts, fewer than --clients {clients}")
    t = next((sw for sw, hs in under.items() if len(hs) >= servers + (clients if sw == cl else 0)), None)
    if t is None:
        raise ValueError(f"--fabric {spec} has no leaf with {servers} hosts for --servers {servers} beside the clients")
    return t, cl


class SwitchRestarted(RuntimeError):
    """The switch a control step was talking to has died."""


class P4rtSwitch:
    """The control calls the in-process switch (`_native.SimSwitch`) offers, over P4Runtime
    to the rack's switch, so the same control code drives either."""

    def __init__(self, client: Any, key_field: int, generation: int = 1) -> None:
        self.c, self.key_field = client, key_field
        self.lock = threading.Lock()
        self.reports: list[bytes] = []
        #: The switch generation this session talks to; `dead` is set once a later one is
        #: seen (or this one died), so a control step stops at its next switch call
        #: instead of waiting out every timeout against a dead switch.
        self.generation = generation
        self.dead = threading.Event()
        #: Stamped into each packet-out (the switch echoes it in the DONE reply), so a
        #: reply is matched to its request and a late one to a timed-out request is not.
        self.seqs = wire.Seqs()

    def alive(self) -> None:
        if self.dead.is_set():
            raise SwitchRestarted(f"switch generation {self.generation} died")

    def packet_out(self, frame: bytes, timeout: float = 0.5) -> list[bytes]:
        """Through the ingress pipeline from the CPU port; the control reply it causes."""
        self.alive()
        with self.lock:
            [frame] = self._stamp([frame])
            want = _native.hare_parse(frame)
            self.c.packet_out(frame)
            end = time.monotonic() + timeout
            while time.monotonic() < end:
                for f, _port in self.c.packet_ins(timeout=max(0.0, end - time.monotonic())):
                    m = _native.hare_parse(f)
                    if m is not None and m[1] & wire.FLAG_DONE:
                        if want is not None and self._reply_key(m) == self._reply_key(want):
                            return [f]
                        continue  # a late reply to a timed-out request: not a report
                    self.reports.append(f)
        return []

    def _stamp(self, frames: list[bytes]) -> list[bytes]:
        return [f[: wire.L4_END] + wire.with_seq(f[wire.L4_END :], self.seqs.next()) if len(f) >= wire.L4_END + wire.HEADER.size else f for f in frames]

    @staticmethod
    def _reply_key(m: Any) -> tuple[int, int, int]:
        """What ties a DONE reply to its request: op, slot and sequence number."""
        return (m[0], m[3], m[2])

    def packet_out_many(self, frames: list[bytes], timeout: float = 1.0) -> list[list[bytes]]:
        """All frames out, then their control replies (matched by op and slot), in order."""
        self.alive()
        with self.lock:
            frames = self._stamp(frames)
            want = [_native.hare_parse(f) for f in frames]
            keys = {self._reply_key(w) for w in want if w is not None}
            got: dict[tuple[int, int, int], list[bytes]] = {}
            for f in frames:
                self.c.packet_out(f)
            end = time.monotonic() + timeout
            while len(got) < len(keys) and time.monotonic() < end:
                for f, _port in self.c.packet_ins(timeout=max(0.0, end - time.monotonic())):
                    m = _native.hare_parse(f)
                    if m is not None and m[1] & wire.FLAG_DONE:
                        if self._reply_key(m) in keys:
                            got[self._reply_key(m)] = [f]
                    else:
                        self.reports.append(f)
        return [got.get(self._reply_key(w), []) if w is not None else [] for w in want]

    def take_packet_ins(self) -> list[bytes]:
        with self.lock:
            out = self.reports + [f for f, _p in self.c.packet_ins(timeout=0)]
            self.reports = []
        return out

    @staticmethod
    def _emat_fields(table: str) -> tuple[str, str]:
        n = int(table.rsplit("_", 1)[1])
        return ("hdr.hare.key_len", "hdr.hare.key_seg1") if n == 1 else ("meta.emat_index", f"hdr.hare.key_seg{n}")

    def table_write(self, program: str, table: str, op: str, keys: list[bytes], action: str, params: list[bytes]) -> None:
        self.alive()
        if table.startswith("emat_"):
            names = self._emat_fields(table)
            pnames = ["index"]
        elif table == "cache":
            names, pnames = ("hdr.hare.key_len", "hdr.hare.key"), ["slot"]
            keys = [keys[0], keys[1] + bytes(self.key_field - len(keys[1]))]  # the whole key field
        else:
            raise ValueError(f"no P4Runtime mapping for {program}.{table}")
        match = {n: int.from_bytes(k, "big") for n, k in zip(names, keys)}
        name = f"{program}.{table}"
        with self.lock:
            if op == "delete":
                self.c.delete_entry(name, match)
            elif op == "modify":
                self.c.modify_entry(name, match, f"{program}.{action}", {pn: int.from_bytes(v, "big") for pn, v in zip(pnames, params)})
            else:
                self.c.insert_entry(name, match, f"{program}.{action}", {pn: int.from_bytes(v, "big") for pn, v in zip(pnames, params)})

    def register_write(self, program: str, reg: str, index: Optional[int], value: int) -> None:
        with self.lock:
            self.c.write_register(f"{program}.{reg}", index, value)

    def register_read(self, program: str, reg: str, index: int) -> int:
        with self.lock:
            got = self.c.read_register(f"{program}.{reg}", index)
        return got[0][1] if got else 0


# ---- the agents behind their Unix sockets -----------------------------------------------------


class AgentDown(ConnectionError):
    """The agent behind a link did not answer (its process died): what a control step
    meets when an agent crashes under it."""


class AgentLink:
    def __init__(self, path: str, timeout: float = 5.0) -> None:
        self.path, self.timeout = path, timeout
        self.lock = threading.Lock()
        #: Agent processes this link has talked to (1 + restarts): a mark set at an
        #: earlier one is gone (`Marks.lost`).
        self.generation = 0
        #: Called with each request before it is sent (fault injection: `run_load`'s
        #: "agent-round").
        self.before_call: Optional[Callable[[dict[str, Any]], None]] = None
        self.reconnect()

    def reconnect(self) -> None:
        """To the agent now at `path` (after a restart)."""
        self.generation += 1
        if getattr(self, "sock", None) is not None:
            self.sock.close()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)
        self.buf = b""

    def call(self, **req: Any) -> dict[str, Any]:
        if self.before_call is not None:
            self.before_call(req)
        with self.lock:
            try:
                self.sock.sendall(json.dumps(req).encode() + b"\n")
                while b"\n" not in self.buf:
                    d = self.sock.recv(1 << 20)
                    if not d:
                        raise AgentDown(f"agent at {self.path} closed")
                    self.buf += d
            except AgentDown:
                raise
            except OSError as e:
                raise AgentDown(f"agent at {self.path}: {type(e).__name__}: {e}") from e
            line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def close(self) -> None:
        self.sock.close()


class RemoteNoo:
    """An agent's NOO-Stat, as the framework calls it."""

    def __init__(self, link: AgentLink) -> None:
        self.link = link

    def top(self) -> list[tuple[bytes, int]]:
        return [(bytes.fromhex(k), int(c)) for k, c in self.link.call(cmd="top")["top"]]

    def age(self) -> None:
        self.link.call(cmd="age")

    def clear(self) -> None:
        self.link.call(cmd="clear")

    def forget(self, key: bytes) -> None:
        self.link.call(cmd="forget", key=key.hex())


class RemoteServer:
    """A storage agent as the framework sees a backend server."""

    DATAMV_PACKETS_TO_SWITCH = 1
    DATAMV_PACKETS_TO_SERVER = 0

    def __init__(self, idx: int, link: AgentLink) -> None:
        self.idx, self.link, self.noo = idx, link, RemoteNoo(link)
        self.moving: set[bytes] = set()

    def datamv_server2switch(self, key: bytes, slot: int) -> None:
        r = self.link.call(cmd="datamv", key=key.hex(), slot=slot)
        if not r.get("ok"):
            raise RuntimeError(f"agent {self.idx}: data movement failed: {r.get('error')}")

    def datamv_switch2server(self, key: bytes, slot: int) -> None:
        """Write-through: nothing dirty on the switch."""


class Marks(set):  # type: ignore[type-arg]
    """The state manager's set of moving objects, mirrored at each object's agent before
    `add` returns (so from then on the agent answers the object's queries "retry")."""

    def __init__(self, links: list[AgentLink], server_of: Optional[Callable[[bytes], int]] = None) -> None:
        super().__init__()
        self.links = links
        self.server_of = server_of or (lambda k: server_index(k, len(links)))
        #: The agent process (its link's generation) each mark was set at.
        self.at: dict[bytes, int] = {}

    def add(self, key: bytes) -> None:  # type: ignore[override]
        link = self.links[self.server_of(key)]
        link.call(cmd="move", key=key.hex(), on=True)
        self.at[key] = link.generation
        super().add(key)

    def discard(self, key: bytes) -> None:  # type: ignore[override]
        if key in self:
            self.at.pop(key, None)
            self.links[self.server_of(key)].call(cmd="move", key=key.hex(), on=False)
        super().discard(key)

    def held(self, key: bytes) -> bool:
        """Whether the mark of `key` is still at its agent: false once the agent has been
        restarted since (a new process starts with no mark, so it may have applied a
        write of the object in the middle of its move)."""
        return key in self and self.at.get(key) == self.links[self.server_of(key)].generation


# ---- the systems' control loops --------------------------------------------------------------


class RoundControl:
    """What every system's control loop does when a storage agent dies under one of its
    offloading rounds (the request meets `AgentDown`): the system has undone the rest of
    the round (no object left marked moving, no half-moved value served: `Hare.abandon`,
    `NetCacheController.undo`, `DysoControl.cut`); here the round is counted
    (`interrupted_rounds`) and the caller waits a period before the next, once the agent is
    back (until then each round stops at its first request to it)."""

    interrupted_rounds = 0

    def cut_short(self, round_: Callable[[], object]) -> bool:
        """Run `round_`; True when an agent's death cut it short."""
        try:
            round_()
        except AgentDown:
            self.interrupted_rounds += 1
            return True
        return False

    def moves_redone(self) -> int:
        raise NotImplementedError

    def round_counters(self) -> dict[str, int]:
        return {"interrupted_rounds": self.interrupted_rounds, "moves_redone": self.moves_redone()}


class HareControl(RoundControl):
    def __init__(self, sw: P4rtSwitch, links: list[AgentLink], p: RackParams) -> None:
        servers = [RemoteServer(i, link) for i, link in enumerate(links)]
        # Rounds are paced by what their interactions really take here: no modelled cost.
        fp = framework.FrameworkParams(p.cache, p.batch, p.t_wait, 1e12, 1e12, "age")
        self.fw = framework.Hare(sw, "hare", p.key_field, servers, lambda k: server_index(k, len(links)), fp)
        self.fw.moving = self.moving = Marks(links)
        for s in servers:
            s.moving = self.fw.moving

    def step(self, now: float) -> None:
        if self.cut_short(lambda: self.fw.tick(now)):
            self.fw.next_round = max(self.fw.next_round, now + self.fw.p.t_wait)

    def moves_redone(self) -> int:
        return self.fw.moves_redone

    def counters(self) -> dict[str, int]:
        return {"offloads": self.fw.offloads, "evictions": self.fw.evictions, "table_ops": self.fw.table_ops, "packet_ops": self.fw.packet_ops,
                **self.round_counters()}


class NetCacheControl(RoundControl):
    """NetCache's controller (`netcache_ctl`) on reports cloned to the CPU port; values
    from the key's agent, the key marked moving there while it is installed.

    Reports queue up (one per key, at most `4 × cache` keys; more are dropped and counted,
    as a switch CPU queue overflows) and each step installs for at most `STEP_BUDGET_S`:
    an install is dozens of P4Runtime calls (and a sample of hit-counter reads once the
    cache is full), and the burst of reports after a hotspot shift or a statistics clear
    used to hold one step for seconds, in which the controller neither saw the switch die
    nor let anything else in its loop run.

    An install an agent's death cuts short is undone and its key queued again at the
    front (the switch's Bloom filter would not report it again before the next clear);
    installs pause for `t_wait`."""

    STEP_BUDGET_S = 0.05

    def __init__(self, sw: P4rtSwitch, links: list[AgentLink], p: RackParams) -> None:
        self.sw, self.links, self.pause_s = sw, links, p.t_wait
        self.moving = Marks(links)
        self.nc = NetCacheController(sw, p.cache, p.value_size, p.netcache_threshold, moving=self.moving)
        self.next_clear = 1.0
        self.pending: dict[bytes, None] = {}  # reported keys, oldest first
        self.max_pending = 4 * p.cache
        self.reports_dropped = 0
        self.paused_until = 0.0

    def value_of(self, key: bytes) -> bytes:
        return bytes.fromhex(self.links[server_index(key, len(self.links))].call(cmd="cell", key=key.hex())["cell"])

    def step(self, now: float) -> None:
        if now >= self.next_clear:
            self.next_clear += 1.0
            self.nc.clear()
        for f in self.sw.take_packet_ins():
            m = _native.hare_parse(f)
            if m is not None and m[0] == wire.OP_GET:
                key = bytes(m[6])
                if key in self.pending or key in self.nc.cached:
                    continue
                if len(self.pending) >= self.max_pending:
                    self.reports_dropped += 1
                    continue
                self.pending[key] = None
        if now < self.paused_until:
            return
        end = time.monotonic() + self.STEP_BUDGET_S
        while self.pending and time.monotonic() < end:
            key = next(iter(self.pending))
            del self.pending[key]
            if self.cut_short(lambda: self.nc.install(key, self.value_of)):
                self.pending = {key: None, **self.pending}
                self.paused_until = now + self.pause_s
                return

    def moves_redone(self) -> int:
        return self.nc.moves_redone

    def counters(self) -> dict[str, int]:
        return {"offloads": self.nc.offloads, "evictions": self.nc.evictions, "table_ops": self.nc.table_ops, "packet_ops": 0,
                "reports_dropped": self.reports_dropped, **self.round_counters()}


class DysoControl(RoundControl):
    """DySO's analyzer (`dyso_ctl`) on the QO-Record the agents keep of the queries that
    reach them, and its modifier: each offload is one packet (key, value, column) from the
    key's agent, which reads the value from Redis between two batches of queries, so no
    write of the key interleaves with it; a later write-through's reply refreshes the cell.

    The dyso program keeps no QO-Record in the data plane, so queries the switch answers
    are not recorded: an offloaded key's count only ages, and it is evicted once a colder
    key of its row outgrows it (then its misses count again and bring it back). This
    churns more than DySO would — the correctness check runs through it.

    A round an agent's death cuts short (`cut`): the cell whose offload packet was in
    flight holds either key, so the analyzer forgets it; the rows of the round's undone
    offloads are planned again next round (the dead agent's QO-Record died with it, so
    their keys' queries may not be recorded again soon); a later round's offload of a key
    the cut round left undone counts in `moves_redone`. DySO marks nothing moving."""

    def __init__(self, links: list[AgentLink], p: RackParams) -> None:
        self.links, self.p = links, p
        rows = p.dyso_rows
        self.an = DysoAnalyzer[bytes](p.dyso_columns, lambda k: dyso_row(k, p.key_field, rows))
        self.next_round = 0.0
        self.packets = 0
        self.moving: set[bytes] = set()
        self.replan: set[int] = set()
        self.undone: set[bytes] = set()
        self.redone = 0

    def step(self, now: float) -> None:
        if now < self.next_round:
            return
        self.next_round = now + self.p.dyso_round_s
        self.cut_short(lambda: self.round(now))

    def round(self, now: float) -> None:
        counts: dict[bytes, float] = {}
        try:
            for link in self.links:
                for k, n in link.call(cmd="qo")["qo"]:
                    counts[bytes.fromhex(k)] = float(n)
        finally:  # what the live agents handed over (and forgot) is counted
            rows = self.an.record(counts, now) | self.replan
        self.replan = set()
        plan = self.an.changes(rows)
        for i, (r, c, key) in enumerate(plan):
            try:
                got = self.links[server_index(key, len(self.links))].call(cmd="datamv", key=key.hex(), slot=0, aux=c)
            except AgentDown:
                self.cut(plan[i:])
                raise
            self.packets += 1
            if not got.get("ok"):
                raise RuntimeError(f"dyso: offload of {key!r} failed: {got.get('error')}")
            self.an.installed(r, c, key)
            if key in self.undone:
                self.undone.discard(key)
                self.redone += 1

    def cut(self, rest: list[tuple[int, int, bytes]]) -> None:
        """`rest[0]`'s agent died under its offload; `rest` left undone."""
        r, c, _key = rest[0]
        self.an.cells.pop((r, c), None)
        self.replan |= {r for r, _c, _k in rest}
        self.undone |= {k for _r, _c, k in rest}

    def moves_redone(self) -> int:
        return self.redone

    def counters(self) -> dict[str, int]:
        return {"offloads": self.an.offloads, "evictions": max(0, self.an.offloads - len(self.an.cells)), "table_ops": 0, "packet_ops": self.packets,
                **self.round_counters()}


def start_together(procs: list[subprocess.Popen], lead_s: float = 0.2, timeout: float = 120.0) -> int:
    """Wait until every load process has prepared (it prints READY), then give them all
    one start time on the monotonic clock (shared across namespaces) over stdin; the start
    time. A fixed lead would let a slow start (a loaded machine) eat into the measurement."""
    import select

    end = time.monotonic() + timeout
    for pr in procs:
        assert pr.stdout is not None
        ready, _, _ = select.select([pr.stdout], [], [], max(0.0, end - time.monotonic()))
        line = pr.stdout.readline() if ready else ""
        if not line.startswith("READY"):
            for q in procs:
                q.kill()
            raise RuntimeError(f"a load process did not get ready: {line!r} {pr.stderr.read()[-2000:] if pr.stderr else ''}")
    start_ns = time.monotonic_ns() + int(lead_s * 1e9)
    for pr in procs:
        assert pr.stdin is not None
        pr.stdin.write(f"{start_ns}\n")
        pr.stdin.flush()
    return start_ns


def wait_start(p: dict[str, Any]) -> int:
    """The load process's side of `start_together`."""
    if p.get("start_ns") is not None:
        return int(p["start_ns"])
    print("READY", flush=True)
    return int(sys.stdin.readline())


def step(control: Any, now: float, errors: list[str]) -> None:
    """One turn of a system's control loop; a failure is recorded (the run is then not
    `correct`) and the loop goes on."""
    try:
        control.step(now)
    except Exception as e:
        if len(errors) < 5:
            errors.append(f"{type(e).__name__}: {e}")


class NoControl:
    def step(self, now: float) -> None:
        pass

    def counters(self) -> dict[str, int]:
        return {"offloads": 0, "evictions": 0, "table_ops": 0, "packet_ops": 0}


def program_of(system: str, p: RackParams) -> list[str]:
    if system == "hare":
        return ["forward", f"hare:key={p.key_field}:value={p.value_size}:slots={p.cache}"]
    if system == "netcache":
        return ["forward", f"netcache:key={p.key_field}:value={p.value_size}:slots={p.cache}:threshold={p.netcache_threshold}"]
    if system == "dyso":
        return ["forward", f"dyso:key={p.key_field}:value={p.value_size}:rows={p.dyso_rows}:columns={p.dyso_columns}"]
    if system == "none":
        return ["forward"]
    raise ValueError(f"system must be one of {', '.join(RACK_SYSTEMS)}")


# ---- the rack -------------------------------------------------------------------------------


#: The file in a rack's work directory naming the process that made it.
OWNER_FILE = "owner.pid"


def sweep_workdirs(workdir: Optional[str]) -> list[Path]:
    """Remove the work directories (Redis files, agent logs) that racks left in `workdir`
    (None: the system's temporary directory) when their process was killed before `down`:
    those whose owner process is gone. Returns what was removed. A directory without an
    owner file is not ours, and one whose owner lives belongs to another run."""
    base = Path(workdir or tempfile.gettempdir())
    removed: list[Path] = []
    try:
        entries = list(base.iterdir())
    except OSError:
        return removed
    for d in entries:
        try:
            pid = int((d / OWNER_FILE).read_text().strip())
        except (OSError, ValueError):
            continue
        if pid > 0 and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


class RedisRack:
    """Clients h1..hC, storage hosts after them, each with redis-server and an agent."""

    def __init__(self, p: RackParams, name: Optional[str] = None, first: str = "none") -> None:
        """`first`: the system used first; on a fabric the ToR starts with its programs
        (another system's replace them, and the fabric's routing is installed again)."""
        from inswitch.topology.state import process_tag

        self.p = p
        # A fabric's name prefixes its interfaces: at most 6 characters.
        self.name = name or (f"hf{process_tag()[-4:]}" if p.fabric else f"hr{process_tag()}")
        self.first = first
        #: On a fabric: the fabric and its ToR (`topology.fabric.tor`), the program set the
        #: ToR runs now, and whether nothing has been installed on it since it started.
        self.tor: Any = None
        self.loaded = ""
        self.fresh = False
        self.hosts: list[Any] = []
        sweep_workdirs(p.workdir)
        self.dir = Path(tempfile.mkdtemp(prefix=f"{self.name}-", dir=p.workdir))
        os.chmod(self.dir, 0o755)
        (self.dir / OWNER_FILE).write_text(str(os.getpid()))
        self.redis: list[Optional[subprocess.Popen]] = []
        self.agents: list[Optional[subprocess.Popen]] = []
        self.links: list[AgentLink] = []
        self.st: Any = None
        self.client: Any = None
        self.sw: Optional[P4rtSwitch] = None
        self.system = "none"
        #: Switch generations whose restart this controller has recovered from.
        self.recovered: dict[int, float] = {}
        #: The control loop of the system in use (`use`; replaced after a restart).
        self.control: Any = None
        #: Agents found down by the last recovery from a switch restart (`recover`).
        self.agents_down_at_recovery = 0
        #: The last run's per-client results (`run_load`), with their history rows.
        self.last_results: list[dict[str, Any]] = []

    # hosts
    @property
    def client_hosts(self) -> list[Any]:
        return self.hosts[: self.p.clients]

    @property
    def storage_hosts(self) -> list[Any]:
        return self.hosts[self.p.clients :]

    @property
    def p4runtime(self) -> str:
        """The switch's (on a fabric: the ToR's) P4Runtime address; a restart keeps it."""
        return str(self.tor.run.p4runtime if self.tor is not None else self.st.switch.p4runtime)

    def connect(self) -> Any:
        """This controller's session. On a fabric's ToR it is primary of its own P4Runtime
        role, so the fabric controller (the default role's primary, at a higher election id)
        can write the routing at any time, e.g. when the supervisor restarts a switch, and
        this controller never contends with it; PacketIns go to both roles' primaries."""
        from inswitch.p4rt import SwitchClient

        if self.tor is None:
            return SwitchClient(self.p4runtime)
        return SwitchClient(self.p4runtime, device_id=self.tor.run.plan.device_id, role=FABRIC_ROLE)

    @property
    def server_ips(self) -> list[str]:
        return [h.ip for h in self.storage_hosts]

    def sdir(self, i: int) -> Path:
        return self.dir / f"s{i}"

    def redis_sock(self, i: int) -> str:
        return str(self.sdir(i) / "redis.sock")

    def __enter__(self) -> "RedisRack":
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def up(self) -> None:
        from inswitch.topology import Rack

        self.rack = Rack()
        try:
            if self.p.fabric is not None:
                self.up_fabric()
            else:
                self.st = self.rack.up(self.p.clients + self.p.servers, name=self.name, programs="forward", p4runtime=f"127.0.0.1:{free_local_port()}",
                                       metrics=f"127.0.0.1:{free_local_port()}", fault=self.p.fault)
                self.hosts = list(self.st.hosts)
            for i in range(self.p.servers):
                self.sdir(i).mkdir()
                self.redis.append(None)
                self.agents.append(None)
                self.start_redis(i)
            self.client = self.connect()
            self.sw = P4rtSwitch(self.client, self.p.key_field)
        except BaseException:
            self.down()
            raise

    def up_fabric(self) -> None:
        """The fabric, its ToR running the first system's programs; the storage hosts are
        the ToR's, the clients too or (`client_leaf`) another leaf's, across the spine: a
        hit to a routed GET goes back to the neighbour it came from (`hare::back_to_sender`)."""
        from inswitch.topology.fabric import tor

        p = self.p
        assert p.fabric is not None
        t, cl = placement(p.fabric, p.clients, p.servers, p.client_leaf)
        local = p.servers + (p.clients if cl == t else 0)
        program = ",".join(program_of(self.first, p))
        self.tor = tor.up(p.fabric, self.name, program, local, p.fault, tor=t)
        self.st = self.tor.state
        self.loaded, self.fresh = program, True
        if cl == t:
            self.hosts = self.tor.hosts[:local]
        else:
            self.hosts = [h for h in self.tor.others if h.switch == cl][: p.clients] + self.tor.hosts[: p.servers]

    @property
    def tor_name(self) -> str:
        return str(self.tor.name) if self.tor is not None else ""

    def mode(self) -> str:
        """Where the run is (the JSON's `mode`)."""
        if self.tor is None:
            return "rack of network namespaces: one switch"
        clients = ", ".join(h.name for h in self.client_hosts)
        where = {h.switch for h in self.client_hosts}
        if where == {self.tor_name}:
            return (f"the ToR ({self.tor_name}) of a fabric {self.p.fabric}: storage hosts {', '.join(h.name for h in self.storage_hosts)} and "
                    f"clients {clients} under it; the other switches forward under the fabric controller")
        return (f"the ToR ({self.tor_name}) of a fabric {self.p.fabric}: storage hosts {', '.join(h.name for h in self.storage_hosts)} under it, "
                f"clients {clients} under {', '.join(sorted(where))} (across the spine); the other switches forward under the fabric controller")

    def in_host(self, h: Any, argv: list[str]) -> list[str]:
        from inswitch.topology import netns

        return netns.netns_argv(h.netns, argv)

    def start_redis(self, i: int) -> None:
        d = self.sdir(i)
        argv = ["redis-server", "--port", "6379", "--bind", "0.0.0.0", "--protected-mode", "no", "--unixsocket", str(d / "redis.sock"), "--unixsocketperm", "777",
                "--dir", str(d), "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--logfile", str(d / "redis.log")]
        self.redis[i] = subprocess.Popen(self.in_host(self.storage_hosts[i], argv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.redis_conn(i, wait=10.0).ping()

    def redis_conn(self, i: int, wait: float = 0.0) -> Any:
        import redis

        end = time.monotonic() + wait
        while True:
            try:
                r = redis.Redis(unix_socket_path=self.redis_sock(i), socket_timeout=10.0)
                r.ping()
                return r
            except redis.exceptions.RedisError:
                if time.monotonic() >= end:
                    raise
                # Finely: a restart's "serving again" time (`kill9`) is when this answers,
                # and the agent, retrying on its own, may serve before a coarse poll would.
                time.sleep(0.005)

    def agent_argv(self, i: int, ctl: str) -> list[str]:
        p = self.p
        return [sys.executable, "-m", "inswitch.apps.hare.agent", "--idx", str(i), "--redis", self.redis_sock(i), "--ctl", ctl,
                "--switch-dst", self.switch_dst(i), "--key-field", str(p.key_field), "--value-size", str(p.value_size), "--k", str(p.batch),
                "--qo-record", str(p.qo_record if self.system == "dyso" else 0)]

    def switch_dst(self, i: int) -> str:
        """Where agent `i` addresses its control packets (the switch turns them back): a
        host under the same switch, so they are not routed (a client, or on a fabric whose
        clients are under another leaf, another host of the ToR)."""
        if self.tor is None or {h.switch for h in self.client_hosts} == {self.tor_name}:
            return str(self.client_hosts[0].ip)
        me = self.storage_hosts[i].name
        return str(next((h.ip for h in self.tor.hosts if h.name != me), self.client_hosts[0].ip))

    def start_agent(self, i: int) -> None:
        ctl = str(self.sdir(i) / "agent.sock")
        argv = self.agent_argv(i, ctl)
        with open(self.sdir(i) / "agent.log", "ab") as log:
            proc = subprocess.Popen(self.in_host(self.storage_hosts[i], argv), stdout=subprocess.PIPE, stderr=log, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert proc.stdout is not None
        if not proc.stdout.readline().startswith("READY"):
            raise RuntimeError(f"agent {i} did not start: " + (self.sdir(i) / "agent.log").read_text()[-2000:])
        self.agents[i] = proc
        if i < len(self.links):
            self.links[i].reconnect()  # the controllers hold this link
        else:
            self.links.append(AgentLink(ctl))

    def stop_agent(self, i: int, sig: int = signal.SIGTERM) -> None:
        a = self.agents[i]
        if a is not None and a.poll() is None:
            a.send_signal(sig)
            try:
                a.wait(timeout=5)
            except subprocess.TimeoutExpired:
                a.kill()
                a.wait()
        self.agents[i] = None

    def use(self, system: str) -> Any:
        """Load the system's program into the switch, restart the agents, load the records;
        the system's control loop."""
        self.install(system)
        for i in range(self.p.servers):
            self.stop_agent(i)
            self.start_agent(i)
        self.load()
        self.control = self.new_control(system)
        return self.control

    def install(self, system: str) -> None:
        """The system's program and what it needs on the switch, on an empty cache: at
        `use`, and again on a restarted switch (which starts with forwarding only)."""
        from inswitch.p4rt import SwitchClient
        from inswitch.topology import control

        assert self.client is not None
        self.system = system
        if self.tor is not None:
            want = ",".join(program_of(system, self.p))
            if want != self.loaded or not self.fresh:
                # Another system's programs, or an earlier loop's cache on the switch: the
                # fabric controller loads the programs (empty) and installs the ToR's
                # routing again.
                self.client.close()
                with self.tor.connect() as c:
                    c.set_pipeline(program_of(system, self.p))
                self.tor.program_routing()
                self.loaded = want
                self.client = self.connect()
            self.fresh = False
        else:
            self.client.set_pipeline(program_of(system, self.p))
            # The rack's own forwarding setup takes the controller session for a moment.
            self.client.close()
            control.program_forwarding(self.st.switch.p4runtime, self.st.hosts, len(self.st.hosts))
            self.client = SwitchClient(self.st.switch.p4runtime)
        gen = self.generation()
        self.sw = P4rtSwitch(self.client, self.p.key_field, gen)
        self.recovered.setdefault(gen, time.time())  # installed on this generation
        if system in ("hare", "dyso"):
            for h in self.storage_hosts:
                self.client.insert_entry(f"{system}.control_ports", {"ig_intr_md.ingress_port": h.port}, f"{system}.allow_control")
        if system == "netcache":
            self.client.set_clone_session(NETCACHE_REPORT_SESSION, [PORT_CPU])
        self.sw.take_packet_ins()

    def new_control(self, system: str) -> Any:
        """The system's control loop, knowing of no cached object."""
        assert self.sw is not None
        if system == "hare":
            return HareControl(self.sw, self.links, self.p)
        if system == "netcache":
            return NetCacheControl(self.sw, self.links, self.p)
        if system == "dyso":
            return DysoControl(self.links, self.p)
        return NoControl()

    @property
    def state_file(self) -> Path:
        return Path(self.tor.state.restarts_file) if self.tor is not None else Path(self.st.state_dir) / "state.json"

    def mine(self, r: dict[str, Any]) -> bool:
        """Whether a restart record is of this controller's switch (on a fabric, another
        switch's restart leaves the ToR's state alone: the supervisor restores its routing)."""
        return self.tor is None or r.get("switch") == self.tor_name

    def generation(self) -> int:
        """The rack's switch generation (1 until its first restart; on a fabric, the
        fabric's record number of the ToR's last restart)."""
        return max((int(r["generation"]) for r in restarts.read(self.state_file) if self.mine(r)), default=1)

    def watch_deaths(self, stop: threading.Event) -> None:
        """Marks the controller's switch session dead as soon as the supervisor records a
        death (a thread of `run_load`)."""
        while not stop.wait(0.05):
            sw = self.sw
            if sw is not None and not sw.dead.is_set() and self.generation() > sw.generation:
                sw.dead.set()

    def recover(self, old: Any) -> Any:
        """After a switch restart: the restarted switch holds no cached object, so the
        controller treats the cache as empty (a fresh control loop, no slot, no e-MAT
        entry), lifts the marks of objects that were moving when the switch died (their
        agents would answer "retry" forever), installs the system again, and the loop
        refills the cache from the agents' statistics. Write-through: nothing the dead
        switch held was newer than Redis, so nothing is lost."""
        # An agent that is down now lost its marks with its process (a new one starts with
        # none), so there is nothing to lift there; it is counted and skipped, and its
        # link reconnects when it is started again.
        self.agents_down_at_recovery = 0
        for link in self.links:
            try:
                link.call(cmd="unmark_all")
            except AgentDown:
                self.agents_down_at_recovery += 1
        old_client = self.client
        if old_client is not None:
            try:
                old_client.close()
            except Exception:  # the dead switch's session: nothing to close cleanly
                pass
        if self.tor is not None:
            # the supervisor restarts it with its programs at `up`, empty
            self.loaded, self.fresh = self.tor.run.plan.program, True
        self.client = self.connect()
        self.install(self.system)
        ctl = self.new_control(self.system)
        ctl.retired = getattr(old, "retired", []) + [old.counters()]
        return ctl

    def initial(self) -> dict[bytes, Optional[bytes]]:
        return {ycsb.record_key(r): ycsb.field_value(r, 0, 0, self.p.field_size) for r in range(self.p.records)}

    def load(self) -> None:
        """Every Redis emptied, then the records loaded into their owners."""
        conns = [self.redis_conn(i) for i in range(self.p.servers)]
        for r in conns:
            r.flushall()
        pipes = [r.pipeline(transaction=False) for r in conns]
        for k, v in self.initial().items():
            pipes[server_index(k, self.p.servers)].set(k, v)
        for pp in pipes:
            pp.execute()

    def read_back(self, keys: list[bytes]) -> dict[bytes, Optional[bytes]]:
        conns = [self.redis_conn(i, wait=10.0) for i in range(self.p.servers)]
        out: dict[bytes, Optional[bytes]] = {}
        for k in keys:
            out[k] = conns[server_index(k, self.p.servers)].get(k)
        return out

    def down(self) -> None:
        for link in self.links:
            link.close()
        for i in range(len(self.agents)):
            self.stop_agent(i)
        for i, r in enumerate(self.redis):
            if r is not None and r.poll() is None:
                r.terminate()
                try:
                    r.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    r.kill()
                    r.wait()
        if self.client is not None:
            self.client.close()
        if self.tor is not None:
            try:
                self.tor.down()
            except Exception as e:
                print(f"warning: taking fabric {self.name} down failed: {e} (run `inswitch fabric down --name {self.name}`)", file=sys.stderr)
        elif self.st is not None:  # a failed `up` has taken its half-made rack down itself
            try:
                self.rack.down(self.name)
            except Exception as e:  # say so, without hiding the error that brought us here
                print(f"warning: taking rack {self.name} down failed: {e} (run `inswitch rack down --name {self.name}`)", file=sys.stderr)
        shutil.rmtree(self.dir, ignore_errors=True)

    # ---- one measured run --------------------------------------------------------------------

    def kill9(self, what: str, i: int) -> tuple[float, float]:
        """SIGKILL storage host `i`'s agent or Redis, then start it again (Redis replays its
        append-only file), or the rack's switch; (killed, serving again) on the monotonic
        clock."""
        if what == "switch":  # the rack's supervisor restarts it; `run_load` recovers
            from inswitch.topology import load_state
            from inswitch.topology.fabric.fabric import FabricState

            # its pid now (a restart changes it)
            if self.tor is not None:
                cur = FabricState.load(self.name) or self.tor.state
                pid = next(s.pid for s in cur.switches if s.plan.name == self.tor_name)
            else:
                pid = (load_state(self.name) or self.st).switch.pid
            t_kill = time.monotonic()
            os.kill(pid, signal.SIGKILL)
            return t_kill, t_kill
        proc = self.agents[i] if what == "agent" else self.redis[i]
        assert proc is not None
        t_kill = time.monotonic()
        proc.kill()
        proc.wait()
        if what == "agent":
            self.agents[i] = None
            self.start_agent(i)
        else:
            self.start_redis(i)
        return t_kill, time.monotonic()

    def kill_in_round(self, i: int, restart: bool = False, cmds: Optional[tuple[str, ...]] = None) -> dict[str, Any]:
        """Arm a SIGKILL of storage host `i`'s agent at the controller's next request to it
        that only an offloading round makes (`ROUND_REQUESTS` of the system in use: for
        Hare, marking an object moving or moving its data to the switch; for NetCache,
        reading a marked key's value; for DySO, an offload packet): the request then meets
        a dead agent, in the middle of the round, and `_drive` starts the agent again
        after the control step. `restart`: the agent
        is started again before the request goes on (the round carries on with a new
        agent process, which holds none of the round's marks). `cmds`: only at one of
        these requests (default `ROUND_REQUESTS`). Returns the state it fills
        in (`killed_at`, `back_at`, monotonic; `during`, the request)."""
        state: dict[str, Any] = {"killed_at": None, "back_at": None, "during": None}
        link = self.links[i]

        def hook(req: dict[str, Any]) -> None:
            if req.get("cmd") not in (cmds or ROUND_REQUESTS.get(self.system, ())) or state["killed_at"] is not None:
                return
            proc = self.agents[i]
            assert proc is not None
            state["killed_at"] = time.monotonic()
            proc.kill()
            proc.wait()
            self.agents[i] = None
            state["during"] = dict(req)
            link.before_call = None
            if restart:
                self.start_agent(i)
                state["back_at"] = time.monotonic()

        link.before_call = hook
        return state

    def run_load(self, system: str, control: Any, progress: Optional[Callable[[float], None]] = None, fault: Optional[tuple[str, float, int]] = None,
                 initial: Optional[dict[bytes, Optional[bytes]]] = None) -> dict[str, Any]:
        """One measured run; `fault` = (agent|redis|switch, seconds in, storage host) kills
        that process with SIGKILL mid-run and restarts it (the switch: its supervisor);
        "agent-round" kills the agent from inside the first offloading round after that
        time (`kill_in_round`); "switch-agent" kills the agent and the switch together and
        starts the agent again once the controller has recovered from the restart (each
        recovery reports `agents_down`).
        The controller runs in this loop, so it is between two rounds at the kill and
        resumes after the restart. `initial`: what the store holds at the start (default:
        the records as `load` writes them), for a run that follows another without a load."""
        problem = fastload.unsupported(self.p.workload, self.p.shift, len(self.client_hosts)) if self.p.engine == "native" else None
        if problem:
            raise ValueError(problem)
        p = self.p
        procs = []
        outs = []
        for c, h in enumerate(self.client_hosts):
            out = self.dir / f"{system}-client{c}.json"
            outs.append(out)
            args = {"servers": self.server_ips, "key_field": p.key_field, "value_size": p.value_size, "window": p.window, "workload": p.workload,
                    "records": p.records, "field_size": p.field_size, "seed": p.seed * 1000 + c, "shift_seed": p.seed, "client": c + 1,
                    "start_ns": None, "duration": p.duration, "shift": p.shift, "shift_count": p.shift_count, "shift_times": p.shift_times(), "out": str(out),
                    "engine": p.engine, "clients": len(self.client_hosts), "history": p.native_history,
                    # room for the history before the run (untouched pages cost nothing)
                    "reserve": int(min(p.duration, 60.0) * 250_000)}
            if p.engine == "native" and initial is not None:
                args["initial"] = {k.hex(): None if v is None else v.hex() for k, v in initial.items()}
            procs.append(subprocess.Popen(self.in_host(h, [sys.executable, "-m", "inswitch.apps.hare.loadgen", json.dumps(args)]),
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        start_ns = start_together(procs)
        t0 = start_ns / 1e9
        ctl_errors: list[tuple[float, str]] = []
        self._fault_at: Optional[tuple[float, float]] = None
        self._fault_during: Optional[dict[str, Any]] = None
        since = time.time()
        recoveries: list[dict[str, Any]] = []
        stop_watch = threading.Event()
        watch = threading.Thread(target=self.watch_deaths, args=(stop_watch,), name="switch-deaths", daemon=True)
        watch.start()
        try:
            # the loop after a recovery is a new one: the next run goes on with it
            control = self.control = self._drive(procs, control, t0, fault, progress, ctl_errors, since, recoveries)
        finally:
            stop_watch.set()
            watch.join(5)
        fault_at = self._fault_at
        for pr in procs:
            if pr.returncode != 0:
                raise RuntimeError(f"load generator failed: {pr.stderr.read()[-2000:] if pr.stderr else ''}")
        results = [json.loads(o.read_text()) for o in outs]
        self.last_results = results  # each client's history and unacknowledged writes, for tests
        for r in results:  # the native engine's samples come as arrays
            if "samples_npy" in r:
                r["samples"] = np.load(r.pop("samples_npy"))
                r["served"] = np.load(r.pop("served_npy"))
            if "history_npz" in r:  # its history as the python engine's rows
                with np.load(r.pop("history_npz")) as h:
                    recs, unacked = fastload.records(h, [bytes(k) for k in h["keys"]])
                r["history"] = [[k.hex(), kind, None if v is None else v.hex(), a, b] for k, kind, v, a, b in recs]
                r["unacked"] = [[k.hex(), None if v is None else v.hex(), a] for k, v, a in unacked]
        # the restarts during the run, and one between the previous run and this one that
        # this run recovered from
        mine = {c["generation"] for c in recoveries}
        recs = [r for r in restarts.read(self.state_file) if float(r["died_at"]) >= since or r["generation"] in mine]
        # A control step the switch's death cut short is not an error of the system: the
        # restart and the recovery are reported instead.
        cut = [(float(r["died_at"]) - 1.0, self.recovered.get(r["generation"], time.time())) for r in recs]
        interrupted = [e for t, e in ctl_errors if any(a <= t <= b for a, b in cut)]
        out = self.measure(results, start_ns, control, [e for t, e in ctl_errors if not any(a <= t <= b for a, b in cut)], initial)
        out.update(self.restart_report(recs, recoveries, interrupted, results, start_ns))
        if fault is not None and fault_at is not None and fault[0] not in ("switch", "switch-agent"):
            out["fault"] = self.fault_report(results, fault, fault_at, t0)
            if self._fault_during is not None:
                out["fault"]["during"] = self._fault_during
        return out

    def _drive(self, procs: list[Any], control: Any, t0: float, fault: Optional[tuple[str, float, int]], progress: Optional[Callable[[float], None]],
               ctl_errors: list[tuple[float, str]], since: float, recoveries: list[dict[str, Any]]) -> Any:
        """The controller's loop while the clients run: the system's control steps, the
        fault to inject, and recovery from switch restarts; returns the control loop in
        use at the end."""
        p = self.p
        fault_at: Optional[tuple[float, float]] = None
        next_look = 0.0
        # The control loop's own clock (its rounds are due every t_wait on it): from the
        # start of the first run that drives it, so a loop that goes on into the next run
        # (or a new one after a restart) keeps its pace instead of waiting for the run's
        # clock to catch up with its schedule.
        if getattr(control, "epoch", None) is None:
            control.epoch = t0
        in_round: Optional[dict[str, Any]] = None
        while any(pr.poll() is None for pr in procs):
            now = time.monotonic() - t0
            if fault is not None and fault[0] in ("agent-round", "agent-round-restart") and fault_at is None and now >= fault[1]:
                if in_round is None:
                    in_round = self.kill_in_round(fault[2], restart=fault[0] == "agent-round-restart")
                elif in_round["killed_at"] is not None:  # killed by the round's call: start it again
                    if in_round["back_at"] is None:
                        self.start_agent(fault[2])
                        in_round["back_at"] = time.monotonic()
                    self._fault_at = fault_at = (in_round["killed_at"], in_round["back_at"])
                    self._fault_during = in_round["during"]
                    continue
            elif fault is not None and fault_at is None and now >= fault[1]:
                if fault[0] == "switch-agent":  # the agent dies with the switch, down until the recovery
                    self.stop_agent(fault[2], signal.SIGKILL)
                self._fault_at = fault_at = self.kill9("switch" if fault[0] == "switch-agent" else fault[0], fault[2])
                continue
            if now >= next_look:  # the switch's generation: has it died and come back?
                next_look = now + 0.1
                recs = restarts.read(self.state_file)  # all: a death between two runs too
                if any("forwarding_at" not in r and "gave_up" not in r and "error" not in r for r in recs):
                    next_look = now  # dead, or back without its forwarding: wait for it
                    time.sleep(0.02)
                    continue
                for r in recs:
                    if "forwarding_at" in r and r["generation"] not in self.recovered and not self.mine(r):
                        self.recovered[r["generation"]] = time.time()  # another switch: its routing is the supervisor's
                    elif "forwarding_at" in r and r["generation"] not in self.recovered:
                        try:
                            control = self.recover(control)
                            control.epoch = time.monotonic()
                        except Exception as e:
                            ctl_errors.append((time.time(), f"recovery from generation {r['generation']}: {type(e).__name__}: {e}"))
                        self.recovered[r["generation"]] = time.time()
                        recoveries.append({"generation": r["generation"], "reinstalled_at": time.time(), "agents_down": self.agents_down_at_recovery})
                        if fault is not None and fault[0] == "switch-agent" and self.agents[fault[2]] is None:
                            self.start_agent(fault[2])  # down through the recovery: back now
            if now >= 0:
                errs: list[str] = []
                step(control, time.monotonic() - control.epoch, errs)
                ctl_errors += [(time.time(), e) for e in errs]
                if progress:
                    progress(min(1.0, now / p.duration))
            time.sleep(0.005)
        return control

    def restart_report(self, recs: list[dict[str, Any]], recoveries: list[dict[str, Any]], interrupted: list[str],
                       results: list[dict[str, Any]], start_ns: int) -> dict[str, Any]:
        """What the run saw of switch restarts, in the keys the other systems use
        (`switch_restarts`, `reinstalled_generations`, `restart_note`), and how long the
        cache took to serve again (`recovered_s`: from the death to the first switch hit
        after the controller re-installed the system)."""
        if not recs:
            return {"switch_restarts": [], "reinstalled_generations": []}
        hits = sorted(s[0] for r in results for s in r["samples"] if s[2] and s[3])
        gets = np.array(sorted((s[0], s[3]) for r in results for s in r["samples"] if s[2]), dtype=np.int64).reshape(-1, 2)
        wall_minus_mono = time.time() - time.monotonic()
        for rec in recoveries:
            r = next(x for x in recs if x["generation"] == rec["generation"])
            back_mono_ns = (rec["reinstalled_at"] - wall_minus_mono) * 1e9
            first_hit = next((h for h in hits if h >= back_mono_ns), None)
            rec["recovered_s"] = None if first_hit is None else round(first_hit / 1e9 + wall_minus_mono - float(r["died_at"]), 3)
            rec["reinstall_s"] = round(rec["reinstalled_at"] - float(r["forwarding_at"]), 3)
            rec.update(refill(gets, (float(r["died_at"]) - wall_minus_mono) * 1e9, back_mono_ns))
        parts = [f"the switch died ({r['exit']}) and was forwarding again {r.get('recovery_s', '?')} s later (generation {r['generation']})" for r in recs]
        done = [f"generation {c['generation']}: {self.system} installed again {c['reinstall_s']} s after, cache treated as empty"
                + (f", {c['agents_down']} agent(s) down at the recovery (no mark to lift there)" if c.get("agents_down") else "")
                + (f", refilled (first hit {c['recovered_s']} s after the death" if c.get("recovered_s") is not None else "")
                + (f"; hit rate back to half its {c['hit_rate_before']:.2f} before the death {c['refill_s']} s after the re-install" if c.get("refill_s") is not None else "")
                + (")" if c.get("recovered_s") is not None else "") for c in recoveries]
        return {"switch_restarts": recs, "reinstalled_generations": [c["generation"] for c in recoveries], "cache_recoveries": recoveries,
                "recovered_s": None if any(c["recovered_s"] is None for c in recoveries) else max((c["recovered_s"] for c in recoveries), default=None),
                "interrupted_control_steps": interrupted,
                "restart_note": "; ".join(parts + done)}

    def fault_report(self, results: list[dict[str, Any]], fault: tuple[str, float, int], at: tuple[float, float], t0: float) -> dict[str, Any]:
        """The unavailability window: the stretch around the kill in which the killed host's
        agent answered no operation (the switch may go on serving hits of its keys); and the
        switch hit rate in the second before the kill and the second after the restart
        (whether the cache kept serving and the controller went on offloading)."""
        i = fault[2]
        done = sorted(t / 1e9 for r in results for t, agent in r["served"] if agent == i)
        t_kill, t_back = at
        # The longest gap between two answers that overlaps the outage (replies already in
        # flight at the kill still arrive just after it).
        times = [t0] + done
        gaps = [(b - a) for a, b in zip(times, times[1:]) if b >= t_kill and a <= t_back]
        unavailable = max(gaps) if gaps else None
        gets = np.array([(s[0], s[3]) for r in results for s in r["samples"] if s[2]], dtype=np.int64).reshape(-1, 2)

        def hit_rate(a: float, b: float) -> Optional[float]:
            w = (gets[:, 0] >= a * 1e9) & (gets[:, 0] < b * 1e9)
            return round(float(gets[w, 1].mean()), 3) if w.any() else None

        return {"process": fault[0], "storage_host": i, "killed_at_s": round(t_kill - t0, 3), "restarted_after_s": round(t_back - t_kill, 3),
                "unavailable_s": None if unavailable is None else round(unavailable, 3),
                "hit_rate_before": hit_rate(t_kill - 1.0, t_kill), "hit_rate_after": hit_rate(t_back, t_back + 1.0),
                "client_errors": sum(r["stats"]["errors"] for r in results), "unacked_writes": sum(len(r["unacked"]) for r in results)}

    def measure(self, results: list[dict[str, Any]], start_ns: int, control: Any, ctl_errors: list[str],
                initial: Optional[dict[bytes, Optional[bytes]]] = None) -> dict[str, Any]:
        p = self.p
        samples = np.concatenate([np.asarray(r["samples"], dtype=np.int64).reshape(-1, 4) for r in results] or [np.empty((0, 4), dtype=np.int64)])
        t = (samples[:, 0] - start_ns) / 1e9
        lat_us = samples[:, 1] / 1e3
        is_get, hit = samples[:, 2].astype(bool), samples[:, 3].astype(bool)
        n_sec = int(np.ceil(p.duration))
        thr, hr = [], []
        for s in range(n_sec):
            m = (t >= s) & (t < s + 1)
            thr.append(float(m.sum()))
            g = m & is_get
            hr.append(float(hit[g].mean()) if g.any() else None)
        fine = 0.1
        fine_hr = []
        for e in range(int(np.ceil(p.duration / fine))):
            g = (t >= e * fine) & (t < (e + 1) * fine) & is_get
            fine_hr.append(float(hit[g].mean()) if g.any() else None)
        shifts = p.shift_times()
        t_shift = shifts[0] if shifts else p.duration
        stable = _mean([h for e, h in enumerate(fine_hr) if h is not None and t_shift - 1.0 <= e * fine < t_shift])
        recovery = []
        for k, ts in enumerate(shifts):
            end = shifts[k + 1] if k + 1 < len(shifts) else p.duration
            rec = None
            if stable:
                for e in range(int(ts / fine), int(end / fine)):
                    v = fine_hr[e] if e < len(fine_hr) else None
                    if v is not None and v >= 0.95 * stable:
                        rec = round((e + 1) * fine - ts, 3)
                        break
            recovery.append(rec)
        recs: list[history.Record] = []
        unacked: dict[bytes, list[Optional[bytes]]] = {}
        for r in results:
            for k, kind, v, a, b in r["history"]:
                recs.append((bytes.fromhex(k), kind, None if v is None else bytes.fromhex(v), a, b))
            for k, v, a in r["unacked"]:
                kb = bytes.fromhex(k)
                unacked.setdefault(kb, []).append(None if v is None else bytes.fromhex(v))
                recs.append((kb, "set", None if v is None else bytes.fromhex(v), a, history.UNACKED))
        init = initial if initial is not None else self.initial()
        keys = sorted({k for k, *_ in recs})
        # --history off (native engine): no history, so no checker verdict; a 0 there
        # would claim a check that never ran.
        checked = p.engine != "native" or p.native_history
        verdict = history.check(recs, init, self.read_back(keys), unacked) if checked else None
        # The native engine, as the only writing client, also checks its GETs' values
        # itself; what it says each key holds at the end must be what Redis holds.
        mismatches = sum(int(r["stats"].get("value_mismatches", 0)) + int(r["stats"].get("malformed_replies", 0)) for r in results)
        final = {bytes.fromhex(k): None if v is None else bytes.fromhex(v) for r in results for k, known, v in r.get("final", []) if known}
        back = self.read_back(sorted(final)) if final else {}
        native_lost = sum(back[k] != v for k, v in final.items())
        win = (t >= 0) & (t < p.duration)
        duration = p.duration
        sole = fastload.sole_writer(p.workload, len(results))
        if verdict is not None:
            correct: Optional[bool] = bool(verdict.linearizable and verdict.stale_reads == 0 and verdict.lost_writes == 0 and not ctl_errors and mismatches == 0 and native_lost == 0)
            lost: Optional[int] = (verdict.lost_writes or 0) + native_lost
            note = None
        elif sole:  # the only writer checked every GET's value and what Redis holds at the end
            correct, lost = bool(not ctl_errors and mismatches == 0 and native_lost == 0), native_lost
            note = ("history off: the linearizability checker did not run (stale_reads, linearizable: null); the only writing client "
                    "checked each GET's value itself (value_mismatches) and Redis against its last acknowledged writes (lost_writes)")
        else:
            correct, lost = None, None
            note = (f"history off: not checked ({len(results)} writing clients: a GET has no single right answer, and without the history "
                    "neither reads nor Redis's final values can be checked; correct, stale_reads, lost_writes: null)")
        return {
            "throughput_ops": float(win.sum() / duration),
            "p50_us": float(np.percentile(lat_us, 50)) if len(lat_us) else None,
            "p99_us": float(np.percentile(lat_us, 99)) if len(lat_us) else None,
            "p999_us": float(np.percentile(lat_us, 99.9)) if len(lat_us) else None,
            "hit_rate": float(hit[is_get].mean()) if is_get.any() else None,
            "stable_hit_rate": stable,
            "recovery_s": recovery,
            "correct": correct,
            "linearizable": verdict.linearizable if verdict else None,
            "stale_reads": verdict.stale_reads if verdict else None,
            "lost_writes": lost,
            "nonlinearizable_keys": verdict.nonlinearizable_keys if verdict else None,
            "operations": verdict.operations if verdict else None,
            "keys_touched": verdict.keys if verdict else None,
            "history_recorded": checked,
            **({"check_note": note} if note else {}),
            "series": {"bucket_s": 1.0, "throughput_ops": thr, "hit_rate": hr},
            "clients": [r["stats"] for r in results],
            "control": counters_of(control),
            "control_errors": ctl_errors,
            **({"value_mismatches": mismatches} if p.engine == "native" else {}),
            "agents": [link.call(cmd="stats")["counters"] for link in self.links],
        }


def refill(gets: Any, died_ns: float, back_ns: float, window_s: float = 0.5, step_s: float = 0.05, min_gets: int = 20) -> dict[str, Any]:
    """How far the cache came back after a switch restart, from the clients' GETs
    (`gets`: rows of (monotonic ns, hit), sorted): `hit_rate_before`, the hit rate in the
    second before the death; `refill_s`, from the re-install to the end of the first
    `window_s` window (ending on a `step_s` grid) whose hit rate is at least half that
    (None: never in the run, or nothing was cached before). A control loop that still
    believed the dead switch's cache held its objects would not offload them again, and
    the hit rate would stay low until its own statistics moved on."""
    t, hit = gets[:, 0].astype(float), gets[:, 1].astype(bool)
    before = (t >= died_ns - 1e9) & (t < died_ns)
    rate = float(hit[before].mean()) if before.sum() >= min_gets else None
    out: dict[str, Any] = {"hit_rate_before": rate, "refill_s": None}
    if not rate:
        return out
    end = back_ns + window_s * 1e9
    last = float(t[-1]) if len(t) else 0.0
    while end <= last:
        w = (t >= end - window_s * 1e9) & (t < end)
        if w.sum() >= min_gets and hit[w].mean() >= rate / 2:
            out["refill_s"] = round((end - back_ns) / 1e9, 3)
            break
        end += step_s * 1e9
    return out


def counters_of(control: Any) -> dict[str, int]:
    """A control loop's counters, with those of the loops it replaced after restarts."""
    out = dict(control.counters())
    for old in getattr(control, "retired", []):
        for k, v in old.items():
            out[k] = out.get(k, 0) + v
    return out


def _mean(xs: list[float]) -> Optional[float]:
    return float(np.mean(xs)) if xs else None


def run_all(systems: list[str], p: RackParams, progress: Optional[Any] = None) -> dict[str, Any]:
    """Each system in one rack, on the same workload; the result `inswitch kvs` writes."""
    out: dict[str, Any] = {"config": {**asdict(p), "backend": "redis", "shift_times": p.shift_times(),
                                      "path": "real processes in a rack: redis-server (appendfsync always) per storage host, storage agents, "
                                              "the switch daemon, load generators in client namespaces; wall-clock time"},
                           "systems": {}}
    with RedisRack(p, first=systems[0] if systems else "none") as rack:
        out["mode"] = rack.mode()
        for name in systems:
            task = progress.add_task(name, total=1.0) if progress else None
            ctl = rack.use(name)
            out["systems"][name] = rack.run_load(name, ctl, (lambda f, task=task: progress.update(task, completed=f)) if progress else None)
    return out


def plot(out: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for name, r in out["systems"].items():
        s = r["series"]
        xs = [i + 0.5 for i in range(len(s["throughput_ops"]))]
        a1.plot(xs, s["throughput_ops"], marker="o", label=name)
        a2.plot(xs, [h if h is not None else float("nan") for h in s["hit_rate"]], marker="o", label=name)
    for ts in out["config"].get("shift_times", []):
        for a in (a1, a2):
            a.axvline(ts, color="grey", ls=":", lw=1)
    c = out["config"]
    a1.set_title(f"Redis behind the switch, {c['workload']}, {c['records']} records, shift {c['shift']} (measured, 1 s buckets)")
    a1.set_ylabel("throughput (ops/s)")
    a2.set_ylabel("switch hit rate")
    a2.set_xlabel("time (s)")
    a2.set_ylim(0, 1)
    a1.legend()
    fig.text(0.01, 0.01, "paper (Hare Fig. 13, Tofino + 100G): hit rate back within ~1 s of a hotspot shift; here: 2 cores, software switch", fontsize=7)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---- unmodified Redis clients through the proxy ------------------------------------------------


class ControlThread(Periodic):
    """A system's control loop in the background (while a benchmark runs)."""

    def __init__(self, control: Any) -> None:
        super().__init__(0.005, join_s=10)
        self.control, self.errors = control, []  # type: ignore[var-annotated]
        self.t0 = time.monotonic()

    def tick(self) -> None:
        step(self.control, time.monotonic() - self.t0, self.errors)

    def __enter__(self) -> "ControlThread":
        super().__enter__()
        return self


def parse_benchmark_csv(text: str) -> dict[str, dict[str, float]]:
    """redis-benchmark --csv: "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"."""
    import csv
    import io

    rows = list(csv.reader(io.StringIO(text)))
    out: dict[str, dict[str, float]] = {}
    if not rows:
        return out
    head = rows[0]
    for r in rows[1:]:
        if len(r) == len(head) and r[0] != head[0]:
            out[r[0]] = {h: float(v) for h, v in zip(head[1:], r[1:])}
    return out


def redis_benchmark(rack: RedisRack, host: Any, addr: str, port: int, n: int, keyspace: int, tests: str = "get,set", clients: int = 50, pipeline: int = 1, timeout: float = 120) -> dict[str, dict[str, float]]:
    argv = ["redis-benchmark", "-h", addr, "-p", str(port), "-t", tests, "-n", str(n), "-r", str(keyspace), "-c", str(clients), "-P", str(pipeline), "--csv"]
    r = subprocess.run(rack.in_host(host, argv), capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"redis-benchmark failed: {r.stderr[-1000:]}")
    return parse_benchmark_csv(r.stdout)


class ProxyInHost:
    """`inswitch kvs proxy` in a client host, recording its operations."""

    def __init__(self, rack: RedisRack, host: Any, port: int = 6380) -> None:
        """Starts the proxy on 0.0.0.0:`port` in `host`."""
        self.rack, self.host, self.port = rack, host, port
        self.hist = rack.dir / f"proxy-{host.name}-{time.monotonic_ns()}.json"
        p = rack.p
        argv = [sys.executable, "-m", "inswitch", "kvs", "proxy", "--listen", f"0.0.0.0:{port}", "--servers", ",".join(rack.server_ips),
                "--key-field", str(p.key_field), "--value-size", str(p.value_size), "--history", str(self.hist)]
        self.proc = subprocess.Popen(rack.in_host(host, argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("listening"):
            self.proc.kill()
            raise RuntimeError(f"the proxy did not start: {line} {self.proc.stderr.read()[-1000:] if self.proc.stderr else ''}")

    def stop(self) -> dict[str, Any]:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return json.loads(self.hist.read_text())

    def verdict(self, doc: dict[str, Any], init: dict[bytes, Optional[bytes]]) -> history.Verdict:
        recs: list[history.Record] = []
        unacked: dict[bytes, list[Optional[bytes]]] = {}
        for k, kind, v, a, b in doc["history"]:
            recs.append((bytes.fromhex(k), kind, None if v is None else bytes.fromhex(v), a, b))
        for k, v, a in doc["unacked"]:
            kb = bytes.fromhex(k)
            unacked.setdefault(kb, []).append(None if v is None else bytes.fromhex(v))
            recs.append((kb, "set", None if v is None else bytes.fromhex(v), a, history.UNACKED))
        keys = sorted({r[0] for r in recs})
        return history.check(recs, init, self.rack.read_back(keys), unacked)


def run_matrix(workloads: list[str], systems: list[str], p: RackParams, progress: Optional[Callable[[str], None]] = None) -> dict[str, Any]:
    """Every system under every workload, one rack; {workload: {system: result}}."""
    runs: dict[str, dict[str, Any]] = {}
    with RedisRack(p) as rack:
        for w in workloads:
            rack.p.workload = w
            runs[w] = {}
            for s in systems:
                if progress:
                    progress(f"{w}: {s}")
                r = rack.run_load(s, rack.use(s))
                r.pop("clients", None)
                runs[w][s] = r
    cfg = {**asdict(p), "workloads": workloads, "systems": systems, "shift_times": p.shift_times()}
    cfg.pop("workload")
    return {"config": cfg, "runs": runs}
