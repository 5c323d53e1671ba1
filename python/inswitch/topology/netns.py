"""Thin, checked wrappers around `ip`, `ethtool` and `sysctl` for building a rack of network
namespaces joined by veth pairs.

Everything goes through [`run`], which always has a timeout and turns a non-zero exit into a
[`CommandError`] naming the command and its stderr: on a shared machine a half-made namespace
is worse than a loud failure, and the message is what the user debugs from.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from inswitch.topology.errors import CommandError, RackError

#: Where `ip netns exec` looks for per-namespace replacements of files in /etc.
ETC_NETNS = Path("/etc/netns")

#: Offloads turned off on both veth ends. A veth never computes checksums or segments, so
#: with these on the kernel hands AF_PACKET frames with partial checksums or 64 KB "super
#: frames", which a real switch port would never see and a receiver would drop.
OFFLOADS = ("tx", "rx", "tso", "gso", "gro", "lro", "rxvlan", "txvlan")

#: Offloads that must be off inside the host namespace; the rest are best effort.
REQUIRED_NS_OFFLOADS = ("tx",)

DEFAULT_TIMEOUT = 10.0


def run(argv: list[str], *, timeout: float | None = DEFAULT_TIMEOUT, check: bool = True,
        input: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run a command to completion, capturing text output. Raises [`CommandError`] when it
    cannot start, times out, or (with `check`) exits non-zero."""
    try:
        cp = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input=input,
                            stdin=None if input is not None else subprocess.DEVNULL)
    except FileNotFoundError as e:
        raise CommandError(argv, None, str(e), why="could not start (is it installed?)") from e
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        raise CommandError(argv, None, err, why=f"timed out after {timeout:g} s") from e
    if check and cp.returncode != 0:
        raise CommandError(argv, cp.returncode, cp.stderr or cp.stdout)
    return cp


def ip(*args: str, netns: str | None = None, timeout: float = DEFAULT_TIMEOUT,
       check: bool = True) -> subprocess.CompletedProcess[str]:
    """`ip [-n NETNS] ARGS...`."""
    argv = ["ip"] + (["-n", netns] if netns else []) + list(args)
    return run(argv, timeout=timeout, check=check)


def netns_argv(netns: str, argv: list[str]) -> list[str]:
    """The argv that runs `argv` inside `netns` (with its /etc/netns files bind-mounted):
    for `subprocess.Popen` when the process should run in the background."""
    return ["ip", "netns", "exec", netns, *argv]


def in_netns(netns: str, argv: list[str], *, timeout: float | None = None, check: bool = False,
             input: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run `argv` inside `netns` to completion and return it (text output captured).
    `check`: raise [`CommandError`] on a non-zero exit. For a background process, use
    `subprocess.Popen(netns_argv(netns, argv))`."""
    return run(netns_argv(netns, argv), timeout=timeout, check=check, input=input)


def netns_list() -> list[str]:
    """Names of all named network namespaces (`ip netns list`)."""
    out = ip("netns", "list").stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def link_names(netns: str | None = None) -> list[str]:
    """Interface names in the root namespace (or `netns`), without the `@peer` suffix."""
    out = ip("-o", "link", "show", netns=netns).stdout
    names = []
    for line in out.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            names.append(parts[1].strip().split("@", 1)[0])
    return names


def local_addresses(netns: str | None = None) -> set[str]:
    """The IPv4 addresses of this host's (or `netns`'s) interfaces."""
    cp = ip("-j", "-4", "addr", "show", netns=netns)
    return {a["local"] for link in json.loads(cp.stdout or "[]") for a in link.get("addr_info", []) if "local" in a}


def link_stats(dev: str, netns: str | None = None) -> dict[str, int]:
    """An interface's kernel counters: rx/tx packets and bytes."""
    cp = ip("-j", "-s", "link", "show", "dev", dev, netns=netns)
    st = json.loads(cp.stdout)[0]["stats64"]
    return {"rx_packets": st["rx"]["packets"], "rx_bytes": st["rx"]["bytes"],
            "tx_packets": st["tx"]["packets"], "tx_bytes": st["tx"]["bytes"]}


def link_master(dev: str) -> str | None:
    """The bridge/bond an interface is enslaved to, if any (`master X` in `ip -o link`)."""
    words = ip("-o", "link", "show", "dev", dev).stdout.split()
    return words[words.index("master") + 1] if "master" in words else None


def write_sysctl_root(key: str, value: str) -> None:
    """Set a sysctl of the root namespace through /proc/sys (no process to spawn)."""
    path = Path("/proc/sys") / key.replace(".", "/")
    try:
        path.write_text(value)
    except OSError as e:
        raise RackError(f"could not set {key}={value} ({path}): {e}") from e


#: The kernel keeps ONE neighbour (ARP) table for every network namespace on the machine, and
#: only the root namespace's `gc_thresh*` sysctls bound it (they do not exist inside a
#: namespace). With the defaults (512 soft, 1024 hard) a rack of 64 hosts where 32 talk to
#: 32 others needs 2 x 32 x 32 = 2048 entries: the kernel refuses new ones ("neighbor table
#: overflow!", `table_fulls` in `ip -s ntable`), ARP never resolves, and TCP's SYNs and
#: every UDP datagram to that peer are dropped before they reach the wire.
NEIGH_GC_THRESH = "net.ipv4.neigh.default.gc_thresh{}"
#: Room left for everything else on the machine (the kernel's own default hard limit).
NEIGH_HEADROOM = 1024


def read_sysctl_root(key: str) -> int | None:
    """An integer sysctl of the root namespace, or None where it does not exist."""
    try:
        return int((Path("/proc/sys") / key.replace(".", "/")).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def neigh_entries_needed(spaces: list[str]) -> int:
    """ARP entries the racks among `spaces` (namespaces named `{rack}-h{i}`) may hold at
    once: each host may resolve every other host of its rack."""
    per_rack: dict[str, int] = {}
    for ns in spaces:
        rack, sep, host = ns.rpartition("-h")
        if sep and rack and host.isdigit():
            per_rack[rack] = per_rack.get(rack, 0) + 1
    return sum(n * (n - 1) for n in per_rack.values())


def ensure_neigh_capacity(entries: int) -> dict[str, int]:
    """Raise the shared neighbour table's limits so `entries` fit with [`NEIGH_HEADROOM`] to
    spare: the soft limit (gc_thresh2, above which the kernel evicts entries not confirmed in
    the last 5 s) to `entries + HEADROOM/2`, the hard one (gc_thresh3) to `entries + HEADROOM`.
    Never lowers them (another rack, or the machine's owner, may rely on larger ones); returns
    the sysctls it changed with their new values."""
    changed: dict[str, int] = {}
    for i, want in ((2, entries + NEIGH_HEADROOM // 2), (3, entries + NEIGH_HEADROOM)):
        key = NEIGH_GC_THRESH.format(i)
        cur = read_sysctl_root(key)
        if cur is not None and cur < want:
            write_sysctl_root(key, str(want))
            changed[key] = want
    return changed


def sysctl_netns(netns: str, settings: dict[str, str]) -> None:
    """Set sysctls inside `netns` (network sysctls are per namespace, so this must run there)."""
    args = [f"{k}={v}" for k, v in settings.items()]
    run(netns_argv(netns, ["sysctl", "-q", "-w", *args]))


def offloads_off(dev: str, netns: str | None = None,
                 required: tuple[str, ...] = ()) -> list[str]:
    """Turn [`OFFLOADS`] off on `dev`. Tries all at once, then one by one (a driver may refuse
    some); fails only if a `required` one cannot be turned off. Returns the ones that failed."""
    def ethtool(features: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
        argv = ["ethtool", "-K", dev] + [w for f in features for w in (f, "off")]
        return run(netns_argv(netns, argv) if netns else argv, check=False)

    if ethtool(OFFLOADS).returncode == 0:
        return []
    failed = []
    for f in OFFLOADS:
        cp = ethtool((f,))
        if cp.returncode != 0:
            if f in required:
                raise CommandError(cp.args, cp.returncode, cp.stderr,
                                   why=f"could not turn {f} offload off (frames would carry partial checksums)")
            failed.append(f)
    return failed


@dataclass(frozen=True)
class VethHost:
    """One host of the rack: a namespace holding `eth0`, whose peer `switch_if` is a switch port."""

    netns: str
    switch_if: str
    mac: str
    ip: str
    prefix_len: int
    ifname: str = "eth0"
    mtu: int = 1500


def create_veth_host(h: VethHost) -> None:
    """Build one host. The order matters: IPv6 is disabled on the switch end before it goes up
    so it never sends router solicitations or DAD probes (noise the switch would count and
    flood), and the host interface gets its MAC before it is up for the same reason."""
    ip("netns", "add", h.netns)
    ip("link", "add", h.switch_if, "type", "veth", "peer", "name", h.ifname, "netns", h.netns)
    switch_port_up(h.switch_if, h.mtu)
    sysctl_netns(h.netns, {"net.ipv6.conf.all.disable_ipv6": "1",
                           "net.ipv6.conf.default.disable_ipv6": "1"})
    offloads_off(h.ifname, netns=h.netns, required=REQUIRED_NS_OFFLOADS)
    ip("link", "set", "dev", h.ifname, "address", h.mac, "mtu", str(h.mtu), netns=h.netns)
    ip("addr", "add", f"{h.ip}/{h.prefix_len}", "dev", h.ifname, netns=h.netns)
    ip("link", "set", "dev", h.ifname, "up", netns=h.netns)
    ip("link", "set", "dev", "lo", "up", netns=h.netns)


def switch_port_up(dev: str, mtu: int = 1500) -> None:
    """Ready a root-namespace interface to be a switch port: no IPv6 (so it never sends router
    solicitations or DAD probes, noise the switch would count and flood; disabled before it
    goes up), no offloads, promiscuous, up."""
    write_sysctl_root(f"net.ipv6.conf.{dev}.disable_ipv6", "1")
    offloads_off(dev)
    ip("link", "set", "dev", dev, "mtu", str(mtu), "promisc", "on", "up")


def create_switch_link(a: str, b: str, mtu: int = 1500) -> None:
    """A veth pair between two switch ports, both ends in the root namespace (each opened by
    its switch over AF_PACKET, like a host link's switch end)."""
    ip("link", "add", a, "type", "veth", "peer", "name", b)
    switch_port_up(a, mtu)
    switch_port_up(b, mtu)


def shape(dev: str, delay_ms: float | None = None, jitter_ms: float | None = None,
          rate_mbit: float | None = None, loss_pct: float | None = None, netns: str | None = None) -> list[str]:
    """Shape what `dev` sends with the kernel's qdiscs: `netem` for delay, jitter and loss
    (and the rate with them, netem's own `rate`), `tbf` for a rate alone (it needs no
    sch_netem, which some kernels lack). Returns the tc arguments used (empty: nothing)."""
    args: list[str] = []
    if delay_ms is not None:
        args += ["delay", f"{delay_ms:g}ms"] + ([f"{jitter_ms:g}ms"] if jitter_ms else [])
    if loss_pct is not None:
        args += ["loss", f"{loss_pct:g}%"]
    if args:
        args = ["netem", *args] + (["rate", f"{rate_mbit:g}mbit"] if rate_mbit is not None else [])
    elif rate_mbit is not None:
        # Burst: 10 ms at the rate, at least two full frames; queue up to 50 ms.
        burst = max(int(rate_mbit * 1e6 / 8 / 100), 3028)
        args = ["tbf", "rate", f"{rate_mbit:g}mbit", "burst", str(burst), "latency", "50ms"]
    if args:
        run(["tc"] + (["-n", netns] if netns else []) + ["qdisc", "replace", "dev", dev, "root", *args])
    return args


def qdisc_available(kind: str, probe_netns: str) -> bool:
    """Whether this kernel has qdisc `kind` (e.g. netem, absent without CONFIG_NET_SCH_NETEM),
    tried on the loopback of a throwaway namespace `probe_netns`."""
    ip("netns", "add", probe_netns)
    try:
        cp = run(["tc", "-n", probe_netns, "qdisc", "add", "dev", "lo", "root", kind], check=False)
        return cp.returncode == 0
    finally:
        ip("netns", "del", probe_netns, check=False)


def qdisc_of(dev: str, netns: str | None = None) -> str:
    """The root qdisc line of `dev` as `tc qdisc show` prints it (for status)."""
    cp = run(["tc"] + (["-n", netns] if netns else []) + ["qdisc", "show", "dev", dev, "root"], check=False)
    return cp.stdout.strip().splitlines()[0] if cp.stdout.strip() else ""


def write_hosts_file(netns: str, entries: list[tuple[str, list[str]]]) -> Path:
    """Write /etc/netns/NETNS/hosts so names resolve inside `ip netns exec NETNS ...`."""
    d = ETC_NETNS / netns
    d.mkdir(parents=True, exist_ok=True)
    lines = ["127.0.0.1\tlocalhost"] + [f"{addr}\t{' '.join(names)}" for addr, names in entries]
    path = d / "hosts"
    path.write_text("\n".join(lines) + "\n")
    return path


def netns_pids(netns: str) -> list[int]:
    """Processes running inside `netns` (empty if it is gone)."""
    cp = ip("netns", "pids", netns, check=False)
    return [int(w) for w in cp.stdout.split() if w.isdigit()]


def _gone(cp: subprocess.CompletedProcess[str]) -> bool:
    """Whether a failed `ip ... del` failed because its object was already gone: tearing
    down, that is success. "No such device" is the kernel's answer when a veth was listed
    (and its name resolved) but went away before the delete, as it does asynchronously
    with the namespace holding its peer."""
    err = (cp.stderr or "").lower()
    return any(s in err for s in ("cannot find device", "no such device", "no such file", "does not exist", "not found"))


def delete_by_prefix(prefix: str, timeout: float = 10.0) -> list[str]:
    """Delete every namespace, root-namespace interface and /etc/netns entry whose name starts
    with `prefix`; returns what was removed. Works from names alone, so it cleans up after a
    crash, a lost state file or an interrupted `up`. Processes still running inside the
    namespaces (started there with `rack exec`) are stopped first, or they would keep the
    namespace alive."""
    removed: list[str] = []
    # A switch with xdp: ports attaches its XDP program through a BPF link, which the kernel
    # removes when the switch dies, kill -9 included; a program attached any other way (an
    # older switch, a user's `ip link set xdp`) would outlive it, so turn XDP off explicitly
    # on every switch end before anything else happens to it.
    for dev in [d for d in link_names() if d.startswith(prefix)]:
        ip("link", "set", "dev", dev, "xdp", "off", check=False)
    spaces = [n for n in netns_list() if n.startswith(prefix)]
    for ns in spaces:
        for pid in netns_pids(ns):
            _signal(pid, signal.SIGKILL)
    for ns in spaces:
        cp = ip("netns", "del", ns, check=False)
        if cp.returncode != 0 and not _gone(cp):
            raise CommandError(cp.args, cp.returncode, cp.stderr)
        removed.append(ns)
    # Deleting a namespace destroys its veth ends, but asynchronously; delete the root ends
    # ourselves too (either end takes the pair down) and tolerate "already gone".
    for dev in [d for d in link_names() if d.startswith(prefix)]:
        cp = ip("link", "del", "dev", dev, check=False)
        if cp.returncode != 0 and not _gone(cp):
            raise CommandError(cp.args, cp.returncode, cp.stderr)
        removed.append(dev)
    if ETC_NETNS.is_dir():
        for d in ETC_NETNS.iterdir():
            if d.name.startswith(prefix):
                shutil.rmtree(d, ignore_errors=True)
                removed.append(str(d))
        try:
            ETC_NETNS.rmdir()  # only if empty: it did not exist before racks made it
        except OSError:
            pass
    _wait_all_gone(prefix, timeout)
    return removed


def leftovers(prefix: str) -> list[str]:
    """Namespaces, interfaces and /etc/netns entries still named with `prefix`."""
    left = [n for n in netns_list() if n.startswith(prefix)]
    left += [d for d in link_names() if d.startswith(prefix)]
    if ETC_NETNS.is_dir():
        left += [str(d) for d in ETC_NETNS.iterdir() if d.name.startswith(prefix)]
    return left


def _wait_all_gone(prefix: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        left = leftovers(prefix)
        if not left:
            return
        if time.monotonic() > deadline:
            raise RackError(f"still present after {timeout:g} s: {', '.join(left)}")
        time.sleep(0.05)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
