"""The allreduce controller's `jobs` entries: each port's worker ids as a range, written in
the one P4Runtime write of the job (a recording client: no switch)."""

from __future__ import annotations

from typing import Any

import pytest

from inswitch.apps.allreduce import controller as ar


def addr(port: int, udp: int = 7000, host: int = 1) -> ar.WorkerAddr:
    return ar.WorkerAddr(port=port, mac=f"02:00:00:00:00:{host:02x}", ip=f"10.0.0.{host}", udp_port=udp)


class Recorder:
    """The part of `SwitchClient` that `install` uses, recording its writes."""

    def __init__(self) -> None:
        self.writes: list[list[Any]] = []

    def read_entries(self, table: str) -> list[dict[str, Any]]:
        return []

    def insert_entry(self, *a: Any) -> None:
        pass

    def set_multicast_group(self, *a: Any) -> None:
        pass

    def table_update(self, op: Any, table: str, match: dict[str, int], action: str, params: dict[str, int]) -> tuple[Any, ...]:
        return (table, match, action, params)

    def write(self, updates: list[Any]) -> None:
        self.writes.append(updates)


def test_each_port_gets_its_workers_range_in_one_write() -> None:
    # Four workers on port 3 (the dense tenant's layout), then one each on ports 5 and 1.
    workers = [addr(3, 7000 + i, 3) for i in range(4)] + [addr(5, host=5), addr(1, host=1)]
    assert ar.port_ranges(workers) == {3: (0, 4), 5: (4, 1), 1: (5, 1)}
    c = Recorder()
    ar.install(c, ar.plan([(9, len(workers))], 8)[0], workers)  # type: ignore[arg-type]
    (ups,) = c.writes  # one write for every port's entry
    got = {m[ar.JOB_PORT_FIELD]: p for _, m, _, p in ups}
    assert set(got) == {1, 3, 5}
    assert {p: (v["worker_range"] >> 16, v["worker_range"] & 0xFFFF) for p, v in got.items()} == {3: (0, 4), 5: (4, 1), 1: (5, 1)}
    assert all(v["workers"] == 6 for v in got.values())


def test_a_port_whose_workers_are_not_consecutive_is_refused() -> None:
    with pytest.raises(ValueError, match="port 3 are not contiguous"):
        ar.port_ranges([addr(3), addr(4), addr(3)])
