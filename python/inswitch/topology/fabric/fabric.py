"""A fabric: the switches of a topology, each its own `inswitch switch` process with its own
P4Runtime endpoint and device id, hosts in network namespaces, and every link a veth pair
(switch ends in the root namespace, opened by their switch over AF_PACKET; no kernel bridge
anywhere), shaped with `tc` (netem, tbf) where the topology asks.

Without root (`--mode udp`, what `auto` picks for a user) every link is a pair of UDP sockets
on loopback instead, one per end, each the other's fixed peer (the switches' `udp:HOST:PORT>
PEERHOST:PEERPORT,...` ports), and a host is a userspace stack (`inswitch._native.TunnelHost`,
as a UDP rack's) attached to its end of its link when something uses it (`fabric ping`).

It grows the rack: the same namespace and veth helpers (`netns.py`), switch process
management (`switchproc.py`), state directory (`state.py`) and name-based teardown
(`teardown.py`); names share one space with racks (`{name}-...`, `/run/inswitch/{name}/`),
so a rack and a fabric can never take each other's objects.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from inswitch.topology import control, netns, restarts, switchproc, tunnel
from inswitch.topology.errors import RackError
from inswitch.topology.fabric import controller
from inswitch.topology.fabric.generators import load_spec
from inswitch.topology.fabric.model import VXLAN_PORT, LinkProps, Topology, TopologyError, parse_topology
from inswitch.topology.fabric.supervisor import SUPERVISOR_FILE
from inswitch.topology.fabric.plan import FabricPlan, HostPlan, LinkPlan, SwitchPlan, plan_fabric
from inswitch.topology.rack import is_root, parse_ping, resolve_mode, switchd_available
from inswitch.topology.state import check_name, state_dir
from inswitch.topology.teardown import DownReport, check_kind, teardown

DEFAULT_NAME = "fab"
STATE_FILE = "fabric.json"
#: A multi-machine fabric's switches serve P4Runtime here unless the topology gives a port:
#: P4Runtime's port (9559) + the switch's index, the same on every machine.
P4RUNTIME_BASE = 9559
#: VXLAN over IPv4 adds 50 bytes (outer IPv4 20, UDP 8, VXLAN 8, inner Ethernet 14): the
#: fabric keeps 1500-byte frames end to end, so the underlay carries 1550-byte packets.
FABRIC_MTU = 1500
VXLAN_OVERHEAD = 50
UNDERLAY_MTU = FABRIC_MTU + VXLAN_OVERHEAD
#: Receive-ring slots per switch port in a fabric (`switch --ring-frames`; `fabric up
#: --ring-frames` changes it). The switch's own default: on the loaded 2-core machine every
#: smaller ring lost frames the 4,096-slot one did not (TCP resent thousands of segments at
#: 512 and 1,024; the SwitchAgg fabric test lost its stream at 2,048), since a switch off
#: its core for tens of ms meets a burst (a SwitchAgg flush, a TCP window) of thousands of
#: frames; see bench/RESULTS.md, "Switch memory in a fabric".
FABRIC_RING_FRAMES = 4096
#: Underlay addresses `--emulate-machines` gives machines the topology gives none
#: (TEST-NET-1; they exist only inside the machine namespaces).
EMULATED_UNDERLAY = "192.0.2.{}"


def udp_ends(st: "FabricState") -> dict[str, tuple[str, str]]:
    """UDP mode: per switch port (its kernel-style interface name in the plan), its own UDP
    address and its peer's (the other end of its link)."""
    out: dict[str, tuple[str, str]] = {}
    for ln in st.links:
        assert ln.a_udp and ln.b_udp
        if ln.a_netns is None:
            out[ln.a_if] = (ln.a_udp, ln.b_udp)
        if ln.b_netns is None:
            out[ln.b_if] = (ln.b_udp, ln.a_udp)
    return out


def udp_ports_spec(ends: dict[str, tuple[str, str]], sw: SwitchPlan) -> str:
    """A switch's `--ports` in UDP mode: its ports in port order, each bound to its own end
    of its link with the other end as its fixed peer."""
    return "udp:" + ",".join(f"{ends[i][0]}>{ends[i][1]}" for i in sw.ifaces)


def assign_udp(st: "FabricState", base: Optional[int]) -> None:
    """UDP mode: link k (in the topology's order, from 0) has its first end at
    127.0.0.1:BASE+2k and its second at BASE+2k+1, BASE a free range (as a UDP rack finds
    one) unless given. A host's end is its NIC (`tunnel_nic`), its switch's end the port it
    attaches to (`tunnel`)."""
    n = 2 * len(st.links)
    base = base if base is not None else tunnel.free_udp_base(n)
    for k, ln in enumerate(st.links):
        ln.a_udp, ln.b_udp = f"127.0.0.1:{base + 2 * k}", f"127.0.0.1:{base + 2 * k + 1}"
    ends = udp_ends(st)
    for ln in st.links:
        if ln.host_link:
            sw_if, host_udp = (ln.a_if, ln.b_udp) if ln.a_netns is None else (ln.b_if, ln.a_udp)
            h = next(h for h in st.hosts if h.switch_if == sw_if)
            h.tunnel, h.tunnel_nic = ends[sw_if][0], host_udp
            h.netns = ""  # no namespace: a userspace stack
    st.udp_base = base


def marker(name: str) -> str:
    """On every switch's command line (its ready file is in here), and nowhere else."""
    return str(state_dir(name)) + "/"


@dataclass
class SwitchRun:
    """A started switch: its plan and where its process serves."""

    plan: SwitchPlan
    pid: Optional[int] = None
    argv: list[str] = field(default_factory=list)
    p4runtime: str = ""
    metrics: str = ""
    log: str = ""
    ready_file: str = ""
    #: On another machine (a multi-machine fabric's part): not started, supervised or
    #: programmed here; reached over TCP at `p4runtime` (its machine's underlay address).
    remote: bool = False
    #: Its `--ports` spec.
    ports: str = ""


@dataclass
class FabricState:
    name: str
    topology: str  # the topology file's text (generators exported)
    switches: list[SwitchRun]
    hosts: list[HostPlan]
    links: list[LinkPlan]
    state_dir: str
    created: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)
    ready: bool = False
    #: The process that restarts dead switches (`supervisor.py`), once the fabric is up.
    supervisor_pid: Optional[int] = None
    #: A multi-machine fabric: the machine whose part this is (None: every machine's, one
    #: machine or `emulated`), each machine's underlay address, and whether the machines are
    #: emulated here by network namespaces (`machine_netns`).
    machine: Optional[str] = None
    underlay: dict[str, str] = field(default_factory=dict)
    emulated: bool = False
    #: netns (namespaces, veth pairs; root) or udp (UDP sockets on loopback; no privileges).
    mode: str = "netns"
    #: UDP mode: the first link end's UDP port (see `assign_udp`).
    udp_base: Optional[int] = None

    @property
    def restarts_file(self) -> Path:
        """Where the supervisor records restarts (`restarts.read` reads it)."""
        return Path(self.state_dir) / SUPERVISOR_FILE

    def save(self) -> None:
        path = Path(self.state_dir) / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=1) + "\n")
        tmp.replace(path)

    @staticmethod
    def load(name: str) -> Optional["FabricState"]:
        path = state_dir(name) / STATE_FILE
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except ValueError as e:
            raise RackError(f"state file {path} is unreadable ({e}); `inswitch fabric down --name {name}` "
                            "cleans up by name anyway") from e
        sw = [SwitchRun(plan=SwitchPlan(**s.pop("plan")), **s) for s in raw.pop("switches")]
        hosts = [HostPlan(**h) for h in raw.pop("hosts")]
        links = [LinkPlan(**{**ln, "props": LinkProps(**ln["props"])}) for ln in raw.pop("links")]
        return FabricState(switches=sw, hosts=hosts, links=links, **raw)

    def plan(self) -> FabricPlan:
        return FabricPlan(self.name, [s.plan for s in self.switches], self.hosts, self.links)

    def topo(self) -> Topology:
        return parse_topology(self.topology, source=f"{self.name} (state)")

    def host(self, ref: str) -> HostPlan:
        for h in self.hosts:
            if ref in (h.name, h.netns, h.ip):
                if self.machine is not None and h.machine != self.machine:
                    raise RackError(f"host {h.name} is on machine {h.machine}, not on this one ({self.machine}); "
                                    f"run the command there")
                return h
        raise RackError(f"fabric {self.name!r} has no host {ref!r} (hosts: {', '.join(h.name for h in self.hosts)})")


@dataclass
class SwitchStatus:
    name: str
    pid: Optional[int]
    alive: bool
    p4runtime: str
    device_id: int
    counters: Optional[dict[int, dict[str, int]]]
    error: Optional[str] = None
    #: Per program: {"ingress_passes", "egress_passes", "drops": {reason: n}} (from /metrics).
    programs: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class FabricStatus:
    state: FabricState
    switches: list[SwitchStatus]
    host_present: dict[str, bool]
    qdiscs: dict[str, str]


class Fabric:
    def __init__(self, ready_timeout: float = 90.0, stop_timeout: float = 5.0, python: Optional[str] = None) -> None:
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        self.python = python

    # ----- up -------------------------------------------------------------------------

    def up(self, spec: str | Topology, name: Optional[str] = None, link_default: LinkProps = LinkProps(),
           pcap: Optional[str] = None, fault: Optional[str] = None, machine: Optional[str] = None,
           emulate_machines: bool = False, mode: str = "netns", udp_base: Optional[int] = None,
           ring_frames: Optional[int] = FABRIC_RING_FRAMES) -> FabricState:
        """Validate everything, then build; any failure or Ctrl-C once building started
        takes down all of it (by name) and re-raises. With `pcap`, every switch captures
        its ports into `pcap/SWITCH/port{N}.pcapng` (the switch's own `--pcap`). `fault`:
        every switch's `--fault` (its own ports: so every link, switch-to-switch links at
        both ends).

        A topology across machines: `machine` builds that machine's part (its hosts,
        switches and links; a link to another machine is a kernel VXLAN device to that
        machine's underlay address) and programs its switches; `emulate_machines` builds
        every machine's part here, each machine a network namespace holding its underlay
        address and its VXLAN sockets (see `_make_underlay`).

        `mode`: netns (root), udp (no privileges: see `assign_udp`; netns-only options and
        topologies are refused up front) or auto (netns when root, else udp). Netns by
        default here, so a job that builds its own fabric gets the clear root error, not a
        fabric whose hosts it cannot exec in; `fabric up` passes auto.

        `ring_frames`: each switch's receive-ring slots per port (`switch --ring-frames`;
        None: the switch's own default, 4096). See `FABRIC_RING_FRAMES`."""
        t0 = time.monotonic()
        topo = load_spec(spec) if isinstance(spec, str) else spec
        name = check_name(name or DEFAULT_NAME)
        plan = plan_fabric(topo, name, link_default)
        m = resolve_mode(mode, "fabric")
        if m == "udp":
            self._check_udp(topo, plan, machine, emulate_machines, udp_base)
            underlay: dict[str, str] = {}
        else:
            if udp_base is not None:
                raise TopologyError("--udp-base is for --mode udp (a netns fabric's links are veth pairs)")
            underlay = self._check_machines(topo, plan, machine, emulate_machines)
        if not switchd_available():
            raise RackError("the switch daemon (`inswitch switch`) is not in this build")
        if state_dir(name).exists():
            raise RackError(f"a rack or fabric named {name!r} exists ({state_dir(name)}); "
                            f"run `inswitch fabric down --name {name}` first")
        if m == "udp":
            return self._build_or_down(name, lambda: self._build(topo, plan, t0, pcap, fault, udp_base=udp_base, mode="udp",
                                                                 ring_frames=ring_frames))
        left = netns.leftovers(f"{name}-")
        if left:
            raise RackError(f"objects named {name}-... exist ({', '.join(left[:5])}); "
                            f"run `inswitch fabric down --name {name}` first")
        needs_netem = [ln for ln in plan.links if any(v is not None for v in (ln.props.delay_ms, ln.props.loss_pct))]
        if needs_netem and not netns.qdisc_available("netem", f"{name}-probe"):
            raise RackError(f"link {needs_netem[0].endpoints} asks for delay/jitter/loss, which need the kernel's netem "
                            "qdisc, and this kernel has none (CONFIG_NET_SCH_NETEM); a rate alone works (tbf)")
        # A topology on one machine is built whole, whatever --machine named it.
        return self._build_or_down(name, lambda: self._build(topo, plan, t0, pcap, fault, machine if underlay else None, underlay, emulate_machines,
                                                             ring_frames=ring_frames))

    def _build_or_down(self, name: str, build: Callable[[], FabricState]) -> FabricState:
        """Any failure or Ctrl-C once building started takes down all of it (by name)."""
        try:
            return build()
        except BaseException as e:
            try:
                self.down(name)
            except Exception as cleanup_err:
                e.add_note(f"cleanup after the failed `up` also failed: {cleanup_err}")
            raise

    @staticmethod
    def _check_udp(topo: Topology, plan: FabricPlan, machine: Optional[str], emulate: bool,
                   udp_base: Optional[int]) -> None:
        """UDP mode refuses, before anything is made, what only namespaces and kernel links do."""
        root = " (root)" if not is_root() else ""
        if emulate:
            raise TopologyError(f"--emulate-machines needs --mode netns{root}: its machines are network namespaces "
                                "joined by kernel VXLAN links; the UDP-tunnel fabric runs on one machine")
        if machine is not None:
            raise TopologyError(f"--machine needs --mode netns{root}: links between machines are kernel VXLAN devices; "
                                "the UDP-tunnel fabric runs on one machine")
        if len(topo.machine_names) > 1:
            raise TopologyError(f"{topo.source} spans machines {', '.join(topo.machine_names)}: a fabric across machines "
                                f"needs --mode netns{root} (kernel VXLAN links); the UDP-tunnel fabric runs on one machine")
        shaped = [ln for ln in plan.links if not ln.props.is_empty()]
        if shaped:
            raise TopologyError(f"link {shaped[0].endpoints} sets {shaped[0].props.describe()}: link properties are tc "
                                f"qdiscs on veth ends, which need --mode netns{root}; in udp mode --fault makes the "
                                "switches' ports lossy")
        hi = 65535 - 2 * len(plan.links) + 1
        if udp_base is not None and not 1024 <= udp_base <= hi:
            raise TopologyError(f"--udp-base {udp_base}: this fabric's {2 * len(plan.links)} link ends need a base "
                                f"from 1024 to {hi}")

    @staticmethod
    def _check_machines(topo: Topology, plan: FabricPlan, machine: Optional[str], emulate: bool) -> dict[str, str]:
        """The checks of a multi-machine `up` (before anything is made); each machine's
        underlay address. Also fixes the P4Runtime port of every switch that has none, so
        every machine knows every switch's address."""
        ms = topo.machine_names
        if machine is not None and emulate:
            raise TopologyError("--machine builds one machine's part, --emulate-machines all of them here: give one")
        if len(ms) < 2:
            if emulate:
                raise TopologyError(f"{topo.source} names {'one machine' if ms else 'no machines'}: --emulate-machines needs a "
                                "topology whose nodes are on two or more machines (`inswitch fabric export --topology SPEC "
                                "--machines 2` writes one)")
            if machine is not None and machine not in ms:
                raise TopologyError(f"{topo.source} has no node on machine {machine!r}"
                                + (f" (its nodes are on {ms[0]})" if ms else " (its nodes name no machine)"))
            return {}
        if machine is None and not emulate:
            raise TopologyError(f"the topology spans machines {', '.join(ms)}: run `inswitch fabric up --topology FILE "
                            "--machine NAME` on each machine (it builds that machine's part), or add --emulate-machines "
                            "to emulate the machines here with network namespaces")
        if machine is not None and machine not in ms:
            raise TopologyError(f"{topo.source} has no node on machine {machine!r} (machines: {', '.join(ms)})")
        underlay = {m: topo.machines[m].underlay for m in ms if m in topo.machines and topo.machines[m].underlay}
        if machine is not None:
            missing = [m for m in ms if m not in underlay]
            if missing:
                raise TopologyError(f"{topo.source}: machine {missing[0]} has no underlay address; list every machine under "
                                "the top-level `machines` with `underlay: IP` (the address its VXLAN links end at)")
            if underlay[machine] not in netns.local_addresses():
                raise RackError(f"machine {machine}'s underlay address {underlay[machine]} is not an address of this "
                                f"host (`ip -4 addr`); is this machine {machine}?")
        else:
            n = 1
            for m in ms:
                while m not in underlay:
                    cand = EMULATED_UNDERLAY.format(n)
                    n += 1
                    if cand not in underlay.values():
                        underlay[m] = cand
        ports = {s.p4runtime_port for s in plan.switches}
        for s in plan.switches:
            if not s.p4runtime_port and machine is not None:
                s.p4runtime_port = P4RUNTIME_BASE + s.index
                if s.p4runtime_port in ports:
                    raise TopologyError(f"switch {s.name}: its P4Runtime port {s.p4runtime_port} (9559 + its index) is "
                                    "another switch's; give every switch a `p4runtime` port")
        return underlay

    def _build(self, topo: Topology, plan: FabricPlan, t0: float, pcap: Optional[str] = None, fault: Optional[str] = None,
               machine: Optional[str] = None, underlay: Optional[dict[str, str]] = None, emulated: bool = False,
               udp_base: Optional[int] = None, mode: str = "netns", ring_frames: Optional[int] = None) -> FabricState:
        sdir = state_dir(plan.name)
        sdir.mkdir(parents=True, mode=0o755)
        underlay = underlay or {}
        runs = []
        for s in plan.switches:
            r = SwitchRun(plan=s)
            if machine is not None:
                r.remote = s.machine != machine
                r.p4runtime = f"{underlay[s.machine or machine]}:{s.p4runtime_port}"  # every switch's, before it is up
            runs.append(r)
        st = FabricState(name=plan.name, topology=topo.to_yaml(), switches=runs, hosts=plan.hosts, links=plan.links,
                         state_dir=str(sdir), created=time.time(), machine=machine, underlay=underlay, emulated=emulated,
                         mode=mode)
        st.save()
        ends: dict[str, tuple[str, str]] = {}
        if mode == "udp":
            assign_udp(st, udp_base)
            ends = udp_ends(st)
        else:
            if emulated:
                make_underlay(st.name, st.underlay)
            self._make_links(st)
            netns.ensure_neigh_capacity(len(st.hosts) * 4)
        st.timings["links_s"] = time.monotonic() - t0
        shaped = {ln.a_if for ln in st.links if not ln.props.is_empty()} | {ln.b_if for ln in st.links if not ln.props.is_empty()}
        local = [sw for sw in st.switches if not sw.remote]
        for sw in local:
            # On a real machine of several, P4Runtime serves on the underlay address so the
            # other machines' controllers reach it; otherwise on loopback.
            serve = f"{underlay[machine]}:{sw.plan.p4runtime_port}" if machine is not None and underlay else \
                f"127.0.0.1:{sw.plan.p4runtime_port}"
            sw.ready_file = str(sdir / f"{sw.plan.name}.ready.json")
            sw.log = str(sdir / f"{sw.plan.name}.log")
            sw.ports = udp_ports_spec(ends, sw.plan) if mode == "udp" else "veth:" + ",".join(sw.plan.ifaces)
            sw.argv = switchproc.switch_argv(
                sw.plan.program, sw.ports, serve,
                "127.0.0.1:0", Path(sw.ready_file), python=self.python, device_id=sw.plan.device_id,
                pipes=sw.plan.pipes, port_qdisc=bool(shaped & set(sw.plan.ifaces)), ring_frames=ring_frames,
                pcap=str(Path(pcap).resolve() / sw.plan.name) if pcap else None, fault=fault)
            sw.pid = switchproc.launch(sw.argv, Path(sw.log), sdir)
        st.save()  # from here on `down` in another terminal finds every switch by pid too
        for sw in local:
            assert sw.pid is not None
            ready = switchproc.wait_ready(sw.pid, Path(sw.ready_file), Path(sw.log), self.ready_timeout)
            sw.p4runtime, sw.metrics = str(ready["p4runtime"]), str(ready.get("metrics") or "")
        st.timings["switches_s"] = time.monotonic() - t0
        st.save()
        # Each machine programs its own switches (the routing of each switch is a function of
        # the whole topology, so the parts agree); emulated, one controller programs all.
        controller.program_fabric(topo, st.plan(), {s.plan.name: s.p4runtime for s in st.switches},
                                  only={s.plan.name for s in local})
        st.timings["up_s"] = time.monotonic() - t0
        st.ready = True
        st.save()
        # From here on a dead switch is restarted and its routing installed again.
        argv = switchproc.supervisor_argv(plan.name, st.restarts_file, self.python) + ["--fabric"]
        st.supervisor_pid = switchproc.launch(argv, sdir / "supervisor.log", sdir)
        st.save()
        deadline = time.monotonic() + 10.0
        while not st.restarts_file.exists() and time.monotonic() < deadline:
            if not switchproc.is_alive(st.supervisor_pid, marker(plan.name)):
                raise RackError(f"the fabric's supervisor exited: {switchproc.log_tail(sdir / 'supervisor.log')}")
            time.sleep(0.05)
        return st

    def _make_vxlan(self, st: FabricState, dev: str, vni: int, me: str, peer: str) -> None:
        """One end of a link between machines: a kernel VXLAN device `dev` (VNI `vni`, UDP
        `VXLAN_PORT`) from machine `me`'s underlay address to machine `peer`'s, a switch port
        in the root namespace. Emulated, it is created in `me`'s namespace (where its
        socket stays: the encapsulated packets cross the emulated underlay) and moved here."""
        ns = machine_netns(st.name, me) if st.emulated else None
        netns.ip("link", "add", dev, "mtu", str(FABRIC_MTU), "type", "vxlan", "id", str(vni), "local", st.underlay[me],
                 "remote", st.underlay[peer], "dstport", str(VXLAN_PORT), "nolearning", netns=ns)
        if ns is not None:
            netns.ip("link", "set", "dev", dev, "netns", str(os.getpid()), netns=ns)
        netns.switch_port_up(dev, FABRIC_MTU)

    def _make_links(self, st: FabricState) -> None:
        by_if = {h.switch_if: h for h in st.hosts}
        names = [(h.ip, [h.name, f"{st.name}-{h.name}"]) for h in st.hosts]
        here = st.machine
        for ln in st.links:
            if ln.vni is not None:
                assert ln.a_machine is not None and ln.b_machine is not None
                for dev, me, peer in ((ln.a_if, ln.a_machine, ln.b_machine), (ln.b_if, ln.b_machine, ln.a_machine)):
                    if here is None or me == here:
                        self._make_vxlan(st, dev, ln.vni, me, peer)
                        p = ln.props
                        netns.shape(dev, p.delay_ms, p.jitter_ms, p.rate_mbit, p.loss_pct)
                continue
            if here is not None and ln.a_machine != here:
                continue  # another machine's link
            if ln.host_link:
                sw_if, host_if, host_ns = (ln.a_if, ln.b_if, ln.b_netns) if ln.a_netns is None else (ln.b_if, ln.a_if, ln.a_netns)
                h = by_if[sw_if]
                assert host_ns == h.netns
                netns.create_veth_host(netns.VethHost(netns=h.netns, switch_if=sw_if, mac=h.mac, ip=h.ip,
                                                      prefix_len=h.prefix_len, ifname=host_if))
                # The gateway is the leaf's router MAC; the switch answers no ARP, so say it.
                netns.ip("neigh", "replace", h.gateway, "lladdr", h.gateway_mac, "dev", host_if, "nud", "permanent", netns=h.netns)
                netns.ip("route", "add", "default", "via", h.gateway, "dev", host_if, netns=h.netns)
                netns.write_hosts_file(h.netns, names)
            else:
                netns.create_switch_link(ln.a_if, ln.b_if)
            for dev, ns in ((ln.a_if, ln.a_netns), (ln.b_if, ln.b_netns)):
                p = ln.props
                netns.shape(dev, p.delay_ms, p.jitter_ms, p.rate_mbit, p.loss_pct, netns=ns)

    # ----- down, status, exec ---------------------------------------------------------

    def down(self, name: str = DEFAULT_NAME) -> DownReport:
        """Stop every switch and remove everything named `{name}-` and the state directory;
        works from names alone (after a crash, `kill -9`, a lost state file). Idempotent."""
        check_name(name)
        check_kind(name, "fabric")
        try:
            st = FabricState.load(name)
        except RackError:
            st = None
        pids = ([s.pid for s in st.switches if s.pid] + ([st.supervisor_pid] if st.supervisor_pid else [])) if st else []
        rep = teardown(name, marker(name), pids, "fabric", self.stop_timeout)
        rep.found = rep.found or st is not None
        return rep

    def state(self, name: str = DEFAULT_NAME) -> FabricState:
        check_name(name)
        st = FabricState.load(name)
        if st is None:
            raise RackError(f"no fabric named {name!r} (no {state_dir(name) / STATE_FILE}); "
                            f"start one with `inswitch fabric up --topology SPEC --name {name}`")
        return st

    def status(self, name: str = DEFAULT_NAME) -> FabricStatus:
        st = self.state(name)
        out = []
        for sw in st.switches:
            # Another machine's switch is alive when it answers over P4Runtime.
            alive = True if sw.remote else switchproc.is_alive(sw.pid, sw.ready_file)
            s = SwitchStatus(sw.plan.name, sw.pid, alive, sw.p4runtime, sw.plan.device_id, None)
            if not alive:
                s.error = "not running"
            else:
                try:
                    s.counters = control.read_port_counters(sw.p4runtime, list(range(len(sw.plan.ifaces))),
                                                            device_id=sw.plan.device_id)
                    s.programs = program_counters(sw.metrics) if sw.metrics else {}
                except RackError as e:
                    s.error = str(e)
                    s.alive = not sw.remote
            out.append(s)
        if st.mode == "udp":  # a host is a stack attached when used: nothing to be missing
            return FabricStatus(st, out, {h.name: True for h in st.hosts}, {})
        spaces = set(netns.netns_list())
        present = {h.name: h.netns in spaces for h in st.hosts if st.machine is None or h.machine == st.machine}
        qdiscs = {}
        for ln in st.links:
            if not ln.props.is_empty():
                for dev, ns in ((ln.a_if, ln.a_netns), (ln.b_if, ln.b_netns)):
                    qdiscs[qdisc_key(dev, ns)] = netns.qdisc_of(dev, ns) if (ns is None or ns in spaces) else ""
        return FabricStatus(st, out, present, qdiscs)

    def exec(self, node: str, argv: list[str], name: str = DEFAULT_NAME, capture: bool = False,
             timeout: Optional[float] = None) -> subprocess.CompletedProcess[str]:
        if not argv:
            raise RackError("nothing to run: give a command after `--`")
        st = self.state(name)
        if any(s.plan.name == node for s in st.switches):
            raise RackError(f"{node} is a switch (a process in the root namespace), not a host; "
                            "exec runs commands in hosts")
        h = st.host(node)
        if st.mode == "udp":
            raise RackError(f"fabric {st.name!r} runs in UDP-tunnel mode: its hosts are userspace stacks, not "
                            "namespaces, so there is nothing to exec in (use `inswitch fabric ping`, or recreate "
                            "the fabric as root with --mode netns)")
        if h.netns not in netns.netns_list():
            raise RackError(f"namespace {h.netns} is gone; run `inswitch fabric down --name {name}` and up again")
        try:
            return subprocess.run(netns.netns_argv(h.netns, argv), capture_output=capture, text=True, timeout=timeout)
        except FileNotFoundError as e:
            raise RackError(f"cannot run {argv[0]!r} in {h.netns}: {e}") from e


    def ping(self, src: str, dst: str, name: str = DEFAULT_NAME, count: int = 3,
             timeout: float = 2.0) -> tuple[tunnel.PingResult, str]:
        """Ping host `dst` from host `src` across the fabric; the result and, in netns mode,
        ping's own output. In UDP mode both hosts are userspace stacks attached here for the
        ping (each knowing its gateway's router MAC, as a netns host's permanent neighbour)."""
        st = self.state(name)
        s, d = st.host(src), st.host(dst)
        if st.mode == "udp":
            return tunnel.tunnel_ping(s, d, count, timeout), ""  # type: ignore[arg-type]
        cp = self.exec(s.name, ["ping", "-n", "-c", str(count), "-W", f"{timeout:g}", "-i", "0.2", d.ip],
                       name=st.name, capture=True, timeout=count * (timeout + 1) + 5)
        return parse_ping(cp.stdout, count), cp.stdout + cp.stderr


def program_counters(metrics: str) -> dict[str, dict[str, Any]]:
    """Per-program passes and drops by reason, from a switch's /metrics."""
    out: dict[str, dict[str, Any]] = {}
    for name, labels, value in control.scrape_metrics(metrics):
        prog = labels.get("program")
        if prog is None:
            continue
        p = out.setdefault(prog, {"ingress_passes": 0, "egress_passes": 0, "drops": {}})
        if name == "inswitch_program_passes_total":
            p[f"{labels.get('gress', '')}_passes"] = int(value)
        elif name == "inswitch_program_drops_total" and value:
            p["drops"][labels.get("reason", "?")] = int(value)
    return out


def qdisc_key(dev: str, ns: Optional[str]) -> str:
    return f"{ns}:{dev}" if ns else dev


def status_json(s: FabricStatus) -> dict[str, Any]:
    st = s.state
    ends = udp_ends(st) if st.mode == "udp" else {}
    return {
        "name": st.name,
        "mode": st.mode,
        "timings": st.timings,
        "switches": {sw.name: {"pid": sw.pid, "alive": sw.alive, "p4runtime": sw.p4runtime, "device_id": sw.device_id,
                               "ports": {run.plan.port_names[p]: {"port": p, "interface": run.plan.ifaces[p],
                                                                   **({"udp": ends[run.plan.ifaces[p]]} if ends else {}), **c}
                                         for p, c in (sw.counters or {}).items()},
                               "programs": sw.programs, "error": sw.error, "machine": run.plan.machine,
                               "remote": run.remote, "ports_spec": run.ports}
                     for sw, run in zip(s.switches, st.switches)},
        "hosts": {h.name: {"ip": h.ip, "mac": h.mac, "netns": h.netns, "switch": h.switch, "port": h.port,
                           "present": s.host_present.get(h.name, False), "machine": h.machine,
                           "tunnel": h.tunnel, "tunnel_nic": h.tunnel_nic} for h in st.hosts},
        "links": [{"endpoints": ln.endpoints, **ln.props.to_yaml(),
                   **({"udp": [ln.a_udp, ln.b_udp]} if st.mode == "udp" else {}),
                   "qdisc": {k: s.qdiscs[k] for k in (qdisc_key(ln.a_if, ln.a_netns), qdisc_key(ln.b_if, ln.b_netns))
                             if k in s.qdiscs}}
                  for ln in st.links],
        "supervisor_pid": st.supervisor_pid,
        "machine": st.machine,
        "underlay": st.underlay,
        "vxlan": {ln.endpoints: {"vni": ln.vni, "ends": {ln.a_if: ln.a_machine, ln.b_if: ln.b_machine}}
                  for ln in st.links if ln.vni is not None},
        "restarts": restarts.read(st.restarts_file),
    }


def make_underlay(fabric: str, underlay: dict[str, str]) -> None:
    """Emulated machines: one network namespace per machine (`machine_netns`) holding its
    underlay address, joined by a veth pair (two machines: a direct link, as two hosts
    cabled back to back) or, for more, by veths to a bridge in a LAN namespace of their
    own (the machines' switch, not on the fabric's data path), MTU `UNDERLAY_MTU`. Each
    machine reaches the others' addresses on-link (a /32 route each), so any addresses
    work. The VXLAN devices are created in these namespaces (their UDP sockets stay
    here) and then moved to the root namespace as switch ports."""
    ms = sorted(underlay)
    for m in ms:
        ns = machine_netns(fabric, m)
        netns.ip("netns", "add", ns)
        netns.sysctl_netns(ns, {"net.ipv6.conf.all.disable_ipv6": "1", "net.ipv6.conf.default.disable_ipv6": "1"})
        netns.ip("link", "set", "dev", "lo", "up", netns=ns)
    if len(ms) == 2:
        a, b = (machine_netns(fabric, m) for m in ms)
        netns.ip("link", "add", "ul0", "netns", a, "type", "veth", "peer", "name", "ul0", "netns", b)
    else:
        lan = lan_netns(fabric)
        netns.ip("netns", "add", lan)
        netns.sysctl_netns(lan, {"net.ipv6.conf.all.disable_ipv6": "1", "net.ipv6.conf.default.disable_ipv6": "1"})
        netns.ip("link", "add", "lan", "type", "bridge", netns=lan)
        netns.ip("link", "set", "dev", "lan", "mtu", str(UNDERLAY_MTU), "up", netns=lan)
        for i, m in enumerate(ms, start=1):
            netns.ip("link", "add", f"to{i}", "netns", lan, "type", "veth", "peer", "name", "ul0",
                     "netns", machine_netns(fabric, m))
            netns.ip("link", "set", "dev", f"to{i}", "mtu", str(UNDERLAY_MTU), "master", "lan", "up", netns=lan)
    for m in ms:
        ns = machine_netns(fabric, m)
        netns.ip("addr", "add", f"{underlay[m]}/32", "dev", "ul0", netns=ns)
        netns.ip("link", "set", "dev", "ul0", "mtu", str(UNDERLAY_MTU), "up", netns=ns)
        for other in ms:
            if other != m:
                netns.ip("route", "add", f"{underlay[other]}/32", "dev", "ul0", netns=ns)


def machine_netns(fabric: str, machine: str) -> str:
    """An emulated machine's namespace (`@` keeps it apart from hosts' `{fabric}-{host}`)."""
    return f"{fabric}-@{machine}"


def lan_netns(fabric: str) -> str:
    """The namespace of the bridge joining three or more emulated machines."""
    return f"{fabric}-@-lan"


def vxlan_counters(st: FabricState) -> dict[str, dict[str, int]]:
    """Per VXLAN switch port here (root namespace): the kernel's packet and byte counters."""
    out = {}
    for ln in st.links:
        if ln.vni is None:
            continue
        for dev, m in ((ln.a_if, ln.a_machine), (ln.b_if, ln.b_machine)):
            if st.machine is None or m == st.machine:
                out[dev] = netns.link_stats(dev)
    return out
