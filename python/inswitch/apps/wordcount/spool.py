"""A mapper's pairs spooled to disk, one file per reducer, written a chunk at a time as the
input is read: without a combiner a mapper has a pair per word of its input, and holding
them (plus their packets) cost ~8x the text in memory.

A spool file is the TCP shuffle's frames `<u32 key length, key, u32 value>` (network order,
`transport.tcp_encode`): the native mapper reads it as its window advances
(`agg_map_spool`), and a tcp-mode mapper sends it unchanged with `socket.sendfile`.
"""

from __future__ import annotations

import socket
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

import numpy as np

from inswitch.apps.wordcount import transport
from inswitch.apps.wordcount.transport import Pairs


def spool_path(directory: Path, mapper_id: int, tree: int) -> Path:
    return directory / f"spool-m{mapper_id}-{tree}.bin"


class Spools:
    """Spool files `spool-m<mapper_id>-<tree>.bin` in `directory`, one per reducer (`trees[r]`
    names reducer r's); keys longer than `limit` are kept apart (`side`) for the TCP side
    channel. A context manager: the files are removed on exit, error or not."""

    def __init__(self, directory: Path, mapper_id: int, trees: list[int], limit: int | None = None) -> None:
        self.paths = [spool_path(directory, mapper_id, t) for t in trees]
        self.limit = limit
        self.bytes = 0
        self.pairs = 0
        self.side: list[list[Pairs]] = [[] for _ in trees]
        self._files: list[BinaryIO] = []
        try:
            for p in self.paths:
                self._files.append(open(p, "wb", buffering=1 << 20))
        except BaseException:
            self.remove()
            raise

    def add(self, pairs: Pairs, reducer: np.ndarray) -> None:
        """Append a chunk of pairs, `reducer[i]` the reducer of pair i."""
        for r, f in enumerate(self._files):
            p = pairs.select(reducer == r)
            if self.limit is not None:
                long = p.key_lens() > self.limit
                if long.any():
                    self.side[r].append(p.select(long))
                    p = p.select(~long)
            data = transport.tcp_encode(p)
            f.write(data)
            self.bytes += len(data)
            self.pairs += len(p)

    def close(self) -> None:
        for f in self._files:
            f.close()

    def side_pairs(self) -> list[Pairs]:
        return [Pairs.concat(s) if s else Pairs.empty() for s in self.side]

    def remove(self) -> None:
        self.close()
        for p in self.paths:
            p.unlink(missing_ok=True)

    def __enter__(self) -> "Spools":
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.remove()


def tcp_send_spools(reducers: list[str], paths: list[Path], timeout_s: float) -> dict[str, Any]:
    """`transport.tcp_map` for spooled pairs: each spool file goes to its reducer as it is
    (`sendfile`: the kernel copies it, no pass through Python)."""
    def send(s: socket.socket, r: int) -> int:
        with open(paths[r], "rb") as f:
            return s.sendfile(f)
    return transport.tcp_send_each(reducers, timeout_s, send)

