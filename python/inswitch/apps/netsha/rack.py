"""`inswitch search --rack`: NetSHa with real processes in a namespace rack. S server
processes hold their shards and run the TLSH-style index, an agent process sends query
packets and merges the answers, and the switch process (`switchd` running `forward,netsha`)
selects the servers per query (§4) and reduces and aggregates their answers (§3). The
controller (`controller.configure_p4rt`) installs the agent entry, the split clone
session, the query group and the selection entries from the servers' bucket directories."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from inswitch import _native, procs

from .controller import configure_p4rt, selection_entries, table_size
from .datasets import Dataset, exact_knn
from .search import SWITCH_CONFIGS, SWITCH_LABELS, SWITCH_PROGRAMS, Cluster, SearchConfig, build_cluster, recall_f1, top_k_per_query
from inswitch.topology.switchproc import free_local_port


def server_totals(servers: list[subprocess.Popen[str]]) -> tuple[int, int, int]:
    """Wait for the search servers' last lines: packets sent, loss reports answered and
    queries answered directly, summed over the servers."""
    sent = reports = direct = 0
    for p in servers:
        out, _ = p.communicate(timeout=60)
        done = json.loads(out.strip().splitlines()[-1])
        sent += done["packets"]
        reports += done.get("reports", 0)
        direct += done.get("direct_served", 0)
    return sent, reports, direct


def rack_program(cfg: SearchConfig, cluster: Cluster) -> tuple[str, int]:
    """The program a rack's (or fabric's) switches load for `cfg` and the answers per
    server packet; ValueError when `cfg` asks for what that program is not.

    The switch process loads programs by name: `netsha` is the configuration that fits
    tofino1 (100 registers, 6 slots, p = 4, 256-byte parse), `netsha-unbounded` Table 1's
    (12 slots, p = 8, 1,514 bytes); both K = 50, L = 10 selection tables of 4,096 entries,
    10 ms timers. Their top 50 contains the agent's top K for any K <= 50."""
    # A fixed r.T (no phase-2 tightening) is a parameter of the same program (`;`: the
    # program list itself is comma-separated).
    spec = SWITCH_PROGRAMS[cfg.switch_config] + ("" if cfg.tighten else ":tighten=0")
    if cfg.tables != 10 or cfg.k > 50 or table_size(cluster.selection, cfg.tables) > 4096 or cfg.servers > 32:
        raise ValueError(f"--rack runs the `{spec}` program as declared: L = 10 tables (--tables 10), K <= 50, at most 4,096 buckets per table, at most 32 servers")
    if (cfg.slots, cfg.ga, cfg.conds, cfg.depth) != tuple(SWITCH_CONFIGS[cfg.switch_config][k] for k in ("slots", "ga", "conds", "depth")):
        raise ValueError(f"--rack runs the `{spec}` program as declared: no --slots, --ga or --conds other than --switch-config {cfg.switch_config}'s")
    # Full server packets are as long as the switch parses (120 answers at most, §3.3).
    full = min(_native.netsha_answers_per_packet(spec), 120)
    return spec, min(cfg.per_packet, full) if cfg.per_packet else full


def run_rack_search(ds: Dataset, cfg: SearchConfig, name: str = "netsha", progress: Optional[Callable[[str], None]] = None,
                    pcap: Optional[str] = None, fault: Optional[str] = None) -> dict[str, Any]:
    """NetSHa through a rack of real processes; the JSON `inswitch search --rack` writes
    (mode `netsha-rack`). Needs root (network namespaces). The rack is always taken down."""
    from inswitch.topology import Rack, control, netns, restarts

    say = progress or (lambda _m: None)
    cluster = build_cluster(ds, cfg, ternary=True)
    spec, per = rack_program(cfg, cluster)
    truth = exact_knn(ds.base, ds.queries, cfg.k)
    rack = Rack()
    py = sys.executable
    servers: list[subprocess.Popen[str]] = []
    try:
        say(f"rack {name}: 1 agent + {cfg.servers} servers, switch `forward,{spec}`")
        st = rack.up(cfg.servers + 1, name=name, programs=f"forward,{spec}", p4runtime=f"127.0.0.1:{free_local_port()}", metrics=f"127.0.0.1:{free_local_port()}",
                     pcap=pcap, fault=fault)
        agent, hosts = st.hosts[0], st.hosts[1:]
        mac = int(agent.mac.replace(":", ""), 16)
        ip = int.from_bytes(socket.inet_aton(agent.ip), "big")
        say(f"controller: {len(cluster.selection)} selection entries")
        def configure(_restart: object = None) -> None:
            with control.connect(st.switch.p4runtime) as c:
                configure_p4rt(c, (agent.port, mac, ip, 7001), [h.port for h in hosts], cluster.selection)

        configure()
        state_file = Path(st.state_dir) / "state.json"
        t_start = time.time()
        # A restarted switch has no NetSHa state: the controller installs it again (queries
        # flood to every server meanwhile, which the answers survive) and the agent retries.
        watcher = restarts.Watcher(state_file, configure)
        with watcher, tempfile.TemporaryDirectory() as tmp:
            t = Path(tmp)
            conf = json.dumps({"tables": cfg.tables, "hashes": cfg.hashes, "width": cfg.width, "seed": cfg.seed, "delta": cfg.delta, "cap": cfg.cap, "k": cfg.k})
            for s, (h, idx) in enumerate(zip(hosts, cluster.indexes)):
                np.savez(t / f"shard{s}.npz", data=idx.data, ids=idx.ids)
                cmd = [py, "-m", "inswitch.apps.netsha.rack_node", "server", str(t / f"shard{s}.npz"), agent.ip, "7001", conf, "--per", str(per), "--index", str(s)]
                servers.append(subprocess.Popen(netns.netns_argv(h.netns, cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
            for p in servers:
                assert p.stdout is not None
                line = procs.first_line(p)
                if line != "READY":
                    raise RuntimeError(f"a server did not start: {line!r} {p.stderr.read() if p.stderr else ''}")
            qkeys = cluster.fam.keys(cluster.fam.project(ds.queries))
            np.savez(t / "queries.npz", vectors=ds.queries.astype(np.float32), keys=qkeys.astype(np.int64))
            # The agent waits for the reports of the servers the switch selects, from the
            # bucket directories the controller installed (loss recovery, rack_node).
            sel_t, sel_k, sel_b = selection_entries(cluster.selection)
            np.savez(t / "selection.npz", tables=sel_t, keys=sel_k, bitmaps=sel_b)
            bcast = str(_broadcast(agent.ip, hosts[0].ip))
            say(f"agent: {ds.queries.shape[0]} queries to {bcast}:7000")
            cmd = [py, "-m", "inswitch.apps.netsha.rack_node", "agent", str(t / "queries.npz"), bcast, "--concurrency", str(cfg.concurrency),
                   "--rack-state", str(state_file), "--k", str(cfg.k), "--selection", str(t / "selection.npz"),
                   "--server-ips", ",".join(h.ip for h in hosts), "--rounds", str(cfg.recovery_rounds)]
            cp = subprocess.run(netns.netns_argv(agent.netns, cmd), capture_output=True, text=True, timeout=600)
            if cp.returncode != 0:
                raise RuntimeError(f"agent failed: {cp.stderr[-2000:]}")
            res = json.loads(cp.stdout.strip().splitlines()[-1])
        sent, reports, direct_served = server_totals(servers)
        recs = restarts.read(state_file, t_start)
    finally:
        for p in servers:
            if p.poll() is None:
                p.kill()
                p.wait()
        rack.down(name)
    ans = np.array(res["answers"], dtype=np.float64).reshape(-1, 3)
    nq = ds.queries.shape[0]
    got_i, got_d = top_k_per_query(nq, ans[:, 0].astype(np.int64), ans[:, 1].astype(np.int64), ans[:, 2], cfg.k)
    rec, f1 = recall_f1(got_i, got_d, truth[0], truth[1], cfg.k)
    return {
        "dataset": ds.name,
        "base": int(ds.base.shape[0]),
        "queries": nq,
        "config": {**cfg.__dict__},
        "switch": SWITCH_LABELS[cfg.switch_config],
        "program": spec,
        "modes": {
            "netsha-rack": {
                "recall": rec,
                "f1": f1,
                "agent_packets": int(res["packets"]),
                "agent_answers": int(len(ans)),
                "server_packets": int(sent),
                "total_s": float(res["seconds"]),
                "answers_per_packet": per,
                "server_selection": "switch (query packets, selection tables), switchd",
                "path": "rack of real processes through the switch process",
                "topk_distances": [d.tolist() for d in got_d],
                "switch_restarts": recs,
                "retried_queries": int(res.get("retried_queries", 0)),
                # Loss recovery: queries found incomplete after the first pass, asked again
                # through the switch, completed by asking their servers directly, and the
                # servers' completion reports (plain UDP, one per server per query asked).
                "recovery": {**res.get("recovery", {}), "server_reports": int(reports), "server_direct_answers": int(direct_served)},
                "reinstalled_generations": sorted(watcher.handled),
                **({"restart_note": _restart_note(recs, int(res.get("retried_queries", 0)), watcher.errors)} if recs else {}),
            }
        },
    }


def _restart_note(recs: list[dict[str, Any]], retried: int, errors: list[str]) -> str:
    parts = [f"the switch died ({r['exit']}) and was forwarding again {r.get('recovery_s', '?')} s later "
             f"(generation {r['generation']})" for r in recs]
    return ("; ".join(parts) + f"; the controller installed NetSHa's tables again and the agent retried {retried} queries"
            + (f"; re-install errors: {'; '.join(errors)}" if errors else ""))


def _broadcast(a: str, b: str) -> str:
    """The /24 broadcast address of the rack's subnet (the hosts share it)."""
    pa, pb = a.split("."), b.split(".")
    if pa[:3] != pb[:3]:
        raise RuntimeError(f"agent {a} and server {b} are not on one /24")
    return ".".join(pa[:3] + ["255"])


def rack_available() -> bool:
    return os.geteuid() == 0
