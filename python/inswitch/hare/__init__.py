"""Hare in front of a real store: the client library (`Client`), the RESP proxy, the
YCSB workloads and the linearizability checker. See `client.py` for the API."""

from inswitch.hare.client import Client, HareError, Op, StoreError, Timeout, TooLarge

__all__ = ["Client", "HareError", "Op", "StoreError", "Timeout", "TooLarge"]
