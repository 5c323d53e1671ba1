"""Keeps a fabric's switches running, as the rack's supervisor keeps its one switch
(`topology/supervisor.py`): `python -m inswitch.topology.supervisor NAME --fabric
--ready-file STATE_DIR/supervisor.json`.

`fabric up` starts it detached once every switch is ready and programmed. It polls every
switch; one that is gone (a crash, `kill -9`) is started again with the same command line,
ports, P4Runtime and metrics addresses and device id, its next generation, and the fabric
controller installs that switch's routing again (`controller.program_switch`, the same
routes as at `up`). Each restart is recorded in the supervisor's file (`extra.restarts`,
the format `restarts.py` reads: `died_at`, then `serving_at`, `forwarding_at`,
`recovery_s`; plus `switch`), so jobs and their controllers see it as they see a rack's.
Records' `generation` counts the fabric's restarts (unique per record: what
`restarts.Watcher` tells apart); `switch_generation` is the switch's own.

Applications' state on the switch (aggregation trees, the jobs' pinned paths) is theirs to
restore (`restarts.Watcher`); their hosts recover by their protocols.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any, Optional

from inswitch.topology import switchproc
from inswitch.topology.errors import RackError
from inswitch.topology.supervisor import CRASH_WINDOW_S, MAX_QUICK_RESTARTS

POLL_S = 0.1
SUPERVISOR_FILE = "supervisor.json"


def restart_argv(argv: list[str], p4runtime: str, metrics: str, generation: int) -> list[str]:
    """The switch's command line for a restart: the addresses it served on (a `:0` port was
    resolved at the first start) and its generation."""
    out, i = [], 0
    while i < len(argv):
        if argv[i] in ("--p4runtime", "--metrics", "--generation") and i + 1 < len(argv):
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return out + ["--p4runtime", p4runtime, "--metrics", metrics or "127.0.0.1:0", "--generation", str(generation)]


class FabricSupervisor:
    def __init__(self, name: str, record_file: Path) -> None:
        self.name = name
        self.file = record_file
        self.stopping = False
        self.children: dict[str, subprocess.Popen[bytes]] = {}
        self.restarts: list[dict[str, Any]] = []

    def on_signal(self, signum: int, frame: Optional[FrameType]) -> None:
        self.stopping = True
        for ch in self.children.values():
            if ch.poll() is None:
                ch.terminate()

    def write(self) -> None:
        tmp = self.file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"pid": _pid(), "extra": {"restarts": self.restarts}}) + "\n")
        tmp.replace(self.file)

    def record(self, rec: dict[str, Any]) -> None:
        if self.restarts and self.restarts[-1]["generation"] == rec["generation"]:
            self.restarts[-1] = dict(rec)
        else:
            self.restarts.append(dict(rec))
        if self.file.parent.exists():
            self.write()
        print(f"supervisor: {json.dumps(rec)}", file=sys.stderr, flush=True)

    def run(self) -> int:
        from inswitch.topology.fabric import controller
        from inswitch.topology.fabric.fabric import FabricState

        for s in (signal.SIGTERM, signal.SIGINT):
            signal.signal(s, self.on_signal)
        st = FabricState.load(self.name)
        if st is None or not st.ready:
            print(f"supervisor: no fabric named {self.name} up", file=sys.stderr)
            return 1
        topo, plan = st.topo(), st.plan()
        rts = controller.routes(topo, plan)
        gen = {r.plan.name: 1 for r in st.switches}
        quick = {r.plan.name: 0 for r in st.switches}
        started = {r.plan.name: time.time() for r in st.switches}
        given_up: set[str] = set()
        self.write()
        while not self.stopping:
            time.sleep(POLL_S)
            for i, run in enumerate(st.switches):
                name = run.plan.name
                if self.stopping or name in given_up or run.remote:
                    continue  # another machine's switch is that machine's supervisor's
                ch = self.children.get(name)
                if (ch.poll() is None) if ch is not None else switchproc.is_alive(run.pid, run.ready_file):
                    continue
                cur = FabricState.load(self.name)
                if cur is None or not cur.ready:
                    return 0  # being taken down
                died = time.time()
                code = ch.returncode if ch is not None else None
                quick[name] = quick[name] + 1 if died - started[name] < CRASH_WINDOW_S else 0
                rec: dict[str, Any] = {"switch": name, "generation": len(self.restarts) + 2, "switch_generation": gen[name] + 1,
                                       "died_at": died, "pid": run.pid,
                                       "exit": "gone" if code is None else code if code >= 0 else f"signal {signal.Signals(-code).name}"}
                if quick[name] > MAX_QUICK_RESTARTS:
                    rec["gave_up"] = f"{name} died {quick[name]} times within {CRASH_WINDOW_S:g} s of starting"
                    given_up.add(name)
                    self.record(rec)
                    continue
                self.record(rec)
                gen[name] += 1
                Path(run.ready_file).unlink(missing_ok=True)
                with open(run.log, "ab") as out:
                    ch = subprocess.Popen(restart_argv(run.argv, run.p4runtime, run.metrics, gen[name]), stdin=subprocess.DEVNULL,
                                          stdout=out, stderr=subprocess.STDOUT, cwd=st.state_dir, close_fds=True)
                self.children[name] = ch
                run.pid = ch.pid
                started[name] = time.time()
                try:
                    switchproc.wait_ready(ch.pid, Path(run.ready_file), Path(run.log), 30.0)
                    rec["serving_at"] = time.time()
                    controller.program_switch(topo, plan, run.plan, run.p4runtime, rts[name])
                    rec["forwarding_at"] = time.time()
                except RackError as e:
                    rec["error"] = str(e).splitlines()[0]
                rec["recovery_s"] = round(float(rec.get("forwarding_at", time.time())) - died, 3)
                cur = FabricState.load(self.name)
                if cur is not None:  # `down` and `status` find the new process by its pid too
                    cur.switches[i].pid = ch.pid
                    cur.save()
                self.record(rec)
        return 0


def _pid() -> int:
    import os

    return os.getpid()


def main(name: str, record_file: Path) -> int:
    return FabricSupervisor(name, record_file).run()
