"""Register-seconds billed from measured lease holds (the goalkeeper's grant log), beside
the old full-term figure (leases x min(T, run))."""

from __future__ import annotations

import pytest
from inswitch.apps.inaas.controller import Prices, Region, bill, folded_holds, measured_holds


def test_hold_ends_at_takeover_deadline_or_run_end() -> None:
    # (segment, index, holder, granted at µs, term µs)
    grants = [
        (0, 5, 1, 100, 1_000),  # taken by holder 2 at 400, before its deadline 1100: 300
        (0, 5, 2, 400, 1_000),  # runs to its deadline 1400: 1000
        (0, 5, 1, 2_000, 1_000),  # the run ends at 2500: 500
        (3, 5, 1, 150, 50),  # another cell (same index, other segment): its deadline, 50
        (1, 7, 2, 10, 100),  # expired at 110, the same holder takes it again at 900: 100
        (1, 7, 2, 900, 10_000),  # run end: 1600
        (2, 9, 3, 3_000, 100),  # granted after the run's end: nothing
    ]
    assert measured_holds(grants, 2_500) == {1: 300 + 500 + 50, 2: 1_000 + 100 + 1_600, 3: 0}
    # A cell's grants need not come in time order.
    assert measured_holds(list(reversed(grants)), 2_500) == {1: 850, 2: 2_700, 3: 0}
    assert measured_holds([], 10) == {}


def test_folded_holds_add_the_closed_leases_to_the_open_ones() -> None:
    # What the goalkeeper keeps of the log above: the closed leases' µs per uid (holder 1's
    # first lease, 300; holder 2's two, 1000 + 100; holder 1's on cell (3, 5) stays open)
    # and the last grant of each cell, counted to the run's end as the whole log would be.
    closed = {"1": 300, "2": 1_100}
    open_grants = [(0, 5, 1, 2_000, 1_000), (3, 5, 1, 150, 50), (1, 7, 2, 900, 10_000), (2, 9, 3, 3_000, 100)]
    assert folded_holds(closed, open_grants, 2_500) == {1: 850, 2: 2_700, 3: 0}


def test_bill_charges_the_measured_holds_and_keeps_the_full_term_beside() -> None:
    usage = {"alu_ops": 1000, "packets": 10, "mismatches": 0, "leases": 4}
    r = Region(0, 8, 1_000_000, 1_000_000)
    p = Prices()
    line = bill("kv#0", usage, 4, r, p, 3_000_000, held_us=1_500_000, clock="test")
    assert line["register_seconds_full_term"] == pytest.approx(4.0) and line["lease_s"] == 1.0
    assert line["register_seconds"] == line["held_s_measured"] == pytest.approx(1.5)
    assert line["pay_per_use_equivalent"] == pytest.approx(1000 * p.per_alu_op + 1.5 * p.per_register_second)
    assert line["charge"] == line["pay_per_use_equivalent"] and line["adds_up"]
    assert line["pricing"].startswith("measured holds") and "test" in line["pricing"]
    old = bill("kv#0", usage, 4, r, p, 3_000_000)
    assert old["register_seconds"] == pytest.approx(4.0) and old["held_s_measured"] is None and old["pricing"].startswith("full term")


# The real run's ledger (measured holds, beside the full term) is checked in
# `test_inaas_real.py::test_real_tenants_in_a_rack`, which runs a rack anyway.
