"""P4Runtime errors as the server raises and reports them.

Handlers raise `P4RTError(code, message)`; the servicer turns it into the RPC status. Batch
RPCs (Write, Read) report per-item errors the way the P4Runtime spec asks: overall status
UNKNOWN, and a `google.rpc.Status` in the `grpc-status-details-bin` trailer whose details
hold one `p4.v1.Error` per item (OK for the items that worked).
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import grpc
from google.rpc import code_pb2, status_pb2
from p4.v1 import p4runtime_pb2

_BY_NUMBER = {c.value[0]: c for c in grpc.StatusCode}


def status_code(number: int) -> grpc.StatusCode:
    """grpc.StatusCode for a google.rpc.Code number (UNKNOWN if it is not one)."""
    return _BY_NUMBER.get(int(number), grpc.StatusCode.UNKNOWN)


class P4RTError(Exception):
    """A request the switch refuses, with the gRPC code the spec gives that case."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def number(self) -> int:
        return int(self.code.value[0])

    def __str__(self) -> str:
        return f"{self.code.name}: {self.message}"


def invalid(message: str) -> P4RTError:
    return P4RTError(grpc.StatusCode.INVALID_ARGUMENT, message)


def not_found(message: str) -> P4RTError:
    return P4RTError(grpc.StatusCode.NOT_FOUND, message)


def unimplemented(message: str) -> P4RTError:
    return P4RTError(grpc.StatusCode.UNIMPLEMENTED, message)


class RpcStatus(NamedTuple):
    """What `ServicerContext.abort_with_status` takes (the grpc.Status interface)."""

    code: grpc.StatusCode
    details: str
    trailing_metadata: tuple[tuple[str, bytes], ...]


def batch_status(errors: Sequence[P4RTError | None], what: str) -> RpcStatus:
    """UNKNOWN with one p4.v1.Error per batch item; the message names the first failure so
    a client that does not decode details still sees why."""
    st = status_pb2.Status(code=code_pb2.UNKNOWN)
    failed = [(i, e) for i, e in enumerate(errors) if e is not None]
    first = f" (item {failed[0][0]}: {failed[0][1]})" if failed else ""
    st.message = f"{what} failed for {len(failed)} of {len(errors)} items{first}"
    for e in errors:
        p4e = p4runtime_pb2.Error()
        if e is not None:
            p4e.canonical_code = e.number
            p4e.message = e.message
        st.details.add().Pack(p4e)
    return RpcStatus(grpc.StatusCode.UNKNOWN, st.message, (("grpc-status-details-bin", st.SerializeToString()),))
