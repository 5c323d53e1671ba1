"""A loop on a daemon thread, run every `every` seconds from `with` entry to exit: the
shape of the Hare control loop that runs beside a benchmark and of the CPU sampler that
watches a process during one."""

from __future__ import annotations

import threading


class Periodic:
    """Calls `tick()` (a subclass's) every `every` s until the `with` block ends; exit waits
    up to `join_s` for the tick in progress."""

    def __init__(self, every: float, join_s: float = 2.0) -> None:
        self.every, self.join_s = every, join_s
        self.stop = threading.Event()
        self.th = threading.Thread(target=self._loop, daemon=True)

    def tick(self) -> None:
        raise NotImplementedError

    def _loop(self) -> None:
        while not self.stop.is_set():
            self.tick()
            self.stop.wait(self.every)

    def __enter__(self) -> "Periodic":
        self.th.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.th.join(self.join_s)
