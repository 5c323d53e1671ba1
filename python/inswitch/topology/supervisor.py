"""Keeps a rack's switch running: `python -m inswitch.topology.supervisor NAME --ready-file F`.

`rack up` starts this process detached; it starts the switch as its child and, when the
switch exits without being asked to (a crash, `kill -9`), starts it again on the same ports
and the same P4Runtime and metrics addresses, with the next generation number
(`--generation`, in the switch's ready file and `/metrics` as `inswitch_switch_generation`),
then installs the rack's forwarding state again through P4Runtime, as the controller that
programmed it did at `up` (the rack's election id). Each restart is recorded in the rack's
state (`extra.restarts`: when the switch died, how it ended, when it was serving and
forwarding again), which `rack status` shows and jobs read.

Applications' own state (aggregation trees, caches, leases) is theirs to restore: their
hosts see the switch's registers empty and recover by their protocols (see
`docs/switchd.md`).

A switch that dies again within `CRASH_WINDOW_S` of its start, `MAX_QUICK_RESTARTS` times in
a row, is left down (its log says why) rather than restarted forever.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any, Optional

from inswitch.topology import control, switchproc
from inswitch.topology.errors import RackError
from inswitch.topology.state import RackState, load_state

CRASH_WINDOW_S = 10.0
MAX_QUICK_RESTARTS = 3
POLL_S = 0.05


def with_addresses(argv: list[str], st: RackState, generation: int) -> list[str]:
    """The switch's command line for a restart: the addresses it actually served on (a
    `:0` port was resolved at the first start) and its generation."""
    out, i = [], 0
    while i < len(argv):
        a = argv[i]
        if a in ("--p4runtime", "--metrics", "--generation") and i + 1 < len(argv):
            i += 2
            continue
        out.append(a)
        i += 1
    return out + ["--p4runtime", st.switch.p4runtime, "--metrics", st.switch.metrics, "--generation", str(generation)]


class Supervisor:
    def __init__(self, name: str, ready_file: Path) -> None:
        self.name = name
        self.ready_file = ready_file
        self.stopping = False
        self.child: Optional[subprocess.Popen[bytes]] = None

    def on_signal(self, signum: int, frame: Optional[FrameType]) -> None:
        self.stopping = True
        if self.child is not None and self.child.poll() is None:
            self.child.terminate()

    def start(self, argv: list[str], log: Path) -> subprocess.Popen[bytes]:
        with open(log, "ab") as out:
            return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    cwd=log.parent, close_fds=True)

    def run(self) -> int:
        for s in (signal.SIGTERM, signal.SIGINT):
            signal.signal(s, self.on_signal)
        st = load_state(self.name)
        if st is None:
            print(f"supervisor: no rack named {self.name}", file=sys.stderr)
            return 1
        log = Path(st.switch.log)
        self.child = self.start(st.switch.argv, log)
        generation, quick = 1, 0
        while True:
            code = self.child.wait()
            if self.stopping:
                return 0
            died = time.time()
            st = load_state(self.name)
            if st is None or not st.extra.get("ready"):
                return 0  # the rack is being taken down, or never came up: nothing to keep
            quick = quick + 1 if died - float(st.extra.get("switch_started", died)) < CRASH_WINDOW_S else 0
            rec: dict[str, Any] = {"generation": generation + 1, "died_at": died, "pid": self.child.pid,
                                   "exit": code if code >= 0 else f"signal {signal.Signals(-code).name}"}
            if quick > MAX_QUICK_RESTARTS:
                rec["gave_up"] = f"the switch died {quick} times within {CRASH_WINDOW_S:g} s of starting"
                self.record(st, rec)
                return 1
            # Recorded at once (hosts watch for it: they stop trusting what the switch held),
            # completed once the switch forwards again.
            self.record(st, rec)
            generation += 1
            self.ready_file.unlink(missing_ok=True)  # the dead switch's: must not pass for the new one's
            self.child = self.start(with_addresses(st.switch.argv, st, generation), log)
            try:
                ready = switchproc.wait_ready(self.child.pid, self.ready_file, log, 30.0)
                rec["serving_at"] = time.time()
                control.program_forwarding(str(ready.get("p4runtime") or st.switch.p4runtime), st.hosts, len(st.hosts))
                rec["forwarding_at"] = time.time()
            except RackError as e:
                rec["error"] = str(e).splitlines()[0]
            if self.stopping:
                return 0
            rec["recovery_s"] = round(float(rec.get("forwarding_at", time.time())) - died, 3)
            st.switch.pid = self.child.pid
            st.extra["switch_started"] = time.time()
            self.record(st, rec)

    def record(self, st: RackState, rec: dict[str, Any]) -> None:
        """Add `rec` to the rack's restarts, or update it (the same generation's) in place."""
        restarts = st.extra.setdefault("restarts", [])
        if restarts and restarts[-1]["generation"] == rec["generation"]:
            restarts[-1] = dict(rec)
        else:
            restarts.append(dict(rec))
        st.extra["generation"] = rec["generation"]
        if Path(st.state_dir).exists():
            st.save()
        print(f"supervisor: {json.dumps(rec)}", file=sys.stderr, flush=True)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="inswitch.topology.supervisor")
    ap.add_argument("name")
    ap.add_argument("--ready-file", required=True, type=Path)
    ap.add_argument("--fabric", action="store_true", help="supervise a fabric's switches (topology/fabric/supervisor.py)")
    a = ap.parse_args(argv)
    if a.fabric:
        from inswitch.topology.fabric import supervisor as fabric_supervisor

        return fabric_supervisor.main(a.name, a.ready_file)
    return Supervisor(a.name, a.ready_file).run()


if __name__ == "__main__":
    sys.exit(main())
