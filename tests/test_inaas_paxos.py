"""Paxos with the acceptors in the switch (docs/inaas.md, "Paxos in the switch").

Safety as a property over fault seeds (loss, duplication, reordering, a killed and a
revived proposer) on the in-process service; the Rust proptest
(`crates/hostlib/tests/paxos.rs`) runs many more cases. The `paxos` tenant of
`tenants run` is this Paxos, checked against the values it was given."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from inswitch import _native
from inswitch.apps.inaas.runner import run_tenants


def _assert_safe_and_live(r: dict) -> None:
    assert r["violations"] == []
    logs = r["logs"]
    longest = max(logs, key=len)
    proposed = set(r["proposed"])
    for log in logs:
        assert log == longest[: len(log)], "two learners delivered different values"
        assert all(v == 0 or v in proposed for v in log)
    assert r["finished"]
    for log in logs:
        assert set(r["must_deliver"]) <= set(log)
    # The replicated KV: every replica that delivered the same log holds the same state,
    # and it is the last PUT of each key (each command once), computed here from the log.
    for log, kv in zip(logs, r["kv"]):
        ref: dict[int, int] = {}
        seen: set[int] = set()
        for c in log:
            if c != 0 and c not in seen:
                seen.add(c)
                ref[c >> 20] = c & 0xFFFFF
        assert dict(kv) == ref


@settings(max_examples=20, deadline=None)
@given(
    seed=st.integers(1, 10**6),
    loss=st.floats(0.0, 0.15),
    dup=st.floats(0.0, 0.2),
    jitter=st.integers(0, 30),
    crash=st.none() | st.integers(0, 400),
    zombie=st.booleans(),
)
def test_paxos_safe_under_faults(seed: int, loss: float, dup: float, jitter: int, crash: int | None, zombie: bool) -> None:
    r = _native.paxos_run(seed=seed, loss=loss, dup=dup, jitter_us=jitter, crash_at_us=crash, zombie=zombie, values=24, slots=8)
    _assert_safe_and_live(r)
    if crash is not None:
        assert r["took_over"]


def test_paxos_no_faults_log_is_the_proposals() -> None:
    r = _native.paxos_run(seed=3, values=30)
    _assert_safe_and_live(r)
    assert r["logs"][0] == r["proposed"]
    assert len(r["latencies_us"]) == 30


def test_paxos_tenant_runs_in_the_switch() -> None:
    r = run_tenants(["paxos"], quick=True, loss=0.02, seed=5)
    p = r["apps"]["paxos"]
    assert p["acceptors_in_switch"] is True
    assert p["correct"] and p["wrong_results"] == 0
    # The safety check of every run (`paxos_safety`), no crash here.
    assert p["took_over"] is False and p["violations"] == [] and p["gap_free"] is True
    assert p["delivered"] == [150, 150, 150]  # QUICK.paxos_instances, every learner
    assert r["switch"]["violations"] == 0
