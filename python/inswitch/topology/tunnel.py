"""The UDP-tunnel fallback: a rack for machines where we are not root. The switch's ports are
UDP sockets on loopback (`udp:BASE:N`, one Ethernet frame per datagram) and a host is any
process that attaches to "its" port's address with a userspace network stack
(`inswitch._native.TunnelHost`: ARP, ICMP echo, UDP). There are no namespaces, so nothing
here needs privileges and nothing survives the switch but the state directory.
"""

from __future__ import annotations

import importlib
import random
import socket
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from inswitch.topology.errors import RackError
from inswitch.topology.state import Host

#: Where the search for free tunnel ports starts and ends (below the ephemeral range, where
#: the kernel hands out ports of its own).
PORT_RANGE = (20000, 32000)


def free_udp_base(count: int, host: str = "127.0.0.1", attempts: int = 50) -> int:
    """A base port such that BASE .. BASE+count-1 are all free on `host`. Bound and released
    here, so another process could still grab one before the switch binds it; the switch then
    fails to start and says which port, and `up` can simply be run again."""
    lo, hi = PORT_RANGE
    rng = random.Random()
    for _ in range(attempts):
        base = rng.randrange(lo, hi - count)
        socks: list[socket.socket] = []
        try:
            for i in range(count):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                socks.append(s)
                s.bind((host, base + i))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RackError(f"found no {count} consecutive free UDP ports in {lo}-{hi} on {host}")


def ports_spec(hosts: list[Host]) -> str:
    """The switch's `--ports` for a UDP rack: port i at host i's `tunnel`, bound to host i's
    `tunnel_nic` (`udp:BASE:N@127.0.0.1:NICBASE`), so each port sends only to its host and
    drops, and counts as `rx_foreign`, datagrams from anyone else."""
    base = split_addr(hosts[0].tunnel or "")[1]
    nic_host, nic_base = split_addr(hosts[0].tunnel_nic or "")
    for i, h in enumerate(hosts):
        assert split_addr(h.tunnel or "")[1] == base + i and split_addr(h.tunnel_nic or "")[1] == nic_base + i
    return f"udp:{base}:{len(hosts)}@{nic_host}:{nic_base}"


def split_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host, int(port)


def tunnel_host_class() -> Any | None:
    """`inswitch._native.TunnelHost` if this build has it."""
    return getattr(importlib.import_module("inswitch._native"), "TunnelHost", None)


@dataclass
class PingResult:
    transmitted: int
    received: int
    rtts_ms: list[float]

    @property
    def ok(self) -> bool:
        return self.received > 0


def attach_host(cls: Any, h: Any) -> Any:
    """A `TunnelHost` being host `h` (a rack's `Host` or a fabric's `HostPlan`): on its
    switch port `h.tunnel`, sending from `h.tunnel_nic`; a fabric's host also gets its
    gateway and the gateway's router MAC as a permanent neighbour (the leaf answers no ARP)."""
    gw, gw_mac = getattr(h, "gateway", None), getattr(h, "gateway_mac", None)
    extra = {"gateway": gw, "gateway_mac": gw_mac} if gw and gw_mac else {}
    return cls(h.tunnel, h.mac, h.ip, h.prefix_len, local_addr=h.tunnel_nic, **extra)


def tunnel_ping(src: Host, dst: Host, count: int, timeout: float) -> PingResult:
    """Ping `dst` from `src` across the switch with two userspace hosts attached to their
    tunnel ports in this process: `dst` answers ARP and echo requests in its native thread,
    `src` resolves `dst` by ARP broadcast (through the switch's flood group) and pings.

    Uses `TunnelHost(switch_addr, mac, ip, prefix_len, local_addr=...)` and
    `.ping(dst_ip, count, timeout)` (round-trip seconds per echo, None when lost). Each host
    sends from its `tunnel_nic`, the only address its switch port accepts, which is what a
    host "being" h1 means in this mode (and why two pings of one host cannot overlap)."""
    cls = tunnel_host_class()
    if cls is None:
        raise RackError("ping in UDP-tunnel mode needs inswitch._native.TunnelHost (a userspace host "
                        "stack over the tunnel), which this build does not have yet")
    assert src.tunnel and dst.tunnel
    with ExitStack() as stack:
        try:
            responder = attach_host(cls, dst)
            stack.callback(responder.close)
            pinger = attach_host(cls, src)
            stack.callback(pinger.close)
            rtts = list(pinger.ping(dst.ip, count, timeout))
        except (TypeError, AttributeError) as e:
            raise RackError(f"inswitch._native.TunnelHost does not have the API the rack expects: {e}") from e
        except (ValueError, OSError) as e:
            raise RackError(f"ping {src.name} -> {dst.name} over the tunnel failed: {e}") from e
    got = [r * 1000.0 for r in rtts if r is not None]
    return PingResult(transmitted=count, received=len(got), rtts_ms=got)
