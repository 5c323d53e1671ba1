"""The Paxos tenant with a proposer crash on real processes (`tenants run --real
--paxos-crash-at X`).

Two processes of the paxos tenant on two rack hosts share its uid and tenant slot (the
controller registers the uid on both hosts' ports, as members of one tenant share it in the
model's `add_member`):

- the primary (`PaxosPrimary`) takes the acceptors' leases, leads with ballot 1·256+1
  (`hostlib::inaas::paxos::Proposer`, id 1) and proposes the first `X·N` values; its
  learners are in the backup's process, so it relays every vote there (UDP through the
  switch, one datagram per learner) and takes the learners' acknowledgements back (its
  floor); it heartbeats every 5 ms. Once it has proposed its last value it prints
  `CRASHPOINT`, and the runner SIGKILLs it there, with values in flight. It prints every
  decision it saw (`DECIDED inst value`), which the runner keeps: what the dead leader saw
  chosen by a majority must be in every learner's log, unchanged.
- the backup (`PaxosBackup`) holds the three learners (`hostlib::inaas::paxos::Learner`)
  and a silent proposer (id 2). Detection: no datagram from the leader (heartbeat, votes)
  for `DETECT_S` (the in-process model's 2 000 µs detection × the real run's time scale, 100
  ms: 20 heartbeats in a row lost or late). Then it takes over: phase 1 on the switch's
  acceptors over the window above its learners' delivered prefix, with a round above every
  ballot its learners saw (a refusal raises it again), re-proposes what a majority may have
  chosen (no-ops for holes), and proposes the remaining values at their schedule (those
  whose time passed at once). It then runs the host-only phase as the tenant.

With `--paxos-zombie` the leader is not killed at its crash point but stopped (SIGSTOP),
and resumed (SIGCONT) once the backup saw its first decision (the backup then creates a
file, `paxos_took_over_file`, which the runner polls): a zombie with its stale state and
old ballot. From its SIGCONT handler on, it proposes `ZOMBIE_VALUES` fresh values (never
proposed by anyone else: a learner that delivers one means the acceptors took a stale
ballot) besides retransmitting what it had in flight, and defers to a higher ballot
(`Proposer::defer`): the first refusal makes it step down and go quiet. With
`--paxos-zombie-duels` it duels instead (`Proposer::backoff_us`, `max_duels`): refused, it
backs off (`DUEL_BACKOFF_US`, doubling, with jitter) and takes over above the refusal, at
most `DUEL_ROUNDS` times before it defers; the backup, refused in turn, does the same without
limit; its values may then be chosen, and each it saw chosen is checked in the logs. With
`--paxos-zombie-fights` it ignores refusals instead (`Proposer::stubborn`): it keeps
proposing and resending at its old ballot, which the acceptors must refuse every time,
until it is killed. `ZOMBIE_S` after its resume it prints `ZOMBIE {json}` (its counters
since the SIGCONT) and the runner SIGKILLs it, then creates `paxos_zombie_dead_file`; the backup finishes only after that,
so its learners' logs cover the zombie's whole life.

`paxos_safety` (in `adapters.py`, shared with the model's runs) is the checker.
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

from inswitch.apps.inaas.adapters import PaxosApp, paxos_safety

#: Silence from the leader that makes the backup take over (wall seconds).
DETECT_S = 0.1
#: The leader's heartbeat period (wall seconds; `RealService.RELAY_EVERY_S`).
HEARTBEAT_S = 0.005
#: How long a resumed (zombie) leader runs before it reports and the runner kills it.
ZOMBIE_S = 0.3
#: Fresh values a zombie proposes when it resumes (negative: no tenant value is).
ZOMBIE_VALUES = 8
#: A duel of ballots (`--paxos-zombie-duels`): a refused proposer waits this long (wall µs;
#: doubled per refusal without a decision between, plus up to as much jitter:
#: `Proposer::backoff_us`) before it takes over above the refusal. 20 ms: the in-process
#: model's 400 µs × the real runs' timer scale of 50, well under the zombie's 300 ms.
DUEL_BACKOFF_US = 20_000
#: Takeovers above a refusal the zombie makes before it defers (`Proposer::max_duels`):
#: the duel ends even if the zombie were not killed. The backup has no limit.
DUEL_ROUNDS = 3


def zombie_values() -> list[int]:
    return [-(1 + k) for k in range(ZOMBIE_VALUES)]


def _until(app: PaxosApp, done: Any, what: str, limit_s: float = 30.0) -> None:
    """Run the tenant's Paxos hosts (relay included) until `done()`. Before the timed phase,
    each process waits to hear the other: the first datagram to a host resolves its address
    (ARP) through the switch, and with the switch's loss a lost ARP request costs a second,
    which would otherwise fall in the timed phase and look like a dead leader."""
    end = time.monotonic() + limit_s
    while not done():
        if time.monotonic() > end:
            raise SystemExit(f"paxos crash run: {what} within {limit_s:.0f} s")
        app.svc.raw.paxos_step(app.t)
        app.svc.run_for(1)


def crash_after(values: int, fraction: float) -> int:
    """Values the primary proposes before it is killed: at least one, at most all but one."""
    return min(values - 1, max(1, round(fraction * values)))


class PaxosPrimary(PaxosApp):
    """The leader that gets killed (see the module's docstring)."""

    def setup(self) -> None:
        super().setup()
        if not self.in_switch:
            raise SystemExit("paxos crash run: the acceptors are not in the switch (the tenant's leases are not held for good)")
        self.crash_after = int(self.svc.cfg["paxos_crash_values"])  # type: ignore[attr-defined]
        self.zombie = bool(self.svc.cfg.get("paxos_zombie"))  # type: ignore[attr-defined]
        fights = bool(self.svc.cfg.get("paxos_zombie_fights"))  # type: ignore[attr-defined]
        duels = bool(self.svc.cfg.get("paxos_zombie_duels"))  # type: ignore[attr-defined]
        self.resumed_at: float | None = None
        self.reported = False
        if self.zombie:
            if duels:
                # A duelling zombie: refused, it backs off, then runs phase 1 above the
                # ballot that refused it and proposes; after DUEL_ROUNDS it defers.
                self.svc.paxos.backoff_us = DUEL_BACKOFF_US  # type: ignore[attr-defined]
                self.svc.paxos.max_duels = DUEL_ROUNDS  # type: ignore[attr-defined]
            elif fights:
                # A fighting zombie: every refusal ignored, its old ballot kept, its
                # proposals resent at each timeout until it is killed.
                self.svc.paxos.stubborn = True  # type: ignore[attr-defined]
            else:
                # A correct proposer: a higher ballot's refusal makes it step down.
                self.svc.paxos.defer = True  # type: ignore[attr-defined]
            # The handler itself sends: Python runs it as soon as the process continues,
            # before an interrupted socket wait is retried, so the stale proposals leave
            # before anything that arrived while it was stopped is read.
            signal.signal(signal.SIGCONT, lambda *_: self.resume() if self.resumed_at is None else None)
        # Heartbeats until the backup answers: the relay's path works both ways before
        # anything is timed.
        _until(self, lambda: self.svc.stats["relay_received"] > 0, "no acknowledgement from the backup")  # type: ignore[attr-defined]

    def step(self) -> None:
        if not self.switch_phase:
            super().step()
            return
        svc, now = self.svc, self.svc.now_us
        while self.next < self.crash_after and self.start_us + self.next * self.sz.paxos_gap_us <= now:
            svc.raw.paxos_propose(self.t, self.values[self.next])
            self.next += 1
            if self.next == self.crash_after:
                print("CRASHPOINT", flush=True)
        for inst, _ in svc.raw.paxos_step(self.t):
            print(f"DECIDED {inst} {svc.paxos.decided_value(inst)}", flush=True)  # type: ignore[attr-defined]
        if self.resumed_at is not None:
            p = svc.paxos  # type: ignore[attr-defined]
            if self.stepped_at is None and p.stepped_down is not None:
                self.stepped_at = time.monotonic()
            if not self.reported and time.monotonic() - self.resumed_at >= ZOMBIE_S:
                self.reported = True
                st = p.stats()
                print("ZOMBIE " + json.dumps({
                    "resumed_at": self.resumed_at,
                    "ballot": self.at_resume["ballot"],
                    "ballot_at_report": p.ballot,
                    "frames_sent": svc.stats["paxos_frames_sent"] - self.at_resume["frames"],  # type: ignore[attr-defined]
                    "relay_sent": svc.stats["relay_sent"] - self.at_resume["relay"],  # type: ignore[attr-defined]
                    **{k: st[k] - self.at_resume[k] for k in ("sent", "resent", "refused", "rounds", "duels")},
                    "stepped_down_to": p.stepped_down,
                    "deposed_before_resume": self.deposed_before,
                    "stepped_down_at": self.stepped_at,
                    "values": zombie_values(),
                    "decided_after_resume": [d for d in p.decisions() if d[0] not in self.decided_at_resume],
                }), flush=True)

    def resume(self) -> None:
        """The first step after SIGCONT: counters as they stand, then the fresh values."""
        svc = self.svc
        p = svc.paxos  # type: ignore[attr-defined]
        self.resumed_at = time.monotonic()
        self.stepped_at: float | None = None
        st = p.stats()
        self.at_resume = {"frames": svc.stats["paxos_frames_sent"], "relay": svc.stats["relay_sent"], "ballot": p.ballot, **st}  # type: ignore[attr-defined]
        self.decided_at_resume = {d[0] for d in p.decisions()}
        # Already deposed while alive (the backup suspected a stalled leader before its
        # stop, and its refusal came back): a stepped-down proposer sends nothing more.
        self.deposed_before = p.stepped_down
        for v in zombie_values():
            svc.raw.paxos_propose(self.t, v)
        # Out before anything that arrived while it was stopped is read: a leader paused
        # between deciding and sending, whose stale proposals are on the wire before it can
        # learn of the higher ballot (else a frame waiting in its socket, read first, could
        # make it step down before it sent anything).
        for inst, _ in svc.raw.paxos_step(self.t, poll=False):
            print(f"DECIDED {inst} {p.decided_value(inst)}", flush=True)

    def finished(self) -> bool:
        # It leads until it is killed.
        return not self.switch_phase and super().finished()


class PaxosBackup(PaxosApp):
    """The learners and the proposer that takes over (see the module's docstring)."""

    def setup(self) -> None:
        # As `PaxosApp.setup` (the same values: the same seed and index), but no lease is
        # taken: the primary holds them for the tenant, and a second taking would clear the
        # acceptors' state under a running leader.
        self.t = self.tenant("paxos")
        self.servers = [self.svc.raw.add_server(self.sz.server_us) for _ in range(self.ACCEPTORS)]
        self.values = [int(self.rng.integers(1, 2**31 - 2)) for _ in range(self.sz.paxos_instances)]
        self.base, self.size = self.cells()
        self.in_switch = True
        self.crash_after = int(self.svc.cfg["paxos_crash_values"])  # type: ignore[attr-defined]
        self.svc.raw.paxos_start(self.t, self.base, self.size)
        if self.svc.cfg.get("paxos_zombie_duels"):  # type: ignore[attr-defined]
            # The survivor duels too: refused by the zombie, it backs off and takes over
            # above it again (no limit: it holds the tenant's values).
            self.svc.paxos.backoff_us = DUEL_BACKOFF_US  # type: ignore[attr-defined]
        # The leader's heartbeats reach us, then our acknowledgements reach it for a while
        # (it waits for one): the relay's path works both ways before anything is timed.
        _until(self, lambda: self.svc.relay_peer is not None, "no heartbeat from the leader")  # type: ignore[attr-defined]
        end = time.monotonic() + 0.1
        _until(self, lambda: time.monotonic() > end, "")
        self.detected_at: float | None = None
        self.last_heard_at: float | None = None
        self.leading_at: float | None = None
        self.first_decision_at: float | None = None
        self.ballot = 0
        self.report: dict[str, Any] = {}
        self.took_over_file = self.svc.cfg.get("paxos_took_over_file")  # type: ignore[attr-defined]
        self.zombie_dead_file = self.svc.cfg.get("paxos_zombie_dead_file")  # type: ignore[attr-defined]

    def begin(self, phase: str) -> None:
        super().begin(phase)
        if self.switch_phase:
            # The survivor's values only; the detector is armed from now.
            self.next = self.crash_after
            self.index = {v: i for i, v in enumerate(self.values)}
            self.svc.relay_heard = time.monotonic()  # type: ignore[attr-defined]

    def step(self) -> None:
        if not self.switch_phase:
            super().step()
            return
        svc = self.svc
        decided = svc.raw.paxos_step(self.t)
        if self.detected_at is None:
            if time.monotonic() - svc.relay_heard <= DETECT_S:  # type: ignore[attr-defined]
                return
            self.detected_at = time.monotonic()
            self.last_heard_at = svc.relay_heard  # type: ignore[attr-defined]
            self.ballot = svc.paxos.take_over(svc.now_us)  # type: ignore[attr-defined]
            decided += svc.raw.paxos_step(self.t)  # phase 1 out now
        now = svc.now_us
        while self.next < len(self.values) and self.start_us + self.next * self.sz.paxos_gap_us <= now:
            self.start[self.next] = now
            svc.raw.paxos_propose(self.t, self.values[self.next])
            self.next += 1
        if self.leading_at is None and svc.paxos.leading:  # type: ignore[attr-defined]
            self.leading_at = time.monotonic()
        for inst, _ in decided:
            if self.first_decision_at is None:
                self.first_decision_at = time.monotonic()
                if self.took_over_file:
                    open(self.took_over_file, "w").close()  # the runner resumes the zombie
            i = self.index.get(svc.paxos.decided_value(inst))  # type: ignore[attr-defined]
            if i is not None and i in self.start:
                self.lat.append(now - self.start.pop(i))

    def finished(self) -> bool:
        if not self.switch_phase:
            return super().finished()
        if self.detected_at is None or self.next < len(self.values) or self.start:
            return False
        logs, _ = self.svc.raw.paxos_logs(self.t)
        need = set(self.values[self.crash_after :])
        if not all(need <= set(log) for log in logs):
            return False
        # With a zombie: its whole life is in the logs checked.
        return not self.zombie_dead_file or os.path.exists(self.zombie_dead_file)

    def check(self) -> None:
        logs, violations = self.svc.raw.paxos_logs(self.t)
        found, gap_free = paxos_safety(logs, violations, self.values[self.crash_after :])
        self.wrong += len(found)
        p = self.svc.paxos  # type: ignore[attr-defined]
        self.report = {
            "logs": [list(x) for x in logs],
            "learner_violations": list(violations),
            "must_deliver": self.values[self.crash_after :],
            "gap_free": gap_free and p.gap_free(),
            "delivered": list(p.delivered()),
            "ballot": self.ballot,
            "detected_at": self.detected_at,
            "last_heard_at": self.last_heard_at,
            "leading_at": self.leading_at,
            "first_decision_at": self.first_decision_at,
            "rounds": p.stats()["rounds"],
            "duels": p.stats()["duels"],
            "final_ballot": p.ballot,
        }

    def extra(self) -> dict[str, Any]:
        return {**super().extra(), "acceptors_in_switch": True, "paxos_crash": self.report}
