"""P4Runtime errors as the server raises and reports them.

Handlers raise `P4RTError(code, message)`; the servicer turns it into the RPC status. Batch
RPCs (Write, Read) report per-item errors the way the P4Runtime spec asks: overall status
UNKNOWN, and a `google.rpc.Status` in the `grpc-status-details-bin` trailer whose details
hold one `p4.v1.Error` per item (OK for the items that worked).

That trailer is metadata, and a gRPC client accepts only so much: by default 8 KB
(`grpc.max_metadata_size`; between 8 and 16 KB it drops the whole status at random, above
16 KB always), and then it sees neither what was applied nor what failed. So a report is
built to fit the client's limit (messages shortened, codes always kept), and a Write too
large for its report ever to fit is refused before anything is applied
([`max_batch`]). A client with a larger limit says so in the `inswitch-max-metadata-size`
request header (our `SwitchClient` does). See docs/switchd.md.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Sequence

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


#: What a gRPC client accepts by default (`grpc.max_metadata_size`, key and value lengths plus
#: 32 bytes per entry, all trailers together).
DEFAULT_CLIENT_METADATA = 8192
#: The request header in which a client declares a larger limit (bytes, decimal).
CLIENT_LIMIT_HEADER = "inswitch-max-metadata-size"
#: Room kept for the other trailers (grpc-status, grpc-message) and the entry overheads.
_HEADROOM = 1024
#: Longest status message (grpc-message) we send; the first failure's text is cut to fit.
_MAX_MESSAGE_TEXT = 400


def client_metadata_limit(invocation_metadata: Sequence[tuple[str, object]] | None) -> int:
    """The metadata limit the client declared, else gRPC's default."""
    for key, value in invocation_metadata or ():
        if key == CLIENT_LIMIT_HEADER:
            try:
                return max(DEFAULT_CLIENT_METADATA, int(str(value)))
            except ValueError:
                break
    return DEFAULT_CLIENT_METADATA


def _detail_size(code: int, message: str) -> int:
    """Bytes one item adds to the serialized report (the Any plus its field header)."""
    st = status_pb2.Status()
    st.details.add().Pack(p4runtime_pb2.Error(canonical_code=code, message=message))
    return st.ByteSize()


#: One failed item with its message dropped: the worst an item can cost once trimmed
#: (16 = UNAUTHENTICATED, the largest code).
_MIN_FAILED_ITEM = _detail_size(16, "")


def max_batch(client_limit: int = DEFAULT_CLIENT_METADATA) -> int:
    """The most items whose report fits `client_limit` whatever fails: every item failed,
    messages dropped. A larger batch is refused before anything is applied."""
    return max(1, (client_limit - _HEADROOM) // _MIN_FAILED_ITEM)


def batch_status(errors: Sequence[P4RTError | None], what: str,
                 client_limit: Optional[int] = DEFAULT_CLIENT_METADATA) -> RpcStatus:
    """UNKNOWN with one p4.v1.Error per batch item; the message names the first failure so
    a client that does not decode details still sees why. When the messages would make the
    report larger than `client_limit` allows, the later ones are left out (every code stays):
    the client still learns which items failed and how."""
    st = status_pb2.Status(code=code_pb2.UNKNOWN)
    failed = [(i, e) for i, e in enumerate(errors) if e is not None]
    first = f" (item {failed[0][0]}: {failed[0][1]})" if failed else ""
    st.message = f"{what} failed for {len(failed)} of {len(errors)} items{first}"[:_MAX_MESSAGE_TEXT]
    budget = None if client_limit is None else client_limit - _HEADROOM
    size = sum(_detail_size(e.number if e else 0, "") for e in errors)
    cut = 0
    for e in errors:
        p4e = p4runtime_pb2.Error()
        if e is not None:
            p4e.canonical_code = e.number
            extra = _detail_size(e.number, e.message) - _detail_size(e.number, "")
            if budget is None or size + extra <= budget:
                p4e.message = e.message
                size += extra
            else:
                cut += 1
        st.details.add().Pack(p4e)
    if cut:
        st.message = (st.message + f"; the messages of {cut} later failures were left out to fit the client's "
                      f"{client_limit}-byte metadata limit")[: _MAX_MESSAGE_TEXT + 120]
    return RpcStatus(grpc.StatusCode.UNKNOWN, st.message, (("grpc-status-details-bin", st.SerializeToString()),))
