"""The switchagg controller's tree plans for fabrics (no root): child ids and `up_child` per
level. At every parent the ids of its children (mapper ids 0..n-1, switches' `up_child`) are
distinct and below the program's 256 children, the children count is how many there are,
the switch whose parent is the reducer reports as SWITCH_CHILD_MIN (what the reducer takes
as the switch's stream), and each switch's ACK sessions cover exactly its child ports."""

from __future__ import annotations

import pytest

from inswitch.apps.aggregation.controller import Tor
from inswitch.apps.switchagg.controller import MAX_CHILDREN, SWITCH_CHILD_MIN, SwitchPlan, plan_path, plan_two_level


def _children_ids(plan: dict[str, SwitchPlan], parent_of: dict[str, str], mappers_at: dict[str, list[int]],
                  name: str, tree: int) -> list[int]:
    """The child ids that reach switch `name` in `tree`: its own mappers' ids and the
    `up_child` of every switch whose parent it is."""
    ids = list(mappers_at.get(name, []))
    for sw, par in parent_of.items():
        if par == name:
            ids += [t.up_child for t in plan[sw].trees if t.tree_id == tree]
    return ids


def test_two_level_numbers_children_uniquely_and_roots_report_as_the_switch() -> None:
    # leaf1: mappers 0, 1 (ports 0, 1); leaf2: mappers 2, 3, 4; leaf3: mapper 5 and both reducers.
    tors = [Tor("leaf1", [0, 1], 2), Tor("leaf2", [0, 1, 3], 2), Tor("leaf3", [4], 2, {11: 0, 12: 1})]
    plan = plan_two_level(tors, "spine1", {"leaf1": 0, "leaf2": 1, "leaf3": 2}, n_mappers=6)
    assert sorted(plan) == ["leaf1", "leaf2", "leaf3", "spine1"]
    mappers_at = {"leaf1": [0, 1], "leaf2": [2, 3, 4], "leaf3": [5]}
    parent_of = {"leaf1": "spine1", "leaf2": "spine1", "spine1": "leaf3"}
    for tree in (11, 12):
        # the reducers' leaf is the root: it reports to the reducer as the switch's stream
        (root,) = [t for t in plan["leaf3"].trees if t.tree_id == tree]
        assert root.up_child == SWITCH_CHILD_MIN
        assert root.parent_port == {11: 0, 12: 1}[tree]
        for name in plan:
            (t,) = [t for t in plan[name].trees if t.tree_id == tree]
            ids = _children_ids(plan, parent_of, mappers_at, name, tree)
            assert len(ids) == len(set(ids)) == t.children, (name, tree, ids, t)
            assert all(0 <= i < MAX_CHILDREN for i in ids), (name, ids)
            if name != "leaf3":
                assert t.up_child < MAX_CHILDREN and t.up_child >= 6  # a child id, never a mapper's
    assert [t.parent_port for t in plan["leaf1"].trees] == [2, 2]
    assert [t.parent_port for t in plan["spine1"].trees] == [2, 2]
    assert plan["leaf1"].child_ports == [0, 1] and plan["leaf2"].child_ports == [0, 1, 3]
    assert sorted(plan["spine1"].child_ports) == [0, 1]
    assert sorted(plan["leaf3"].child_ports) == [2, 4]  # its mapper and the uplink to the spine
    assert plan["leaf3"].parent_ports == [0, 1]
    # one up_child per switch over the whole plan
    ups = {name: {t.up_child for t in sp.trees} for name, sp in plan.items()}
    assert all(len(v) == 1 for v in ups.values())
    assert len({next(iter(v)) for v in ups.values()}) == 4


def test_two_level_without_remote_mappers_is_one_root_switch() -> None:
    tors = [Tor("leaf1", [], 2), Tor("leaf2", [0, 1], 2, {1: 3})]
    plan = plan_two_level(tors, "spine1", {"leaf1": 0, "leaf2": 1}, n_mappers=2)
    assert sorted(plan) == ["leaf2"]
    (t,) = plan["leaf2"].trees
    assert (t.parent_port, t.children, t.up_child) == (3, 2, SWITCH_CHILD_MIN)
    assert plan["leaf2"].child_ports == [0, 1]


def test_path_chains_child_ids_and_the_last_switch_reports_as_the_switch() -> None:
    plan = plan_path([("s1", 4), ("s2", 2), ("s3", -1)], {7: 5, 9: 6}, mapper_ports=[0, 1, 3],
                     back={"s2": 0, "s3": 1})
    assert [(t.tree_id, t.parent_port, t.children) for t in plan["s1"].trees] == [(7, 4, 3), (9, 4, 3)]
    assert [(t.tree_id, t.parent_port, t.children) for t in plan["s2"].trees] == [(7, 2, 1), (9, 2, 1)]
    assert [(t.tree_id, t.parent_port, t.children) for t in plan["s3"].trees] == [(7, 5, 1), (9, 6, 1)]
    assert {t.up_child for t in plan["s3"].trees} == {SWITCH_CHILD_MIN}
    up1, up2 = ({t.up_child for t in plan[s].trees} for s in ("s1", "s2"))
    assert len(up1) == len(up2) == 1 and up1 != up2
    assert all(3 <= u < MAX_CHILDREN for u in up1 | up2)  # not a mapper's id (0..2)
    assert (plan["s1"].child_ports, plan["s2"].child_ports, plan["s3"].child_ports) == ([0, 1, 3], [0], [1])
    one = plan_path([("s1", -1)], {1: 3}, mapper_ports=[0, 1, 2], back={})
    assert [(t.parent_port, t.children, t.up_child) for t in one["s1"].trees] == [(3, 3, SWITCH_CHILD_MIN)]


def test_child_ids_beyond_the_programs_children_are_refused() -> None:
    tors = [Tor("leaf1", list(range(250)), 251), Tor("leaf2", [], 2, {1: 0})]
    plan_two_level(tors, "spine1", {"leaf1": 0, "leaf2": 1}, n_mappers=250)  # ids 250..252: fit
    with pytest.raises(ValueError, match="below 256"):
        plan_two_level(tors, "spine1", {"leaf1": 0, "leaf2": 1}, n_mappers=254)
    with pytest.raises(ValueError, match="below 256"):
        plan_path([("s1", 1), ("s2", -1)], {1: 0}, mapper_ports=list(range(255)), back={"s2": 0})


def test_region_slots_match_the_program_as_built() -> None:
    """`switchagg-hops` computes C from the program's memories split into regions; the
    memories' words come from the program's own resource report."""
    import json

    from inswitch import _native
    from inswitch.experiments.switchagg import region_slots

    mems = {m["name"]: m["words"] for m in json.loads(_native.resources_json(["switchagg"], "switchagg-fpga"))["memories"]}
    for g in range(8):
        for regions in (1, 2, 255):
            want = 4 * (mems[f"switchagg.fpe{g}"] // regions + mems[f"switchagg.bpe{g}"] // regions)
            assert region_slots(g, regions) == want, (g, regions)


def test_experiment_program_choice_is_checked_before_anything_runs() -> None:
    import subprocess
    import sys

    cp = subprocess.run([sys.executable, "-m", "inswitch", "experiment", "daiet-two-level", "--program", "daiet", "--quick",
                         "--out", "/tmp"], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 2 and "takes no --program" in cp.stdout + cp.stderr


def test_per_switch_reports_switchagg_in_bytes_and_pairs_from_its_counters() -> None:
    """SwitchAgg's pairs have variable length: `per_switch` gives frames, bytes and the pairs'
    bytes (56 bytes of headers off each frame); pair counts only from the program's own
    counters (None without them: never made up from byte counts)."""
    from inswitch.apps.wordcount.fabric import FabricLayout, per_switch

    lay = FabricLayout(mappers=[], reducers=[], agg="", uplinks={}, downlinks={}, path=[("s1", -1)])
    lay.ports = {"s1": ([0, 1], [2])}
    before = {"s1": {0: {"rx_packets": 5, "rx_bytes": 500}, 2: {"tx_packets": 1, "tx_bytes": 60}}}
    # children: 3 + 2 frames carrying 100 + 40 bytes of pairs; parent: 2 frames, 70 bytes of pairs
    after = {"s1": {0: {"rx_packets": 8, "rx_bytes": 500 + 3 * 56 + 100}, 1: {"rx_packets": 2, "rx_bytes": 2 * 56 + 40},
                    2: {"tx_packets": 3, "tx_bytes": 60 + 2 * 56 + 70}}}
    s = per_switch(lay, before, after, program="switchagg")["s1"]
    assert s["pairs_in"] is None and s["pairs_out"] is None and s["reduction"] is None
    assert (s["frames_in"], s["pair_bytes_in"], s["frames_out"], s["pair_bytes_out"]) == (5, 140, 2, 70)
    assert s["bytes_in"] == 5 * 56 + 140 and s["bytes_out"] == 2 * 56 + 70
    assert s["byte_reduction"] == 0.5
    d = per_switch(lay, before, after)["s1"]  # daiet: pairs from 20-byte pairs, as before
    assert d["pairs_in"] == 7 and "pair_bytes_in" not in d
    # With the program's pair counters (before, after): their differences, and the reduction.
    c = per_switch(lay, before, after, program="switchagg", pairs=({"s1": (10, 4)}, {"s1": (30, 9)}))["s1"]
    assert (c["pairs_in"], c["pairs_out"], c["reduction"]) == (20, 5, 0.75)
    assert c["pair_bytes_in"] == 140 and c["byte_reduction"] == 0.5
    # A switch whose counters were not read keeps them unknown.
    c = per_switch(lay, before, after, program="switchagg", pairs=({}, {"s1": (30, 9)}))["s1"]
    assert c["pairs_in"] is None and c["reduction"] is None
