"""One WordCount job: mappers and reducers as separate processes, in a rack of network
namespaces around the switch (root) or on loopback (no root: tcp and udp modes only), in
one or several modes, checked against a Counter over the same input computed here.

Modes: `tcp` (the classic shuffle), `udp` (the aggregation protocol without in-network
aggregation: the DAIET paper's second baseline) and `switch` (the rack's switch runs
"forward,<program>" and aggregates on the way; the controller installs one aggregation tree
per reducer first). A switch run always runs the udp baseline in the same invocation (same
rack, same faults) so `reduction` compares like with like.
"""

from __future__ import annotations

import json
import math
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from inswitch import procs
from inswitch.apps.wordcount import transport, words
from inswitch.apps.wordcount.worker import load_result

MODES = ("tcp", "udp", "switch")
PROGRAMS = ("daiet", "switchagg")
WHERE = ("auto", "netns", "loopback")
MAP_PORT = 47000
#: Reducers listen here: the switch classifies UDP to this port as DAIET
#: (`wire::daiet::UDP_PORT`), so in a rack every reducer (one per host) uses it.
REDUCE_PORT = 7070
#: The UDP port each switch program classifies as its own (`wire::switchagg::UDP_PORT`).
REDUCE_PORTS = {"daiet": 7070, "switchagg": 7071}

#: Told what the job does now.
Progress = Callable[[str], None]
#: Told how many of the job's workers (mappers and reducers over every mode) have
#: finished, out of how many (for a progress bar).
Steps = Callable[[int, int], None]


def no_progress(msg: str) -> None:
    pass


class JobError(RuntimeError):
    """The job could not run (a process failed, a timeout, a missing piece): one line."""


@dataclass
class JobSpec:
    inputs: list[str] | None = None
    zipf: float | None = None  # alpha; None when the input is files
    words: int = 100_000
    vocab: int = 10_000
    seed: int = 1
    mappers: int = 4
    reducers: int = 2
    program: str = "daiet"
    op: str = "sum"
    loss: float = 0.0
    combiner: bool = True
    timeout_s: float = 60.0
    #: The rack's name; "" (the default) is `wc<pid in base 36>`, this process's own, so two
    #: jobs at once never share (or tear down) each other's rack.
    rack: str = ""
    #: "auto" (a netns rack when root, else loopback), "netns" or "loopback".
    where: str = "auto"
    #: Run switch mode with the aggregation program absent from the switch (forwarding only,
    #: no trees): the hosts must notice and aggregate themselves (`fallback`).
    absent_program: bool = False
    #: Capture every switch port into pcapng files in this directory (netns rack only).
    pcap: str | None = None
    #: Run on a fabric (a generator spec or a topology file) instead of a one-switch rack:
    #: two-level trees over its leaves and one aggregation switch (see `fabric.py`).
    fabric: str | None = None
    #: On a fabric: register cells (per slice) each tree may use on each switch; None: the
    #: switch's cells shared evenly by the trees. Less memory for the capacity experiments.
    tree_cells: int | None = None
    #: On a fabric with --program switchagg: split every engine memory into this many equal
    #: regions, each tree taking one (1/N of the memory); None: one region per tree.
    switchagg_regions: int | None = None
    #: Each mapper sends its combined pairs in a random order of its own (seeded) instead of
    #: the vocabulary's, which is the same in every mapper (capacity experiments: formula (3)
    #: assumes keys arriving in no particular order).
    shuffle_pairs: bool = False
    #: The switch's fault injection as `--fault` takes it (`loss=P,dup=P,reorder=P,seed=N`);
    #: replaces the loss-only fault `loss` makes.
    fault: str | None = None

    def check(self) -> None:
        if (self.inputs is None) == (self.zipf is None):
            raise JobError("give either input files or --zipf ALPHA")
        if self.inputs is not None:
            for p in self.inputs:
                if not Path(p).is_file():
                    raise JobError(f"input {p!r} is not a readable file")
        if self.zipf is not None and not (math.isfinite(self.zipf) and self.zipf >= 0 and self.words >= 1 and self.vocab >= 1):
            raise JobError("--zipf needs a finite ALPHA >= 0, --words >= 1 and --vocab >= 1")
        if not (math.isfinite(self.timeout_s) and self.timeout_s > 0):
            raise JobError("--timeout must be a number of seconds > 0")
        if self.where not in WHERE:
            raise JobError(f"--where must be one of {', '.join(WHERE)}")
        if not 1 <= self.mappers <= 64 or not 1 <= self.reducers <= 64:
            raise JobError("--mappers and --reducers must be 1..64")
        if self.mappers + self.reducers > 200:
            raise JobError("at most 200 hosts in a rack")
        if self.program not in PROGRAMS:
            raise JobError(f"--program must be one of {', '.join(PROGRAMS)}")
        if not 0.0 <= self.loss < 1.0:  # (NaN fails this too)
            raise JobError("--loss must be in [0, 1)")
        if self.op != "sum":
            raise JobError("WordCount sums counts: op must be sum")
        if self.switchagg_regions is not None and (self.program != "switchagg" or self.fabric is None
                                                   or not self.reducers <= self.switchagg_regions <= 255):
            raise JobError("switchagg_regions: --program switchagg on a fabric, at least one region per reducer, at most 255")
        if self.fabric is not None and self.pcap:
            raise JobError("--pcap captures one switch's ports: not with --fabric")

    def input_summary(self) -> dict[str, Any]:
        if self.inputs is not None:
            return {"files": [str(p) for p in self.inputs], "bytes": sum(os.path.getsize(p) for p in self.inputs)}
        return {"zipf": self.zipf, "words": self.words, "vocab": self.vocab, "seed": self.seed}


def reference(spec: JobSpec) -> Counter[str]:
    """The answer without any network: a Counter over the same input."""
    if spec.inputs is not None:
        return words.count_files(spec.inputs)
    assert spec.zipf is not None
    return words.count_zipf(spec.zipf, spec.words, spec.vocab, spec.seed, spec.mappers)


def mapper_inputs(spec: JobSpec) -> list[dict[str, Any]]:
    if spec.inputs is not None:
        shares = words.assign_files(spec.inputs, spec.mappers)
        return [{"files": [[r.path, r.start, r.end] for r in share]} for share in shares]
    z = {"alpha": spec.zipf, "words": spec.words, "vocab": spec.vocab, "seed": spec.seed, "mappers": spec.mappers}
    return [{"zipf": z} for _ in range(spec.mappers)]


# ----- where the processes run -----------------------------------------------------------

@dataclass
class Place:
    ip: str
    netns: str | None
    iface: str | None


@dataclass
class Env:
    kind: str  # "netns" | "loopback"
    mappers: list[Place]
    reducers: list[Place]
    p4runtime: str | None = None
    rack_state: Any = None
    #: On a fabric: its state (`FabricState`) and the job's layout (`fabric.FabricLayout`).
    fabric_state: Any = None
    layout: Any = None
    watcher: Any = None
    #: The trees installed for the current run (switch name -> its trees), for a restart.
    tree_plan: dict[str, Any] = field(default_factory=dict)
    map_port: int = MAP_PORT
    reduce_port: int = REDUCE_PORT
    notes: list[str] = field(default_factory=list)
    #: SwitchAgg's task launch of the last switch run (`apps.switchagg.launch.launch`).
    launch: dict[str, Any] | None = None

    def argv(self, place: Place, argv: list[str]) -> list[str]:
        if place.netns:
            from inswitch.topology import netns

            return netns.netns_argv(place.netns, argv)
        return argv

    def map_addr(self, i: int) -> str:
        return f"{self.mappers[i].ip}:{self.map_port + (i if self.kind == 'loopback' else 0)}"

    def reduce_addr(self, j: int) -> str:
        return f"{self.reducers[j].ip}:{self.reduce_port + (j if self.kind == 'loopback' else 0)}"


def _free_port_base(n: int) -> int:
    """A base such that base..base+n-1 look free for TCP and UDP on loopback."""
    # Start at a random place: fixed port numbers collide with other tests running at once.
    start = random.Random().randrange(20000, 30000)
    for base in range(start, 60000, 211):
        ok = True
        for p in range(base, base + n):
            for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
                s = socket.socket(socket.AF_INET, kind)
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                finally:
                    s.close()
            if not ok:
                break
        if ok:
            return base
    raise JobError("no free loopback ports")


def switch_program_available(program: str) -> str | None:
    """None if switch mode can run with `program`, else why not."""
    from inswitch import native

    if program not in ("daiet", "switchagg"):
        try:
            from inswitch.apps.aggregation import controller

            if not hasattr(controller, "plan_switchagg"):
                return f"the aggregation host library and controller do not drive {program!r} in this build (daiet only)"
        except ImportError:
            return "the aggregation controller (inswitch.apps.aggregation.controller) is not in this build"
    if program not in native.program_names():
        return f"the switch program {program!r} is not in this build (known: {', '.join(native.program_names())})"
    if transport.native_agg() is None:
        return "inswitch._native.agg_map/agg_reduce (the aggregation host library) are not in this build"
    import importlib.util

    try:
        found = importlib.util.find_spec("inswitch.apps.aggregation.controller") is not None
    except ModuleNotFoundError:
        found = False
    if not found:
        return "the aggregation controller (inswitch.apps.aggregation.controller) is not in this build"
    return None


@dataclass
class _RackCtx:
    env: Env
    name: str


def open_env(spec: JobSpec, switch: bool, progress: Progress) -> tuple[Env, Callable[[], None]]:
    """Place the processes; returns the environment and its teardown."""
    where = spec.where
    root = os.geteuid() == 0
    if where == "auto":
        where = "netns" if root else "loopback"
    if where == "netns" and not root:
        raise JobError("a rack of network namespaces needs root; use --where loopback (tcp and udp modes only)")
    M, R = spec.mappers, spec.reducers
    if where == "loopback":
        if switch:
            raise JobError("switch mode needs root: the switch sits between hosts in network namespaces")
        if spec.loss:
            raise JobError("--loss acts on the switch's ports: it needs the netns rack (root)")
        if spec.pcap:
            raise JobError("--pcap captures the switch's ports: it needs the netns rack (root)")
        base = _free_port_base(M + R + 100 + R)
        env = Env("loopback", [Place("127.0.0.1", None, None)] * M, [Place("127.0.0.1", None, None)] * R,
                  map_port=base, reduce_port=base + 100)
        env.notes.append("mappers and reducers ran on loopback without a switch (no root, or --where loopback): tcp and udp modes only")
        return env, lambda: None
    if spec.fabric is not None:
        return open_fabric_env(spec, switch, progress)
    from inswitch.topology.rack import Rack
    from inswitch.topology.state import process_tag

    rack = Rack()
    name = spec.rack or f"wc{process_tag()}"
    rack.down(name)  # a leftover of a crashed run of the same name
    programs = f"forward,{spec.program}" if switch and not spec.absent_program else "forward"
    fault = spec.fault or (f"loss={spec.loss},seed={spec.seed}" if spec.loss else None)
    progress(f"building a rack of {M + R} hosts around the switch ({programs}{', loss ' + str(spec.loss) if fault else ''})")
    try:
        st = rack.up(M + R, name=name, programs=programs, p4runtime="127.0.0.1:0", metrics="127.0.0.1:0", fault=fault,
                     pcap=spec.pcap)
    except BaseException:
        rack.down(name)
        raise
    places = [Place(h.ip, h.netns, h.ifname) for h in st.hosts]
    env = Env("netns", places[:M], places[M:], p4runtime=st.switch.p4runtime, rack_state=st,
              reduce_port=REDUCE_PORTS.get(spec.program, REDUCE_PORT))
    if spec.pcap:
        env.notes.append(f"switch ports captured in {Path(spec.pcap).resolve()}/port{{N}}.pcapng")

    def teardown() -> None:
        rack.down(name)

    return env, teardown


def open_fabric_env(spec: JobSpec, switch: bool, progress: Progress) -> tuple[Env, Callable[[], None]]:
    """A fabric of `spec.fabric` with every switch running forward,<program>; the job's hosts
    placed under several leaves and their path pinned to the trees (`fabric.py`)."""
    from inswitch.apps.wordcount import fabric as wf
    from inswitch.topology.errors import RackError
    from inswitch.topology.fabric.fabric import Fabric
    from inswitch.topology.fabric.generators import load_spec
    from inswitch.topology.state import process_tag

    assert spec.fabric is not None
    try:
        topo = load_spec(spec.fabric)
    except RackError as e:
        raise JobError(str(e)) from None
    programs = f"forward,{spec.program}" if switch and not spec.absent_program else "forward"
    for n in topo.switches:
        n.program = programs
    fab = Fabric()
    name = spec.rack or f"wf{process_tag()}"[:6]
    fab.down(name)
    fault = spec.fault or (f"loss={spec.loss},seed={spec.seed}" if spec.loss else None)
    progress(f"building fabric {spec.fabric}: {len(topo.switches)} switches ({programs}{', loss ' + str(spec.loss) if fault else ''})")
    try:
        # A topology across machines runs here with its machines emulated (one namespace
        # each, kernel VXLAN links between them): the job's processes are all on this host.
        st = fab.up(topo, name=name, fault=fault, emulate_machines=len(topo.machine_names) > 1)
        lay = wf.place(topo, st.hosts, spec.mappers, spec.reducers)
        if switch:
            wf.pin_paths(st, lay)
    except BaseException as e:
        fab.down(name)
        if isinstance(e, (RackError, wf.FabricJobError)):
            raise JobError(str(e)) from None
        raise
    env = Env("netns", [Place(h.ip, h.netns, h.ifname) for h in lay.mappers],
              [Place(h.ip, h.netns, h.ifname) for h in lay.reducers], fabric_state=st, layout=lay,
              reduce_port=REDUCE_PORTS.get(spec.program, REDUCE_PORT))
    env.notes.append(f"fabric {spec.fabric}: mappers under {', '.join(sorted({h.switch for h in lay.mappers}))}, "
                     f"reducers under {', '.join(sorted({h.switch for h in lay.reducers}))}, "
                     + (f"trees along the path {' -> '.join(n for n, _ in lay.path)}" if lay.path else f"aggregation switch {lay.agg}"))
    if st.emulated:
        env.notes.append(f"machines {', '.join(f'{m} ({a})' for m, a in sorted(st.underlay.items()))} emulated by network "
                         "namespaces; kernel VXLAN links (UDP 4789): "
                         + ", ".join(f"{ln.endpoints} (VNI {ln.vni})" for ln in st.links if ln.vni is not None))

    from inswitch.topology import restarts

    # A restarted switch gets its routing back from the fabric's supervisor; the job's own
    # part it puts back here, trees first, then the pinned path. Trees first: a restarted
    # switch without them would forward its mappers' packets untouched along the path, and
    # the next switch would take them as new children of its tree from sequence number 0,
    # count their ENDs and flush before its real children are done (pairs lost without a
    # fallback). With the trees back (registers empty), a mapper the dead switch had
    # acknowledged anything of finds a gap, stalls, and the reducers fall back; until the
    # path is back, the restarted switch cannot send the reducers' MACs anywhere.
    def on_back(rec: dict[str, Any]) -> None:
        sw = str(rec["switch"])
        if env.tree_plan.get(sw):
            _install_on(env, {sw: env.tree_plan[sw]})
        wf.pin_paths(st, lay, only=sw)

    watcher = restarts.Watcher(st.restarts_file, on_back).__enter__()
    env.watcher = watcher

    def teardown() -> None:
        watcher.__exit__(None, None, None)
        env.notes.extend(f"putting the job's trees and path back on a restarted switch failed: {e}" for e in watcher.errors)
        fab.down(name)

    return env, teardown


def _install_fabric_trees(env: Env, spec: JobSpec, tree_ids: list[int], progress: Progress) -> list[dict[str, Any]]:
    """`plan_two_level` (or `plan_path`) over the job's leaves, the daiet or the switchagg
    controller's, installed on every switch of the trees; each switch acknowledges by
    reading everything back."""
    from inswitch.apps.aggregation import controller
    from inswitch.apps.wordcount import fabric as wf

    if spec.program == "switchagg":
        try:
            plan = wf.plan_switchagg_trees(env.layout, tree_ids, spec.op, regions=spec.switchagg_regions)
        except ValueError as e:
            raise JobError(f"switchagg trees: {e}") from None
    else:
        plan = wf.plan_trees(env.layout, tree_ids, spec.op,
                             cells=controller.CELLS if spec.tree_cells is None else spec.tree_cells * len(tree_ids))
    progress(f"installing {len(tree_ids)} two-level trees on {len(plan)} switches through P4Runtime")
    env.tree_plan = plan
    try:
        if spec.program == "switchagg":
            return _launch_fabric_switchagg(env, spec, plan)
        return _install_on(env, plan)
    except Exception as e:
        raise JobError(f"installing the aggregation trees failed: {e}") from None


def _install_on(env: Env, plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Install `plan` (switch name -> its trees: daiet `TreeSpec`s, or a switchagg
    `SwitchPlan`) on those switches of the fabric, with the fabric controller's election id;
    one acknowledgement per switch (everything read back)."""
    from inswitch.apps.aggregation import controller
    from inswitch.apps.switchagg import controller as sagg
    from inswitch.topology.fabric.controller import ELECTION_ID

    runs = {r.plan.name: r for r in env.fabric_state.switches}
    if any(isinstance(v, sagg.SwitchPlan) for v in plan.values()):
        return [{"switch": n, **sagg.install(runs[n].p4runtime, sp, device_id=runs[n].plan.device_id, election_id=ELECTION_ID)}
                for n, sp in plan.items()]
    acks = controller.install({runs[n].p4runtime: trees for n, trees in plan.items()},
                              num_ports={runs[n].p4runtime: len(runs[n].plan.ifaces) for n in plan},
                              device_ids={runs[n].p4runtime: runs[n].plan.device_id for n in plan},
                              election_id=ELECTION_ID)
    by_addr = {r.p4runtime: n for n, r in runs.items()}
    return [{"switch": by_addr[str(a["address"])], **a} for a in acks]


def fabric_port_counters(env: Env) -> dict[str, dict[int, dict[str, int]]]:
    """Port counters of every switch of the job's trees."""
    from inswitch.topology import control

    out = {}
    for run in env.fabric_state.switches:
        if run.plan.name in env.layout.ports:
            out[run.plan.name] = control.read_port_counters(run.p4runtime, list(range(len(run.plan.ifaces))),
                                                            device_id=run.plan.device_id)
    return out


def fabric_pair_counters(env: Env) -> dict[str, tuple[int, int]]:
    """The switchagg program's own pair counters (`pairs_in`, `pairs_out`, every tree
    together) of every switch of the job's trees."""
    from inswitch.topology import control

    out = {}
    for run in env.fabric_state.switches:
        if run.plan.name in env.layout.ports:
            with control.connect(run.p4runtime, read_only=True, device_id=run.plan.device_id) as c:
                out[run.plan.name] = (sum(v for _, v in c.read_register("switchagg.pairs_in")),
                                      sum(v for _, v in c.read_register("switchagg.pairs_out")))
    return out


def install_trees(env: Env, spec: JobSpec, tree_ids: list[int], progress: Progress) -> list[dict[str, Any]]:
    """One aggregation tree per reducer (rooted at the reducer's switch port, every mapper a
    child, the switch's memory split evenly), installed by the aggregation controller through
    P4Runtime; returns the switch's acknowledgements (the controller reads everything back)."""
    try:
        from inswitch.apps.aggregation import controller
    except ImportError:
        raise JobError("the aggregation controller (inswitch.apps.aggregation.controller) is not in this build") from None
    if env.fabric_state is not None:
        return _install_fabric_trees(env, spec, tree_ids, progress)
    if spec.program == "switchagg":
        return _install_switchagg_trees(env, spec, tree_ids, progress)
    if spec.program != "daiet":
        raise JobError(f"the aggregation controller installs daiet trees; --program {spec.program} has no controller here")
    progress(f"installing {len(tree_ids)} aggregation trees through P4Runtime")
    st = env.rack_state
    reducer_ports = [h.port for h in st.hosts[spec.mappers:]]
    trees = controller.plan_single_switch(dict(zip(tree_ids, reducer_ports)), n_mappers=spec.mappers, op=spec.op)
    try:
        acks = controller.install({str(env.p4runtime): trees}, num_ports=len(st.hosts))
    except Exception as e:
        raise JobError(f"installing the aggregation trees failed: {e}") from None
    return [dict(a) for a in acks]


def _install_switchagg_trees(env: Env, spec: JobSpec, tree_ids: list[int], progress: Progress) -> list[dict[str, Any]]:
    """The same trees for the `switchagg` program, set up by SwitchAgg's own task launch
    (`apps.switchagg.launch`: Launch → Configure → Ack; the switch's agent installs them
    over P4Runtime and reads them back before its Ack; the root switch reports to the
    reducer as child `SWITCH_CHILD_MIN`, see docs/switchagg.md)."""
    from inswitch.apps.switchagg import controller as sagg
    from inswitch.apps.switchagg import launch

    if spec.mappers > sagg.MAX_CHILDREN:
        raise JobError(f"switchagg: at most {sagg.MAX_CHILDREN} mappers (children per tree)")
    progress(f"launching {len(tree_ids)} switchagg trees (Launch, Configure, Ack)")
    st = env.rack_state
    reducer_ports = [h.port for h in st.hosts[spec.mappers:]]
    mapper_ports = [h.port for h in st.hosts[:spec.mappers]]
    routes = {t: sagg.Tree(tree_id=t, parent_port=p, children=spec.mappers, op=spec.op, up_child=sagg.SWITCH_CHILD_MIN)
              for t, p in zip(tree_ids, reducer_ports)}
    agent = launch.SwitchAgent(str(env.p4runtime), routes, mapper_ports)
    try:
        env.launch = launch.launch([agent], _addrs(env, spec, "reduce"), _addrs(env, spec, "map"))
    except Exception as e:
        raise JobError(f"installing the switchagg trees failed: {e}") from None
    return [{"address": env.p4runtime, "trees": tree_ids, "clone_sessions": len(mapper_ports) + 1}]


def _addrs(env: Env, spec: JobSpec, role: str) -> list[str]:
    if role == "map":
        return [env.map_addr(i) for i in range(spec.mappers)]
    return [env.reduce_addr(j) for j in range(spec.reducers)]


def _launch_fabric_switchagg(env: Env, spec: JobSpec, plan: dict[str, Any]) -> list[dict[str, Any]]:
    """`_install_on` for a switchagg plan, through SwitchAgg's task launch: one agent per
    switch of the plan, each told its trees' routes; Configure carries the rest."""
    from inswitch.apps.switchagg import launch
    from inswitch.topology.fabric.controller import ELECTION_ID

    if any(sp.regions is not None and sp.regions != len(sp.trees) for sp in plan.values()):
        # A Configure splits the memory evenly among its trees (Table 1 has no region
        # count): --switchagg-regions stays on the direct install.
        return _install_on(env, plan)
    runs = {r.plan.name: r for r in env.fabric_state.switches}
    names = list(plan)
    agents = [launch.SwitchAgent(runs[n].p4runtime, {t.tree_id: t for t in plan[n].trees}, list(plan[n].child_ports),
                                 device_id=runs[n].plan.device_id, election_id=ELECTION_ID) for n in names]
    env.launch = launch.launch(agents, _addrs(env, spec, "reduce"), _addrs(env, spec, "map"))
    return [{"switch": n, **(a.installed or {})} for n, a in zip(names, agents)]


# ----- one run ---------------------------------------------------------------------------

def _spawn(env: Env, place: Place, spec_doc: dict[str, Any], workdir: Path, name: str) -> subprocess.Popen[str]:
    path = workdir / f"{name}.json"
    path.write_text(json.dumps(spec_doc))
    argv = env.argv(place, [sys.executable, "-m", "inswitch.apps.wordcount.worker", str(path)])
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _check_completed(mode: str, mstats: list[dict[str, Any]], rstats: list[dict[str, Any]], timeout_s: float) -> None:
    """A udp/switch reducer that ran out of time returns the part of its tree it had
    (`completed` false): say so, as a tcp worker's timeout does, instead of checking a partial
    result. (A mapper without its DONE while every reducer completed lost only the reducer's
    last word: the result is whole and is checked as usual.)"""
    late_r = [j for j, r in enumerate(rstats) if r.get("completed") is False]
    if late_r:
        late_m = [i for i, m in enumerate(mstats) if m.get("completed") is False]
        raise JobError(f"{mode}: reducers {late_r} did not complete their trees within --timeout {timeout_s:g} s"
                       + (f" (mappers {late_m} still unacknowledged)" if late_m else "")
                       + "; frames were lost for that long (the switch's counters and the hosts' neighbour tables tell where)")


def _last_json(out: str, err: str, what: str) -> dict[str, Any]:
    for line in reversed(out.strip().splitlines()):
        if line.startswith("{"):
            doc = json.loads(line)
            if "error" in doc:
                raise JobError(f"{what} failed: {doc['error']}")
            return doc
    tail = "\n".join(err.strip().splitlines()[-5:])
    raise JobError(f"{what} printed no result; stderr: {tail or '(empty)'}")


def _kill(procs: list[subprocess.Popen[str]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        try:
            p.communicate(timeout=5)
        except Exception:
            pass


def switch_counters(env: Env) -> dict[str, float]:
    """The switch's own drop counters (its /metrics): frames its ports' fault injector lost
    (`fault_lost`), and pipeline drops by reason (e.g. malformed aggregation packets)."""
    if env.rack_state is not None:
        urls = [env.rack_state.switch.metrics]
    elif env.fabric_state is not None:
        urls = [r.metrics for r in env.fabric_state.switches if r.metrics]
    else:
        return {}
    from inswitch.topology import control

    out: dict[str, float] = {}
    try:
        samples = [x for u in urls for x in control.scrape_metrics(u)]
    except Exception:
        return {}
    for name, labels, v in samples:
        if name == "inswitch_port_io_drops_total" and "fault" in labels.get("reason", ""):
            out["fault_lost"] = out.get("fault_lost", 0) + v
        elif name == "inswitch_port_io_drops_total":
            key = f"port_io:{labels.get('reason', '?')}"
            out[key] = out.get(key, 0) + v
        elif name == "inswitch_port_queue_drops_total":
            out["queue_full"] = out.get("queue_full", 0) + v
        elif name == "inswitch_drops_total":
            key = f"drop:{labels.get('reason', '?')}"
            out[key] = out.get(key, 0) + v
    return out


def _delta(a: dict[str, float], b: dict[str, float]) -> dict[str, int]:
    return {k: int(b[k] - a.get(k, 0)) for k in b if b[k] - a.get(k, 0)}


def side_channel_limit(spec: JobSpec, mode: str, ref: dict[bytes, int]) -> int | None:
    """The protocol's longest key if the input has a longer word (such words then go from
    mapper to reducer over TCP: the side channel, see `transport`), else None."""
    if mode == "tcp":
        return None
    limit = transport.max_key_len(spec.program)
    return limit if any(len(k) > limit for k in ref) else None


def run_mode(spec: JobSpec, mode: str, env: Env, ref: dict[bytes, int], workdir: Path, progress: Progress,
             tree_base: int = 1, step: Optional[Callable[[int], None]] = None) -> dict[str, Any]:
    """`step(k)`: k of this mode's workers have finished (for the progress bar)."""
    M, R = spec.mappers, spec.reducers
    wall0 = time.time()
    sw0 = switch_counters(env)
    tree_ids = [tree_base + j for j in range(R)]
    info: dict[str, Any] = {}
    if mode == "switch" and not spec.absent_program:
        env.launch = None
        info["controller"] = install_trees(env, spec, tree_ids, progress)
        if env.launch is not None:
            info["launch"] = env.launch
    ports0 = fabric_port_counters(env) if mode == "switch" and env.layout is not None and env.layout.ports else None
    pairs0 = fabric_pair_counters(env) if ports0 is not None and spec.program == "switchagg" else None
    reducer_addrs = [env.reduce_addr(j) for j in range(R)]
    mapper_addrs = [env.map_addr(i) for i in range(M)]
    common: dict[str, Any] = {"mode": mode, "protocol": spec.program, "op": spec.op, "timeout_s": spec.timeout_s}
    key_limit = side_channel_limit(spec, mode, ref)
    if key_limit is not None:
        common["max_key_len"] = key_limit
    reducers: list[subprocess.Popen[str]] = []
    mappers: list[subprocess.Popen[str]] = []
    outs = [workdir / f"{mode}-r{j}.npz" for j in range(R)]
    try:
        progress(f"{mode}: starting {R} reducers")
        for j in range(R):
            reducers.append(_spawn(env, env.reducers[j], {**common, "role": "reduce", "tree_id": tree_ids[j], "bind": reducer_addrs[j],
                                                          "mapper_addrs": mapper_addrs, "out": str(outs[j]),
                                                          "iface": env.reducers[j].iface}, workdir, f"{mode}-r{j}"))
        for j, p in enumerate(reducers):
            assert p.stdout is not None
            line = procs.first_line(p)  # bounded: the worker prints READY or exits at once
            if line != "READY":
                out, err = p.communicate(timeout=10)
                raise JobError(f"reducer {j} did not start: {line or err.strip()[-300:]}")
        progress(f"{mode}: {M} mappers running")
        t0 = time.monotonic()
        inputs = mapper_inputs(spec)
        for i in range(M):
            mappers.append(_spawn(env, env.mappers[i], {**common, "role": "map", "mapper_id": i, "bind": mapper_addrs[i],
                                                        "reducers": R, "reducer_addrs": reducer_addrs, "tree_ids": tree_ids,
                                                        "input": inputs[i], "combiner": spec.combiner,
                                                        **({"shuffle": True, "shuffle_seed": spec.seed} if spec.shuffle_pairs else {})},
                                  workdir, f"{mode}-m{i}"))
        limit = spec.timeout_s + 30
        mstats = []
        for i, p in enumerate(mappers):
            try:
                out, err = p.communicate(timeout=max(1.0, t0 + limit - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise JobError(f"{mode}: mapper {i} did not finish in {limit:.0f} s") from None
            mstats.append(_last_json(out, err, f"{mode} mapper {i}"))
            progress(f"{mode}: {i + 1}/{M} mappers done ({time.monotonic() - t0:.1f} s)")
            if step:
                step(i + 1)
        rstats = []
        for j, p in enumerate(reducers):
            try:
                out, err = p.communicate(timeout=max(1.0, t0 + limit - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise JobError(f"{mode}: reducer {j} did not finish in {limit:.0f} s") from None
            rstats.append(_last_json(out, err, f"{mode} reducer {j}"))
            progress(f"{mode}: {j + 1}/{R} reducers done ({time.monotonic() - t0:.1f} s)")
            if step:
                step(M + j + 1)
        job_s = time.monotonic() - t0
    finally:
        _kill(mappers + reducers)
    wall1 = time.time()
    if ports0 is not None:
        from inswitch.apps.wordcount import fabric as wf

        info["switches"] = wf.per_switch(env.layout, ports0, fabric_port_counters(env), program=spec.program,
                                         pairs=(pairs0, fabric_pair_counters(env)) if pairs0 is not None else None)
    restarts = switch_restarts(env, wall0)
    for rec in restarts:  # a restarted switch's counters started again from 0: nothing to say
        if rec.get("switch") in info.get("switches", {}):
            entry = info["switches"][rec["switch"]]
            entry.update({k: None for k in entry if k != "role"}, restarted=True)
    _check_completed(mode, mstats, rstats, spec.timeout_s)
    # A restarted switch's counters start again from 0: the delta counts only what is comparable.
    sw = _delta(sw0, switch_counters(env)) if not restarts else {}
    progress(f"{mode}: checking the reducers' counts against the reference")
    got: dict[bytes, int] = {}
    misplaced = 0
    for j, path in enumerate(outs):
        part = load_result(path)
        for k, v in part.items():
            if words.reducer_of(k, R) != j or k in got:
                misplaced += 1
            got[k] = got.get(k, 0) + v
    wrong = [k for k in set(got) | set(ref) if got.get(k) != ref.get(k)]
    res: dict[str, Any] = {
        "mode": mode,
        "correct": not wrong and not misplaced,
        "keys": len(got),
        "wrong_keys": len(wrong),
        "wrong_examples": [{"key": k.decode(errors="replace"), "got": got.get(k), "want": ref.get(k)} for k in sorted(wrong)[:5]],
        "misplaced_keys": misplaced,
        "reducer_bytes": sum(int(r.get("bytes") or 0) for r in rstats),
        "reducer_packets": _packets(rstats),
        "reducer_cpu_s": round(sum(r["cpu_s"] for r in rstats), 4),
        # Of which receiving the pairs (the rest: sorting and writing the output).
        "reducer_receive_cpu_s": round(sum(float(r.get("receive_cpu_s") or 0.0) for r in rstats), 4),
        "reducer_pairs": sum(int(r.get("pairs") or 0) for r in rstats),
        "side_channel_pairs": sum(int(r.get("side_channel_pairs") or 0) for r in rstats),
        "side_channel_bytes": sum(int(r.get("side_channel_bytes") or 0) for r in rstats),
        "job_s": round(job_s, 4),
        "mapper_bytes": sum(int(m.get("bytes_sent") or 0) for m in mstats),
        "mapper_packets": None if mode == "tcp" else sum(int(m.get("packets_sent") or 0) for m in mstats),
        "mapper_pairs": sum(int(m["pairs"]) for m in mstats),
        "retransmissions": sum(int(m.get("retransmissions") or 0) for m in mstats),
        "mapper_max_rss_mb": _max_of(mstats, "max_rss_mb"),
        "reducer_max_rss_mb": _max_of(rstats, "max_rss_mb"),
        "fallback": any(bool(x.get("fallback")) for x in mstats + rstats),
        "switch_lost_frames": sw.pop("fault_lost", 0),
        "switch_drops": sw,
        "per_reducer": rstats,
        "per_mapper": mstats,
        **info,
    }
    if mode == "tcp" and rstats and all(r.get("segments") is not None for r in rstats):
        # TCP segments the reducers' sockets received (TCP_INFO): the shuffle's own packets.
        # `reducer_packets` (the NIC's count) also holds every ARP request flooded to the
        # reducer, which in a wide rack is most of it (M x R requests reach each reducer).
        res["reducer_segments"] = sum(int(r["segments"]) for r in rstats)
    if all("wire_packets" in r for r in rstats):
        res["reducer_wire_packets"] = sum(r["wire_packets"] for r in rstats)
        res["reducer_wire_bytes"] = sum(r["wire_bytes"] for r in rstats)
    if res["fallback"]:
        res["note"] = ("the switches did not complete the aggregation (a switch restarted or absent, or a packet lost between switches: "
                       "a gap in a switch's numbered stream): the hosts aggregated instead")
    if restarts:
        res["switch_restarts"] = restarts
        res["restart_note"] = restart_note(restarts, wall0, wall1, fallback=res["fallback"])
        if env.fabric_state is not None and res["fallback"]:
            res["restart_note"] += ("; the restarted switch came back with its trees empty: the mappers under it stalled and the "
                                    "reducers fell back to host-side aggregation (RESEND, then BYPASS through every switch)")
        res["recovered_s"] = round(wall1 - max(float(r.get("forwarding_at") or wall1) for r in restarts), 3)
    if key_limit is not None:
        res["max_key_len"] = key_limit
    return res


def switch_restarts(env: Env, since: float) -> list[dict[str, Any]]:
    """Restarts of the rack's switch (recorded by its supervisor) after `since` (time.time()),
    each with when it died and how long until it was forwarding again."""
    from inswitch.topology import restarts, switchproc

    st = env.rack_state
    # A job that fell back may end before its dead switch forwards again, or even before
    # the supervisor noticed the death: wait (bounded) until each switch that started the
    # job and is gone now has its restart recorded and ended, so the report has them all.
    if env.fabric_state is not None:
        dead = sum(not switchproc.is_alive(r.pid, str(r.ready_file)) for r in env.fabric_state.switches if r.pid and r.ready_file and not r.remote)
        return restarts.wait_back(env.fabric_state.restarts_file, since, timeout=30.0, expect=dead)
    if st is None:
        return []
    dead = int(bool(st.switch.pid) and not switchproc.is_alive(st.switch.pid, str(st.switch.ready_file)))
    return restarts.wait_back(Path(st.state_dir) / "state.json", since, timeout=30.0, expect=dead)


def restart_note(restarts: list[dict[str, Any]], started: float, ended: float, fallback: bool | None = None) -> str:
    """What happened, in one line: when the switch died, when it forwarded again, and how
    long after that the job ended."""
    parts = []
    for r in restarts:
        back = r.get("forwarding_at")
        parts.append(f"{'switch ' + str(r['switch']) if r.get('switch') else 'the switch'} died ({r['exit']}) {r['died_at'] - started:.1f} s into the run and "
                     + (f"was restarted and forwarding again {r['recovery_s']:.1f} s later (generation {r['generation']}); "
                        + (f"the job ended {ended - float(back):.1f} s after that" if ended >= float(back)
                           else f"the job had ended {float(back) - ended:.1f} s before that"
                           + ("" if fallback is False else ", on host-side aggregation"))
                        if back else "did not come back"))
    return "; ".join(parts)


def _max_of(stats: list[dict[str, Any]], key: str) -> float | None:
    """The largest `key` over the processes that reported it (None if none did)."""
    vals = [float(x[key]) for x in stats if x.get(key) is not None]
    return max(vals) if vals else None


def _packets(rstats: list[dict[str, Any]]) -> int | None:
    """Packets the reducers received: the protocol's own count (udp, switch), else the
    reducer host's interface counter (tcp: data segments and ACKs alike, what a NIC sees)."""
    if all(r.get("packets") is not None for r in rstats):
        return sum(int(r["packets"]) for r in rstats)
    if all("wire_packets" in r for r in rstats):
        return sum(int(r["wire_packets"]) for r in rstats)
    return None


FIGURES = ("correct", "reducer_bytes", "reducer_packets", "reducer_cpu_s", "job_s")


def _reduction(new: float | None, base: float | None) -> float | None:
    if new is None or not base:
        return None
    return round(1.0 - new / base, 4)


def run(spec: JobSpec, modes: list[str], progress: Progress = no_progress, steps: Optional[Steps] = None) -> dict[str, Any]:
    """Run the job in each of `modes` (a switch run brings its udp baseline along) and
    return the result document (see the CLI for its keys)."""
    spec.check()
    for m in modes:
        if m not in MODES:
            raise JobError(f"unknown mode {m!r} (known: {', '.join(MODES)})")
    notes: list[str] = []
    want_switch = "switch" in modes
    if want_switch:
        why = switch_program_available(spec.program)
        if why and (spec.program != "daiet" or modes == ["switch"]):
            raise JobError(f"--program {spec.program}: {why}")
        if why is None and (os.geteuid() != 0 or spec.where == "loopback"):
            why = "switch mode needs root and a rack of network namespaces (the switch sits between the hosts)"
            if modes == ["switch"]:
                raise JobError(why)
        if why:  # --mode all: run what can run, and say what did not
            modes = [m for m in modes if m != "switch"]
            want_switch = False
            notes.append(f"switch mode skipped: {why}")
    order = [m for m in MODES if m in modes or (m == "udp" and want_switch)]
    progress("computing the reference Counter")
    t = time.monotonic()
    ref_words = reference(spec)
    ref = {w.encode(): n for w, n in ref_words.items()}
    ref_s = time.monotonic() - t
    env, teardown = open_env(spec, want_switch, progress)
    placement = None
    if env.layout is not None:
        lay = env.layout
        placement = {"mappers": [{"host": h.name, "switch": h.switch} for h in lay.mappers],
                     "reducers": [{"host": h.name, "switch": h.switch} for h in lay.reducers], "aggregation": lay.agg,
                     "path": [n for n, _ in lay.path]}
    runs: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="wordcount-") as tmp:
            os.chmod(tmp, 0o755)
            for i, m in enumerate(order):
                per_mode = spec.mappers + spec.reducers
                step = (lambda k, i=i: steps(i * per_mode + k, len(order) * per_mode)) if steps else None
                runs[m] = run_mode(spec, m, env, ref, Path(tmp), progress, tree_base=1 + 100 * i, step=step)
    finally:
        progress("taking the rack down")
        teardown()
    primary = "switch" if want_switch else order[0] if len(order) == 1 else order[-1]
    oversized = 0
    limits = [r["max_key_len"] for r in runs.values() if "max_key_len" in r]
    if limits:
        oversized = sum(1 for k in ref if len(k) > limits[0])
        notes.append(f"{oversized:,} distinct words longer than {spec.program}'s longest key ({limits[0]:,} bytes) went "
                     "from mapper to reducer over TCP (the side channel; its bytes and segments count as the reducer's)")
    doc: dict[str, Any] = {
        "input": spec.input_summary(),
        "words": sum(ref.values()),
        "distinct_words": len(ref),
        "long_keys": sum(1 for k in ref if len(k) > 16),
        "oversized_keys": oversized,
        "mappers": spec.mappers,
        "reducers": spec.reducers,
        "program": spec.program if want_switch else None,
        "loss": spec.loss,
        "combiner": spec.combiner,
        "where": env.kind,
        "fabric": spec.fabric,
        "placement": placement,
        "reference_s": round(ref_s, 3),
        "mode": primary if len(order) == 1 or want_switch else "all",
        "correct": all(r["correct"] for r in runs.values()),
        "runs": runs,
        "notes": notes + env.notes,
    }
    for k in FIGURES[1:]:
        doc[k] = runs[primary][k]
    restarts = [r for run in runs.values() for r in run.get("switch_restarts", [])]
    doc["switch_restarts"] = restarts
    for m, r in runs.items():
        if r.get("restart_note"):
            doc["notes"].append(f"{m}: {r['restart_note']}")
    if want_switch:
        if "switches" in runs["switch"]:
            doc["switches"] = runs["switch"]["switches"]
        doc["fallback"] = runs["switch"]["fallback"]
        doc["baseline_udp"] = {k: runs["udp"][k] for k in FIGURES}
        doc["reduction"] = _reduction(runs["switch"]["reducer_bytes"], runs["udp"]["reducer_bytes"])
        doc["packet_reduction_vs_udp"] = _reduction(runs["switch"]["reducer_packets"], runs["udp"]["reducer_packets"])
        doc["cpu_reduction_vs_udp"] = _reduction(runs["switch"]["reducer_cpu_s"], runs["udp"]["reducer_cpu_s"])
        if "tcp" in runs:
            doc["baseline_tcp"] = {k: runs["tcp"][k] for k in FIGURES}
            doc["reduction_vs_tcp"] = _reduction(runs["switch"]["reducer_bytes"], runs["tcp"]["reducer_bytes"])
            doc["packet_reduction_vs_tcp"] = _reduction(runs["switch"]["reducer_packets"], runs["tcp"]["reducer_packets"])
            doc["cpu_reduction_vs_tcp"] = _reduction(runs["switch"]["reducer_cpu_s"], runs["tcp"]["reducer_cpu_s"])
    return doc
