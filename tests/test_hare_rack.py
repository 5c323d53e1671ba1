"""Hare end to end with real processes and kernel UDP sockets: a KV server in one network
namespace, a client in another, the inswitch switch process (forward + hare) between them,
and the controller (this test) programming the e-MAT over P4Runtime and setting slot
states with P4Runtime PacketOuts. The server moves the value onto the switch with a data
movement packet (the D-modifier). Checked against the server's own dict.

Needs root (namespaces); the rack is named `hare…` and always taken down."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest
from inswitch.topology.state import process_tag

from inswitch import _native
from inswitch.apps.hare import kvsim

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: network namespaces and veth pairs")

# One Hare message, as the hosts build it with plain struct (the wire format of
# crates/wire/src/hare.rs: 16-byte header, key field, value).
HOST_LIB = textwrap.dedent('''
    import socket, struct, sys, time, json
    KF = 128
    def msg(op, key, value=b"", seq=0, slot=0, flags=0, status=0):
        return struct.pack("!BBBBIHHBBH", op, flags, len(key), KF, seq, slot, 0, len(value), status, 0) + key + bytes(KF - len(key)) + value
    def parse(b):
        op, flags, kl, kf, seq, slot, aux, vl, status, _ = struct.unpack_from("!BBBBIHHBBH", b)
        return {"op": op, "flags": flags, "seq": seq, "slot": slot, "key": b[16:16 + kl], "value": b[16 + kf:16 + kf + vl]}
''')

SERVER = HOST_LIB + textwrap.dedent('''
    # The KV server: a dict; GET and PUT on UDP 7370, replies to the client's port 7371.
    # First it moves the value of the offloaded key onto the switch (DataMvToSwitch).
    key, slot, deadline = sys.argv[1].encode(), int(sys.argv[2]), time.monotonic() + float(sys.argv[3])
    store = {key: b"v0-" + bytes(61), b"other": b"o0-" + bytes(61)}
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", 7370)); s.settimeout(0.2)
    mv = struct.pack("!BBBBIHHBBH", 18, 0, 0, KF, 0, slot, 0, 64, 0, 0) + bytes(KF) + store[key]
    done = False
    while not done and time.monotonic() < deadline:
        s.sendto(mv, ("10.0.0.1", 7370))
        try:
            b, peer = s.recvfrom(2048)
            done = parse(b)["op"] == 18 and parse(b)["flags"] & 2
        except socket.timeout:
            pass
    print("READY" if done else "NOMOVE", flush=True)
    served = 0
    while time.monotonic() < deadline:
        try:
            b, peer = s.recvfrom(2048)
        except socket.timeout:
            continue
        m = parse(b)
        if m["op"] == 1 and m["key"] == b"__stop__":
            print(json.dumps({"served": served}), flush=True)
            break
        if m["op"] == 1:
            served += 1
            s.sendto(msg(2, m["key"], store.get(m["key"], bytes(64)), m["seq"]), (peer[0], 7371))
        elif m["op"] == 3:
            store[m["key"]] = m["value"]
            s.sendto(msg(4, m["key"], m["value"], m["seq"]), (peer[0], 7371))
''')

CLIENT = HOST_LIB + textwrap.dedent('''
    key = sys.argv[1].encode()
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", 7371)); s.settimeout(1.0)
    out, seq = [], 0
    def ask(op, k, v=b""):
        global seq
        seq += 1
        for _ in range(5):
            s.sendto(msg(op, k, v, seq), ("10.0.0.2", 7370))
            try:
                while True:
                    b, peer = s.recvfrom(2048)
                    m = parse(b)
                    if m["seq"] == seq:
                        return {"op": m["op"], "hit": bool(m["flags"] & 1), "value": m["value"].hex(), "from": peer[0]}
            except socket.timeout:
                continue
        return None
    out.append(ask(1, key))
    out.append(ask(1, b"other"))
    out.append(ask(3, key, b"v1-" + bytes(61)))
    out.append(ask(1, key))
    out.append(ask(1, key))
    s.sendto(msg(1, b"__stop__"), ("10.0.0.2", 7370))
    print(json.dumps(out), flush=True)
''')


def test_kv_offload_end_to_end_with_real_processes():
    from inswitch.p4rt import SwitchClient
    from inswitch.topology import Rack, netns

    rack = Rack()
    name = f"hare{process_tag()}"
    import socket

    def free() -> int:
        with socket.socket() as so:
            so.bind(("127.0.0.1", 0))
            return so.getsockname()[1]

    server = None
    try:
        st = rack.up(2, name=name, programs="forward,hare", p4runtime=f"127.0.0.1:{free()}", metrics=f"127.0.0.1:{free()}")
        h1, h2 = st.hosts[0], st.hosts[1]
        key = "/data/iot/owner=alice/device=thermostat-7/site=hangzhou/measure=temp/range=2024-01"
        emat = _native.HareEmat(128, 8192)
        slot = 0
        with SwitchClient(st.switch.p4runtime) as c:
            c.insert_entry("control_ports", {"ig_intr_md.ingress_port": h2.port}, "allow_control")
            cpu = lambda op, status: _native.hare_frame(kvsim.CPU, kvsim.server_ep(0), op, b"", 0, b"", 0, slot, 0, status, 0)  # noqa: E731
            c.packet_out(cpu(kvsim.OP_STATE_SET, kvsim.STATE_REPLACING))  # Step 4
            for mat, write, first, seg, index in emat.insert(key.encode(), slot):  # Step 5, M-modifier
                fields = ("hdr.hare.key_len", "hdr.hare.key_seg1") if mat == 0 else ("meta.emat_index", f"hdr.hare.key_seg{mat + 1}")
                c.insert_entry(f"emat_{mat + 1}", {fields[0]: int.from_bytes(first, "big"), fields[1]: int.from_bytes(seg, "big")}, "set_index", {"index": index})
            # Step 5, D-modifier: the server process moves the value in with a packet.
            server = subprocess.Popen(netns.netns_argv(h2.netns, [sys.executable, "-c", SERVER, key, str(slot), "20"]), stdout=subprocess.PIPE, text=True)
            assert server.stdout is not None
            assert server.stdout.readline().strip() == "READY"
            c.packet_out(cpu(kvsim.OP_STATE_SET, kvsim.STATE_VALID))  # Step 6
            pins = c.packet_ins(timeout=2.0)
            assert pins, "the switch answers control packets from the CPU port"
            time.sleep(0.2)
            r = subprocess.run(netns.netns_argv(h1.netns, [sys.executable, "-c", CLIENT, key]), capture_output=True, text=True, timeout=30)
            assert r.returncode == 0, r.stderr
            got = json.loads(r.stdout.strip().splitlines()[-1])
            stats = json.loads(server.stdout.readline())
        server.wait(timeout=10)
        v0, v1 = (b"v0-" + bytes(61)).hex(), (b"v1-" + bytes(61)).hex()
        assert got[0] == {"op": 2, "hit": True, "value": v0, "from": "10.0.0.2"}, got[0]  # answered by the switch
        assert got[1]["hit"] is False and got[1]["value"] == (b"o0-" + bytes(61)).hex()  # a miss, from the server
        assert got[2]["op"] == 4  # PUT written through
        assert got[3] == {"op": 2, "hit": True, "value": v1, "from": "10.0.0.2"}  # no stale read
        assert got[4]["hit"] is True
        assert stats["served"] == 1, "only the miss reached the server"
    finally:
        if server is not None and server.poll() is None:
            server.kill()
            server.wait()
        rack.down(name)
        assert not netns.leftovers(f"{name}-")
