"""The KV store as a Hare application (K3): what the user writes on the host side.

The store itself (with a write-ahead log, so a restart loses no acknowledged write) and the
three hooks; statistics, the analyzer, the state manager and the plane interactions are the
framework's (`framework.py`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from inswitch.apps.hare.framework import CLIENT, OP_DATAMV_TO_SWITCH, HareServer, Query
from inswitch.apps.hare.workload import value_bytes

OP_GET, OP_GET_REPLY, OP_PUT, OP_PUT_REPLY = 1, 2, 3, 4


class Server(HareServer):
    """A KV backend server."""

    DATAMV_PACKETS_TO_SWITCH = 1
    DATAMV_PACKETS_TO_SERVER = 0  # write-through: the switch's copy is never dirty

    def __init__(self, idx: int, n_keys: int, keys_of: Callable[[int], bytes], servers: int, value_size: int, key_field: int, k: int, wal: Optional[Path] = None):
        super().__init__(idx, k, key_field)
        self.value_size, self.wal = value_size, wal
        self.store: dict[bytes, bytes] = {}
        self.index: dict[bytes, int] = {}
        for i in range(idx, n_keys, servers):
            kb = keys_of(i)
            self.store[kb] = value_bytes(i, 0, value_size)
            self.index[kb] = i
        if wal is not None:
            self._replay()

    # ---- the hooks -----------------------------------------------------------------------

    def process_query(self, q: Query) -> list[bytes]:
        if q.op == OP_GET:
            self.update_statistic(q.key)
            return [self.frame(CLIENT, OP_GET_REPLY, q.key, self.store[q.key], q.seq)]
        if q.op == OP_PUT:
            self.put(q.key, q.value)
            return [self.frame(CLIENT, OP_PUT_REPLY, q.key, q.value, q.seq)]
        return []

    def datamv_server2switch(self, key: bytes, slot: int) -> None:
        self.control(OP_DATAMV_TO_SWITCH, slot, self.store[key], key=key)

    # ---- the store -----------------------------------------------------------------------

    def _replay(self) -> None:
        assert self.wal is not None
        if not self.wal.exists():
            return
        data = self.wal.read_bytes()
        off = 0
        while off + 2 <= len(data):
            kl, vl = data[off], data[off + 1]
            if off + 2 + kl + vl > len(data):
                break  # a torn last record was never acknowledged
            k = data[off + 2 : off + 2 + kl]
            self.store[k] = data[off + 2 + kl : off + 2 + kl + vl]
            off += 2 + kl + vl

    def put(self, key: bytes, value: bytes) -> None:
        if self.wal is not None:
            with self.wal.open("ab") as f:
                f.write(bytes([len(key), len(value)]) + key + value)
        self.store[key] = value

    def restart(self) -> "Server":
        """A new process over the same log (the in-memory store is lost)."""
        s = Server.__new__(Server)
        HareServer.__init__(s, self.idx, max(1, len(self.noo.top())), self.key_field)
        s.value_size, s.wal = self.value_size, self.wal
        s.store, s.index = {}, dict(self.index)
        for kb, i in self.index.items():
            s.store[kb] = value_bytes(i, 0, self.value_size)
        s._replay()
        return s
