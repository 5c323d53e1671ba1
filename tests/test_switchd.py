"""The switch daemon as a process: its ready file, /metrics and /healthz, how it refuses bad
input, and how it stops."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Callable

import pytest

from conftest import SwitchProcess, free_tcp_port
from inswitch.p4rt import SwitchClient
from inswitch.p4rt.p4info import from_text, p4info_for

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
_VALUE = r"(?:[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|NaN|[+-]Inf)"
_SAMPLE = re.compile(rf"^({_NAME})(?:\{{({_LABEL}(?:,{_LABEL})*)?\}})? ({_VALUE})$")
_HELP = re.compile(rf"^# HELP ({_NAME}) .*$")
_TYPE = re.compile(rf"^# TYPE ({_NAME}) (counter|gauge|summary|histogram|untyped)$")


def parse_exposition(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Check every line of a Prometheus text exposition and return its samples. Each family
    must have HELP and TYPE before its samples, and its samples must be contiguous."""
    assert text.endswith("\n")
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    typed: dict[str, str] = {}
    helped: set[str] = set()
    done: set[str] = set()
    current = None
    for line in text.splitlines():
        if m := _HELP.match(line):
            assert m.group(1) not in helped, f"second HELP for {m.group(1)}"
            helped.add(m.group(1))
            continue
        if m := _TYPE.match(line):
            assert m.group(1) in helped and m.group(1) not in typed, line
            typed[m.group(1)] = m.group(2)
            if current:
                done.add(current)
            current = m.group(1)
            continue
        m = _SAMPLE.match(line)
        assert m, f"not valid exposition format: {line!r}"
        name = m.group(1)
        family = name if name in typed else re.sub(r"_(sum|count|bucket)$", "", name)
        assert family == current and family not in done, f"sample {name} outside its family's block"
        if typed[family] == "counter":
            assert name.endswith("_total")
        labels = frozenset(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"', m.group(2) or ""))
        assert (name, labels) not in samples, f"duplicate sample {line}"
        samples[(name, labels)] = float(m.group(3))
    return samples


def scrape(sw: SwitchProcess, path: str = "/metrics") -> tuple[int, str, str]:
    with urllib.request.urlopen(f"http://{sw.metrics}{path}", timeout=5) as r:
        return r.status, r.headers.get("Content-Type", ""), r.read().decode()


def sample(samples: dict, metric: str, /, **labels: str) -> float:
    return samples.get((metric, frozenset(labels.items())), 0.0)


def test_ready_file(switchd: SwitchProcess) -> None:
    ready = json.loads(switchd.ready_file.read_text())
    assert ready["pid"] == switchd.proc.pid
    assert ready["programs"] == ["forward"] and ready["device_id"] == 1 and ready["pipes"] == 1
    assert ready["ports"] == ["mem0", "mem1", "mem2", "mem3"]
    assert re.fullmatch(r"127\.0\.0\.1:\d+", ready["p4runtime"]) and re.fullmatch(r"127\.0\.0\.1:\d+", ready["metrics"])
    with SwitchClient(ready["p4runtime"]) as c:
        assert c.capabilities() == "1.4.1"


def test_metrics_exposition_and_counters(switchd: SwitchProcess) -> None:
    status, ctype, text = scrape(switchd)
    assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
    before = parse_exposition(text)
    assert sample(before, "inswitch_up") == 1
    assert ("inswitch_port_rx_packets_total", frozenset({("port", "0"), ("name", "mem0")})) in before
    frame = bytes.fromhex("02000000000102000000000208004500") + bytes(50)
    with SwitchClient(switchd.p4runtime) as c:
        c.insert_entry("l2_dmac", {"dst_addr": "02:00:00:00:00:01"}, "drop")
        for _ in range(5):
            c.packet_out(frame, egress_port=1)
        c.packet_out(frame)  # through ingress: dropped by the entry above
        deadline = time.monotonic() + 5
        while True:  # PacketOuts are asynchronous: wait until the data plane has them all
            after = parse_exposition(scrape(switchd)[2])
            if sample(after, "inswitch_packet_out_total") >= sample(before, "inswitch_packet_out_total") + 6 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        c.delete_entry("l2_dmac", {"dst_addr": "02:00:00:00:00:01"})
    port1 = {"port": "1", "name": "mem1"}
    assert sample(after, "inswitch_port_tx_packets_total", **port1) == sample(before, "inswitch_port_tx_packets_total", **port1) + 5
    assert sample(after, "inswitch_port_tx_bytes_total", **port1) == sample(before, "inswitch_port_tx_bytes_total", **port1) + 5 * len(frame)
    assert sample(after, "inswitch_packet_out_total") == sample(before, "inswitch_packet_out_total") + 6
    assert sample(after, "inswitch_program_passes_total", program="forward", gress="ingress") > sample(before, "inswitch_program_passes_total", program="forward", gress="ingress")
    assert sample(after, "inswitch_program_drops_total", program="forward", reason="program") == sample(before, "inswitch_program_drops_total", program="forward", reason="program") + 1
    assert sample(after, "inswitch_p4runtime_ops_total", op="write.table_entry.insert") >= 1
    assert sample(after, "inswitch_p4runtime_ops_total", op="packet_out") >= 6
    assert sample(after, "inswitch_p4runtime_op_latency_seconds_count", op="write_rpc") >= 1
    assert sample(after, "inswitch_p4runtime_op_latency_seconds", op="write_rpc", quantile="0.5") > 0
    status, _, body = scrape(switchd, "/healthz")
    assert status == 200 and body == "ok\n"


def test_label_values_are_escaped() -> None:
    from inswitch.switchd.metrics import render

    odd = 'port "a"\\b\nc'
    text = render({"ports": [{"port": 0, "name": odd, "rx_packets": 3}], "programs": {}, "drops": {"x": 1}})
    samples = parse_exposition(text)
    assert sample(samples, "inswitch_port_rx_packets_total", port="0", name='port \\"a\\"\\\\b\\nc') == 3
    assert sample(samples, "inswitch_drops_total", reason="x") == 1


def run_cli(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "inswitch", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_bad_input_gives_a_clean_error() -> None:
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    taken = f"127.0.0.1:{busy.getsockname()[1]}"
    free = lambda: f"127.0.0.1:{free_tcp_port()}"  # noqa: E731
    cases = {
        "unknown program": (run_cli("switch", "--program", "forward,nosuch", "--ports", "memory:2", "--p4runtime", free(), "--metrics", "off"), "unknown program 'nosuch'"),
        "bad ports": (run_cli("switch", "--ports", "memory:x", "--p4runtime", free(), "--metrics", "off"), "memory:N"),
        "bad address": (run_cli("switch", "--ports", "memory:2", "--p4runtime", "localhost", "--metrics", "off"), "HOST:PORT"),
        "p4runtime in use": (run_cli("switch", "--ports", "memory:2", "--p4runtime", taken, "--metrics", "off"), "in use"),
        "metrics in use": (run_cli("switch", "--ports", "memory:2", "--p4runtime", free(), "--metrics", taken), "cannot listen for metrics"),
        "p4info of unknown program": (run_cli("p4info", "nosuch"), "unknown program"),
    }
    try:
        for what, (proc, needle) in cases.items():
            out, err = proc.communicate(timeout=30)
            assert proc.returncode != 0, what
            assert needle in err and "error" in err, f"{what}: {err!r}"
            assert "Traceback" not in err + out, f"{what}: {err}"
    finally:
        busy.close()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_cleanly(switchd_factory: Callable[..., SwitchProcess], sig: signal.Signals) -> None:
    sw = switchd_factory("--program", "forward", "--ports", "memory:2")
    with SwitchClient(sw.p4runtime) as c:  # an open stream must not hold the switch up
        c.insert_entry("l2_dmac", {"dst_addr": 1}, "drop")
        t0 = time.monotonic()
        sw.proc.send_signal(sig)
        assert sw.proc.wait(timeout=5) == 0
    assert time.monotonic() - t0 < 5
    assert not sw.ready_file.exists()


def test_p4info_command(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "inswitch", "p4info", "forward", "--out", str(tmp_path / "p.txt"), "--device-config", str(tmp_path / "d.bin")], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert from_text((tmp_path / "p.txt").read_text()) == p4info_for(["forward"])
    assert json.loads((tmp_path / "d.bin").read_bytes()) == {"programs": ["forward"]}
    printed = subprocess.run([sys.executable, "-m", "inswitch", "p4info", "forward"], capture_output=True, text=True, timeout=30)
    assert printed.stdout == (tmp_path / "p.txt").read_text()


def test_pipes_pinned_to_the_cores_given(switchd_factory: Callable[..., SwitchProcess]) -> None:
    """`--cores` pins pipe i to the i-th core: the threads' CPU masks, the ready file and
    /metrics say so."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("needs 2 cores")
    want = [cores[1], cores[0]]
    sw = switchd_factory("--program", "forward", "--ports", "memory:4", "--pipes", "2", "--cores", f"{want[0]},{want[1]}")
    ready = json.loads(sw.ready_file.read_text())
    assert ready["pipes"] == 2 and ready["cores"] == want
    allowed = {}
    for t in Path(f"/proc/{sw.proc.pid}/task").iterdir():
        comm = (t / "comm").read_text().strip()
        if re.fullmatch(r"pipe\d+", comm):
            line = next(ln for ln in (t / "status").read_text().splitlines() if ln.startswith("Cpus_allowed_list:"))
            allowed[int(comm[4:])] = line.split(":", 1)[1].strip()
    assert allowed == {0: str(want[0]), 1: str(want[1])}
    samples = parse_exposition(scrape(sw)[2])
    assert sample(samples, "inswitch_pipe_core", pipe="0") == want[0] and sample(samples, "inswitch_pipe_core", pipe="1") == want[1]


def test_cores_not_matching_the_pipes_is_a_one_line_error() -> None:
    r = subprocess.run([sys.executable, "-m", "inswitch", "switch", "--ports", "memory:4", "--pipes", "2", "--cores", "0",
                        "--p4runtime", "127.0.0.1:0", "--metrics", "off"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == ["error: 1 cores for 2 pipes: give one core per pipe"]
