"""The lock manager served to real client processes in a rack (`inswitch locks --backend
real`): Hare, the NetLock-style static baseline and no offloading, each checked for
mutual exclusion from the holds every client recorded, and for unanswered requests.
Also the checker itself on hand-made holds, the lock server's grants after an
exclusive release (all shared waiters at the head of the queue at once), and a lock agent
killed with SIGKILL: by hand (its holders and waiters replayed from its journal) and
mid-run under load.

The rack test needs root (namespaces); the rack is named `hl<pid>` and always taken down."""

from __future__ import annotations

import os

import pytest

from inswitch.apps.hare import lockrack as lr
from inswitch.apps.hare.lockapp import LockServer


def test_mutex_checker_on_hand_made_holds() -> None:
    ms = 1_000_000
    ok = [[1, False, 0, 5 * ms, 1], [1, False, 1 * ms, 6 * ms, 2], [1, True, 6 * ms, 7 * ms, 3], [2, True, 0, 9 * ms, 4]]
    assert lr.mutex_violations(ok) == (0, [])
    bad = ok + [[1, True, 4 * ms, 6 * ms + 1, 5]]  # exclusive beside two shared and another exclusive
    n, ex = lr.mutex_violations(bad)
    assert n == 3 and ex
    assert lr.mutex_violations([[7, False, 0, 10, 1], [7, False, 5, 20, 2]])[0] == 0


def test_server_grants_shared_waiters_together() -> None:
    s = LockServer(0, 4)
    assert s.acquire(9, 1, 10, 1, True) == [(1, 10, 1)]
    for c, excl in ((2, False), (3, False), (4, True), (5, False)):
        assert s.acquire(9, c, 10 + c, c, excl) == []
    assert s.release(9) == [(2, 12, 2), (3, 13, 3)]
    assert s.release(9) == [] and s.release(9) == [(4, 14, 4)]
    assert s.release(9) == [(5, 15, 5)]


def test_server_grants_a_head_the_switch_had_freed() -> None:
    """A lock moved home between the release that freed it and the recirculated pass that
    would have granted the head waiter (that pass finds the slot moving and is dropped):
    the server grants the head, and the shared waiters behind a shared head, on arrival."""
    import struct

    s = LockServer(0, 4)
    # Switch state: free (holders 0), head 2, three waiters: shared, shared, exclusive.
    cells = {2: (7, 0x0A000001, 21), 3: (8, 0x0A000002, 22), 4: (9, 0x0A000003, 23)}
    lo, hi = 0, 2 | (3 << 3) | ((1 << 4) << 8)

    def control(op: int, slot: int, value: bytes, aux: int = 0, key: bytes = b"") -> bytes:
        if aux == 8:
            return struct.pack(">II", 0, lo)
        if aux == 9:
            return struct.pack(">II", 0, hi)
        client, ip, seq = cells[aux]
        return struct.pack(">II", (client << 16) | seq, ip)

    sent: list[bytes] = []
    s.control = control  # type: ignore[method-assign]
    s.send = lambda frames: sent.extend(frames) or []  # type: ignore[method-assign]
    s.datamv_switch2server((5).to_bytes(4, "big"), 3)
    st = s.locks[5]
    assert len(sent) == 2 and (st.holders, st.mode) == (2, 1)
    assert st.queue is not None and [w[0] for w in st.queue] == [9]


def test_a_lock_server_dying_in_a_move_home_leaves_the_lock_on_the_switch() -> None:
    """In process (the switch model running `hare_lock`, the framework, the lock servers):
    a round replaces an offloaded lock that one client holds exclusively and another waits
    for on the switch, and the lock's server dies as the lock's state is to come home. The
    state is dirty on the switch and nowhere else, so the undo leaves the lock where it is,
    valid again (evicting it would drop the holder and the waiter): the release reaches the
    switch, which grants the waiter; every grant is checked against the run's reference
    lock table. With the server back the next round moves the lock home and replaces it."""
    from inswitch.apps.hare import locksim
    from inswitch.apps.hare.lockapp import OP_ACQUIRE, OP_RELEASE

    run = locksim.LockRun("hare", locksim.LockParams(n_locks=8, cache=1, clients=3, batch=1, servers=2, duration=1.0, shift_at=None))
    fw = run.fw
    a, b = locksim.lock_key(2), locksim.lock_key(3)  # servers 0 and 1
    fw.offload(a, 0)
    for c in (0, 1):
        run.client_state[c] = {"lock": 2, "excl": True, "seq": c + 1, "t0": 0.0, "phase": "acq"}
        run.send(0.0, c, OP_ACQUIRE)
    assert [run.client_state[c]["phase"] for c in (0, 1)] == ["hold", "acq"], "client 0 holds, client 1 waits on the switch"
    for _ in range(50):
        run.servers[1].update_statistic(b)
    dying = run.servers[0]
    home = dying.datamv_switch2server

    def dies(key: bytes, slot: int) -> None:
        raise ConnectionError("server 0 died")

    dying.datamv_switch2server = dies  # type: ignore[method-assign]
    fw.round(0.1)
    with pytest.raises(ConnectionError):
        fw.run_due(0.5)
    assert fw.slots == {0: a} and fw.emat.slot_of(a) == 0 and fw.emat.slot_of(b) is None
    assert not fw.moving and fw.undo_stays == 1 and fw.evictions == 0
    run.send(0.01, 0, OP_RELEASE)
    assert run.client_state[0]["phase"] == "done" and run.client_state[1]["phase"] == "hold", "the waiter got the lock from the switch"
    run.send(0.02, 1, OP_RELEASE)
    assert run.client_state[1]["phase"] == "done" and run.correct, run.violations
    dying.datamv_switch2server = home  # type: ignore[method-assign]
    fw.round(0.2)
    fw.run_due(1.0)
    assert fw.slots == {0: b} and fw.evictions == 1 and not fw.moving
    assert run.servers[0].locks[2].holders == 0 and not run.servers[0].locks[2].queue, "the lock came home free"


@pytest.fixture(scope="module")
def lock_rack():
    from inswitch.topology import netns
    from inswitch.topology.state import process_tag

    if os.geteuid() != 0:
        pytest.skip("needs root: network namespaces and veth pairs")
    lp = lr.LockRackParams(n_locks=200, cache=16, clients=2, clients_per_host=6, duration=1.5, shift_at=0.75, batch=8, hold_s=1e-3,
                           workdir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    rack = lr.LockRack(lp, name=f"lkd{process_tag()}")
    rack.up()
    try:
        yield rack
    finally:
        rack.down()
        assert not netns.leftovers(f"{rack.name}-")


@pytest.mark.netns
def test_locks_real_processes_each_system(lock_rack: lr.LockRack) -> None:
    rack = lock_rack
    out = {}
    for s in lr.LOCK_RACK_SYSTEMS:
        out[s] = rack.run_locks(s, rack.use(s))
    for s, r in out.items():
        assert r["correct"] and r["mutex_violations"] == 0 and r["lost_requests"] == 0, (s, r["violation_examples"], r["control_errors"])
        assert r["holds"] > 100 and r["p99_us"] >= r["p50_us"] > 0
        # requests the lock servers answered other than "retry" (a lock moving)
        answered = sum(a["queries"] - a["retries"] for a in r["agents"])
        if s == "none":
            assert answered >= 2 * r["holds"], "every acquire and release reaches a lock server"
        else:
            assert r["control"]["offloads"] > 0
        if s == "netlock":
            assert answered < 1.8 * r["holds"], "the switch granted and released the hottest locks"


@pytest.mark.netns
def test_lock_agent_kill9_during_an_offloading_round(lock_rack: lr.LockRack) -> None:
    """kill -9 of a lock agent at the first move of a lock's state onto the switch that an
    offloading round asks of it: the round meets `AgentDown` and is cut short and
    counted (no control error), nothing stays marked, every lock the controller books is
    in its slot and valid on the switch, and with the agent back the next run's holds pass
    the checker (no two holders beside an exclusive one, no request unanswered) while
    Hare goes on offloading. The kill is made between two runs, to see the round's undo
    alone (a kill under load: `test_lock_agent_kill9_mid_run_loses_nothing`)."""
    rack = lock_rack
    old = (rack.lp.duration, rack.lp.shift_at)
    rack.lp.duration, rack.lp.shift_at = 0.8, 0.4  # short runs: the fast suite's budget
    try:
        _kill_between_runs(rack)
    finally:
        rack.lp.duration, rack.lp.shift_at = old


def _kill_between_runs(rack: lr.LockRack) -> None:
    from inswitch.apps.hare import framework
    from inswitch.apps.hare.redisrack import step

    ctl = rack.use("hare")
    r1 = rack.run_locks("hare", ctl)
    assert r1["correct"], (r1["violation_examples"], r1["control_errors"])
    fw = ctl.fw
    assert fw.slots, "the first run offloaded locks"
    # The offloaded locks' counters cleared: the agents' hottest locks replace the
    # coldest offloaded ones in the next round, whose requests reach agent 0.
    fw.cpu_many([(framework.OP_STAT_FETCH, s, 1, b"\0\0\0\0") for s in fw.slots])
    fw.base.clear()
    # At a lock's move onto the switch (Step 5): the round's later replacements have their
    # slots replacing, and their locks go home (live agent) or stay (the dead one).
    killed = rack.kill_in_round(0, cmds=("datamv",))
    errors: list[str] = []
    step(ctl, fw.next_round + fw.p.t_wait / 2, errors)  # the round, and its Step 5 due at once
    assert killed["killed_at"] is not None, "the round made no request to agent 0"
    assert not errors, errors
    c = ctl.counters()
    assert c["interrupted_rounds"] == 1, c
    assert not fw.moving
    assert len(fw.emat) == len(fw.slots) and all(fw.emat.slot_of(k) == s for s, k in fw.slots.items())
    assert all(rack.sw.register_read("hare_lock", "obj_state", s) == framework.STATE_VALID for s in fw.slots), "a booked lock left replacing"
    rack.start_agent(0)
    r2 = rack.run_locks("hare", ctl)
    assert r2["correct"] and r2["mutex_violations"] == 0 and r2["lost_requests"] == 0, (r2["violation_examples"], r2["control_errors"])
    assert r2["control"]["offloads"] > c["offloads"], "offloading went on with the agent back"


@pytest.mark.netns
@pytest.mark.slow
def test_lock_agent_kill9_mid_run_loses_nothing(lock_rack: lr.LockRack) -> None:
    """kill -9 of lock agent 0 while the clients acquire and release (Hare offloading),
    then its restart: the agent replays its lock table from its journal (holders, waiters,
    the clients' last releases) and sends again the grants and acks it had journalled, the
    clients resend what went unanswered while it was down, and its answers to those come
    from the table (never a second grant or release). The run's checker passes (no two
    holders beside an exclusive one, every request answered) and the run reports the
    window the agent was down."""
    rack = lock_rack
    lp = rack.lp
    old = (lp.duration, lp.shift_at, lp.kill_agent_at, lp.lost_s)
    lp.duration, lp.shift_at, lp.kill_agent_at, lp.lost_s = 3.0, 1.5, 1.0, 10.0
    try:
        ctl = rack.use("hare")
        r = rack.run_locks("hare", ctl)
    finally:
        lp.duration, lp.shift_at, lp.kill_agent_at, lp.lost_s = old
    assert r["mutex_violations"] == 0, r["violation_examples"]
    assert r["lost_requests"] == 0 and r["correct"], (r["clients"], r["control_errors"])
    (k,) = r["agent_restarts"]
    assert k["agent"] == 0 and 1.0 <= k["killed_at_s"] < 1.5 and 0 < k["down_s"] < 3.0, k
    assert k["tps_before"] > 0 and k["tps_after"] > 0, k
    a0 = r["agents"][0]
    assert a0["replayed"] > 1, "the restarted agent replayed a journal with the run's changes in it"
    assert r["clients"]["resent"] > 0, "requests to the dead agent were sent again"


# A client on a client host, by hand: each stdin line `op lock client seq excl` sends that
# request to the lock's server, `wait S N` prints what arrives within S seconds (at most N
# messages, then it stops waiting) as `op lock client seq status` lines, then `.`.
_HAND_CLIENT = """
import socket, sys, time
from inswitch.hare import wire
servers = sys.argv[1].split(',')
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(('0.0.0.0', wire.PORT_CLIENT))
print('READY', flush=True)
for line in sys.stdin:
    w = line.split()
    if w[0] == 'wait':
        end, n = time.monotonic() + float(w[1]), int(w[2])
        while (left := end - time.monotonic()) > 0 and n:
            s.settimeout(left)
            try:
                m = wire.Msg.decode(s.recv(2048))
            except socket.timeout:
                break
            print(m.op, int.from_bytes(m.key, 'big'), m.aux, m.seq & 0xFFFF, m.status, flush=True)
            n -= 1
        print('.', flush=True)
    else:
        op, lock, client, seq, excl = map(int, w)
        m = wire.Msg(op, lock.to_bytes(4, 'big'), bytes(8), seq, aux=client, status=excl, key_field=4)
        s.sendto(m.encode(), (servers[lock % len(servers)], wire.PORT_SERVER))
"""


@pytest.mark.netns
def test_a_restarted_lock_agent_keeps_its_holders_and_waiters(lock_rack: lr.LockRack) -> None:
    """Real processes, one lock, by hand: client 1 holds it exclusively, client 2 waits
    for it at agent 0, and the agent is killed with SIGKILL and started again. Its journal
    gives it back both: client 2's retransmitted acquire waits (an agent that forgot
    would grant it beside client 1), client 1's retransmitted acquire is granted again,
    client 1's release grants client 2, a retransmitted release frees nothing (client 3
    still waits behind client 2)."""
    import subprocess
    import sys

    from inswitch.apps.hare.lockapp import OP_ACQUIRE, OP_GRANT, OP_RELEASE, OP_RELEASE_ACK

    rack = lock_rack
    rack.use("none")
    h = rack.client_hosts[0]
    cl = subprocess.Popen(rack.in_host(h, [sys.executable, "-c", _HAND_CLIENT, ",".join(rack.server_ips)]), stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert cl.stdin is not None and cl.stdout is not None
    try:
        assert cl.stdout.readline().strip() == "READY"

        def do(*lines: str, n: int = 0) -> list[tuple[int, ...]]:
            """The answers to `lines`: `n` of them, and none more within a short wait."""
            for ln in (*lines, f"wait 2 {n}", "wait 0.15 1"):
                cl.stdin.write(ln + "\n")  # type: ignore[union-attr]
            cl.stdin.flush()  # type: ignore[union-attr]
            got = []
            for _ in range(2):
                while (ln := cl.stdout.readline().strip()) != ".":  # type: ignore[union-attr]
                    got.append(tuple(map(int, ln.split())))
            return got

        lock = 42  # agent 0's (even)
        assert do(f"{OP_ACQUIRE} {lock} 1 7 1", n=1) == [(OP_GRANT, lock, 1, 7, 0)]
        assert do(f"{OP_ACQUIRE} {lock} 2 8 1") == [], "client 2 waits"
        rack.kill9("agent", 0)
        # the restarted agent sent client 1's grant again (it may not have left before the kill)
        assert do(n=1) == [(OP_GRANT, lock, 1, 7, 0)]
        assert do(f"{OP_ACQUIRE} {lock} 2 8 1") == [], "client 2 still waits: client 1 holds the lock"
        assert do(f"{OP_ACQUIRE} {lock} 1 7 1", n=1) == [(OP_GRANT, lock, 1, 7, 0)], "a retransmitted acquire, granted again"
        assert do(f"{OP_ACQUIRE} {lock} 3 9 1") == []
        assert sorted(do(f"{OP_RELEASE} {lock} 1 7 0", n=2)) == [(OP_GRANT, lock, 2, 8, 0), (OP_RELEASE_ACK, lock, 1, 7, 0)]
        assert do(f"{OP_RELEASE} {lock} 1 7 0", n=1) == [(OP_RELEASE_ACK, lock, 1, 7, 0)], "acknowledged again, client 2 still holds"
        assert sorted(do(f"{OP_RELEASE} {lock} 2 8 0", n=2)) == [(OP_GRANT, lock, 3, 9, 0), (OP_RELEASE_ACK, lock, 2, 8, 0)]
        assert rack.links[0].call(cmd="stats")["counters"]["duplicates"] >= 3
    finally:
        cl.kill()
        cl.wait()
