"""The storage agent ties a data-movement packet's DONE reply to its request by sequence
number: a late reply to an earlier request with the same op and slot (DySO's are all
slot 0) must not answer the next one (issue 17)."""

from __future__ import annotations

import socket
import threading

from inswitch.apps.hare.agent import LockAgent
from inswitch.hare import wire

SWITCH = "127.0.0.117"  # a loopback address of this test's own, where the "switch" listens


def _switch(sock: socket.socket, n: int, seen: list[wire.Msg]) -> None:
    """Answers each control packet as the switch does (the packet back, DONE set, value
    filled), but first with a stale DONE of the same op and slot for an older request."""
    for _ in range(n):
        data, addr = sock.recvfrom(2048)
        m = wire.Msg.decode(data)
        seen.append(m)
        stale = wire.Msg(m.op, m.key, b"STALE!!!", (m.seq - 1) & 0xFFFFFFFF, m.flags | wire.FLAG_DONE, m.slot, m.aux, m.status, m.key_field)
        sock.sendto(stale.encode(), addr)
        good = wire.Msg(m.op, m.key, bytes([m.aux]) * 8, m.seq, m.flags | wire.FLAG_DONE, m.slot, m.aux, m.status, m.key_field)
        sock.sendto(good.encode(), addr)


def test_late_done_reply_does_not_answer_the_next_request() -> None:
    sw = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sw.bind((SWITCH, wire.PORT_SERVER))
    ctl = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    ctl.bind(("127.0.0.1", 0))
    seen: list[wire.Msg] = []
    t = threading.Thread(target=_switch, args=(sw, 3, seen), daemon=True)
    t.start()
    try:
        agent = LockAgent(0, 4, ctl, SWITCH)
        got = [agent.control(wire.OP_DATAMV_TO_SERVER, 0, bytes(8), aux=a) for a in (1, 2, 3)]
        t.join(5)
    finally:
        sw.close()
        ctl.close()
    assert got == [bytes([a]) * 8 for a in (1, 2, 3)]
    assert agent.counters["datamv_stale_replies"] == 3
    assert agent.counters["datamv"] == 3
    # one fresh sequence number per request
    assert len({m.seq for m in seen}) == 3 and all((b.seq - a.seq) & 0xFFFFFFFF == 1 for a, b in zip(seen, seen[1:]))
