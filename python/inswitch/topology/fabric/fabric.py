"""A fabric: the switches of a topology, each its own `inswitch switch` process with its own
P4Runtime endpoint and device id, hosts in network namespaces, and every link a veth pair
(switch ends in the root namespace, opened by their switch over AF_PACKET; no kernel bridge
anywhere), shaped with `tc` (netem, tbf) where the topology asks.

It grows the rack: the same namespace and veth helpers (`netns.py`), switch process
management (`switchproc.py`), state directory (`state.py`) and name-based teardown
(`teardown.py`); names share one space with racks (`{name}-...`, `/run/inswitch/{name}/`),
so a rack and a fabric can never take each other's objects.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from inswitch.topology import control, netns, restarts, switchproc
from inswitch.topology.errors import RackError
from inswitch.topology.fabric import controller
from inswitch.topology.fabric.generators import load_spec
from inswitch.topology.fabric.model import LinkProps, Topology, parse_topology
from inswitch.topology.fabric.supervisor import SUPERVISOR_FILE
from inswitch.topology.fabric.plan import FabricPlan, HostPlan, LinkPlan, SwitchPlan, plan_fabric
from inswitch.topology.rack import is_root, switchd_available
from inswitch.topology.state import check_name, state_dir
from inswitch.topology.teardown import DownReport, check_kind, teardown

DEFAULT_NAME = "fab"
STATE_FILE = "fabric.json"


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
           pcap: Optional[str] = None, fault: Optional[str] = None) -> FabricState:
        """Validate everything, then build; any failure or Ctrl-C once building started
        takes down all of it (by name) and re-raises. With `pcap`, every switch captures
        its ports into `pcap/SWITCH/port{N}.pcapng` (the switch's own `--pcap`). `fault`:
        every switch's `--fault` (its own ports: so every link, switch-to-switch links at
        both ends)."""
        t0 = time.monotonic()
        topo = load_spec(spec) if isinstance(spec, str) else spec
        name = check_name(name or DEFAULT_NAME)
        plan = plan_fabric(topo, name, link_default)
        machines = sorted({n.machine for n in topo.nodes.values() if n.machine})
        if len(machines) > 1:
            raise RackError(f"the topology spans machines {', '.join(machines)}: fabrics across machines "
                            "(`--machine`, VXLAN links) are not implemented yet; drop the `machine` keys to run it here")
        if not is_root():
            raise RackError("a fabric needs root (network namespaces, veth pairs, raw sockets); the UDP-tunnel "
                            "fallback of `rack` is not available for fabrics")
        if not switchd_available():
            raise RackError("the switch daemon (`inswitch switch`) is not in this build")
        if state_dir(name).exists():
            raise RackError(f"a rack or fabric named {name!r} exists ({state_dir(name)}); "
                            f"run `inswitch fabric down --name {name}` first")
        left = netns.leftovers(f"{name}-")
        if left:
            raise RackError(f"objects named {name}-... exist ({', '.join(left[:5])}); "
                            f"run `inswitch fabric down --name {name}` first")
        needs_netem = [ln for ln in plan.links if any(v is not None for v in (ln.props.delay_ms, ln.props.loss_pct))]
        if needs_netem and not netns.qdisc_available("netem", f"{name}-probe"):
            raise RackError(f"link {needs_netem[0].endpoints} asks for delay/jitter/loss, which need the kernel's netem "
                            "qdisc, and this kernel has none (CONFIG_NET_SCH_NETEM); a rate alone works (tbf)")
        try:
            return self._build(topo, plan, t0, pcap, fault)
        except BaseException as e:
            try:
                self.down(name)
            except Exception as cleanup_err:
                e.add_note(f"cleanup after the failed `up` also failed: {cleanup_err}")
            raise

    def _build(self, topo: Topology, plan: FabricPlan, t0: float, pcap: Optional[str] = None, fault: Optional[str] = None) -> FabricState:
        sdir = state_dir(plan.name)
        sdir.mkdir(parents=True, mode=0o755)
        st = FabricState(name=plan.name, topology=topo.to_yaml(), switches=[SwitchRun(plan=s) for s in plan.switches],
                         hosts=plan.hosts, links=plan.links, state_dir=str(sdir), created=time.time())
        st.save()
        self._make_links(st)
        netns.ensure_neigh_capacity(len(st.hosts) * 4)
        st.timings["links_s"] = time.monotonic() - t0
        shaped = {ln.a_if for ln in st.links if not ln.props.is_empty()} | {ln.b_if for ln in st.links if not ln.props.is_empty()}
        for sw in st.switches:
            sw.ready_file = str(sdir / f"{sw.plan.name}.ready.json")
            sw.log = str(sdir / f"{sw.plan.name}.log")
            sw.argv = switchproc.switch_argv(
                sw.plan.program, "veth:" + ",".join(sw.plan.ifaces), f"127.0.0.1:{sw.plan.p4runtime_port}",
                "127.0.0.1:0", Path(sw.ready_file), python=self.python, device_id=sw.plan.device_id,
                pipes=sw.plan.pipes, port_qdisc=bool(shaped & set(sw.plan.ifaces)),
                pcap=str(Path(pcap).resolve() / sw.plan.name) if pcap else None, fault=fault)
            sw.pid = switchproc.launch(sw.argv, Path(sw.log), sdir)
        st.save()  # from here on `down` in another terminal finds every switch by pid too
        for sw in st.switches:
            assert sw.pid is not None
            ready = switchproc.wait_ready(sw.pid, Path(sw.ready_file), Path(sw.log), self.ready_timeout)
            sw.p4runtime, sw.metrics = str(ready["p4runtime"]), str(ready.get("metrics") or "")
        st.timings["switches_s"] = time.monotonic() - t0
        st.save()
        controller.program_fabric(topo, st.plan(), {s.plan.name: s.p4runtime for s in st.switches})
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

    def _make_links(self, st: FabricState) -> None:
        by_if = {h.switch_if: h for h in st.hosts}
        names = [(h.ip, [h.name, f"{st.name}-{h.name}"]) for h in st.hosts]
        for ln in st.links:
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
            alive = switchproc.is_alive(sw.pid, sw.ready_file)
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
            out.append(s)
        spaces = set(netns.netns_list())
        present = {h.name: h.netns in spaces for h in st.hosts}
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
        if h.netns not in netns.netns_list():
            raise RackError(f"namespace {h.netns} is gone; run `inswitch fabric down --name {name}` and up again")
        try:
            return subprocess.run(netns.netns_argv(h.netns, argv), capture_output=capture, text=True, timeout=timeout)
        except FileNotFoundError as e:
            raise RackError(f"cannot run {argv[0]!r} in {h.netns}: {e}") from e


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
    return {
        "name": st.name,
        "timings": st.timings,
        "switches": {sw.name: {"pid": sw.pid, "alive": sw.alive, "p4runtime": sw.p4runtime, "device_id": sw.device_id,
                               "ports": {run.plan.port_names[p]: {"port": p, "interface": run.plan.ifaces[p], **c}
                                         for p, c in (sw.counters or {}).items()},
                               "programs": sw.programs, "error": sw.error}
                     for sw, run in zip(s.switches, st.switches)},
        "hosts": {h.name: {"ip": h.ip, "mac": h.mac, "netns": h.netns, "switch": h.switch, "port": h.port,
                           "present": s.host_present.get(h.name, False)} for h in st.hosts},
        "links": [{"endpoints": ln.endpoints, **ln.props.to_yaml(),
                   "qdisc": {k: s.qdiscs[k] for k in (qdisc_key(ln.a_if, ln.a_netns), qdisc_key(ln.b_if, ln.b_netns))
                             if k in s.qdiscs}}
                  for ln in st.links],
        "supervisor_pid": st.supervisor_pid,
        "restarts": restarts.read(st.restarts_file),
    }
