"""Fabric topology files (containerlab format) and generators: valid files parse, each kind
of invalid file is refused with its line named, generator output round-trips through the
file format, and the routes planned from it are the shortest paths computed here by hand."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from inswitch.topology.fabric.generators import fat_tree, leaf_spine, load_spec
from inswitch.topology.fabric.model import TopologyError, parse_topology
from inswitch.topology.fabric.plan import plan_fabric, routes

VALID = textwrap.dedent("""\
    name: lab
    topology:
      nodes:
        s1: {kind: inswitch, program: forward, p4runtime: 9700, pipes: 2}
        s2:
          kind: inswitch
        h1: {kind: linux, ipv4: 10.9.0.5/24}
        h2: {kind: linux}
        h3: {kind: linux, machine: m1}
      links:
        - endpoints: ["s1:p1", "h1:eth0"]
          delay: 2ms
          jitter: 1ms
          rate: 100mbit
          loss: 0.5%
        - endpoints: ["s1:p2", "h2:eth0"]
        - endpoints: ["s1:p3", "s2:p1"]
        - endpoints: ["s2:p2", "h3:eth0"]
    """)


def test_valid_file_parses_with_settings_and_link_properties() -> None:
    t = parse_topology(VALID.replace("h3: {kind: linux, machine: m1}", "h3: {kind: linux}"))
    assert t.name == "lab"
    assert [n.name for n in t.switches] == ["s1", "s2"] and [n.name for n in t.hosts] == ["h1", "h2", "h3"]
    s1 = t.nodes["s1"]
    assert (s1.program, s1.p4runtime, s1.pipes) == ("forward", 9700, 2)
    p = t.links[0].props
    assert (p.delay_ms, p.jitter_ms, p.rate_mbit, p.loss_pct) == (2.0, 1.0, 100.0, 0.5)
    plan = plan_fabric(t, "tt")
    hosts = {h.name: h for h in plan.hosts}
    # h1's address is given; h2 shares its leaf, so its subnet; h3 gets the next leaf's.
    assert hosts["h1"].ip == "10.9.0.5" and hosts["h2"].ip == "10.9.0.1" and hosts["h2"].prefix_len == 24
    assert hosts["h3"].ip.startswith("10.0.") and hosts["h1"].gateway == "10.9.0.254"
    assert plan.switch("s1").ifaces == ["tt-s1p1", "tt-s1p2", "tt-s1p3"]


INVALID = [
    ("unknown top key", "name: x\ncolour: red\ntopology: {nodes: {s1: {kind: inswitch}}}\n", 2, "unknown key 'colour'"),
    ("unknown node key", "name: x\ntopology:\n  nodes:\n    s1: {kind: inswitch, speed: 9}\n", 4, "unknown key 'speed'"),
    ("host key on switch", "name: x\ntopology:\n  nodes:\n    s1:\n      kind: inswitch\n      ipv4: 10.0.0.1/24\n", 6, "unknown key 'ipv4'"),
    ("bad kind", "name: x\ntopology:\n  nodes:\n    s1: {kind: ceos}\n", 4, "kind must be"),
    ("dangling endpoint",
     "name: x\ntopology:\n  nodes:\n    s1: {kind: inswitch}\n    h1: {kind: linux}\n  links:\n"
     "    - endpoints: [\"s1:p1\", \"h1:eth0\"]\n    - endpoints: [\"s1:p2\", \"h9:eth0\"]\n", 8, "dangling endpoint h9:eth0"),
    ("duplicate name", "name: x\ntopology:\n  nodes:\n    s1: {kind: inswitch}\n    s1: {kind: linux}\n", 5, "given twice"),
    ("duplicate name by case", "name: x\ntopology:\n  nodes:\n    s1: {kind: inswitch}\n    S1: {kind: linux}\n", 5, "duplicate node name"),
    ("link to itself",
     "name: x\ntopology:\n  nodes:\n    s1: {kind: inswitch}\n  links:\n    - endpoints: [\"s1:p1\", \"s1:p2\"]\n", 6, "to itself"),
    ("interface used twice",
     "name: x\ntopology:\n  nodes:\n    s1: {kind: inswitch}\n    s2: {kind: inswitch}\n    s3: {kind: inswitch}\n  links:\n"
     "    - endpoints: [\"s1:p1\", \"s2:p1\"]\n    - endpoints: [\"s1:p1\", \"s3:p1\"]\n", 9, "already used by the link on line 8"),
    ("host loop",
     "name: x\ntopology:\n  nodes:\n    s1: {kind: inswitch}\n    s2: {kind: inswitch}\n    h1: {kind: linux}\n  links:\n"
     "    - endpoints: [\"s1:p1\", \"h1:eth0\"]\n    - endpoints: [\"s2:p1\", \"h1:eth1\"]\n    - endpoints: [\"s1:p2\", \"s2:p2\"]\n",
     9, "cannot handle"),
    ("bad switch interface",
     "name: x\ntopology:\n  nodes:\n    s1: {kind: inswitch}\n    h1: {kind: linux}\n  links:\n    - endpoints: [\"s1:eth1\", \"h1:eth0\"]\n",
     7, "a switch interface is pN"),
    ("bad delay",
     "name: x\ntopology:\n  nodes:\n    s1: {kind: inswitch}\n    h1: {kind: linux}\n  links:\n    - endpoints: [\"s1:p1\", \"h1:eth0\"]\n"
     "      delay: soon\n", 8, "not a time"),
    ("disconnected",
     "name: x\ntopology:\n  nodes:\n    s1: {kind: inswitch}\n    s2: {kind: inswitch}\n", 5, "not connected"),
    ("bad p4runtime", "name: x\ntopology:\n  nodes:\n    s1: {kind: inswitch, p4runtime: 70000}\n", 4, "outside 1..65535"),
    ("bad program", "name: x\ntopology:\n  nodes:\n    s1: {kind: inswitch, program: nosuch}\n", 4, "program"),
    ("not yaml", "name: x\ntopology: [\n", 3, "not valid YAML"),
    ("half machines", "name: x\ntopology:\n  nodes:\n    s1: {kind: inswitch, machine: a}\n    s2: {kind: inswitch}\n  links:\n"
     "    - endpoints: [\"s1:p1\", \"s2:p1\"]\n", 5, "has no machine"),
    ("unknown machine key", "name: x\nmachines:\n  a: {underlay: 10.1.0.1, speed: 9}\ntopology:\n  nodes:\n    s1: {kind: inswitch, machine: a}\n",
     3, "unknown key 'speed'"),
    ("bad underlay", "name: x\nmachines:\n  a:\n    underlay: 10.1.0.300\ntopology:\n  nodes:\n    s1: {kind: inswitch, machine: a}\n",
     4, "unicast IPv4 address"),
    ("shared underlay", "name: x\nmachines:\n  a: {underlay: 10.1.0.1}\n  b: {underlay: 10.1.0.1}\ntopology:\n  nodes:\n"
     "    s1: {kind: inswitch, machine: a}\n", 4, "machine a's too"),
    ("unlisted machine", "name: x\nmachines:\n  a: {underlay: 10.1.0.1}\n  b: {underlay: 10.1.0.2}\ntopology:\n  nodes:\n    s1: {kind: inswitch, machine: a}\n    s2: {kind: inswitch, machine: b}\n" "    s3: {kind: inswitch, machine: c}\n  links:\n"
     "    - endpoints: [\"s1:p1\", \"s2:p1\"]\n    - endpoints: [\"s1:p2\", \"s3:p1\"]\n", 9, "does not list"),
    ("host across machines", "name: x\nmachines:\n  a: {underlay: 10.1.0.1}\n  b: {underlay: 10.1.0.2}\ntopology:\n  nodes:\n    s1: {kind: inswitch, machine: a}\n    s2: {kind: inswitch, machine: b}\n" "    h1: {kind: linux, machine: b}\n  links:\n"
     "    - endpoints: [\"s1:p1\", \"s2:p1\"]\n    - endpoints: [\"s1:p2\", \"h1:eth0\"]\n", 12, "on its switch's machine"),
    ("vni within a machine", "name: x\ntopology:\n  nodes:\n    s1: {kind: inswitch, machine: a}\n    s2: {kind: inswitch, machine: a}\n"
     "  links:\n    - endpoints: [\"s1:p1\", \"s2:p1\"]\n      vni: 7\n", 7, "stays on one machine"),
    ("duplicate vni", "name: x\nmachines:\n  a: {underlay: 10.1.0.1}\n  b: {underlay: 10.1.0.2}\ntopology:\n  nodes:\n    s1: {kind: inswitch, machine: a}\n    s2: {kind: inswitch, machine: b}\n" "  links:\n"
     "    - endpoints: [\"s1:p1\", \"s2:p1\"]\n      vni: 4097\n    - endpoints: [\"s1:p2\", \"s2:p2\"]\n", 12, "as the link on line 10"),
    ("bad vni", "name: x\nmachines:\n  a: {underlay: 10.1.0.1}\n  b: {underlay: 10.1.0.2}\ntopology:\n  nodes:\n    s1: {kind: inswitch, machine: a}\n    s2: {kind: inswitch, machine: b}\n" "  links:\n    - endpoints: [\"s1:p1\", \"s2:p1\"]\n      vni: 0\n", 11, "vni must be"),
]


@pytest.mark.parametrize("text,line,needle", [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_file_names_its_line(text: str, line: int, needle: str) -> None:
    with pytest.raises(TopologyError) as ei:
        parse_topology(text, source="t.yml")
    msg = str(ei.value)
    assert needle in msg and f"line {line}" in msg.replace(f"t.yml:{line}:", f"line {line}"), msg


@pytest.mark.parametrize("spec", ["leaf-spine:2,2,2", "leaf-spine:4,2,4", "leaf-spine:3,1,1", "fat-tree:2", "fat-tree:4"])
def test_generator_round_trips_through_the_file_format(spec: str) -> None:
    t = load_spec(spec)
    back = parse_topology(t.to_yaml(), source="export")
    assert back.name == t.name
    assert {n: (x.kind, x.program) for n, x in back.nodes.items()} == {n: (x.kind, x.program) for n, x in t.nodes.items()}
    assert [(str(ln.a), str(ln.b)) for ln in back.links] == [(str(ln.a), str(ln.b)) for ln in t.links]
    assert plan_fabric(back, "rt") == plan_fabric(t, "rt")


def test_generator_shapes() -> None:
    ls = leaf_spine(4, 2, 4)
    assert (len(ls.switches), len(ls.hosts), len(ls.links)) == (6, 16, 16 + 8)
    ft = fat_tree(4)
    assert (len(ft.switches), len(ft.hosts), len(ft.links)) == (20, 16, 16 + 16 + 16)
    # Every switch of a k=4 fat tree has k ports except the cores (k ports too: one per pod).
    assert all(len(ft.switch_ports(s.name)) == 4 for s in ft.switches)
    for bad in ("leaf-spine:2,2", "fat-tree:3", "ring:4", "leaf-spine:0,1,1"):
        with pytest.raises(TopologyError):
            load_spec(bad)


def _hops(t, src: str, dst: str) -> int:
    adj: dict[str, set[str]] = {}
    for ln in t.links:
        adj.setdefault(ln.a.node, set()).add(ln.b.node)
        adj.setdefault(ln.b.node, set()).add(ln.a.node)
    dist, todo = {src: 0}, [src]
    while todo:
        n = todo.pop(0)
        for m in adj[n]:
            if m not in dist and (m == dst or t.nodes[m].is_switch):
                dist[m] = dist[n] + 1
                todo.append(m)
    return dist[dst]


def test_fat_tree_routes_are_all_shortest_paths() -> None:
    """Each route's next hops are exactly the neighbours one hop closer to the destination
    leaf (BFS here over the raw links): edges and aggs ECMP over k/2 uplinks, cores have one."""
    t = fat_tree(4)
    plan = plan_fabric(t, "rt")
    rts = routes(t, plan)
    mac_to_switch = {s.mac: s.name for s in plan.switches}
    leaf_of_net = {f"{h.ip.rsplit('.', 1)[0]}.0/24": h.switch for h in plan.hosts}
    for sw, rs in rts.items():
        for r in rs:
            if r.prefix.endswith("/32"):
                continue
            leaf = leaf_of_net[r.prefix]
            d = _hops(t, sw, leaf)
            want = sorted({nb for ln in t.links for a, nb in ((ln.a.node, ln.b.node), (ln.b.node, ln.a.node))
                           if a == sw and t.nodes[nb].is_switch and _hops(t, nb, leaf) == d - 1})
            assert sorted(mac_to_switch[n.dmac] for n in r.nexthops) == want
    assert len(rts["edge1"][-1].nexthops) == 2 and len(rts["core1"][-1].nexthops) == 1


def test_export_command_writes_a_file_that_parses(tmp_path) -> None:
    out = tmp_path / "ls.clab.yml"
    cp = subprocess.run([sys.executable, "-m", "inswitch", "fabric", "export", "--topology", "leaf-spine:2,2,2",
                         "--out", str(out)], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stderr
    t = load_spec(str(out))
    assert len(t.switches) == 4 and len(t.hosts) == 4
    bad = subprocess.run([sys.executable, "-m", "inswitch", "fabric", "export", "--topology", "fat-tree:3"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr


def test_a_topology_across_machines_needs_its_machine_before_anything_is_made() -> None:
    from inswitch.topology.errors import RackError
    from inswitch.topology.fabric.fabric import Fabric
    from inswitch.topology.state import state_dir

    t = parse_topology("name: x\ntopology:\n  nodes:\n    s1: {kind: inswitch, machine: a}\n    s2: {kind: inswitch, machine: b}\n"
                       "  links:\n    - endpoints: [\"s1:p1\", \"s2:p1\"]\n")
    for kw, needle in (({}, "spans machines a, b: run `inswitch fabric up --topology FILE --machine NAME`"),
                       ({"machine": "c"}, "no node on machine 'c'"),
                       ({"machine": "a"}, "machine a has no underlay address"),
                       ({"machine": "a", "emulate_machines": True}, "give one")):
        with pytest.raises(RackError, match=needle.replace("`", ".").replace("(", ".").replace(")", ".")):
            Fabric().up(t, name="tmach", **kw)
    # An underlay address this host does not have: refused, not a tunnel to nowhere.
    t2 = parse_topology("name: x\nmachines:\n  a: {underlay: 198.51.100.77}\n  b: {underlay: 198.51.100.78}\n" + t.to_yaml().split("\n", 1)[1])
    with pytest.raises(RackError, match="198.51.100.77 is not an address of this host"):
        Fabric().up(t2, name="tmach", machine="a")
    with pytest.raises(RackError, match="--emulate-machines needs a topology whose nodes are on two or more machines"):
        Fabric().up("leaf-spine:2,1,1", name="tmach", emulate_machines=True)
    assert not state_dir("tmach").exists()


def test_machines_split_and_vxlan_links_are_planned() -> None:
    from inswitch.topology.fabric.generators import split_machines

    t = split_machines(load_spec("leaf-spine:3,2,2"), 2)
    back = parse_topology(t.to_yaml(), source="export")
    assert {m: x.underlay for m, x in back.machines.items()} == {"m1": "192.0.2.1", "m2": "192.0.2.2"}
    assert {n.name: n.machine for n in back.nodes.values()} == {n.name: n.machine for n in t.nodes.values()}
    # Leaves round-robin, hosts with their leaf, spines round-robin.
    assert [back.nodes[n].machine for n in ("leaf1", "leaf2", "leaf3", "spine1", "spine2")] == ["m1", "m2", "m1", "m1", "m2"]
    assert all(back.nodes[h.name].machine == back.nodes[f"leaf{(int(h.name[1:]) + 1) // 2}"].machine for h in back.hosts)
    plan = plan_fabric(back, "rt")
    cross = [ln for ln in plan.links if ln.vni is not None]
    # Exactly the switch-to-switch links whose ends are on different machines are VXLAN.
    want = [ln for ln in back.links if back.nodes[ln.a.node].machine != back.nodes[ln.b.node].machine]
    assert [c.endpoints for c in cross] == [f"{ln.a} -- {ln.b}" for ln in want] and len(cross) == 3
    assert len({c.vni for c in cross}) == 3 and all(c.a_machine != c.b_machine for c in cross)
    # A file's own vni wins and survives the round trip.
    text = back.to_yaml().replace("- endpoints: ['leaf2:p3', 'spine1:p2']", "- endpoints: ['leaf2:p3', 'spine1:p2']\n    vni: 777")
    assert "vni: 777" in text
    assert [c.vni for c in plan_fabric(parse_topology(text), "rt").links if c.endpoints == "leaf2:p3 -- spine1:p2"] == [777]
    assert "vni: 777" in parse_topology(text).to_yaml()
    with pytest.raises(TopologyError, match="too few"):
        split_machines(load_spec("leaf-spine:1,1,1"), 3)
