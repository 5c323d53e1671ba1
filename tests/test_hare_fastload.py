"""The native fast path of the Hare client for load generation (`hare.fastload`, issue 17):

- on loopback, against a responder in this process that answers like a storage agent
  but gives one key a wrong value: every reply for that key, and only those, is counted
  as a mismatch; dropped requests are sent again (no root);
- in a rack with the switch daemon, a storage agent and a real Redis (root): GETs through
  `hare` with every key offloaded and a YCSB-A mix through `none` complete with no wrong
  value and nothing lost in Redis; then a value changed in Redis behind the generator's
  back is caught (the run is not `correct`)."""

from __future__ import annotations

import os
import shutil
import socket
import threading

import numpy as np
import pytest

from inswitch.hare import fastload, wire

pytestmark = pytest.mark.skipif(not fastload.available(), reason="the native extension has no hare_load (rebuild it)")


def _responder(values: dict[bytes, bytes], wrong: bytes, drop_every: int) -> tuple[socket.socket, threading.Thread, list[int]]:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    s.settimeout(0.5)
    seen = [0]

    def serve() -> None:
        dropped: set[int] = set()
        while True:
            try:
                data, addr = s.recvfrom(2048)
            except (socket.timeout, OSError):
                return
            m = wire.Msg.decode(data)
            seen[0] += 1
            if seen[0] % drop_every == 0 and m.seq not in dropped:
                dropped.add(m.seq)
                continue
            v = b"not-" + values[m.key] if m.key == wrong else values[m.key]
            s.sendto(wire.Msg(wire.OP_GET_REPLY, m.key, wire.cell(v, 64), m.seq, flags=wire.FLAG_HIT, key_field=m.key_field).encode(), addr)

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    return s, th, seen


def test_loopback_wrong_value_and_loss() -> None:
    keys = [b"user%d" % i for i in range(16)]
    values = {k: b"value-of-" + k for k in keys}
    s, th, seen = _responder(values, keys[5], drop_every=50)
    port = s.getsockname()[1]
    rng = np.random.default_rng(3)
    op_keys = rng.integers(0, len(keys), 5000)
    r = fastload.run(["127.0.0.1"], keys, [values[k] for k in keys], np.zeros(len(op_keys), dtype=np.uint8), op_keys, port=port,
                     window=32, timeout=0.02, retries=5, duration=0.5, drain=0.5, bind="127.0.0.1:0")
    th.join(2)
    s.close()
    n5 = int((r.key == 5).sum())
    assert r.stats["completed"] == len(r.key) > 200
    assert n5 > 0 and r.stats["mismatches"] == n5, "every reply for key 5 wrong, and only those"
    assert int((r.check == fastload.CHECK_MISMATCH).sum()) == n5 and set(r.key[r.check == fastload.CHECK_MISMATCH]) == {5}
    assert r.stats["retransmits"] > 0 and r.stats["timeouts"] == 0, r.stats
    assert not r.correct
    assert (r.recv_ns >= r.send_ns).all() and r.hit.all()
    assert seen[0] == r.stats["sent"]


@pytest.mark.netns
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: network namespaces and veth pairs")
@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed")
def test_native_load_in_a_rack_is_checked() -> None:
    from inswitch.apps.hare import redisrack as rr
    from inswitch.hare import ycsb
    from inswitch.topology import netns

    p = rr.RackParams(clients=1, servers=1, records=64, cache=128, batch=64, t_wait=0.1, duration=1.5, workload="ycsb-c", shift="none", window=32,
                      engine="native", workdir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    rack = rr.RedisRack(p, name=f"kvsn{os.getpid() % 100000}")
    rack.up()
    try:
        # Hare with every key offloaded: GETs answered by the switch, values checked.
        ctl = rack.use("hare")
        rack.run_load("hare", ctl)
        hit = rack.run_load("hare", ctl)
        assert hit["correct"] and hit["value_mismatches"] == 0, hit
        assert hit["throughput_ops"] > 500 and hit["hit_rate"] > 0.9
        c = hit["clients"][0]
        assert c["engine"] == "native" and c["malformed_replies"] == 0 and c["ops"] >= hit["throughput_ops"]
        # A YCSB-A mix (PUTs too) straight to the agent: Redis ends holding what the
        # generator last wrote to each key.
        rack.p.workload = "ycsb-a"
        ctl = rack.use("none")
        mixed = rack.run_load("none", ctl)
        assert mixed["correct"] and mixed["lost_writes"] == 0 and mixed["value_mismatches"] == 0, mixed
        assert mixed["clients"][0]["ops"] > 100
        # A value changed in Redis behind the generator's back: the GETs that read it are
        # wrong answers, and the run says so.
        rack.p.workload = "ycsb-c"
        ctl = rack.use("none")
        k = ycsb.record_key(0)
        rack.redis_conn(0).set(k, b"tampered")
        bad = rack.run_load("none", ctl)
        assert bad["value_mismatches"] > 0 and not bad["correct"]
    finally:
        rack.down()
        assert not netns.leftovers(f"{rack.name}-")
