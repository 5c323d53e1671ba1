"""The Wireshark dissectors (`inswitch wireshark`): frames built with the scapy layers go
through a switch that captures them (`--pcap`), and tshark with the Lua plugins shows each
header field by its paper name with the value the frame was built with."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from inswitch.commands import wireshark
from inswitch.scapy import inaas
from inswitch.scapy.daiet import Daiet, FixedPair, VarPair
from inswitch.scapy.hare import Hare
from inswitch.scapy.netsha import Netsha, NetshaAnswer, NetshaQuery
from inswitch.scapy.switchagg import Pair, SwitchAgg

from conftest import free_udp_ports, start_switch

pytestmark = pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark not installed")

E = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")


def ip(tos: int = 0) -> IP:
    return IP(src="10.0.0.1", dst="10.0.0.2", tos=tos)


# (frame, lines tshark -V must show in the protocol's subtree): the values the frame was
# built with, under the papers' field names.
CASES = [
    (E / ip() / UDP(sport=40000, dport=7070) / Daiet(tree_id=3, flags=0x11, op=2, sender=5, epoch=1, seq=77,
                                                     pairs=[FixedPair(key=b"hello", value=42), FixedPair(key=b"world", value=7)]),
     "DAIET", ["Tree ID: 3", "END: True", "FROM_SWITCH: True", "ACK: False", "Aggregation function: MAX (2)", "Sender: 5",
               "Epoch: 1", "Sequence number: 77", "Number of pairs: 2", "Key: hello", "Value: 42", "Key: world", "Value: 7"]),
    (E / ip() / UDP(sport=40000, dport=7070) / Daiet(tree_id=4, flags=0x08, seq=1, pairs=[VarPair(key=b"a-rather-long-key-of-24b", value=123456)]),
     "DAIET", ["Tree ID: 4", "VARLEN: True", "Number of pairs: 1", "Key length: 24", "Key: a-rather-long-key-of-24b", "Value: 123456"]),
    (E / ip() / UDP(sport=40000, dport=7071) / SwitchAgg(flags=1, tree_id=9, op=1, child_id=4, seq=12,
                                                         pairs=[Pair(key=b"abc", value=1000), Pair(key=b"xy", value=5)]),
     "SwitchAgg", ["Type: Aggregation (1)", "EoT: True", "TreeID: 9", "Operation: MIN (1)", "Child: 4", "Sequence number: 12",
                   "Number of Pairs: 2", "KeyLength: 3", "ValueLength: 4", "Key: abc", "Value: 1000", "KeyLength: 2", "Key: xy", "Value: 5"]),
    (E / ip() / UDP(sport=40000, dport=7370) / Hare(op=2, flags=1, key_field=8, key=b"k1" + bytes(6), seq=99, hit_index=17, status=3, value=b"vv"),
     "Hare", ["Op: GET_REPLY (2)", "HIT (answered by the switch): True", "Key length: 2", "Key field width: 8",
              "Sequence number: 99", "Hit index: 17", "Status: 3", "Value length: 2", "Key: k1", "Value: 7676"]),
    (E / ip(tos=1) / UDP(sport=40000, dport=7001) / Netsha(queries=[NetshaQuery(qid=5, pairs=[NetshaAnswer(id=11, distance=0.25), NetshaAnswer(id=12, distance=1.5)]),
                                                                 NetshaQuery(qid=6, pairs=[NetshaAnswer(id=99, distance=2.0)])]),
     "NetSHa", ["Query #: 2", "Query ID: 5", "NUM: 2", "Data ID: 11", "Distance: 0.25", "Data ID: 12", "Distance: 1.5",
                "Query ID: 6", "NUM: 1", "Data ID: 99", "Distance: 2"]),
    (inaas.frame("02:00:00:00:00:01", "02:00:00:00:00:02", [(3, 100, -5), (4, 200, 6)], op=8, uid=7, seq=8, timestamp=1000,
                 time_limit=5000, valid=3, read=1, write=3),
     "INaaS", ["Operator: MAX (8)", "Sequence number: 8", "timestamp (us): 1000", "T (time limit, us): 5000", "uid: 7",
               "valid bitmap: 0x000003", "write bitmap: 0x000003", "idx: 3", "key: 100", "value: -5", "idx: 4", "key: 200", "value: 6"]),
]


def _subtrees(verbose: str) -> list[tuple[str, list[str]]]:
    """tshark -V output split into its top-level subtrees: (title, stripped lines)."""
    out: list[tuple[str, list[str]]] = []
    for line in verbose.splitlines():
        if not line.strip():
            continue
        if not line.startswith(" "):
            out.append((line.strip(), []))
        elif out:
            out[-1][1].append(line.strip())
    return out


def test_tshark_shows_each_protocol_by_its_paper_field_names(tmp_path: Path) -> None:
    base = free_udp_ports(2)
    pcap = tmp_path / "pcap"
    sw = start_switch(tmp_path / "sw", "--program", "forward", "--ports", f"udp:{base}:2", "--pcap", str(pcap))
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for frame, _, _ in CASES:
                s.sendto(bytes(frame), ("127.0.0.1", base))
                time.sleep(0.01)  # keep capture order equal to CASES order
        time.sleep(0.2)
    finally:
        assert sw.stop() == 0
    cap = pcap / "port0.pcapng"

    # Without the dissectors, DAIET's port is taken for something else (not DAIET).
    plain = subprocess.run(["tshark", "-r", str(cap), "-V"], capture_output=True, text=True, timeout=60, check=True).stdout
    assert "Tree ID: 3" not in plain

    # Installed into a plugin folder (what `inswitch wireshark install` does), loaded by file.
    files = wireshark.install(tmp_path / "plugins")
    assert sorted(p.name for p in files) == [f"inswitch-{n}.lua" for n in ("daiet", "hare", "inaas", "netsha", "switchagg")]
    v = subprocess.run(["tshark", *wireshark.tshark_args(files), "-r", str(cap), "-V"],
                       capture_output=True, text=True, timeout=60, check=True).stdout
    frames: list[dict[str, list[str]]] = []
    for title, body in _subtrees(v):
        if title.startswith("Frame "):
            frames.append({})
        frames[-1][title] = body
    assert len(frames) == len(CASES), v
    for i, ((_, proto, lines), trees) in enumerate(zip(CASES, frames), start=1):
        assert proto in trees, f"frame {i}: no {proto} subtree in {list(trees)}"
        got = trees[proto]
        # Bit fields print as ".... ...1 = END: True".
        missing = [want for want in lines if not any(g == want or g.endswith(f"= {want}") for g in got)]
        assert not missing, f"frame {i} ({proto}): missing {missing} in\n" + "\n".join(got)


@pytest.mark.netns
@pytest.mark.skipif(__import__("os").geteuid() != 0, reason="needs root: the wordcount rack")
def test_wordcount_pcap_capture_shows_daiet_by_tree(tmp_path: Path) -> None:
    """`inswitch wordcount --pcap DIR` passes the capture to its rack; the mappers' DAIET
    packets dissect with the tree the reducer uses, and none carries more pairs than a
    packet holds (10)."""
    import sys

    pcap, js = tmp_path / "cap", tmp_path / "wc.json"
    p = subprocess.run([sys.executable, "-m", "inswitch", "wordcount", "--zipf", "1", "--words", "2000", "--vocab", "200",
                        "--mappers", "2", "--reducers", "1", "--mode", "switch", "--pcap", str(pcap), "--json", str(js)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert sorted(f.name for f in pcap.glob("*.pcapng")) == ["port0.pcapng", "port1.pcapng", "port2.pcapng"]

    def daiet(port: int, direction: int) -> list[tuple[int, int, int]]:
        """(tree ID, number of pairs, flags) of the DAIET frames a port captured in one
        direction (frame.p2p_dir 1: into the switch, 0: out of it)."""
        out = subprocess.run(["tshark", *wireshark.tshark_args(), "-r", str(pcap / f"port{port}.pcapng"), "-Y", f"daiet && frame.p2p_dir == {direction}",
                              "-T", "fields", "-e", "daiet.tree_id", "-e", "daiet.num_entries", "-e", "daiet.flags"],
                             capture_output=True, text=True, timeout=60, check=True).stdout
        return [(int(a), int(b), int(c, 16)) for a, b, c in (line.split("\t") for line in out.splitlines() if line.strip())]

    BYPASS, ACK, END = 0x04, 0x02, 0x01
    sent = daiet(0, 1) + daiet(1, 1)  # the mappers' packets, into the switch
    # The in-network run's tree: the one whose packets do not bypass the switch.
    trees = {t for t, _, f in sent if not f & (BYPASS | ACK)}
    assert len(trees) == 1, sent
    tree = trees.pop()
    assert all(n <= 10 for _, n, _ in sent)  # at most 10 fixed pairs per packet
    assert sum(1 for t, _, f in sent if t == tree and f & END) == 2  # both mappers ended their stream
    pairs_in = sum(n for t, n, f in sent if t == tree and not f & (BYPASS | ACK))
    pairs_out = sum(n for t, n, f in daiet(2, 0) if t == tree and not f & ACK)  # to the reducer
    # 2 mappers over 200 words: the switch sums each word's pairs, the reducer gets far fewer.
    assert 0 < pairs_out < pairs_in, (pairs_out, pairs_in)


def test_install_puts_the_dissectors_where_tshark_loads_them(tmp_path: Path) -> None:
    """`inswitch wireshark install` (no --dir) writes into ~/.local/lib/wireshark/plugins,
    and a plain `tshark -V` (no -X) then dissects DAIET."""
    import os
    import sys

    from scapy.utils import wrpcapng

    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home)}
    p = subprocess.run([sys.executable, "-m", "inswitch", "wireshark", "install"], capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 0, p.stderr
    plugins = home / ".local" / "lib" / "wireshark" / "plugins"
    assert len(list(plugins.glob("inswitch-*.lua"))) == 5, p.stdout
    cap = tmp_path / "one.pcapng"
    frame, _, lines = CASES[0]
    wrpcapng(str(cap), [frame])
    v = subprocess.run(["tshark", "-r", str(cap), "-V"], capture_output=True, text=True, timeout=60, env=env, check=True).stdout
    got = dict(_subtrees(v)).get("DAIET", [])
    assert "Tree ID: 3" in got and "Number of pairs: 2" in got, v


def test_kvs_pcap_captures_the_simulated_switch(tmp_path: Path) -> None:
    """`inswitch kvs --pcap DIR`: the in-process switch's ports in DIR/hare/port{N}.pcapng;
    every GET of the trace enters port 0 (the clients) and tshark shows Hare's fields."""
    import json
    import sys

    pcap, js = tmp_path / "cap", tmp_path / "kvs.json"
    p = subprocess.run([sys.executable, "-m", "inswitch", "kvs", "--system", "hare", "--keys", "300", "--duration", "0.3", "--cache", "32",
                        "--no-rates", "--pcap", str(pcap), "--json", str(js)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads(js.read_text())
    queries, offloads = doc["config"]["queries"], doc["systems"]["hare"]["offloads"]

    def hare(port: str, direction: int) -> list[tuple[int, int]]:
        out = subprocess.run(["tshark", *wireshark.tshark_args(), "-r", str(pcap / "hare" / f"{port}.pcapng"), "-Y", f"hare && frame.p2p_dir == {direction}",
                              "-T", "fields", "-e", "hare.op", "-e", "hare.flags"], capture_output=True, text=True, timeout=60, check=True).stdout
        return [(int(a), int(b, 16)) for a, b in (line.split("\t") for line in out.splitlines() if line.strip())]

    gets_in = [x for x in hare("port0", 1) if x[0] == 1]
    assert len(gets_in) == queries  # no PUTs in this trace: every query is a GET from the clients' port
    switch_hits = [x for x in hare("port0", 0) if x[0] == 2 and x[1] & 0x01]
    assert offloads > 0 and 0 < len(switch_hits) < queries  # replies the switch answered itself
    assert hare("cpu", 1)  # the control plane's packets (OO-Stat, state manager, data movement)
