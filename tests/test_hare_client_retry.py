"""The Hare client gives up an operation answered only "retry" (an object that never stops
moving) once it has lived as long as a silent one would, `timeout * (retries + 1)` from its
first sending (issue 22, "nothing hangs"): before, each "retry" sent it anew and the batch,
and loadgen's run, never ended. A stub server on loopback answers."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from inswitch.hare import wire
from inswitch.hare.client import Client, Op, Timeout


def stub_server(retry_first: int | None) -> tuple[socket.socket, threading.Event]:
    """Answers GET/PUT with "retry" (for ever, or the first `retry_first` times per key)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    s.settimeout(0.05)
    stop = threading.Event()
    seen: dict[bytes, int] = {}

    def serve() -> None:
        while not stop.is_set():
            try:
                d, a = s.recvfrom(2048)
            except socket.timeout:
                continue
            m = wire.Msg.decode(d)
            seen[m.key] = seen.get(m.key, 0) + 1
            retry = retry_first is None or seen[m.key] <= retry_first
            op = wire.OP_GET_REPLY if m.op == wire.OP_GET else wire.OP_PUT_REPLY
            s.sendto(wire.Msg(op, m.key, wire.cell(b"v", 8), m.seq, status=wire.STATUS_RETRY if retry else 0, key_field=m.key_field).encode(), a)

    threading.Thread(target=serve, daemon=True).start()
    return s, stop


@pytest.mark.parametrize("kind", ["get", "set"])
def test_retry_forever_gives_up_at_the_bound(kind: str) -> None:
    srv, stop = stub_server(None)
    c = Client(["127.0.0.1"], port=srv.getsockname()[1], key_field=8, value_size=8, timeout=0.05, retries=2, bind=("127.0.0.1", 0))
    out: list[object] = []

    def run() -> None:
        t0 = time.monotonic()
        try:
            c.execute([Op(kind, b"k", b"x" if kind == "set" else None), Op("get", b"k")])
        except Timeout as e:
            out.append((time.monotonic() - t0, str(e)))

    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(3.0)  # today's client never returns
    stop.set()
    c.close()
    assert not th.is_alive() and out, "execute still looping on 'retry'"
    took, msg = out[0]  # type: ignore[misc]
    assert 0.15 <= took < 1.0 and "retry" in msg, (took, msg)
    assert c.stats.gave_up_after_retries == 1 and c.stats.retries > 5
    if kind == "set":
        assert [k for k, _v, _t in c.unacked] == [b"k"], c.unacked  # may or may not have landed


def test_a_few_retries_still_complete() -> None:
    srv, stop = stub_server(3)
    c = Client(["127.0.0.1"], port=srv.getsockname()[1], key_field=8, value_size=8, timeout=0.05, retries=2, bind=("127.0.0.1", 0))
    try:
        assert c.execute([Op("get", b"k")]) == [b"v"]
        assert c.stats.retries == 3 and c.stats.gave_up_after_retries == 0
    finally:
        stop.set()
        c.close()


def test_native_generator_gives_up_retry_for_ever() -> None:
    # key 0 always "retry", key 1 served: key 0's requests are abandoned at the budget
    # (20 ms * 3), not carried to the run's drain, and its window slot serves key 1 again
    from inswitch.hare import fastload

    if not fastload.available():
        pytest.skip("no native extension")
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    s.settimeout(0.05)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                d, a = s.recvfrom(2048)
            except socket.timeout:
                continue
            m = wire.Msg.decode(d)
            st = wire.STATUS_RETRY if m.key == b"k0" else 0
            s.sendto(wire.Msg(wire.OP_GET_REPLY, m.key, wire.cell(m.key, 16), m.seq, status=st, key_field=m.key_field).encode(), a)

    threading.Thread(target=serve, daemon=True).start()
    try:
        keys = [b"k0", b"k1"]
        r = fastload.run(["127.0.0.1"], keys, keys, [0] * 2000, [i % 2 for i in range(2000)], port=s.getsockname()[1], key_field=8, value_size=16,
                         field_size=8, window=1, timeout=0.02, retries=2, duration=0.5, drain=0.2, bind="127.0.0.1:0")
    finally:
        stop.set()
    st = r.stats
    assert st["gave_up_after_retries"] >= 4 and st["timeouts"] == st["gave_up_after_retries"], st
    assert st["completed"] >= 4 and set(r.key.tolist()) == {1}, st
