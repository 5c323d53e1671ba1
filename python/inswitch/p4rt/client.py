"""A P4Runtime controller for inswitch switches (or any P4Runtime server), by name.

`SwitchClient` opens the StreamChannel, becomes primary, and then lets the caller say
`insert_entry("l2_dmac", {"dst_addr": "02:00:00:00:00:01"}, "l2_forward", {"port": 1})`
instead of building protobufs: names resolve through the switch's P4Info and values
(ints, bytes, MAC and IP strings) become canonical P4Runtime byte strings.

Writes go out one per RPC unless made inside `with client.batch():`, which sends all the
updates of the block in one Write, the way to reach thousands of updates per second.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from contextlib import contextmanager
from typing import Any, Iterable, Iterator, Mapping, Optional, Sequence, Union

import grpc
from p4.config.v1 import p4info_pb2
from p4.v1 import p4data_pb2, p4runtime_pb2, p4runtime_pb2_grpc

from . import bytestrings
from .errors import P4RuntimeError
from .schema import FieldInfo, P4InfoIndex, TableInfo
from .tls import TlsFiles

Update = p4runtime_pb2.Update
PortSpec = Union[int, tuple[int, int]]  # a port, or (port, instance)

_UPDATES_TAG = bytes([(4 << 3) | 2])  # WriteRequest.updates: field 4, length-delimited


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


#: Metadata we accept (gRPC's default is 8 KB): the per-update error report of a large batch
#: travels as metadata. Declared to the switch in `_LIMIT_HEADER`, so it accepts Writes whose
#: report only fits this (it refuses them from clients with the default).
_MAX_METADATA = 64 * 1024 * 1024
_LIMIT_HEADER = (("inswitch-max-metadata-size", str(_MAX_METADATA)),)
_CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    ("grpc.max_metadata_size", _MAX_METADATA),
    ("grpc.absolute_max_metadata_size", _MAX_METADATA),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


def _fill_match(fm: p4runtime_pb2.FieldMatch, f: FieldInfo, value: Any) -> bool:
    """Fill `fm` for a user value; False for a don't-care, which P4Runtime says to omit
    (None, a /0 prefix, a zero ternary mask)."""
    if value is None:
        return False
    bw = f.bitwidth
    if f.kind == "exact":
        fm.exact.value = bytestrings.encode(value, bw)
    elif f.kind == "optional":
        fm.optional.value = bytestrings.encode(value, bw)
    elif f.kind == "lpm":
        v, plen = bytestrings.parse_prefix(value, bw)
        if plen == 0:
            return False
        fm.lpm.value = bytestrings.from_int(v & bytestrings.prefix_mask(plen, bw), bw)  # "10.0.0.1/24" means 10.0.0.0/24
        fm.lpm.prefix_len = plen
    elif f.kind == "ternary":
        v, m = bytestrings.parse_ternary(value, bw)
        if m == 0:
            return False
        fm.ternary.value = bytestrings.from_int(v & m, bw)
        fm.ternary.mask = bytestrings.from_int(m, bw)
    elif f.kind == "range":
        lo, hi = value
        fm.range.low = bytestrings.encode(lo, bw)
        fm.range.high = bytestrings.encode(hi, bw)
    else:
        raise ValueError(f"match field {f.name} has an unsupported match kind")
    fm.field_id = f.id
    return True


def _match_value(fm: p4runtime_pb2.FieldMatch) -> Any:
    kind = fm.WhichOneof("field_match_type")
    if kind == "exact":
        return bytestrings.to_int(fm.exact.value)
    if kind == "optional":
        return bytestrings.to_int(fm.optional.value)
    if kind == "lpm":
        return (bytestrings.to_int(fm.lpm.value), fm.lpm.prefix_len)
    if kind == "ternary":
        return (bytestrings.to_int(fm.ternary.value), bytestrings.to_int(fm.ternary.mask))
    if kind == "range":
        return (bytestrings.to_int(fm.range.low), bytestrings.to_int(fm.range.high))
    return None


class SwitchClient:
    """A primary P4Runtime controller session with one switch (device).

    Raises ConnectionError if nothing answers at `address` within `timeout` seconds, or if
    another controller holds a higher election id (unless `require_primary=False`, which
    gives a read-only backup session). Use as a context manager or call `close()`.

    `tls_ca`, `tls_cert`, `tls_key` (PEM files) talk TLS to a switch started with
    `--tls-cert/--tls-key/--tls-ca`: the CA that signed the switch's certificate, and the
    certificate (with its key) this controller presents."""

    def __init__(self, address: str = "127.0.0.1:9559", device_id: int = 1, election_id: tuple[int, int] = (0, 1), timeout: float = 10.0, role: str = "", require_primary: bool = True,
                 tls_ca: Optional[str] = None, tls_cert: Optional[str] = None, tls_key: Optional[str] = None) -> None:
        self.address = address
        self.device_id = device_id
        self.election_id = election_id
        self.timeout = timeout
        self.role = role
        self.is_primary = False
        self.stream_errors: deque[p4runtime_pb2.StreamError] = deque(maxlen=1000)
        self._closed = False
        self._local = threading.local()
        self._schema: Optional[P4InfoIndex] = None
        self._out: queue.Queue[Optional[p4runtime_pb2.StreamMessageRequest]] = queue.Queue()
        self._arbitration: queue.Queue[Optional[p4runtime_pb2.MasterArbitrationUpdate]] = queue.Queue()
        self._packets: queue.Queue[Optional[p4runtime_pb2.PacketIn]] = queue.Queue()
        self._digests: queue.Queue[Optional[p4runtime_pb2.DigestList]] = queue.Queue()
        self._stream_status: Optional[str] = None
        tls = TlsFiles(cert=tls_cert, key=tls_key, ca=tls_ca)
        if tls.enabled:
            self._channel = grpc.secure_channel(address, tls.channel_credentials(), options=_CHANNEL_OPTIONS)
        else:
            self._channel = grpc.insecure_channel(address, options=_CHANNEL_OPTIONS)
        try:
            grpc.channel_ready_future(self._channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            self._channel.close()
            how = " over TLS (is it serving TLS, signed by our CA, and does it accept our certificate?)" if tls.enabled else ""
            raise ConnectionError(f"no P4Runtime server answers at {address}{how} (waited {timeout:g} s)") from None
        self._stub = p4runtime_pb2_grpc.P4RuntimeStub(self._channel)
        self._write_raw = self._channel.unary_unary("/p4.v1.P4Runtime/Write", request_serializer=bytes, response_deserializer=p4runtime_pb2.WriteResponse.FromString)
        self._stream = self._stub.StreamChannel(self._requests())
        self._reader = threading.Thread(target=self._read_stream, name=f"p4rt-client-{address}", daemon=True)
        self._reader.start()
        self._arbitrate()
        try:
            arb = self._arbitration.get(timeout=timeout)
        except queue.Empty:
            arb = None
        if arb is None:
            why = self._stream_status or "no arbitration answer"
            self.close()
            raise ConnectionError(f"the switch at {address} did not accept the controller session: {why}")
        if require_primary and not self.is_primary:
            highest = (arb.election_id.high, arb.election_id.low) if arb.HasField("election_id") else None
            self.close()
            raise ConnectionError(f"not the primary controller of device {device_id} at {address}: election id {election_id} is below the highest the switch has seen ({highest})")

    # ---- session ---------------------------------------------------------------------------

    def _requests(self) -> Iterator[p4runtime_pb2.StreamMessageRequest]:
        while True:
            msg = self._out.get()
            if msg is None:
                return
            yield msg

    def _arbitrate(self) -> None:
        req = p4runtime_pb2.StreamMessageRequest()
        arb = req.arbitration
        arb.device_id = self.device_id
        if self.role:
            arb.role.name = self.role
        arb.election_id.high, arb.election_id.low = self.election_id
        self._out.put(req)

    def _read_stream(self) -> None:
        try:
            for resp in self._stream:
                kind = resp.WhichOneof("update")
                if kind == "arbitration":
                    self.is_primary = resp.arbitration.status.code == 0
                    self._arbitration.put(resp.arbitration)
                elif kind == "packet":
                    self._packets.put(resp.packet)
                elif kind == "digest":
                    self._digests.put(resp.digest)
                elif kind == "error":
                    self.stream_errors.append(resp.error)
        except grpc.RpcError as e:
            code = e.code() if hasattr(e, "code") else None
            self._stream_status = f"{code.name if code else 'error'}: {e.details() if hasattr(e, 'details') else e}"
        finally:
            self.is_primary = False
            self._arbitration.put(None)

    def close(self) -> None:
        """End the session (the switch then elects no one until a controller arbitrates)."""
        if self._closed:
            return
        self._closed = True
        self._out.put(None)
        if hasattr(self, "_reader"):
            self._reader.join(timeout=1.0)
        if hasattr(self, "_stream"):
            self._stream.cancel()
        self._channel.close()

    def __enter__(self) -> "SwitchClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- pipeline --------------------------------------------------------------------------

    def capabilities(self) -> str:
        """The P4Runtime API version the switch implements."""
        try:
            return self._stub.Capabilities(p4runtime_pb2.CapabilitiesRequest(), timeout=self.timeout).p4runtime_api_version
        except grpc.RpcError as e:
            raise P4RuntimeError.from_rpc(e) from None

    def p4info(self) -> p4info_pb2.P4Info:
        """The P4Info the switch runs now (also refreshes the names this client resolves)."""
        req = p4runtime_pb2.GetForwardingPipelineConfigRequest(device_id=self.device_id, response_type=p4runtime_pb2.GetForwardingPipelineConfigRequest.P4INFO_AND_COOKIE)
        try:
            resp = self._stub.GetForwardingPipelineConfig(req, timeout=self.timeout)
        except grpc.RpcError as e:
            raise P4RuntimeError.from_rpc(e) from None
        self._schema = P4InfoIndex(resp.config.p4info)
        return resp.config.p4info

    @property
    def schema(self) -> P4InfoIndex:
        if self._schema is None:
            self.p4info()
        assert self._schema is not None
        return self._schema

    def set_pipeline(self, programs: Sequence[str], target: str | None = None) -> None:
        """Load a program set (all forwarding state starts over). The P4Info sent is derived
        locally from the same declarations the switch uses, so ids agree; `target` is the
        switch's (`inswitch switch --target`), which sizes some programs (inaas)."""
        from .p4info import device_config, p4info_for

        p4 = p4info_for(list(programs), target)
        req = p4runtime_pb2.SetForwardingPipelineConfigRequest(device_id=self.device_id, role=self.role, action=p4runtime_pb2.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT)
        req.election_id.high, req.election_id.low = self.election_id
        req.config.p4info.CopyFrom(p4)
        req.config.p4_device_config = device_config(list(programs))
        try:
            self._stub.SetForwardingPipelineConfig(req, timeout=self.timeout)
        except grpc.RpcError as e:
            raise P4RuntimeError.from_rpc(e) from None
        self._schema = P4InfoIndex(p4)

    # ---- raw RPCs --------------------------------------------------------------------------

    def write(self, updates: Sequence[p4runtime_pb2.Update]) -> None:
        """Send updates in one Write (or queue them if inside `batch()`)."""
        pending = getattr(self._local, "batch", None)
        if pending is not None:
            pending.extend(updates)
            return
        self._send_write(updates)

    def _send_write(self, updates: Sequence[p4runtime_pb2.Update]) -> None:
        # Serialize each update on its own and concatenate: a repeated message field is just
        # its elements back to back, and this skips the copy `WriteRequest.updates.extend`
        # makes of every update (pure-Python protobuf makes that copy costly).
        head = p4runtime_pb2.WriteRequest(device_id=self.device_id, role=self.role)
        head.election_id.high, head.election_id.low = self.election_id
        parts = [head.SerializeToString()]
        for u in updates:
            body = u.SerializeToString()
            parts.append(_UPDATES_TAG + _varint(len(body)) + body)
        try:
            self._write_raw(b"".join(parts), timeout=self.timeout, metadata=_LIMIT_HEADER)
        except grpc.RpcError as e:
            raise P4RuntimeError.from_rpc(e) from None

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Collect this thread's writes inside the block and send them as one Write at its
        end (CONTINUE_ON_ERROR: a P4RuntimeError then lists every failed update). Nested
        blocks join the outer one. Insert-or-modify helpers read the switch to decide."""
        if getattr(self._local, "batch", None) is not None:
            yield
            return
        self._local.batch = []
        try:
            yield
            updates = self._local.batch
        finally:
            self._local.batch = None
        if updates:
            self._send_write(updates)

    @property
    def batching(self) -> bool:
        return getattr(self._local, "batch", None) is not None

    def read(self, entities: Sequence[p4runtime_pb2.Entity]) -> list[p4runtime_pb2.Entity]:
        req = p4runtime_pb2.ReadRequest(device_id=self.device_id, role=self.role)
        req.entities.extend(entities)
        try:
            return [e for resp in self._stub.Read(req, timeout=self.timeout, metadata=_LIMIT_HEADER) for e in resp.entities]
        except grpc.RpcError as e:
            raise P4RuntimeError.from_rpc(e) from None

    @staticmethod
    def _update(kind: int, entity: p4runtime_pb2.Entity) -> p4runtime_pb2.Update:
        u = p4runtime_pb2.Update(type=kind)
        u.entity.CopyFrom(entity)
        return u

    # ---- tables ----------------------------------------------------------------------------

    def _fill_table_entry(self, te: p4runtime_pb2.TableEntry, table: str, match: Optional[Mapping[str, Any]], priority: int) -> TableInfo:
        t = self.schema.tables.get(table)
        te.table_id = t.id
        te.priority = priority
        for key, value in (match or {}).items():
            if not _fill_match(te.match.add(), t.field(key), value):
                del te.match[-1]
        return t

    def _action(self, te: Any, action: str, params: Optional[Mapping[str, Any]]) -> None:
        """Fill the action of a table entry (or an action profile member)."""
        a = self.schema.actions.get(action)
        msg = te.action.action if isinstance(te, p4runtime_pb2.TableEntry) else te.action
        msg.action_id = a.id
        for name, value in (params or {}).items():
            p = a.param(name)
            prm = msg.params.add()
            prm.param_id = p.id
            prm.value = bytestrings.encode(value, p.bitwidth)

    def table_update(self, kind: int, table: str, match: Optional[Mapping[str, Any]], action: Optional[str] = None, params: Optional[Mapping[str, Any]] = None, priority: int = 0, member: Optional[int] = None, group: Optional[int] = None) -> p4runtime_pb2.Update:
        """The Update for a table entry (INSERT/MODIFY/DELETE), for callers building batches.
        An entry of a table with an action profile points at a `member` or a `group` instead
        of taking an action."""
        u = p4runtime_pb2.Update(type=kind)
        te = u.entity.table_entry
        self._fill_table_entry(te, table, match, priority)
        if action is not None:
            self._action(te, action, params)
        elif member is not None:
            te.action.action_profile_member_id = member
        elif group is not None:
            te.action.action_profile_group_id = group
        return u

    def insert_entry(self, table: str, match: Mapping[str, Any], action: Optional[str] = None, params: Optional[Mapping[str, Any]] = None, priority: int = 0, member: Optional[int] = None, group: Optional[int] = None) -> None:
        """Add an entry. Match keys are field names ("hdr.ethernet.dst_addr" or just
        "dst_addr"); values as described in the module docs; None means don't-care. In a
        table with an action profile, give `member` or `group` instead of an action."""
        self.write([self.table_update(Update.INSERT, table, match, action, params, priority, member, group)])

    # ---- action profiles -------------------------------------------------------------------

    def member_update(self, kind: int, profile: str, member_id: int, action: Optional[str] = None, params: Optional[Mapping[str, Any]] = None) -> p4runtime_pb2.Update:
        u = p4runtime_pb2.Update(type=kind)
        m = u.entity.action_profile_member
        m.action_profile_id = self.schema.action_profiles.get(profile).id
        m.member_id = member_id
        if action is not None:
            self._action(m, action, params)
        return u

    def group_update(self, kind: int, profile: str, group_id: int, members: Sequence[Union[int, tuple[int, int]]] = ()) -> p4runtime_pb2.Update:
        u = p4runtime_pb2.Update(type=kind)
        g = u.entity.action_profile_group
        prof = self.schema.action_profiles.get(profile)
        g.action_profile_id, g.group_id = prof.id, group_id
        for m in members:
            mid, w = m if isinstance(m, tuple) else (m, 1)
            x = g.members.add()
            x.member_id, x.weight = mid, w
        return u

    def insert_member(self, profile: str, member_id: int, action: str, params: Optional[Mapping[str, Any]] = None) -> None:
        """Add an action profile member: an action with its data, by id."""
        self.write([self.member_update(Update.INSERT, profile, member_id, action, params)])

    def delete_member(self, profile: str, member_id: int) -> None:
        self.write([self.member_update(Update.DELETE, profile, member_id)])

    def insert_group(self, profile: str, group_id: int, members: Sequence[Union[int, tuple[int, int]]]) -> None:
        """Add an action selector group of member ids (or (member id, weight))."""
        self.write([self.group_update(Update.INSERT, profile, group_id, members)])

    def modify_group(self, profile: str, group_id: int, members: Sequence[Union[int, tuple[int, int]]]) -> None:
        self.write([self.group_update(Update.MODIFY, profile, group_id, members)])

    def delete_group(self, profile: str, group_id: int) -> None:
        self.write([self.group_update(Update.DELETE, profile, group_id)])

    def read_members(self, profile: str) -> dict[int, dict[str, Any]]:
        """Members of a profile: {member id: {"action": name, "params": {name: int}}}."""
        ent = p4runtime_pb2.Entity()
        ent.action_profile_member.action_profile_id = self.schema.action_profiles.get(profile).id
        out = {}
        for e in self.read([ent]):
            m = e.action_profile_member
            act = self.schema.actions.by_id.get(m.action.action_id)
            params = {(act.param(p.param_id).name if act else str(p.param_id)): bytestrings.to_int(p.value) for p in m.action.params}
            out[m.member_id] = {"action": act.alias if act else m.action.action_id, "params": params}
        return out

    def read_groups(self, profile: str) -> dict[int, list[tuple[int, int]]]:
        """Groups of a selector: {group id: [(member id, weight)]}."""
        ent = p4runtime_pb2.Entity()
        ent.action_profile_group.action_profile_id = self.schema.action_profiles.get(profile).id
        return {e.action_profile_group.group_id: [(m.member_id, m.weight) for m in e.action_profile_group.members]
                for e in self.read([ent])}

    def modify_entry(self, table: str, match: Mapping[str, Any], action: str, params: Optional[Mapping[str, Any]] = None, priority: int = 0) -> None:
        self.write([self.table_update(Update.MODIFY, table, match, action, params, priority)])

    def delete_entry(self, table: str, match: Mapping[str, Any], priority: int = 0) -> None:
        self.write([self.table_update(Update.DELETE, table, match, None, None, priority)])

    def insert_entries(self, table: str, entries: Iterable[Mapping[str, Any]], batch_size: int = 100) -> int:
        """Insert many entries ({"match", "action", "params", "priority"} dicts, as
        `read_entries` returns them) in Writes of `batch_size` updates; returns the count."""
        n = 0
        chunk: list[p4runtime_pb2.Update] = []
        for e in entries:
            chunk.append(self.table_update(Update.INSERT, table, e["match"], e["action"], e.get("params"), e.get("priority", 0)))
            if len(chunk) >= batch_size:
                self.write(chunk)
                n += len(chunk)
                chunk = []
        if chunk:
            self.write(chunk)
            n += len(chunk)
        return n

    def _entry_dict(self, te: p4runtime_pb2.TableEntry) -> dict[str, Any]:
        t = self.schema.tables.get(te.table_id)
        match = {}
        for fm in te.match:
            f = t.field_by_id(fm.field_id)
            match[f.name if f else str(fm.field_id)] = _match_value(fm)
        kind = te.action.WhichOneof("type")
        if kind in ("action_profile_member_id", "action_profile_group_id"):
            ref = "member" if kind == "action_profile_member_id" else "group"
            out: dict[str, Any] = {"match": match, ref: getattr(te.action, kind), "priority": te.priority}
        else:
            a = te.action.action
            act = self.schema.actions.by_id.get(a.action_id)
            params = {(act.param(p.param_id).name if act else str(p.param_id)): bytestrings.to_int(p.value) for p in a.params}
            out = {"match": match, "action": act.alias if act else a.action_id, "params": params, "priority": te.priority}
        if te.controller_metadata or te.metadata:
            out["controller_metadata"], out["metadata"] = te.controller_metadata, bytes(te.metadata)
        return out

    def read_entries(self, table: str) -> list[dict[str, Any]]:
        """Entries of a table as {"match": {field: value}, "action": name, "params": {name:
        int}, "priority": p}; exact values are ints, LPM (value, prefix_len), ternary
        (value, mask)."""
        t = self.schema.tables.get(table)
        ent = p4runtime_pb2.Entity()
        ent.table_entry.table_id = t.id
        return [self._entry_dict(e.table_entry) for e in self.read([ent])]

    def default_action(self, table: str) -> dict[str, Any]:
        """The table's default entry ({"action", "params"})."""
        t = self.schema.tables.get(table)
        ent = p4runtime_pb2.Entity()
        ent.table_entry.table_id = t.id
        ent.table_entry.is_default_action = True
        got = self.read([ent])
        d = self._entry_dict(got[0].table_entry)
        return {"action": d["action"], "params": d["params"]}

    def set_default_action(self, table: str, action: str, params: Optional[Mapping[str, Any]] = None) -> None:
        u = p4runtime_pb2.Update(type=Update.MODIFY)
        te = u.entity.table_entry
        te.table_id = self.schema.tables.get(table).id
        te.is_default_action = True
        self._action(te, action, params)
        self.write([u])

    def reset_default_action(self, table: str) -> None:
        """Back to the program's initial default action."""
        t = self.schema.tables.get(table)
        ent = p4runtime_pb2.Entity()
        ent.table_entry.table_id = t.id
        ent.table_entry.is_default_action = True
        self.write([self._update(Update.MODIFY, ent)])

    # ---- registers -------------------------------------------------------------------------

    def read_register(self, name: str, index: Optional[int] = None) -> list[tuple[int, int]]:
        """[(index, value)] for one cell, or every cell when `index` is None."""
        r = self.schema.registers.get(name)
        ent = p4runtime_pb2.Entity()
        ent.register_entry.register_id = r.id
        if index is not None:
            ent.register_entry.index.index = index
        return [(e.register_entry.index.index, bytestrings.to_int(e.register_entry.data.bitstring)) for e in self.read([ent])]

    def register_cells(self, name: str, index: Optional[int] = None) -> dict[str, Any]:
        """A register decoded into its named fields: {"register", "size", "fields", "cells":
        [{"index", "raw", field: int, ...}]} (e.g. `packets` and `bytes` for
        forward.rx_port_counters); see `decode.register_cells`."""
        from . import decode

        return decode.register_cells(self, name, index)

    def table_entries(self, table: str, limit: Optional[int] = None) -> dict[str, Any]:
        """A table decoded: entries with MACs, dotted quads and prefixes as text, its key
        fields and its default action; see `decode.table_entries`."""
        from . import decode

        return decode.table_entries(self, table, limit)

    def write_register(self, name: str, index: Optional[int], value: int) -> None:
        """Set one cell, or every cell when `index` is None."""
        r = self.schema.registers.get(name)
        ent = p4runtime_pb2.Entity()
        ent.register_entry.register_id = r.id
        if index is not None:
            ent.register_entry.index.index = index
        ent.register_entry.data.bitstring = bytestrings.encode(value, r.bitwidth)
        self.write([self._update(Update.MODIFY, ent)])

    # ---- packet replication ----------------------------------------------------------------

    @staticmethod
    def _replicas(msg: Any, ports: Iterable[PortSpec]) -> None:
        for p in ports:
            port, instance = p if isinstance(p, tuple) else (p, 0)
            msg.replicas.add(egress_port=port, instance=instance)

    def _upsert(self, ent: p4runtime_pb2.Entity, exists: bool | None) -> None:
        """INSERT, or MODIFY if the entity exists. Outside a batch we try INSERT first;
        inside one, `exists` (from a read) decides."""
        if self.batching:
            self.write([self._update(Update.MODIFY if exists else Update.INSERT, ent)])
            return
        try:
            self.write([self._update(Update.INSERT, ent)])
        except P4RuntimeError as e:
            if e.code != grpc.StatusCode.ALREADY_EXISTS:
                raise
            self.write([self._update(Update.MODIFY, ent)])

    def _pre_exists(self, ent: p4runtime_pb2.Entity) -> bool:
        try:
            return bool(self.read([ent]))
        except P4RuntimeError as e:
            if e.code == grpc.StatusCode.NOT_FOUND:
                return False
            raise

    def set_multicast_group(self, group_id: int, ports: Sequence[PortSpec]) -> None:
        """Create or replace a multicast group: a port, or (port, instance), per replica."""
        ent = p4runtime_pb2.Entity()
        mg = ent.packet_replication_engine_entry.multicast_group_entry
        mg.multicast_group_id = group_id
        exists = None
        if self.batching:
            probe = p4runtime_pb2.Entity()
            probe.packet_replication_engine_entry.multicast_group_entry.multicast_group_id = group_id
            exists = self._pre_exists(probe)
        self._replicas(mg, ports)
        self._upsert(ent, exists)

    def delete_multicast_group(self, group_id: int) -> None:
        ent = p4runtime_pb2.Entity()
        ent.packet_replication_engine_entry.multicast_group_entry.multicast_group_id = group_id
        self.write([self._update(Update.DELETE, ent)])

    def read_multicast_groups(self, group_id: int = 0) -> dict[int, list[tuple[int, int]]]:
        """{group: [(port, instance)]}, all groups when `group_id` is 0."""
        ent = p4runtime_pb2.Entity()
        ent.packet_replication_engine_entry.multicast_group_entry.multicast_group_id = group_id
        out = {}
        for e in self.read([ent]):
            mg = e.packet_replication_engine_entry.multicast_group_entry
            out[mg.multicast_group_id] = [(r.egress_port if r.WhichOneof("port_kind") == "egress_port" else bytestrings.to_int(r.port), r.instance) for r in mg.replicas]
        return out

    def set_clone_session(self, session_id: int, ports: Sequence[PortSpec], truncate_len: int = 0) -> None:
        """Create or replace a clone (mirror) session; copies keep `truncate_len` bytes (0: all)."""
        ent = p4runtime_pb2.Entity()
        cs = ent.packet_replication_engine_entry.clone_session_entry
        cs.session_id = session_id
        cs.packet_length_bytes = truncate_len
        exists = None
        if self.batching:
            probe = p4runtime_pb2.Entity()
            probe.packet_replication_engine_entry.clone_session_entry.session_id = session_id
            exists = self._pre_exists(probe)
        self._replicas(cs, ports)
        self._upsert(ent, exists)

    def delete_clone_session(self, session_id: int) -> None:
        ent = p4runtime_pb2.Entity()
        ent.packet_replication_engine_entry.clone_session_entry.session_id = session_id
        self.write([self._update(Update.DELETE, ent)])

    # ---- packet I/O ------------------------------------------------------------------------

    def _metadata_id(self, table: dict[int, tuple[str, int]], name: str, default: int) -> int:
        return next((i for i, (n, _) in table.items() if n == name), default)

    def packet_out(self, frame: bytes, egress_port: Optional[int] = None) -> None:
        """Inject a frame: out of `egress_port` directly, or through the ingress pipeline
        (as if it arrived on the CPU port) when None. Errors come back asynchronously in
        `stream_errors`."""
        req = p4runtime_pb2.StreamMessageRequest()
        req.packet.payload = bytes(frame)
        if egress_port is not None:
            md = req.packet.metadata.add()
            md.metadata_id = self._metadata_id(self.schema.packet_out, "egress_port", 1)
            md.value = bytestrings.from_int(egress_port, self.schema.packet_out.get(md.metadata_id, ("", 32))[1])
        self._out.put(req)

    def packet_ins(self, timeout: float = 1.0) -> list[tuple[bytes, int]]:
        """PacketIns received: [(frame, ingress_port)]. Waits up to `timeout` for the first,
        then returns it with whatever else has already arrived."""
        pid = self._metadata_id(self.schema.packet_in, "ingress_port", 1)
        out = []
        for pkt in self._drain(self._packets, timeout):
            port = next((bytestrings.to_int(m.value) for m in pkt.metadata if m.metadata_id == pid), -1)
            out.append((bytes(pkt.payload), port))
        return out

    @staticmethod
    def _drain(q: "queue.Queue[Any]", timeout: float) -> list[Any]:
        try:
            first = q.get(timeout=timeout) if timeout > 0 else q.get_nowait()
        except queue.Empty:
            return []
        items = [first]
        while True:
            try:
                items.append(q.get_nowait())
            except queue.Empty:
                break
        return [i for i in items if i is not None]

    # ---- digests ---------------------------------------------------------------------------

    def enable_digest(self, name: str, max_timeout_ns: int = 0, max_list_size: int = 1, ack_timeout_ns: int = 1_000_000_000) -> None:
        """Ask the switch to stream this digest. Defaults: every message at once, and data
        already reported is not repeated until acknowledged (`digests` acknowledges) or
        `ack_timeout_ns` passes."""
        d = self.schema.digests.get(name)
        ent = p4runtime_pb2.Entity()
        de = ent.digest_entry
        de.digest_id = d.id
        de.config.max_timeout_ns = max_timeout_ns
        de.config.max_list_size = max_list_size
        de.config.ack_timeout_ns = ack_timeout_ns
        exists = None
        if self.batching:
            probe = p4runtime_pb2.Entity()
            probe.digest_entry.digest_id = d.id
            exists = bool(self.read([probe]))
        self._upsert(ent, exists)

    def disable_digest(self, name: str) -> None:
        d = self.schema.digests.get(name)
        ent = p4runtime_pb2.Entity()
        ent.digest_entry.digest_id = d.id
        self.write([self._update(Update.DELETE, ent)])

    def _digest_lists(self, timeout: float) -> list[p4runtime_pb2.DigestList]:
        lists = self._drain(self._digests, timeout)
        for dl in lists:
            ack = p4runtime_pb2.StreamMessageRequest()
            ack.digest_ack.digest_id = dl.digest_id
            ack.digest_ack.list_id = dl.list_id
            self._out.put(ack)
        return lists

    def digests(self, timeout: float = 1.0) -> list[tuple[str, list[bytes]]]:
        """Digest lists received: [(digest name, [message bytes])], each message its fields
        packed big-endian at ceil(bits/8) bytes each (for mac_learn: 6 bytes of address, 2
        of port). Waits up to `timeout` for the first list; acknowledges what it returns."""
        out = []
        for dl in self._digest_lists(timeout):
            d = self.schema.digests.by_id.get(dl.digest_id)
            fields = d.fields if d else ()
            out.append((d.alias if d else str(dl.digest_id), [_pack(x, fields) for x in dl.data]))
        return out

    def digest_records(self, timeout: float = 1.0) -> list[tuple[str, list[dict[str, int]]]]:
        """Like `digests`, with each message decoded to {field name: int}."""
        out = []
        for dl in self._digest_lists(timeout):
            d = self.schema.digests.by_id.get(dl.digest_id)
            names = [n for n, _ in d.fields] if d else []
            recs = []
            for x in dl.data:
                vals = [bytestrings.to_int(m.bitstring) for m in x.struct.members] if x.WhichOneof("data") == "struct" else [bytestrings.to_int(x.bitstring)]
                recs.append(dict(zip(names or [str(i) for i in range(len(vals))], vals)))
            out.append((d.alias if d else str(dl.digest_id), recs))
        return out


def _pack(data: p4data_pb2.P4Data, fields: tuple[tuple[str, int], ...]) -> bytes:
    if data.WhichOneof("data") == "struct":
        widths = [b for _, b in fields] or [8 * len(m.bitstring) for m in data.struct.members]
        return b"".join(bytestrings.full_width(bytestrings.to_int(m.bitstring), w) for m, w in zip(data.struct.members, widths))
    total = sum(b for _, b in fields) or 8 * len(data.bitstring)
    return bytestrings.full_width(bytestrings.to_int(data.bitstring), total)
