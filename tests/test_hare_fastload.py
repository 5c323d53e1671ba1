"""The native fast path of the Hare client for load generation (`hare.fastload`, issue 17):

- on loopback, against a responder in this process that answers like a storage agent
  but gives one key a wrong value: every reply for that key, and only those, is counted
  as a mismatch; dropped requests are sent again (no root);
- in a rack with the switch daemon, a storage agent and a real Redis (root): GETs through
  `hare` with every key offloaded and a YCSB-A mix through `none` complete with no wrong
  value and nothing lost in Redis; then a value changed in Redis behind the generator's
  back is caught (the run is not `correct`);
- two clients writing the same keys (root): the history the native engine records passes
  the linearizability checker, and the same real history with one GET's value made stale
  (an older write's) or foreign is flagged."""

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
    # The history holds what each GET returned, the wrong values included.
    recs, unacked = r.records(keys)
    assert len(recs) == len(r.key) and not unacked
    assert all(kind == "get" and v == (b"not-" if k == keys[5] else b"") + values[k] and a <= b for k, kind, v, a, b in recs)
    assert [k for k, *_ in recs] == [keys[i] for i in r.key]


def test_shift_remaps_are_the_python_engines_shifts() -> None:
    # The native engine's remap of an unshifted stream draws the records the python
    # engine's shifted Workload draws (same seeds), shift after shift.
    from inswitch.apps.hare.loadgen import shift_remaps
    from inswitch.hare import ycsb

    for kind in ("hot-in", "random"):
        base = ycsb.Workload("ycsb-b", 500, seed=4, shift_seed=9)
        remaps = shift_remaps(ycsb.Workload("ycsb-b", 500, seed=4, shift_seed=9), kind, 50, 2)
        ref = ycsb.Workload("ycsb-b", 500, seed=4, shift_seed=9)
        for m in remaps:
            ref.shift(kind, 50)
            drawn = [base.next() for _ in range(2000)]
            want = [ref.next() for _ in range(2000)]
            assert [o.kind for o in drawn] == [o.kind for o in want]
            assert [int(m[o.record]) for o in drawn] == [o.record for o in want]
            assert (m != np.arange(500)).any(), "the shift moved records"


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


@pytest.mark.netns
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: network namespaces and veth pairs")
@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed")
def test_native_history_with_two_writers_is_checked() -> None:
    from inswitch.apps.hare import redisrack as rr
    from inswitch.hare import history

    p = rr.RackParams(clients=2, servers=1, records=40, cache=64, batch=32, t_wait=0.1, duration=1.5, workload="ycsb-a", shift="none", window=16,
                      engine="native", workdir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    rack = rr.RedisRack(p, name="nativehist")
    rack.up()
    try:
        ctl = rack.use("hare")
        r = rack.run_load("hare", ctl)
        recs: list[history.Record] = []
        unacked: dict[bytes, list] = {}
        for c in rack.last_results:
            recs += [(bytes.fromhex(k), kind, None if v is None else bytes.fromhex(v), a, b) for k, kind, v, a, b in c["history"]]
            for k, v, a in c["unacked"]:
                unacked.setdefault(bytes.fromhex(k), []).append(bytes.fromhex(v))
                recs.append((bytes.fromhex(k), "set", bytes.fromhex(v), a, history.UNACKED))
        final = rack.read_back(sorted({k for k, *_ in recs}))
        init = rack.initial()
    finally:
        rack.down()
    assert r["correct"] and r["linearizable"] and r["stale_reads"] == 0 and r["lost_writes"] == 0, r
    cl = r["clients"]
    assert all(c["value_check"].startswith("not checked") and c["history"] for c in cl), cl
    assert r["operations"] == sum(c["ops"] for c in cl) + sum(len(c["unacked"]) for c in rack.last_results) > 500
    # Both clients wrote, to shared keys, and the switch answered some GETs.
    writers = {bytes.fromhex(v)[: bytes.fromhex(v).index(b":")].split(b".")[1] for c in rack.last_results for k, kind, v, a, b in c["history"] if kind == "set"}
    assert writers == {b"1", b"2"}
    assert r["hit_rate"] > 0
    v = history.check(recs, init, final, unacked)
    assert v.linearizable and v.stale_reads == 0 and v.lost_writes == 0
    # The same real history with one GET made stale: it returns the value of a write that
    # another write of its key followed, both completed before the GET was invoked.
    by_key: dict[bytes, list[int]] = {}
    for i, (k, kind, *_rest) in enumerate(recs):
        by_key.setdefault(k, []).append(i)
    stale = None
    for k, idx in by_key.items():
        sets = sorted((recs[i] for i in idx if recs[i][1] == "set" and recs[i][4] < history.UNACKED), key=lambda x: x[4])
        for i in idx:
            g = recs[i]
            before = [s for s in sets if s[4] < g[3]]
            if g[1] == "get" and len(before) >= 2 and before[-2][2] != g[2] and before[-2][4] < before[-1][3]:
                stale = (i, before[-2][2])
                break
        if stale:
            break
    assert stale is not None, "a GET after two sequential writes of its key"
    i, old = stale
    bad = list(recs)
    bad[i] = (bad[i][0], "get", old, bad[i][3], bad[i][4])
    vb = history.check(bad, init, final, unacked)
    assert not vb.linearizable and vb.stale_reads == 1 and vb.nonlinearizable_keys == [recs[i][0].decode()]
    # ... or a value nobody wrote.
    bad[i] = (bad[i][0], "get", b"altered", bad[i][3], bad[i][4])
    assert not history.check(bad, init, final, unacked).linearizable


@pytest.mark.netns
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: network namespaces and veth pairs")
@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed")
def test_native_shift_moves_the_hot_keys_at_its_time() -> None:
    # coldest-to-top: the `count` records the workload draws least become the hottest at
    # the shift; the native engine's history shows them nearly unread before and taking
    # the top ranks' share after, and the run is still checked.
    from inswitch.apps.hare import redisrack as rr
    from inswitch.hare import ycsb

    p = rr.RackParams(clients=1, servers=1, records=1000, cache=64, batch=32, t_wait=0.1, duration=2.0, workload="ycsb-c", shift="coldest-to-top",
                      shift_at=1.0, shift_count=20, window=16, engine="native", workdir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    rack = rr.RedisRack(p, name="nativehist")
    rack.up()
    try:
        r = rack.run_load("none", rack.use("none"))
        c = rack.last_results[0]
    finally:
        rack.down()
    assert r["correct"] and r["linearizable"], r
    cold = {ycsb.record_key(int(i)).hex() for i in ycsb.Workload("ycsb-c", 1000, shift_seed=p.seed).popularity_order()[-20:]}
    t_shift = int(c["stats"]["run_start_ns"]) + int(1.0 * 1e9)
    before = [k in cold for k, kind, v, a, b in c["history"] if a < t_shift - 5_000_000]
    after = [k in cold for k, kind, v, a, b in c["history"] if a > t_shift + 5_000_000]
    # The reference: the python engine's Workload, unshifted and shifted, drawn here.
    ref = ycsb.Workload("ycsb-c", 1000, seed=7, shift_seed=p.seed)
    want_before = np.mean([ycsb.record_key(ref.next().record).hex() in cold for _ in range(20000)])
    ref.shift("coldest-to-top", 20)
    want_after = np.mean([ycsb.record_key(ref.next().record).hex() in cold for _ in range(20000)])
    assert want_after > 4 * want_before
    assert len(before) > 1000 and len(after) > 1000
    assert abs(np.mean(before) - want_before) < 0.02 and abs(np.mean(after) - want_after) < 0.04, (np.mean(before), want_before, np.mean(after), want_after)


def _store_responder(store: dict[bytes, bytes]) -> tuple[socket.socket, threading.Thread]:
    """A storage agent's answers over loopback: GETs from `store` (absent: the nil cell),
    PUTs into it."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    s.settimeout(0.5)

    def serve() -> None:
        while True:
            try:
                data, addr = s.recvfrom(2048)
            except (socket.timeout, OSError):
                return
            m = wire.Msg.decode(data)
            if m.op == wire.OP_PUT:
                store[m.key] = wire.uncell(m.value)
                reply = wire.Msg(wire.OP_PUT_REPLY, m.key, m.value, m.seq, key_field=m.key_field)
            else:
                reply = wire.Msg(wire.OP_GET_REPLY, m.key, wire.cell(store.get(m.key), 64), m.seq, key_field=m.key_field)
            s.sendto(reply.encode(), addr)

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    return s, th


def _ages(stream: list[tuple[str, int]], records: int) -> tuple[list[int], list[int]]:
    """Of a YCSB-D stream of (kind, record): each read's age (the newest record's index
    then minus the record read: 0 the newest), and the records inserted in order."""
    newest, ages, inserted = records - 1, [], []
    for kind, r in stream:
        if kind == "insert":
            newest += 1
            inserted.append(r)
            assert r == newest
        else:
            ages.append(newest - r)
    return ages, inserted


def test_native_ycsb_d_draws_what_the_python_generator_draws() -> None:
    # YCSB-D natively (`latest`): 5% inserts of the next record (absent until then), 95%
    # reads from "latest", the newest most popular. One request in flight, so the samples
    # are the stream in order; its read ages and mix against the python generator's
    # (ycsb.Workload, itself checked against the definition in test_hare_ycsb.py) and
    # against the Zipfian's own probabilities.
    from inswitch.hare import ycsb

    records = 1000
    keys = [ycsb.record_key(r) for r in range(records)]
    store = {k: b"v%d" % i for i, k in enumerate(keys)}
    s, th = _store_responder(store)
    r = fastload.run(["127.0.0.1"], keys, [store[k] for k in keys], [], [], port=s.getsockname()[1], window=1, timeout=0.2, retries=5,
                     duration=2.0, drain=0.5, bind="127.0.0.1:0", latest=(0.95, 5))
    th.join(2)
    s.close()
    n = len(r.key)
    assert n > 3000 and r.stats["mismatches"] == 0 and r.stats["unchecked"] == 0, r.stats
    assert (np.diff(r.send_ns.astype(np.int64)) >= 0).all(), "one in flight: completion order is issue order"
    native = [("insert" if o == fastload.OP_PUT else "read", int(k)) for o, k in zip(r.op, r.key)]
    ages, inserted = _ages(native, records)
    assert r.stats["inserts"] == len(inserted) == len(r.expected) - records
    assert inserted == list(range(records, records + len(inserted)))
    # each inserted key is YCSB's name for its record, and holds what was written
    assert all(store[ycsb.record_key(i)] == v for i, (known, v) in enumerate(r.expected) if i >= records and known)
    assert abs(len(inserted) / n - 0.05) < 0.015, len(inserted) / n
    w = ycsb.Workload("ycsb-d", records, seed=3)
    ref_ages, _ = _ages([(o.kind, o.record) for o in (w.next() for _ in range(40_000))], records)
    # the age distributions (newest 30 one by one, the rest together) agree
    def hist(a: list[int]) -> np.ndarray:
        h = np.bincount(np.minimum(a, 30), minlength=31).astype(float)
        return h / h.sum()
    tv = 0.5 * np.abs(hist(ages) - hist(ref_ages)).sum()
    assert tv < 0.04, (tv, hist(ages)[:5], hist(ref_ages)[:5])
    p0 = 1.0 / ycsb.zeta(records + len(inserted), ycsb.ZIPFIAN_CONSTANT)
    assert abs(hist(ages)[0] - p0) < 0.02 and abs(hist(ref_ages)[0] - p0) < 0.02


@pytest.mark.netns
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: network namespaces and veth pairs")
@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed")
def test_native_ycsb_d_through_hare_is_checked() -> None:
    # Two clients each inserting "the next record" (the same new keys, different values,
    # as two YCSB clients with their own insert counters do) and reading the newest,
    # through Hare with offloading: the history checker passes, Redis holds what a last
    # write could have left for every inserted key.
    import json

    from inswitch.cli import app
    from inswitch.cliopts import run

    out = f"/tmp/kvn-d-{os.getpid()}.json"
    try:
        rc = run(app, ["kvs", "--backend", "redis", "--engine", "native", "--system", "hare", "--workload", "ycsb-d", "--shift", "none",
                       "--records", "300", "--duration", "2", "--clients", "2", "--servers", "2", "--cache", "64", "--batch", "16", "--json", out])
        r = json.load(open(out))["systems"]["hare"]
    finally:
        for f in (out, out.replace(".json", ".png")):
            if os.path.exists(f):
                os.unlink(f)
    assert rc == 0 and r["correct"] and r["linearizable"] and r["stale_reads"] == 0 and r["lost_writes"] == 0, r
    cl = r["clients"]
    assert all(c["inserts"] > 10 for c in cl), cl
    # (the inserted keys are in the history, so lost_writes read them back from Redis)
    assert r["operations"] > 500 and r["hit_rate"] > 0
