"""A rack: N hosts and one inswitch switch between them, as real as this machine allows.

As root (netns mode) each host is a network namespace `{name}-h{i}` whose `eth0` is one end
of a veth pair; the other end `{name}-s{i}` stays in the root namespace and is switch port
i-1, opened by the switch process with AF_PACKET. Host processes are ordinary processes with
ordinary sockets (`inswitch rack exec h1 -- ...`), and every frame between them crosses the
switch's pipeline: there is no kernel bridge.

Without root (UDP mode) the switch's ports are UDP tunnels on loopback and a host is a
userspace stack attached to its port (see `tunnel.py`).

Either way the switch is `python -m inswitch switch ...`, started detached and programmed
through P4Runtime like any other controller would; the rack's state lives in
`/run/inswitch/{name}/` (state.json, the switch log and ready file).
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal

from inswitch.topology import control, netns, switchproc, teardown, tunnel
from inswitch.topology.errors import RackError
from inswitch.topology.teardown import DownReport
from inswitch.topology.state import (
    Host, Mode, RackState, SwitchInfo, check_name, load_state, plan_hosts, state_dir)

ModeArg = Literal["auto", "netns", "udp"]
DEFAULT_NAME = "isw"
#: Where a rack's switch serves P4Runtime and /metrics when these are free.
DEFAULT_P4RUNTIME = "127.0.0.1:9559"
DEFAULT_METRICS = "127.0.0.1:9100"


def is_root() -> bool:
    return os.geteuid() == 0


def resolve_mode(mode: str, what: str = "rack") -> Mode:
    """`auto` means netns when root, else the UDP fallback; netns without root is an error
    rather than a silent downgrade, because the user asked for real namespaces. `what`
    (rack, fabric) names the thing in the error."""
    if mode == "auto":
        return "netns" if is_root() else "udp"
    if mode == "netns":
        if not is_root():
            raise RackError("netns mode needs root (network namespaces, veth pairs and raw sockets); "
                            f"run as root, or use --mode udp for the unprivileged UDP-tunnel {what}")
        return "netns"
    if mode == "udp":
        return "udp"
    raise RackError(f"mode must be auto, netns or udp, not {mode!r}")


def switchd_available() -> bool:
    """Whether `python -m inswitch switch` exists (checked up front: better than a switch
    that dies at once and a log that says "No such command")."""
    return importlib.util.find_spec("inswitch.switchd.cli") is not None


def check_addr(what: str, addr: str) -> str:
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise RackError(f"{what} must be HOST:PORT (e.g. 127.0.0.1:9559), not {addr!r}")
    return addr


def default_or_free(addr: str) -> str:
    """`addr` if nothing listens there, else the same host with port 0: the switch then
    binds any free port and reports it in its ready file (no race with a port chosen here)."""
    host, _, port = addr.rpartition(":")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, int(port)))
        except OSError:
            return f"{host}:0"
    return addr


def ready_marker(name: str) -> str:
    """The switch's ready-file path: unique to the rack and on the switch's command line, so it
    identifies the rack's switch process even without a state file."""
    return str(state_dir(name) / "ready.json")


@dataclass
class RackStatus:
    state: RackState
    switch_alive: bool
    host_present: dict[str, bool]
    counters: dict[int, dict[str, int]] | None
    counters_error: str | None = None
    #: Per port, frames the fault injector dropped (`rx_fault`, `tx_fault`); None if unread.
    fault_drops: dict[int, dict[str, int]] | None = None


#: What a netns rack's switch ports are: `xdp` (AF_XDP, the switch printing and using
#: AF_PACKET where XDP is unavailable) or `veth` (AF_PACKET). `INSWITCH_RACK_PORTS` overrides.
#: AF_XDP since the rack, WordCount, NetSHa, DAIET, Hare rack suites passed over it (issue 20).
DEFAULT_RACK_PORTS = "xdp"


def rack_port_kind() -> str:
    kind = os.environ.get("INSWITCH_RACK_PORTS", DEFAULT_RACK_PORTS)
    if kind not in ("veth", "xdp"):
        raise RackError(f"INSWITCH_RACK_PORTS={kind!r}: expected veth or xdp")
    return kind


class Rack:
    """Builds, inspects and removes racks. Stateless between calls: everything it needs is in
    the rack's state directory or derivable from the rack's name."""

    def __init__(self, ready_timeout: float = 30.0, stop_timeout: float = 5.0,
                 python: str | None = None) -> None:
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        self.python = python

    # ----- up -------------------------------------------------------------------------

    def up(self, hosts: int, name: str = DEFAULT_NAME, programs: str = "forward",
           p4runtime: str | None = None, metrics: str | None = None,
           subnet: str = "10.0.0.0/24", pcap: str | None = None, mode: ModeArg = "auto",
           udp_base: int | None = None, fault: str | None = None,
           pcap_size: float | None = None, progress: Callable[[str], None] | None = None,
           ring_frames: int | None = None) -> RackState:
        """Build the rack and start its switch. Everything is validated before anything is
        made; once making starts, any failure or Ctrl-C undoes all of it (by name) and re-raises.
        `ring_frames`: the switch's `--ring-frames` (None: its default)."""
        check_name(name)
        m = resolve_mode(mode)
        pcap = str(Path(pcap).resolve()) if pcap else None  # the switch runs in the state dir
        # Unset: the usual ports when free, else any free one (a second rack must not fail).
        p4runtime = p4runtime or default_or_free(DEFAULT_P4RUNTIME)
        metrics = metrics or default_or_free(DEFAULT_METRICS)
        check_addr("--p4runtime", p4runtime)
        check_addr("--metrics", metrics)
        if m == "udp" and udp_base is None:
            # Switch ports and then the hosts' own addresses (see plan_hosts).
            udp_base = tunnel.free_udp_base(2 * hosts) if 1 <= hosts <= 250 else 0
        planned = plan_hosts(name, hosts, subnet, m, udp_base)
        self._refuse_existing(name, m)
        if not switchd_available():
            raise RackError("the switch daemon (`inswitch switch`, inswitch.switchd) is not in this build yet")
        try:
            return self._build(name, m, planned, programs, p4runtime, metrics, subnet, pcap, fault, pcap_size,
                               progress or (lambda _s: None), ring_frames)
        except BaseException as e:  # KeyboardInterrupt included: never leave half a rack
            try:
                self.down(name)
            except Exception as cleanup_err:  # report both, the original first
                e.add_note(f"cleanup after the failed `up` also failed: {cleanup_err}")
            raise

    def _refuse_existing(self, name: str, mode: Mode) -> None:
        if state_dir(name).exists():
            raise RackError(f"a rack named {name!r} exists ({state_dir(name)}); "
                            f"run `inswitch rack down --name {name}` first")
        if mode == "netns":
            left = netns.leftovers(f"{name}-")
            if left:
                raise RackError(f"objects of a rack named {name!r} exist ({', '.join(left[:5])}); "
                                f"run `inswitch rack down --name {name}` first")

    def _build(self, name: str, mode: Mode, hosts: list[Host], programs: str, p4runtime: str,
               metrics: str, subnet: str, pcap: str | None, fault: str | None = None,
               pcap_size: float | None = None, say: Callable[[str], None] = lambda _s: None,
               ring_frames: int | None = None) -> RackState:
        sdir = state_dir(name)
        sdir.mkdir(parents=True, mode=0o755)
        neigh: dict[str, int] = {}
        if mode == "netns":
            say(f"creating {len(hosts)} host namespaces and their veth cables")
            self._make_hosts(name, hosts)
            # Every rack on the machine (this one included) shares the kernel's ARP table.
            neigh = netns.ensure_neigh_capacity(netns.neigh_entries_needed(netns.netns_list()))
            ports = f"{rack_port_kind()}:" + ",".join(h.switch_if or "" for h in hosts)
        else:
            ports = tunnel.ports_spec(hosts)
        if pcap:
            Path(pcap).mkdir(parents=True, exist_ok=True)
        ready_file, log = Path(ready_marker(name)), sdir / "switch.log"
        argv = switchproc.switch_argv(programs, ports, p4runtime, metrics, ready_file, pcap, self.python, fault, pcap_size,
                                      ring_frames=ring_frames)
        st = RackState(name=name, mode=mode, programs=programs.split(","), subnet=subnet, hosts=hosts,
                       switch=SwitchInfo(pid=None, argv=argv, ports=ports, p4runtime=p4runtime,
                                         metrics=metrics, log=str(log), ready_file=str(ready_file), pcap=pcap),
                       state_dir=str(sdir), created=time.time(), extra={"ready": False})
        if neigh:
            st.extra["neigh_table_raised"] = neigh
        st.save()  # the supervisor reads the switch's command line from here
        # The supervisor starts the switch and restarts it if it dies (see supervisor.py);
        # its command line names the ready file too, so `down` finds it by name as well.
        say(f"starting the switch ({programs}, {ports}) under its supervisor")
        sup = switchproc.launch(switchproc.supervisor_argv(name, ready_file, self.python), log, sdir)
        st.switch.pid = sup
        st.extra["supervisor_pid"] = sup
        st.save()  # from here on, `down` in another terminal finds the processes by pid
        say("waiting for the switch to serve P4Runtime")
        ready = switchproc.wait_ready(sup, ready_file, log, self.ready_timeout)
        st.switch.pid = int(ready.get("pid") or sup)
        st.switch.p4runtime = str(ready.get("p4runtime") or p4runtime)
        st.switch.metrics = str(ready.get("metrics") or metrics)
        say(f"installing the MAC table ({len(hosts)} hosts) and the flood group over P4Runtime")
        control.program_forwarding(st.switch.p4runtime, hosts, len(hosts))
        st.extra["ready"] = True
        st.extra["generation"] = 1
        st.extra["switch_started"] = time.time()
        st.save()
        return st

    def _make_hosts(self, name: str, hosts: list[Host]) -> None:
        for h in hosts:
            assert h.netns and h.switch_if and h.ifname
            netns.create_veth_host(netns.VethHost(netns=h.netns, switch_if=h.switch_if, mac=h.mac,
                                                  ip=h.ip, prefix_len=h.prefix_len, ifname=h.ifname))
        names = [(h.ip, [h.name, f"{name}-{h.name}"]) for h in hosts]
        for h in hosts:
            assert h.netns
            netns.write_hosts_file(h.netns, names)

    # ----- down -----------------------------------------------------------------------

    def down(self, name: str = DEFAULT_NAME) -> DownReport:
        """Stop the switch and remove everything named `{name}-` plus the state directory.
        Works from names alone, so it also cleans up after a crashed switch, a lost state file
        or an interrupted `up`. Idempotent: `found` says whether there was anything."""
        check_name(name)
        teardown.check_kind(name, "rack")
        try:
            st = load_state(name)
        except RackError:
            st = None  # unreadable: fall back to names
        known = [st.switch.pid] if st and st.switch.pid else []
        if st and st.extra.get("supervisor_pid"):
            known.append(int(st.extra["supervisor_pid"]))
        rep = teardown.teardown(name, ready_marker(name), known, "rack", self.stop_timeout)
        rep.found = rep.found or st is not None
        return rep

    # ----- status, exec, ping ---------------------------------------------------------

    def state(self, name: str = DEFAULT_NAME) -> RackState:
        """The rack's state, or a clear error if there is no such rack."""
        check_name(name)
        st = load_state(name)
        if st is None:
            raise RackError(f"no rack named {name!r} (no {state_dir(name) / 'state.json'}); "
                            f"start one with `inswitch rack up --name {name} --hosts N`")
        return st

    def status(self, name: str = DEFAULT_NAME) -> RackStatus:
        st = self.state(name)
        alive = switchproc.is_alive(st.switch.pid, st.switch.ready_file)
        present = {h.name: True for h in st.hosts}
        if st.mode == "netns":
            spaces = set(netns.netns_list())
            present = {h.name: h.netns in spaces for h in st.hosts}
        counters, err, faults = None, None, None
        if alive:
            try:
                counters = control.read_port_counters(st.switch.p4runtime, [h.port for h in st.hosts])
            except RackError as e:
                err = str(e)
            try:
                faults = control.read_fault_drops(st.switch.metrics, [h.port for h in st.hosts])
            except RackError as e:
                err = f"{err}; {e}" if err else str(e)
        else:
            err = "the switch is not running"
        return RackStatus(state=st, switch_alive=alive, host_present=present, counters=counters,
                          counters_error=err, fault_drops=faults)

    def resolve_host(self, ref: str, name: str | None = None) -> tuple[RackState, Host]:
        """`h1` (in rack `name`, default isw) or `isw-h1` (rack named in the reference)."""
        if name is None:
            rack, sep, rest = ref.rpartition("-")
            name, ref = (rack, rest) if sep else (DEFAULT_NAME, ref)
        st = self.state(name)
        return st, st.host(ref)

    def exec(self, host: str, argv: list[str], name: str | None = None, capture: bool = False,
             timeout: float | None = None) -> subprocess.CompletedProcess[str]:
        """Run `argv` inside a host's namespace (stdio inherited unless `capture`). The caller
        gets the command's own exit code; only a failure to start it raises."""
        if not argv:
            raise RackError("nothing to run: give a command after `--`")
        st, h = self.resolve_host(host, name)
        if st.mode != "netns":
            raise RackError(f"rack {st.name!r} runs in UDP-tunnel mode: its hosts are userspace stacks, "
                            "not namespaces, so there is nothing to exec in (use `inswitch rack ping`, "
                            "or recreate the rack as root with --mode netns)")
        assert h.netns
        if h.netns not in netns.netns_list():
            raise RackError(f"namespace {h.netns} is gone; run `inswitch rack down --name {st.name}` and up again")
        try:
            return subprocess.run(netns.netns_argv(h.netns, argv), capture_output=capture, text=True,
                                  timeout=timeout)
        except FileNotFoundError as e:
            raise RackError(f"cannot run {argv[0]!r} in {h.netns}: {e}") from e

    def ping(self, src: str, dst: str, name: str | None = None, count: int = 3,
             timeout: float = 2.0) -> tuple[tunnel.PingResult, str]:
        """Ping host `dst` from host `src` through the switch; returns the result and, in netns
        mode, ping's own output."""
        st, s = self.resolve_host(src, name)
        d = st.host(dst.rpartition("-")[2] if dst.startswith(f"{st.name}-") else dst)
        if st.mode == "udp":
            return tunnel.tunnel_ping(s, d, count, timeout), ""
        cp = self.exec(src, ["ping", "-n", "-c", str(count), "-W", f"{timeout:g}", "-i", "0.2", d.ip],
                       name=st.name, capture=True, timeout=count * (timeout + 1) + 5)
        return parse_ping(cp.stdout, count), cp.stdout + cp.stderr


def parse_ping(out: str, count: int) -> tunnel.PingResult:
    """Replies and round-trip times from iputils ping's output."""
    received, rtts = 0, []
    for line in out.splitlines():
        if " packets transmitted" in line:
            parts = [p.strip() for p in line.split(",")]
            received = int(parts[1].split()[0])
        elif "time=" in line:
            rtts.append(float(line.split("time=", 1)[1].split()[0]))
    return tunnel.PingResult(transmitted=count, received=received, rtts_ms=rtts)
