"""Start, watch and stop the rack's switch process (`python -m inswitch switch ...`).

The switch runs detached (its own session, output to a log file) so it outlives the
`inswitch rack up` command that started it and a Ctrl-C in that terminal does not reach it.
It tells us it is serving by writing a JSON ready file; until then we only know its pid, so
every wait checks the process too and, on failure, shows the tail of its log.

Pids get reused, so "is the switch alive" also checks that the process's command line still
names this rack's ready file.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from inswitch.topology.errors import RackError

#: Children started by this process, kept so we can reap them (no zombies in long-lived
#: callers such as test sessions) and so Python does not warn they were left running.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def free_local_port() -> int:
    """A TCP port free on loopback now, for a switch's P4Runtime or `/metrics` address (the
    kernel picks it; another process may take it before the switch binds, which the switch
    then reports as an error at start)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def switch_argv(programs: str, ports: str, p4runtime: str, metrics: str, ready_file: Path,
                pcap: str | None = None, python: str | None = None, fault: str | None = None,
                pcap_size: float | None = None, device_id: int = 1, pipes: int = 1,
                port_qdisc: bool = False, ring_frames: int | None = None) -> list[str]:
    """The switch's command line (the contract with `inswitch.switchd`). `ring_frames`:
    receive-ring slots per AF_PACKET port (None: the switch's default)."""
    argv = [python or sys.executable, "-m", "inswitch", "switch", "--program", programs,
            "--ports", ports, "--p4runtime", p4runtime, "--metrics", metrics,
            "--ready-file", str(ready_file), "--l2", "controller"]  # the controller programs L2
    if device_id != 1:
        argv += ["--device-id", str(device_id)]
    if pipes != 1:
        argv += ["--pipes", str(pipes)]
    if port_qdisc:
        argv += ["--port-qdisc"]
    if ring_frames is not None:
        argv += ["--ring-frames", str(ring_frames)]
    if pcap:
        argv += ["--pcap", pcap]
        if pcap_size:
            argv += ["--pcap-size", repr(pcap_size)]
    if fault:
        argv += ["--fault", fault]
    return argv


def supervisor_argv(name: str, ready_file: Path, python: str | None = None) -> list[str]:
    """The command line of the rack's switch supervisor (`supervisor.py`)."""
    return [python or sys.executable, "-m", "inswitch.topology.supervisor", name, "--ready-file", str(ready_file)]


def is_supervisor(pid: int) -> bool:
    cmd = _cmdline(pid, settle_s=0)
    return bool(cmd and "inswitch.topology.supervisor" in cmd)


def launch(argv: list[str], log: Path, cwd: Path) -> int:
    """Start `argv` detached with stdout and stderr to `log`; returns its pid."""
    with open(log, "ab") as out:
        try:
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                 cwd=cwd, start_new_session=True, close_fds=True)
        except OSError as e:
            raise RackError(f"could not start the switch (`{' '.join(argv)}`): {e}") from e
    _CHILDREN[p.pid] = p
    return p.pid


def log_tail(log: Path | str, lines: int = 25) -> str:
    try:
        text = Path(log).read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.rstrip().splitlines()[-lines:]) or "(log is empty)"


def _cmdline(pid: int, settle_s: float = 0.2) -> str | None:
    """The process's command line, None if it is gone. A process in the middle of `execve`
    (just launched) shows an empty one for a moment: wait that out rather than conclude
    "not our switch"."""
    deadline = time.monotonic() + settle_s
    while True:
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return None
        if raw or time.monotonic() > deadline:
            return raw.replace(b"\0", b" ").decode(errors="replace")
        time.sleep(0.005)


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def _reap(pid: int) -> None:
    """Collect the exit status of our own child (others are reaped by init)."""
    p = _CHILDREN.get(pid)
    if p is not None and p.poll() is not None:
        del _CHILDREN[pid]


def is_alive(pid: int | None, marker: str) -> bool:
    """Whether `pid` runs and is still the process whose command line contains `marker`."""
    if not pid:
        return False
    _reap(pid)
    cmd = _cmdline(pid)
    return cmd is not None and marker in cmd and not _is_zombie(pid)


def find_by_marker(marker: str) -> list[int]:
    """Pids of live processes whose command line contains `marker` (this rack's ready-file path,
    which no other process names). Used by `down` when the state file is gone."""
    me = os.getpid()
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != me:
            cmd = _cmdline(int(d.name), settle_s=0)  # kernel threads have none: no waiting
            if cmd and marker in cmd and "inswitch" in cmd and not _is_zombie(int(d.name)):
                pids.append(int(d.name))
    return pids


def wait_ready(pid: int, ready_file: Path, log: Path, timeout: float) -> dict[str, Any]:
    """Wait until the switch has written its ready file (JSON `{pid, p4runtime, metrics, ports}`).
    Fails early if the process exits, and with the log tail either way."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            ready = json.loads(ready_file.read_text())
            if isinstance(ready, dict):
                return ready
        except (FileNotFoundError, ValueError):
            pass  # not written yet, or written only in part
        if not is_alive(pid, str(ready_file)):
            raise RackError(f"the switch exited before it was ready; the end of its log:\n{log_tail(log)}")
        if time.monotonic() > deadline:
            raise RackError(f"the switch was not ready after {timeout:g} s; the end of its log:\n{log_tail(log)}")
        time.sleep(0.05)


def stop(pid: int, marker: str, timeout: float = 5.0) -> bool:
    """SIGTERM, then SIGKILL after `timeout`; True if a live switch was stopped. Signals the
    process only while it is still ours (see [`is_alive`])."""
    if not is_alive(pid, marker):
        _reap(pid)
        return False
    _signal(pid, signal.SIGTERM)
    if _wait_gone(pid, marker, timeout):
        return True
    _signal(pid, signal.SIGKILL)
    if not _wait_gone(pid, marker, 5.0):
        raise RackError(f"switch process {pid} survived SIGKILL")
    return True


def stop_all(pids: list[int], marker: str, timeout: float = 5.0) -> list[int]:
    """[`stop`] for many switches at once: SIGTERM to all, one shared wait, then SIGKILL to
    those left (a fabric of 20 switches stops in one timeout, not twenty)."""
    live = [p for p in pids if is_alive(p, marker)]
    for p in live:
        _signal(p, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(is_alive(p, marker) for p in live):
        time.sleep(0.02)
    for p in live:
        if is_alive(p, marker):
            _signal(p, signal.SIGKILL)
    for p in live:
        if not _wait_gone(p, marker, 5.0):
            raise RackError(f"switch process {p} survived SIGKILL")
    for p in pids:
        _reap(p)
    return live


def _wait_gone(pid: int, marker: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not is_alive(pid, marker):
            return True
        time.sleep(0.02)
    return not is_alive(pid, marker)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
