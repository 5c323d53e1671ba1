"""Shared pytest fixtures."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


# ---- rack fixtures (tests/test_rack.py, tests/test_rack_fallback.py) ---------------------
# Racks are made through `rack_factory` so that every one is taken down at the end of its
# module even when a test fails: the machine is shared and must keep no namespace of ours.


def rack_free_tcp_port() -> int:
    """A TCP port free on loopback right now (for a switch's P4Runtime or metrics address)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def rack_factory() -> Iterator[Callable[..., object]]:
    """`make(suffix, hosts, **up_kwargs)` builds rack `t{process_tag()}{suffix}` on free ports;
    every rack made is taken down (and checked gone) when the module ends."""
    from inswitch.topology import Rack, netns
    from inswitch.topology.state import process_tag

    rack = Rack()
    made: list[str] = []

    def make(suffix: str, hosts: int, **kw: object) -> object:
        name = f"t{process_tag()}{suffix}"
        kw.setdefault("p4runtime", f"127.0.0.1:{rack_free_tcp_port()}")
        kw.setdefault("metrics", f"127.0.0.1:{rack_free_tcp_port()}")
        made.append(name)
        return rack.up(hosts, name=name, **kw)

    yield make
    problems = []
    for name in made:
        try:
            rack.down(name)
            if os.geteuid() == 0 and netns.leftovers(f"{name}-"):
                problems.append(f"{name}: {netns.leftovers(name + '-')}")
        except Exception as e:  # keep going: take every rack down
            problems.append(f"{name}: {e}")
    assert not problems, f"racks not cleaned up: {problems}"


# ---- switch daemon fixtures (tests/test_p4runtime.py, tests/test_switchd.py) ---------------
# Every switch is a real `python -m inswitch switch` process on free loopback ports; the
# factory waits for its ready file and stops (SIGTERM, then SIGKILL) and reaps every switch
# it started when the module ends, whatever the tests did.


def free_tcp_port() -> int:
    """A TCP port free on loopback right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_udp_ports(n: int) -> int:
    """The first of `n` consecutive UDP ports free on loopback right now (for udp:BASE:N)."""
    from inswitch.topology.tunnel import free_udp_base

    return free_udp_base(n)


class SwitchProcess:
    """A running `inswitch switch` and what its ready file says."""

    def __init__(self, proc: subprocess.Popen[bytes], ready: dict, ready_file: Path, log: Path) -> None:
        self.proc, self.ready, self.ready_file, self.log = proc, ready, ready_file, log

    @property
    def p4runtime(self) -> str:
        return str(self.ready["p4runtime"])

    @property
    def metrics(self) -> str:
        return str(self.ready["metrics"])

    def stop(self, timeout: float = 5.0) -> int:
        """SIGTERM, SIGKILL after `timeout`; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def start_switch(workdir: Path, *args: str, timeout: float = 30.0) -> SwitchProcess:
    """Start `python -m inswitch switch ARGS` with free P4Runtime and metrics ports (unless
    ARGS give them) and wait for its ready file."""
    workdir.mkdir(parents=True, exist_ok=True)
    ready_file, log = workdir / "ready.json", workdir / "switch.log"
    argv = [sys.executable, "-m", "inswitch", "switch", "--ready-file", str(ready_file)]
    if "--p4runtime" not in args:
        argv += ["--p4runtime", f"127.0.0.1:{free_tcp_port()}"]
    if "--metrics" not in args:
        argv += ["--metrics", f"127.0.0.1:{free_tcp_port()}"]
    argv += list(args)
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout
    while True:
        try:
            return SwitchProcess(proc, json.loads(ready_file.read_text()), ready_file, log)
        except (FileNotFoundError, ValueError):
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            raise RuntimeError(f"switch {' '.join(argv)} did not get ready (exit {proc.returncode}):\n{log.read_text()}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def switchd_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., SwitchProcess]]:
    """`make(*args)` starts a switch (see `start_switch`); all are stopped at module end."""
    started: list[SwitchProcess] = []

    def make(*args: str) -> SwitchProcess:
        sw = start_switch(tmp_path_factory.mktemp("switchd"), *args)
        started.append(sw)
        return sw

    yield make
    for sw in started:  # signal all first, then wait: they stop in parallel
        if sw.proc.poll() is None:
            sw.proc.terminate()
    for sw in started:
        sw.stop()


@pytest.fixture(scope="module")
def switchd(switchd_factory: Callable[..., SwitchProcess]) -> SwitchProcess:
    """One `forward` switch over memory:4, shared by a test module."""
    return switchd_factory("--program", "forward", "--ports", "memory:4")
