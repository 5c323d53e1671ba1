"""SwitchAgg's task launch over UDP (SwitchAgg §3, Table 1): the master's shim sends
**Launch** to the controller; the controller sends each switch of the plan a **Configure**
(its trees and their numbers of children); the switch's control agent installs them and
answers **Ack** type 1; when every switch has, the controller answers the master **Ack**
type 0, and only then does the job send. The state machines are hostlib's
(`_native.SwitchAggShim`, `SwitchAggController`, `switchagg_on_configure`, retransmissions
included); this module only moves their packets over loopback UDP and keeps the time.

A Configure carries tree ids and children only (Table 1), so the agent takes the rest of
each tree (parent and child ports, operation, `up_child`) from the routes the controller
gave it beforehand, as the paper's controller disseminates routing tables (§3, Routing).
"""

from __future__ import annotations

import select
import socket
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

from inswitch.apps.switchagg import controller as sagg

#: Retransmission timeout of Launch and Configure, seconds: above an install's P4Runtime
#: writes and read-back (a few hundred ms), so that a slow switch is not asked twice.
RTO_S = 1.0


class LaunchError(RuntimeError):
    pass


def _native() -> Any:
    from inswitch import _native

    return _native


@dataclass
class SwitchAgent:
    """One switch's control side: Configure in, trees installed over P4Runtime (read back),
    Ack type 1 out. `routes`: per tree id, the tree at this switch (its `children` is
    replaced by the Configure's)."""

    p4runtime: str
    routes: dict[int, sagg.Tree]
    child_ports: list[int]
    device_id: int = 1
    election_id: tuple[int, int] = (0, 1)
    configures: int = 0
    installs: int = 0
    acks_sent: int = 0
    refused: list[str] = field(default_factory=list)
    #: What the switch read back after the install (`controller.install`'s acknowledgement).
    installed: dict[str, Any] | None = None
    _last: bytes | None = None
    _sock: socket.socket | None = None
    _thread: threading.Thread | None = None
    _stop: threading.Event = field(default_factory=threading.Event)

    @property
    def address(self) -> tuple[str, int]:
        assert self._sock is not None
        return self._sock.getsockname()  # type: ignore[no-any-return]

    def start(self) -> "SwitchAgent":
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.bind(("127.0.0.1", 0))
        self._thread = threading.Thread(target=self._serve, daemon=True, name=f"switchagg-agent-{self.p4runtime}")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if self._sock is not None:
            self._sock.close()

    def _serve(self) -> None:
        assert self._sock is not None
        while not self._stop.is_set():
            if not select.select([self._sock], [], [], 0.05)[0]:
                continue
            data, peer = self._sock.recvfrom(65535)
            ack = self.on_packet(data)
            if ack is not None:
                self._sock.sendto(ack, peer)
                self.acks_sent += 1

    def on_packet(self, data: bytes) -> bytes | None:
        """The Ack for a Configure once its trees are installed; None for anything else."""
        got = _native().switchagg_on_configure(data)
        if got is None:
            return None
        entries, ack = got
        self.configures += 1
        if data == self._last:
            return bytes(ack)  # a retransmission: our Ack was lost, the trees are in
        missing = [t for t, *_ in entries if t not in self.routes]
        if missing:
            self.refused.append(f"trees {missing} have no route at this switch")
            return None
        trees = [replace(self.routes[t], children=k) for t, k, _, _ in entries]
        plan = sagg.SwitchPlan(trees, list(self.child_ports), regions=entries[0][3])
        try:
            self.installed = sagg.install(self.p4runtime, plan, device_id=self.device_id, election_id=self.election_id)
        except Exception as e:  # no Ack: the controller asks again, the launch times out
            self.refused.append(str(e))
            return None
        self.installs += 1
        self._last = data
        return bytes(ack)

    def report(self) -> dict[str, Any]:
        return {"address": self.p4runtime, "configures": self.configures, "installs": self.installs,
                "acks_sent": self.acks_sent, "trees": sorted(self.routes), "child_ports": list(self.child_ports)}


def launch(agents: Sequence[SwitchAgent], reducers: Sequence[str], mappers: Sequence[str], timeout_s: float = 10.0,
           rto_s: float = RTO_S, lose_configures: int = 0) -> dict[str, Any]:
    """Launch → Configure → Ack with the agents (started here, stopped before returning);
    returns once the master holds Ack type 0 (LaunchError after `timeout_s`). `reducers`,
    `mappers`: their IPv4 addresses. `lose_configures`: the controller's first Configures
    that never reach their switch (fault injection for tests)."""
    n = _native()
    ctl = n.SwitchAggController([[(t, r.children) for t, r in sorted(a.routes.items())] for a in agents], rto_s)
    shim = n.SwitchAggShim([a.split(":")[0] for a in reducers], [a.split(":")[0] for a in mappers], rto_s * 2)
    master = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    csock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    lost = 0
    for a in agents:
        a.start()
    try:
        master.bind(("127.0.0.1", 0))
        csock.bind(("127.0.0.1", 0))
        where = {a.address: i for i, a in enumerate(agents)}
        t0 = time.monotonic()
        while not shim.started:
            now = time.monotonic()
            if now - t0 > timeout_s:
                why = "; ".join(r for a in agents for r in a.refused[-1:])
                raise LaunchError(f"no Ack from the controller within {timeout_s:g} s"
                                  + (f" ({why})" if why else f" ({ctl.stats()['switch_acks']} switch Acks)"))
            shim.handle_timeout(now)
            ctl.handle_timeout(now)
            pkt = shim.poll_transmit(now)
            if pkt is not None:
                master.sendto(pkt, csock.getsockname())
            while (out := ctl.poll_transmit()) is not None:
                to, data = out
                if to is None:
                    csock.sendto(data, master.getsockname())
                elif lost < lose_configures:
                    lost += 1
                else:
                    csock.sendto(data, agents[to].address)
            due = [d for d in (shim.poll_timeout(), ctl.poll_timeout()) if d is not None]
            wait = max(0.0, min([*due, t0 + timeout_s]) - time.monotonic())
            for s in select.select([master, csock], [], [], min(wait, 0.5))[0]:
                data, peer = s.recvfrom(65535)
                if s is master:
                    shim.handle(time.monotonic(), data)
                elif peer == master.getsockname():
                    ctl.handle(time.monotonic(), data)
                elif peer in where:
                    ctl.handle(time.monotonic(), data, where[peer])
        return {"launches_sent": shim.launches_sent, **ctl.stats(), "configures_lost": lost,
                "ack_s": round(time.monotonic() - t0, 4), "started": shim.started,
                "switches": [a.report() for a in agents]}
    finally:
        for a in agents:
            a.stop()
        master.close()
        csock.close()
