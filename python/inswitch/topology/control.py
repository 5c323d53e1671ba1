"""The rack's use of the switch's control plane: fill the forwarding tables through P4Runtime
(as any controller would, so the rack exercises the same path), read the per-port counter
registers, and read the Prometheus `/metrics` endpoint.

Only the `forward` program's tables are touched: `l2_dmac` (host MAC -> its port),
`l2_smac` (host MAC -> nop, so known hosts raise no learning digests) and multicast group 1
(all ports: unknown destinations and ARP broadcasts flood, the ingress port pruned by the
program). No static ARP: address resolution must cross the switch like any broadcast.
"""

from __future__ import annotations

import re
import signal
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from inswitch.topology.errors import RackError
from inswitch.topology.state import Host

#: The group the forward program floods to on an `l2_dmac` miss.
FLOOD_GROUP = 1
COUNTER_REGISTERS = ("rx_port_counters", "tx_port_counters")


def _client_class() -> Any:
    try:
        from inswitch.p4rt.client import SwitchClient
    except ModuleNotFoundError as e:
        raise RackError(f"the P4Runtime client (inswitch.p4rt.client) is not available: {e}") from e
    return SwitchClient


@contextmanager
def sigint_deferred() -> Iterator[None]:
    """Hold Ctrl-C until the block ends, then raise KeyboardInterrupt. A KeyboardInterrupt
    raised inside grpc's Python code can leave one of its locks held, and the channel's
    finalizer then waits for that lock forever (seen: `rack up` hung at exit). The block is a
    few short RPCs, so deferring costs nothing noticeable. No-op outside the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        raise KeyboardInterrupt


@contextmanager
def connect(address: str, read_only: bool = False, wait_s: float = 5.0) -> Iterator[Any]:
    """A SwitchClient on `address`, closed on exit. Writers arbitrate as primary with election
    id (0, 1); readers (`status`) take a backup session so they work whoever is primary."""
    cls = _client_class()
    try:
        client = cls(address, device_id=1, election_id=(0, 1), timeout=wait_s, require_primary=not read_only)
    except ConnectionError as e:
        raise RackError(f"cannot use the switch's P4Runtime server at {address}: {e}") from e
    try:
        yield client
    finally:
        client.close()


def program_forwarding(address: str, hosts: list[Host], num_ports: int) -> None:
    """Install the static L2 view of the rack (see the module docstring), in one Write."""
    with sigint_deferred(), connect(address) as c:
        try:
            with c.batch():
                for h in hosts:
                    c.insert_entry("l2_dmac", {"hdr.ethernet.dst_addr": h.mac}, "l2_forward", {"port": h.port})
                    c.insert_entry("l2_smac", {"hdr.ethernet.src_addr": h.mac}, "nop", {})
            c.set_multicast_group(FLOOD_GROUP, list(range(num_ports)))
        except Exception as e:  # P4RuntimeError, KeyError for a program without these tables
            raise RackError(f"programming the switch through P4Runtime ({address}) failed: {e}") from e


def read_port_counters(address: str, ports: list[int]) -> dict[int, dict[str, int]]:
    """Per-port `{rx_packets, rx_bytes, tx_packets, tx_bytes}` from the forward program's
    counter registers, split into packets and bytes by the fields the P4Info declares."""
    out: dict[int, dict[str, int]] = {p: {} for p in ports}
    with sigint_deferred(), connect(address, read_only=True) as c:
        for reg in COUNTER_REGISTERS:
            try:
                cells = {cell["index"]: cell for cell in c.register_cells(reg)["cells"]}
            except Exception as e:  # P4RuntimeError, or KeyError without the forward program
                raise RackError(f"reading register {reg} through P4Runtime ({address}) failed: {e}") from e
            side = reg.split("_", 1)[0]
            for p in ports:
                cell = cells.get(p, {})
                out[p][f"{side}_packets"] = cell.get("packets", 0)
                out[p][f"{side}_bytes"] = cell.get("bytes", 0)
    return out


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_prometheus(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Samples of a Prometheus text exposition: (metric name, labels, value)."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m:
            labels = dict(_LABEL.findall(m.group(3) or ""))
            try:
                out.append((m.group(1), labels, float(m.group(4))))
            except ValueError:
                continue
    return out


def read_fault_drops(metrics: str, ports: list[int]) -> dict[int, dict[str, int]]:
    """Per-port frames the switch's fault injector dropped on purpose (`--fault`),
    `{port: {"rx_fault": n, "tx_fault": n}}`, from its /metrics."""
    out = {p: {"rx_fault": 0, "tx_fault": 0} for p in ports}
    for name, labels, v in scrape_metrics(metrics):
        if name == "inswitch_port_io_drops_total" and labels.get("reason") in ("rx_fault", "tx_fault"):
            p = int(labels.get("port", -1))
            if p in out:
                out[p][labels["reason"]] = int(v)
    return out


def scrape_metrics(address: str, timeout: float = 5.0) -> list[tuple[str, dict[str, str], float]]:
    """GET http://ADDRESS/metrics and parse it."""
    url = f"http://{address}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return parse_prometheus(r.read().decode())
    except OSError as e:
        raise RackError(f"cannot read {url}: {e}") from e
