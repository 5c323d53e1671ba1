"""What a rack is, on disk: the plan computed from the user's arguments (names, MACs, IPs,
ports) and the state file written once it runs, so that `status`, `exec`, `ping` and `down`
in later processes know what `up` built.

The naming is deterministic (`{name}-h{i}`, `{name}-s{i}`, MAC `02:00:00:00:00:{i:02x}`,
the i-th address of the subnet) so MAC tables can be filled without asking the hosts, and so
`down` can find everything by the `{name}-` prefix even when the state file is lost.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from inswitch.topology.errors import RackError

Mode = Literal["netns", "udp"]

MAX_HOSTS = 250
STATE_VERSION = 1
#: Interface names are at most 15 bytes; `{name}-s250` must fit.
MAX_NAME_LEN = 15 - len("-s250")
_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")


def process_tag(pid: int | None = None) -> str:
    """A process id (this process's by default) in base 36: at most 5 characters for any
    pid Linux hands out. A rack named with a short prefix and this tag belongs to one running
    process, so a program that clears a leftover rack of its own name before building one
    cannot tear down another run's rack."""
    n, out = os.getpid() if pid is None else pid, ""
    while True:
        n, d = divmod(n, 36)
        out = "0123456789abcdefghijklmnopqrstuvwxyz"[d] + out
        if n == 0:
            return out


def run_root() -> Path:
    """Where rack state directories live: /run/inswitch for root, a per-user runtime directory
    otherwise (a UDP-mode rack needs no privileges, so it must not need /run either).
    `INSWITCH_RUN_DIR` overrides both."""
    env = os.environ.get("INSWITCH_RUN_DIR")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/run/inswitch")
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.access(xdg, os.W_OK):
        return Path(xdg) / "inswitch"
    return Path(tempfile.gettempdir()) / f"inswitch-{os.geteuid()}"


def state_dir(name: str) -> Path:
    return run_root() / name


def state_path(name: str) -> Path:
    return state_dir(name) / "state.json"


def check_name(name: str) -> str:
    """Rack names become interface-name prefixes: short, lowercase, and without `-` (so one
    rack's `{name}-` prefix can never match another rack's objects)."""
    if not _NAME_RE.match(name) or len(name) > MAX_NAME_LEN:
        raise RackError(f"bad rack name {name!r}: use 1-{MAX_NAME_LEN} characters a-z, 0-9, _ "
                        "starting with a letter (it prefixes interface names, at most 15 bytes)")
    return name


def host_mac(i: int) -> str:
    return f"02:00:00:00:00:{i:02x}"


@dataclass
class Host:
    """One host as `status`, `exec` and `ping` need it. `netns`/`switch_if` are set in netns
    mode; in UDP mode `tunnel` is the switch port's UDP address the host attaches to and
    `tunnel_nic` the host's own address, the only source that port accepts (so no other local
    process can take the host's frames)."""

    name: str
    index: int
    port: int
    mac: str
    ip: str
    prefix_len: int
    netns: str | None = None
    ifname: str | None = None
    switch_if: str | None = None
    tunnel: str | None = None
    tunnel_nic: str | None = None


@dataclass
class SwitchInfo:
    """The switch process and where it serves."""

    pid: int | None
    argv: list[str]
    ports: str
    p4runtime: str
    metrics: str
    log: str
    ready_file: str
    pcap: str | None = None


@dataclass
class RackState:
    name: str
    mode: Mode
    programs: list[str]
    subnet: str
    hosts: list[Host]
    switch: SwitchInfo
    state_dir: str
    version: int = STATE_VERSION
    created: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def host(self, ref: str) -> Host:
        """Find a host by `h1`, `{name}-h1`, `1` or its IP; a clear error otherwise."""
        for h in self.hosts:
            if ref in (h.name, f"{self.name}-{h.name}", str(h.index), h.ip):
                return h
        known = ", ".join(h.name for h in self.hosts)
        raise RackError(f"rack {self.name!r} has no host {ref!r} (hosts: {known})")

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    @staticmethod
    def from_json(text: str) -> RackState:
        raw = json.loads(text)
        raw["hosts"] = [Host(**h) for h in raw["hosts"]]
        raw["switch"] = SwitchInfo(**raw["switch"])
        return RackState(**raw)

    def save(self) -> Path:
        """Write atomically (rename), so a concurrent `status` never reads half a file."""
        path = Path(self.state_dir) / "state.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(self.to_json())
        tmp.replace(path)
        return path


def load_state(name: str) -> RackState | None:
    """The state of rack `name`, or None if there is no state file."""
    path = state_path(name)
    try:
        return RackState.from_json(path.read_text())
    except FileNotFoundError:
        return None
    except (ValueError, TypeError, KeyError) as e:
        raise RackError(f"state file {path} is unreadable ({e}); `inswitch rack down --name {name}` "
                        "cleans up by name anyway") from e


def plan_hosts(name: str, count: int, subnet: str, mode: Mode, udp_base: int | None = None) -> list[Host]:
    """Names, MACs, addresses and switch ports of `count` hosts; validates the count and that
    the subnet holds them (host i gets the subnet's i-th address). In UDP mode switch port i
    is `udp_base + i` and its host sends from `udp_base + count + i`."""
    if not 1 <= count <= MAX_HOSTS:
        raise RackError(f"--hosts must be 1..{MAX_HOSTS}, not {count}")
    try:
        net = ipaddress.IPv4Network(subnet, strict=True)
    except ValueError as e:
        raise RackError(f"bad subnet {subnet!r}: {e} (expected e.g. 10.0.0.0/24)") from e
    if net.num_addresses - 2 < count:
        raise RackError(f"subnet {subnet} has room for {max(net.num_addresses - 2, 0)} hosts, not {count}")
    hosts = []
    for i in range(1, count + 1):
        h = Host(name=f"h{i}", index=i, port=i - 1, mac=host_mac(i), ip=str(net.network_address + i),
                 prefix_len=net.prefixlen)
        if mode == "netns":
            h.netns, h.ifname, h.switch_if = f"{name}-h{i}", "eth0", f"{name}-s{i}"
        else:
            assert udp_base is not None
            h.tunnel = f"127.0.0.1:{udp_base + i - 1}"
            h.tunnel_nic = f"127.0.0.1:{udp_base + count + i - 1}"
        hosts.append(h)
    return hosts
