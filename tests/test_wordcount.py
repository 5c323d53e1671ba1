"""MapReduce WordCount: the reducers' counts equal a Counter over the same input, for real
text, Zipf and uniform keys, long keys, in tcp, udp and switch modes, and under loss on the
switch's ports. Jobs run real mapper and reducer processes (on loopback, or in a rack of
network namespaces around the switch when root); racks are named `wc<pid>1`..`wc<pid>6` and always
taken down."""

from __future__ import annotations

import json
import os
import random
import struct
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from inswitch.apps.wordcount import job as job_mod
from inswitch.apps.wordcount import words
from inswitch.apps.wordcount.job import JobError, JobSpec, run
from inswitch.apps.wordcount import transport, worker
from inswitch.apps.wordcount.transport import Pairs

ROOT = os.geteuid() == 0
DATA = Path(__file__).parent / "data" / "wordcount"
TEXT = DATA / "multilingual.txt"
netns = pytest.mark.netns
needs_root = pytest.mark.skipif(not ROOT, reason="needs root: a rack of network namespaces")


def _switch_ready() -> str | None:
    return job_mod.switch_program_available("daiet")


needs_switch = pytest.mark.skipif(_switch_ready() is not None, reason=f"switch mode unavailable: {_switch_ready()}")


# ----- input, tokenisation, partitioning (no network) ------------------------------------

def test_tokenizer_keeps_words_whole_in_any_script() -> None:
    toks = words.tokenize("Don't stop: l’homme, नमस्ते दुनिया; café cafe\u0301 Word word 3.14 under_score 🙂")
    assert toks == ["Don't", "stop", "l’homme", "नमस्ते", "दुनिया", "café", "cafe\u0301", "Word", "word", "3", "14", "under_score"]


def _big_text(tmp_path: Path) -> Path:
    """A multi-chunk text mixing scripts, with words straddling every chunk boundary."""
    base = TEXT.read_text(encoding="utf-8")
    p = tmp_path / "big.txt"
    with open(p, "w", encoding="utf-8") as f:
        for i in range(40):
            f.write(base)
            f.write(f" run{i} " + "x" * (i % 37) + "\n")
    return p


@pytest.mark.parametrize("parts", [1, 2, 3, 7, 16])
def test_split_ranges_give_exactly_the_files_words(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parts: int) -> None:
    p = _big_text(tmp_path)
    monkeypatch.setattr(words, "CHUNK", 97)  # many chunk boundaries, inside UTF-8 sequences too
    whole = words.tokenize(p.read_text(encoding="utf-8"))
    shares = words.assign_files([str(p)], parts)
    got: list[str] = []
    for share in shares:
        for r in share:
            got.extend(words.iter_words_range(r.path, r.start, r.end))
    assert Counter(got) == Counter(whole)
    assert len(got) == len(whole)
    cuts = words.split_points(p, parts)
    raw = p.read_bytes()
    assert all(c == 0 or c == len(raw) or raw[c - 1:c].isspace() for c in cuts)


def test_invalid_utf8_and_no_whitespace_stretches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Latin-1 bytes, truncated UTF-8 and a long run without whitespace: the mappers' split
    reads still give exactly the words of the whole file (undecodable bytes are not words)."""
    monkeypatch.setattr(words, "CHUNK", 64)
    p = tmp_path / "mixed.txt"
    p.write_bytes((b"caf\xe9 na\xefve \xe2\x82 ok " + "слово ".encode() + b"x" * 300 + b" end\n") * 50)
    whole = words.tokenize(p.read_bytes().decode("utf-8", errors="replace"))
    assert "ok" in whole and "слово" in whole and "x" * 300 in whole
    for parts in (2, 5, 9):
        got = [w for share in words.assign_files([str(p)], parts) for r in share for w in words.iter_words_range(r.path, r.start, r.end)]
        assert Counter(got) == Counter(whole)


def test_zipf_streams_are_seeded_and_skewed() -> None:
    a = words.zipf_ranks(0.99, 50_000, 1000, seed=5, part=0)
    assert np.array_equal(a, words.zipf_ranks(0.99, 50_000, 1000, seed=5, part=0))
    assert not np.array_equal(a, words.zipf_ranks(0.99, 50_000, 1000, seed=5, part=1))
    c = np.bincount(a, minlength=1000)
    assert c[0] > 20 * c[500]  # rank 1 vs rank 501: about 500^0.99 in expectation
    u = np.bincount(words.zipf_ranks(0.0, 50_000, 1000, seed=5, part=0), minlength=1000)
    assert u.max() < 3 * u.mean()
    ref = words.count_zipf(0.99, 10_001, 300, seed=2, mappers=3)
    assert sum(ref.values()) == 10_001 and len(set(words.vocabulary(300, 2))) == 300


def test_a_jobs_rack_is_its_own() -> None:
    """The default rack name carries the runner's pid (base 36): the leftover clean-up before
    a run can only remove a crashed run's rack of this pid, never another job's."""
    from inswitch.topology.state import MAX_NAME_LEN, check_name, process_tag

    assert process_tag(0) == "0" and process_tag(35) == "z" and process_tag(36) == "10"
    assert process_tag(4_194_304) == "2hwcg" and len(process_tag(4_194_304)) == 5  # pid_max of 64-bit Linux
    assert process_tag() == process_tag(os.getpid())
    for prefix in ("wc", "wcx", "wcd", "demo"):
        name = f"{prefix}{process_tag(4_194_303)}"
        assert len(name) <= MAX_NAME_LEN
        check_name(name)
    assert JobSpec().rack == ""


def test_zipf_stream_in_chunks_is_the_same_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """The synthetic stream is drawn a chunk at a time (memory for one chunk, not for the
    whole input): the chunks concatenate to the stream drawn at once, for every cut."""
    for alpha in (0.0, 0.99):
        whole = words.zipf_ranks(alpha, 10_007, 777, seed=4, part=2)
        for chunk in (1, 333, 4096, 10_007, 50_000):
            got = np.concatenate(list(words.iter_zipf_ranks(alpha, 10_007, 777, seed=4, part=2, chunk=chunk)))
            assert np.array_equal(got, whole)
        counts = words.zipf_counts(alpha, 30_021, 777, seed=4, mappers=3, i=2)
        monkeypatch.setattr(words, "ZIPF_CHUNK", 1000)  # counted over 11 chunks: the same counts
        assert np.array_equal(words.zipf_counts(alpha, 30_021, 777, seed=4, mappers=3, i=2), counts)
        monkeypatch.undo()
        assert np.array_equal(counts, np.bincount(words.zipf_ranks(alpha, 10_007, 777, seed=4, part=2), minlength=777))
    assert len(words.zipf_ranks(1.0, 0, 10, seed=1, part=0)) == 0


def test_partition_is_stable_and_uses_every_reducer() -> None:
    keys = [w.encode() for w in words.vocabulary(2000, 1)]
    parts = [words.reducer_of(k, 5) for k in keys]
    assert parts == [words.reducer_of(k, 5) for k in keys]
    assert set(parts) == set(range(5))
    # Python's hash() is salted per process; ours must agree across processes.
    out = subprocess.run([sys.executable, "-c", "from inswitch.apps.wordcount.words import reducer_of; print(reducer_of('Русский'.encode(), 7))"],
                         capture_output=True, text=True, check=True).stdout
    assert int(out) == words.reducer_of("Русский".encode(), 7)


def test_values_above_u32_are_split_not_wrapped() -> None:
    p = Pairs.from_items([(b"a", 5), (b"big", (1 << 32) + 10)])
    assert p.values.dtype == np.uint32
    total: dict[bytes, int] = {}
    for k, v in p.items():
        total[k] = total.get(k, 0) + v
    assert total == {b"a": 5, b"big": (1 << 32) + 10}


def test_pairs_array_operations_equal_the_items(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pairs are taken, selected, joined and framed for TCP as arrays; each equals the same
    operation on a list of (key, value) tuples (keys gathered 7 at a time: many steps)."""
    from inswitch import keys as keyset

    monkeypatch.setattr(keyset, "GATHER_STEP", 7)
    rng = random.Random(7)
    items = [(bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40))), rng.randrange(1 << 32)) for _ in range(3000)]
    p = Pairs.from_items(items)
    assert p.items() == items
    idx = np.array([rng.randrange(len(items)) for _ in range(4000)])
    assert p.take(idx).items() == [items[i] for i in idx]
    mask = np.array([rng.random() < 0.3 for _ in items])
    assert p.select(mask).items() == [kv for kv, m in zip(items, mask) if m]
    assert Pairs.concat([p.take(idx[:5]), Pairs.empty(), p]).items() == [items[i] for i in idx[:5]] + items
    assert Pairs.of_keys([b"x", b"", b"yz"]).items() == [(b"x", 1), (b"", 1), (b"yz", 1)]
    framed = transport.tcp_encode(p)
    assert framed == b"".join(struct.pack("!I", len(k)) + k + struct.pack("!I", v) for k, v in items)
    assert transport.tcp_encode(Pairs.empty()) == b""
    # The reducer parses frames as they arrive: any cut of the stream gives the same sums.
    whole: dict[bytes, int] = {}
    for k, v in items:
        whole[k] = whole.get(k, 0) + v
    for _ in range(5):
        got: dict[bytes, int] = {}
        buf, n = bytearray(), 0
        cuts = sorted(rng.sample(range(1, len(framed)), 40))
        for a, b in zip([0] + cuts, cuts + [len(framed)]):
            buf += framed[a:b]
            used, k = transport.tcp_add_frames(buf, got)
            del buf[:used]
            n += k
        assert not buf and n == len(items) and got == whole


def test_map_without_combiner_packs_every_word(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a combiner the mapper packs (word, 1) per occurrence, a chunk at a time:
    every word of its share, in order, at its reducer, over many chunks."""
    monkeypatch.setattr(worker, "MAP_CHUNK", 7)
    monkeypatch.setattr(words, "ZIPF_CHUNK", 100)
    R = 3
    size = TEXT.stat().st_size
    text_spec = {"input": {"files": [[str(TEXT), 0, size]]}, "reducers": R, "combiner": False}
    want = [w.encode() for w in words.iter_words_range(TEXT)]
    zipf = {"alpha": 0.99, "words": 2001, "vocab": 50, "seed": 3, "mappers": 2}
    zipf_spec = {"input": {"zipf": zipf}, "reducers": R, "combiner": False, "mapper_id": 1}
    voc = words.vocabulary(50, 3)
    zipf_want = [voc[r].encode() for r in words.zipf_ranks(0.99, words.zipf_share(2001, 2, 1), 50, 3, 1)]
    for spec, expect in ((text_spec, want), (zipf_spec, zipf_want)):
        parts, nwords = worker._map_input(spec)
        assert nwords == len(expect) == sum(len(p) for p in parts)
        for r, p in enumerate(parts):
            assert p.items() == [(k, 1) for k in expect if words.reducer_of(k, R) == r]


# ----- whole jobs on loopback (no switch) --------------------------------------------------

def _check(doc: dict, modes: list[str]) -> None:
    assert set(doc["runs"]) == set(modes)
    for m in modes:
        r = doc["runs"][m]
        assert r["correct"], (m, r["wrong_examples"], r["misplaced_keys"])
        assert r["wrong_keys"] == 0 and r["misplaced_keys"] == 0
        assert r["keys"] == doc["distinct_words"]
        assert r["reducer_bytes"] > 0 and r["job_s"] > 0 and r["reducer_cpu_s"] >= 0
    assert doc["correct"] is True


def test_loopback_tcp_udp_real_text_with_long_keys() -> None:
    doc = run(JobSpec(inputs=[str(TEXT)], mappers=3, reducers=2, where="loopback", timeout_s=30), ["tcp", "udp"])
    _check(doc, ["tcp", "udp"])
    assert doc["long_keys"] >= 10  # > 16 bytes: they must arrive whole
    assert doc["where"] == "loopback"


def _oversized_text(tmp_path: Path) -> Path:
    """Words longer than a frame carries (70 kB, 2 kB: above DAIET's 1,380-byte keys; 1,350
    bytes: above SwitchAgg's 1,300 only) among ordinary ones, in every mapper's share."""
    p = tmp_path / "oversized.txt"
    huge, long_, mid = "h" * 70_000, "L" * 2_000, "m" * 1_350
    p.write_text(" ".join([huge, "the", long_, "cat", huge, mid, "sat"] * 4) + "\n" + TEXT.read_text(encoding="utf-8"), encoding="utf-8")
    return p


def test_words_longer_than_a_packet_take_the_side_channel(tmp_path: Path) -> None:
    """Never truncated, never a failed job: the words the protocol cannot carry go to their
    reducer over TCP, and the counts are exact."""
    text = _oversized_text(tmp_path)
    doc = run(JobSpec(inputs=[str(text)], mappers=2, reducers=2, where="loopback", timeout_s=60), ["tcp", "udp"])
    _check(doc, ["tcp", "udp"])
    assert doc["oversized_keys"] == 2  # the 1,350-byte word still fits a DAIET packet
    udp = doc["runs"]["udp"]
    assert udp["max_key_len"] == 1380 and udp["side_channel_pairs"] >= 2
    assert udp["side_channel_bytes"] >= 70_000 and udp["reducer_bytes"] > udp["side_channel_bytes"]
    assert "side_channel_pairs" in udp and "max_key_len" not in doc["runs"]["tcp"]
    assert any("side channel" in n for n in doc["notes"])
    doc = run(JobSpec(inputs=[str(text)], mappers=2, reducers=2, program="switchagg", where="loopback", timeout_s=60), ["udp"])
    _check(doc, ["udp"])
    assert doc["oversized_keys"] == 3 and doc["runs"]["udp"]["max_key_len"] == 1300


def test_no_side_channel_without_oversized_words() -> None:
    doc = run(JobSpec(inputs=[str(TEXT)], mappers=2, reducers=1, where="loopback", timeout_s=30), ["udp"])
    _check(doc, ["udp"])
    assert doc["oversized_keys"] == 0 and doc["runs"]["udp"]["side_channel_pairs"] == 0
    assert "max_key_len" not in doc["runs"]["udp"]


def test_loopback_without_combiner() -> None:
    """One (word, 1) pair per occurrence: the reducers do all the summing."""
    doc = run(JobSpec(zipf=0.99, words=6000, vocab=400, mappers=2, reducers=2, combiner=False, where="loopback",
                      timeout_s=30), ["tcp", "udp"])
    _check(doc, ["tcp", "udp"])
    assert doc["runs"]["tcp"]["mapper_pairs"] == 6000
    doc = run(JobSpec(inputs=[str(TEXT)], mappers=2, reducers=3, combiner=False, where="loopback", timeout_s=30), ["tcp", "udp"])
    _check(doc, ["tcp", "udp"])
    assert doc["runs"]["tcp"]["mapper_pairs"] == doc["words"]


def test_a_wrong_reducer_count_is_detected(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check can fail: a reducer that loses one count makes the job incorrect."""
    from inswitch.apps.wordcount import worker

    real = worker.load_result

    def lossy(path: str) -> dict[bytes, int]:
        d = real(path)
        if d:
            k = next(iter(d))
            d[k] -= 1
        return d

    monkeypatch.setattr(job_mod, "load_result", lossy)
    doc = run(JobSpec(zipf=0.0, words=2000, vocab=50, mappers=2, reducers=1, where="loopback", timeout_s=30), ["tcp"])
    assert doc["correct"] is False and doc["runs"]["tcp"]["wrong_keys"] == 1


def test_bad_input_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(JobError, match="not a readable file"):
        run(JobSpec(inputs=[str(tmp_path / "missing.txt")], where="loopback"), ["tcp"])
    with pytest.raises(JobError, match="either input files or --zipf"):
        run(JobSpec(where="loopback"), ["tcp"])
    # Options that used to run and report INCORRECT (or be ignored): refused before any work.
    for bad, msg in ((dict(timeout_s=0.0), "--timeout"), (dict(timeout_s=-1.0), "--timeout"),
                     (dict(timeout_s=float("nan")), "--timeout"), (dict(where="bogus"), "--where"),
                     (dict(zipf=float("nan")), "--zipf"), (dict(zipf=float("inf")), "--zipf"),
                     (dict(loss=float("nan")), "--loss")):
        spec = JobSpec(**{"zipf": 1.0, "words": 100, "vocab": 10, "where": "loopback", **bad})  # type: ignore[arg-type]
        with pytest.raises(JobError, match=msg):
            run(spec, ["tcp"])


def test_a_reducer_out_of_time_is_an_error_not_a_partial_result() -> None:
    """A udp reducer whose tree is not complete at --timeout returns what it had; the job
    says the reducer timed out (as for a tcp worker) instead of checking a partial count.
    10 ms is over before any mapper process has started."""
    with pytest.raises(JobError, match=r"udp: reducers \[0, 1\] did not complete"):
        run(JobSpec(zipf=1.0, words=2000, vocab=100, mappers=2, reducers=2, where="loopback", timeout_s=0.01), ["udp"])


def test_switchagg_without_its_library_fails_clearly() -> None:
    why = job_mod.switch_program_available("switchagg")
    if why is None:
        pytest.skip("switchagg is in this build")
    with pytest.raises(JobError, match="switchagg"):
        run(JobSpec(zipf=1.0, words=100, vocab=10, program="switchagg", where="loopback"), ["switch"])


def test_cli_writes_the_json_keys(tmp_path: Path) -> None:
    out = tmp_path / "wc.json"
    cp = subprocess.run([sys.executable, "-m", "inswitch", "wordcount", "--zipf", "1.1", "--words", "5000", "--vocab", "500",
                         "--mappers", "2", "--reducers", "2", "--mode", "tcp", "--where", "loopback", "--json", str(out)],
                        capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    doc = json.loads(out.read_text())
    for k in ("correct", "reducer_bytes", "reducer_packets", "reducer_cpu_s", "job_s"):
        assert k in doc
    assert doc["correct"] is True and doc["words"] == 5000


# ----- in a rack of network namespaces around the switch ---------------------------------
# Rack names carry the pid: a job first takes down any rack of its name (a leftover), so a
# fixed name would tear down the rack of another test run on the same machine.

@netns
@needs_root
def test_rack_tcp_udp_uniform_keys_under_loss() -> None:
    """Uniform keys, 3% of frames lost on every switch port: TCP and the udp protocol
    retransmit and the counts are still exact."""
    doc = run(JobSpec(zipf=0.0, words=30_000, vocab=3_000, mappers=3, reducers=2, loss=0.03, seed=7,
                      rack=f"wc{os.getpid()}1", where="netns", timeout_s=60), ["tcp", "udp"])
    _check(doc, ["tcp", "udp"])
    for m in ("tcp", "udp"):
        assert doc["runs"][m]["switch_lost_frames"] > 0  # the switch's fault injector did lose frames
    assert doc["runs"]["udp"]["retransmissions"] > 0
    assert doc["runs"]["tcp"]["reducer_packets"] > 0  # the reducer host's NIC counter


@netns
@needs_root
@needs_switch
def test_rack_switch_aggregates_zipf_and_real_text(tmp_path: Path) -> None:
    doc = run(JobSpec(zipf=0.99, words=40_000, vocab=2_000, mappers=4, reducers=2, rack=f"wc{os.getpid()}2",
                      where="netns", timeout_s=60), ["switch"])
    _check(doc, ["udp", "switch"])
    assert doc["fallback"] is False
    assert doc["reduction"] > 0.4  # 4 mappers with a combiner: at most 1 - 1/4 (plus the udp run's retransmissions)
    assert doc["baseline_udp"]["reducer_bytes"] > doc["reducer_bytes"]
    # Real multilingual text (split among mappers by bytes), long keys included.
    doc = run(JobSpec(inputs=[str(TEXT), str(_big_text(tmp_path))], mappers=3, reducers=2, rack=f"wc{os.getpid()}3",
                      where="netns", timeout_s=60), ["switch"])
    _check(doc, ["udp", "switch"])
    assert doc["long_keys"] >= 10 and doc["words"] > 4000
    sw = doc["runs"]["switch"]
    # Each mapper's share holds most words: the switch merges them (pairs, not bytes, since
    # the udp baseline's bytes include its retransmissions, which vary with the load).
    assert sw["fallback"] is False, [r.get("fallback_reason") for r in sw["per_reducer"]]
    assert sw["reducer_pairs"] < 0.75 * sw["mapper_pairs"], (sw["reducer_pairs"], sw["mapper_pairs"])
    assert doc["reduction"] > 0


@netns
@needs_root
@needs_switch
def test_rack_switch_with_words_longer_than_a_packet(tmp_path: Path) -> None:
    """Through the switch: the words longer than a frame cross it over TCP, the rest is
    aggregated by the switch (no fallback to the hosts)."""
    doc = run(JobSpec(inputs=[str(_oversized_text(tmp_path))], mappers=2, reducers=2, rack=f"wc{os.getpid()}6",
                      where="netns", timeout_s=60), ["switch"])
    _check(doc, ["udp", "switch"])
    assert doc["oversized_keys"] == 2 and doc["runs"]["switch"]["side_channel_pairs"] >= 2
    assert doc["fallback"] is False


@netns
@needs_root
@needs_switch
def test_rack_switch_under_loss() -> None:
    doc = run(JobSpec(zipf=0.99, words=20_000, vocab=1_000, mappers=3, reducers=2, loss=0.03, seed=11,
                      rack=f"wc{os.getpid()}4", where="netns", timeout_s=90), ["switch"])
    _check(doc, ["udp", "switch"])
    assert doc["runs"]["switch"]["switch_lost_frames"] > 0
    assert doc["runs"]["switch"]["retransmissions"] > 0


@netns
@needs_root
@needs_switch
def test_daiet_fig3_quick(tmp_path: Path) -> None:
    """`inswitch experiment daiet-fig3 --quick`: JSON + PNG, correct counts in every mode,
    and in-network aggregation really reduces what the reducers receive."""
    cp = subprocess.run([sys.executable, "-m", "inswitch", "experiment", "daiet-fig3", "--quick", "--out", str(tmp_path)],
                        capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    doc = json.loads((tmp_path / "daiet-fig3.json").read_text())
    assert (tmp_path / "daiet-fig3.png").stat().st_size > 0
    assert doc["correct"] is True and doc["quick"] is True
    assert all(t["correct"] for t in doc["totals"].values())
    # 4 mappers each holding almost every word: the best possible is 1 - 1/4.
    assert 0.5 < doc["data_reduction_vs_udp"]["median"] <= doc["ideal_with_combiner"] + 0.05
    assert doc["packet_reduction_vs_udp"]["median"] > 0.4


def test_daiet_fig1_supersteps_by_hand() -> None:
    """The graph algorithms' messages on a 4-vertex graph worked out by hand: SSSP from
    vertex 0 (most out-edges) sends along 0's edges, then along the new frontier's; WCC's
    labels settle after vertex 3 hears 0's label through 2."""
    import numpy as np

    from inswitch.experiments.daiet_fig1 import supersteps

    src, dst = np.array([0, 0, 1, 2]), np.array([1, 2, 2, 3])
    m = supersteps(4, src, dst, 5)
    (s, d), steps = m["sssp"]
    assert [sorted(zip(s[i].tolist(), d[i].tolist())) for i in steps] == [[(0, 1), (0, 2)], [(1, 2), (2, 3)]]
    (s, d), steps = m["pagerank"]
    assert len(steps) == 1 and len(steps[0]) == 4
    (s, d), steps = m["wcc"]
    # Step 0: every vertex to every neighbour (8 directed messages); then only changed ones.
    assert len(steps[0]) == 8 and len(steps) <= 4
    assert len(steps[-1]) < 8


@netns
@needs_root
@needs_switch
def test_daiet_fig1_quick(tmp_path: Path) -> None:
    """`daiet-fig1` quick (one PageRank superstep, ~25 s): the graph's messages go through
    the DAIET switch exactly (Counter check), and the reduction measured at the reducers
    is real but cannot beat the potential computed without the switch (1 - destinations /
    messages)."""
    from inswitch.experiments import all_experiments

    e = all_experiments()["daiet-fig1"]
    res = e.run(True, lambda s: None)
    assert res["all_correct"]
    (row,) = res["rows"]
    assert row["mapper_pairs"] == row["messages"] and not row["fallback"]
    assert 0.5 < row["measured_reduction"] <= row["potential_reduction"] + 1e-9
    e.plot(res, tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 0


@netns
@needs_root
@needs_switch
def test_rack_switch_absent_falls_back_to_hosts() -> None:
    """Switch mode with the aggregation program missing from the switch: the job still
    completes with the right counts, aggregated by the hosts, and says so."""
    doc = run(JobSpec(zipf=0.99, words=10_000, vocab=500, mappers=2, reducers=2, rack=f"wc{os.getpid()}5",
                      where="netns", timeout_s=90, absent_program=True), ["switch"])
    _check(doc, ["udp", "switch"])
    assert doc["fallback"] is True and "note" in doc["runs"]["switch"]


def test_switch_fault_option_parses_and_rejects() -> None:
    """`inswitch switch --fault`: what `--loss` uses to make the switch's ports lose frames."""
    from inswitch.switchd.cli import UsageError, parse_fault

    assert parse_fault("loss=0.02,seed=9") == (0.02, 0.0, 0.0, 9)
    assert parse_fault("dup=0.1,reorder=0.2") == (0.0, 0.1, 0.2, 1)
    for bad in ("loss=2", "drop=0.1", "loss=x", "loss"):
        with pytest.raises(UsageError):
            parse_fault(bad)
    from inswitch import _native

    with pytest.raises(ValueError, match="outside"):
        _native.Dataplane(["forward"], "memory:2", fault=(1.5, 0.0, 0.0, 1))
    dp = _native.Dataplane(["forward"], "memory:2", fault=(0.5, 0.0, 0.0, 1))
    dp.stop()
