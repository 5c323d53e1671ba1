"""Client arbitration: which StreamChannel is the primary controller of a (device, role).

The rules are the P4Runtime spec's: a controller whose election id is at least the highest
the switch has ever seen for that (device, role) is the primary; everyone else is a backup;
an unset election id is always a backup; two live controllers may not share an id. Every
change of primary is announced to all controllers of that (device, role). The highest id
is remembered after its controller leaves, so a stale controller cannot take over by
reconnecting with a lower id; only a restart forgets it.
"""

from __future__ import annotations

import itertools
import queue
import threading
from dataclasses import dataclass, field
from typing import Optional

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2
from p4.v1 import p4runtime_pb2

from .status import P4RTError

ElectionId = tuple[int, int]  # (high, low)

_session_ids = itertools.count(1)


def election_id(msg: p4runtime_pb2.MasterArbitrationUpdate | p4runtime_pb2.WriteRequest | p4runtime_pb2.SetForwardingPipelineConfigRequest) -> Optional[ElectionId]:
    """The election id of a message, or None when unset (which is not the same as 0)."""
    if not msg.HasField("election_id"):
        return None
    return (msg.election_id.high, msg.election_id.low)


class Session:
    """One StreamChannel: what the switch knows of its controller, and the queue of
    messages waiting to be streamed to it. The queue is bounded: a controller that stops
    reading loses PacketIns and digests rather than growing the switch's memory."""

    QUEUE_DEPTH = 8192

    def __init__(self, peer: str = "") -> None:
        self.id = next(_session_ids)
        self.peer = peer
        self.device_id: Optional[int] = None
        self.role: Optional[str] = None
        self.election_id: Optional[ElectionId] = None
        self.queue: queue.Queue[object] = queue.Queue(self.QUEUE_DEPTH)
        self.closed = threading.Event()
        self.dropped = 0

    @property
    def arbitrated(self) -> bool:
        return self.device_id is not None

    def send(self, msg: p4runtime_pb2.StreamMessageResponse) -> bool:
        """Queue a message for the controller; False if the queue is full (message lost)."""
        if self.closed.is_set():
            return False
        try:
            self.queue.put_nowait(msg)
            return True
        except queue.Full:
            self.dropped += 1
            return False

    def terminate(self, error: P4RTError) -> None:
        """End the stream with an error status (arbitration errors end the stream)."""
        self.closed.set()
        self._put_last(error)

    def close(self) -> None:
        self.closed.set()
        self._put_last(None)

    def _put_last(self, item: object) -> None:
        """Queue the stream's last item even if the queue is full (the stream is ending, so
        undelivered messages can go)."""
        while True:
            try:
                self.queue.put_nowait(item)
                return
            except queue.Full:
                try:
                    self.queue.get_nowait()
                except queue.Empty:
                    pass


@dataclass
class _Group:
    """Controllers of one (device_id, role)."""

    sessions: list[Session] = field(default_factory=list)
    highest: Optional[ElectionId] = None
    primary: Optional[Session] = None
    role_config: Optional[any_pb2.Any] = None


class Arbiter:
    def __init__(self, device_id: int) -> None:
        self.device_id = device_id
        self._lock = threading.Lock()
        self._groups: dict[tuple[int, str], _Group] = {}

    # ---- stream side -----------------------------------------------------------------------

    def update(self, session: Session, msg: p4runtime_pb2.MasterArbitrationUpdate) -> None:
        """Apply a MasterArbitrationUpdate from `session`; raises P4RTError when the spec says
        the stream must end (the caller terminates it with that status)."""
        role = msg.role.name if msg.HasField("role") else ""
        eid = election_id(msg)
        with self._lock:
            if not session.arbitrated:
                if msg.device_id != self.device_id:
                    raise P4RTError(grpc.StatusCode.NOT_FOUND, f"this switch is device {self.device_id}, not {msg.device_id}")
            else:
                if msg.device_id != session.device_id:
                    raise P4RTError(grpc.StatusCode.FAILED_PRECONDITION, "a stream cannot change its device_id")
                if role != session.role:
                    raise P4RTError(grpc.StatusCode.FAILED_PRECONDITION, "a stream cannot change its role; open a new stream")
            group = self._groups.setdefault((msg.device_id, role), _Group())
            if eid is not None and any(s is not session and s.election_id == eid for s in group.sessions):
                raise P4RTError(grpc.StatusCode.INVALID_ARGUMENT, f"election id {eid} is already used by another controller of this role")
            if not session.arbitrated:
                session.device_id, session.role = msg.device_id, role
                group.sessions.append(session)
            session.election_id = eid
            was_primary = group.primary is session
            if eid is not None and (group.highest is None or eid >= group.highest):
                group.primary = session
                group.highest = eid
                if msg.HasField("role") and msg.role.HasField("config"):
                    group.role_config = msg.role.config
                self._notify(msg.device_id, role, group, group.sessions)
            elif was_primary:
                group.primary = None
                self._notify(msg.device_id, role, group, group.sessions)
            else:
                self._notify(msg.device_id, role, group, [session])

    def remove(self, session: Session) -> None:
        """The stream ended: forget it, and tell the others if it was the primary."""
        with self._lock:
            if not session.arbitrated:
                return
            key = (session.device_id or 0, session.role or "")
            group = self._groups.get(key)
            if group is None or session not in group.sessions:
                return
            group.sessions.remove(session)
            if group.primary is session:
                group.primary = None
                self._notify(key[0], key[1], group, group.sessions)

    def _notify(self, device_id: int, role: str, group: _Group, to: list[Session]) -> None:
        for s in to:
            resp = p4runtime_pb2.StreamMessageResponse()
            arb = resp.arbitration
            arb.device_id = device_id
            if role or group.role_config is not None:
                arb.role.name = role
                if group.role_config is not None:
                    arb.role.config.CopyFrom(group.role_config)
            if group.highest is not None:
                arb.election_id.high, arb.election_id.low = group.highest
            if group.primary is s:
                arb.status.code = code_pb2.OK
                arb.status.message = "you are the primary controller"
            elif group.primary is not None:
                arb.status.code = code_pb2.ALREADY_EXISTS
                arb.status.message = "another controller is primary; you are a backup"
            else:
                arb.status.code = code_pb2.NOT_FOUND
                arb.status.message = "there is no primary controller"
            s.send(resp)

    # ---- unary side ------------------------------------------------------------------------

    def check_primary(self, device_id: int, role: str, eid: Optional[ElectionId]) -> None:
        """PERMISSION_DENIED unless (device, role, election id) is the current primary."""
        with self._lock:
            group = self._groups.get((device_id, role))
            if group is None and role:
                raise P4RTError(grpc.StatusCode.NOT_FOUND, f"no controller has arbitrated for role {role!r}")
            primary = group.primary if group else None
            if primary is None:
                raise P4RTError(grpc.StatusCode.PERMISSION_DENIED, f"no primary controller for role {role!r}: open a StreamChannel and arbitrate first")
            if eid is None or eid != primary.election_id:
                raise P4RTError(grpc.StatusCode.PERMISSION_DENIED, f"election id {eid} is not the primary's ({primary.election_id})")

    def is_primary(self, session: Session) -> bool:
        with self._lock:
            group = self._groups.get((session.device_id or 0, session.role or ""))
            return group is not None and group.primary is session

    def primaries(self) -> list[Session]:
        """The primary stream of every role (PacketIns and digests go to these)."""
        with self._lock:
            return [g.primary for g in self._groups.values() if g.primary is not None]

    def sessions(self) -> list[Session]:
        with self._lock:
            return [s for g in self._groups.values() for s in g.sessions]
