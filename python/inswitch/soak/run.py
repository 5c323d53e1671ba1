"""`inswitch soak`: the four workloads at once for a while, under the switch's own fault
injection (loss, duplication and reordering on every port), with one `kill -9` of the KV
rack's switch in the middle (its supervisor restarts it); every round checked, the switch's
resident memory and file descriptors sampled, and the teardown verified.

Each workload runs in a process of its own (`soak.worker`) that loops rounds until the
deadline. The KV workload's rack is up for the whole soak (its switch, the Redis servers
and storage agents are the long-lived processes measured); WordCount, NetSHa and INaaS
build their rack per round, as their commands do, under the same faults. Racks are named
`sk<pid tag><workload>`, so the teardown check looks for that prefix only. Why these
choices: docs/soak.md."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from inswitch.soak.workloads import WORKLOADS

SHORT = {"wordcount": "wc", "netsha": "ns", "kv": "kv", "inaas": "in"}


@dataclass
class SoakConfig:
    minutes: float = 10.0
    #: Probability of each of loss, duplication and reordering, on every switch port.
    loss: float = 0.01
    workloads: list[str] = field(default_factory=lambda: list(WORKLOADS))
    sample_s: float = 5.0
    #: Samples from this long after the start (and after the restart) count for the slope.
    warmup_s: float = 60.0
    #: A slope of resident memory within this is "flat".
    rss_bound_mb_per_min: float = 1.0
    kv_seconds: float = 10.0
    seed: int = 7
    #: Kill the switch at this fraction of the soak (None: never).
    restart_at: Optional[float] = 0.5

    @property
    def fault(self) -> str:
        return f"loss={self.loss:g},dup={self.loss:g},reorder={self.loss:g},seed={self.seed}"


def proc_rss_mb(pid: int) -> Optional[float]:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def proc_fds(pid: int) -> Optional[int]:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def alive(pid: int) -> bool:
    """Running (a zombie, dead but not yet reaped by its parent, is not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def slope_per_min(ts: list[float], ys: list[float]) -> Optional[float]:
    """Least-squares slope of ys against ts (seconds), per minute."""
    if len(ts) < 3 or max(ts) - min(ts) <= 0:
        return None
    return float(np.polyfit(np.asarray(ts) / 60.0, np.asarray(ys), 1)[0])


def fd_growth(values: list[int]) -> Optional[int]:
    """Fewest descriptors open in the second half of the samples minus fewest in the first
    half: a worker's count goes up and down with what its round is doing when sampled
    (3 between rounds, 11 in one), so the peaks are noise; a leak raises the floor."""
    if len(values) < 4:
        return None
    h = len(values) // 2
    return int(min(values[h:]) - min(values[:h]))


def round_fd_growth(values: list[int]) -> Optional[int]:
    """A per-round worker's descriptors counted right after each round's teardown: fewest
    in the later half of the rounds minus fewest in the earlier half. A leak of one per
    round raises every later count (growth >= 1 from two rounds on); a count caught high
    now and then (a closing socket, a thread still ending) is not the floor of its half."""
    if len(values) < 2:
        return None
    h = len(values) // 2
    return int(min(values[h:]) - min(values[:h]))


class Soak:
    def __init__(self, cfg: SoakConfig, progress: Callable[[dict[str, Any]], None] = lambda s: None) -> None:
        from inswitch.topology.state import process_tag

        self.cfg, self.progress = cfg, progress
        self.prefix = f"sk{process_tag()}"
        self.names = {w: self.prefix + SHORT[w] for w in cfg.workloads}
        self.dir = Path(tempfile.mkdtemp(prefix=f"{self.prefix}-soak-"))
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.outs: dict[str, Path] = {}
        self.events: dict[str, list[dict[str, Any]]] = {w: [] for w in cfg.workloads}
        self.read_at: dict[str, int] = {w: 0 for w in cfg.workloads}
        self.samples: list[dict[str, Any]] = []
        self.seen_pids: dict[str, set[int]] = {"switch": set(), "supervisor": set(), "hosts": set(), "workers": set()}
        self.kill: Optional[dict[str, Any]] = None
        self.t0 = time.time()

    # ---- the workers ------------------------------------------------------------------------

    def start(self, until: float) -> None:
        workdir = "/dev/shm" if os.path.isdir("/dev/shm") else None
        for w in self.cfg.workloads:
            out = self.dir / f"{w}.jsonl"
            argv = [sys.executable, "-m", "inswitch.soak.worker", w, self.names[w], "--fault", self.cfg.fault, "--until", str(until),
                    "--kv-seconds", str(self.cfg.kv_seconds)] + (["--workdir", workdir] if workdir else [])
            with open(out, "wb") as fo, open(self.dir / f"{w}.log", "ab") as fe:
                self.workers[w] = subprocess.Popen(argv, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL)
            self.outs[w] = out
            self.seen_pids["workers"].add(self.workers[w].pid)

    def poll_events(self) -> None:
        for w, path in self.outs.items():
            try:
                data = path.read_bytes()
            except OSError:
                continue
            end = data.rfind(b"\n") + 1
            for line in data[self.read_at[w]:end].splitlines():
                try:
                    self.events[w].append(json.loads(line))
                except ValueError:
                    pass
            self.read_at[w] = end

    def rounds(self, w: str) -> list[dict[str, Any]]:
        return [e for e in self.events[w] if e.get("event") == "round"]

    def host_pids(self) -> dict[str, int]:
        out = {f"{w}-worker": p.pid for w, p in self.workers.items() if p.poll() is None}
        for e in self.events.get("kv", []):
            if e.get("event") == "ready":
                out.update({f"kv-{k}": v for k, v in e["pids"].items()})
        return out

    # ---- sampling and the restart -----------------------------------------------------------

    def kv_switch(self) -> tuple[Optional[int], int, Optional[int]]:
        """(switch pid, generation, supervisor pid) of the KV rack, if it is up."""
        from inswitch.topology import load_state

        st = load_state(self.names["kv"]) if "kv" in self.names else None
        if st is None or not st.extra.get("ready"):
            return None, 0, None
        return st.switch.pid, int(st.extra.get("generation", 1)), st.extra.get("supervisor_pid")

    def sample(self, t0: float) -> None:
        pid, gen, sup = self.kv_switch()
        if pid:
            self.seen_pids["switch"].add(pid)
        if sup:
            self.seen_pids["supervisor"].add(int(sup))
        hosts = self.host_pids()
        self.seen_pids["hosts"].update(v for k, v in hosts.items() if not k.endswith("-worker"))
        s: dict[str, Any] = {"t": round(time.time() - t0, 3), "switch_pid": pid, "generation": gen,
                             "rss_mb": proc_rss_mb(pid) if pid else None, "fds": proc_fds(pid) if pid else None,
                             "hosts": {k: proc_fds(v) for k, v in hosts.items()}}
        self.samples.append(s)

    def kill_switch(self, t0: float) -> None:
        pid, gen, _ = self.kv_switch()
        if not pid:
            self.kill = {"error": "the KV rack's switch was not up at the restart time"}
            return
        os.kill(pid, signal.SIGKILL)
        self.kill = {"at_s": round(time.time() - t0, 3), "at": time.time(), "pid": pid, "generation_before": gen}

    # ---- the run ----------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        cfg = self.cfg
        t0 = self.t0 = time.time()
        until = t0 + cfg.minutes * 60.0
        kill_at = t0 + cfg.minutes * 60.0 * cfg.restart_at if cfg.restart_at is not None and "kv" in cfg.workloads else None
        stop: list[int] = []
        # SIGTERM/SIGINT: the workers end their rounds and take their racks down; the
        # report is written for what ran (a background run ignores SIGINT: send SIGTERM).
        old = {s: signal.signal(s, lambda signum, _f: stop.append(signum)) for s in (signal.SIGTERM, signal.SIGINT)}
        self.start(until)
        try:
            next_sample = time.time()
            while any(p.poll() is None for p in self.workers.values()):
                if stop and stop[0] > 0:
                    for p in self.workers.values():
                        if p.poll() is None:
                            p.send_signal(signal.SIGTERM)
                    stop[0] = 0
                now = time.time()
                if kill_at is not None and now >= kill_at and self.kill is None:
                    self.kill_switch(t0)
                if now >= next_sample:
                    next_sample += cfg.sample_s
                    self.sample(t0)
                    self.poll_events()
                    self.progress(self.status(t0, until))
                if now > until + 300:  # a round that never ends: stop it (its rack goes down)
                    for p in self.workers.values():
                        if p.poll() is None:
                            p.send_signal(signal.SIGTERM)
                time.sleep(0.2)
        finally:
            for p in self.workers.values():
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
                    try:
                        p.wait(timeout=120)
                    except subprocess.TimeoutExpired:
                        p.kill()
                        p.wait()
            for s, h in old.items():
                signal.signal(s, h)
        self.poll_events()
        return self.report(t0, time.time())

    def status(self, t0: float, until: float) -> dict[str, Any]:
        last = self.samples[-1] if self.samples else {}
        return {"elapsed_s": time.time() - t0, "total_s": until - t0, "rss_mb": last.get("rss_mb"), "fds": last.get("fds"),
                "generation": last.get("generation"),
                "rounds": {w: (sum(r["correct"] for r in self.rounds(w)), len(self.rounds(w))) for w in self.cfg.workloads}}

    # ---- the report -------------------------------------------------------------------------

    def measured(self) -> list[dict[str, Any]]:
        """The samples the verdicts judge: those up to the deadline. After it the workers
        finish their last rounds and take their racks down, the KV rack's switch included,
        and a sample taken while that switch exits (its memory and descriptors going) is
        no measure of a leak. Every sample stays in the JSON and the figure."""
        end = self.cfg.minutes * 60.0
        return [s for s in self.samples if s["t"] <= end]

    def memory(self) -> dict[str, Any]:
        """Per switch generation, the samples after its warm-up: slope of RSS (MB/min) and
        growth of its fds; the verdict is over every generation with enough samples."""
        cfg = self.cfg
        gens: dict[int, list[dict[str, Any]]] = {}
        for s in self.measured():
            if s["rss_mb"] is not None:
                gens.setdefault(s["generation"], []).append(s)
        per: dict[str, Any] = {}
        for g, ss in sorted(gens.items()):
            start = ss[0]["t"]
            warm = [s for s in ss if s["t"] >= start + cfg.warmup_s]
            sl = slope_per_min([s["t"] for s in warm], [s["rss_mb"] for s in warm])
            per[str(g)] = {"from_s": start, "to_s": ss[-1]["t"], "samples_after_warmup": len(warm),
                           "rss_mb_first": round(warm[0]["rss_mb"], 2) if warm else None, "rss_mb_last": round(warm[-1]["rss_mb"], 2) if warm else None,
                           "rss_slope_mb_per_min": None if sl is None else round(sl, 4),
                           "fd_growth": fd_growth([s["fds"] for s in warm if s["fds"] is not None])}
        slopes = [v["rss_slope_mb_per_min"] for v in per.values() if v["rss_slope_mb_per_min"] is not None]
        growth = [v["fd_growth"] for v in per.values() if v["fd_growth"] is not None]
        main = max(per.values(), key=lambda v: v["samples_after_warmup"], default=None)
        return {"by_generation": per, "rss_slope_mb_per_min": main["rss_slope_mb_per_min"] if main else None,
                "rss_bound_mb_per_min": cfg.rss_bound_mb_per_min,
                "rss_flat": bool(slopes) and all(abs(x) <= cfg.rss_bound_mb_per_min for x in slopes),
                "fds_flat": bool(growth) and all(x <= 0 for x in growth)}

    def per_round_workers(self) -> list[str]:
        """The workloads whose worker builds and takes down a rack every round (its `ready`
        event says so; WordCount, NetSHa and INaaS)."""
        out = []
        for w in self.cfg.workloads:
            ready = next((e for e in self.events.get(w, []) if e.get("event") == "ready"), {})
            if ready.get("per_round_rack", w != "kv"):
                out.append(w)
        return out

    def host_fds(self) -> dict[str, Any]:
        """Descriptors of the soak's processes other than the KV switch, each with its growth.

        A long-lived process (Redis, the agents, the KV worker whose controller lives as
        long as its rack) is judged on the periodic samples after the warm-up that follows
        its start or the switch's restart (its controller reconnects then).

        A per-round worker (WordCount, NetSHa, INaaS) goes 3 -> 8..11 -> 3 descriptors
        every round, so a periodic sample measures the phase of the round it lands in,
        not a leak. It is judged on the count it reports itself right after each round's
        teardown, when it should be back at its baseline: the rounds ending after the
        warm-up (all of them if fewer than two do), growth = fewest in the later half
        minus fewest in the earlier half (`round_fd_growth`). The samples stay in the
        JSON and the figure (`sampled_min`, `sampled_max`)."""
        out: dict[str, Any] = {}
        per_round = {f"{w}-worker": w for w in self.per_round_workers()}
        names = sorted({k for s in self.samples for k in s["hosts"]} | {k for k, w in per_round.items() if self.rounds(w)})
        for k in names:
            vals = [(s["t"], s["hosts"][k]) for s in self.measured() if s["hosts"].get(k) is not None]
            if k in per_round:
                rs = [r for r in self.rounds(per_round[k]) if r.get("fds_after") is not None]
                if not rs:
                    out[k] = {"judged_on": "rounds", "rounds_judged": 0, "growth": None}
                    continue
                warm = [r for r in rs if r["end"] - self.t0 >= self.cfg.warmup_s]
                warm = warm if len(warm) >= 2 else rs
                fds = [int(r["fds_after"]) for r in warm]
                rss = [(r["end"] - self.t0, r["rss_mb_after"]) for r in warm if r.get("rss_mb_after") is not None]
                sl = slope_per_min([t for t, _ in rss], [m for _, m in rss])
                out[k] = {"judged_on": "rounds", "rounds_judged": len(fds), "first": fds[0], "last": fds[-1], "max": max(fds),
                          "growth": round_fd_growth(fds), "between_rounds": fds,
                          "sampled_min": min((v for _t, v in vals), default=None), "sampled_max": max((v for _t, v in vals), default=None),
                          "rss_mb_first": rss[0][1] if rss else None, "rss_mb_last": rss[-1][1] if rss else None,
                          "rss_slope_mb_per_min": None if sl is None else round(sl, 4)}
                continue
            if not vals:
                continue
            start = max(vals[0][0], float((self.kill or {}).get("at_s", 0.0)))
            warm_v = [v for t, v in vals if t >= start + self.cfg.warmup_s] or [v for _t, v in vals]
            out[k] = {"judged_on": "samples", "first": warm_v[0], "last": warm_v[-1], "max": max(warm_v), "growth": fd_growth(warm_v)}
        return out

    def teardown(self) -> dict[str, Any]:
        """Nothing of the soak left: no namespace or interface with its prefix, no process
        it started (switches, supervisors, Redis, agents, workers), no rack state."""
        from inswitch.topology import load_state, netns

        deadline = time.monotonic() + 30
        while True:
            left = netns.leftovers(self.prefix)
            procs = sorted(p for ps in self.seen_pids.values() for p in ps if alive(p))
            named = []
            for d in Path("/proc").iterdir():
                if d.name.isdigit() and int(d.name) != os.getpid():
                    try:
                        cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ")
                    except OSError:
                        continue
                    if self.prefix.encode() in cmd and alive(int(d.name)):
                        named.append(int(d.name))
            states = [n for n in self.names.values() if load_state(n) is not None]
            if not (left or procs or named or states) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        return {"prefix": self.prefix, "leftover_netns_and_links": left, "leftover_processes": sorted(set(procs + named)),
                "leftover_rack_states": states, "processes_checked": sum(len(v) for v in self.seen_pids.values()),
                "clean": not (left or procs or named or states)}

    def restart_report(self) -> dict[str, Any]:
        if self.kill is None:
            return {"killed": False}
        kv_rounds = self.rounds("kv")
        across = [r for r in kv_rounds if r.get("switch_restarts")]
        # the supervisor's record lives in the rack's state, gone with the rack: the KV
        # rounds carry what they saw; the sampled generations show the new switch
        gens = sorted({s["generation"] for s in self.samples if s["generation"]})
        after = [s for s in self.samples if s["t"] >= self.kill.get("at_s", 1e18) and s["switch_pid"] not in (None, self.kill.get("pid"))]
        return {"killed": "error" not in self.kill, **self.kill, "generations_seen": gens,
                "back_after_s": round(after[0]["t"] - self.kill["at_s"], 3) if after and "at_s" in self.kill else None,
                "new_pid": after[0]["switch_pid"] if after else None,
                "kv_rounds_through_restart": [{k: r.get(k) for k in ("n", "correct", "reinstalled_generations", "recovered_s", "restart_note")} for r in across]}

    def report(self, t0: float, t1: float) -> dict[str, Any]:
        wl: dict[str, Any] = {}
        for w in self.cfg.workloads:
            rs = self.rounds(w)
            wl[w] = {"rounds": len(rs), "correct_rounds": sum(bool(r["correct"]) for r in rs), "failed_rounds": [r for r in rs if not r["correct"]],
                     "exit": self.workers[w].returncode if w in self.workers else None,
                     "first_start_s": round(rs[0]["start"] - t0, 3) if rs else None, "last_end_s": round(rs[-1]["end"] - t0, 3) if rs else None,
                     "results": rs}
        rst = self.restart_report()
        mem = self.memory()
        hosts = self.host_fds()
        td = self.teardown()
        correct = all(v["rounds"] > 0 and v["correct_rounds"] == v["rounds"] and v["exit"] == 0 for v in wl.values())
        hosts_flat = all((h["growth"] or 0) <= 0 for h in hosts.values())
        restarted = not self.cfg.restart_at or "kv" not in self.cfg.workloads or (bool(rst.get("killed")) and rst.get("new_pid") is not None)
        return {"config": {**asdict(self.cfg), "fault": self.cfg.fault, "racks": self.names}, "duration_s": round(t1 - t0, 1),
                "workloads": wl, "restart": rst, "switch_memory": mem, "host_fds": hosts, "samples": self.samples, "teardown": td,
                "correct": correct, "rss_flat": mem["rss_flat"], "fds_flat": mem["fds_flat"] and hosts_flat, "torn_down": td["clean"],
                "ok": correct and mem["rss_flat"] and mem["fds_flat"] and hosts_flat and td["clean"] and restarted}
