"""`inswitch bench forward`: the switch's forwarding rate, (a) in memory on one core (L2, and
the IPv4 routing path of bmv2's `simple_router`: parse, LPM, TTL decrement, checksum update,
MAC rewrite), (b) the routing path replayed through file ports (`pcap:IN:OUT`, as bmv2's
--use-files benchmark does), (c) between two network namespaces over veth, against the
Linux kernel bridge forwarding between the same two namespaces in the same run, and (d) the
same with AF_XDP switch ports, offered load from a frame generator that outruns the switch
(copies of one frame out of an AF_XDP socket in the sender's namespace; the kernel's pktgen
is not available on these machines), against the bridge fed by the same generator."""

from __future__ import annotations

import json
import os
import struct
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable

from inswitch import _native, native
from inswitch.topology import netns as nx

#: Frames of 64 bytes on the wire: 14 Ethernet + 20 IPv4 + 8 UDP + 18 payload + 4 FCS.
PAYLOAD_64B = 18
SINK_PORT = 9000
#: Frames in the capture replayed through file ports (~80 MB in, ~100 MB out; a few tenths of a second).
PCAP_FRAMES = 1_000_000


@dataclass(frozen=True)
class Pair:
    """Two hosts, one veth each; `s1`/`s2` are the switch-side ends."""

    prefix: str

    def host(self, i: int) -> nx.VethHost:
        return nx.VethHost(netns=f"{self.prefix}h{i}", switch_if=f"{self.prefix}s{i}", mac=f"02:00:00:00:99:{i:02x}", ip=f"10.99.0.{i}", prefix_len=24)


def _py_in(netns: str, args: list[str]) -> list[str]:
    return nx.netns_argv(netns, [sys.executable, "-m", "inswitch.bench.traffic", *args])


def measure_flow(pair: Pair, duration: float, payload: int) -> dict[str, float]:
    """Blast UDP from h1 to h2 for `duration` s; the rate h2 received is the result."""
    h1, h2 = pair.host(1), pair.host(2)
    sink = subprocess.Popen(_py_in(h2.netns, ["sink", "--bind", f"{h2.ip}:{SINK_PORT}", "--duration", str(duration + 5), "--idle", "1.0"]), stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(0.3)  # the sink binds before traffic starts
        blast = nx.run(_py_in(h1.netns, ["blast", "--dst", f"{h2.ip}:{SINK_PORT}", "--payload", str(payload), "--duration", str(duration)]), timeout=duration + 30)
        sent = json.loads(blast.stdout.strip().splitlines()[-1])
        out, _ = sink.communicate(timeout=duration + 30)
        got = json.loads(out.strip().splitlines()[-1])
    finally:
        if sink.poll() is None:
            sink.kill()
            sink.wait()
    return {"sent": sent["sent"], "sent_pps": sent["pps"], "received": got["packets"], "pps": got["pps"], "loss": 1 - got["packets"] / max(sent["sent"], 1)}


def _setup(pair: Pair) -> None:
    hosts = [pair.host(1), pair.host(2)]
    for h in hosts:
        nx.create_veth_host(h)
    # Static neighbours: the measurement is forwarding, not ARP.
    for a, b in ((hosts[0], hosts[1]), (hosts[1], hosts[0])):
        nx.ip("neigh", "replace", b.ip, "lladdr", b.mac, "dev", a.ifname, netns=a.netns)


def _through_switch(pair: Pair, duration: float, payload: int, kind: str = "veth",
                    measure: Callable[[Pair, float, int], dict[str, Any]] = measure_flow) -> dict[str, Any]:
    """`forward` between the pair's switch ends over `kind` ports (veth: AF_PACKET, xdp:
    AF_XDP), L2 entries for the two hosts, `measure` through it."""
    h1, h2 = pair.host(1), pair.host(2)
    dp = _native.Dataplane(["forward"], f"{kind}:{h1.switch_if},{h2.switch_if}")
    try:
        info = native.program_set_info(["forward"])
        for port, h in enumerate((h1, h2)):
            mac = bytes.fromhex(h.mac.replace(":", ""))
            dp.table_write("insert", info.table_id("l2_dmac"), [("exact", 1, mac)], 0, info.action_id("l2_forward"), [(1, bytes([port]))])
            dp.table_write("insert", info.table_id("l2_smac"), [("exact", 1, mac)], 0, info.action_id("nop"), [])
        r = measure(pair, duration, payload)
        c = json.loads(dp.counters_json())
        r["switch_ports"] = [p["name"] for p in c["ports"]]
        r["switch_rx"] = c["ports"][0]["rx_packets"]
        r["switch_tx"] = c["ports"][1]["tx_packets"]
        r["switch_drops"] = c["drops"]
        r["port_io_drops"] = {p["name"]: p["io"]["drops"] for p in c["ports"] if p["io"]}
        return r
    finally:
        dp.stop()


def _through_bridge(pair: Pair, duration: float, payload: int,
                    measure: Callable[[Pair, float, int], dict[str, Any]] = measure_flow) -> dict[str, Any]:
    br = f"{pair.prefix}br"
    nx.ip("link", "add", br, "type", "bridge")
    try:
        nx.write_sysctl_root(f"net.ipv6.conf.{br}.disable_ipv6", "1")
        for i in (1, 2):
            nx.ip("link", "set", pair.host(i).switch_if, "master", br)
        nx.ip("link", "set", br, "up")
        return measure(pair, duration, payload)
    finally:
        for i in (1, 2):
            nx.ip("link", "set", pair.host(i).switch_if, "nomaster", check=False)
        nx.ip("link", "del", br, check=False)


def udp_frame(src: nx.VethHost, dst: nx.VethHost, payload: int) -> bytes:
    """An Ethernet/IPv4/UDP frame from `src` to `dst`'s sink port (checksummed IPv4 header,
    UDP checksum 0 = none), `payload` bytes of zeros."""
    mac = lambda m: bytes.fromhex(m.replace(":", ""))  # noqa: E731
    ip = lambda a: bytes(int(x) for x in a.split("."))  # noqa: E731
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 28 + payload, 0, 0x4000, 64, 17, 0, ip(src.ip), ip(dst.ip))
    words = sum(struct.unpack("!10H", hdr))
    while words >> 16:
        words = (words & 0xFFFF) + (words >> 16)
    hdr = hdr[:10] + struct.pack("!H", ~words & 0xFFFF) + hdr[12:]
    udp = struct.pack("!HHHH", 40000, SINK_PORT, 8 + payload, 0)
    return mac(dst.mac) + mac(src.mac) + b"\x08\x00" + hdr + udp + bytes(payload)


def _rx_packets(h: nx.VethHost) -> int:
    return int(nx.run(nx.netns_argv(h.netns, ["cat", f"/sys/class/net/{h.ifname}/statistics/rx_packets"])).stdout)


def measure_frames(pair: Pair, duration: float, payload: int) -> dict[str, Any]:
    """The frame generator in h1 for `duration` s; delivered = what h2's interface received
    (its counter, so no receiving process limits the rate)."""
    h1, h2 = pair.host(1), pair.host(2)
    frame = udp_frame(h1, h2, payload)
    before = _rx_packets(h2)
    gen = nx.run(_py_in(h1.netns, ["frames", "--ifname", h1.ifname, "--frame-hex", frame.hex(), "--duration", str(duration)]), timeout=duration + 30)
    time.sleep(0.2)  # the last frames cross
    got = _rx_packets(h2) - before
    sent = json.loads(gen.stdout.strip().splitlines()[-1])
    return {"sent": sent["sent"], "sent_pps": sent["pps"], "generator": sent["port"], "received": got,
            "pps": got / sent["seconds"], "loss": max(0.0, 1 - got / max(sent["sent"], 1))}


def machine() -> dict[str, Any]:
    cpu = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version()}


def pipes_scaling(duration: float, progress: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """The threaded data plane with `forward` and four in-memory ports offering frames at
    full speed: 1 pipe pinned to one core, then 2 pipes pinned to two cores, in this run.
    Two workloads: `local` (each port sends to the other port of its pipe, as traffic that
    stays in a Tofino pipe) and `crossing` (each port sends to a port of the other pipe, so
    with 2 pipes every frame crosses through the traffic manager's rings). `pipes_scaling`
    is the local ratio, `pipes_scaling_crossing` the crossing one."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return {"pipes_skipped": f"needs 2 cores, this process may use {len(cores)}"}
    out: dict[str, Any] = {"load_average_before": [round(x, 2) for x in os.getloadavg()]}
    for name, crossing in (("local", False), ("crossing", True)):
        progress(f"pipes: {name} workload, 1 pipe on core {cores[0]}, then 2 pipes on cores {cores[0]},{cores[1]}")
        one = _native.bench_forward_pipes(cores[:1], crossing, 64, 32, duration)
        two = _native.bench_forward_pipes(cores[:2], crossing, 64, 32, duration)
        ratio = round(two["mpps"] / one["mpps"], 3) if one["mpps"] else None
        for r in (one, two):
            # Frames per CPU-second of the pipe threads: what the pipes do with the CPU the
            # machine gave them (a loaded machine gives two threads less than two cores).
            r["mpps_per_cpu"] = round(r["packets"] / r["cpu_seconds"] / 1e6, 3) if r["cpu_seconds"] else None
            r["cpu_share"] = round(r["cpu_seconds"] / (r["seconds"] * r["pipes"]), 3)
        per_cpu = two["mpps_per_cpu"] / one["mpps_per_cpu"] if one["mpps_per_cpu"] and two["mpps_per_cpu"] else None
        out[f"pipes_{name}"] = {"one_pipe": one, "two_pipes": two, "ratio": ratio,
                                "per_cpu_ratio": round(per_cpu, 3) if per_cpu else None}
        out["pipes_scaling" if name == "local" else "pipes_scaling_crossing"] = ratio
    out["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    return out


def run(duration: float = 3.0, payload: int = PAYLOAD_64B, progress: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """Both measurements; the veth one needs root (skipped with a reason otherwise)."""
    progress("in-memory pipeline")
    pkts, secs, mpps = _native.bench_forward_pipeline(64, 32, max(duration, 1.0))
    progress("bare loop (same essential work, no model)")
    _, _, bare = _native.bench_bare_forward_loop(32, max(duration, 1.0))
    progress("in-memory IPv4 routing path")
    rpkts, rsecs, route = _native.bench_route_pipeline(64, 32, max(duration, 1.0))
    progress("IPv4 routing path through file ports")
    with tempfile.TemporaryDirectory(prefix="inswitch-bench-pcap-") as d:
        ppkts, psecs, pcap_route = _native.bench_pcap_route(d, 64, PCAP_FRAMES)
    out: dict[str, Any] = {
        "in_memory_mpps": round(mpps, 3),
        "bare_loop_mpps": round(bare, 3),
        "in_memory_bare_ratio": round(mpps / bare, 3) if bare else None,
        "in_memory": {"packets": pkts, "seconds": secs, "frame_bytes": 64, "batch": 32},
        "in_memory_route_mpps": round(route, 3),
        "in_memory_route": {"packets": rpkts, "seconds": rsecs, "frame_bytes": 64, "batch": 32, "routes": 17},
        "pcap_route_mpps": round(pcap_route, 3),
        "pcap_route": {"packets": ppkts, "seconds": psecs, "frame_bytes": 64, "pipes": 1},
        "machine": machine(),
    }
    out.update(pipes_scaling(max(duration, 1.0), progress))
    if os.geteuid() != 0:
        out["veth_skipped"] = "needs root for network namespaces"
        return out
    pair = Pair(prefix=f"iswb{os.getpid() % 10000}-")
    try:
        _setup(pair)
        progress("veth through the inswitch data plane")
        sw = _through_switch(pair, duration, payload)
        progress("veth through the Linux bridge")
        br = _through_bridge(pair, duration, payload)
        progress("AF_XDP ports, frame generator")
        xdp = _through_switch(pair, duration, payload, "xdp", measure_frames)
        progress("Linux bridge, frame generator")
        brg = _through_bridge(pair, duration, payload, measure_frames)
    finally:
        nx.delete_by_prefix(pair.prefix)
    out.update({
        "veth_pps": round(sw["pps"]),
        "bridge_pps": round(br["pps"]),
        "veth_bridge_ratio": round(sw["pps"] / br["pps"], 3) if br["pps"] else None,
        "xdp_pps": round(xdp["pps"]),
        "bridge_generator_pps": round(brg["pps"]),
        "xdp_bridge_ratio": round(xdp["pps"] / brg["pps"], 3) if brg["pps"] else None,
        "loss": round(xdp["loss"], 4),
        "veth": sw,
        "bridge": br,
        "xdp": xdp,
        "bridge_generator": brg,
        "duration_s": duration,
        "frame_bytes": payload + 46,
    })
    return out
