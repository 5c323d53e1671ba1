"""What hosts and controllers know of the rack's switch restarts: the supervisor records each
in the rack's state file (`extra.restarts`), which every process on the machine can read,
the hosts in their namespaces included (they share the filesystem). A record appears as
soon as the switch is seen dead (`died_at`) and gains `forwarding_at` once it forwards
again with the rack's forwarding state installed. One place for the readers: jobs that
annotate their results, hosts that retry, controllers that re-install their state."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional


def read(state_file: str | Path, since: float = 0.0) -> list[dict[str, Any]]:
    """Restart records of the rack whose state is `state_file`, of deaths after `since`."""
    try:
        doc = json.loads(Path(state_file).read_text())
    except (OSError, ValueError):
        return []
    return [r for r in doc.get("extra", {}).get("restarts", []) if float(r.get("died_at", 0)) >= since]


def wait_back(state_file: str | Path, since: float = 0.0, timeout: float = 60.0, expect: int = 0) -> list[dict[str, Any]]:
    """Wait until every restart after `since` has ended (forwarding again, or given up),
    and at least `expect` are recorded (deaths the caller saw that the supervisor may not
    have noticed yet); returns the records."""
    deadline = time.monotonic() + timeout
    while True:
        recs = read(state_file, since)
        ended = all("forwarding_at" in r or "gave_up" in r or "error" in r for r in recs)
        if (ended and len(recs) >= expect) or time.monotonic() > deadline:
            return recs
        time.sleep(0.05)


class Watcher:
    """Calls `on_back(record)` (in a thread of its own) each time the rack's switch is back
    after a restart: where a controller re-installs the state it had written."""

    def __init__(self, state_file: str | Path, on_back: Callable[[dict[str, Any]], None], poll_s: float = 0.05) -> None:
        self.state_file, self.on_back, self.poll_s = state_file, on_back, poll_s
        self.since = time.time()
        self.handled: set[int] = set()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def __enter__(self) -> "Watcher":
        self._thread = threading.Thread(target=self._run, name="restart-watcher", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            for r in read(self.state_file, self.since):
                if "forwarding_at" in r and r["generation"] not in self.handled:
                    self.handled.add(r["generation"])
                    try:
                        self.on_back(r)
                    except Exception as e:  # reported with the result, not lost in a thread
                        self.errors.append(f"generation {r['generation']}: {e}")
