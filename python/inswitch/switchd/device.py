"""The data plane as P4Runtime sees it: entities in, native calls out.

Every update and read request is checked against the P4Info first (ids exist, widths fit,
don't-care rules, priorities) so a malformed request gets the status code the spec names
for it rather than whatever the data plane would say; what the data plane still refuses
(duplicates, a full table, a missing entry) comes back as its own ControlPlaneError code.

What P4Runtime asks the server to remember but the data plane has no room for (entry
cookies and metadata, how a replica's port was spelled, digest delivery settings) is kept
here, keyed the way the entity is, and forgotten when the pipeline changes.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional, Sequence

import grpc
from p4.config.v1 import p4info_pb2
from p4.v1 import p4data_pb2, p4runtime_pb2

from inswitch import native
from inswitch.p4rt import bytestrings
from inswitch.p4rt.bytestrings import BitstringError
from inswitch.p4rt.schema import DigestInfo, RegisterInfo, TableInfo

from . import reconcile as reconcile_mod
from .opstats import OpStats
from .pipeline import Pipeline
from .status import P4RTError, invalid, not_found, status_code

Update = p4runtime_pb2.Update
DpMatch = tuple  # ("exact", fid, value) | ("lpm", fid, value, plen) | ("ternary", fid, value, mask) | ("optional", fid, value)
EntryKey = tuple[int, tuple[DpMatch, ...], int]  # (table id, matches sorted by field id, priority)

#: P4Runtime's reserved SDN port numbers, mapped to the data plane's internal ports.
SDN_PORT_CPU = 0xFFFFFFFD
SDN_PORT_RECIRCULATE = 0xFFFFFFFA
PORT_CPU = 0xFFF0
PORT_RECIRC = 0xFFF1
_SDN_PORTS = {SDN_PORT_CPU: PORT_CPU, SDN_PORT_RECIRCULATE: PORT_RECIRC}

_OP_NAMES = {Update.INSERT: "insert", Update.MODIFY: "modify", Update.DELETE: "delete"}


@dataclass
class PreMeta:
    """What a PRE entry carried besides its replicas: how ports were spelled (the 1.4 `port`
    bytes or the older `egress_port` number, plus reserved SDN numbers), and opaque data."""

    bytes_ports: bool = False
    port_names: dict[int, int] = field(default_factory=dict)  # data-plane port -> port as written
    metadata: bytes = b""
    class_of_service: int = 0


@dataclass
class _TableWrite:
    """A checked table-entry update: the data-plane write (`table_write`'s arguments) and
    the entry's key and metadata to remember once it is applied."""

    args: tuple[str, int, list[DpMatch], int, int, list[tuple[int, bytes]]]
    key: EntryKey
    meta: Optional[tuple[int, bytes]]
    seconds: float = 0.0


def _bits(data: bytes, bitwidth: int, what: str) -> int:
    try:
        return bytestrings.check(data, bitwidth)
    except BitstringError as e:
        raise invalid(f"{what}: {e}") from None


class Device:
    """One P4Runtime device over a native Dataplane. Writes and pipeline changes hold
    `lock`, so Write batches, reads and SetForwardingPipelineConfig are serialized (the spec
    asks for strict serializability; the data plane applies one control op at a time anyway)."""

    def __init__(self, dp: Any, pipeline: Pipeline, stats: OpStats) -> None:
        self.dp = dp
        self.pipeline = pipeline
        self.stats = stats
        self.lock = threading.RLock()
        self.digest_configs: dict[int, p4runtime_pb2.DigestEntry.Config] = {}
        self.entry_meta: dict[EntryKey, tuple[int, bytes]] = {}
        self.default_meta: dict[int, tuple[int, bytes]] = {}
        self.pre_meta: dict[tuple[str, int], PreMeta] = {}
        #: Called (under `lock`) after the pipeline or digest configuration changes.
        self.on_change: list[Callable[[], None]] = []

    # ---- native calls --------------------------------------------------------------------------

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call the data plane, turning its errors into P4RTError with the same code."""
        try:
            return fn(*args)
        except native.ControlPlaneError as e:
            code, msg = e.args if len(e.args) == 2 else (2, str(e))
            raise P4RTError(status_code(code), str(msg)) from None
        except (ValueError, TypeError, OverflowError) as e:
            raise invalid(str(e)) from None

    # ---- lookups -------------------------------------------------------------------------------

    def _table(self, tid: int) -> TableInfo:
        t = self.pipeline.index.tables.by_id.get(tid)
        if t is None:
            raise not_found(f"no table with id 0x{tid:08x}")
        return t

    def _register(self, rid: int) -> RegisterInfo:
        r = self.pipeline.index.registers.by_id.get(rid)
        if r is None:
            raise not_found(f"no register with id 0x{rid:08x}")
        return r

    def _digest(self, did: int) -> DigestInfo:
        d = self.pipeline.index.digests.by_id.get(did)
        if d is None:
            raise not_found(f"no digest with id 0x{did:08x}")
        return d

    # ---- batches -------------------------------------------------------------------------------

    def write_batch(self, updates: Sequence[Update]) -> list[Optional[P4RTError]]:
        """Apply every update in order (CONTINUE_ON_ERROR); one error or None per update.

        Runs of plain table writes (`_plain`) are checked one by one and then sent to the data
        plane together, in one round trip (`table_write_many`): that round trip to the pipe
        threads, not the checking, is what a big batch spent its time on."""
        errors: list[Optional[P4RTError]] = [None] * len(updates)
        pending: list[tuple[int, _TableWrite]] = []
        with self.lock:

            def flush() -> None:
                if not pending:
                    return
                t0 = time.perf_counter()
                try:
                    results = self.call(self.dp.table_write_many, [w.args for _, w in pending])
                except P4RTError as e:
                    results = [(e.number, e.message)] * len(pending)
                each = (time.perf_counter() - t0) / len(pending)
                for (i, w), res in zip(pending, results):
                    if res is None:
                        self._finish_table_write(w)
                    else:
                        errors[i] = P4RTError(status_code(res[0]), str(res[1]))
                    self.stats.record(f"write.table_entry.{w.args[0]}", w.seconds + each, res is None)
                pending.clear()

            for i, u in enumerate(updates):
                kind = u.entity.WhichOneof("entity") or "none"
                t0 = time.perf_counter()
                err: Optional[P4RTError] = None
                plain = kind == "table_entry" and self._plain(u.type, u.entity.table_entry)
                if not plain:
                    flush()  # what follows may depend on the writes before it
                try:
                    if plain:
                        w = self._table_write(u.type, u.entity.table_entry)
                        w.seconds = time.perf_counter() - t0
                        pending.append((i, w))
                        continue
                    self.write(u)
                except P4RTError as e:
                    err = e
                except Exception as e:  # a bug here must fail this update, not the switch
                    err = P4RTError(grpc.StatusCode.INTERNAL, f"{type(e).__name__}: {e}")
                self.stats.record(f"write.{kind}.{_OP_NAMES.get(u.type, 'unspecified')}", time.perf_counter() - t0, err is None)
                errors[i] = err
            flush()
        return errors

    def read_batch(self, entities: Sequence[p4runtime_pb2.Entity]) -> tuple[list[p4runtime_pb2.Entity], list[Optional[P4RTError]]]:
        """Everything the requests select, and one error or None per request.

        Register reads take no lock: the data plane answers each one between packet batches,
        and nothing of ours is involved but the pipeline's index (read once). So controllers
        polling registers never hold up a Write (a Write of registers is not atomic with
        respect to reads of them in any case: a pipe applies one control op at a time)."""
        out: list[p4runtime_pb2.Entity] = []
        errors: list[Optional[P4RTError]] = []
        registers_only = all(ent.WhichOneof("entity") == "register_entry" for ent in entities)
        with contextlib.nullcontext() if registers_only else self.lock:
            for ent in entities:
                kind = ent.WhichOneof("entity") or "none"
                t0 = time.perf_counter()
                err: Optional[P4RTError] = None
                got: list[p4runtime_pb2.Entity] = []
                try:
                    got = list(self.read(ent))
                except P4RTError as e:
                    err = e
                except Exception as e:
                    err = P4RTError(grpc.StatusCode.INTERNAL, f"{type(e).__name__}: {e}")
                self.stats.record(f"read.{kind}", time.perf_counter() - t0, err is None)
                out.extend(got)
                errors.append(err)
        return out, errors

    # ---- writes --------------------------------------------------------------------------------

    def write(self, u: Update) -> None:
        if u.type not in _OP_NAMES:
            raise invalid("the update type must be INSERT, MODIFY or DELETE")
        kind = u.entity.WhichOneof("entity")
        e = u.entity
        if kind == "table_entry":
            self._write_table(u.type, e.table_entry)
        elif kind == "register_entry":
            self._write_register(u.type, e.register_entry)
        elif kind == "packet_replication_engine_entry":
            self._write_pre(u.type, e.packet_replication_engine_entry)
        elif kind == "digest_entry":
            self._write_digest(u.type, e.digest_entry)
        elif kind == "action_profile_member" and e.action_profile_member.action_profile_id in self.pipeline.index.action_profiles:
            self._write_member(u.type, e.action_profile_member)
        elif kind == "action_profile_group" and e.action_profile_group.action_profile_id in self.pipeline.index.action_profiles:
            self._write_group(u.type, e.action_profile_group)
        elif kind is None:
            raise invalid("the update has no entity")
        else:
            self._absent_entity(kind, e)

    def _absent_entity(self, kind: str, e: p4runtime_pb2.Entity) -> None:
        """Entity kinds P4Runtime has but our programs never declare (counters, meters,
        action profiles, value sets, externs): every id names nothing."""
        if kind in ("direct_counter_entry", "direct_meter_entry"):
            t = self._table(getattr(e, kind).table_entry.table_id)
            raise invalid(f"table {t.name} has no direct {kind.split('_')[1]}")
        id_field = {"counter_entry": "counter_id", "meter_entry": "meter_id", "action_profile_member": "action_profile_id", "action_profile_group": "action_profile_id", "value_set_entry": "value_set_id", "extern_entry": "extern_id"}.get(kind)
        oid = getattr(getattr(e, kind), id_field) if id_field else 0
        raise not_found(f"no {kind.replace('_', ' ')} object with id 0x{oid:08x}: the loaded programs declare none")

    # ---- table entries -------------------------------------------------------------------------

    def _matches(self, t: TableInfo, fms: Sequence[p4runtime_pb2.FieldMatch]) -> tuple[DpMatch, ...]:
        """Check field matches against the table and return them as data-plane tuples in
        canonical form (sorted by field id; canonical bytes), which is also how reads return
        them, so they double as the entry's key."""
        out: list[DpMatch] = []
        seen: set[int] = set()
        for fm in fms:
            f = t.field_by_id(fm.field_id)
            if f is None:
                raise invalid(f"table {t.name} has no match field with id {fm.field_id}")
            if f.id in seen:
                raise invalid(f"match field {f.name} is given twice")
            seen.add(f.id)
            kind = fm.WhichOneof("field_match_type")
            if kind is None:
                raise invalid(f"match field {f.name} sets no match type")
            if kind != f.kind:
                raise invalid(f"match field {f.name} is {f.kind}, not {kind}")
            what = f"match field {f.name}"
            if kind == "exact":
                v = _bits(fm.exact.value, f.bitwidth, what)
                out.append(("exact", f.id, bytestrings.from_int(v, f.bitwidth)))
            elif kind == "optional":
                v = _bits(fm.optional.value, f.bitwidth, what)
                out.append(("optional", f.id, bytestrings.from_int(v, f.bitwidth)))
            elif kind == "lpm":
                plen = fm.lpm.prefix_len
                if plen <= 0:
                    raise invalid(f"{what}: a prefix length of 0 is a don't-care match and must be omitted")
                if plen > f.bitwidth:
                    raise invalid(f"{what}: prefix length {plen} exceeds the field's {f.bitwidth} bits")
                v = _bits(fm.lpm.value, f.bitwidth, what)
                if v & ~bytestrings.prefix_mask(plen, f.bitwidth):
                    raise invalid(f"{what}: the value has bits set beyond the /{plen} prefix")
                out.append(("lpm", f.id, bytestrings.from_int(v, f.bitwidth), plen))
            elif kind == "ternary":
                v = _bits(fm.ternary.value, f.bitwidth, what + " value")
                m = _bits(fm.ternary.mask, f.bitwidth, what + " mask")
                if m == 0:
                    raise invalid(f"{what}: a zero mask is a don't-care match and must be omitted")
                if v & ~m:
                    raise invalid(f"{what}: the value has bits set outside the mask")
                out.append(("ternary", f.id, bytestrings.from_int(v, f.bitwidth), bytestrings.from_int(m, f.bitwidth)))
            else:
                raise invalid(f"{what}: {kind} matches are not supported")
        for f in t.fields:
            if f.kind == "exact" and f.id not in seen:
                raise invalid(f"exact match field {f.name} is missing (exact fields cannot be don't-care)")
        out.sort(key=lambda m: m[1])
        return tuple(out)

    def _action(self, t: TableInfo, ta: p4runtime_pb2.TableAction, default: bool) -> tuple[int, list[tuple[int, bytes]]]:
        kind = ta.WhichOneof("type")
        if kind != "action":
            raise invalid(f"table {t.name} is a direct table: its entries take an action, not {kind or 'nothing'}")
        return self._check_action(t, ta.action, default)

    def _check_action(self, t: TableInfo, a: p4runtime_pb2.Action, default: bool) -> tuple[int, list[tuple[int, bytes]]]:
        index = self.pipeline.index
        if a.action_id not in t.actions:
            if a.action_id in index.actions:
                raise invalid(f"action {index.actions.by_id[a.action_id].name} is not an action of table {t.name}")
            raise invalid(f"no action with id 0x{a.action_id:08x}")
        scope = t.actions[a.action_id]
        info = index.actions.by_id[a.action_id]
        if default and scope == p4info_pb2.ActionRef.TABLE_ONLY:
            raise P4RTError(grpc.StatusCode.PERMISSION_DENIED, f"action {info.name} cannot be the default action of {t.name}")
        if not default and scope == p4info_pb2.ActionRef.DEFAULT_ONLY:
            raise P4RTError(grpc.StatusCode.PERMISSION_DENIED, f"action {info.name} can only be the default action of {t.name}")
        params: list[tuple[int, bytes]] = []
        given: set[int] = set()
        for p in a.params:
            pi = next((x for x in info.params if x.id == p.param_id), None)
            if pi is None:
                raise invalid(f"action {info.name} has no parameter with id {p.param_id}")
            if pi.id in given:
                raise invalid(f"parameter {pi.name} of action {info.name} is given twice")
            given.add(pi.id)
            v = _bits(p.value, pi.bitwidth, f"parameter {pi.name} of action {info.name}")
            params.append((pi.id, bytestrings.from_int(v, pi.bitwidth)))
        missing = [p.name for p in info.params if p.id not in given]
        if missing:
            raise invalid(f"action {info.name} is missing parameter {missing[0]}")
        return a.action_id, params

    @staticmethod
    def _meta_of(te: p4runtime_pb2.TableEntry) -> Optional[tuple[int, bytes]]:
        if te.controller_metadata or te.metadata:
            return (te.controller_metadata, bytes(te.metadata))
        return None

    def _plain(self, op: int, te: p4runtime_pb2.TableEntry) -> bool:
        """An update `_table_write` checks without the data plane's help and turns into one
        data-plane write: an entry (not the default action) of a direct table, inserted,
        deleted or modified with an action."""
        t = self.pipeline.index.tables.by_id.get(te.table_id)
        return (t is not None and not t.implementation_id and not te.is_default_action and op in _OP_NAMES
                and (op != Update.MODIFY or te.HasField("action")))

    def _write_table(self, op: int, te: p4runtime_pb2.TableEntry) -> None:
        if self._plain(op, te):
            w = self._table_write(op, te)
            self.call(self.dp.table_write, *w.args)
            self._finish_table_write(w)
            return
        t = self._table(te.table_id)
        if te.is_default_action:
            self._check_entry(t, te, op)
            self._write_default(op, t, te)
            return
        matches = self._check_entry(t, te, op)
        key: EntryKey = (t.id, matches, te.priority)
        if t.implementation_id:
            self._write_indirect(op, t, te, matches)
        elif not any(self._entry_key(t, m, p) == key for m, p, _, _ in self.call(self.dp.table_read, t.id)[0]):
            raise not_found(f"table {t.name}: no such entry")  # a MODIFY without an action
        if op == Update.DELETE:
            self.entry_meta.pop(key, None)
            return
        self._set_meta(key, self._meta_of(te))

    def _check_entry(self, t: TableInfo, te: p4runtime_pb2.TableEntry, op: int) -> tuple[DpMatch, ...]:
        """Check what every table-entry write must satisfy; the entry's canonical matches
        (none for the default action, which `_write_default` checks further)."""
        if te.is_const:
            raise invalid("is_const must be false in writes")
        if te.is_default_action:
            return ()
        if te.HasField("meter_config") or te.HasField("counter_data") or te.HasField("meter_counter_data"):
            raise invalid(f"table {t.name} has no direct counter or meter")
        if te.idle_timeout_ns:
            raise invalid(f"table {t.name} does not support idle timeouts")
        if not t.fields and op == Update.INSERT:
            raise invalid(f"table {t.name} has no key: set its default action instead")
        matches = self._matches(t, te.match)
        if te.priority < 0:
            raise invalid("priority must not be negative")
        if t.needs_priority and te.priority == 0:
            raise invalid(f"table {t.name} has ternary/optional fields: entries need a priority > 0")
        if not t.needs_priority and te.priority != 0:
            raise invalid(f"table {t.name} has only exact/LPM fields: entries take no priority")
        return matches

    def _table_write(self, op: int, te: p4runtime_pb2.TableEntry) -> _TableWrite:
        """Check a `_plain` update; the data-plane write it makes (not made yet)."""
        t = self._table(te.table_id)
        matches = self._check_entry(t, te, op)
        key: EntryKey = (t.id, matches, te.priority)
        if op == Update.DELETE:
            return _TableWrite(("delete", t.id, list(matches), te.priority, 0, []), key, None)
        if op == Update.INSERT and not te.HasField("action"):
            raise invalid("an INSERT needs an action")
        aid, params = self._action(t, te.action, default=False)
        return _TableWrite((_OP_NAMES[op], t.id, list(matches), te.priority, aid, params), key, self._meta_of(te))

    def _finish_table_write(self, w: _TableWrite) -> None:
        """What we remember of an entry once the data plane took its write."""
        if w.args[0] == "delete":
            self.entry_meta.pop(w.key, None)
        else:
            self._set_meta(w.key, w.meta)

    def _set_meta(self, key: EntryKey, meta: Optional[tuple[int, bytes]]) -> None:
        if meta:
            self.entry_meta[key] = meta
        else:
            self.entry_meta.pop(key, None)

    def _write_indirect(self, op: int, t: TableInfo, te: p4runtime_pb2.TableEntry, matches: tuple[DpMatch, ...]) -> None:
        """An entry of a table implemented by an action profile: it points at a member or a
        group (the data plane checks that it exists)."""
        prof = self.pipeline.index.action_profiles.by_id[t.implementation_id]
        if op == Update.DELETE:
            self.call(self.dp.table_write_indirect, "delete", t.id, list(matches), te.priority, 0, None)
            return
        kind = te.action.WhichOneof("type") if te.HasField("action") else None
        if kind is None and op == Update.MODIFY:
            if not any(self._entry_key(t, m, p) == (t.id, matches, te.priority) for m, p, _, _ in self.call(self.dp.table_read_indirect, t.id)):
                raise not_found(f"table {t.name}: no such entry")
            return
        if kind == "action_profile_member_id":
            ref = {"member_id": te.action.action_profile_member_id}
        elif kind == "action_profile_group_id":
            if not prof.with_selector:
                raise invalid(f"action profile {prof.name} has no selector: entries of {t.name} point at members")
            ref = {"group_id": te.action.action_profile_group_id}
        else:
            raise invalid(f"table {t.name} is implemented by action profile {prof.name}: its entries point at a "
                          f"member or a group, not {kind or 'nothing'}")
        self.call(lambda: self.dp.table_write_indirect("insert" if op == Update.INSERT else "modify", t.id,
                                                       list(matches), te.priority, **ref))

    def _profile(self, pid: int) -> Any:
        p = self.pipeline.index.action_profiles.by_id.get(pid)
        if p is None:
            raise not_found(f"no action profile with id 0x{pid:08x}")
        return p

    def _write_member(self, op: int, m: p4runtime_pb2.ActionProfileMember) -> None:
        prof = self._profile(m.action_profile_id)
        if op == Update.DELETE:
            self.call(self.dp.profile_member_write, "delete", prof.id, m.member_id)
            return
        if not m.HasField("action"):
            raise invalid(f"member {m.member_id} of {prof.name} needs an action")
        t = self._table(prof.table_ids[0])
        aid, params = self._check_action(t, m.action, default=False)
        self.call(self.dp.profile_member_write, _OP_NAMES[op], prof.id, m.member_id, aid, params)

    def _write_group(self, op: int, g: p4runtime_pb2.ActionProfileGroup) -> None:
        prof = self._profile(g.action_profile_id)
        if not prof.with_selector:
            raise invalid(f"action profile {prof.name} has no selector, hence no groups")
        if op == Update.DELETE:
            self.call(self.dp.profile_group_write, "delete", prof.id, g.group_id, [])
            return
        if g.max_size and g.max_size > prof.max_group_size:
            raise P4RTError(grpc.StatusCode.RESOURCE_EXHAUSTED, f"group max_size {g.max_size} exceeds {prof.name}'s {prof.max_group_size}")
        if g.max_size and len(g.members) > g.max_size:
            raise P4RTError(grpc.StatusCode.RESOURCE_EXHAUSTED, f"group {g.group_id} has {len(g.members)} members, over its max_size {g.max_size}")
        members = [(m.member_id, m.weight or 1) for m in g.members]
        self.call(self.dp.profile_group_write, _OP_NAMES[op], prof.id, g.group_id, members)

    @staticmethod
    def _entry_key(t: TableInfo, matches: Sequence[DpMatch], priority: int) -> EntryKey:
        return (t.id, tuple(sorted((tuple(m) for m in matches), key=lambda m: m[1])), priority)

    def _write_default(self, op: int, t: TableInfo, te: p4runtime_pb2.TableEntry) -> None:
        if op != Update.MODIFY:
            raise invalid("the default entry always exists: it can only be modified (MODIFY)")
        if len(te.match) or te.priority:
            raise invalid("the default entry has no match and no priority")
        if t.const_default_action_id:
            raise P4RTError(grpc.StatusCode.PERMISSION_DENIED, f"the default action of table {t.name} is constant")
        if te.HasField("action"):
            aid, params = self._action(t, te.action, default=True)
            self.call(self.dp.table_set_default, t.id, aid, params)
            meta = self._meta_of(te)
            if meta:
                self.default_meta[t.id] = meta
            else:
                self.default_meta.pop(t.id, None)
        else:
            self.call(self.dp.table_reset_default, t.id)
            self.default_meta.pop(t.id, None)

    # ---- registers -----------------------------------------------------------------------------

    @staticmethod
    def _register_index(r: RegisterInfo, re: p4runtime_pb2.RegisterEntry) -> Optional[int]:
        if not re.HasField("index"):
            return None
        i = re.index.index
        if i < 0:
            raise invalid(f"register index {i} is negative")
        if i >= r.size:
            raise P4RTError(grpc.StatusCode.OUT_OF_RANGE, f"register {r.name} has {r.size} cells; index {i} is out of range")
        return i

    def _write_register(self, op: int, re: p4runtime_pb2.RegisterEntry) -> None:
        if op != Update.MODIFY:
            raise invalid("register cells always exist: write them with MODIFY")
        r = self._register(re.register_id)
        idx = self._register_index(r, re)
        if not re.HasField("data") or re.data.WhichOneof("data") != "bitstring":
            raise invalid(f"register {r.name} holds bit<{r.bitwidth}>: data must be a bitstring")
        v = _bits(re.data.bitstring, r.bitwidth, f"data for register {r.name}")
        self.call(self.dp.register_write, r.id, idx, v)

    # ---- packet replication engine -------------------------------------------------------------

    def _replicas(self, reps: Sequence[p4runtime_pb2.Replica]) -> tuple[list[tuple[int, int]], PreMeta]:
        out: list[tuple[int, int]] = []
        meta = PreMeta()
        seen: set[tuple[int, int]] = set()
        for r in reps:
            kind = r.WhichOneof("port_kind")
            if kind == "port":
                written = _bits(r.port, 32, "replica port")
                meta.bytes_ports = True
            elif kind == "egress_port":
                written = r.egress_port
            else:
                raise invalid("a replica needs a port")
            port = _SDN_PORTS.get(written, written)
            if port > 0xFFFF:
                raise invalid(f"there is no port {written}")
            if port != written:
                meta.port_names[port] = written
            if r.instance > 0xFFFF:
                raise invalid(f"replica instance {r.instance} exceeds 16 bits")
            if (port, r.instance) in seen:
                raise invalid(f"replica (port {written}, instance {r.instance}) is given twice")
            seen.add((port, r.instance))
            out.append((port, r.instance))
        return out, meta

    @staticmethod
    def _pre_id(value: int, what: str) -> int:
        if value == 0:
            raise invalid(f"{what} 0 is reserved (it means 'all' in reads)")
        if value > 0xFFFF:
            raise invalid(f"{what} {value} exceeds the switch's 16-bit range")
        return value

    def _write_pre(self, op: int, pre: p4runtime_pb2.PacketReplicationEngineEntry) -> None:
        kind = pre.WhichOneof("type")
        opname = _OP_NAMES[op]
        if kind == "multicast_group_entry":
            mg = pre.multicast_group_entry
            gid = self._pre_id(mg.multicast_group_id, "multicast group id")
            if op == Update.DELETE:
                self.call(self.dp.mcast_group_write, "delete", gid, [])
                self.pre_meta.pop(("mc", gid), None)
                return
            reps, meta = self._replicas(mg.replicas)
            meta.metadata = bytes(mg.metadata)
            self.call(self.dp.mcast_group_write, opname, gid, reps)
            self.pre_meta[("mc", gid)] = meta
        elif kind == "clone_session_entry":
            cs = pre.clone_session_entry
            sid = self._pre_id(cs.session_id, "clone session id")
            if op == Update.DELETE:
                self.call(self.dp.clone_session_write, "delete", sid, [], 0)
                self.pre_meta.pop(("clone", sid), None)
                return
            if cs.packet_length_bytes < 0:
                raise invalid("packet_length_bytes must not be negative")
            reps, meta = self._replicas(cs.replicas)
            meta.class_of_service = cs.class_of_service
            self.call(self.dp.clone_session_write, opname, sid, reps, cs.packet_length_bytes)
            self.pre_meta[("clone", sid)] = meta
        else:
            raise invalid("the PacketReplicationEngineEntry sets neither a multicast group nor a clone session")

    def _fill_replicas(self, msg: Any, reps: Sequence[tuple[int, int]], meta: PreMeta) -> None:
        for port, rid in reps:
            r = msg.replicas.add()
            written = meta.port_names.get(port, port)
            if meta.bytes_ports:
                r.port = bytestrings.from_int(written, 32)
            else:
                r.egress_port = written
            r.instance = rid

    # ---- digests -------------------------------------------------------------------------------

    def _write_digest(self, op: int, de: p4runtime_pb2.DigestEntry) -> None:
        d = self._digest(de.digest_id)
        cfg = de.config
        if cfg.max_timeout_ns < 0 or cfg.max_list_size < 0 or cfg.ack_timeout_ns < 0:
            raise invalid("digest config values must not be negative")
        configured = d.id in self.digest_configs
        if op == Update.INSERT:
            if configured:
                raise P4RTError(grpc.StatusCode.ALREADY_EXISTS, f"digest {d.name} is already enabled")
            self.call(self.dp.digest_config, d.id, True)
        elif not configured:
            raise not_found(f"digest {d.name} is not enabled")
        if op == Update.DELETE:
            self.call(self.dp.digest_config, d.id, False)
            del self.digest_configs[d.id]
        else:
            c = p4runtime_pb2.DigestEntry.Config()
            c.CopyFrom(cfg)
            self.digest_configs[d.id] = c
        for hook in self.on_change:
            hook()

    # ---- reads ---------------------------------------------------------------------------------

    def read(self, ent: p4runtime_pb2.Entity) -> Iterator[p4runtime_pb2.Entity]:
        kind = ent.WhichOneof("entity")
        if kind == "table_entry":
            yield from self._read_table(ent.table_entry)
        elif kind == "register_entry":
            yield from self._read_register(ent.register_entry)
        elif kind == "packet_replication_engine_entry":
            yield from self._read_pre(ent.packet_replication_engine_entry)
        elif kind == "digest_entry":
            yield from self._read_digest(ent.digest_entry)
        elif kind in ("action_profile_member", "action_profile_group") and (
                getattr(ent, kind).action_profile_id in self.pipeline.index.action_profiles or
                (not getattr(ent, kind).action_profile_id and len(self.pipeline.index.action_profiles.by_id))):
            yield from self._read_profile(kind, getattr(ent, kind))
        elif kind is None:
            raise invalid("a read request must set an entity")
        else:
            # Wildcard reads of kinds our programs never declare select nothing; a specific
            # id names an object that does not exist.
            sub = getattr(ent, kind)
            if kind in ("direct_counter_entry", "direct_meter_entry"):
                if sub.table_entry.table_id:
                    self._absent_entity(kind, ent)
            elif any(getattr(sub, f, 0) for f in ("counter_id", "meter_id", "action_profile_id", "value_set_id", "extern_type_id")):
                self._absent_entity(kind, ent)

    def _read_table(self, te: p4runtime_pb2.TableEntry) -> Iterator[p4runtime_pb2.Entity]:
        index = self.pipeline.index
        if te.table_id == 0:
            if len(te.match) or te.priority or te.is_default_action or te.HasField("action") or te.controller_metadata or te.metadata:
                raise invalid("a read of all tables (table_id 0) takes no other filter")
            tables = list(index.tables)
        else:
            tables = [self._table(te.table_id)]
        want = self._matches(tables[0], te.match) if len(te.match) else None
        want_action = te.action.action.action_id if te.action.WhichOneof("type") == "action" else 0
        for t in tables:
            entries, (daid, dparams) = self.call(self.dp.table_read, t.id)
            if t.implementation_id and not te.is_default_action:
                entries = [(m, p, 0, [(kind, ref)]) for m, p, kind, ref in self.call(self.dp.table_read_indirect, t.id)]
            if te.is_default_action:
                ent = p4runtime_pb2.Entity()
                e = ent.table_entry
                e.table_id = t.id
                e.is_default_action = True
                self._fill_action(e, daid, dparams)
                self._fill_meta(e, self.default_meta.get(t.id))
                yield ent
                continue
            for matches, prio, aid, params in entries:
                key = self._entry_key(t, matches, prio)
                if want is not None and key[1] != want:
                    continue
                if te.priority and prio != te.priority:
                    continue
                if want_action and aid != want_action:
                    continue
                meta = self.entry_meta.get(key)
                if te.controller_metadata and (meta is None or meta[0] != te.controller_metadata):
                    continue
                if te.metadata and (meta is None or meta[1] != te.metadata):
                    continue
                ent = p4runtime_pb2.Entity()
                e = ent.table_entry
                e.table_id = t.id
                for m in key[1]:
                    fm = e.match.add()
                    fm.field_id = m[1]
                    if m[0] == "exact":
                        fm.exact.value = m[2]
                    elif m[0] == "optional":
                        fm.optional.value = m[2]
                    elif m[0] == "lpm":
                        fm.lpm.value, fm.lpm.prefix_len = m[2], m[3]
                    elif m[0] == "ternary":
                        fm.ternary.value, fm.ternary.mask = m[2], m[3]
                e.priority = prio
                self._fill_action(e, aid, params)
                self._fill_meta(e, meta)
                yield ent

    def _read_profile(self, kind: str, want: Any) -> Iterator[p4runtime_pb2.Entity]:
        profs = [self._profile(want.action_profile_id)] if want.action_profile_id else list(self.pipeline.index.action_profiles)
        for prof in profs:
            members, groups = self.call(self.dp.profile_read, prof.id)
            if kind == "action_profile_member":
                for mid, aid, params in members:
                    if want.member_id and mid != want.member_id:
                        continue
                    ent = p4runtime_pb2.Entity()
                    m = ent.action_profile_member
                    m.action_profile_id, m.member_id = prof.id, mid
                    m.action.action_id = aid
                    for pid, value in params:
                        p = m.action.params.add()
                        p.param_id, p.value = pid, value
                    yield ent
            else:
                for gid, gm in groups:
                    if want.group_id and gid != want.group_id:
                        continue
                    ent = p4runtime_pb2.Entity()
                    g = ent.action_profile_group
                    g.action_profile_id, g.group_id, g.max_size = prof.id, gid, prof.max_group_size
                    for mid, w in gm:
                        x = g.members.add()
                        x.member_id, x.weight = mid, w
                    yield ent

    @staticmethod
    def _fill_action(e: p4runtime_pb2.TableEntry, aid: int, params: Sequence[tuple[int, Any]]) -> None:
        if params and params[0][0] in ("member", "group"):
            kind, ref = params[0]
            if kind == "member":
                e.action.action_profile_member_id = ref
            else:
                e.action.action_profile_group_id = ref
            return
        a = e.action.action
        a.action_id = aid
        for pid, value in params:
            p = a.params.add()
            p.param_id = pid
            p.value = value

    @staticmethod
    def _fill_meta(e: p4runtime_pb2.TableEntry, meta: Optional[tuple[int, bytes]]) -> None:
        if meta:
            e.controller_metadata, e.metadata = meta

    def _read_register(self, re: p4runtime_pb2.RegisterEntry) -> Iterator[p4runtime_pb2.Entity]:
        if re.register_id == 0:
            if re.HasField("index"):
                raise invalid("a read of all registers (register_id 0) cannot select an index")
            regs = list(self.pipeline.index.registers)
        else:
            regs = [self._register(re.register_id)]
        Entity, RegisterEntry, Index, P4Data = p4runtime_pb2.Entity, p4runtime_pb2.RegisterEntry, p4runtime_pb2.Index, p4data_pb2.P4Data
        for r in regs:
            idx = self._register_index(r, re)
            if self.dp.num_pipes == 1:
                # Encoded by the data plane (parsed back by compiled protobuf): built here
                # field by field, a register's hundreds of cells were most of a Read's cost.
                yield from p4runtime_pb2.ReadResponse.FromString(self.call(self.dp.register_read_response, r.id, idx)).entities
                continue
            for i, v in self._register_cells(r.id, idx):
                yield Entity(register_entry=RegisterEntry(register_id=r.id, index=Index(index=i),
                                                          data=P4Data(bitstring=bytestrings.from_int(v, max(r.bitwidth, v.bit_length())))))

    def _register_cells(self, rid: int, idx: Optional[int]) -> list[tuple[int, int]]:
        """A register's cells as one array. Each pipe of a multi-pipe switch has its own
        copy (packets only touch their pipe's), while P4Runtime has one value per index: we
        report, per index, the first pipe's non-zero value. That is the owning pipe's count
        for per-port counters, the touched pipe's value for state sharded by port, and what
        was written (writes go to every pipe)."""
        pipes = self.dp.num_pipes
        cells = self.call(self.dp.register_read, rid, idx, 0)
        if pipes <= 1:
            return cells
        merged = dict(cells)
        for pipe in range(1, pipes):
            for i, v in self.call(self.dp.register_read, rid, idx, pipe):
                if not merged.get(i):
                    merged[i] = v
        return sorted(merged.items())

    def _read_pre(self, pre: p4runtime_pb2.PacketReplicationEngineEntry) -> Iterator[p4runtime_pb2.Entity]:
        kind = pre.WhichOneof("type")
        if kind == "multicast_group_entry":
            gid = pre.multicast_group_entry.multicast_group_id
            if gid > 0xFFFF:
                raise not_found(f"multicast group {gid}")
            for g, reps in self.call(self.dp.mcast_group_read, gid or None):
                ent = p4runtime_pb2.Entity()
                mg = ent.packet_replication_engine_entry.multicast_group_entry
                mg.multicast_group_id = g
                meta = self.pre_meta.get(("mc", g), PreMeta())
                self._fill_replicas(mg, reps, meta)
                mg.metadata = meta.metadata
                yield ent
        elif kind == "clone_session_entry":
            sid = pre.clone_session_entry.session_id
            if sid > 0xFFFF:
                raise not_found(f"clone session {sid}")
            for s, reps, trunc in self.call(self.dp.clone_session_read, sid or None):
                ent = p4runtime_pb2.Entity()
                cs = ent.packet_replication_engine_entry.clone_session_entry
                cs.session_id = s
                meta = self.pre_meta.get(("clone", s), PreMeta())
                self._fill_replicas(cs, reps, meta)
                cs.class_of_service = meta.class_of_service
                cs.packet_length_bytes = trunc
                yield ent
        else:
            raise invalid("the PacketReplicationEngineEntry sets neither a multicast group nor a clone session")

    def _read_digest(self, de: p4runtime_pb2.DigestEntry) -> Iterator[p4runtime_pb2.Entity]:
        if de.digest_id:
            ids = [self._digest(de.digest_id).id]
        else:
            ids = [d.id for d in self.pipeline.index.digests]
        for did in ids:
            cfg = self.digest_configs.get(did)
            if cfg is None:
                continue
            ent = p4runtime_pb2.Entity()
            ent.digest_entry.digest_id = did
            ent.digest_entry.config.CopyFrom(cfg)
            yield ent

    # ---- pipeline changes ----------------------------------------------------------------------

    def replace_pipeline(self, new: Pipeline, reconcile: bool) -> None:
        """Load `new`. Without `reconcile` all forwarding state starts over (VERIFY_AND_COMMIT).
        With it, the same program set keeps everything; another set keeps the table entries
        and defaults of the programs it shares with the old one, the multicast groups, clone
        sessions and digest settings (registers start over)."""
        with self.lock:
            if reconcile and new.programs == self.pipeline.programs:
                self.pipeline = new
                return
            saved = reconcile_mod.take(self, new) if reconcile else None
            self.call(self.dp.set_programs, list(new.programs), new.target)
            self.pipeline = new
            self.entry_meta.clear()
            self.default_meta.clear()
            self.pre_meta.clear()
            self.digest_configs.clear()
            try:
                if saved is not None:
                    reconcile_mod.give(self, saved)
            finally:
                for hook in self.on_change:
                    hook()
