"""`inswitch bench fabric`: what a fabric of switch processes costs on this machine.

Per topology: time to bring it up and take it down, peak resident memory of each switch
process (VmHWM), all-pairs ping (how many pairs answer, how long the sweep takes). On the
leaf-spine fabric also UDP throughput (iperf3, receiver side) from a host to one on its own
leaf (one switch) and to one on another leaf (three switches: leaf, spine, leaf), in the
same run: `hop3_over_hop1`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from inswitch.topology import netns
from inswitch.topology.fabric.fabric import Fabric, FabricState
from inswitch.topology.state import process_tag

DEFAULT_SPECS = ("leaf-spine:4,2,4", "fat-tree:4")


def peak_rss_mb(pid: int | None) -> float:
    """A process's peak resident set (VmHWM), MB; 0 if it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def memory_mb(pid: int | None) -> dict[str, float]:
    """A process's memory now, MB: anonymous and file-backed resident pages (the AF_PACKET
    rings are file-backed, as are the shared libraries) and its proportional share (PSS:
    pages shared with the other switches, e.g. libraries, divided among them)."""
    out: dict[str, float] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(("RssAnon:", "RssFile:")):
                out[line.split(":")[0].lower()] = int(line.split()[1]) / 1024
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                out["pss"] = int(line.split()[1]) / 1024
    except OSError:
        pass
    return out


def all_pairs(st: FabricState) -> tuple[int, int, float]:
    """(pairs answering, pairs, seconds) for one echo between every ordered host pair."""
    pairs = [(a, b) for a in st.hosts for b in st.hosts if a.name != b.name]

    def one(p: Any) -> bool:
        a, b = p
        cp = subprocess.run(netns.netns_argv(a.netns, ["ping", "-n", "-c", "1", "-W", "3", b.ip]),
                            capture_output=True, text=True, timeout=30)
        return cp.returncode == 0

    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=16) as ex:
        ok = sum(ex.map(one, pairs))
    return ok, len(pairs), time.monotonic() - t0


def udp_mbit(st: FabricState, src: str, dst: str, seconds: float) -> float:
    """iperf3 UDP (1400-byte datagrams, offered 2 Gbit/s) from `src` to `dst`: Mbit/s
    received."""
    s, d = st.host(src), st.host(dst)
    server = subprocess.Popen(netns.netns_argv(d.netns, ["iperf3", "-s", "-1", "-p", "5201"]),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        cp = subprocess.run(netns.netns_argv(s.netns, ["iperf3", "-c", d.ip, "-p", "5201", "-u", "-b", "2G", "-l", "1400",
                                                     "-t", f"{seconds:g}", "-J"]),
                            capture_output=True, text=True, timeout=seconds + 30)
        end = json.loads(cp.stdout)["end"]
        # What the receiver got: iperf3 >= 3.10 reports it as sum_received; older ones only
        # the sent rate and the loss.
        if "sum_received" in end:
            return float(end["sum_received"]["bits_per_second"]) / 1e6
        return float(end["sum"]["bits_per_second"]) / 1e6 * (1 - float(end["sum"].get("lost_percent", 0)) / 100)
    finally:
        server.kill()
        server.wait()


def measure(spec: str, name: str, progress: Callable[[str], None], udp_s: float) -> dict[str, Any]:
    fab = Fabric()
    fab.down(name)  # a leftover of an interrupted run of ours (the name carries our pid)
    progress(f"{spec}: up")
    t0 = time.monotonic()
    try:
        st = fab.up(spec, name=name)
        up_s = time.monotonic() - t0
        rss = [peak_rss_mb(s.pid) for s in st.switches]
        mem = [memory_mb(s.pid) for s in st.switches]
        progress(f"{spec}: all-pairs ping")
        ok, total, ping_s = all_pairs(st)
        out: dict[str, Any] = {
            "switches": len(st.switches), "hosts": len(st.hosts), "links": len(st.links),
            "up_s": round(up_s, 3), "up_phases_s": {k: round(v, 3) for k, v in st.timings.items()},
            "switch_rss_mb": round(max(rss), 1), "switch_rss_mb_mean": round(sum(rss) / len(rss), 1),
            "switch_pss_mb_mean": round(sum(m.get("pss", 0) for m in mem) / len(mem), 1),
            "switch_rss_anon_mb_mean": round(sum(m.get("rssanon", 0) for m in mem) / len(mem), 1),
            "switch_rss_file_mb_mean": round(sum(m.get("rssfile", 0) for m in mem) / len(mem), 1),
            "pairs_ok": ok, "pairs": total, "ping_all_pairs_s": round(ping_s, 2),
        }
        if spec.startswith("leaf-spine") and shutil.which("iperf3"):
            progress(f"{spec}: UDP, 1 and 3 switches")
            same = next(h for h in st.hosts[1:] if h.switch == st.hosts[0].switch)
            far = next(h for h in st.hosts if h.switch != st.hosts[0].switch)
            one = udp_mbit(st, st.hosts[0].name, same.name, udp_s)
            three = udp_mbit(st, st.hosts[0].name, far.name, udp_s)
            out.update({"udp_hop1_mbit": round(one, 1), "udp_hop3_mbit": round(three, 1),
                        "hop3_over_hop1": round(three / one, 3) if one else None})
    finally:
        progress(f"{spec}: down")
        t1 = time.monotonic()
        fab.down(name)
        down_s = time.monotonic() - t1
    out["down_s"] = round(down_s, 3)
    return out


def run(specs: tuple[str, ...] = DEFAULT_SPECS, udp_s: float = 3.0,
        progress: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    tag = process_tag()[-3:]
    res: dict[str, Any] = {"topologies": {}}
    for i, spec in enumerate(specs):
        res["topologies"][spec] = measure(spec, f"b{tag}{i}", progress, udp_s)
    hops = [t["hop3_over_hop1"] for t in res["topologies"].values() if t.get("hop3_over_hop1") is not None]
    res["hop3_over_hop1"] = hops[0] if hops else None
    for key in ("up_s", "down_s", "switch_rss_mb"):
        res[key] = max(t[key] for t in res["topologies"].values())
    res["pairs_ok"] = all(t["pairs_ok"] == t["pairs"] for t in res["topologies"].values())
    return res
