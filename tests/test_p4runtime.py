"""P4Runtime against a real `inswitch switch` process: with p4runtime-shell (an independent
client, fed the files `inswitch p4info` writes) and with our SwitchClient."""

from __future__ import annotations

import random
import socket
import subprocess
import sys
import time
from typing import Any, Callable, Iterator

import grpc
import pytest
from p4.v1 import p4runtime_pb2

from conftest import SwitchProcess, free_udp_ports
from inswitch import native
from inswitch.p4rt import P4RuntimeError, SwitchClient
from inswitch.p4rt.p4info import build_p4info, first_difference, from_text, p4info_for
from inswitch.p4rt.schema import P4InfoIndex

FWD = P4InfoIndex(p4info_for(["forward"]))
L2_DMAC = FWD.tables.get("l2_dmac")
L2_FORWARD = FWD.actions.get("l2_forward")
RX_COUNTERS = FWD.registers.get("rx_port_counters")
CPU_PORT = 0xFFF0
INVALID = grpc.StatusCode.INVALID_ARGUMENT


def frame(dst: str, src: str, payload: bytes = b"inswitch test payload " * 3) -> bytes:
    mac = lambda s: bytes(int(x, 16) for x in s.split(":"))  # noqa: E731
    return mac(dst) + mac(src) + b"\x08\x00" + payload


def wait_for(fn: Callable[[], Any], timeout: float = 3.0) -> Any:
    """Poll `fn` until it returns something truthy (data-plane counters settle asynchronously)."""
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(0.02)


# ---- p4runtime-shell -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shell(switchd_factory: Callable[..., SwitchProcess], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """p4runtime-shell connected (election id (0, 1)) to its own switch, its pipeline set
    from the files `inswitch p4info` writes."""
    sw = switchd_factory("--program", "forward", "--ports", "memory:4")
    d = tmp_path_factory.mktemp("p4info")
    subprocess.run([sys.executable, "-m", "inswitch", "p4info", "forward", "--out", str(d / "p4info.txt"), "--device-config", str(d / "device.json")], check=True, capture_output=True)
    import p4runtime_sh.shell as sh

    sh.setup(device_id=1, grpc_addr=sw.p4runtime, election_id=(0, 1), config=sh.FwdPipeConfig(str(d / "p4info.txt"), str(d / "device.json")), verbose=False)
    sh.test_address = sw.p4runtime
    yield sh
    sh.teardown()


def shell_write_error(sh: Any, update: p4runtime_pb2.Update) -> grpc.StatusCode:
    """The per-update status code p4runtime-shell reports for a failing write."""
    from p4runtime_sh.p4runtime import P4RuntimeWriteException

    with pytest.raises(P4RuntimeWriteException) as ei:
        sh.client.write_update(update)
    [(_, err)] = ei.value.errors
    return next(c for c in grpc.StatusCode if c.value[0] == err.canonical_code)


def dmac_update(kind: int, mac: bytes, port: bytes | None = None, table_id: int = L2_DMAC.id) -> p4runtime_pb2.Update:
    u = p4runtime_pb2.Update(type=kind)
    te = u.entity.table_entry
    te.table_id = table_id
    fm = te.match.add()
    fm.field_id = 1
    fm.exact.value = mac
    if port is not None:
        te.action.action.action_id = L2_FORWARD.id
        te.action.action.params.add(param_id=1, value=port)
    return u


def test_shell_sets_pipeline_and_gets_our_p4info(shell: Any) -> None:
    got = shell.client.get_p4info()
    assert first_difference(p4info_for(["forward"]), got) is None
    assert got == p4info_for(["forward"])  # byte-for-byte what the CLI wrote
    assert shell.client.api_version() == "1.4.1"


def test_shell_table_entries(shell: Any) -> None:
    te = shell.TableEntry("l2_dmac")(action="l2_forward")
    te.match["hdr.ethernet.dst_addr"] = "02:00:00:00:00:01"
    te.action["port"] = "1"
    te.insert()
    [entry] = [e.msg() for e in shell.TableEntry("l2_dmac").read()]
    assert entry.match[0].exact.value == bytes.fromhex("020000000001")
    assert entry.action.action.params[0].value == b"\x01"  # canonical: shortest form

    te.action["port"] = "3"
    te.modify()
    [entry] = [e.msg() for e in shell.TableEntry("l2_dmac").read()]
    assert entry.action.action.params[0].value == b"\x03"

    lpm = shell.TableEntry("ipv4_lpm")(action="set_nexthop")
    lpm.match["hdr.ipv4.dst_addr"] = "10.1.0.0/16"
    lpm.action["port"] = "2"
    lpm.action["dmac"] = "02:00:00:00:00:02"
    lpm.action["smac"] = "02:00:00:00:00:fe"
    lpm.insert()
    [route] = [e.msg() for e in shell.TableEntry("ipv4_lpm").read()]
    assert (route.match[0].lpm.value, route.match[0].lpm.prefix_len) == (bytes([10, 1, 0, 0]), 16)

    dflt = shell.TableEntry("l2_dmac")(action="drop")
    dflt.is_default = True
    dflt.modify()
    probe = shell.TableEntry("l2_dmac")
    probe.is_default = True
    [d] = [e.msg() for e in probe.read()]
    assert d.is_default_action and d.action.action.action_id == FWD.actions.get("drop").id

    te.delete()
    lpm.delete()
    assert list(shell.TableEntry("l2_dmac").read()) == []
    # A wildcard read of every table (table_id 0) now finds nothing.
    assert [e for r in shell.client.read_one(p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry())) for e in r.entities] == []


def test_shell_write_errors(shell: Any) -> None:
    mac = bytes.fromhex("020000000042")
    shell.client.write_update(dmac_update(p4runtime_pb2.Update.INSERT, mac, b"\x01"))
    assert shell_write_error(shell, dmac_update(p4runtime_pb2.Update.INSERT, mac, b"\x01")) == grpc.StatusCode.ALREADY_EXISTS
    assert shell_write_error(shell, dmac_update(p4runtime_pb2.Update.INSERT, mac, b"\x01", table_id=0x02000001)) == grpc.StatusCode.NOT_FOUND
    # 49 significant bits for a 48-bit field; a 9-bit port given 0x200.
    assert shell_write_error(shell, dmac_update(p4runtime_pb2.Update.INSERT, b"\x01" + mac, b"\x01")) == INVALID
    assert shell_write_error(shell, dmac_update(p4runtime_pb2.Update.INSERT, bytes(5) + b"\x07", b"\x02\x00")) == INVALID
    assert shell_write_error(shell, dmac_update(p4runtime_pb2.Update.INSERT, bytes(5) + b"\x07", b"")) == INVALID
    assert shell_write_error(shell, dmac_update(p4runtime_pb2.Update.DELETE, bytes.fromhex("0200000000ff"))) == grpc.StatusCode.NOT_FOUND
    wrong_action = dmac_update(p4runtime_pb2.Update.INSERT, bytes.fromhex("020000000043"))
    wrong_action.entity.table_entry.action.action.action_id = FWD.actions.get("nop").id
    assert shell_write_error(shell, wrong_action) == INVALID
    default_insert = p4runtime_pb2.Update(type=p4runtime_pb2.Update.INSERT)
    default_insert.entity.table_entry.table_id = L2_DMAC.id
    default_insert.entity.table_entry.is_default_action = True
    default_insert.entity.table_entry.action.action.action_id = FWD.actions.get("drop").id
    assert shell_write_error(shell, default_insert) == INVALID
    shell.client.write_update(dmac_update(p4runtime_pb2.Update.DELETE, mac))


def register_update(index: int | None, value: bytes, kind: int = p4runtime_pb2.Update.MODIFY) -> p4runtime_pb2.Update:
    u = p4runtime_pb2.Update(type=kind)
    re = u.entity.register_entry
    re.register_id = RX_COUNTERS.id
    if index is not None:
        re.index.index = index
    re.data.bitstring = value
    return u


def read_register_cells(sh: Any, index: int | None) -> dict[int, int]:
    ent = p4runtime_pb2.Entity()
    ent.register_entry.register_id = RX_COUNTERS.id
    if index is not None:
        ent.register_entry.index.index = index
    return {e.register_entry.index.index: int.from_bytes(e.register_entry.data.bitstring, "big") for r in sh.client.read_one(ent) for e in r.entities}


def test_shell_registers(shell: Any) -> None:
    """p4runtime-shell 0.0.6 has no register helpers, so this uses its raw client."""
    shell.client.write_update(register_update(5, (123).to_bytes(2, "big")))
    assert read_register_cells(shell, 5) == {5: 123}
    shell.client.write_update(register_update(None, b"\x07"))
    cells = read_register_cells(shell, None)
    assert len(cells) == RX_COUNTERS.size and set(cells.values()) == {7}
    assert shell_write_error(shell, register_update(RX_COUNTERS.size, b"\x01")) == grpc.StatusCode.OUT_OF_RANGE
    assert shell_write_error(shell, register_update(1, b"\x01" + bytes(8))) == INVALID  # 65 bits in a 64-bit cell
    assert shell_write_error(shell, register_update(1, b"\x01", kind=p4runtime_pb2.Update.INSERT)) == INVALID
    shell.client.write_update(register_update(None, b"\x00"))


def test_shell_multicast_groups(shell: Any) -> None:
    shell.MulticastGroupEntry(7).add(0, 0).add(1, 0).add(2, 1).insert()
    [g] = list(shell.MulticastGroupEntry(7).read())
    assert [(r.egress_port, r.instance) for r in g.replicas] == [(0, 0), (1, 0), (2, 1)]
    shell.MulticastGroupEntry(7).add(3).modify()
    assert [(r.egress_port, r.instance) for g in shell.MulticastGroupEntry(0).read() for r in g.replicas] == [(3, 0)]
    from p4runtime_sh.p4runtime import P4RuntimeWriteException

    with pytest.raises(P4RuntimeWriteException):
        shell.MulticastGroupEntry(7).add(0).insert()  # exists already
    shell.MulticastGroupEntry(7).delete()
    assert list(shell.MulticastGroupEntry(0).read()) == []
    zero = p4runtime_pb2.Update(type=p4runtime_pb2.Update.INSERT)
    zero.entity.packet_replication_engine_entry.multicast_group_entry.multicast_group_id = 0
    assert shell_write_error(shell, zero) == INVALID
    bad_port = p4runtime_pb2.Update(type=p4runtime_pb2.Update.INSERT)
    mg = bad_port.entity.packet_replication_engine_entry.multicast_group_entry
    mg.multicast_group_id = 9
    mg.replicas.add(egress_port=77)  # the switch has 4 ports
    assert shell_write_error(shell, bad_port) == INVALID


def test_shell_backup_controller_cannot_write(shell: Any) -> None:
    from p4runtime_sh.p4runtime import P4RuntimeClient

    backup = P4RuntimeClient(1, shell.test_address, (0, 0))  # lower than the primary's (0, 1)
    try:
        with pytest.raises(grpc.RpcError) as ei:
            backup.write_update(dmac_update(p4runtime_pb2.Update.INSERT, bytes.fromhex("020000000099"), b"\x01"))
        assert ei.value.code() == grpc.StatusCode.PERMISSION_DENIED
        # Reads need no election.
        assert list(backup.read_one(p4runtime_pb2.Entity(table_entry=p4runtime_pb2.TableEntry(table_id=L2_DMAC.id)))) is not None
    finally:
        backup.tear_down()


# ---- SwitchClient ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client(switchd: SwitchProcess) -> Iterator[SwitchClient]:
    with SwitchClient(switchd.p4runtime) as c:
        yield c


def test_client_table_entries(client: SwitchClient) -> None:
    client.insert_entry("l2_dmac", {"dst_addr": "02:00:00:00:00:01"}, "l2_forward", {"port": 1})
    client.insert_entry("forward.l2_dmac", {"hdr.ethernet.dst_addr": 0x020000000002}, "forward.to_cpu")
    client.insert_entry("ipv4_lpm", {"dst_addr": "10.2.0.0/16"}, "set_nexthop", {"port": 2, "dmac": "02:00:00:00:00:0a", "smac": b"\x02\x00\x00\x00\x00\x0b"})
    entries = {e["match"]["hdr.ethernet.dst_addr"]: e for e in client.read_entries("l2_dmac")}
    assert entries[0x020000000001] == {"match": {"hdr.ethernet.dst_addr": 0x020000000001}, "action": "l2_forward", "params": {"port": 1}, "priority": 0}
    assert entries[0x020000000002]["action"] == "to_cpu"
    [route] = client.read_entries("ipv4_lpm")
    assert route["match"] == {"hdr.ipv4.dst_addr": (0x0A020000, 16)} and route["params"]["smac"] == 0x02000000000B

    client.modify_entry("l2_dmac", {"dst_addr": "02:00:00:00:00:01"}, "l2_forward", {"port": 3})
    assert [e["params"] for e in client.read_entries("l2_dmac") if e["action"] == "l2_forward"] == [{"port": 3}]
    with pytest.raises(P4RuntimeError) as ei:
        client.insert_entry("l2_dmac", {"dst_addr": "02:00:00:00:00:01"}, "drop")
    assert ei.value.code == grpc.StatusCode.ALREADY_EXISTS
    with pytest.raises(P4RuntimeError) as ei:
        client.modify_entry("l2_dmac", {"dst_addr": "02:00:00:00:00:77"}, "drop")
    assert ei.value.code == grpc.StatusCode.NOT_FOUND
    with pytest.raises(P4RuntimeError) as ei:
        client.insert_entry("l2_dmac", {"dst_addr": "02:00:00:00:00:78"}, "set_nexthop", {"port": 1, "dmac": 1, "smac": 2})
    assert ei.value.code == INVALID  # not an action of this table
    with pytest.raises(P4RuntimeError) as ei:
        client.insert_entry("l2_dmac", {"dst_addr": "02:00:00:00:00:79"}, "l2_forward")
    assert ei.value.code == INVALID  # missing parameter
    client.insert_entry("ipv4_lpm", {"dst_addr": "10.0.0.255/8"}, "drop")  # the client keeps the prefix bits
    assert [e["match"] for e in client.read_entries("ipv4_lpm")][-1] == {"hdr.ipv4.dst_addr": (0x0A000000, 8)}
    client.delete_entry("ipv4_lpm", {"dst_addr": (0x0A000000, 8)})
    with pytest.raises(ValueError):
        client.insert_entry("l2_dmac", {"dst_addr": "02:00:00:00:00:7a"}, "l2_forward", {"port": 512})  # 9 bits
    with pytest.raises(KeyError):
        client.insert_entry("no_such_table", {}, "drop")

    client.set_default_action("l2_dmac", "l2_flood", {"group": 5})
    assert client.default_action("l2_dmac") == {"action": "l2_flood", "params": {"group": 5}}
    client.reset_default_action("l2_dmac")
    assert client.default_action("l2_dmac") == {"action": "l2_flood", "params": {"group": 1}}

    for mac in (0x020000000001, 0x020000000002):
        client.delete_entry("l2_dmac", {"dst_addr": mac})
    client.delete_entry("ipv4_lpm", {"dst_addr": "10.2.0.0/16"})
    assert client.read_entries("l2_dmac") == [] and client.read_entries("ipv4_lpm") == []


def test_client_batch_continues_on_error(client: SwitchClient) -> None:
    client.insert_entry("l2_smac", {"src_addr": 7}, "nop")
    with pytest.raises(P4RuntimeError) as ei:
        with client.batch():
            for i in range(1, 11):
                client.insert_entry("l2_smac", {"src_addr": i}, "nop")
    assert [(e.index, e.code) for e in ei.value.errors] == [(6, grpc.StatusCode.ALREADY_EXISTS)]
    assert ei.value.rpc_code == grpc.StatusCode.UNKNOWN
    assert sorted(e["match"]["hdr.ethernet.src_addr"] for e in client.read_entries("l2_smac")) == list(range(1, 11))
    with client.batch():
        for i in range(1, 11):
            client.delete_entry("l2_smac", {"src_addr": i})
    assert client.read_entries("l2_smac") == []


def test_client_raw_writes_are_checked(client: SwitchClient) -> None:
    """Malformed requests get INVALID_ARGUMENT / NOT_FOUND, never a crash."""
    cases = []
    u = dmac_update(p4runtime_pb2.Update.INSERT, bytes.fromhex("020000000001"), b"\x01")
    u.entity.table_entry.match[0].field_id = 9
    cases.append((u, INVALID))
    u = dmac_update(p4runtime_pb2.Update.INSERT, bytes.fromhex("020000000001"), b"\x01")
    u.entity.table_entry.match[0].ClearField("exact")
    u.entity.table_entry.match[0].lpm.value, u.entity.table_entry.match[0].lpm.prefix_len = b"\x01", 8
    cases.append((u, INVALID))
    u = dmac_update(p4runtime_pb2.Update.INSERT, bytes.fromhex("020000000001"), b"\x01")
    u.entity.table_entry.priority = 5
    cases.append((u, INVALID))
    u = p4runtime_pb2.Update(type=p4runtime_pb2.Update.INSERT)
    te = u.entity.table_entry
    te.table_id = FWD.tables.get("ipv4_lpm").id
    te.match.add(field_id=1).lpm.CopyFrom(p4runtime_pb2.FieldMatch.LPM(value=bytes([10, 0, 0, 255]), prefix_len=8))
    te.action.action.action_id = FWD.actions.get("drop").id
    cases.append((u, INVALID))  # bits set beyond the /8 prefix
    u = dmac_update(p4runtime_pb2.Update.INSERT, bytes.fromhex("020000000001"), b"\x01")
    u.entity.table_entry.action.action.params.add(param_id=1, value=b"\x01")
    cases.append((u, INVALID))
    cases.append((p4runtime_pb2.Update(type=p4runtime_pb2.Update.INSERT), INVALID))
    u = p4runtime_pb2.Update(type=p4runtime_pb2.Update.MODIFY)
    u.entity.counter_entry.counter_id = 0x12000001
    cases.append((u, grpc.StatusCode.NOT_FOUND))
    u = p4runtime_pb2.Update(type=p4runtime_pb2.Update.MODIFY)
    u.entity.register_entry.register_id = 0x16000001
    cases.append((u, grpc.StatusCode.NOT_FOUND))
    u = p4runtime_pb2.Update(type=p4runtime_pb2.Update.INSERT)
    u.entity.digest_entry.digest_id = 0x17000001
    cases.append((u, grpc.StatusCode.NOT_FOUND))
    with pytest.raises(P4RuntimeError) as ei:
        client.write([u for u, _ in cases])
    assert [(e.index, e.code) for e in ei.value.errors] == [(i, code) for i, (_, code) in enumerate(cases)]
    assert client.read_entries("l2_dmac") == []


def random_update(rng: random.Random) -> p4runtime_pb2.Update:
    """A random, mostly malformed, update: odd ids, byte strings of odd lengths, wrong match
    kinds, missing or extra parameters, negative or huge indexes."""
    def rb() -> bytes:
        return bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 2, 6, 7, 9])))

    u = p4runtime_pb2.Update(type=rng.choice([0, 1, 2, 3]))
    k = rng.random()
    if k < 0.6:
        te = u.entity.table_entry
        te.table_id = rng.choice([t.id for t in FWD.tables] + [0, 0x02000001])
        for _ in range(rng.choice([0, 1, 1, 2])):
            fm = te.match.add(field_id=rng.choice([0, 1, 2]))
            kind = rng.choice(["exact", "lpm", "ternary", "optional", "range", "none"])
            if kind == "exact":
                fm.exact.value = rb()
            elif kind == "lpm":
                fm.lpm.value, fm.lpm.prefix_len = rb(), rng.choice([-1, 0, 8, 32, 48, 49])
            elif kind == "ternary":
                fm.ternary.value, fm.ternary.mask = rb(), rb()
            elif kind == "optional":
                fm.optional.value = rb()
            elif kind == "range":
                fm.range.low, fm.range.high = rb(), rb()
        te.priority = rng.choice([0, 0, 1, -5])
        te.is_default_action = rng.random() < 0.1
        if rng.random() < 0.8:
            a = te.action.action
            a.action_id = rng.choice([x.id for x in FWD.actions] + [0, 0x01000001])
            for _ in range(rng.choice([0, 1, 2, 3, 4])):
                a.params.add(param_id=rng.choice([0, 1, 2, 3, 4]), value=rb())
    elif k < 0.75:
        re_ = u.entity.register_entry
        re_.register_id = rng.choice([r.id for r in FWD.registers] + [0, 5])
        if rng.random() < 0.7:
            re_.index.index = rng.choice([-1, 0, 511, 512, 1 << 40])
        if rng.random() < 0.8:
            re_.data.bitstring = rb()
    elif k < 0.9:
        mg = u.entity.packet_replication_engine_entry.multicast_group_entry
        mg.multicast_group_id = rng.choice([0, 1, 2, 70000])
        for _ in range(rng.choice([0, 1, 3])):
            rep = mg.replicas.add(instance=rng.choice([0, 1, 70000]))
            if rng.random() < 0.5:
                rep.egress_port = rng.choice([0, 1, 3, 4, 0xFFFFFFFD, 1 << 31])
            else:
                rep.port = rb()
    else:
        de = u.entity.digest_entry
        de.digest_id = rng.choice([d.id for d in FWD.digests] + [0])
        de.config.max_list_size = rng.choice([-1, 0, 5])
    return u


def test_random_requests_get_spec_codes(client: SwitchClient) -> None:
    """Hundreds of random, mostly malformed updates and reads: each gets a status the spec
    names for a bad request, and the switch keeps serving."""
    rng = random.Random(7)
    allowed = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.RESOURCE_EXHAUSTED}
    updates = [random_update(rng) for _ in range(400)]
    seen = set()
    for k in range(0, len(updates), 100):
        try:
            client.write(updates[k : k + 100])
        except P4RuntimeError as e:
            seen |= {err.code for err in e.errors}
    for u in updates[:100]:
        try:
            client.read([u.entity])
        except P4RuntimeError as e:
            seen.add(e.code)
    assert seen <= allowed and grpc.StatusCode.INVALID_ARGUMENT in seen
    assert client.capabilities() == "1.4.1"
    client.set_pipeline(["forward"])  # start over for the tests that follow


def test_client_registers(client: SwitchClient) -> None:
    client.write_register("rx_port_counters", 2, 0xDEADBEEF00000005)
    assert client.read_register("rx_port_counters", 2) == [(2, 0xDEADBEEF00000005)]
    client.write_register("forward.tx_port_counters", None, 9)
    cells = client.read_register("tx_port_counters")
    assert len(cells) == 512 and {v for _, v in cells} == {9}
    with pytest.raises(P4RuntimeError) as ei:
        client.read_register("rx_port_counters", 512)
    assert ei.value.code == grpc.StatusCode.OUT_OF_RANGE
    client.write_register("tx_port_counters", None, 0)
    client.write_register("rx_port_counters", None, 0)


def test_client_replication(client: SwitchClient) -> None:
    client.set_multicast_group(3, [0, 1, 2])
    client.set_multicast_group(3, [1, (2, 5)])  # exists: replaced
    assert client.read_multicast_groups() == {3: [(1, 0), (2, 5)]}
    client.delete_multicast_group(3)
    assert client.read_multicast_groups() == {}
    client.set_clone_session(4, [2], truncate_len=64)
    ent = p4runtime_pb2.Entity()
    ent.packet_replication_engine_entry.clone_session_entry.session_id = 4
    [cs] = client.read([ent])
    got = cs.packet_replication_engine_entry.clone_session_entry
    assert got.packet_length_bytes == 64 and [(r.egress_port, r.instance) for r in got.replicas] == [(2, 0)]
    client.delete_clone_session(4)
    with pytest.raises(P4RuntimeError) as ei:
        client.delete_clone_session(4)
    assert ei.value.code == grpc.StatusCode.NOT_FOUND


def test_client_packet_io(client: SwitchClient) -> None:
    """PacketOut through ingress to a MAC whose l2_dmac action is to_cpu comes back as a
    PacketIn from the CPU port; PacketOut to port 1 is counted by the egress counter."""
    client.insert_entry("l2_dmac", {"dst_addr": "02:00:00:00:00:c0"}, "to_cpu")
    f = frame("02:00:00:00:00:c0", "02:00:00:00:00:01")
    client.packet_out(f)
    assert client.packet_ins(timeout=3.0) == [(f, CPU_PORT)]
    client.write_register("tx_port_counters", 1, 0)
    g = frame("02:00:00:00:00:c1", "02:00:00:00:00:01")
    for _ in range(3):
        client.packet_out(g, egress_port=1)
    cell = wait_for(lambda: [v for _, v in client.read_register("tx_port_counters", 1) if v & 0xFFFFFFFF == 3])
    assert cell == [(len(g) * 3 << 32) | 3]
    client.packet_out(g, egress_port=999)  # no such port: reported on the stream
    assert wait_for(lambda: list(client.stream_errors))[0].canonical_code == INVALID.value[0]
    client.delete_entry("l2_dmac", {"dst_addr": "02:00:00:00:00:c0"})


def test_client_pipeline_config(client: SwitchClient) -> None:
    Set = p4runtime_pb2.SetForwardingPipelineConfigRequest

    def request(action: int, p4info: Any = None, device_config: bytes = b'{"programs":["forward"]}') -> Set:
        req = Set(device_id=1, action=action)
        req.election_id.high, req.election_id.low = client.election_id
        if p4info is not None:
            req.config.p4info.CopyFrom(p4info)
            req.config.p4_device_config = device_config
            req.config.cookie.cookie = 42
        return req

    def status(req: Set) -> grpc.StatusCode:
        try:
            client._stub.SetForwardingPipelineConfig(req)
        except grpc.RpcError as e:
            return e.code()
        return grpc.StatusCode.OK

    ours = p4info_for(["forward"])
    assert client.p4info() == ours
    client.insert_entry("l2_dmac", {"dst_addr": 5}, "drop")
    assert status(request(Set.VERIFY, ours)) == grpc.StatusCode.OK
    assert status(request(Set.RECONCILE_AND_COMMIT, ours)) == grpc.StatusCode.OK
    assert len(client.read_entries("l2_dmac")) == 1  # reconcile keeps the state
    other = from_text(str(ours))
    other.tables[1].match_fields[0].bitwidth = 32
    with pytest.raises(grpc.RpcError) as ei:
        client._stub.SetForwardingPipelineConfig(request(Set.VERIFY_AND_COMMIT, other))
    assert ei.value.code() == INVALID and "l2_dmac" in ei.value.details() and "match fields" in ei.value.details()
    assert status(request(Set.VERIFY_AND_COMMIT, ours, b"forward,nosuchprogram")) == INVALID
    assert status(request(Set.VERIFY_AND_COMMIT, ours, b"")) == INVALID
    assert status(request(Set.COMMIT)) == grpc.StatusCode.NOT_FOUND
    assert status(request(Set.VERIFY_AND_SAVE, ours)) == grpc.StatusCode.OK
    assert len(client.read_entries("l2_dmac")) == 1  # saved, not yet realized
    assert status(request(Set.COMMIT)) == grpc.StatusCode.OK
    assert client.read_entries("l2_dmac") == []  # committed: state starts over
    Get = p4runtime_pb2.GetForwardingPipelineConfigRequest
    cfg = client._stub.GetForwardingPipelineConfig(Get(device_id=1, response_type=Get.COOKIE_ONLY)).config
    assert cfg.cookie.cookie == 42 and not cfg.HasField("p4info") and not cfg.p4_device_config
    cfg = client._stub.GetForwardingPipelineConfig(Get(device_id=1, response_type=Get.DEVICE_CONFIG_AND_COOKIE)).config
    assert cfg.p4_device_config == b'{"programs":["forward"]}'
    with pytest.raises(grpc.RpcError) as ei:
        client._stub.GetForwardingPipelineConfig(Get(device_id=2))
    assert ei.value.code() == grpc.StatusCode.NOT_FOUND
    client.set_pipeline(["forward"])
    assert client.p4info() == build_p4info(native.program_set_info(["forward"]))


def test_write_rate(client: SwitchClient) -> None:
    """Control-plane write throughput through gRPC from one client (printed; run with -s)."""
    client.set_pipeline(["forward"])
    n1 = 200
    t0 = time.perf_counter()
    for i in range(n1):
        client.insert_entry("l2_smac", {"src_addr": 0x10000 + i}, "nop")
    one = n1 / (time.perf_counter() - t0)
    n100 = 2000
    t0 = time.perf_counter()
    for k in range(0, n100, 100):
        with client.batch():
            for i in range(k, k + 100):
                client.insert_entry("l2_smac", {"src_addr": 0x20000 + i}, "nop")
    hundred = n100 / (time.perf_counter() - t0)
    print(f"\ntable inserts/s through P4Runtime: {one:.0f} (1 update per Write), {hundred:.0f} (100 per Write)")
    assert len(client.read_entries("l2_smac")) == n1 + n100
    client.set_pipeline(["forward"])


def test_malformed_reads_and_stream_messages(client: SwitchClient) -> None:
    ent = p4runtime_pb2.Entity()
    ent.table_entry.table_id = 0x02000001
    with pytest.raises(P4RuntimeError) as ei:
        client.read([ent])
    assert ei.value.code == grpc.StatusCode.NOT_FOUND and ei.value.rpc_code == grpc.StatusCode.UNKNOWN
    with pytest.raises(P4RuntimeError) as ei:
        client.read([p4runtime_pb2.Entity()])
    assert ei.value.code == INVALID
    assert client.read([p4runtime_pb2.Entity(counter_entry=p4runtime_pb2.CounterEntry())]) == []  # no counters: nothing
    # A PacketOut with metadata the P4Info does not declare is dropped and reported.
    client.stream_errors.clear()
    req = p4runtime_pb2.StreamMessageRequest()
    req.packet.payload = frame("02:00:00:00:00:01", "02:00:00:00:00:02")
    req.packet.metadata.add(metadata_id=7, value=b"\x01")
    client._out.put(req)
    err = wait_for(lambda: list(client.stream_errors))[0]
    assert err.canonical_code == INVALID.value[0] and err.WhichOneof("details") == "packet_out"
    with pytest.raises(ConnectionError, match="NOT_FOUND"):
        SwitchClient(client.address, device_id=2, timeout=5)


def test_registers_of_a_two_pipe_switch(switchd_factory: Callable[..., SwitchProcess]) -> None:
    """Ports 0-1 are in pipe 0 and ports 2-3 in pipe 1; each pipe counts its own ports, and
    a read shows every port's count."""
    sw = switchd_factory("--program", "forward", "--ports", "memory:4", "--pipes", "2")
    with SwitchClient(sw.p4runtime) as c:
        f = frame("02:00:00:00:00:01", "02:00:00:00:00:02")
        for port in (1, 3, 3):
            c.packet_out(f, egress_port=port)

        def counts() -> dict[int, int] | None:
            # Each pipe's thread runs its own packet-outs: wait for both pipes, not only the
            # one counting port 3 (under load, pipe 0 may still be on port 1's).
            cells = dict(c.read_register("tx_port_counters"))
            return cells if cells[1] & 0xFFFFFFFF >= 1 and cells[3] & 0xFFFFFFFF >= 2 else None

        assert wait_for(counts) is not None, "the packet-outs were not all counted within the wait"
        time.sleep(0.1)  # a count going on past the expected one would show by now
        cells = dict(c.read_register("tx_port_counters"))
        assert cells[1] & 0xFFFFFFFF == 1 and cells[3] & 0xFFFFFFFF == 2 and cells[0] == cells[2] == 0
        c.write_register("tx_port_counters", None, 5)  # writes reach every pipe
        assert set(dict(c.read_register("tx_port_counters")).values()) == {5}


# ---- arbitration -----------------------------------------------------------------------------


def test_arbitration(switchd_factory: Callable[..., SwitchProcess]) -> None:
    sw = switchd_factory("--program", "forward", "--ports", "memory:2")
    first = SwitchClient(sw.p4runtime, election_id=(0, 5))
    try:
        with pytest.raises(ConnectionError, match="not the primary"):
            SwitchClient(sw.p4runtime, election_id=(0, 4), timeout=5)
        backup = SwitchClient(sw.p4runtime, election_id=(0, 3), require_primary=False)
        assert not backup.is_primary
        with pytest.raises(P4RuntimeError) as ei:
            backup.insert_entry("l2_dmac", {"dst_addr": 1}, "drop")
        assert ei.value.code == grpc.StatusCode.PERMISSION_DENIED
        assert backup.read_entries("l2_dmac") == []
        with pytest.raises(ConnectionError):  # two live controllers may not share an id
            SwitchClient(sw.p4runtime, election_id=(0, 3), require_primary=False, timeout=5)
        # A higher id takes over; the old primary hears about it and can no longer write.
        second = SwitchClient(sw.p4runtime, election_id=(1, 0))
        assert wait_for(lambda: not first.is_primary)
        with pytest.raises(P4RuntimeError) as ei:
            first.insert_entry("l2_dmac", {"dst_addr": 1}, "drop")
        assert ei.value.code == grpc.StatusCode.PERMISSION_DENIED
        second.insert_entry("l2_dmac", {"dst_addr": 1}, "drop")
        second.close()
        # The highest id ever seen stays the bar: (0, 5) cannot come back as primary.
        with pytest.raises(ConnectionError):
            SwitchClient(sw.p4runtime, election_id=(0, 6), timeout=5)
        backup.close()
    finally:
        first.close()
    with pytest.raises(ConnectionError, match="no P4Runtime server"):
        SwitchClient("127.0.0.1:1", timeout=0.5)


# ---- digests and PacketIn over a UDP tunnel port ---------------------------------------------


@pytest.fixture(scope="module")
def udp_switch(switchd_factory: Callable[..., SwitchProcess]) -> Iterator[tuple[SwitchClient, socket.socket, int]]:
    """A switch whose 2 ports are UDP tunnels; the test's socket is the host on port 0."""
    base = free_udp_ports(2)
    sw = switchd_factory("--program", "forward", "--ports", f"udp:{base}:2")
    host = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    host.bind(("127.0.0.1", 0))
    host.settimeout(3.0)
    with SwitchClient(sw.p4runtime) as c:
        yield c, host, base
    host.close()


def test_digest_reports_unknown_source_once(udp_switch: tuple[SwitchClient, socket.socket, int]) -> None:
    c, host, base = udp_switch
    c.enable_digest("mac_learn")
    src = "02:00:00:00:aa:01"
    f = frame("ff:ff:ff:ff:ff:ff", src)
    host.sendto(f, ("127.0.0.1", base))  # arrives on switch port 0
    [(name, [data])] = c.digests(timeout=3.0)
    assert name == "mac_learn" and data == bytes.fromhex("02000000aa01") + b"\x00\x00"  # src_addr, port 0
    # Unacknowledged data is not reported again; `digests` acknowledged it, so the next
    # packet would be reported again unless the controller learns the address.
    c.insert_entry("l2_smac", {"src_addr": src}, "nop")
    host.sendto(f, ("127.0.0.1", base))
    assert c.digests(timeout=0.5) == []
    src2 = "02:00:00:00:aa:02"
    host.sendto(frame("ff:ff:ff:ff:ff:ff", src2), ("127.0.0.1", base))
    [(name, records)] = c.digest_records(timeout=3.0)
    assert records == [{"src_addr": 0x02000000AA02, "port": 0}]
    ent = p4runtime_pb2.Entity()
    ent.digest_entry.digest_id = FWD.digests.get("mac_learn").id
    [cfg] = c.read([ent])
    assert cfg.digest_entry.config.max_list_size == 1
    c.disable_digest("mac_learn")


def test_digest_lists_batch_until_timeout(udp_switch: tuple[SwitchClient, socket.socket, int]) -> None:
    """With no size limit and a 300 ms buffering delay, three distinct reports and one
    duplicate sent together arrive as one list of three."""
    c, host, base = udp_switch
    c.enable_digest("mac_learn", max_timeout_ns=300_000_000, max_list_size=0)
    sources = [f"02:00:00:00:bb:0{i}" for i in range(3)]
    t0 = time.monotonic()
    for src in sources + sources[:1]:
        host.sendto(frame("ff:ff:ff:ff:ff:ff", src), ("127.0.0.1", base))
    [(name, records)] = c.digest_records(timeout=3.0)
    assert time.monotonic() - t0 >= 0.25
    assert sorted(r["src_addr"] for r in records) == [int(s.replace(":", ""), 16) for s in sources]
    c.disable_digest("mac_learn")


def test_udp_port_packet_in_and_out(udp_switch: tuple[SwitchClient, socket.socket, int]) -> None:
    c, host, base = udp_switch
    c.insert_entry("l2_dmac", {"dst_addr": "02:00:00:00:cc:01"}, "to_cpu")
    c.insert_entry("l2_dmac", {"dst_addr": "02:00:00:00:cc:02"}, "l2_forward", {"port": 0})
    up = frame("02:00:00:00:cc:01", "02:00:00:00:aa:09")
    host.sendto(up, ("127.0.0.1", base))
    assert c.packet_ins(timeout=3.0) == [(up, 0)]  # from front-panel port 0
    down = frame("02:00:00:00:cc:02", "02:00:00:00:cc:03")
    c.packet_out(down)  # through ingress: l2_dmac sends it out of port 0, to our socket
    got, _ = host.recvfrom(4096)
    assert got == down


def _kv_registers(p4: Any) -> set[str]:
    return {r.preamble.name for r in p4.registers if r.preamble.name.startswith("inaas.kv_")}


def test_switch_target_sizes_the_p4info_and_the_pipelines_it_sets(switchd_factory: Callable[..., SwitchProcess]) -> None:
    """inaas's segments per pass follow the target (13 on tofino1, 20 unbounded): a tofino1
    switch's P4Info lists the arrays it loaded, a controller sets its pipeline with that
    target's P4Info, and a set that does not fit tofino1 is refused there."""
    t1 = native.program_set_info(["forward", "inaas"], "tofino1")
    t1.register_id("inaas.kv_12")
    with pytest.raises(KeyError):
        t1.register_id("inaas.kv_13")
    for target in (None, "tofino2"):
        native.program_set_info(["forward", "inaas"], target).register_id("inaas.kv_19")
    with pytest.raises(ValueError, match="unknown target"):
        native.program_set_info(["forward"], "bogus")
    assert _kv_registers(p4info_for(["forward", "inaas"], "tofino1")) == {f"inaas.kv_{j}" for j in range(13)}
    sw = switchd_factory("--program", "forward,inaas", "--ports", "memory:4", "--target", "tofino1")
    with SwitchClient(sw.p4runtime) as c:
        assert _kv_registers(c.p4info()) == {f"inaas.kv_{j}" for j in range(13)}
        with pytest.raises(P4RuntimeError) as ei:
            c.set_pipeline(["forward", "inaas"])  # the unbounded build's P4Info: 20 segments
        assert ei.value.code == INVALID and "does not match" in str(ei.value)
        c.set_pipeline(["forward", "inaas"], target="tofino1")
        assert _kv_registers(c.p4info()) == {f"inaas.kv_{j}" for j in range(13)}
        # Two output words per acceptor action: loads unbounded, not on this switch.
        with pytest.raises(P4RuntimeError) as ei:
            c.set_pipeline(["forward", "inaas_paxos"], target="tofino1")
        assert ei.value.code == INVALID and "tofino1" in str(ei.value)
        assert c.p4info() == build_p4info(native.program_set_info(["forward", "inaas"], "tofino1")), "the refused set left the pipeline as it was"
