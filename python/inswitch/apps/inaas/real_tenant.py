"""One tenant instance as a process on a rack host (`inswitch tenants run --real`).

The adapter (`apps/inaas/adapters.py`, unchanged) runs against `RealService`, which has the
interface of the in-process `Service` but sends real frames: INaaS frames of EtherType
0x88B6 on an AF_PACKET socket through the switch process (to the goalkeeper's MAC, as
`tenants rack` does), and the host-only requests as UDP datagrams to this tenant's server
process on the rack's server host (through the same switch, forwarding only). Time is the
wall clock (µs since the process started); a request not answered within `rto_us` is sent
again with the retransmission flag (the switch hands it to the goalkeeper), up to 8 times,
as `hostlib::inaas::client::TenantClient` does.

Protocol with the runner (`real.py`), one line each way: the process prints `READY <phase>`
when its untimed work for a phase is done and waits for `GO` on stdin; after the timed part
it prints `DONE <phase>`; at the end one JSON line with its figures.
"""

from __future__ import annotations

import json
import select
import socket
import sys
import time
from typing import Any

import numpy as np

from inswitch import _native
from inswitch.apps.inaas.service import ITEMS, Done

ETHERTYPE = 0x88B6
RETRANS = 0x01
GK_REPLY = 0x08
MAX_TRIES = 8
#: The first two bytes of a datagram to or from a host acceptor (Paxos's host-only
#: baseline; no tenant member has this number).
HOST_PAXOS = b"\xfe\xff"
#: The Ethernet header a host acceptor's answer gets before the proposer reads it.
HOST_PAXOS_ETH = bytes(12) + ETHERTYPE.to_bytes(2, "big")


def _big_rcvbuf(s: socket.socket) -> None:
    """8 MB of receive buffer (past rmem_max as root): the adapters send in bursts (a
    setup's hundreds of writes), and an overflowing socket would turn them into losses."""
    try:
        s.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_RCVBUFFORCE", 33), 8 << 20)
    except OSError:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)


class _Raw:
    """The parts of `_native.InaasService` the adapters call, for one process."""

    def __init__(self, svc: "RealService") -> None:
        self.svc = svc

    def new_port(self) -> int:
        return 0  # one host, one port: every member of the tenant shares it

    def add_tenant(self, port: int, kind: str, lease_us: int, max_lease_us: int, subscription: bool = False, rto_us: int = 200) -> int:
        return self.svc.add_member()

    def add_member(self, of: int, port: int) -> int:
        return self.svc.add_member()

    def add_server(self, service_us: int) -> int:
        """This tenant's next server process (Paxos: three acceptor hosts' worth)."""
        s = self.svc
        ports = s.cfg["server_ports"]
        s.servers.append((s.cfg["server_ip"], int(ports[len(s.servers) % len(ports)])))
        return len(s.servers) - 1

    # Paxos: the proposer and learners in this process (`_native.InaasPaxosHosts`, the
    # hosts of `hostlib::inaas::paxos_run::PaxosGroup`), the acceptors in the switch.
    # With a proposer crash (`--paxos-crash-at`, `real_paxos.py`) the role decides: the
    # "primary" leads with its learners in the backup's process (votes out, acknowledgements
    # in, over UDP through the switch), the "backup" holds the learners and waits.
    def paxos_start(self, t: int, base: int, slots: int, learners: int = 3) -> None:
        s = self.svc
        role = s.cfg.get("paxos_role")
        if role == "primary":
            s.paxos = _native.InaasPaxosHosts(s.uid, s.mac, s.gk_mac, base, slots, s.now_us, s.rto_us, learners=0, proposer_id=1)
        elif role == "backup":
            s.paxos = _native.InaasPaxosHosts(s.uid, s.mac, s.gk_mac, base, slots, s.now_us, s.rto_us, learners, proposer_id=2, lead=False)
        else:
            s.paxos = _native.InaasPaxosHosts(s.uid, s.mac, s.gk_mac, base, slots, s.now_us, s.rto_us, learners)
        self.paxos_step(t)

    def paxos_propose(self, t: int, value: int) -> None:
        assert self.svc.paxos is not None
        self.svc.paxos.propose(int(value))

    def paxos_step(self, t: int, poll: bool = True) -> list[tuple[int, int]]:
        """Read what arrived (unless `poll` is false), then send what the proposer and
        learners have to send."""
        s = self.svc
        assert s.paxos is not None
        if poll:
            s.poll(0)
        frames, decided = s.paxos.step(s.now_us)
        for f in frames:
            try:
                s.raw_sock.send(f)
            except (BlockingIOError, OSError):
                pass  # lost: the proposer retransmits
        s.stats["paxos_frames_sent"] += len(frames)
        if s.relay is not None:
            s.relay_out()
        return list(decided)

    def paxos_logs(self, t: int) -> tuple[list[list[int]], list[str]]:
        assert self.svc.paxos is not None
        return self.svc.paxos.logs()

    # Paxos's host-only baseline: a second proposer and three learners in this process (the
    # same `InaasPaxosHosts`), its acceptors the tenant's three server processes
    # (`real.SERVER` with an acceptor id, `hostlib::inaas::paxos::HostAcceptor`). A request's INaaS
    # header goes to each of them in a UDP datagram after `HOST_PAXOS`; each answers alone.
    def paxos_host_start(self, t: int, base: int, slots: int, learners: int = 3) -> None:
        s = self.svc
        s.host_paxos = _native.InaasPaxosHosts(s.uid, s.mac, s.gk_mac, base, slots, s.now_us, s.rto_us, learners)
        self.paxos_host_step(t)

    def paxos_host_propose(self, t: int, value: int) -> None:
        assert self.svc.host_paxos is not None
        self.svc.host_paxos.propose(int(value))

    def paxos_host_step(self, t: int) -> list[tuple[int, int]]:
        s = self.svc
        assert s.host_paxos is not None
        s.poll(0)
        frames, decided = s.host_paxos.step(s.now_us)
        for f in frames:
            for addr in s.servers[:3]:
                try:
                    s.udp.sendto(HOST_PAXOS + f[14:], addr)
                    s.stats["host_paxos_sent"] += 1
                    s.stats["baseline_sent"] += 1  # the host-only version's datagrams, as ever
                except (BlockingIOError, OSError):
                    pass  # lost: the proposer retransmits
        return list(decided)

    def paxos_host_logs(self, t: int) -> tuple[list[list[int]], list[str]]:
        assert self.svc.host_paxos is not None
        return self.svc.host_paxos.logs()

    def in_flight(self, t: int) -> int:
        return sum(1 for f in self.svc.inflight.values() if f["member"] == t)

    def client_stats(self, t: int) -> dict[str, int]:
        return dict(self.svc.stats)


class RealService:
    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.uid = int(cfg["uid"])
        self.mac = bytes.fromhex(cfg["mac"])
        self.gk_mac = bytes.fromhex(cfg["gk_mac"])
        self.lease_us = int(cfg["lease_us"])
        self.rto_us = int(cfg["rto_us"])
        self.server_addr = (cfg["server_ip"], int(cfg["server_ports"][0]))
        self.paxos: Any = None
        self.host_paxos: Any = None  # the host-only baseline's proposer and learners
        self.raw_sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETHERTYPE))
        _big_rcvbuf(self.raw_sock)
        self.raw_sock.bind((cfg["ifname"], ETHERTYPE))
        self.raw_sock.setblocking(False)
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        _big_rcvbuf(self.udp)
        self.udp.bind((cfg["ip"], 0))
        self.udp.setblocking(False)
        # The Paxos relay between a crashing leader and its backup (`real_paxos.py`).
        self.relay: socket.socket | None = None
        self.relay_peer: tuple[str, int] | None = None
        self.relay_heard = time.monotonic()
        self.relay_sent = 0.0
        self.remote_delivered = [0, 0, 0]
        role = cfg.get("paxos_role")
        if role is not None:
            self.relay = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            _big_rcvbuf(self.relay)
            self.relay.bind((cfg["ip"], int(cfg["paxos_relay_port"]) if role == "backup" else 0))
            self.relay.setblocking(False)
            if role == "primary":
                self.relay_peer = (cfg["paxos_peer"][0], int(cfg["paxos_peer"][1]))
        self.t0 = time.monotonic()
        self.raw = _Raw(self)
        self.members = 0
        self.servers: list[tuple[str, int]] = []
        self.seq = 0
        self.inflight: dict[int, dict[str, Any]] = {}
        self.done: dict[int, list[tuple]] = {}
        self.bl_done: dict[int, list[tuple[int, bytes]]] = {}
        self.stats = {"sent": 0, "retransmitted": 0, "gave_up": 0, "via_goalkeeper": 0, "completed": 0, "foreign_frames": 0,
                      "baseline_sent": 0, "baseline_received": 0, "paxos_frames_sent": 0, "paxos_frames_received": 0,
                      "relay_sent": 0, "relay_received": 0, "host_paxos_sent": 0, "host_paxos_received": 0}

    # ---- time ------------------------------------------------------------------------
    @property
    def now_us(self) -> int:
        return int((time.monotonic() - self.t0) * 1e6)

    def set_loss(self, p: float) -> None:
        """Loss is the switch's (`--fault loss=P`), not the host's."""

    def add_member(self) -> int:
        self.members += 1
        self.done[self.members - 1] = []
        self.bl_done[self.members - 1] = []
        return self.members - 1

    # ---- INaaS requests ----------------------------------------------------------------
    def submit(self, t: int, segs, idxs, ops, keys, values, op: int = 0) -> int:
        self.seq = (self.seq + 1) & 0xFFFFFFFF or 1
        args = (
            np.asarray(segs, dtype=np.uint8).tobytes(),
            np.asarray(idxs, dtype="<u2").tobytes(),
            np.asarray(ops, dtype=np.uint8).tobytes(),
            (np.asarray(keys, dtype=np.int64) & 0xFFFFFFFF).astype("<u4").tobytes(),
            np.asarray(values, dtype="<i4").tobytes(),
        )
        now = self.now_us
        self.inflight[self.seq] = {"member": t, "args": args, "op": op, "first": now, "deadline": now + self.rto_us, "tries": 1, "n": len(args[0]),
                                   "segs": list(np.frombuffer(args[0], np.uint8))}
        self._send(self.seq, args, op, 0)
        self.stats["sent"] += 1
        return self.seq

    def _send(self, seq: int, args: tuple, op: int, flags: int) -> None:
        f = _native.inaas_frame(self.mac, self.gk_mac, self.uid, seq, self.lease_us, *args, op=op, flags=flags)
        try:
            self.raw_sock.send(f)
        except (BlockingIOError, OSError):
            pass  # a full queue is a lost frame: the retransmission timer covers it

    def take(self, t: int) -> Done:
        self.poll(0)
        rows = self.done[t]
        self.done[t] = []
        n = len(rows)
        st = np.zeros((n, ITEMS), np.uint8)
        val = np.zeros((n, ITEMS), np.int64)
        for i, r in enumerate(rows):
            st[i], val[i] = r[4], r[5]
        return Done(np.array([r[0] for r in rows], "<u4"), np.array([r[1] for r in rows], "<u8"), np.array([r[2] for r in rows], bool),
                    np.array([r[3] for r in rows], bool), st, val)

    # ---- host-only requests (UDP to the server process) --------------------------------
    def baseline(self, t: int, server: int, req_id: int, body: bytes = b"") -> None:
        payload = int(t).to_bytes(2, "little") + int(req_id).to_bytes(4, "little") + body
        try:
            self.udp.sendto(payload, self.servers[server])
            self.stats["baseline_sent"] += 1
        except (BlockingIOError, OSError):
            pass  # lost: the adapter resends after BL_RTO_US

    def take_baseline(self, t: int) -> tuple[np.ndarray, np.ndarray, list[bytes]]:
        self.poll(0)
        rows = self.bl_done[t]
        self.bl_done[t] = []
        return np.zeros(len(rows), "<u8"), np.array([r[0] for r in rows], "<u8"), [r[1] for r in rows]

    # ---- the network ---------------------------------------------------------------------
    def poll(self, timeout_s: float) -> None:
        socks = [self.raw_sock, self.udp] + ([self.relay] if self.relay is not None else [])
        r, _, _ = select.select(socks, [], [], timeout_s)
        if self.raw_sock in r:
            self._drain_raw()
        if self.udp in r:
            self._drain_udp()
        if self.relay is not None and self.relay in r:
            self._drain_relay()
        self._retransmit()

    # ---- the Paxos relay (only with `--paxos-crash-at`) ---------------------------------
    # Datagrams: b"V" + learner + votes (17 bytes each, `hostlib::inaas::paxos::Vote`), the
    # leader's votes for one learner; b"H", the leader's heartbeat; b"A" + 3 × u64, the
    # learners' delivered prefixes (their acknowledgements). All cross the switch (and its
    # loss) as any other frame.
    RELAY_EVERY_S = 0.005
    VOTES_PER_DATAGRAM = 80

    def _drain_relay(self) -> None:
        assert self.relay is not None
        while True:
            try:
                p, addr = self.relay.recvfrom(65536)
            except (BlockingIOError, InterruptedError):
                return
            self.stats["relay_received"] += 1
            if self.cfg["paxos_role"] == "backup":
                # Anything from the leader is a sign of life (the backup's detector).
                self.relay_heard = time.monotonic()
                self.relay_peer = addr
                if p[:1] == b"V" and len(p) >= 2 and self.paxos is not None:
                    self.paxos.on_votes(p[1], p[2:])
            elif p[:1] == b"A" and len(p) == 1 + 24 and self.paxos is not None:
                got = [int.from_bytes(p[1 + 8 * k : 9 + 8 * k], "little") for k in range(3)]
                self.remote_delivered = [max(a, b) for a, b in zip(self.remote_delivered, got)]
                self.paxos.set_floor(min(self.remote_delivered), self.now_us)

    def _relay_send(self, p: bytes) -> None:
        assert self.relay is not None and self.relay_peer is not None
        try:
            self.relay.sendto(p, self.relay_peer)
            self.stats["relay_sent"] += 1
        except (BlockingIOError, OSError):
            pass  # lost: votes are resent until acknowledged, heartbeats and acks repeat

    def relay_out(self) -> None:
        """The leader: its new votes to each learner (one datagram per learner, so a loss
        hits one learner), a heartbeat every `RELAY_EVERY_S`. The backup: its learners'
        acknowledgements as often, once it knows the leader's address."""
        assert self.paxos is not None
        now = time.monotonic()
        due = now - self.relay_sent >= self.RELAY_EVERY_S
        if self.cfg["paxos_role"] == "primary":
            votes = self.paxos.take_votes()
            step = 17 * self.VOTES_PER_DATAGRAM
            for k in range(0, len(votes), step):
                for learner in range(3):
                    self._relay_send(b"V" + bytes([learner]) + votes[k : k + step])
            if due:
                self._relay_send(b"H")
                self.relay_sent = now
        elif due and self.relay_peer is not None and self.paxos.ballot == 0:  # until it took over
            d = self.paxos.delivered()
            self._relay_send(b"A" + b"".join(int(x).to_bytes(8, "little") for x in d))
            self.relay_sent = now

    def _drain_raw(self) -> None:
        while True:
            try:
                f, addr = self.raw_sock.recvfrom(4096)
            except (BlockingIOError, InterruptedError):
                return
            if addr[2] == socket.PACKET_OUTGOING:
                continue
            if self.paxos is not None and f[:6] == self.mac and _native.InaasPaxosHosts.is_paxos(f):
                self.stats["paxos_frames_received"] += 1
                self.paxos.on_frame(f, self.now_us)
                continue
            rep = _native.inaas_reply(f)
            if rep is None:
                continue
            uid, seq, flags, st, vals = rep
            if uid != self.uid:
                self.stats["foreign_frames"] += 1  # another tenant's answer flooded here: not ours
                continue
            fl = self.inflight.pop(seq, None)
            if fl is None:
                continue  # a duplicate answer
            now = self.now_us
            via = bool(flags & GK_REPLY)
            self.stats["completed"] += 1
            self.stats["via_goalkeeper"] += int(via)
            self.done[fl["member"]].append((seq, now - fl["first"], via, False, np.frombuffer(st, np.uint8)[:ITEMS], np.frombuffer(vals, "<i8")[:ITEMS]))

    def _drain_udp(self) -> None:
        while True:
            try:
                p, _ = self.udp.recvfrom(65536)
            except (BlockingIOError, InterruptedError):
                return
            if p[:2] == HOST_PAXOS and self.host_paxos is not None:
                # A host acceptor's answer: as the switch's, behind an Ethernet header.
                self.stats["host_paxos_received"] += 1
                self.stats["baseline_received"] += 1
                self.host_paxos.on_frame(HOST_PAXOS_ETH + p[2:], self.now_us)
                continue
            t = int.from_bytes(p[:2], "little")
            if t in self.bl_done:
                self.stats["baseline_received"] += 1
                self.bl_done[t].append((self.now_us, p[2:]))

    def _retransmit(self) -> None:
        now = self.now_us
        for seq, fl in list(self.inflight.items()):
            if now < fl["deadline"]:
                continue
            if fl["tries"] >= MAX_TRIES:
                del self.inflight[seq]
                self.stats["gave_up"] += 1
                st = np.zeros(ITEMS, np.uint8)
                st[: fl["n"]] = 2
                self.done[fl["member"]].append((seq, now - fl["first"], False, True, st, np.zeros(ITEMS, np.int64)))
                continue
            fl["tries"] += 1
            fl["deadline"] = now + self.rto_us
            self.stats["retransmitted"] += 1
            self._send(seq, fl["args"], fl["op"], RETRANS)

    def run(self, us: int) -> None:
        """Until nothing of ours is in flight (the in-process `run` runs until quiet), or
        `us` × the time scale of wall time."""
        end = time.monotonic() + us * self.cfg["scale"] / 1e6
        while self.inflight and time.monotonic() < end:
            self.poll(0.002)
        self.poll(0)

    def run_for(self, us: int) -> None:
        # 1 ms of wall time at most, whatever `us`: a packet ends the wait at once (and is
        # time-stamped then), so the timeout only coarsens the pacing of new requests (the
        # real gap is 1 ms), while processes that wake more often starve the others (the
        # switch, the servers) on a small machine.
        self.poll(0.001)

    def warm_up(self) -> None:
        """Resolve the servers' address both ways (ARP) before anything is timed: one echo
        from each."""
        for port in self.cfg["server_ports"]:
            for _ in range(50):
                self.udp.sendto(b"\xff\xff", (self.cfg["server_ip"], int(port)))
                r, _, _ = select.select([self.udp], [], [], 0.1)
                if r:
                    self.udp.recvfrom(65536)
                    break


def _wait_go() -> None:
    line = sys.stdin.readline()
    if line.strip() != "GO":
        raise SystemExit(f"runner said {line!r}, not GO")


def main(cfg: dict[str, Any]) -> dict[str, Any]:
    from inswitch.apps.inaas.adapters import APPS, Sizes
    from inswitch.apps.inaas.controller import Region

    svc = RealService(cfg)
    region = Region(**cfg["region"])
    sizes = Sizes(**cfg["sizes"])
    rng = np.random.default_rng([int(cfg["seed"]), int(cfg["index"])])
    cls = APPS[cfg["app"]]
    if cfg["app"] == "dense" and cfg.get("allreduce") is not None:
        # A real model through the switch's allreduce program, under its leased job.
        from inswitch.apps.inaas.dense_train import DenseTrainApp

        cls = DenseTrainApp
    if cfg.get("paxos_role") is not None:
        from inswitch.apps.inaas.real_paxos import PaxosBackup, PaxosPrimary

        cls = PaxosPrimary if cfg["paxos_role"] == "primary" else PaxosBackup
    app = cls(svc, region, int(cfg["inst"]), sizes, rng)  # type: ignore[arg-type]
    app.BL_RTO_US = int(cfg["bl_rto_us"])  # type: ignore[misc]
    svc.warm_up()
    app.setup()
    figures: dict[str, float] = {}
    wall: dict[str, float] = {}
    pct: dict[str, dict[str, float]] = {}
    waited: dict[str, float] = {}
    taken_again: list[str] = []
    for phase in ("inaas", "host"):
        app.prepare(phase)
        prepared = time.monotonic()
        svc.run(100_000)
        print(f"READY {phase}", flush=True)
        _wait_go()
        # Leases taken before the phase (`prepare`) last one lease from then, and the runner
        # waited for every tenant's READY since: on a loaded machine longer than a 1 s lease.
        # Lapsed, a cell is anyone's (an attacker released during the phase takes it), and
        # this tenant's own accesses to it would count against it as mismatches.
        waited[phase] = time.monotonic() - prepared
        renew = getattr(app, "renew_prepared", None)
        if renew is not None and renew(phase, waited[phase]):
            taken_again.append(phase)
        app.begin(phase)
        # The runner releases an attacker only after every tenant's BEGUN.
        print(f"BEGUN {phase}", flush=True)
        t0 = time.monotonic()
        limit = t0 + float(cfg["phase_limit_s"])
        while not app.finished() and time.monotonic() < limit:
            app.step()
            svc.run_for(1)
        wall[phase] = time.monotonic() - t0
        if phase == "inaas" and hasattr(app, "check"):
            app.check()
        if phase == "host" and hasattr(app, "check_host"):
            app.check_host()
        figures[phase] = app.figure_value()
        lat = getattr(app, "lat", None)
        if lat:
            pct[phase] = {"p50_us": float(np.percentile(lat, 50)), "p99_us": float(np.percentile(lat, 99)), "max_us": float(np.max(lat))}
        print(f"DONE {phase}", flush=True)
        # Finished in both phases is what the sim's `finished` means at the end.
        figures[f"finished_{phase}"] = bool(app.finished())
    out: dict[str, Any] = {
        "app": cfg["app"], "inst": cfg["inst"], "inaas": figures["inaas"], "host_only": figures["host"],
        "finished": figures["finished_inaas"] and figures["finished_host"], "wrong": int(app.wrong), "foreign": int(app.foreign),
        "figure": app.figure, "wall_s": wall, "latency_percentiles": pct, "client": svc.stats,
        # From `prepare` to GO per phase, and the phases whose prepared leases were taken again.
        "prepared_to_go_s": waited, "prepared_taken_again": taken_again,
    }
    if hasattr(app, "extra"):
        out["extra"] = app.extra()
    return out


if __name__ == "__main__":
    config = json.loads(sys.argv[1])
    result = main(config)
    print(json.dumps(result, default=float), flush=True)
