"""SwitchAgg from Python: in-memory jobs through the `switchagg` program compared with a
Counter, under faults too; the experiments' quick modes; the resource report."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from inswitch import _native
from inswitch.experiments import switchagg as exp

TEXT = """
It is a truth universally acknowledged, that a single man in possession of a good fortune,
must be in want of a wife. Es war einmal ein König, der hatte drei Töchter; 東京は日本の首都です。
Антон Павлович Чехов писал рассказы. supercalifragilisticexpialidocious-and-then-some-more-letters-to-pass-sixty-four-bytes
""" * 40


def as_arrays(words: list[bytes]) -> tuple[bytes, bytes, bytes]:
    off = np.zeros(len(words) + 1, dtype=np.uint64)
    off[1:] = np.cumsum([len(w) for w in words])
    return b"".join(words), off.tobytes(), np.ones(len(words), dtype=np.uint32).tobytes()


def result_of(r: dict) -> collections.Counter:
    keys, off = r["result_keys"], np.frombuffer(r["result_offsets"], dtype=np.uint64)
    vals = np.frombuffer(r["result_values"], dtype=np.uint32)
    return collections.Counter({keys[int(off[i]) : int(off[i + 1])]: int(vals[i]) for i in range(len(vals))})


def test_wordcount_of_real_text_equals_a_counter() -> None:
    words = [w.encode() for w in TEXT.split()]
    assert any(len(w) > 64 for w in words), "a key longer than every engine's slots"
    r = _native.switchagg_run(*as_arrays(words), mappers=3, trees=2, fpe_bytes=2 << 10, bpe_bytes=4 << 10)
    assert r["complete"] and r["reducer_seq_errors"] == 0
    assert result_of(r) == collections.Counter(words)
    assert r["fpe_evictions"] > 0, "tiny engines: collisions happen"
    assert 0 < r["reduction_ratio"] < 1
    # Every pair costs its FPE two cycles: the busiest engine sees at least len/8 of them.
    assert r["engine_cycles"] >= 2 * len(words) // 8


@pytest.mark.parametrize("topology", ["single", "two-level", "chain"])
def test_zipf_keys_under_loss_duplication_reordering(topology: str) -> None:
    table = exp.key_table(3000, (4, 70))
    ids = exp.sample(3000, 20000, 0.99, seed=4)
    keys, offs = exp.gather(table, ids)
    vals = np.ones(len(ids), dtype=np.uint32).tobytes()
    r = _native.switchagg_run(keys, offs, vals, mappers=4, trees=2, fpe_bytes=8 << 10, bpe_bytes=32 << 10, topology=topology, hops=2, tors=2, loss=0.05, duplicate=0.05, reorder=0.05, seed=9)
    assert r["complete"]
    assert r["faults"]["lost"] > 0 and r["faults"]["duplicated"] > 0 and r["faults"]["reordered"] > 0
    assert r["retransmissions"] > 0
    counts = np.bincount(ids, minlength=3000)
    assert exp._result_equals(r, table, counts)


def test_bad_arguments_are_value_errors() -> None:
    with pytest.raises(ValueError):
        _native.switchagg_run(b"ab", np.array([0, 2], dtype=np.uint64).tobytes(), b"\x01\x00", mappers=1)
    with pytest.raises(ValueError):
        _native.switchagg_run(b"ab", np.array([0, 3], dtype=np.uint64).tobytes(), np.ones(1, dtype=np.uint32).tobytes())
    with pytest.raises(ValueError):
        _native.switchagg_run(b"ab", np.array([0, 2], dtype=np.uint64).tobytes(), np.ones(1, dtype=np.uint32).tobytes(), op="avg")


def test_fig2_quick(tmp_path: Path) -> None:
    r = exp.run_fig2(True, lambda s: None)
    assert r["all_correct"]
    assert r["reduction_fits"] > 0.8, "the paper: > 80 % when the memory holds every key"
    assert r["reduction_10x_memory"] < 0.1, "the paper: < 10 % at ten times the memory"
    # Formula (3) assumes a perfect cache of C pairs; a hash table of buckets is within 0.1.
    assert r["max_abs_gap_to_formula3"] < 0.1
    assert r["hops_uniform_spread"] < 0.02, "Theorem 2.2: uniform data gains nothing from more hops"
    exp.plot_fig2(r, tmp_path / "fig2.png")
    assert (tmp_path / "fig2.png").stat().st_size > 0


def test_fig9_quick(tmp_path: Path) -> None:
    r = exp.run_fig9(True, lambda s: None)
    assert r["all_correct"]
    assert r["uniform_single_level_max"] < 0.1
    assert r["zipf_multi_level_max"] > r["uniform_largest_fpe"], "the BPE and skew raise the reduction"
    zipf = r["series"]["zipf0.99"]
    single = max(x["reduction_ratio"] for k, v in zipf.items() if k.startswith("S-") for x in v)
    assert r["zipf_multi_level_max"] > single
    exp.plot_fig9(r, tmp_path / "fig9.png")


def test_table2_quick(tmp_path: Path) -> None:
    r = exp.run_table2(True, lambda s: None)
    assert r["all_correct"]
    assert r["max_full_ratio"] < 0.01, "paper's key lengths at line rate: the engines keep up"
    for row in r["loads"]:
        assert row["processed_gbps"] > 0.95 * row["offered_gbps"]
    assert r["stress_short_keys"]["full_ratio"] > 0.5, "one group of 8-byte keys at 30 Gbit/s overruns its FPE"
    assert r["software_pairs_per_s"] > 1e5
    exp.plot_table2(r, tmp_path / "table2.png")


def test_experiment_cli_writes_json_and_png(tmp_path: Path) -> None:
    cp = subprocess.run([sys.executable, "-m", "inswitch", "experiment", "switchagg-fig9", "--quick", "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, cp.stderr
    r = json.loads((tmp_path / "switchagg-fig9.json").read_text())
    assert r["quick"] and r["all_correct"]
    assert (tmp_path / "switchagg-fig9.png").exists()


def test_resources_tell_the_truth() -> None:
    from inswitch import native

    fpga = native.resources(["forward", "switchagg"], "switchagg-fpga")
    assert fpga["fits"], fpga["problems"]
    assert fpga["target"]["clock_mhz"] == 200 and dict(fpga["target"]["cycle_costs"])["bpe_aggregate"] == 33
    tofino = native.resources(["forward", "switchagg"], "tofino1")
    assert not tofino["fits"]
    cp = subprocess.run([sys.executable, "-m", "inswitch", "resources", "switchagg", "--target", "switchagg-fpga"], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0 and "FITS switchagg-fpga" in cp.stdout


def test_scapy_layer_matches_the_wire_layout() -> None:
    from scapy.layers.inet import IP, UDP  # type: ignore[attr-defined]

    from inswitch.scapy.switchagg import Pair, SwitchAgg

    p = SwitchAgg(flags="EOT", tree_id=3, op="max", child_id=7, seq=0xDEADBEEF, pairs=[Pair(key=b"a", value=1), Pair(key=b"x" * 70, value=2)])
    raw = bytes(p)
    # Hand-laid bytes (crates/wire/src/switchagg.rs): type, flags, tree, op, rsvd, child, seq, n.
    head = bytes([1, 1, 0, 3, 2, 0, 0, 7, 0xDE, 0xAD, 0xBE, 0xEF, 0, 2])
    assert raw == head + bytes([1, 4]) + b"a" + (1).to_bytes(4, "big") + bytes([70, 4]) + b"x" * 70 + (2).to_bytes(4, "big")
    back = IP(bytes(IP(dst="10.0.0.2") / UDP(sport=40000, dport=7071) / raw))
    s = back[SwitchAgg]
    assert s.num_pairs == 2 and [x.key for x in s.pairs] == [b"a", b"x" * 70] and s.seq == 0xDEADBEEF


def test_p4runtime_configuration_and_exactly_once_through_switchd(switchd_factory) -> None:  # type: ignore[no-untyped-def]
    """A real `inswitch switch` running forward+switchagg, configured over P4Runtime by the
    controller helper; aggregation packets come in as PacketOuts (ingress port = CPU)."""
    import time

    from scapy.layers.inet import IP, UDP  # type: ignore[attr-defined]
    from scapy.layers.l2 import Ether  # type: ignore[attr-defined]

    from inswitch.apps.switchagg.controller import Tree, configure
    from inswitch.p4rt import SwitchClient
    from inswitch.scapy.switchagg import Pair, SwitchAgg

    sw = switchd_factory("--program", "forward,switchagg", "--ports", "memory:4")
    with SwitchClient(sw.p4runtime) as c:
        configure(c, [Tree(tree_id=5, parent_port=1, children=1, op="sum")], child_ports=[0, 2])
        assert len(c.read_entries("switchagg.tree_config")) == 1

        def pkt(seq: int, eot: bool, pairs: list[tuple[bytes, int]]) -> bytes:
            agg = SwitchAgg(flags="EOT" if eot else 0, tree_id=5, child_id=0, seq=seq, pairs=[Pair(key=k, value=v) for k, v in pairs])
            return bytes(Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01") / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=40000, dport=7071) / agg)

        def acks(n: int) -> list[int]:
            got: list[int] = []
            deadline = time.monotonic() + 5
            while len(got) < n and time.monotonic() < deadline:
                for f, _ in c.packet_ins(timeout=0.5):
                    a = Ether(f)[SwitchAgg]
                    assert a.flags.ACK and a.child_id == 0 and a.num_pairs == 0
                    got.append(a.seq)
            return got

        # Absorbed: the packet comes back to its sender (the CPU) as the ACK; again when repeated.
        c.packet_out(pkt(0, False, [(b"hello", 1), (b"world", 2)]))
        assert acks(1) == [0]
        c.packet_out(pkt(0, False, [(b"hello", 1), (b"world", 2)]))
        assert acks(1) == [0]
        assert dict(c.read_register("switchagg.expected_seq", 0))[0] == 1, "the duplicate was not aggregated again"
        c.packet_out(pkt(3, False, [(b"x", 1)]))  # a gap: dropped, nothing comes back
        assert acks(1) == []
        # The last child's EoT: the tree flushes to port 1 (its parent) by recirculation.
        c.write_register("tx_port_counters", 1, 0)
        c.packet_out(pkt(1, True, [(b"hello", 5)]))
        # The default engines hold 2M bucket words: wait until the flush has walked them all
        # (up_seq, the packets sent up, stops moving).
        deadline, last, still = time.monotonic() + 60, -1, 0
        while time.monotonic() < deadline and still < 3:
            time.sleep(0.2)
            now = dict(c.read_register("switchagg.up_seq", 0))[0]
            still = still + 1 if now == last and now > 0 else 0
            last = now
        sent = last
        assert sent >= 1, "flush packets went up"
        tx = dict(c.read_register("tx_port_counters", 1))[1] & 0xFFFFFFFF
        assert tx == sent, "every flush packet left by the parent port"
