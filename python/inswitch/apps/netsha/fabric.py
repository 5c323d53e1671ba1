"""`inswitch search --rack --fabric SPEC`: NetSHa across switches (§3.8, Fig. 8). The search
servers are on hosts under several leaves of a fabric, the agent under another leaf; every
switch runs `forward,netsha`, and the answers are reduced on every switch of their path
(the servers' leaf, the spine, the agent's leaf), each switch on its own: its registers,
its QID bookkeeping (r.k, r.T) and its timers are its own, the QIDs are the agent's.

Why no coordination is needed (the paper's "switches do not need to negotiate"): in exact
mode a switch drops an answer only once it has sent K answers of that query no farther
than it (r.k >= K, distance >= r.T). Those K travel on to the agent, or a switch closer to
the agent drops one of them, which it does only once it has itself sent K answers no
farther; by induction on the switches' distance to the agent, K answers no farther than
any dropped one reach the agent, so the agent's top K is the top K of everything the
servers sent. A downstream switch re-reducing an upstream switch's output is this same
rule applied to its input, whatever came before: no per-switch QID space or K split.

Placement: the agent is the first host of the last leaf; the servers are dealt round-robin
over the other leaves' hosts, and only when those are taken onto the agent leaf's others.

The controller, on every switch (one P4Runtime client each, the fabric controller's
election id): the `agent` entry (the port towards the agent and the next hop's MAC: the
next switch's router MAC, or the agent's own on its leaf) for the timers' packets; the
split's clone session; and two L2 entries the path needs because NetSHa recirculates a
packet once per answer and the base program runs again on each pass: after the first
pass routed a packet its destination MAC is the next switch's, so each switch forwards its
neighbours' router MACs to them (`l2_dmac`), and knows its own and the timer packets'
source MACs (`l2_smac`, no learning digests). Which switches reduce is the `role` entry
(`reduce` or `forward_only`): one fabric, three measurements in one run:

- `fabric`: every switch reduces;
- `one_switch`: only the agent's leaf reduces, the others forward;
- `none`: every switch forwards only (the answers reach the agent as the servers sent them).

Server selection (§4) is the agent's leaf's: the agent broadcasts each query packet in its
subnet, the leaf looks its keys up in the selection tables, multicasts it to the query
group (server i on the port towards it, replica id i), egress prunes the servers not
selected and addresses each remaining replica to its server (`server_addr`: next hop MAC,
the leaf's MAC, the server's IP, ToS bit clear), so the next switches route it as ordinary
UDP and do not select again. Selection happens in every measurement (`role` is about
answers only). The servers, their answers and the agent's loss recovery are those of
`--rack` (`rack_node`).
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from inswitch import procs

from .controller import SDN_PORT_RECIRCULATE, SELECT_GROUP, SPLIT_SESSION, install_selection_p4rt, selection_entries, table_size
from .datasets import Dataset, exact_knn
from .rack import rack_program, server_totals
from .search import SearchConfig, build_cluster, recall_f1, top_k_per_query

#: The three measurements, in the order they run.
FABRIC_MODES = ("fabric", "one_switch", "none")
#: Source MAC of the netsha program's timer packets (`programs::netsha::timer_template`).
TIMER_MAC = "02:00:00:00:00:fe"
AGENT_PORT = 7001


class FabricSearchError(RuntimeError):
    pass


@dataclass
class Layout:
    agent: Any  # HostPlan
    servers: list[Any]  # HostPlan
    #: switch name -> (port towards the agent, next hop's MAC) along a shortest path
    towards_agent: dict[str, tuple[int, str]]
    #: server leaf -> the switches from it to the agent's leaf
    paths: dict[str, list[str]]
    #: server i -> (the agent leaf's port towards it, the next hop's MAC: the next
    #: switch's router MAC, or the server's own under the agent's leaf)
    to_server: list[tuple[int, str]]


def place(topo: Any, hosts: list[Any], servers: int, switch_macs: dict[str, str]) -> Layout:
    from inswitch.apps.wordcount.fabric import _neighbour_ports, _path

    leaves: list[str] = []
    for h in hosts:
        if h.switch not in leaves:
            leaves.append(h.switch)
    if len(leaves) < 2:
        raise FabricSearchError("--fabric: the agent and the servers need hosts under at least two leaves")
    if servers + 1 > len(hosts):
        raise FabricSearchError(f"the fabric has {len(hosts)} hosts: at most {len(hosts) - 1} servers (--servers {servers})")
    root = leaves[-1]
    under = {lf: [h for h in hosts if h.switch == lf] for lf in leaves}
    agent = under[root][0]
    chosen: list[Any] = []
    i = 0
    while len(chosen) < min(servers, len(hosts) - len(under[root])):
        for lf in leaves[:-1]:
            if i < len(under[lf]) and len(chosen) < servers:
                chosen.append(under[lf][i])
        i += 1
    chosen += under[root][1 : 1 + servers - len(chosen)]
    towards: dict[str, tuple[int, str]] = {root: (agent.port, agent.mac)}
    for sw in topo.switches:
        if sw.name == root:
            continue
        path = _path(topo, sw.name, root)
        nxt = path[1][0]
        towards[sw.name] = (_neighbour_ports(topo, sw.name)[nxt], switch_macs[nxt])
    paths = {lf: [n for n, _ in _path(topo, lf, root)] for lf in sorted({h.switch for h in chosen}, key=leaves.index)}
    # From the agent's leaf (which selects the servers of each query) to each server.
    to_server: list[tuple[int, str]] = []
    for h in chosen:
        if h.switch == root:
            to_server.append((h.port, h.mac))
        else:
            way = _path(topo, root, h.switch)
            to_server.append((way[0][1], switch_macs[way[1][0]]))
    return Layout(agent, chosen, towards, paths, to_server)


def _connect(run: Any) -> Any:
    from inswitch.topology import control
    from inswitch.topology.fabric.controller import ELECTION_ID

    return control.connect(run.p4runtime, device_id=run.plan.device_id, election_id=ELECTION_ID, wait_s=10.0)


def configure_switch(run: Any, topo: Any, lay: Layout, switch_macs: dict[str, str], selection: dict[tuple[int, int], int]) -> None:
    """One switch's NetSHa entries and the path's L2 entries (see the module doc); on the
    agent's leaf also the server selection: its tables, the query group (server i on the
    port towards it, replica id i) and each replica's addresses (`server_addr`)."""
    import socket

    from inswitch.apps.wordcount.fabric import _mac_int, _neighbour_ports

    name = run.plan.name
    port, mac = lay.towards_agent[name]
    ip = int.from_bytes(socket.inet_aton(lay.agent.ip), "big")
    neighbours = {n: p for n, p in _neighbour_ports(topo, name).items() if n in switch_macs}
    with _connect(run) as c:
        have = {_mac_int(e["match"]["hdr.ethernet.dst_addr"]) for e in c.read_entries("l2_dmac")}
        seen = {_mac_int(e["match"]["hdr.ethernet.src_addr"]) for e in c.read_entries("l2_smac")}
        with c.batch():
            c.insert_entry("agent", {"meta.zero": 0}, "to_agent", {"port": port, "dmac": _mac_int(mac), "dip": ip, "dport": AGENT_PORT})
            for n, p in neighbours.items():
                if _mac_int(switch_macs[n]) not in have:
                    c.insert_entry("l2_dmac", {"hdr.ethernet.dst_addr": switch_macs[n]}, "l2_forward", {"port": p})
            for m in (switch_macs[name], TIMER_MAC):
                if _mac_int(m) not in seen:
                    c.insert_entry("l2_smac", {"hdr.ethernet.src_addr": m}, "nop", {})
        c.set_clone_session(SPLIT_SESSION, [SDN_PORT_RECIRCULATE])
        if name == lay.agent.switch:
            c.set_multicast_group(SELECT_GROUP, [(p, i) for i, (p, _) in enumerate(lay.to_server)])
            with c.batch():
                for i, ((_, nh), h) in enumerate(zip(lay.to_server, lay.servers)):
                    c.insert_entry("server_addr", {"eg_intr_md.rid": i}, "to_server",
                                   {"dmac": _mac_int(nh), "smac": _mac_int(switch_macs[name]), "dip": int.from_bytes(socket.inet_aton(h.ip), "big")})
                install_selection_p4rt(c, selection)


def set_roles(runs: list[Any], reducing: set[str], first: bool) -> None:
    """Each switch's `role` entry: `reduce` on the switches in `reducing`, else `forward_only`."""
    for run in runs:
        action = "reduce" if run.plan.name in reducing else "forward_only"
        with _connect(run) as c:
            (c.insert_entry if first else c.modify_entry)("role", {"meta.zero": 0}, action, {})


def read_events(runs: list[Any]) -> dict[str, dict[str, int]]:
    """Per switch: answers it inserted and dropped by the threshold (`answer_events`),
    answers its registers sent on and cleared unsent (the two halves of `emit_events`), and
    the query packets it selected servers for and the copies it sent (`query_events`)."""
    out: dict[str, dict[str, int]] = {}
    for run in runs:
        with _connect(run) as c:
            ae = dict(c.read_register("answer_events"))
            ee = dict(c.read_register("emit_events"))
            qe = dict(c.read_register("query_events"))
        out[run.plan.name] = {"inserted": int(ae.get(0, 0)), "dropped_by_threshold": int(ae.get(1, 0)),
                              "sent": int(sum((v & 0xFFFFFFFF) for v in ee.values())),
                              "cleared": int(sum((v >> 32) for v in ee.values())),
                              "queries_selected": int(sum((v & 0xFFFFFFFF) for v in qe.values())),
                              "query_copies": int(sum((v >> 32) for v in qe.values()))}
    return out


def _delta(a: dict[str, dict[str, int]], b: dict[str, dict[str, int]], restarted: set[str]) -> dict[str, dict[str, Any]]:
    """The counts of each switch over one measurement; a switch restarted meanwhile counts
    from its restart (`restarted`: its counters started again from 0)."""
    out: dict[str, dict[str, Any]] = {}
    for sw, after in b.items():
        d = {k: v - a.get(sw, {}).get(k, 0) for k, v in after.items()}
        out[sw] = {**after, "restarted": True} if sw in restarted or any(v < 0 for v in d.values()) else d
    return out


def run_fabric_search(ds: Dataset, cfg: SearchConfig, spec: str, name: str = "netsha",
                      progress: Optional[Callable[[str], None]] = None) -> dict[str, Any]:
    """The three measurements on one fabric (taken down at the end, whatever happens); the
    JSON `inswitch search --rack --fabric` writes."""
    from inswitch.topology import netns, restarts
    from inswitch.topology.errors import RackError
    from inswitch.topology.fabric.fabric import Fabric
    from inswitch.topology.fabric.generators import load_spec

    from .rack_node import expected_servers

    say = progress or (lambda _m: None)
    cluster = build_cluster(ds, cfg, ternary=True)
    try:
        program, per = rack_program(cfg, cluster)
    except ValueError as e:
        raise FabricSearchError(str(e).replace("--rack", "--fabric")) from None
    try:
        topo = load_spec(spec)
    except RackError as e:
        raise FabricSearchError(str(e)) from None
    for n in topo.switches:
        n.program = f"forward,{program}"
    if len(topo.machine_names) > 1:
        raise FabricSearchError("--fabric: a topology on one machine (the servers and the agent run here)")
    # What `place` will refuse, before the fabric is built.
    hosts = {n.name for n in topo.hosts}
    leaves = {e.node for ln in topo.links for e, o in ((ln.a, ln.b), (ln.b, ln.a)) if o.node in hosts}
    if len(leaves) < 2:
        raise FabricSearchError("--fabric: the agent and the servers need hosts under at least two leaves")
    if cfg.servers + 1 > len(hosts):
        raise FabricSearchError(f"the fabric has {len(hosts)} hosts: at most {len(hosts) - 1} servers (--servers {cfg.servers})")
    truth = exact_knn(ds.base, ds.queries, cfg.k)
    nq = ds.queries.shape[0]
    qkeys = cluster.fam.keys(cluster.fam.project(ds.queries))
    py = sys.executable
    fab = Fabric()
    fab.down(name)
    say(f"fabric {spec}: {len(topo.switches)} switches, each forward,{program}")
    t_up = time.monotonic()
    results: dict[str, dict[str, Any]] = {}
    try:
        try:
            st = fab.up(topo, name=name)
        except RackError as e:
            raise FabricSearchError(str(e)) from None
        up_s = time.monotonic() - t_up
        macs = {r.plan.name: r.plan.mac for r in st.switches}
        lay = place(topo, st.hosts, cfg.servers, macs)
        say(f"controller: NetSHa entries on {len(st.switches)} switches")
        for run in st.switches:
            configure_switch(run, topo, lay, macs, cluster.selection)
        agent_leaf = lay.agent.switch
        reducing = {"fabric": {r.plan.name for r in st.switches}, "one_switch": {agent_leaf}, "none": set()}
        current = {"mode": FABRIC_MODES[0]}
        runs = {r.plan.name: r for r in st.switches}

        # A switch the supervisor restarted has its routing back, and nothing of NetSHa:
        # the controller installs its entries and its role in the current measurement
        # again (the agent, given the restarts file, asks again once it forwards).
        def on_back(rec: dict[str, Any]) -> None:
            run = runs.get(str(rec.get("switch")))
            if run is not None:
                configure_switch(run, topo, lay, macs, cluster.selection)
                set_roles([run], reducing[current["mode"]], first=True)

        t_start = time.time()
        watcher = restarts.Watcher(st.restarts_file, on_back)
        with watcher, tempfile.TemporaryDirectory() as tmp:
            t = Path(tmp)
            conf = json.dumps({"tables": cfg.tables, "hashes": cfg.hashes, "width": cfg.width, "seed": cfg.seed, "delta": cfg.delta, "cap": cfg.cap, "k": cfg.k})
            for s, idx in enumerate(cluster.indexes):
                np.savez(t / f"shard{s}.npz", data=idx.data, ids=idx.ids)
            np.savez(t / "queries.npz", vectors=ds.queries.astype(np.float32), keys=qkeys.astype(np.int64))
            sel_t, sel_k, sel_b = selection_entries(cluster.selection)
            np.savez(t / "selection.npz", tables=sel_t, keys=sel_k, bitmaps=sel_b)
            for i, mode in enumerate(FABRIC_MODES):
                current["mode"] = mode
                set_roles(st.switches, reducing[mode], first=i == 0)
                say(f"{mode}: {len(reducing[mode])} of {len(st.switches)} switches reduce; {nq} queries")
                t_mode = time.time()
                before = read_events(st.switches)
                results[mode] = _one_mode(t, py, conf, per, cfg, lay, netns, st.restarts_file)
                restarted = {str(r["switch"]) for r in restarts.read(st.restarts_file, t_mode)}
                results[mode]["switches"] = _delta(before, read_events(st.switches), restarted)
                results[mode]["reducing_switches"] = sorted(reducing[mode])
                # Every register's timer has fired (10 ms + 100 × 100 µs) before the next mode.
                time.sleep(0.2)
        recs = restarts.read(st.restarts_file, t_start)
    finally:
        fab.down(name)
    sel_servers = [expected_servers(cluster.selection, qkeys[q], cfg.servers) for q in range(nq)]
    modes: dict[str, Any] = {}
    for mode, res in results.items():
        ans = np.array(res["answers"], dtype=np.float64).reshape(-1, 3)
        got_i, got_d = top_k_per_query(nq, ans[:, 0].astype(np.int64), ans[:, 1].astype(np.int64), ans[:, 2], cfg.k)
        rec, f1 = recall_f1(got_i, got_d, truth[0], truth[1], cfg.k)
        modes[mode] = {
            "recall": rec,
            "f1": f1,
            "agent_packets": int(res["packets"]),
            "agent_answers": int(len(ans)),
            "server_packets": int(res["server_packets"]),
            "total_s": float(res["seconds"]),
            "answers_per_packet": per,
            "server_selection": f"switch ({agent_leaf}: query packets, selection tables; replicas addressed to their servers)",
            "path": f"fabric {spec}: servers under {', '.join(lay.paths)}, agent under {agent_leaf}",
            "reducing_switches": res["reducing_switches"],
            "switches": res["switches"],
            "topk_distances": [d.tolist() for d in got_d],
            "retried_queries": int(res.get("retried_queries", 0)),
            # Of `agent_packets`, those that came after every query was complete.
            "late_packets": int(res.get("late_packets", 0)),
            "recovery": {**res.get("recovery", {}), "server_reports": int(res["server_reports"]),
                         "server_direct_answers": int(res["server_direct_answers"])},
            # Restarts of any switch during the whole run (all three measurements).
            "switch_restarts": recs,
            "reinstalled_generations": sorted(watcher.handled),
            **({"reinstall_errors": list(watcher.errors)} if watcher.errors else {}),
        }
    ref = modes.get("none")
    for mode, m in modes.items():
        if ref is not None:
            m["topk_equal_to_none"] = all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(m["topk_distances"], ref["topk_distances"]))
    return {
        "dataset": ds.name,
        "base": int(ds.base.shape[0]),
        "queries": nq,
        "config": {**cfg.__dict__},
        "fabric": {
            "spec": spec,
            "name": name,
            "switches": [r.plan.name for r in st.switches],
            "agent": {"host": lay.agent.name, "leaf": agent_leaf},
            "servers": [{"host": h.name, "leaf": h.switch} for h in lay.servers],
            "paths": lay.paths,
            "up_s": round(up_s, 2),
            "selected_servers_per_query": float(np.mean([bin(b).count("1") for b in sel_servers])) if nq else 0.0,
        },
        "modes": modes,
        "agent_packets": {m: modes[m]["agent_packets"] for m in modes},
        "recall": {m: modes[m]["recall"] for m in modes},
    }


def _one_mode(t: Path, py: str, conf: str, per: int, cfg: SearchConfig, lay: Layout, netns: Any, restarts_file: Path) -> dict[str, Any]:
    """The servers (started afresh) and the agent for one measurement."""
    servers: list[subprocess.Popen[str]] = []
    try:
        for s, h in enumerate(lay.servers):
            cmd = [py, "-m", "inswitch.apps.netsha.rack_node", "server", str(t / f"shard{s}.npz"), lay.agent.ip, str(AGENT_PORT), conf,
                   "--per", str(per), "--index", str(s), "--idle", "3"]
            servers.append(subprocess.Popen(netns.netns_argv(h.netns, cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        for p in servers:
            line = procs.first_line(p)
            if line != "READY":
                raise FabricSearchError(f"a server did not start: {line!r} {p.stderr.read() if p.stderr else ''}")
        bcast = str(ipaddress.IPv4Interface(f"{lay.agent.ip}/{lay.agent.prefix_len}").network.broadcast_address)
        cmd = [py, "-m", "inswitch.apps.netsha.rack_node", "agent", str(t / "queries.npz"), bcast, "--stop-servers", "--drain-after", "0.5",
               "--concurrency", str(cfg.concurrency), "--k", str(cfg.k), "--selection", str(t / "selection.npz"),
               "--server-ips", ",".join(h.ip for h in lay.servers), "--rounds", str(cfg.recovery_rounds), "--rack-state", str(restarts_file)]
        cp = subprocess.run(netns.netns_argv(lay.agent.netns, cmd), capture_output=True, text=True, timeout=600)
        if cp.returncode != 0:
            raise FabricSearchError(f"agent failed: {cp.stderr[-2000:]}")
        res = json.loads(cp.stdout.strip().splitlines()[-1])
        sent, reports, direct = server_totals(servers)
        res.update(server_packets=sent, server_reports=reports, server_direct_answers=direct)
        return dict(res)
    finally:
        for p in servers:
            if p.poll() is None:
                p.kill()
                p.wait()
