"""Issue 22 §4: where the switch listens, P4Runtime over TLS with client certificates, and a
Write whose error report a default gRPC client could not read."""

from __future__ import annotations

import inspect
import ipaddress
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import pytest

from inswitch.topology.state import process_tag

PY = sys.executable


def is_loopback(addr: str) -> bool:
    """Whether HOST:PORT names a loopback address (a v4-mapped IPv6 one included: gRPC listens
    on 127.0.0.1 through an IPv6 socket)."""
    host = addr.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    ip = ipaddress.ip_address(host)
    mapped = getattr(ip, "ipv4_mapped", None)
    return bool((mapped or ip).is_loopback)


# ---- loopback unless told otherwise ---------------------------------------------------------


def listening_tcp(netns: str) -> list[str]:
    """LOCAL:PORT of every listening TCP socket in `netns`."""
    out = subprocess.run(["ip", "netns", "exec", netns, "ss", "-Hltn"], capture_output=True, text=True,
                         check=True).stdout
    return [line.split()[3] for line in out.splitlines() if line.strip()]


@pytest.mark.netns
def test_switch_with_default_addresses_listens_on_loopback_only(tmp_path: Path) -> None:
    """`inswitch switch` with no --p4runtime/--metrics, in a namespace of its own (so the
    default ports 9559 and 9100 are free whoever else runs a switch on this machine): every
    socket it listens on is a loopback one, and both services answer there."""
    if os.geteuid() != 0:
        pytest.skip("needs root for a network namespace")
    ns = f"sec{process_tag()}lo"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    proc = None
    try:
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
        # Another interface with an address, which a wildcard bind would also listen on.
        subprocess.run(["ip", "-n", ns, "link", "add", "d0", "type", "veth", "peer", "name", "d1"], check=True)
        subprocess.run(["ip", "-n", ns, "addr", "add", "192.0.2.1/24", "dev", "d0"], check=True)
        subprocess.run(["ip", "-n", ns, "link", "set", "d0", "up"], check=True)
        ready = tmp_path / "ready.json"
        proc = subprocess.Popen(["ip", "netns", "exec", ns, PY, "-m", "inswitch", "switch", "--ports", "memory:2",
                                 "--ready-file", str(ready)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read().decode() if proc.stdout else ""
            time.sleep(0.05)
        doc = json.loads(ready.read_text())
        assert doc["p4runtime"] == "127.0.0.1:9559" and doc["metrics"] == "127.0.0.1:9100"
        listening = listening_tcp(ns)
        assert sorted(int(a.rpartition(":")[2]) for a in listening) == [9100, 9559], listening
        assert all(is_loopback(a) for a in listening), listening
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
        subprocess.run(["ip", "netns", "del", ns], check=False)


def test_every_declared_listen_address_defaults_to_loopback() -> None:
    """Every place that has a default address for the switch's P4Runtime or /metrics (the CLI
    commands that start a switch, the rack, the server and our client) or the web view
    (`--listen`) names a loopback one."""
    import typer

    from inswitch.cli import app
    from inswitch.p4rt.client import SwitchClient
    from inswitch.switchd.server import SwitchServer
    from inswitch.topology.rack import Rack

    seen = []
    for cmd in typer.main.get_command(app).commands.values():
        subs = getattr(cmd, "commands", {cmd.name: cmd})
        for sub in subs.values():
            for p in sub.params:
                if any(o in ("--p4runtime", "--metrics", "--listen") for o in p.opts) and isinstance(p.default, str):
                    seen.append((f"{cmd.name} {sub.name} {p.opts[0]}", p.default))
    from inswitch.topology import rack as rack_mod

    for fn, arg in ((Rack.up, "p4runtime"), (Rack.up, "metrics"), (SwitchServer.__init__, "address"),
                    (SwitchClient.__init__, "address")):
        default = inspect.signature(fn).parameters[arg].default
        if default is None and fn is Rack.up:
            # Unset: the rack's usual address when free, else port 0 on the same host.
            default = {"p4runtime": rack_mod.DEFAULT_P4RUNTIME, "metrics": rack_mod.DEFAULT_METRICS}[arg]
            seen.append((f"Rack.up({arg}) when taken", rack_mod.default_or_free(default).rpartition(":")[0] + ":0"))
        seen.append((f"{fn.__qualname__}({arg})", default))
    assert len(seen) >= 8, seen
    for where, default in seen:
        assert default == "off" or is_loopback(default), f"{where} defaults to {default}"


# ---- P4Runtime over TLS with client certificates ---------------------------------------------


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


def make_cert(d: Path, name: str, ca: str | None, ext: str) -> None:
    """`name.key` + `name.pem` (EC P-256), signed by `ca` (self-signed when None)."""
    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", f"{name}.key"]
    if ca is None:
        openssl("req", "-x509", *key, "-out", f"{name}.pem", "-days", "1", "-subj", f"/CN={name}", cwd=d)
        return
    openssl("req", *key, "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
    (d / f"{name}.ext").write_text(ext + "\n")
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
            "-out", f"{name}.pem", "-days", "1", "-extfile", f"{name}.ext", cwd=d)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A throwaway CA, a server certificate for 127.0.0.1, a controller certificate from the
    CA, and a controller certificate from another CA (which the switch must not trust)."""
    d = tmp_path_factory.mktemp("pki")
    make_cert(d, "ca", None, "")
    make_cert(d, "server", "ca", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth")
    make_cert(d, "controller", "ca", "extendedKeyUsage=clientAuth")
    make_cert(d, "rogue-ca", None, "")
    make_cert(d, "rogue", "rogue-ca", "extendedKeyUsage=clientAuth")
    return d


def test_p4runtime_over_tls_requires_a_client_certificate(pki: Path, switchd_factory) -> None:  # type: ignore[no-untyped-def]
    """With --tls-cert/--tls-key/--tls-ca the switch serves P4Runtime only over TLS and only to
    clients whose certificate its CA signed: our client with one programs the switch; a client
    presenting no certificate, one from another CA, and a plaintext client are all refused."""
    import grpc
    from p4.v1 import p4runtime_pb2, p4runtime_pb2_grpc

    from inswitch.p4rt import SwitchClient

    sw = switchd_factory("--program", "forward", "--ports", "memory:2", "--tls-cert", str(pki / "server.pem"),
                         "--tls-key", str(pki / "server.key"), "--tls-ca", str(pki / "ca.pem"))
    tls = {"tls_ca": str(pki / "ca.pem")}
    with SwitchClient(sw.p4runtime, timeout=10, tls_cert=str(pki / "controller.pem"),
                      tls_key=str(pki / "controller.key"), **tls) as c:
        assert c.is_primary
        c.set_pipeline(["forward"])
        c.insert_entry("l2_dmac", {"dst_addr": "02:00:00:00:00:02"}, "l2_forward", {"port": 1})
        assert [e["params"] for e in c.read_entries("l2_dmac")] == [{"port": 1}]
    for who, kw in (("no certificate", tls),
                    ("a certificate from another CA", {**tls, "tls_cert": str(pki / "rogue.pem"), "tls_key": str(pki / "rogue.key")})):
        with pytest.raises(ConnectionError, match="TLS"):
            SwitchClient(sw.p4runtime, timeout=2, **kw)
    # Below our client: a bare gRPC call with no client certificate gets no answer at all.
    ca = (pki / "ca.pem").read_bytes()
    with grpc.secure_channel(sw.p4runtime, grpc.ssl_channel_credentials(root_certificates=ca)) as ch:
        with pytest.raises(grpc.RpcError) as e:
            p4runtime_pb2_grpc.P4RuntimeStub(ch).Capabilities(p4runtime_pb2.CapabilitiesRequest(), timeout=3)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    with grpc.insecure_channel(sw.p4runtime) as ch:
        with pytest.raises(grpc.RpcError) as e:
            p4runtime_pb2_grpc.P4RuntimeStub(ch).Capabilities(p4runtime_pb2.CapabilitiesRequest(), timeout=3)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE


def test_tls_options_come_together_and_must_be_readable(pki: Path, tmp_path: Path) -> None:
    """Half a TLS setup, or a file that is not there, is a one-line usage error (status 2)."""
    for extra, words in (
        (["--tls-cert", str(pki / "server.pem")], "--tls-cert, --tls-key and --tls-ca"),
        (["--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key"),
          "--tls-ca", str(tmp_path / "missing.pem")], "--tls-ca"),
    ):
        cp = subprocess.run([PY, "-m", "inswitch", "switch", "--ports", "memory:1", "--p4runtime", "127.0.0.1:0",
                             "--metrics", "off", *extra], capture_output=True, text=True, timeout=30)
        assert cp.returncode == 2, cp.stdout + cp.stderr
        assert words in cp.stderr and "Traceback" not in cp.stderr and len(cp.stderr.strip().splitlines()) == 1, cp.stderr


def test_plaintext_p4runtime_off_loopback_is_warned_about(switchd_factory) -> None:  # type: ignore[no-untyped-def]
    """Told to listen beyond loopback without TLS, the switch says so: anyone who reaches the
    port can program it."""
    sw = switchd_factory("--program", "forward", "--ports", "memory:1", "--p4runtime", "0.0.0.0:0")
    log = sw.log.read_text()
    assert "warning" in log and "without TLS" in log and "0.0.0.0" in log, log


# ---- a Write whose error report a default client could not read ------------------------------


def _varint(n: int) -> bytes:
    out = b""
    while n >= 0x80:
        out += bytes([(n & 0x7F) | 0x80])
        n >>= 7
    return out + bytes([n])


def raw_write(address: str, updates: list[bytes], timeout: float = 60) -> grpc.RpcError | None:
    """One Write from a default gRPC client (no channel options and no headers: gRPC's own
    metadata limits, as p4runtime-shell and most controllers run). The request is built from
    the serialized updates (a repeated field, number 4, is its elements back to back)."""
    from p4.v1 import p4runtime_pb2

    head = p4runtime_pb2.WriteRequest(device_id=1, election_id=p4runtime_pb2.Uint128(high=0, low=1))
    body = head.SerializeToString() + b"".join(b"\x22" + _varint(len(u)) + u for u in updates)
    with grpc.insecure_channel(address) as ch:
        write = ch.unary_unary("/p4.v1.P4Runtime/Write", request_serializer=bytes,
                               response_deserializer=p4runtime_pb2.WriteResponse.FromString)
        try:
            write(body, timeout=timeout)
        except grpc.RpcError as e:
            return e
    return None


def reported_codes(e: grpc.RpcError) -> list[int]:
    """The canonical code of every item in the per-update error report (0 = applied)."""
    from google.rpc import status_pb2
    from p4.v1 import p4runtime_pb2

    for key, value in e.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            st = status_pb2.Status.FromString(value)
            codes = []
            for any_ in st.details:
                p4e = p4runtime_pb2.Error()
                any_.Unpack(p4e)
                codes.append(p4e.canonical_code)
            return codes
    raise AssertionError(f"no error report: {e.code()} {e.details()}")


def inserts(c: Any, n: int) -> list[bytes]:
    """Serialized INSERTs of l2_dmac entries for MACs 0x100 .. 0x100+n-1 (all two bytes
    long in canonical form), made from one template by replacing the value bytes: building
    10,000 protobuf messages costs seconds in pure-Python protobuf."""
    from p4.v1 import p4runtime_pb2

    assert n <= 0xFF00
    tpl = c.table_update(p4runtime_pb2.Update.INSERT, "l2_dmac", {"dst_addr": 0xAABB}, "l2_forward", {"port": 1})
    head, tail = tpl.SerializeToString().split(b"\xaa\xbb")
    return [head + (0x100 + i).to_bytes(2, "big") + tail for i in range(n)]


def test_a_default_client_always_learns_what_a_big_write_did(switchd_factory) -> None:  # type: ignore[no-untyped-def]
    """10,000 inserts into a 4,096-entry table, 100 of them duplicates of entries already
    there. A default gRPC client must learn what was applied and what failed: the switch
    refuses, before applying any, a Write whose error report could exceed the client's
    metadata limit, and says so; a Write at the largest size it accepts gets its whole
    report every time (gRPC drops reports between 8 and 16 KB at random); our client, which
    declares a larger limit, gets the report of all 10,000."""
    from p4.v1 import p4runtime_pb2

    from inswitch.p4rt import P4RuntimeError, SwitchClient

    sw = switchd_factory("--program", "forward", "--ports", "memory:2")
    with SwitchClient(sw.p4runtime, timeout=120) as c:
        c.set_pipeline(["forward"])
        size = next(t for t in c.p4info().tables if t.preamble.name.endswith("l2_dmac")).size
        ins = inserts(c, 10_000)
        assert raw_write(sw.p4runtime, ins[:100]) is None

        e = raw_write(sw.p4runtime, ins)
        assert e is not None
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, (e.code(), e.details())
        assert "none applied" in e.details() and "8192" in e.details() and "grpc.max_metadata_size" in e.details()
        limit = int(e.details().split("at most ")[1].split()[0])
        assert 100 <= limit < 10_000
        assert len(c.read_entries("l2_dmac")) == 100, "a refused Write applied something"

        # The largest accepted Write, every update failing: the whole report, every time.
        for _ in range(10):
            e = raw_write(sw.p4runtime, ins[:limit])
            assert e is not None and e.code() == grpc.StatusCode.UNKNOWN, (e and e.code(), e and e.details())
            codes = reported_codes(e)
            assert codes[:100] == [grpc.StatusCode.ALREADY_EXISTS.value[0]] * 100
            assert len(codes) == limit and all(code == 0 for code in codes[100:limit])
            c.write([c.table_update(p4runtime_pb2.Update.DELETE, "l2_dmac", {"dst_addr": 0x100 + i}) for i in range(100, limit)])
        e = raw_write(sw.p4runtime, ins[100: limit + 101])
        assert e is not None and e.code() == grpc.StatusCode.INVALID_ARGUMENT, "one more than the limit is refused"
        assert len(c.read_entries("l2_dmac")) == 100

    # Our client declares the larger limit it accepts, so a batch beyond the default limit
    # goes through and it learns exactly which updates failed: the 100 duplicates, and
    # whatever did not fit in the table (none here; 2,000 keep the test quick).
    with SwitchClient(sw.p4runtime, timeout=120) as c:
        n = 2000
        assert n > limit and n < size
        with pytest.raises(P4RuntimeError) as err:
            c.write([p4runtime_pb2.Update.FromString(u) for u in ins[:n]])
        assert err.value.rpc_code == grpc.StatusCode.UNKNOWN, err.value
        assert sorted(u.index for u in err.value.errors) == list(range(100))
        assert {u.code for u in err.value.errors} == {grpc.StatusCode.ALREADY_EXISTS}
        assert len(c.read_entries("l2_dmac")) == n
