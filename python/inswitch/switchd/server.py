"""The P4Runtime gRPC service of a switch, and the server object that runs it.

`P4RuntimeService` implements the RPCs on top of `Device` (entities), `Arbiter` (who may
write) and the event threads (PacketIn, digests). `SwitchServer` wires them to a running
native Dataplane and a gRPC server bound to the address the user chose.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator, Optional

import grpc
from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

from inswitch import native
from inswitch.p4rt import bytestrings
from inswitch.p4rt.bytestrings import BitstringError
from inswitch.p4rt.p4info import PACKET_OUT_EGRESS_PORT, PORT_METADATA_BITS, THROUGH_INGRESS
from inswitch.p4rt.tls import TlsFiles

from .arbitration import Arbiter, Session, election_id
from .device import Device
from .events import DigestEngine, PacketInPump
from .learning import L2Learner, learner_for
from .opstats import OpStats
from .pipeline import Pipeline, verify
from .status import (DEFAULT_CLIENT_METADATA, P4RTError, batch_status, client_metadata_limit, invalid,
                     max_batch, not_found, status_code)

API_VERSION = "1.4.1"
#: Entities per ReadResponse: big reads stream in pieces instead of one huge message.
READ_CHUNK = 1000
#: Read RPCs served at once (see P4RuntimeService._read_slots).
READ_SLOTS = 2
_MAX_MESSAGE = 64 * 1024 * 1024

_Set = p4runtime_pb2.SetForwardingPipelineConfigRequest


class P4RuntimeService(p4runtime_pb2_grpc.P4RuntimeServicer):
    def __init__(self, device: Device, arbiter: Arbiter, digests: DigestEngine, stats: OpStats) -> None:
        self.device = device
        self.arbiter = arbiter
        self.digests = digests
        #: The standalone L2 learner, if the switch runs one (SwitchServer sets it).
        self.learner: Optional[L2Learner] = None
        self.stats = stats
        self._saved: Pipeline | None = None  # VERIFY_AND_SAVE'd, waiting for COMMIT
        self._sessions: set[Session] = set()
        self._sessions_lock = threading.Lock()
        #: Reads building their answers at once. Python runs one thread at a time: with every
        #: polling controller's read runnable, a Write waits its turn behind all of them; the
        #: others wait here without holding the interpreter.
        self._read_slots = threading.BoundedSemaphore(READ_SLOTS)

    # ---- helpers ---------------------------------------------------------------------------

    def _check_device(self, device_id: int) -> None:
        if device_id != self.arbiter.device_id:
            raise not_found(f"this switch is device {self.arbiter.device_id}, not {device_id}")

    def _check_writer(self, req: Any) -> None:
        self._check_device(req.device_id)
        self.arbiter.check_primary(req.device_id, req.role, election_id(req))

    @property
    def streams(self) -> int:
        with self._sessions_lock:
            return len(self._sessions)

    def close_streams(self) -> None:
        with self._sessions_lock:
            sessions = list(self._sessions)
        for s in sessions:
            s.close()

    # ---- unary RPCs ------------------------------------------------------------------------

    def Write(self, request: p4runtime_pb2.WriteRequest, context: grpc.ServicerContext) -> p4runtime_pb2.WriteResponse:
        t0 = time.perf_counter()
        failure: P4RTError | None = None
        limit = client_metadata_limit(context.invocation_metadata())
        try:
            self._check_writer(request)
            if request.atomicity != p4runtime_pb2.WriteRequest.CONTINUE_ON_ERROR:
                raise P4RTError(grpc.StatusCode.UNIMPLEMENTED, "only CONTINUE_ON_ERROR batches are supported")
            cap = max_batch(limit)
            if len(request.updates) > cap:
                raise invalid(
                    f"Write of {len(request.updates)} updates refused, none applied: if they failed, their "
                    f"per-update error report could exceed the client's {limit}-byte metadata limit "
                    + ("(gRPC's default, grpc.max_metadata_size) " if limit == DEFAULT_CLIENT_METADATA else "")
                    + f"and the client would learn neither what was applied nor what failed; send at most "
                    f"{cap} updates per Write, or raise the client's limit and declare it in the "
                    f"'inswitch-max-metadata-size' request header")
        except P4RTError as e:
            failure = e
        if failure is not None:
            self.stats.record("write_rpc", time.perf_counter() - t0, False)
            context.abort(failure.code, failure.message)
        self._controller_writes()
        errors = self.device.write_batch(request.updates)
        ok = all(e is None for e in errors)
        self.stats.record("write_rpc", time.perf_counter() - t0, ok)
        self.stats.count("write.updates", len(request.updates))
        if not ok:
            context.abort_with_status(batch_status(errors, "Write", limit))
        return p4runtime_pb2.WriteResponse()

    def Read(self, request: p4runtime_pb2.ReadRequest, context: grpc.ServicerContext) -> Iterator[p4runtime_pb2.ReadResponse]:
        t0 = time.perf_counter()
        try:
            self._check_device(request.device_id)
        except P4RTError as e:
            context.abort(e.code, e.message)
        with self._read_slots:
            entities, errors = self.device.read_batch(request.entities)
        for i in range(0, len(entities), READ_CHUNK):
            resp = p4runtime_pb2.ReadResponse()
            resp.entities.extend(entities[i : i + READ_CHUNK])
            yield resp
        ok = all(e is None for e in errors)
        self.stats.record("read_rpc", time.perf_counter() - t0, ok)
        if not ok:
            context.abort_with_status(batch_status(errors, "Read", client_metadata_limit(context.invocation_metadata())))

    def _controller_writes(self) -> None:
        """A controller takes over the tables: standalone learning steps aside."""
        lr = self.learner
        if lr is not None:
            lr.yield_to_controller()
            self.digests.local.pop(lr.digest.id, None)
            self.learner = None

    def SetForwardingPipelineConfig(self, request: p4runtime_pb2.SetForwardingPipelineConfigRequest, context: grpc.ServicerContext) -> p4runtime_pb2.SetForwardingPipelineConfigResponse:
        self._controller_writes()
        failure: P4RTError | None = None
        with self.stats.timed("set_pipeline"):
            try:
                self._set_pipeline(request)
            except P4RTError as e:
                failure = e
        if failure is not None:
            context.abort(failure.code, failure.message)
        return p4runtime_pb2.SetForwardingPipelineConfigResponse()

    def _set_pipeline(self, request: p4runtime_pb2.SetForwardingPipelineConfigRequest) -> None:
        self._check_writer(request)
        action = request.action
        if action == _Set.VERIFY:
            verify(request.config, self.device.pipeline.target)
        elif action == _Set.VERIFY_AND_SAVE:
            self._saved = verify(request.config, self.device.pipeline.target)
        elif action == _Set.VERIFY_AND_COMMIT:
            self.device.replace_pipeline(verify(request.config, self.device.pipeline.target), reconcile=False)
            self._saved = None
        elif action == _Set.COMMIT:
            if request.HasField("config"):
                raise invalid("COMMIT realizes the saved config; send no config with it")
            if self._saved is None:
                raise not_found("no saved config to commit (send VERIFY_AND_SAVE first)")
            self.device.replace_pipeline(self._saved, reconcile=False)
            self._saved = None
        elif action == _Set.RECONCILE_AND_COMMIT:
            self.device.replace_pipeline(verify(request.config, self.device.pipeline.target), reconcile=True)
            self._saved = None
        else:
            raise invalid("set an action (VERIFY, VERIFY_AND_SAVE, VERIFY_AND_COMMIT, COMMIT or RECONCILE_AND_COMMIT)")

    def GetForwardingPipelineConfig(self, request: p4runtime_pb2.GetForwardingPipelineConfigRequest, context: grpc.ServicerContext) -> p4runtime_pb2.GetForwardingPipelineConfigResponse:
        with self.stats.timed("get_pipeline"):
            try:
                self._check_device(request.device_id)
            except P4RTError as e:
                context.abort(e.code, e.message)
            resp = p4runtime_pb2.GetForwardingPipelineConfigResponse()
            resp.config.CopyFrom(self.device.pipeline.forwarding_config(request.response_type))
            return resp

    def Capabilities(self, request: p4runtime_pb2.CapabilitiesRequest, context: grpc.ServicerContext) -> p4runtime_pb2.CapabilitiesResponse:
        return p4runtime_pb2.CapabilitiesResponse(p4runtime_api_version=API_VERSION)

    # ---- the stream ------------------------------------------------------------------------

    def StreamChannel(self, request_iterator: Iterator[p4runtime_pb2.StreamMessageRequest], context: grpc.ServicerContext) -> Iterator[p4runtime_pb2.StreamMessageResponse]:
        session = Session(context.peer())
        context.add_callback(session.close)
        with self._sessions_lock:
            self._sessions.add(session)
        reader = threading.Thread(target=self._read_stream, args=(session, request_iterator), name=f"p4rt-stream-{session.id}", daemon=True)
        reader.start()
        try:
            while True:
                item = session.queue.get()
                if item is None:
                    return
                if isinstance(item, P4RTError):
                    context.abort(item.code, item.message)
                yield item
        finally:
            session.closed.set()
            self.arbiter.remove(session)
            with self._sessions_lock:
                self._sessions.discard(session)

    def _read_stream(self, session: Session, requests: Iterator[p4runtime_pb2.StreamMessageRequest]) -> None:
        try:
            for req in requests:
                kind = req.WhichOneof("update")
                if kind == "arbitration":
                    try:
                        self.arbiter.update(session, req.arbitration)
                    except P4RTError as e:
                        session.terminate(e)
                        return
                elif kind == "packet":
                    self._packet_out(session, req.packet)
                elif kind == "digest_ack":
                    self._digest_ack(session, req.digest_ack)
                else:
                    err = p4runtime_pb2.StreamMessageResponse()
                    err.error.canonical_code = grpc.StatusCode.UNIMPLEMENTED.value[0]
                    err.error.message = f"unsupported stream message {kind or '(empty)'}"
                    err.error.other.SetInParent()
                    session.send(err)
        except grpc.RpcError:
            pass  # the client went away
        except Exception as e:  # never let a bad message kill the switch; end this stream
            session.terminate(P4RTError(grpc.StatusCode.INTERNAL, f"stream handler failed: {e}"))
            return
        session.close()

    def _packet_out(self, session: Session, pkt: p4runtime_pb2.PacketOut) -> None:
        t0 = time.perf_counter()
        try:
            if not self.arbiter.is_primary(session):
                raise P4RTError(grpc.StatusCode.PERMISSION_DENIED, "only the primary controller may send PacketOut")
            egress: int | None = None
            for md in pkt.metadata:
                if md.metadata_id != PACKET_OUT_EGRESS_PORT:
                    raise invalid(f"packet_out has no metadata with id {md.metadata_id}")
                try:
                    port = bytestrings.check(md.value, PORT_METADATA_BITS)
                except BitstringError as e:
                    raise invalid(f"egress_port: {e}") from None
                egress = None if port == THROUGH_INGRESS else port
            try:
                self.device.dp.packet_out(bytes(pkt.payload), egress)
            except native.ControlPlaneError as e:
                raise P4RTError(status_code(e.args[0]), str(e.args[1])) from None
            except ValueError as e:
                raise P4RTError(grpc.StatusCode.UNAVAILABLE, str(e)) from None
        except P4RTError as e:
            self.stats.record("packet_out", time.perf_counter() - t0, False)
            resp = p4runtime_pb2.StreamMessageResponse()
            resp.error.canonical_code = e.number
            resp.error.message = e.message
            resp.error.packet_out.packet_out.CopyFrom(pkt)
            session.send(resp)
            return
        self.stats.record("packet_out", time.perf_counter() - t0, True)

    def _digest_ack(self, session: Session, ack: p4runtime_pb2.DigestListAck) -> None:
        code, message = None, ""
        if not self.arbiter.is_primary(session):
            code, message = grpc.StatusCode.PERMISSION_DENIED, "only the primary controller acknowledges digests"
        elif ack.digest_id not in self.device.pipeline.index.digests:
            code, message = grpc.StatusCode.INVALID_ARGUMENT, f"no digest with id 0x{ack.digest_id:08x}"
        else:
            self.digests.ack(ack.digest_id, ack.list_id)
            self.stats.count("digest.acks")
        if code is not None:
            resp = p4runtime_pb2.StreamMessageResponse()
            resp.error.canonical_code = code.value[0]
            resp.error.message = message
            resp.error.digest_list_ack.digest_list_ack.CopyFrom(ack)
            session.send(resp)


class SwitchServer:
    """The control plane of one switch: P4Runtime over gRPC plus the event threads, on top
    of a running native Dataplane (which the caller owns and stops after `stop`)."""

    def __init__(self, dp: Any, address: str = "127.0.0.1:9559", device_id: int = 1, max_workers: int = 32,
                 tls: TlsFiles | None = None, target: str | None = None) -> None:
        """`target`: the one `dp` was loaded for (None: unbounded). The P4Info and any
        pipeline a controller sets follow it."""
        self.dp = dp
        self.stats = OpStats()
        self.device = Device(dp, Pipeline.for_programs(list(dp.program_names()), target=target), self.stats)
        self.arbiter = Arbiter(device_id)
        self.digests = DigestEngine(self.device, self.arbiter, self.stats)
        self.packet_ins = PacketInPump(self.device, self.arbiter, self.stats)
        self.service = P4RuntimeService(self.device, self.arbiter, self.digests, self.stats)
        self.learner: Optional[L2Learner] = None
        # so_reuseport off: a second switch on the same address must fail, not share it.
        options = [("grpc.so_reuseport", 0), ("grpc.max_receive_message_length", _MAX_MESSAGE), ("grpc.max_send_message_length", _MAX_MESSAGE)]
        self._server = grpc.server(ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="p4rt"), options=options)
        p4runtime_pb2_grpc.add_P4RuntimeServicer_to_server(self.service, self._server)
        host = address.rsplit(":", 1)[0]
        try:
            if tls is not None and tls.enabled:
                port = self._server.add_secure_port(address, tls.server_credentials())
            else:
                port = self._server.add_insecure_port(address)
        except RuntimeError:
            port = 0
        if not port:
            raise OSError(f"cannot listen for P4Runtime on {address}: the address is in use or not available")
        self.address = f"{host}:{port}"
        self.device_id = device_id
        self.tls = bool(tls and tls.enabled)

    def enable_learning(self) -> bool:
        """Standalone L2 learning and flooding (inswitch.switchd.learning), until a
        controller writes. False if the pipeline has no `forward`."""
        lr = learner_for(self.device, self.stats)
        if lr is None:
            return False
        lr.start(int(self.dp.num_ports))
        self.digests.local[lr.digest.id] = lr.on_digest
        self.service.learner = lr
        self.learner = lr
        return True

    def start(self) -> None:
        self._server.start()
        self.packet_ins.start()
        self.digests.start()

    def stop(self, grace: float = 1.0) -> None:
        """Stop serving: end every stream, finish in-flight RPCs (up to `grace` seconds),
        then stop the event threads so nothing still uses the data plane."""
        self.service.close_streams()
        self._server.stop(grace).wait(grace + 1)
        self.packet_ins.stop()
        self.digests.stop()
