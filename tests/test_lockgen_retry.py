"""Lock clients never loop for ever on "retry" (issue 22, "nothing hangs"): lockgen's
state machine (`LockClients`) driven by a stub lock server on a fake clock, and one real
lockgen process in a namespace against a stub server that answers only "retry"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from inswitch.apps.hare.lockapp import KEY, OP_ACQUIRE, OP_GRANT, OP_RELEASE, OP_RELEASE_ACK
from inswitch.apps.hare.lockgen import RETRY, LockClients
from inswitch.apps.hare.redisrack import start_together
from inswitch.hare import wire

MS = 1_000_000


def params(**kw: Any) -> dict[str, Any]:
    p = {"clients": 3, "client_base": 0, "servers": 1, "n_locks": 8, "cache": 2, "seed": 7, "alpha": 0.9, "excl_ratio": 0.5,
         "hold_s": 0.002, "retry_s": 0.001, "lost_s": 0.05, "resend_s": 0, "duration": 0.2, "shift_at": None}
    p.update(kw)
    return p


class Stub:
    """A lock server that answers each request at once: `retry(lock, op)` says whether it
    answers "retry"."""

    def __init__(self, retry: Any) -> None:
        self.retry, self.out, self.sent = retry, [], []
        self.now = 0

    def sender(self, op: int, lock: int, excl: bool, seq: int, client: int) -> None:
        self.sent.append((self.now, op, lock, seq, client))
        ans = OP_GRANT if op == OP_ACQUIRE else OP_RELEASE_ACK
        status = RETRY if self.retry(lock, op) else 0
        self.out.append(wire.Msg(ans, lock.to_bytes(KEY, "big"), b"\0" * 8, seq, aux=client, status=status, key_field=KEY).encode())


def drive(p: dict[str, Any], stub: Stub, limit_ns: int) -> LockClients:
    lc = LockClients(p, 0, stub.sender, clock=lambda: stub.now)
    lc.begin_all(0)
    while not lc.finished():
        assert stub.now < limit_ns, f"clients still running at {stub.now / 1e9:.3f} s: {lc.st}"
        lc.tick(stub.now)
        out, stub.out = stub.out, []
        for d in out:
            lc.receive(d, stub.now)
        stub.now += MS // 4
    return lc


def test_lock_always_retry_is_given_up_from_first_send() -> None:
    # lock 0 is stuck (always "retry"); the others work
    p = params()
    stub = Stub(lambda lock, op: lock == 0)
    end, lost = int(p["duration"] * 1e9), int(p["lost_s"] * 1e9)
    lc = drive(p, stub, end + int(p["hold_s"] * 1e9) + lost + 10 * MS)
    st = lc.stats
    assert st["gave_up_after_retries"] >= 1 and st["lost"] == st["gave_up_after_retries"] and st["lost_no_answer"] == 0, st
    assert st["grants"] > 10 and st["releases"] == st["grants"], st  # the clients went on
    # each ACQUIRE of lock 0 was given up lost_s after its FIRST sending, not its last retry
    firsts = {}
    for t, op, lock, seq, c in stub.sent:
        if op == OP_ACQUIRE and lock == 0:
            firsts.setdefault((c, seq), t)
    given_up = [(k, t0) for k, t0 in firsts.items() if not any(s[0] == "acq" and (s[3], lc.base + i) == (k[1], k[0]) for i, s in enumerate(lc.st))]
    assert len(given_up) == st["gave_up_after_retries"]
    for (c, seq), t0 in given_up:
        last = max(t for t, op, lock, q, cc in stub.sent if (q, cc) == (seq, c))
        assert last <= t0 + lost + MS, (t0, last)
    assert lc.lost_examples and "'retry' answers" in lc.lost_examples[0] and "ACQUIRE of lock 0" in lc.lost_examples[0]


def test_release_always_retry_is_given_up() -> None:
    p = params(clients=1, n_locks=1, cache=1)
    stub = Stub(lambda lock, op: op == OP_RELEASE)
    lc = drive(p, stub, int((p["duration"] + p["hold_s"] + p["lost_s"]) * 1e9) + 10 * MS)
    assert lc.stats["gave_up_after_retries"] >= 1 and "RELEASE of lock 0" in lc.lost_examples[0], (lc.stats, lc.lost_examples)


def test_retries_within_bound_are_not_lost() -> None:
    # lock answers "retry" 5 times per acquire (5 ms of the 50 ms bound), then grants
    n = {}

    def retry(lock: int, op: int) -> bool:
        if op != OP_ACQUIRE:
            return False
        n[lock] = n.get(lock, 0) + 1
        return n[lock] % 6 != 0

    p = params()
    lc = drive(p, Stub(retry), int((p["duration"] + p["hold_s"] + p["lost_s"]) * 1e9) + 10 * MS)
    assert lc.stats["lost"] == 0 and lc.stats["retries"] > 10 and lc.stats["grants"] > 5, lc.stats


def test_silent_server_stops_client() -> None:
    p = params(clients=1)
    stub = Stub(lambda lock, op: False)
    stub.sender = lambda *a: None  # type: ignore[method-assign]  # never answers
    lc = drive(p, stub, int(p["lost_s"] * 1e9) + 10 * MS)
    assert lc.stats["lost_no_answer"] == 1 and lc.stats["gave_up_after_retries"] == 0 and lc.st[0][0] == "lost"
    assert "no answer" in lc.lost_examples[0]


def test_late_grant_of_given_up_acquire_is_released() -> None:
    p = params(clients=1, n_locks=1, cache=1, duration=10.0)
    stub = Stub(lambda lock, op: True)
    lc = LockClients(p, 0, stub.sender, clock=lambda: stub.now)
    lc.begin_all(0)
    first_seq = lc.st[0][3]
    while lc.stats["gave_up_after_retries"] == 0:
        lc.tick(stub.now)
        out, stub.out = stub.out, []
        for d in out:
            lc.receive(d, stub.now)
        stub.now += MS
    stub.sent.clear()
    lc.receive(wire.Msg(OP_GRANT, (0).to_bytes(KEY, "big"), b"\0" * 8, first_seq, aux=0, status=0, key_field=KEY).encode(), stub.now)
    assert lc.stats["late_grants_released"] == 1 and [(op, seq) for _t, op, _l, seq, _c in stub.sent] == [(OP_RELEASE, first_seq)]


STUB_SERVER = """
import socket, sys
from inswitch.hare import wire
from inswitch.apps.hare.lockapp import OP_GRANT, OP_RELEASE_ACK, OP_ACQUIRE
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", wire.PORT_SERVER))
print("up", flush=True)
while True:
    d, a = s.recvfrom(2048)
    m = wire.Msg.decode(d)
    op = OP_GRANT if m.op == OP_ACQUIRE else OP_RELEASE_ACK
    s.sendto(wire.Msg(op, m.key, b"\\0" * 8, m.seq, aux=m.aux, status=1, key_field=m.key_field).encode(), (a[0], wire.PORT_CLIENT))
"""


@pytest.mark.netns
def test_lockgen_process_finishes_against_retry_forever(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (a network namespace)")
    ns = f"lkh{os.getpid() % 100000}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "python")}
    server = None
    try:
        subprocess.run(["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"], check=True)
        server = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", STUB_SERVER], stdout=subprocess.PIPE, text=True, env=env)
        assert server.stdout is not None and server.stdout.readline().strip() == "up"
        out = tmp_path / "locks.json"
        p = params(clients=2, server_ips=["127.0.0.1"], duration=0.3, lost_s=0.3, retry_s=0.005, start_ns=None, out=str(out))
        gen = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-m", "inswitch.apps.hare.lockgen", json.dumps(p)], env=env,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            start_together([gen], lead_s=0.05, timeout=30)
            t0 = time.monotonic()
            # today's lockgen restarted its lost timer at each "retry" and ran for ever
            _o, err = gen.communicate(timeout=5)
            took = time.monotonic() - t0
        finally:
            if gen.poll() is None:
                gen.kill()
                gen.wait()
        assert gen.returncode == 0, err
        res = json.loads(out.read_text())
        st = res["stats"]
        assert st["grants"] == 0 and st["retries"] > 10 and st["gave_up_after_retries"] >= 2 and st["lost"] == st["gave_up_after_retries"], st
        assert res["lost_examples"] and "'retry' answers" in res["lost_examples"][0]
        assert took < p["duration"] + p["lost_s"] + 2.0, took
    finally:
        if server is not None:
            server.kill()
            server.wait()
        subprocess.run(["ip", "netns", "del", ns], check=False)
