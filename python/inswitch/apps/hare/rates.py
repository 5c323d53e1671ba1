"""The two plane interactions Hare's K2 relies on, measured in our setting:

- table writes through P4Runtime to a running `inswitch switch` (gRPC, one Write per
  entry, as the M-modifier issues them): the switch-OS path;
- control packets through the threaded data plane (`_native.Dataplane` over in-memory
  ports): OO-Stat fetches sent in batches by a host and answered by the switch.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from inswitch import _native, native
from inswitch.apps.hare import kvsim
from inswitch.topology.switchproc import free_local_port


def p4runtime_table_writes(n: int = 300, timeout: float = 30.0) -> dict[str, Any]:
    """Start a switch running `forward,hare`, insert then delete `n` e-MAT entries one
    Write RPC each; writes per second."""
    from inswitch.p4rt import SwitchClient

    with tempfile.TemporaryDirectory(prefix="hare-rates-") as d:
        ready = Path(d) / "ready.json"
        argv = [sys.executable, "-m", "inswitch", "switch", "--program", "forward,hare", "--ports", "memory:3",
                "--p4runtime", f"127.0.0.1:{free_local_port()}", "--metrics", "off", "--ready-file", str(ready)]
        with open(Path(d) / "switch.log", "wb") as log:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + timeout
            while not ready.exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("switch did not start: " + (Path(d) / "switch.log").read_text()[-2000:])
                time.sleep(0.05)
            time.sleep(0.1)
            addr = json.loads(ready.read_text())["p4runtime"]
            with SwitchClient(addr) as c:
                t = time.perf_counter()
                for i in range(n):
                    c.insert_entry("emat_2", {"meta.emat_index": i, "hdr.hare.key_seg2": i & 0xFF}, "set_index", {"index": i})
                for i in range(n):
                    c.delete_entry("emat_2", {"meta.emat_index": i, "hdr.hare.key_seg2": i & 0xFF})
                dt = time.perf_counter() - t
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return {"writes": 2 * n, "seconds": dt, "per_s": 2 * n / dt}


def dataplane_control_packets(n: int = 20000, batch: int = 256, timeout: float = 20.0) -> dict[str, Any]:
    """A backend server's port sends `n` OO-Stat fetches in batches; the switch answers
    each; packets per second, request to last answer."""
    progs = ["forward", "hare"]
    info = native.program_set_info(progs)
    dp = _native.Dataplane(progs, "memory:3")
    try:
        srv = kvsim.server_ep(0)
        dp.table_write("insert", info.table_id("forward.l2_dmac"), [("exact", 1, srv[0])], 0, info.action_id("forward.l2_forward"), [(1, (1).to_bytes(2, "big"))])
        dp.table_write("insert", info.table_id("hare.control_ports"), [("exact", 1, (1).to_bytes(2, "big"))], 0, info.action_id("hare.allow_control"), [])
        frames = [_native.hare_frame(srv, srv, kvsim.OP_STAT_FETCH, b"", 0, b"\0\0\0\0", 0, i % 8192, 0, 0, 0) for i in range(batch)]
        got = 0
        deadline = time.monotonic() + timeout
        t = time.perf_counter()
        sent = 0
        while got < n and time.monotonic() < deadline:
            if sent < n and sent - got < 4 * batch:
                sent += dp.inject_many(1, frames[: min(batch, n - sent)])
            got += len(dp.drain(1, 0.001))
        dt = time.perf_counter() - t
    finally:
        dp.stop()
    return {"packets": got, "seconds": dt, "per_s": got / dt if dt else 0.0}


def measure(quick: bool = True) -> dict[str, Any]:
    w = p4runtime_table_writes(200 if quick else 1000)
    p = dataplane_control_packets(20000 if quick else 200000)
    return {"p4runtime_table_writes": w, "dataplane_control_packets": p, "packet_over_table_ratio": p["per_s"] / w["per_s"] if w["per_s"] else None}
