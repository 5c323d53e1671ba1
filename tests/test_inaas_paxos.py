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


def test_host_acceptors_through_the_extension_decide_and_refuse() -> None:
    """The host-only baseline's parts as `tenants run --real` uses them: `InaasPaxosHosts`
    (the proposer and learners) against three `InaasPaxosAcceptor`s, frames carried as the
    tenant carries them (the INaaS header in a datagram, an Ethernet header put back),
    time advanced by the proposer's own `poll_timeout`. Then a second proposer with a
    higher ballot: the first one's next request is refused by every acceptor."""
    eth = bytes(12) + (0x88B6).to_bytes(2, "big")
    mac, gk = bytes.fromhex("020000000002"), bytes.fromhex("020000000001")
    accs = [_native.InaasPaxosAcceptor(j) for j in range(3)]

    def carry(h: _native.InaasPaxosHosts, now: int, drop_first: bool = False) -> list[tuple[int, int]]:
        frames, decided = h.step(now)
        for k, f in enumerate(frames):
            for a in accs:
                out = a.answer(f[14:])
                assert out is not None
                if not (drop_first and k == 0):
                    h.on_frame(eth + out, now)
        return list(decided)

    h = _native.InaasPaxosHosts(7, mac, gk, 0, 4, 0, 200)
    now = 0
    carry(h, now)
    assert h.leading
    values = list(range(1, 13))
    for v in values:
        h.propose(v)
    lost_once = True
    while min(h.delivered()) < len(values) and now < 100_000:
        carry(h, now, drop_first=lost_once)  # the first 2a's answers lost: resent at its RTO
        lost_once = False
        if min(h.delivered()) == len(values):
            break
        t = h.poll_timeout()
        assert t is not None, "work left, but no timer"
        now = max(now + 1, t)
    logs, violations = h.logs()
    assert violations == [] and all(list(x) == values for x in logs) and h.gap_free()
    assert h.stats()["resent"] >= 1 and h.stats()["refused"] == 0
    # A higher ballot takes the acceptors; the old proposer's next 2a is refused.
    h2 = _native.InaasPaxosHosts(7, mac, gk, 0, 4, now, 200, proposer_id=2, lead=False)
    h2.take_over(now)
    h2.set_floor(len(values), now)
    carry(h2, now)
    h.propose(99)
    carry(h, now + 1)
    # Refused (then, by default, it takes over above the refusal at once: a second round).
    assert h.stats()["refused"] >= 1 and h.ballot > h2.ballot and h.stats()["rounds"] == 2
    assert all(a.stats()["refused"] >= 1 and a.stats()["voted"] >= len(values) for a in accs)
    try:
        _native.InaasPaxosAcceptor(3)
    except ValueError as e:
        assert "acceptor 3" in str(e)
    else:
        raise AssertionError("acceptor 3 accepted")
