"""Errors a P4Runtime server reports, decoded for callers of the client library."""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from google.rpc import status_pb2
from p4.v1 import p4runtime_pb2

_BY_NUMBER = {c.value[0]: c for c in grpc.StatusCode}


@dataclass(frozen=True)
class UpdateError:
    """Why one item of a batch (a Write update or a Read request) failed."""

    index: int
    code: grpc.StatusCode
    message: str


class P4RuntimeError(Exception):
    """An RPC failed. `code` is the status that explains it: for a batch where items failed
    (overall status UNKNOWN) it is the first failed item's code, so `insert_entry` of a
    duplicate raises with `code == ALREADY_EXISTS`. `rpc_code` is the RPC's own status and
    `errors` lists every failed item."""

    def __init__(self, rpc_code: grpc.StatusCode, message: str, errors: list[UpdateError] | None = None) -> None:
        self.rpc_code = rpc_code
        self.errors = errors or []
        self.code = self.errors[0].code if self.errors else rpc_code
        self.message = self.errors[0].message if self.errors else message
        super().__init__(f"{self.code.name}: {self.message}")

    @classmethod
    def from_rpc(cls, e: grpc.RpcError) -> "P4RuntimeError":
        code = e.code() if hasattr(e, "code") else grpc.StatusCode.UNKNOWN
        details = e.details() if hasattr(e, "details") else str(e)
        errors: list[UpdateError] = []
        for key, value in (e.trailing_metadata() or ()) if hasattr(e, "trailing_metadata") else ():
            if key == "grpc-status-details-bin":
                st = status_pb2.Status()
                st.ParseFromString(value)
                for i, any_ in enumerate(st.details):
                    p4e = p4runtime_pb2.Error()
                    if any_.Unpack(p4e) and p4e.canonical_code != 0:
                        errors.append(UpdateError(i, _BY_NUMBER.get(p4e.canonical_code, grpc.StatusCode.UNKNOWN), p4e.message))
        return cls(code, details or "", errors)
