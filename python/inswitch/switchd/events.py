"""Moving data-plane events to controllers: PacketIns and digest lists.

Each runs in its own thread blocked in the native wait call (which releases the GIL), so an
idle switch costs nothing and a busy one never makes a gRPC handler wait. Both deliver to
the primary controller(s) only, as the spec says; with no primary the event is counted and
dropped.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from p4.v1 import p4data_pb2, p4runtime_pb2

from inswitch.p4rt import bytestrings
from inswitch.p4rt.p4info import PACKET_IN_INGRESS_PORT, PORT_METADATA_BITS

from .arbitration import Arbiter
from .device import Device
from .opstats import OpStats

#: How long a native wait blocks before the thread checks whether it should stop.
POLL_SECONDS = 0.2


class _Worker(threading.Thread):
    def __init__(self, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self._stopping = threading.Event()

    def stop(self) -> None:
        """Ask the thread to finish and wait for it (it must not hold the data plane when
        the data plane is stopped)."""
        self._stopping.set()
        if self.is_alive():
            self.join(timeout=5)


class PacketInPump(_Worker):
    """Data plane frames sent to the CPU port → PacketIn stream messages."""

    def __init__(self, device: Device, arbiter: Arbiter, stats: OpStats) -> None:
        super().__init__("p4rt-packet-in")
        self.device, self.arbiter, self.stats = device, arbiter, stats

    def run(self) -> None:
        while not self._stopping.is_set():
            try:
                batch = self.device.dp.wait_packet_ins(POLL_SECONDS, 1024)
            except ValueError:  # the data plane was stopped under us
                return
            if not batch:
                continue
            primaries = self.arbiter.primaries()
            for frame, port in batch:
                msg = p4runtime_pb2.StreamMessageResponse()
                msg.packet.payload = frame
                md = msg.packet.metadata.add()
                md.metadata_id = PACKET_IN_INGRESS_PORT
                md.value = bytestrings.from_int(port, PORT_METADATA_BITS)
                sent = sum(1 for s in primaries if s.send(msg))
                self.stats.count("packet_in.delivered" if sent else ("packet_in.no_primary" if not primaries else "packet_in.queue_full"))


@dataclass
class _DigestState:
    buffer: list[bytes] = field(default_factory=list)
    buffered: set[bytes] = field(default_factory=set)
    first_ns: int = 0
    cached: dict[bytes, int] = field(default_factory=dict)  # data -> list id awaiting its ack


class DigestEngine(_Worker):
    """Digest messages → DigestList stream messages, following each digest's DigestEntry
    config: a list goes out when it holds `max_list_size` distinct messages or its oldest
    message is `max_timeout_ns` old; data sent and not yet acknowledged is not sent again
    until its DigestListAck arrives or `ack_timeout_ns` passes. That suppression matters:
    the forward program reports an unknown source MAC for every packet until the controller
    installs it, and the controller should hear about it once."""

    def __init__(self, device: Device, arbiter: Arbiter, stats: OpStats) -> None:
        super().__init__("p4rt-digests")
        self.device, self.arbiter, self.stats = device, arbiter, stats
        self._lock = threading.Lock()
        self._state: dict[int, _DigestState] = {}
        self._outstanding: dict[int, tuple[int, list[bytes], int]] = {}  # list id -> (digest id, data, sent ns)
        self._list_ids = itertools.count(1)
        #: Digest id -> a handler in this process (the standalone L2 learner), called with
        #: each message before (and regardless of) delivery to controllers.
        self.local: dict[int, Callable[[bytes], None]] = {}
        device.on_change.append(self.reset)

    def reset(self) -> None:
        """Forget buffers and acknowledgements (the pipeline or a digest config changed)."""
        with self._lock:
            live = set(self.device.digest_configs)
            for did in list(self._state):
                if did not in live:
                    del self._state[did]
            for lid, (did, _, _) in list(self._outstanding.items()):
                if did not in live:
                    del self._outstanding[lid]

    def ack(self, digest_id: int, list_id: int) -> bool:
        """A DigestListAck: its data may be reported again. False if the list is unknown."""
        with self._lock:
            out = self._outstanding.get(list_id)
            if out is None or out[0] != digest_id:
                return False
            del self._outstanding[list_id]
            st = self._state.get(digest_id)
            if st is not None:
                for d in out[1]:
                    if st.cached.get(d) == list_id:
                        del st.cached[d]
            return True

    def run(self) -> None:
        while not self._stopping.is_set():
            try:
                items = self.device.dp.wait_digests(self._wait_seconds(), 4096)
            except ValueError:
                return
            now = time.monotonic_ns()
            local = self.local
            if local:
                for did, data in items:
                    h = local.get(did)
                    if h is not None:
                        h(bytes(data))
            with self._lock:
                for did, data in items:
                    if did in local and did not in self.device.digest_configs:
                        continue  # for the local handler only: no controller asked for it
                    self._add(did, bytes(data), now)
                self._flush_due(now)
                self._expire(now)

    def _wait_seconds(self) -> float:
        """Until the next buffer or acknowledgement deadline (bounded), so timeouts fire on
        time without polling fast when nothing is pending."""
        now = time.monotonic_ns()
        deadline: Optional[int] = None
        with self._lock:
            for did, st in self._state.items():
                cfg = self.device.digest_configs.get(did)
                if cfg is not None and st.buffer:
                    d = st.first_ns + cfg.max_timeout_ns
                    deadline = d if deadline is None else min(deadline, d)
            for did, _, sent in self._outstanding.values():
                cfg = self.device.digest_configs.get(did)
                if cfg is not None:
                    d = sent + cfg.ack_timeout_ns
                    deadline = d if deadline is None else min(deadline, d)
        if deadline is None:
            return POLL_SECONDS
        return min(POLL_SECONDS, max(0.0005, (deadline - now) / 1e9))

    def _add(self, did: int, data: bytes, now: int) -> None:
        cfg = self.device.digest_configs.get(did)
        if cfg is None:
            self.stats.count("digest.not_enabled")
            return
        st = self._state.setdefault(did, _DigestState())
        if data in st.buffered or data in st.cached:
            self.stats.count("digest.suppressed")
            return
        if not st.buffer:
            st.first_ns = now
        st.buffer.append(data)
        st.buffered.add(data)
        if cfg.max_list_size > 0 and len(st.buffer) >= cfg.max_list_size:
            self._send(did, st, cfg, now)

    def _flush_due(self, now: int) -> None:
        for did, st in self._state.items():
            cfg = self.device.digest_configs.get(did)
            if cfg is not None and st.buffer and now - st.first_ns >= cfg.max_timeout_ns:
                self._send(did, st, cfg, now)

    def _expire(self, now: int) -> None:
        for lid, (did, data, sent) in list(self._outstanding.items()):
            cfg = self.device.digest_configs.get(did)
            if cfg is None or now - sent >= cfg.ack_timeout_ns:
                del self._outstanding[lid]
                st = self._state.get(did)
                if st is not None:
                    for d in data:
                        if st.cached.get(d) == lid:
                            del st.cached[d]

    def _send(self, did: int, st: _DigestState, cfg: p4runtime_pb2.DigestEntry.Config, now: int) -> None:
        data, st.buffer, st.buffered = st.buffer, [], set()
        lid = next(self._list_ids)
        msg = p4runtime_pb2.StreamMessageResponse()
        dl = msg.digest
        dl.digest_id = did
        dl.list_id = lid
        dl.timestamp = time.time_ns()
        fields = self._fields(did)
        for d in data:
            dl.data.append(_p4data(d, fields))
        primaries = self.arbiter.primaries()
        sent = sum(1 for s in primaries if s.send(msg))
        self.stats.count("digest.lists_sent" if sent else "digest.lists_undelivered")
        self.stats.count("digest.messages_sent" if sent else "digest.messages_undelivered", len(data))
        if sent and cfg.ack_timeout_ns > 0:
            self._outstanding[lid] = (did, data, now)
            for d in data:
                st.cached[d] = lid

    def _fields(self, did: int) -> tuple[tuple[str, int], ...]:
        d = self.device.pipeline.index.digests.by_id.get(did)
        return d.fields if d is not None else ()


def _p4data(data: bytes, fields: tuple[tuple[str, int], ...]) -> p4data_pb2.P4Data:
    """A digest message as P4Data: a struct with one bitstring per field, cut from the data
    plane's packed bytes (each field ceil(bits/8) bytes, big-endian, in order)."""
    out = p4data_pb2.P4Data()
    widths = [(b + 7) // 8 for _, b in fields]
    if len(fields) <= 1 or sum(widths) != len(data):
        out.bitstring = bytestrings.canonical(data)
        return out
    off = 0
    for w in widths:
        out.struct.members.add().bitstring = bytestrings.canonical(data[off : off + w])
        off += w
    return out
