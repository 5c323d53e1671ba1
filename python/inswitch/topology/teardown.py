"""Taking down what a rack or a fabric built, from names alone: the switch processes (found
by a marker on their command lines, e.g. the state directory), every namespace, interface and
/etc/netns entry named `{name}-...`, and the state directory. Shared by `rack down` and
`fabric down`, so both clean up after a crash, a lost state file or an interrupted `up`."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field

from inswitch.topology import netns, switchproc
from inswitch.topology.errors import CommandError, RackError
from inswitch.topology.state import state_dir


@dataclass
class DownReport:
    name: str
    found: bool
    stopped: list[int] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


def check_kind(name: str, kind: str) -> None:
    """Refuse to take down a rack with `fabric down` or a fabric with `rack down`: they share
    one name space, and the other kind's state file says which it is."""
    other = {"rack": ("fabric.json", "fabric"), "fabric": ("state.json", "rack")}[kind]
    sdir = state_dir(name)
    if (sdir / other[0]).exists() and not (sdir / ("state.json" if kind == "rack" else "fabric.json")).exists():
        raise RackError(f"{name!r} is a {other[1]}, not a {kind}: use `inswitch {other[1]} down --name {name}`")


def teardown(name: str, marker: str, known_pids: list[int], what: str = "rack",
             stop_timeout: float = 5.0) -> DownReport:
    """Stop every live process whose command line holds `marker` (plus `known_pids`, checked
    against the marker too), remove `{name}-*` and the state directory."""
    rep = DownReport(name=name, found=False)
    pids = set(switchproc.find_by_marker(marker)) | {p for p in known_pids if p}
    # A rack's supervisor first: it would restart a switch stopped before it. Stopping it
    # stops its switch too; both count as stopped.
    alive = [p for p in pids if switchproc.is_alive(p, marker)]
    sups = [p for p in alive if switchproc.is_supervisor(p)]
    switchproc.stop_all(sorted(sups), marker, stop_timeout)
    switchproc.stop_all(sorted(set(alive) - set(sups)), marker, stop_timeout)
    rep.stopped = sorted(p for p in alive if not switchproc.is_alive(p, marker))
    rep.removed += remove_netns(name, what)
    sdir = state_dir(name)
    if sdir.exists():
        try:
            shutil.rmtree(sdir)
        except FileNotFoundError:
            pass  # removed meanwhile (another `down` of the same name): gone is success
        rep.removed.append(str(sdir))
    rep.found = bool(rep.stopped or rep.removed)
    return rep


def remove_netns(name: str, what: str = "rack") -> list[str]:
    prefix = f"{name}-"
    try:
        left = netns.leftovers(prefix)
    except CommandError:
        return []  # no `ip` here: this machine never had a netns rack
    if not left:
        return []
    if os.geteuid() != 0:
        raise RackError(f"removing {', '.join(left[:5])} needs root; run `sudo inswitch {what} down --name {name}`")
    return netns.delete_by_prefix(prefix)
