"""Action profiles and selectors over P4Runtime against a real `inswitch switch`: the
`forward` program's `ecmp_selector` (implementing `ipv4_ecmp`) written and read back with
p4runtime-shell (an independent client) and with our SwitchClient, including the errors
P4Runtime prescribes, and a frame routed through a group on in-memory ports."""

from __future__ import annotations

import subprocess
import sys
from typing import Any, Callable, Iterator

import grpc
import pytest

from conftest import SwitchProcess
from inswitch.p4rt import P4RuntimeError, SwitchClient
from inswitch.p4rt.p4info import p4info_for
from inswitch.p4rt.schema import P4InfoIndex

FWD = P4InfoIndex(p4info_for(["forward"]))


def test_p4info_declares_the_selector() -> None:
    [prof] = list(FWD.action_profiles)
    assert prof.name == "forward.ecmp_selector" and prof.with_selector
    assert (prof.size, prof.max_group_size) == (1024, 64)
    ecmp = FWD.tables.get("ipv4_ecmp")
    assert prof.table_ids == (ecmp.id,) and ecmp.implementation_id == prof.id
    assert FWD.tables.get("ipv4_lpm").implementation_id == 0
    assert prof.id >> 24 == 0x11  # P4Ids.ACTION_PROFILE


@pytest.fixture(scope="module")
def shell(switchd_factory: Callable[..., SwitchProcess], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    sw = switchd_factory("--program", "forward", "--ports", "memory:4")
    d = tmp_path_factory.mktemp("p4info")
    subprocess.run([sys.executable, "-m", "inswitch", "p4info", "forward", "--out", str(d / "p4info.txt"),
                    "--device-config", str(d / "device.json")], check=True, capture_output=True)
    import p4runtime_sh.shell as sh

    sh.setup(device_id=1, grpc_addr=sw.p4runtime, election_id=(0, 1),
             config=sh.FwdPipeConfig(str(d / "p4info.txt"), str(d / "device.json")), verbose=False)
    yield sh
    sh.teardown()


def test_shell_members_groups_and_indirect_entries(shell: Any) -> None:
    sh = shell
    for mid, port in ((1, 1), (2, 2), (3, 3)):
        m = sh.ActionProfileMember("ecmp_selector")(member_id=mid, action="set_nexthop")
        m.action["port"] = str(port)
        m.action["dmac"] = f"02:00:00:00:00:{port:02x}"
        m.action["smac"] = "02:00:00:00:00:fe"
        m.insert()
    g = sh.ActionProfileGroup("ecmp_selector")(group_id=5)
    g.add(1)
    g.add(2, weight=3)
    g.insert()
    te = sh.TableEntry("ipv4_ecmp")
    te.match["hdr.ipv4.dst_addr"] = "10.2.0.0/16"
    te.group_id = 5
    te.insert()
    te2 = sh.TableEntry("ipv4_ecmp")
    te2.match["hdr.ipv4.dst_addr"] = "10.3.0.0/16"
    te2.member_id = 3
    te2.insert()

    members = {m.msg().member_id: m.msg() for m in sh.ActionProfileMember("ecmp_selector").read()}
    assert sorted(members) == [1, 2, 3]
    assert members[2].action.params[0].value == b"\x02"  # port 2, canonical bytes
    [grp] = [x.msg() for x in sh.ActionProfileGroup("ecmp_selector").read()]
    assert grp.group_id == 5 and [(m.member_id, m.weight) for m in grp.members] == [(1, 1), (2, 3)]
    entries = {e.msg().match[0].lpm.value: e.msg().action for e in sh.TableEntry("ipv4_ecmp").read()}
    assert entries[bytes([10, 2, 0, 0])].action_profile_group_id == 5
    assert entries[bytes([10, 3, 0, 0])].action_profile_member_id == 3

    from p4runtime_sh.p4runtime import P4RuntimeWriteException

    def code(fn: Callable[[], Any]) -> int:
        with pytest.raises(P4RuntimeWriteException) as ei:
            fn()
        [(_, err)] = ei.value.errors
        return err.canonical_code

    # A member in a group and pointed at by an entry cannot go; a group pointed at neither.
    assert code(lambda: sh.ActionProfileMember("ecmp_selector")(member_id=1).delete()) == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert code(lambda: sh.ActionProfileGroup("ecmp_selector")(group_id=5).delete()) == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    dup = sh.ActionProfileMember("ecmp_selector")(member_id=1, action="drop")
    assert code(dup.insert) == grpc.StatusCode.ALREADY_EXISTS.value[0]
    dangling = sh.ActionProfileGroup("ecmp_selector")(group_id=6)
    dangling.add(99)
    assert code(dangling.insert) == grpc.StatusCode.NOT_FOUND.value[0]
    # A direct action in the indirect table is refused (the shell refuses to build one, so
    # the update is built here).
    from p4.v1 import p4runtime_pb2

    u = p4runtime_pb2.Update(type=p4runtime_pb2.Update.INSERT)
    e = u.entity.table_entry
    e.table_id = FWD.tables.get("ipv4_ecmp").id
    fm = e.match.add()
    fm.field_id, fm.lpm.value, fm.lpm.prefix_len = 1, bytes([10, 9, 0, 0]), 16
    e.action.action.action_id = FWD.actions.get("drop").id
    assert code(lambda: sh.client.write_update(u)) == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    te.delete()
    te2.delete()
    g.delete()
    for mid in (1, 2, 3):
        sh.ActionProfileMember("ecmp_selector")(member_id=mid).delete()
    assert list(sh.ActionProfileMember("ecmp_selector").read()) == []


@pytest.fixture(scope="module")
def client(switchd_factory: Callable[..., SwitchProcess]) -> Iterator[tuple[SwitchClient, SwitchProcess]]:
    sw = switchd_factory("--program", "forward", "--ports", "memory:4")
    with SwitchClient(sw.p4runtime) as c:
        yield c, sw


def test_client_writes_reads_and_routes_through_a_group(client: tuple[SwitchClient, SwitchProcess]) -> None:
    c, _ = client
    with c.batch():
        for mid in (1, 2):
            c.insert_member("ecmp_selector", mid, "set_nexthop", {"port": mid, "dmac": f"02:00:00:00:00:{mid:02x}", "smac": "02:00:00:00:00:fe"})
    c.insert_group("ecmp_selector", 1, [1, (2, 2)])
    c.insert_entry("ipv4_ecmp", {"dst_addr": "10.2.0.0/16"}, group=1)
    assert c.read_members("ecmp_selector")[2] == {"action": "set_nexthop", "params": {"port": 2, "dmac": 0x020000000002, "smac": 0x0200000000FE}}
    assert c.read_groups("ecmp_selector") == {1: [(1, 1), (2, 2)]}
    assert c.read_entries("ipv4_ecmp") == [{"match": {"hdr.ipv4.dst_addr": (0x0A020000, 16)}, "group": 1, "priority": 0}]
    c.modify_group("ecmp_selector", 1, [2])
    assert c.read_groups("ecmp_selector") == {1: [(2, 1)]}
    with pytest.raises(P4RuntimeError) as ei:
        c.insert_entry("ipv4_ecmp", {"dst_addr": "10.4.0.0/16"}, group=77)
    assert ei.value.code == grpc.StatusCode.NOT_FOUND
    with pytest.raises(P4RuntimeError) as ei:
        c.insert_entry("ipv4_lpm", {"dst_addr": "10.4.0.0/16"}, member=1)
    assert ei.value.code == grpc.StatusCode.INVALID_ARGUMENT
    c.delete_entry("ipv4_ecmp", {"dst_addr": "10.2.0.0/16"})
    c.delete_group("ecmp_selector", 1)
    c.delete_member("ecmp_selector", 1)
    c.delete_member("ecmp_selector", 2)
    assert c.read_members("ecmp_selector") == {} and c.read_groups("ecmp_selector") == {}
