"""DAIET in a rack: the switch process runs `forward,daiet`, the controller installs a tree
through P4Runtime, two mappers and a reducer run as separate processes in the hosts'
network namespaces with ordinary UDP sockets; the reducer's counts equal a Counter.

Needs root (namespaces, veth, AF_PACKET). The rack is named `daiet...` and always taken down.
"""

from __future__ import annotations

import collections
import json
import os
import socket
import subprocess
import sys
import textwrap
from typing import Iterator

import pytest
from inswitch.topology.state import process_tag

from inswitch.apps.aggregation import controller
from inswitch.p4rt.client import SwitchClient
from inswitch.topology import Rack, RackState, netns

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: network namespaces, veth pairs and AF_PACKET"),
]

PY = sys.executable

MAPPER = textwrap.dedent('''
    import json, sys
    import numpy as np
    from inswitch import _native
    a = json.loads(sys.argv[1])
    words = [w.encode() for w in a["words"]]
    offs = np.zeros(len(words) + 1, dtype=np.uint64)
    offs[1:] = np.cumsum([len(w) for w in words])
    st = _native.agg_map("daiet", a["bind"], [(a["tree"], a["reducer"])], a["id"], "sum",
                         np.zeros(len(words), np.uint16), b"".join(words), offs,
                         np.ones(len(words), np.uint32), 30.0, mode=a["mode"], **a.get("faults", {}))
    print(json.dumps(st), flush=True)
''')

REDUCER = textwrap.dedent('''
    import json, sys
    from inswitch import _native
    a = json.loads(sys.argv[1])
    blob, offs, vals, st = _native.agg_reduce("daiet", a["bind"], a["tree"], a["mappers"], "sum", 30.0, mode=a["mode"], **a.get("faults", {}))
    st["result"] = {blob[offs[i]:offs[i + 1]].decode(): int(vals[i]) for i in range(len(vals))}
    print(json.dumps(st), flush=True)
''')


def _free_tcp() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture(scope="module")
def rack() -> Iterator[RackState]:
    r = Rack()
    name = f"daiet{process_tag()}"
    try:
        yield r.up(3, name=name, programs="forward,daiet", p4runtime=_free_tcp(), metrics=_free_tcp(), mode="netns")
    finally:
        r.down(name)
        assert not netns.leftovers(f"{name}-")


def _run_job(st: RackState, mode: str, tree: int, mapper_faults: dict | None = None, reducer_faults: dict | None = None) -> tuple[dict, list[dict], collections.Counter[str]]:
    m1, m2, red = st.hosts
    words = [[f"w{(i * 7 + k) % 97}" for i in range(4000)] + ["a-key-longer-than-sixteen-bytes"] for k in range(2)]
    ref = collections.Counter(w for ws in words for w in ws)
    red_addr = f"{red.ip}:7070"
    maps = [f"{m1.ip}:6001", f"{m2.ip}:6001"]
    rp = subprocess.Popen(netns.netns_argv(red.netns, [PY, "-c", REDUCER, json.dumps({"bind": red_addr, "tree": tree, "mappers": maps, "mode": mode, "faults": reducer_faults or {}})]),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    mps = [
        subprocess.Popen(netns.netns_argv(h.netns, [PY, "-c", MAPPER, json.dumps({"bind": maps[i], "tree": tree, "reducer": red_addr, "id": i, "words": words[i], "mode": mode,
                                                                 "faults": {**(mapper_faults or {}), "seed": 10 + i} if mapper_faults else {}})]),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i, h in enumerate((m1, m2))
    ]
    outs = []
    try:
        for p in mps:
            o, e = p.communicate(timeout=60)
            assert p.returncode == 0, e
            outs.append(json.loads(o))
        o, e = rp.communicate(timeout=60)
        assert rp.returncode == 0, e
    finally:
        for p in [rp, *mps]:
            if p.poll() is None:
                p.kill()
                p.wait()
    return json.loads(o), outs, ref


def test_daiet_tree_in_a_rack(rack: RackState) -> None:
    m1, m2, red = rack.hosts
    trees = controller.plan_single_switch({7: red.port}, n_mappers=2)
    acks = controller.install({rack.switch.p4runtime: trees}, num_ports=len(rack.hosts))
    assert acks[0]["trees"] == [7]
    res, maps, ref = _run_job(rack, "switch", 7)
    assert res["completed"] and res["result"] == dict(ref)
    assert not res["fallback"], res["fallback_reason"]
    sent = sum(m["pairs"] for m in maps)
    assert res["pairs"] < sent / 5, f"the switch aggregated: {res['pairs']} of {sent} pairs reached the reducer"
    # The udp baseline over the same rack: everything reaches the reducer.
    res_udp, _, ref = _run_job(rack, "udp", 8)
    assert res_udp["result"] == dict(ref) and res_udp["pairs"] >= sent  # retransmissions count too
    assert res["bytes"] < res_udp["bytes"] / 5


def test_daiet_exactly_once_under_faults_in_a_rack(rack: RackState) -> None:
    """Seeded loss, duplication and reordering on the hosts' sockets (both directions).
    On the mappers only: the switch's sequence check absorbs them (no fallback). On the
    reducer too: what the switch sent and was lost is repaired by the host fallback. The
    result equals the Counter either way."""
    m1, m2, red = rack.hosts
    f = {"loss": 0.03, "duplicate": 0.03, "reorder": 0.03}
    controller.install({rack.switch.p4runtime: controller.plan_single_switch({11: red.port}, n_mappers=2)}, num_ports=len(rack.hosts))
    res, maps, ref = _run_job(rack, "switch", 11, mapper_faults=f)
    assert res["completed"] and res["result"] == dict(ref)
    assert not res["fallback"], res["fallback_reason"]
    assert sum(m["faults_injected"] for m in maps) > 0 and sum(m["retransmissions"] for m in maps) > 0
    controller.install({rack.switch.p4runtime: controller.plan_single_switch({12: red.port}, n_mappers=2)}, num_ports=len(rack.hosts))
    res, maps, ref = _run_job(rack, "switch", 12, mapper_faults=f, reducer_faults={"loss": 0.1, "duplicate": 0.1, "reorder": 0.1, "seed": 5})
    assert res["completed"] and res["result"] == dict(ref)
    assert res["faults_injected"] > 0


def test_daiet_spillover_bucket_in_a_rack(rack: RackState) -> None:
    """Tiny tables (one cell per slice): nearly every word collides and goes through the
    tree's spillover bucket in registers, over real packets between processes. The result
    equals the Counter without fallback, and the bucket is empty after END."""
    m1, m2, red = rack.hosts
    trees = controller.plan_single_switch({13: red.port}, n_mappers=2, cells=1)
    assert trees[0].part_size == 1
    controller.install({rack.switch.p4runtime: trees}, num_ports=len(rack.hosts))
    res, maps, ref = _run_job(rack, "switch", 13)
    assert res["completed"] and res["result"] == dict(ref)
    assert not res["fallback"], res["fallback_reason"]
    idx = trees[0].tree_idx
    with SwitchClient(rack.switch.p4runtime) as c:
        buffers = 16 * 10  # `bucket::BUFFERS` buffers of ten slots per tree
        slots = [(idx * buffers + i) for i in range(buffers)]
        for reg in ("spill_key0", "spill_key1", "spill_key2", "spill_key3", "spill_value"):
            assert not any(controller._read_cells(c, reg, slots)), f"{reg} empty after END"
        assert c.read_register("spill_ring", idx)[0][1] == 0 and c.read_register("spill_busy", idx)[0][1] == 0
        # The reducer got the four cells' pairs, the bucket's and the overflow (pairs that
        # found the bucket busy and went on in their packet): the bucket took a share.
        overflow = c.read_register("spill_overflow", idx)[0][1]
        assert overflow < res["pairs"] - 4, (overflow, res["pairs"])
