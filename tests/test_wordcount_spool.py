"""WordCount without a combiner spools each mapper's pairs to disk (one file per reducer)
and streams them: exact counts in every mode, the spool files removed afterwards (also on
error), a mapper's peak memory independent of its input, and a malformed spool reported
clearly."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from inswitch.apps.wordcount import job as job_mod
from inswitch.apps.wordcount import spool, transport
from inswitch.apps.wordcount.job import JobSpec, run
from inswitch.apps.wordcount.transport import Pairs

ROOT = __import__("os").geteuid() == 0


def _text(path: Path, mb: float, seed: int = 5) -> Path:
    """A text of about `mb` MB: Zipf-ish words of 1..24 letters, some non-ASCII, and a few
    words longer than any protocol's key."""
    rnd = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyzéüßдлияαβγ"
    vocab = ["".join(rnd.choice(letters) for _ in range(rnd.choice([1, 2, 3, 4, 5, 6, 7, 9, 12, 16, 24])))
             for _ in range(20000)]
    vocab += ["L" * 1500, "M" * 2000]
    weights = [1.0 / (i + 1) for i in range(len(vocab))]
    target = int(mb * 1e6)
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        while n < target:
            line = " ".join(rnd.choices(vocab, weights, k=4000)) + "\n"
            f.write(line)
            n += len(line.encode())
    return path


def test_no_combiner_job_is_exact_and_memory_bounded(tmp_path: Path) -> None:
    """A 20 MB text (about 1.8 M words, one pair each) in every mode this host can run: exact,
    and each mapper's peak RSS well below the ~150 MB its pairs and packets took in memory."""
    text = _text(tmp_path / "big.txt", 20)
    switch = ROOT and job_mod.switch_program_available("daiet") is None
    modes = ["tcp", "udp", "switch"] if switch else ["tcp", "udp"]
    doc = run(JobSpec(inputs=[str(text)], mappers=2, reducers=2, combiner=False, where="auto" if switch else "loopback",
                      timeout_s=60), modes)
    assert doc["correct"], {m: r["wrong_examples"] for m, r in doc["runs"].items()}
    assert set(doc["runs"]) == set(modes)
    assert doc["oversized_keys"] == 2
    for m in modes:
        r = doc["runs"][m]
        assert r["mapper_pairs"] + r["side_channel_pairs"] == doc["words"]
        assert (r["side_channel_pairs"] > 0) == (m != "tcp")
        assert r["mapper_max_rss_mb"] is not None and r["mapper_max_rss_mb"] < 120, (m, r["mapper_max_rss_mb"])
        assert r["reducer_max_rss_mb"] is not None
        for pm in r["per_mapper"]:
            assert pm["spool_bytes"] > 8 * pm["pairs"]
            if m != "tcp":
                assert 0 < pm["max_held_packets"] <= 64


def _mapper_spec(tmp_path: Path, inp: Path, addrs: list[str]) -> Path:
    spec = {"role": "map", "mode": "tcp", "protocol": "daiet", "op": "sum", "timeout_s": 20, "mapper_id": 3,
            "bind": "127.0.0.1:0", "reducers": len(addrs), "reducer_addrs": addrs, "tree_ids": [7, 8],
            "input": {"files": [[str(inp), 0, inp.stat().st_size]]}, "combiner": False}
    path = tmp_path / "m3.json"
    path.write_text(json.dumps(spec))
    return path


def _worker(spec: Path) -> dict:
    p = subprocess.run([sys.executable, "-m", "inswitch.apps.wordcount.worker", str(spec)], capture_output=True,
                       text=True, timeout=60)
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_tcp_mapper_sends_its_spools_unchanged_and_removes_them(tmp_path: Path) -> None:
    """tcp mode: each spool file is the reducer's stream as it is (sendfile); the files are
    gone once the mapper exits, and also when it fails."""
    inp = _text(tmp_path / "in.txt", 1)
    want: dict[bytes, int] = {}
    for w in inp.read_text(encoding="utf-8").split():
        want[w.encode()] = want.get(w.encode(), 0) + 1
    listeners = [transport.tcp_listen("127.0.0.1:0") for _ in range(2)]
    addrs = [f"127.0.0.1:{ls.getsockname()[1]}" for ls in listeners]
    got: list[dict[bytes, int]] = [{}, {}]

    def reduce(j: int) -> None:
        got[j] = transport.tcp_reduce(listeners[j], 1, 30)[0]

    threads = [threading.Thread(target=reduce, args=(j,)) for j in range(2)]
    for t in threads:
        t.start()
    res = _worker(_mapper_spec(tmp_path, inp, addrs))
    for t in threads:
        t.join(30)
    assert "error" not in res, res
    assert {**got[0], **got[1]} == want and not set(got[0]) & set(got[1])
    assert res["spool_bytes"] == res["bytes_sent"] and res["pairs"] == sum(want.values())
    assert not list(tmp_path.glob("spool-*"))
    # A failure while spooling (the input vanished): an error line, no spool left behind.
    spec = _mapper_spec(tmp_path, inp, addrs)
    inp.unlink()
    res = _worker(spec)
    assert "FileNotFoundError" in res["error"]
    assert not list(tmp_path.glob("spool-*"))


def test_malformed_spool_is_a_clear_error(tmp_path: Path) -> None:
    """A spool cut inside a frame, or announcing an impossible key length, is refused with
    the file and offset named (before anything is sent), never a crash or a hang."""
    good = transport.tcp_encode(Pairs.of_keys([b"alpha", b"beta", b"gamma"]))
    cut = tmp_path / "spool-m0-1.bin"
    cut.write_bytes(good[:-2])
    bad = tmp_path / "spool-m0-2.bin"
    bad.write_bytes(b"\xff\xff\xff\xff" + good)
    for path, what in ((cut, "truncated frame"), (bad, "malformed frame")):
        with pytest.raises(ValueError, match=what) as e:
            transport.agg_map_spool("daiet", "127.0.0.1:0", [(1, "127.0.0.1:9")], 0, "sum", [path], 5, "udp")
        assert path.name in str(e.value)


def test_spools_remove_their_files_on_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError):
        with spool.Spools(tmp_path, 0, [1, 2]) as sp:
            assert all(p.exists() for p in sp.paths)
            raise RuntimeError("boom")
    assert not list(tmp_path.iterdir())
