"""The aggregation controller's tree plans for fabrics, checked against the trees written out
by hand: along a path of switches (`plan_path`) and over leaves and one aggregation switch
(`plan_two_level`, as `wordcount --fabric` uses it)."""

from __future__ import annotations

from inswitch.apps.aggregation.controller import CELLS, Tor, plan_path, plan_two_level


def test_plan_path_chains_the_switches_towards_the_reducer() -> None:
    plan = plan_path([("s1", 4), ("s2", 2), ("s3", -1)], {7: 5, 9: 6}, n_mappers=3, cells=2 * 256)
    assert sorted(plan) == ["s1", "s2", "s3"]
    for name, parent, children in (("s1", 4, 3), ("s2", 2, 1)):
        assert [(t.tree_id, t.parent_port, t.children) for t in plan[name]] == [(7, parent, children), (9, parent, children)]
    assert [(t.tree_id, t.parent_port, t.children) for t in plan["s3"]] == [(7, 5, 1), (9, 6, 1)]
    # Memory: two trees share 512 cells; one sender id per switch, distinct, above the mappers'.
    assert {(t.part_base, t.part_size) for t in plan["s1"]} == {(0, 256), (256, 256)}
    ids = {t.switch_id for ts in plan.values() for t in ts}
    assert len(ids) == 3 and min(ids) >= 3
    for ts in plan.values():
        for t in ts:
            t.check()


def test_plan_path_of_one_switch_is_the_single_switch_tree() -> None:
    plan = plan_path([("s1", -1)], {1: 3}, n_mappers=3)
    (t,) = plan["s1"]
    assert (t.parent_port, t.children, t.part_size) == (3, 3, CELLS)


def test_plan_two_level_over_a_leaf_spine() -> None:
    tors = [Tor("leaf1", [0, 1], 2), Tor("leaf2", [0, 1], 2), Tor("leaf3", [], 2, {1: 0, 2: 1})]
    plan = plan_two_level(tors, "spine1", {"leaf1": 0, "leaf2": 1, "leaf3": 2})
    assert [(t.tree_id, t.parent_port, t.children) for t in plan["leaf1"]] == [(1, 2, 2), (2, 2, 2)]
    assert [(t.tree_id, t.parent_port, t.children) for t in plan["spine1"]] == [(1, 2, 2), (2, 2, 2)]
    assert [(t.tree_id, t.parent_port, t.children) for t in plan["leaf3"]] == [(1, 0, 1), (2, 1, 1)]
