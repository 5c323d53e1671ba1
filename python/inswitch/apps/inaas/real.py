"""`inswitch tenants run --real`: every tenant instance a process on its own host of one
rack, around the switch process running `forward,inaas`, on the wall clock; each against its
host-only version (the same adapter, its requests to a server process on the rack's server
host, through the same switch forwarding only) in the same rack and run. Needs root.

Rack: host 1 the goalkeeper (`rack.GOALKEEPER`, the native goalkeeper on AF_PACKET), hosts
2..N+1 one tenant instance each (`real_tenant.py`: the unchanged adapter of
`adapters.py` over real frames), host N+2 the host-only servers (one UDP echo process per
tenant, as the in-process service's servers echo; for Paxos three acceptor processes,
`SERVER` with an acceptor id, against which the tenant runs the same Paxos). The controller registers every tenant
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
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from inswitch.apps.inaas.adapters import QUICK, RTO_US, App, Sizes, paxos_safety
from inswitch.apps.inaas.dense_lease import DenseLeases
from inswitch.apps.inaas.controller import KIND, MAX_LEASE_US, Detection, Prices, bill, folded_holds, schedule
from inswitch.apps.inaas.rack import GOALKEEPER, _p4_name
from inswitch.apps.inaas.real_paxos import DETECT_S, HEARTBEAT_S, ZOMBIE_S, crash_after
from inswitch.apps.inaas.runner import BUDGET, HIGHER_IS_BETTER, tenants_result
from inswitch.topology.switchproc import free_local_port

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
#: The attacker's lease and cap (µs before scaling), steps and model µs per step: the
#: model's (`runner._attack`: `add_tenant(..., 1000, 1000, ...)`, at most 400 steps of 2 µs).
ATTACKER_LEASE_US = 1000
ATTACK_STEPS = 400
ATTACK_STEP_US = 2
MODE = "real processes: switch process (forward + inaas), goalkeeper, tenants and host-only servers in a rack of namespaces, wall clock"

#: A host-only server: echoes every datagram, or with a third argument `j` is Paxos's
#: host-only acceptor `j` (`hostlib::inaas::paxos::HostAcceptor` through
#: `_native.InaasPaxosAcceptor`, the switch acceptor's semantics): a datagram after
#: `real_tenant.HOST_PAXOS` is a request's INaaS header, answered alone; anything else is
#: echoed (the tenant's warm-up). Prints the acceptor's counters, then how many datagrams
#: it answered.
SERVER = textwrap.dedent('''
    import json, select, socket, sys
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_RCVBUFFORCE", 33), 8 << 20)
    except OSError:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.bind((sys.argv[1], int(sys.argv[2])))
    s.setblocking(False)
    acceptor = None
    if len(sys.argv) > 3:
        from inswitch import _native
        acceptor = _native.InaasPaxosAcceptor(int(sys.argv[3]))
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
                if acceptor is not None and p[:2] == b"\\xfe\\xff":
                    out = acceptor.answer(p[2:])
                    if out is None:
                        continue
                    p = p[:2] + out
                n += 1
                s.sendto(p, a)
    if acceptor is not None:
        print("ACCEPTOR " + json.dumps(acceptor.stats()), flush=True)
    print(n, flush=True)
''')


class RealRunError(RuntimeError):
    """A bad combination or a missing privilege, said in one line."""


def check_args(apps: list[str], attacker: bool, paxos_crash_at: float | None = None, paxos_zombie: bool = False,
               paxos_zombie_fights: bool = False, paxos_zombie_duels: bool = False) -> None:
    bad = [a for a in apps if a not in REAL_APPS]
    if bad:
        raise RealRunError(f"--real cannot run {', '.join(bad)} (known: {', '.join(REAL_APPS)})")
    if paxos_zombie_fights and not paxos_zombie:
        raise RealRunError("--paxos-zombie-fights needs --paxos-zombie (it is how the zombie behaves)")
    if paxos_zombie_duels and not paxos_zombie:
        raise RealRunError("--paxos-zombie-duels needs --paxos-zombie (it is how the zombie behaves)")
    if paxos_zombie_duels and paxos_zombie_fights:
        raise RealRunError("--paxos-zombie-duels and --paxos-zombie-fights: a zombie either fights at its ballot or duels above it, not both")
    if paxos_crash_at is not None:
        if "paxos" not in apps:
            raise RealRunError("--paxos-crash-at needs the paxos tenant among --apps")
        if not 0 < paxos_crash_at < 1:
            raise RealRunError(f"--paxos-crash-at {paxos_crash_at}: a fraction in (0, 1)")
    elif paxos_zombie:
        raise RealRunError("--paxos-zombie needs --paxos-crash-at (the zombie is the leader stopped at its crash point)")
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


def _detect(p4runtime: str, ap: subprocess.Popen[str], err: Path, att_slot: int, att_port: int, tags: list[str]) -> dict[str, Any]:
    """The controller's side of the attack: release the attacker, and until it is done read
    the switch's counters over P4Runtime every window (the attacker slot's mismatches plus
    the forged uids counted on its port, every tenant's mismatches) into `Detection`, on the
    wall clock. Returns the model's `attack` keys, and how the reads went."""
    from inswitch.p4rt.client import SwitchClient

    det = Detection(window_us=Detection.window_us * SCALE)
    with SwitchClient(p4runtime) as c:

        def mismatches(slot: int) -> int:
            return dict(c.read_register("tenant_events", slot)).get(slot, 0) & 0xFFFFFFFF

        def forged() -> int:
            return dict(c.read_register("forged_uid", att_port)).get(att_port, 0)

        # Windows count from now: what tenants did before is not held against them.
        det.last["attacker"] = mismatches(att_slot) + forged()
        for slot, tag in enumerate(tags):
            det.last[tag] = mismatches(slot)
        before = dict(det.last)
        assert ap.stdin is not None and ap.stdout is not None
        t0 = time.monotonic()
        ap.stdin.write("GO\n")
        ap.stdin.flush()
        flagged_at: int | None = None
        polls: list[float] = []
        done = False
        while True:
            # The attacker's DONE ends the loop after one more read (its last frames counted).
            if not done and select.select([ap.stdout.fileno()], [], [], 0)[0]:
                got = _line(ap, 5, "attacker", err)
                if got != "DONE":
                    raise RuntimeError(f"attacker said {got!r}")
                done = True
            if time.monotonic() - t0 > 60:
                raise RuntimeError(f"attacker: not done within 60 s; {_tail(err)}")
            t_read = time.monotonic()
            # Each count is stamped when its read has returned (what the controller knows then).
            count = mismatches(att_slot) + forged()
            now = int((time.monotonic() - t0) * 1e6)
            if det.observe(now, "attacker", count) and flagged_at is None:
                flagged_at = now
            for slot, tag in enumerate(tags):
                count = mismatches(slot)
                det.observe(int((time.monotonic() - t0) * 1e6), tag, count)
            polls.append(time.monotonic() - t_read)
            if done:
                break
            time.sleep(max(0.0, det.window_us / 1e6 - (time.monotonic() - t_read)))
        out = json.loads(_line(ap, 30, "attacker", err))
        ap.wait(timeout=10)
        att_mism, on_port = mismatches(att_slot), forged()
        during = {tag: mismatches(slot) - before[tag] for slot, tag in enumerate(tags)}
    return {
        "detected": flagged_at is not None,
        "detection_time_us": flagged_at,
        "attacker_reads": out["reads"],
        "attacker_values_leaked": out["values_leaked"],
        "forged_on_port": on_port,
        "attacker_mismatches": att_mism,
        "legitimate_tenants_flagged": sorted(n for n in det.flagged if n != "attacker"),
        "log": det.log,
        # Real-only: what the switch counted against each tenant while it was attacked
        # (the replays carry the victim's uid, and must count on the attacker's port).
        "tenant_mismatches_during_attack": during,
        # The clock and the controller's reads.
        "detection_clock": "wall µs from the controller releasing the attacker to the read that flagged it",
        "window_us": det.window_us,
        "controller_reads": len(polls),
        "controller_read_ms_mean": 1e3 * float(np.mean(polls)) if polls else None,
        "frames_sent": out["sent"],
        "attack_s": out["attack_s"],
        "attacker_replies": out["replies"],
        "attacker_items_answered": out["replies_done"],
        "attacker_send_errors": out["send_errors"],
    }


def _acceptors(c: Any, base: int, n: int) -> list[tuple[int, int, int]]:
    """What the switch's acceptors hold chosen in slots `base..base+n` (one P4Runtime read of
    the `paxos_round_j` and `paxos_vote_j` cells): (instance, value, ballot) wherever two
    acceptors voted the same value for the same instance tag at the same ballot (`vrnd`)."""
    from p4.v1 import p4runtime_pb2

    names = [f"paxos_{a}_{j}" for a in ("round", "vote") for j in range(3)]
    ids = {c.schema.registers.get(nm).id: nm for nm in names}
    ents = []
    for rid in ids:
        for idx in range(base, base + n):
            e = p4runtime_pb2.Entity()
            e.register_entry.register_id = rid
            e.register_entry.index.index = idx
            ents.append(e)
    from inswitch.p4rt import bytestrings

    cell = {(ids[e.register_entry.register_id], e.register_entry.index.index): bytestrings.to_int(e.register_entry.data.bitstring) for e in c.read(ents)}
    chosen = []
    for idx in range(base, base + n):
        votes: dict[tuple[int, int, int], int] = {}
        for j in range(3):
            vrnd = cell.get((f"paxos_round_{j}", idx), 0) >> 32  # rnd (lo), vrnd (hi)
            vote = cell.get((f"paxos_vote_{j}", idx), 0)  # instance tag (lo), value (hi)
            tag, value = vote & 0xFFFFFFFF, int(np.int32(np.uint32(vote >> 32)))
            if vrnd and tag:
                votes[(tag - 1, value, vrnd)] = votes.get((tag - 1, value, vrnd), 0) + 1
        chosen += [k for k, v in votes.items() if v >= 2]
    return chosen


def _kill_at_crashpoint(p: subprocess.Popen[str], out: dict[str, Any], timeout_s: float, client: Any, base: int, n: int,
                        zombie: tuple[Path, Path] | None = None) -> None:
    """The primary Paxos proposer's lines after GO: at `CRASHPOINT` (its last value
    proposed) SIGKILL it, read what the switch's acceptors hold chosen then (`_acceptors`),
    and read what it printed before it died (`DECIDED inst value`) to the end. Fills `out`:
    kill time (monotonic, the clock every process of the host shares), the decisions it
    saw, the acceptors' choices, its exit status. `client`: a P4Runtime session connected
    before the kill (the read follows it at once), shared by the crashing tenants' threads.

    With `zombie` (the backup's took-over file, the zombie's dead file; `--paxos-zombie`):
    SIGSTOP instead at the crash point (`killed_at` is then that moment), SIGCONT once the
    backup created the first file (its first decision; polled every 10 ms), SIGKILL at the
    zombie's `ZOMBIE {json}` report (kept in `out["zombie"]`), then create the second."""
    assert p.stdout is not None
    decided: list[tuple[int, int]] = []
    out["decided"] = decided
    end = time.monotonic() + timeout_s
    fd = p.stdout.fileno()
    buf = b""
    stopped_until = 0.0  # while stopped: the deadline for the backup's takeover
    resumed_until = 0.0  # once resumed: the deadline for the zombie's report

    def kill_zombie() -> None:
        assert zombie is not None
        os.kill(p.pid, signal.SIGKILL)
        out["zombie_killed_at"] = time.monotonic()
        zombie[1].touch()

    while time.monotonic() < end:
        now = time.monotonic()
        if stopped_until and "resumed_at" not in out and zombie is not None:
            if zombie[0].exists():
                os.kill(p.pid, signal.SIGCONT)
                out["resumed_at"] = time.monotonic()
                resumed_until = out["resumed_at"] + 10 * ZOMBIE_S + 5
            elif now > stopped_until:
                kill_zombie()  # no takeover: the run fails (no zombie report)
        if resumed_until and "zombie_killed_at" not in out and now > resumed_until:
            kill_zombie()  # no report: the run fails
        if not select.select([fd], [], [], 0.01 if zombie is not None else 0.5)[0]:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            w = line.decode(errors="replace").split()
            if w[:1] == ["CRASHPOINT"] and "killed_at" not in out:
                os.kill(p.pid, signal.SIGSTOP if zombie is not None else signal.SIGKILL)
                out["killed_at"] = time.monotonic()
                stopped_until = out["killed_at"] + 10
                try:
                    out["switch_chosen"] = _acceptors(client, base, n)
                    out["switch_read_at"] = time.monotonic()
                except Exception as e:  # reported as a violation: the check is incomplete
                    out["switch_read_error"] = f"the switch's acceptors not read: {' '.join(str(e).split())}"
            elif w[:1] == ["DECIDED"] and len(w) == 3 and w[2] != "None":
                decided.append((int(w[1]), int(w[2])))
            elif w[:1] == ["ZOMBIE"] and zombie is not None and "zombie_killed_at" not in out:
                out["zombie"] = json.loads(line.decode()[len("ZOMBIE ") :])
                kill_zombie()
    if "killed_at" not in out and p.poll() is None:
        p.kill()  # never reached its crash point: the run fails (killed_by_signal stays None)
    if zombie is not None and p.poll() is None and "zombie_killed_at" not in out:
        kill_zombie()
    try:
        rc = p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        rc = None
    out["returncode"] = rc


def _crash_figures(report: dict[str, Any], crash: dict[str, Any], fraction: float | None, zombie: bool = False, fights: bool = False,
                   duels: bool = False) -> dict[str, Any]:
    """The paxos tenant's keys of a crash run, with the safety check on every learner's log
    (`paxos_safety`): what the dead leader saw chosen must be there unchanged. With a
    zombie, also: none of its fresh values in any log or decided as it saw it; with a duel
    of ballots (`duels`) the zombie's values may be chosen (it took over above the refusal),
    and each it saw chosen must be in every log at its instance, unchanged."""
    killed = crash.get("killed_at")
    rc = crash.get("returncode")
    dead = list(crash.get("decided", []))
    z0 = crash.get("zombie") or {}
    if duels:
        dead += [(inst, v) for inst, _, v in z0.get("decided_after_resume", [])]
    in_switch = crash.get("switch_chosen", [])
    found, gap_free = paxos_safety(report["logs"], report["learner_violations"], report["must_deliver"], dead + [(i, v) for i, v, _ in in_switch])
    if "switch_read_error" in crash:
        found.append(crash["switch_read_error"])
    z = crash.get("zombie")
    zkeys: dict[str, Any] = {"zombie": zombie, "zombie_fights": fights, "zombie_duels": duels}
    if zombie:
        if z is None:
            found.append("the zombie leader did not report (not resumed, or silent after its resume)")
            z = {}
        fresh = set(z.get("values", []))
        in_logs = sorted({v for log in report["logs"] for v in log if v in fresh})
        by_it = [d for d in z.get("decided_after_resume", []) if d[2] in fresh]
        if not duels:
            for v in in_logs:
                found.append(f"value {v}, proposed only by the zombie at its stale ballot, delivered")
            for inst, b, v in by_it:
                found.append(f"instance {inst}: the zombie saw its value {v} chosen at ballot {b}")
        else:
            # The duel's rounds: takeovers above a refusal after a backoff
            # (`Proposer::backoff_us`), the zombie's since its resume and the survivor's;
            # `ballot_rounds`: every phase 1 either ran from the zombie's resume on.
            zkeys.update({
                "zombie_duel_rounds": z.get("duels"),
                "zombie_rounds": z.get("rounds"),
                "survivor_duel_rounds": report.get("duels"),
                "survivor_rounds": report.get("rounds"),
                "survivor_final_ballot": report.get("final_ballot"),
                "ballot_rounds": (z.get("rounds") or 0) + (report.get("rounds") or 0),
                "zombie_values_in_logs": len(in_logs),
            })
        resumed = z.get("resumed_at")
        zkeys.update({
            "zombie_resume_rule": "SIGSTOP at the crash point; SIGCONT once the backup saw its first decision (it creates a file the runner polls every 10 ms); "
                                  f"SIGKILL at its report, {ZOMBIE_S * 1e3:g} ms after its resume",
            "zombie_ballot": z.get("ballot"),
            # With --paxos-zombie-fights it ignored every refusal (`Proposer::stubborn`):
            # still at this ballot at its kill, resending its refused proposals all along.
            "zombie_ballot_at_kill": z.get("ballot_at_report"),
            "zombie_resumed_ms": None if killed is None or crash.get("resumed_at") is None else 1e3 * (crash["resumed_at"] - killed),
            "zombie_resumed_after_takeover": report["first_decision_at"] is not None and crash.get("resumed_at") is not None
                                             and report["first_decision_at"] < crash["resumed_at"],
            # Its own counters, from its SIGCONT handler to its report: raw Paxos frames to
            # the switch (first sends and retransmissions), of which retransmissions, relay
            # datagrams to the backup's learners.
            "zombie_frames_sent": z.get("frames_sent"),
            # Deposed while alive, before its stop (a stalled leader the backup suspected
            # early, whose refusal it already read): no stale proposal left to send.
            "zombie_deposed_before_stop": z.get("deposed_before_resume") is not None,
            "zombie_retransmissions": z.get("resent"),
            "zombie_relay_sent": z.get("relay_sent"),
            # Acceptors' answers refusing its old ballot (they had promised a higher one):
            # its frames reached the switch and were refused there.
            "zombie_refusals": z.get("refused"),
            "zombie_stepped_down_to": z.get("stepped_down_to"),
            "zombie_stepped_down_ms": None if resumed is None or z.get("stepped_down_at") is None else 1e3 * (z["stepped_down_at"] - resumed),
            "zombie_values_proposed": len(fresh),
            "zombie_values_decided": len(in_logs) + len(by_it),
            # Answers to its pre-stop proposals it read after resuming (decided before the
            # takeover; each checked in the logs with the dead leader's decisions).
            "zombie_decisions_after_resume": len(z.get("decided_after_resume", [])),
            "zombie_killed_ms": None if killed is None or crash.get("zombie_killed_at") is None else 1e3 * (crash["zombie_killed_at"] - killed),
        })

    def ms(t: float | None) -> float | None:
        return None if t is None or killed is None else 1e3 * (t - killed)

    return {
        "took_over": report["detected_at"] is not None,
        "killed_by_signal": -rc if rc is not None and rc < 0 and "killed_at" in crash else None,
        "paxos_crash_at": fraction,
        "values_by_dead_leader": crash.get("values"),
        "values_by_survivor": len(report["must_deliver"]),
        "dead_leader_decisions_seen": len(dead),
        # A leader only descheduled past DETECT_S is suspected while alive: the two duel
        # until its kill, and it may see the survivor's values chosen too (each instance
        # once in the logs). Distinct instances it saw decided, and of those the ones
        # holding a survivor's value (none when the takeover followed the kill).
        "dead_leader_instances_seen": len({i for i, _ in dead}),
        "dead_leader_decisions_of_survivor_values": len({i for i, v in dead if v in set(report["must_deliver"])}),
        # Read from the switch's acceptors right after the kill: instances a majority had
        # chosen (each must be delivered unchanged), and how many at the dead leader's
        # ballot (proposer id 1), however much of it the leader saw.
        "chosen_in_switch_at_kill": len(in_switch),
        "chosen_in_switch_by_dead_leader": sum(1 for _, _, b in in_switch if b & 0xFF == 1),
        "acceptors_read_ms": ms(crash.get("switch_read_at")),
        "detection_rule": f"no datagram (heartbeat every {HEARTBEAT_S * 1e3:g} ms, votes) from the leader for {DETECT_S * 1e3:g} ms",
        # From the kill. The leader may have been silent a little before it (a descheduled
        # process on a loaded machine): the last datagram the backup got, from the kill.
        "detection_ms": ms(report["detected_at"]),
        "leader_last_heard_ms": ms(report["last_heard_at"]),
        "phase1_done_ms": ms(report["leading_at"]),
        "takeover_ms": ms(report["first_decision_at"]),
        "survivor_ballot": report["ballot"],
        "violations": found,
        "delivered": report["delivered"],
        "gap_free": gap_free and report["gap_free"],
        **zkeys,
    }


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
    attacker: bool = False,
    attack_during: str = "after",
    pcap: str | None = None,
    paxos_crash_at: float | None = None,
    paxos_zombie: bool = False,
    paxos_zombie_fights: bool = False,
    paxos_zombie_duels: bool = False,
    dup: float = 0.0,
    reorder: float = 0.0,
) -> dict[str, Any]:
    """`attack_during`: "after" the tenants' phases (as the model's attack), or during the
    "inaas" phase (released with the tenants; the detector then watches working tenants).
    `pcap`: a directory for the switch's per-port captures (the rack's `--pcap`).
    `dup`, `reorder`: probabilities that each switch port duplicates a frame it receives, or
    holds it back until the port's next frame passed (the switch's `--fault`, as `loss`)."""
    from inswitch.p4rt.client import SwitchClient
    from inswitch.topology import Rack, netns

    check_args(apps, attacker, paxos_crash_at, paxos_zombie, paxos_zombie_fights, paxos_zombie_duels)
    if attack_during not in ("after", "inaas"):
        raise ValueError(f"attack_during: {attack_during!r} (after, inaas)")
    if paxos_crash_at is not None and attacker and attack_during == "inaas":
        # Both hold a P4Runtime session during the INaaS phase, with one election id.
        raise RealRunError("a Paxos crash and an attack during the INaaS phase cannot run together")
    sizes = real_sizes(quick)
    names = [a for a in apps for _ in range(instances)]
    regions = schedule(scheduler, names, budget, [a in subscribers for a in names])
    rng = np.random.default_rng(seed)
    uids: list[int] = []
    while len(uids) < len(names) + int(attacker):
        u = int(rng.integers(1, 2**31 - 1))
        if u not in uids:
            uids.append(u)
    # With a Paxos proposer crash: a backup host per paxos tenant (see `real_paxos.py`).
    crashing = [i for i, a in enumerate(names) if a == "paxos"] if paxos_crash_at is not None else []
    for i in crashing:
        if regions[i].lease_us < MAX_LEASE_US:
            raise RealRunError(f"--paxos-crash-at: scheduler {scheduler} gives paxos a {regions[i].lease_us} µs lease, not held for good: its acceptors would not be in the switch (use --scheduler inaas)")
    rack = Rack()
    n_hosts = len(names) + 2 + int(attacker) + len(crashing)
    progress(f"rack {name}: {n_hosts} hosts")
    t_run = time.monotonic()
    # Paxos's acceptors are the `inaas_paxos` program (inaas + acceptors; tofino2), which the
    # model's in-process service runs for every tenant; without Paxos, `inaas` (tofino1).
    programs = "forward,inaas_paxos" if "paxos" in names else "forward,inaas"
    # The switch's seeded fault injector on every port's receive side: loss, duplication,
    # reordering (this machine's kernel has no sch_netem, so `tc netem` on the veths is out).
    fault = ",".join([f"{k}={v:g}" for k, v in (("loss", loss), ("dup", dup), ("reorder", reorder)) if v > 0] + [f"seed={seed}"]) if loss or dup or reorder else None
    # The dense tenant trains through the allreduce program (docs/inaas.md: its job
    # partition is leased by this controller).
    dense = [i for i, a in enumerate(names) if a == "dense"]
    if dense:
        programs += ",allreduce"
    st = rack.up(n_hosts, name=name, programs=programs, p4runtime=f"127.0.0.1:{free_local_port()}",
                 metrics=f"127.0.0.1:{free_local_port()}", fault=fault, pcap=pcap)
    procs: list[subprocess.Popen[str]] = []
    crash_client: Any = None  # the P4Runtime session that reads the acceptors at a Paxos kill
    logs = Path(tempfile.mkdtemp(prefix=f"inswitch-{name}-"))
    try:
        gk, hosts, srv = st.hosts[0], st.hosts[1 : 1 + len(names)], st.hosts[-1]
        att_h = st.hosts[1 + len(names)] if attacker else None
        backup_h = dict(zip(crashing, st.hosts[1 + len(names) + int(attacker) : -1]))
        scaled = [min(MAX_LEASE_US, r.lease_us * LEASE_SCALE) for r in regions]
        # The attacker: a kv tenant of its own (uid, slot after the others', the model's
        # 1000 µs lease and cap, scaled as the others').
        att_uid, att_slot, att_lease = (uids[-1], len(names), min(MAX_LEASE_US, ATTACKER_LEASE_US * LEASE_SCALE)) if attacker else (0, 0, 0)
        with SwitchClient(st.switch.p4runtime) as c:
            tenants_t, gkt = _p4_name(c, "tenants"), _p4_name(c, "goalkeeper")
            c.insert_entry(gkt, {"meta.zero": 0}, "set_goalkeeper", {"port": gk.port})
            for slot, (h, uid, r, lease) in enumerate(zip(hosts, uids, regions, scaled)):
                cap = min(MAX_LEASE_US, r.max_lease_us * LEASE_SCALE)
                for port in (h.port, gk.port):
                    c.insert_entry(tenants_t, {"ig_intr_md.ingress_port": port, "hdr.inaas.uid": uid}, "set_tenant", {"slot": slot, "max_lease_us": cap})
            for i, bh in backup_h.items():
                # The backup proposer shares the tenant's uid and slot (and so its leases).
                c.insert_entry(tenants_t, {"ig_intr_md.ingress_port": bh.port, "hdr.inaas.uid": uids[i]}, "set_tenant",
                               {"slot": i, "max_lease_us": min(MAX_LEASE_US, regions[i].max_lease_us * LEASE_SCALE)})
            if att_h is not None:
                for port in (att_h.port, gk.port):
                    c.insert_entry(tenants_t, {"ig_intr_md.ingress_port": port, "hdr.inaas.uid": att_uid}, "set_tenant", {"slot": att_slot, "max_lease_us": att_lease})
        py = sys.executable
        hexmac = lambda m: m.replace(":", "")  # noqa: E731

        def start(h: Any, argv: list[str], tag: str) -> subprocess.Popen[str]:
            with open(logs / f"{tag}.err", "w") as err:  # the child keeps its own descriptor
                p = subprocess.Popen(netns.netns_argv(h.netns or "", [py, *argv]), stdout=subprocess.PIPE, stderr=err, stdin=subprocess.PIPE, text=True)
            procs.append(p)
            return p

        limit_s = 30.0 if quick else 120.0
        gk_p = start(gk, ["-c", GOALKEEPER, gk.ifname or "", hexmac(gk.mac), str(20 * limit_s),
                          json.dumps([[u, KIND[a], lease] for u, a, lease in zip(uids, names, scaled)] + ([[att_uid, "kv", att_lease]] if attacker else []))],
                     "goalkeeper")
        if _line(gk_p, 30, "goalkeeper", logs / "goalkeeper.err") != "READY":
            raise RuntimeError("goalkeeper did not start")
        servers: list[list[subprocess.Popen[str]]] = []
        ports: list[list[int]] = []
        for i, a in enumerate(names):
            # Paxos's host-only version: Paxos with three acceptor processes (phases 1 and
            # 2, `SERVER` with an acceptor id), the tenant's proposer and learners as in the switch's.
            ports.append([9100 + 4 * i + k for k in range(3 if a == "paxos" else 1)])
            servers.append([])
            for k, port in enumerate(ports[-1]):
                argv = ["-c", SERVER, srv.ip, str(port)] + ([str(k)] if a == "paxos" else [])
                sp = start(srv, argv, f"server{port}")
                if _line(sp, 30, f"server {port}", logs / f"server{port}.err") != "READY":
                    raise RuntimeError(f"server {port} did not start")
                servers[-1].append(sp)
        dense_leases = DenseLeases(st.switch.p4runtime, st.switch.metrics, {i: (uids[i], hosts[i]) for i in dense}, sizes.workers)
        dense_jobs = dense_leases.jobs
        tenants: list[tuple[str, subprocess.Popen[str]]] = []
        primaries: list[tuple[str, subprocess.Popen[str], int, int]] = []
        crashes: dict[int, dict[str, Any]] = {}
        zfiles: dict[int, tuple[Path, Path]] = {}
        killers: list[threading.Thread] = []
        tags: list[str] = []
        counter: dict[str, int] = {}
        for i, (a, h, uid, r, lease) in enumerate(zip(names, hosts, uids, regions, scaled)):
            inst = counter.get(a, 0)
            counter[a] = inst + 1
            cfg = {"app": a, "inst": inst, "index": i, "seed": seed, "uid": uid, "mac": hexmac(h.mac), "gk_mac": hexmac(gk.mac),
                   "ifname": h.ifname, "ip": h.ip, "server_ip": srv.ip, "server_ports": ports[i], "lease_us": lease,
                   "rto_us": RTO_US * SCALE, "bl_rto_us": App.BL_RTO_US * SCALE, "scale": SCALE, "phase_limit_s": limit_s,
                   "region": dataclasses.asdict(r), "sizes": dataclasses.asdict(sizes)}
            if i in dense_jobs:
                cfg["allreduce"] = dense_leases.job_config(i, srv.ip, seed, quick)
            tag = f"{a}{inst}"
            tags.append(f"{a}#{inst}")
            if i in backup_h:
                # The primary leads and is killed; the backup reports as the tenant.
                bh, k = backup_h[i], crash_after(sizes.paxos_instances, float(paxos_crash_at or 0))
                relay_port = 9600 + i
                pcfg = {**cfg, "paxos_role": "primary", "paxos_peer": [bh.ip, relay_port], "paxos_crash_values": k, "paxos_zombie": paxos_zombie,
                        "paxos_zombie_fights": paxos_zombie_fights, "paxos_zombie_duels": paxos_zombie_duels}
                primaries.append((tag, start(h, ["-m", "inswitch.apps.inaas.real_tenant", json.dumps(pcfg)], f"{tag}primary"), i, k))
                zfiles[i] = (logs / f"{tag}.took_over", logs / f"{tag}.zombie_dead")
                cfg = {**cfg, "mac": hexmac(bh.mac), "ifname": bh.ifname, "ip": bh.ip, "paxos_role": "backup", "paxos_relay_port": relay_port,
                       "paxos_crash_values": k, "paxos_zombie_duels": paxos_zombie_duels}
                if paxos_zombie:
                    cfg.update({"paxos_took_over_file": str(zfiles[i][0]), "paxos_zombie_dead_file": str(zfiles[i][1])})
                h = bh
            tenants.append((tag, start(h, ["-m", "inswitch.apps.inaas.real_tenant", json.dumps(cfg)], tag)))
        attack: dict[str, Any] | None = None
        ap: subprocess.Popen[str] | None = None
        if att_h is not None:
            # The victim is the first tenant, as the model's.
            acfg = {"mac": hexmac(att_h.mac), "gk_mac": hexmac(gk.mac), "ifname": att_h.ifname, "uid": att_uid, "lease_us": att_lease,
                    "victim_mac": hexmac(hosts[0].mac), "victim_uid": uids[0], "victim_lease_us": scaled[0], "seed": seed, "budget": budget,
                    "steps": ATTACK_STEPS, "step_us": ATTACK_STEP_US * SCALE, "tail_s": 0.2}
            ap = start(att_h, ["-m", "inswitch.apps.inaas.real_attacker", json.dumps(acfg)], "attacker")
            if _line(ap, 60, "attacker", logs / "attacker.err") != "READY":
                raise RuntimeError("attacker did not start")
        watcher: threading.Thread | None = None
        caught: list[Any] = []

        def attack_now() -> None:
            assert att_h is not None and ap is not None
            try:
                caught.append(_detect(st.switch.p4runtime, ap, logs / "attacker.err", att_slot, att_h.port, tags))
            except BaseException as e:  # re-raised in the runner's thread
                caught.append(e)

        for phase in ("inaas", "host"):
            for tag, p in tenants + ([(f"{t}primary", pp) for t, pp, _, _ in primaries] if phase == "inaas" else []):
                got = _line(p, 120, f"tenant {tag}", logs / f"{tag}.err")
                if got != f"READY {phase}":
                    raise RuntimeError(f"tenant {tag} said {got!r}")
            progress(f"{phase} phase: {len(tenants)} tenants")
            if phase == "inaas":
                dense_leases.grant_all()
                # The server's host learns each live job id and sends under it from its
                # own port, before the tenants start: the switch must drop it all.
                dense_leases.probe_forged_port(srv)
                # And from a port that is a job's, under an id that is not that port's.
                dense_leases.probe_forged_worker(srv)
            else:
                dense_leases.drops_before = dense_leases.unknown_job_drops()
            for _, p in tenants + ([(t, pp) for t, pp, _, _ in primaries] if phase == "inaas" else []):
                assert p.stdin is not None
                p.stdin.write("GO\n")
                p.stdin.flush()
            if phase == "inaas" and primaries:
                crash_client = SwitchClient(st.switch.p4runtime)
                for tag, pp, i, k in primaries:
                    crashes[i] = {"values": k}
                    # The acceptors' slots the dead leader can have used (its values, and the
                    # ring's size at most).
                    n_read = min(regions[i].size, sizes.paxos_instances)
                    killers.append(threading.Thread(target=_kill_at_crashpoint, args=(pp, crashes[i], limit_s + 30, crash_client, regions[i].base, n_read,
                                                                                      zfiles[i] if paxos_zombie else None), daemon=True))
                    killers[-1].start()
            for tag, p in tenants:
                # Each tenant has begun its phase holding what it prepared (its leases taken
                # again if they lapsed while the runner waited for every READY).
                got = _line(p, 60, f"tenant {tag}", logs / f"{tag}.err")
                if got != f"BEGUN {phase}":
                    raise RuntimeError(f"tenant {tag} said {got!r}")
            if phase == "inaas" and ap is not None and attack_during == "inaas":
                progress("attacker, during the inaas phase")
                watcher = threading.Thread(target=attack_now, daemon=True)
                watcher.start()
            for tag, p in tenants:
                got = _line(p, limit_s + 60, f"tenant {tag}", logs / f"{tag}.err")
                if got != f"DONE {phase}":
                    raise RuntimeError(f"tenant {tag} said {got!r}")
            if watcher is not None:
                watcher.join(timeout=90)  # the attack is over before the host-only phase
            for kt in killers:
                kt.join(timeout=30)
            killers = []
            if crash_client is not None:
                crash_client.close()
                crash_client = None
            if phase == "inaas":
                # The phase is over: every dense job's lease ends (its `jobs` entry goes).
                dense_leases.revoke_all()
        dense_leases.drops_after = dense_leases.unknown_job_drops() if dense else 0
        results = []
        for tag, p in tenants:
            results.append(json.loads(_line(p, 60, f"tenant {tag}", logs / f"{tag}.err")))
            p.wait(timeout=10)
        if ap is not None and attack_during == "after":
            progress("attacker")  # as the model's: after the tenants' phases
            attack_now()
        if ap is not None:
            if not caught:
                raise RuntimeError("attacker: the controller's detection did not finish")
            if isinstance(caught[0], BaseException):
                raise caught[0]
            attack = {**caught[0], "during": attack_during}
        t_end = time.monotonic()
        run_us = int((t_end - t_run) * 1e6)
        with SwitchClient(st.switch.p4runtime) as c:
            usage = []
            for slot in range(len(names)):
                u = dict(c.read_register("tenant_usage", slot)).get(slot, 0)
                e = dict(c.read_register("tenant_events", slot)).get(slot, 0)
                usage.append({"alu_ops": u & 0xFFFFFFFF, "packets": u >> 32, "mismatches": e & 0xFFFFFFFF, "leases": e >> 32})
        served = []
        acceptor_stats: list[list[dict[str, int]]] = []
        for group in servers:
            n = 0
            acceptor_stats.append([])
            for sp in group:
                so, _ = sp.communicate(input="", timeout=10)
                lines = so.strip().splitlines()
                n += int(lines[-1])
                acceptor_stats[-1] += [json.loads(x.split(" ", 1)[1]) for x in lines if x.startswith("ACCEPTOR ")]
            served.append(n)
        gk_out, _ = gk_p.communicate(input="", timeout=30)
        gk_res = json.loads(gk_out.strip().splitlines()[-1])
    finally:
        if crash_client is not None:
            crash_client.close()
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
    # Holds from the goalkeeper's grants: its receive times on CLOCK_MONOTONIC, which
    # every process of the rack shares (namespaces do not change it), so the run's end is
    # this process's `t_end`.
    held = folded_holds(gk_res["held_closed"], gk_res["open_grants"], int(t_end * 1e6))
    for res, r, u, uid in zip(results, regions, usage, uids):
        a, inst = res["app"], res["inst"]
        key = a if instances == 1 else f"{a}#{inst}"
        inaas, host = float(res["inaas"]), float(res["host_only"])
        speed = (inaas / host) if HIGHER_IS_BETTER[a] else (host / inaas)
        fig = {"metric": res["figure"], "inaas": inaas, "host_only": host, "unit": "items/us" if HIGHER_IS_BETTER[a] else "us",
               "speedup": speed, "wrong_results": res["wrong"], "finished": res["finished"], "correct": res["wrong"] == 0 and res["finished"]}
        extra = dict(res.get("extra", {}))
        report = extra.pop("paxos_crash", None)
        fig.update(extra)
        if report is not None:
            fig.update(_crash_figures(report, crashes.get(len(out_apps), {}), paxos_crash_at, paxos_zombie, paxos_zombie_fights, paxos_zombie_duels))
            fig["correct"] = fig["correct"] and not fig["violations"] and fig["took_over"] and fig["killed_by_signal"] == signal.SIGKILL
            if paxos_zombie:
                fig["correct"] = fig["correct"] and (bool(fig["zombie_frames_sent"]) or fig["zombie_deposed_before_stop"]) and fig["zombie_resumed_after_takeover"]
            if paxos_zombie_duels:
                # It duelled: refused, it took over above the refusal at least once.
                fig["correct"] = fig["correct"] and (fig["zombie_deposed_before_stop"] or bool(fig["zombie_duel_rounds"]))
            if paxos_zombie_fights:
                # It fought: refused, yet at its old ballot to the end, never stepped down.
                fig["correct"] = fig["correct"] and (fig["zombie_deposed_before_stop"] or (
                    bool(fig["zombie_refusals"]) and fig["zombie_ballot_at_kill"] == fig["zombie_ballot"] and fig["zombie_stepped_down_to"] is None))
        if len(out_apps) in dense_jobs:
            ctl = dense_leases.report(len(out_apps), extra.get("unleased_probes", []))
            fig["allreduce_lease"] = ctl
            fig["correct"] = (fig["correct"] and ctl["unleased_refused"] and ctl.get("forged_port_refused", False)
                              and ctl.get("forged_worker_refused", False) and ctl.get("forged_worker_own_id_admitted", False))
        if acceptor_stats[len(out_apps)]:
            # The host-only baseline's acceptor processes (promised, voted, refused, ...).
            fig["host_acceptors"] = acceptor_stats[len(out_apps)]
        fig["client"] = {**res["client"], "server_answered": served[len(out_apps)]}
        fig["wall_s"] = res["wall_s"]
        fig["prepared_to_go_s"], fig["prepared_taken_again"] = res["prepared_to_go_s"], res["prepared_taken_again"]
        lp = res.get("latency_percentiles") or {}
        if lp:
            fig["latency_percentiles"] = lp
        if "inaas" in lp and "host" in lp:
            # The median's ratio beside the mean's: on a loaded machine a few scheduling
            # delays of milliseconds move the mean (Table II's metric) far more.
            fig["speedup_p50"] = lp["host"]["p50_us"] / lp["inaas"]["p50_us"]
        out_apps[key] = fig
        per_app.setdefault(a, []).append(speed)
        ledger.append(bill(f"{a}#{inst}", u, int(gk_res["leases"].get(str(uid), 0)), dataclasses.replace(r, lease_us=min(MAX_LEASE_US, r.lease_us * LEASE_SCALE)), prices, run_us,
                           held_us=held.get(uid, 0), clock="the goalkeeper process's receive times, wall clock"))
    load = os.getloadavg()
    return {
        **tenants_result(out_apps, per_app, instances, scheduler, subscribers, loss, (MODE.replace("(forward + inaas)", "(forward + inaas + allreduce)") if dense else MODE), int(sum(r["foreign"] for r in results)), attack, ledger),
        "real": {"rack": name, "hosts": n_hosts, "programs": programs, "time_scale": SCALE, "request_gap_scale": GAP_SCALE, "lease_scale": LEASE_SCALE, "rto_us": RTO_US * SCALE, "baseline_rto_us": App.BL_RTO_US * SCALE,
                 "loss_by": "switch --fault loss" if loss > 0 else None,
                 "dup": dup, "reorder": reorder, "fault": fault, "load_average": list(load), "budget_registers_per_segment": budget,
                 "attack_during": attack_during if attacker else None, "pcap": str(Path(pcap).resolve()) if pcap else None},
        "goalkeeper": gk_res["stats"],
        "wall_us": run_us,
    }

