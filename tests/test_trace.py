"""`inswitch trace` against a running switch: the trace of a known packet through `forward`
(the l2_dmac entry it hits, the port counter cell before and after, the port it leaves by),
no trace for packets that do not match, the timeout message, and the HTTP API's refusals.
DAIET's register traces are checked in Rust (crates/programs/tests/trace.rs) against the
cell's value computed there."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from inswitch import _native

from conftest import free_udp_ports, start_switch

MACS = [f"02:00:00:00:01:0{i + 1}" for i in range(3)]


def _post(url: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _trace(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "inswitch", "trace", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_trace_of_a_forwarded_packet(tmp_path: Path) -> None:
    base = free_udp_ports(3)
    sw = start_switch(tmp_path / "sw", "--program", "forward", "--ports", f"udp:{base}:3")
    hosts = []
    try:
        hosts = [_native.TunnelHost(f"127.0.0.1:{base + i}", MACS[i], f"10.0.1.{i + 1}") for i in range(3)]
        time.sleep(0.1)
        # Learn both hosts' MACs (the switch learns from the mac_learn digest), so the traced
        # packet hits l2_dmac instead of flooding.
        assert all(r is not None for r in hosts[0].ping("10.0.1.2", count=2, timeout=2.0, interval=0.05))
        time.sleep(0.3)
        p = _trace("--metrics", sw.metrics, "--match", "udp dst 5000 and ip src 10.0.1.1", "--count", "1", "--timeout", "20", "--json", "-")
        # The session is armed once the CLI says so (on stderr, with --json -).
        assert p.stderr is not None
        line = p.stderr.readline()
        assert "tracing" in line, line
        hosts[0].udp_send("10.0.1.2", 6000, 4000, b"not me")  # another port: not traced
        hosts[2].udp_send("10.0.1.2", 5000, 4000, b"nor me")  # another source: not traced
        payload = b"trace me"
        hosts[0].udp_send("10.0.1.2", 5000, 4000, payload)
        out, err = p.communicate(timeout=30)
        assert p.returncode == 0, err
        doc = json.loads(out)
        assert len(doc["packets"]) == 1
        evs = doc["packets"][0]["events"]
        kinds = [e["event"] for e in evs]
        frame_len = 14 + 20 + 8 + len(payload)
        rx = evs[0]
        assert rx["event"] == "received" and rx["port"] == 0 and rx["len"] == frame_len
        assert rx["headers"].endswith("ipv4 10.0.1.1 > 10.0.1.2 proto 17, udp 4000 > 5000")
        dmac = next(e for e in evs if e["event"] == "table" and e["table"] == "l2_dmac")
        assert dmac["hit"] is True
        assert dmac["key_decoded"] == {"hdr.ethernet.dst_addr": MACS[1]}
        assert dmac["action"] == "l2_forward" and dmac["params_decoded"] == {"port": "1"}
        assert f"dst_addr={MACS[1]}" in dmac["text"] and "hit -> l2_forward(port=1)" in dmac["text"]
        # The receive counter of port 0: one more packet, frame_len more bytes.
        rxc = next(e for e in evs if e["event"] == "register" and e["register"] == "rx_port_counters")
        assert rxc["index"] == 0
        b, a = rxc["before_fields"], rxc["after_fields"]
        assert (a["packets"] - b["packets"], a["bytes"] - b["bytes"]) == (1, frame_len)
        res = next(e for e in evs if e["event"] == "ingress_result")
        assert res["egress_port"] == 1 and res["text"] == "traffic manager: to port 1"
        tx = [e for e in evs if e["event"] == "transmit"]
        assert [(e["port"], e["len"]) for e in tx] == [(1, frame_len)]
        assert kinds.index("received") < kinds.index("ingress_result") < kinds.index("transmit")

        # The text form: one block, the first line the packet, then one line per event.
        p = _trace("--metrics", sw.metrics, "--match", "udp dst 5001", "--timeout", "20")
        assert p.stdout is not None
        assert "tracing" in p.stdout.readline()
        hosts[1].udp_send("10.0.1.1", 5001, 4000, b"x")
        out, err = p.communicate(timeout=30)
        assert p.returncode == 0, err
        lines = out.splitlines()
        assert lines[0].startswith("packet 1: received on port 1")
        assert any(ln.strip().startswith(f"table l2_dmac [hdr.ethernet.dst_addr={MACS[0]}]: hit -> l2_forward(port=0)") for ln in lines), out
        assert any(ln.strip() == "sent on port 0, 43 bytes" for ln in lines), out

        # Nothing matches: the timeout's message and exit status 1, no hang.
        t0 = time.monotonic()
        p = _trace("--metrics", sw.metrics, "--match", "tcp dst 1", "--timeout", "0.5")
        out, err = p.communicate(timeout=30)
        assert p.returncode == 1 and "no packet matched in 0.5 s" in err, (out, err)
        assert time.monotonic() - t0 < 15

        # The API: a bad expression and a second session are refused; stop ends a session.
        url = f"http://{sw.metrics}/api/trace"
        code, doc = _post(url, {"match": "udp dst x", "count": 1, "timeout": 5})
        assert code == 400 and "not a number" in doc["error"]
        code, doc = _post(url, {"match": "udp dst 1", "count": 0, "timeout": 5})
        assert code == 400
        code, s1 = _post(url, {"match": "udp dst 1", "count": 1, "timeout": 5})
        assert code == 200
        code, doc = _post(url, {"match": "udp dst 2", "count": 1, "timeout": 5})
        assert code == 409 and "another trace session" in doc["error"]
        assert _post(f"{url}/stop?session={s1['session']}", {}) == (200, {"stopped": True})
        code, _ = _post(url, {"match": "udp dst 2", "count": 1, "timeout": 5})
        assert code == 200
    finally:
        for h in hosts:
            h.close()
        assert sw.stop(timeout=20) == 0


def test_bad_match_is_a_usage_error() -> None:
    p = subprocess.run([sys.executable, "-m", "inswitch", "trace", "--match", "udp dst 70000", "--metrics", "127.0.0.1:1"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert len(p.stderr.strip().splitlines()) == 1 and "above 65535" in p.stderr
