"""Decoded switch state: the register field split the programs publish in the P4Info, the
decoding of table entries and cells, and the same data from `SwitchClient`, the command
line (`inswitch registers read`, `inswitch tables list`) and the switch daemon's /api.

References are computed here from what the test wrote (a packed cell split by hand, an
address formatted by the standard library), never read back from the code under test."""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
import urllib.error
import urllib.request
from typing import Any, Callable

import pytest

from inswitch import native
from inswitch.p4rt import decode
from inswitch.p4rt.client import SwitchClient
from inswitch.p4rt.p4info import p4info_for
from inswitch.p4rt.schema import P4InfoIndex, cell_fields

from conftest import free_tcp_port

PROGRAMS = [p for p in native.program_names()]


def test_every_declared_field_split_covers_its_cell() -> None:
    for prog in PROGRAMS:
        info = native.program_set_info([prog])
        idx = P4InfoIndex(p4info_for([prog]))
        for decl in info.programs[0]["decl"]["registers"]:
            r = idx.registers.get(f"{prog}.{decl['name']}")
            if not decl.get("fields"):
                assert r.fields == ()
                continue
            assert [f.name for f in r.fields] == [f["name"] for f in decl["fields"]]
            assert sum(f.bits for f in r.fields) == r.bitwidth == decl["cell_bits"]
            lsb = 0
            for f in r.fields:  # contiguous, least significant first
                assert f.lsb == lsb
                lsb += f.bits


def test_port_counters_split_into_packets_and_bytes() -> None:
    r = P4InfoIndex(p4info_for(["forward"])).registers.get("forward.rx_port_counters")
    packets, nbytes = 123_456, 98_765_432
    assert decode.cell(r, (nbytes << 32) | packets) == {"packets": packets, "bytes": nbytes}
    assert [(f.name, f.lsb, f.bits) for f in r.fields] == [("packets", 0, 32), ("bytes", 32, 32)]


def test_cell_fields_annotation_parsing() -> None:
    assert cell_fields(['@cell_fields("a[3:0],b[31:4]")'])[1].bits == 28
    assert cell_fields(['@cell_fields("a[0:3]")']) == ()  # reversed range: not guessed at
    assert cell_fields(["@other"]) == ()


def test_values_shown_as_addresses() -> None:
    assert decode.show(0x0200000000AB, "hdr.ethernet.dst_addr", 48) == "02:00:00:00:00:ab"
    assert decode.show(int(ipaddress.IPv4Address("10.1.2.3")), "hdr.ipv4.dst_addr", 32) == "10.1.2.3"
    assert decode.show(7, "port", 9) == "7"
    assert decode.show(70000, "seq", 32) == "70000"  # a 32-bit number that is not an address


@pytest.mark.parametrize("text,want", [("rx[3]", ("rx", 3)), ("forward.rx", ("forward.rx", None)), (" a[ 0 ] ", ("a", 0))])
def test_parse_cell_ref(text: str, want: tuple[str, Any]) -> None:
    assert decode.parse_cell_ref(text) == want


@pytest.mark.parametrize("text", ["", "a[", "a[x]", "a[-1]", "[1]", "a]"])
def test_parse_cell_ref_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        decode.parse_cell_ref(text)


# ---- against a running switch ------------------------------------------------------------

PACKETS, BYTES, CELL = 4242, 1_234_567, 200  # a port no traffic uses


@pytest.fixture(scope="module")
def programmed(switchd_factory: Callable[..., Any]) -> Any:
    sw = switchd_factory("--program", "forward", "--ports", "memory:4")
    with SwitchClient(sw.p4runtime) as c:
        c.insert_entry("l2_dmac", {"dst_addr": "02:00:00:00:00:0a"}, "l2_forward", {"port": 3})
        c.insert_entry("ipv4_lpm", {"dst_addr": "10.9.0.0/16"}, "set_nexthop", {"port": 2, "dmac": "02:00:00:00:00:0b", "smac": "02:00:00:00:00:0c"})
        c.write_register("rx_port_counters", CELL, (BYTES << 32) | PACKETS)
    return sw


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "inswitch", *args], capture_output=True, text=True, timeout=60)


def test_client_decodes_tables_and_cells(programmed: Any) -> None:
    with SwitchClient(programmed.p4runtime) as c:
        cells = c.register_cells("rx_port_counters", CELL)["cells"]
        lpm = c.table_entries("ipv4_lpm")
        l2 = c.table_entries("l2_dmac")
    assert cells == [{"index": CELL, "raw": (BYTES << 32) | PACKETS, "packets": PACKETS, "bytes": BYTES}]
    assert lpm["entries"] == [{"table": "ipv4_lpm", "match": {"hdr.ipv4.dst_addr": "10.9.0.0/16"}, "action": "set_nexthop",
                               "params": {"port": "2", "dmac": "02:00:00:00:00:0b", "smac": "02:00:00:00:00:0c"}, "priority": 0}]
    assert l2["entries"][0]["match"] == {"hdr.ethernet.dst_addr": "02:00:00:00:00:0a"}
    assert l2["default"] == {"action": "l2_flood", "params": {"group": "1"}}


def test_cli_registers_read(programmed: Any) -> None:
    cp = _cli("registers", "read", f"rx_port_counters[{CELL}]", "--p4runtime", programmed.p4runtime, "--json", "-")
    assert cp.returncode == 0, cp.stderr
    doc = json.loads(cp.stdout)
    assert doc["cells"] == [{"index": CELL, "raw": (BYTES << 32) | PACKETS, "packets": PACKETS, "bytes": BYTES}]
    text = _cli("registers", "read", f"forward.rx_port_counters[{CELL}]", "--p4runtime", programmed.p4runtime)
    assert text.returncode == 0 and "packets" in text.stdout and "bytes" in text.stdout
    row = next(line.split() for line in text.stdout.splitlines() if line.split()[:1] == [str(CELL)])
    assert row == [str(CELL), str(PACKETS), str(BYTES), str((BYTES << 32) | PACKETS)]  # piped, 80 columns: every number whole


def test_cli_tables_list(programmed: Any) -> None:
    cp = _cli("tables", "list", "ipv4_lpm", "--p4runtime", programmed.p4runtime, "--json", "-")
    assert cp.returncode == 0, cp.stderr
    assert json.loads(cp.stdout)["entries"][0]["match"] == {"hdr.ipv4.dst_addr": "10.9.0.0/16"}
    every = _cli("tables", "list", "--p4runtime", programmed.p4runtime)
    assert every.returncode == 0 and "02:00:00:00:00:0a" in every.stdout and "10.9.0.0/16" in every.stdout


@pytest.mark.parametrize("args,code", [
    (["registers", "read", "nope"], 2),
    (["registers", "read", "rx_port_counters[512]"], 2),
    (["registers", "read", "rx_port_counters[x]"], 2),
    (["tables", "list", "nope"], 2),
])
def test_cli_bad_input_is_one_line(programmed: Any, args: list[str], code: int) -> None:
    cp = _cli(*args, "--p4runtime", programmed.p4runtime)
    assert cp.returncode == code
    assert "Traceback" not in cp.stderr and len(cp.stderr.strip().splitlines()) == 1


def test_cli_rack_and_p4runtime_together_refused() -> None:
    cp = _cli("tables", "list", "--rack", "isw", "--p4runtime", "127.0.0.1:1")
    assert cp.returncode == 2 and "not both" in cp.stderr


def _get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_switchd_serves_the_page_and_decoded_api(programmed: Any) -> None:
    base = f"http://{programmed.metrics}"
    with urllib.request.urlopen(base + "/", timeout=10) as r:
        assert r.status == 200 and b"app.js" in r.read()
    code, doc = _get(base + f"/api/register?name=rx_port_counters&index={CELL}")
    assert code == 200 and doc["cells"][0]["packets"] == PACKETS and doc["cells"][0]["bytes"] == BYTES
    code, doc = _get(base + "/api/register?name=rx_port_counters")  # zero cells left out
    assert code == 200 and [c["index"] for c in doc["cells"]] == [CELL]
    code, doc = _get(base + "/api/pipeline")
    counts = {t["table"]: t["count"] for t in doc["tables"]}
    assert counts["l2_dmac"] == 1 and counts["ipv4_lpm"] == 1
    code, doc = _get(base + "/api/counters")
    assert code == 200 and len(doc["ports"]) == 4
    assert _get(base + "/api/register?name=nope")[0] == 404
    assert _get(base + "/api/register?name=rx_port_counters&index=-1")[0] == 400
    assert _get(base + "/api/nope")[0] == 404


# ---- system panels ---------------------------------------------------------------------------


def test_system_panels_show_what_the_programs_hold(switchd_factory: Callable[..., Any]) -> None:
    sw = switchd_factory("--program", "forward,daiet,inaas,netsha-unbounded,hare", "--ports", "memory:4")
    children, ends, slot = 3, 1, 2
    with SwitchClient(sw.p4runtime) as c:
        # DAIET: tree 7 with 3 children in register slot 2, one END seen
        c.insert_entry("daiet_trees", {"hdr.daiet.tree_id": 7}, "set_tree", {
            "parent_port": 1, "tree_idx": slot, "part_base": 0, "part_size": 16, "sender_base": 0,
            "op_children_id_senders": (children << 32) | (200 << 16) | 4})
        c.write_register("ends_seen", slot, ends)
        # INaaS: tenant uid 77 on port 1 in slot 5; 4 ALU ops over 9 packets; one lease cell
        c.insert_entry("tenants", {"ig_intr_md.ingress_port": 1, "hdr.inaas.uid": 77}, "set_tenant", {"slot": 5, "max_lease_us": 1000})
        c.write_register("tenant_usage", 5, (9 << 32) | 4)
        c.write_register("lease_deadline_0", 3, 123456)
        c.write_register("lease_0", 3, 77)
        # NetSHa (Table 1's build, both ways' owners in one cell): set 0's way 0 claimed by
        # query 3 (stored as QID + 1)
        c.write_register("netsha-unbounded.qid", 0, 3 + 1)
        # Hare: object slot 1 answered 10 queries; slot 1 valid, slot 4 with a write in flight
        c.write_register("hare.oo_stat", 1, 10)
        c.write_register("hare.obj_state", 1, 1)
        c.write_register("hare.obj_state", 4, 2)
        sets = c.schema.registers.get("netsha-unbounded.qid").size
    code, doc = _get(f"http://{sw.metrics}/api/systems")
    assert code == 200
    panels = {p["program"]: p for p in doc["panels"]}
    assert panels["daiet"]["rows"]["data"] == [["7", children, ends, children - ends, 0, 1]]
    assert panels["inaas"]["rows"]["data"] == [["77", "1", 5, 1000, 9, 4, 0, 1, 0]]
    net = dict(map(tuple, panels["netsha-unbounded"]["summary"]))
    assert net["claimed by a query"] == 1 and net["registers (sets x 2 ways)"] == 2 * sets
    assert panels["netsha-unbounded"]["rows"]["data"] == [[3, 1]]
    assert panels["hare"]["rows"]["data"] == [[1, 10]]
    hare = dict(map(tuple, panels["hare"]["summary"]))
    assert hare["offloaded objects"] == 2 and hare["offloaded, valid"] == 1 and hare["offloaded, write in flight"] == 1


def test_netsha_panel_reads_tofino1s_one_array_per_way(switchd_factory: Callable[..., Any]) -> None:
    # netsha-tofino1 (as the default `netsha`) keeps each way's owners in an array of its
    # own (qid_0, qid_1).
    sw = switchd_factory("--program", "forward,netsha-tofino1", "--ports", "memory:4")
    with SwitchClient(sw.p4runtime) as c:
        c.write_register("netsha-tofino1.qid_1", 0, 5 + 1)
        c.write_register("netsha-tofino1.qid_0", 2, 3 + 1)
        sets = c.schema.registers.get("netsha-tofino1.qid_0").size
    code, doc = _get(f"http://{sw.metrics}/api/systems")
    assert code == 200
    panel = {p["program"]: p for p in doc["panels"]}["netsha-tofino1"]
    net = dict(map(tuple, panel["summary"]))
    assert net["claimed by a query"] == 2 and net["registers (sets x 2 ways)"] == 2 * sets
    assert panel["rows"]["data"] == [[3, 1], [5, 1]]


# ---- inswitch ui's server, without a browser -------------------------------------------------


def test_ui_server_proxies_and_reports_a_dead_switch(programmed: Any) -> None:
    from inswitch.ui.rack import Topology, UiServer

    dead = free_tcp_port()
    topo = Topology.from_doc({"title": "t", "switches": [
        {"name": "s1", "http": programmed.metrics, "p4runtime": programmed.p4runtime},
        {"name": "gone", "http": f"127.0.0.1:{dead}", "p4runtime": f"127.0.0.1:{dead}"}]})
    srv = UiServer("127.0.0.1:0", topo)
    srv.start()
    try:
        base = f"http://{srv.address}"
        code, doc = _get(base + "/api/topology")
        assert code == 200 and [s["base"] for s in doc["switches"]] == ["sw/s1/", "sw/gone/"] and doc["writes"] is False
        code, doc = _get(base + f"/sw/s1/api/register?name=rx_port_counters&index={CELL}")
        assert code == 200 and doc["cells"][0]["bytes"] == BYTES
        assert _get(base + "/sw/s1/api/register?name=nope")[0] == 404  # the switch's own answer, passed on
        code, doc = _get(base + "/sw/gone/api/counters")
        assert code == 502 and "does not answer" in doc["error"]
        assert _get(base + "/sw/nosuch/api/counters")[0] == 404
    finally:
        srv.stop()


def test_ui_cli_refuses_a_missing_rack() -> None:
    cp = _cli("ui", "--rack", "nosuchrack", "--listen", "127.0.0.1:0")
    assert cp.returncode == 1 and "no rack named 'nosuchrack'" in cp.stderr and "Traceback" not in cp.stderr
    bad = _cli("ui", "--listen", "nohost")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
