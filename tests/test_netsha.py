"""NetSHa end to end on the in-memory switch model: the search against exact k-NN and
against the same search without in-switch reduction, the CLI's JSON, the datasets, and the
experiments' quick mode."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from inswitch.apps.netsha.datasets import DatasetError, exact_knn, load, random_dataset, read_fvecs, read_ivecs, write_fvecs
from inswitch.apps.netsha.search import SWITCH_LABELS, SearchConfig, run_search, search_config, top_k_per_query


@pytest.fixture(scope="module")
def result() -> dict:
    ds = random_dataset(1500, 30, seed=3)
    # Small server packets, so that aggregation has packets to merge.
    cfg = SearchConfig(servers=3, k=10, registers=16, concurrency=15, per_packet=8)
    return run_search(ds, cfg, ["netsha", "netsha-agg", "layered", "tlsh"], keep_topk=True)


def same_topk(a: dict, b: dict) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(a["topk_distances"], b["topk_distances"]))


def test_exact_netsha_returns_what_the_servers_found(result: dict) -> None:
    m = result["modes"]
    # Same servers (TLSH) with and without in-switch reduction: the agent's top K per query
    # is the same, hence the same quality.
    assert same_topk(m["netsha"], m["tlsh"]) and same_topk(m["netsha-agg"], m["tlsh"])
    assert m["netsha"]["recall"] == pytest.approx(m["tlsh"]["recall"], abs=1e-12)
    assert m["netsha"]["f1"] == pytest.approx(m["tlsh"]["f1"], abs=1e-12)
    assert m["netsha-agg"]["recall"] == pytest.approx(m["tlsh"]["recall"], abs=1e-12)
    for mode in m.values():
        assert 0.0 < mode["recall"] <= 1.0
        assert set(mode["time_split_pct"]) == {"selection", "search", "network", "agent"}
        assert sum(mode["time_split_pct"].values()) == pytest.approx(100.0)


def test_switch_cuts_agent_packets_and_answers(result: dict) -> None:
    m = result["modes"]
    assert m["netsha-agg"]["agent_packets"] < m["tlsh"]["agent_packets"]
    assert m["netsha-agg"]["agent_answers"] == m["tlsh"]["agent_answers"], "aggregation alone drops nothing"
    assert m["netsha"]["agent_answers"] < m["tlsh"]["agent_answers"], "reduction drops answers"
    assert m["netsha"]["agent_packets"] < m["layered"]["agent_packets"]
    assert result["agent_packets_ratio"] == m["netsha"]["agent_packets"] / m["layered"]["agent_packets"]
    sw = m["netsha"]["switch_counters"]["switch0"]
    assert sw["dropped_by_threshold"] > 0 and sw["drop_malformed"] == 0


def test_paper_reduction_never_beats_exact() -> None:
    ds = random_dataset(1500, 30, seed=4)
    out = {}
    for red in ("paper", "exact"):
        cfg = SearchConfig(servers=3, k=10, registers=16, concurrency=15, slots=4, ga=3, reduction=red, switches=2)
        out[red] = run_search(ds, cfg, ["netsha", "tlsh"], keep_topk=True)["modes"]
    assert same_topk(out["exact"]["netsha"], out["exact"]["tlsh"]), "two switches in exact mode change nothing"
    assert out["exact"]["netsha"]["recall"] == pytest.approx(out["exact"]["tlsh"]["recall"], abs=1e-12)
    assert out["paper"]["netsha"]["recall"] <= out["exact"]["netsha"]["recall"] + 1e-12


def test_digits_exact() -> None:
    ds = load("digits", 0, 40)
    cfg = SearchConfig(servers=3, k=10, registers=32, concurrency=10, width=60.0)
    m = run_search(ds, cfg, ["netsha", "tlsh"], keep_topk=True)["modes"]
    assert same_topk(m["netsha"], m["tlsh"])
    assert m["netsha"]["recall"] > 0.8
    assert m["netsha"]["agent_answers"] < m["tlsh"]["agent_answers"]


def test_agent_merge_matches_a_plain_sort() -> None:
    rng = np.random.default_rng(0)
    q = rng.integers(0, 5, 200)
    i = rng.permutation(200)
    d = rng.random(200)
    got_i, got_d = top_k_per_query(5, q, i, d, 7)
    for qq in range(5):
        want = np.sort(d[q == qq])[:7]
        assert np.array_equal(got_d[qq], want)


def test_exact_knn_against_brute_force() -> None:
    ds = random_dataset(300, 5, d=8, seed=1)
    ids, dist = exact_knn(ds.base, ds.queries, 4)
    for j in range(5):
        full = np.linalg.norm(ds.base.astype(np.float64) - ds.queries[j], axis=1)
        assert np.array_equal(ids[j], np.argsort(full)[:4])
        assert np.allclose(dist[j], np.sort(full)[:4])


def test_vecs_readers(tmp_path: Path) -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    write_fvecs(tmp_path / "a.fvecs", x)
    assert np.array_equal(read_fvecs(tmp_path / "a.fvecs"), x)
    iv = np.hstack([np.full((2, 1), 3, "<i4"), np.array([[1, 2, 3], [4, 5, 6]], "<i4")])
    iv.tofile(tmp_path / "g.ivecs")
    assert read_ivecs(tmp_path / "g.ivecs").tolist() == [[1, 2, 3], [4, 5, 6]]
    bv = np.array([[2, 0, 0, 0, 7, 9]], dtype=np.uint8)
    bv.tofile(tmp_path / "b.bvecs")
    ds = load(str(tmp_path / "a.fvecs"), 0, 1, str(tmp_path / "a.fvecs"))
    assert ds.base.shape == (3, 4) and ds.queries.shape == (1, 4)
    (tmp_path / "bad.fvecs").write_bytes(b"\x05\x00\x00\x00\x00")
    with pytest.raises(DatasetError):
        read_fvecs(tmp_path / "bad.fvecs")


def test_text_dataset_fails_clearly() -> None:
    # The text dataset itself is tested in test_netsha_text.py.
    with pytest.raises(DatasetError, match="no such file"):
        load("text:/nonexistent.txt", 100, 10)


def test_cli_search_writes_the_json(tmp_path: Path) -> None:
    from inswitch.cli import app

    out = tmp_path / "s.json"
    r = CliRunner().invoke(
        app,
        ["search", "--base", "800", "--queries", "12", "--servers", "2", "--k", "5", "--registers", "8", "--mode", "all", "--json", str(out)],
    )
    assert r.exit_code == 0, r.output
    res = json.loads(out.read_text())
    for mode in ("netsha", "layered", "tlsh"):
        for key in ("recall", "f1", "agent_packets", "agent_answers", "total_s", "time_split_pct", "time_per_query_us"):
            assert key in res["modes"][mode]
    assert "agent_packets_ratio" in res
    # Issue 19: the default switch is the configuration that fits tofino1; Table 1's is a
    # labelled variant.
    assert res["switch"] == "tofino1" and res["config"]["switch_config"] == "tofino1"
    assert (res["config"]["slots"], res["config"]["ga"], res["config"]["conds"], res["config"]["depth"]) == (6, 4, 2, 256)
    assert res["modes"]["netsha"]["answers_per_packet"] == 17  # what a 256-byte parse holds
    r = CliRunner().invoke(app, ["search", "--base", "800", "--queries", "12", "--servers", "2", "--k", "5", "--registers", "8", "--mode", "netsha",
                                 "--switch-config", "unbounded", "--json", str(out)])
    assert r.exit_code == 0, r.output
    res = json.loads(out.read_text())
    assert res["switch"] == SWITCH_LABELS["unbounded"] == "unbounded (does not fit tofino1)" and res["config"]["slots"] == 12
    assert "unbounded (does not fit tofino1)" in r.output
    r = CliRunner().invoke(app, ["search", "--switch-config", "tofino2"])
    assert r.exit_code == 2
    r = CliRunner().invoke(app, ["search", "--dataset", "text:/nonexistent.txt", "--queries", "3"])
    assert r.exit_code == 2 and "no such file" in r.output


def test_experiments_offer_the_unbounded_switch_as_a_labelled_variant(tmp_path: Path) -> None:
    from inswitch.cli import app
    from inswitch.experiments import all_experiments

    e = all_experiments()["netsha-fig21"]
    assert e.programs == ("netsha", "netsha-unbounded")
    r = CliRunner().invoke(app, ["experiment", "netsha-fig21", "--program", "daiet", "--quick", "--out", str(tmp_path)])
    assert r.exit_code == 2 and "takes --program netsha|netsha-unbounded" in r.output
    res = e.run(True, lambda s: None, program="netsha-unbounded")
    assert res["switch"] == "unbounded (does not fit tofino1)" and res["config"]["slots"] == 12 and res["program"] == "netsha-unbounded"
    assert e.run(True, lambda s: None)["switch"] == "tofino1"


@pytest.mark.parametrize("name", ["netsha-fig12", "netsha-fig16"])
def test_packet_experiments_quick(name: str, tmp_path: Path) -> None:
    from inswitch.experiments import all_experiments

    e = all_experiments()[name]
    res = e.run(True, lambda s: None)
    assert res["small_packets"]["normalized_agent_packets"]["netsha"] < 0.5
    assert res["normalized_agent_packets"]["netsha"] < 1.0
    e.plot(res, tmp_path / f"{name}.png")
    assert (tmp_path / f"{name}.png").stat().st_size > 0


@pytest.mark.parametrize("name", ["netsha-table2", "netsha-fig21", "netsha-fig23", "netsha-fig18-19", "netsha-fig22", "netsha-fig20", "netsha-fig11", "netsha-fig13", "netsha-fig14-15", "netsha-fig17"])
def test_other_experiments_quick(name: str, tmp_path: Path) -> None:
    from inswitch.experiments import all_experiments, lookup

    e = all_experiments()[name]
    res = e.run(True, lambda s: None)
    json.dumps(res, default=float)
    for n in e.numbers:
        assert lookup(res, n.ours_key) is not None, n.ours_key
    e.plot(res, tmp_path / f"{name}.png")
    assert (tmp_path / f"{name}.png").stat().st_size > 0


def test_time_experiments_count_the_same_packets() -> None:
    """Figs. 13 and 14-15 (quick): the packet counts behind the timings. Layered's switch
    only forwards, so its agent packets do not depend on the query rate; NetSHa's agent
    gets fewer packets than Layered's, and more as the rate forces replacements."""
    from inswitch.experiments import all_experiments

    f13 = all_experiments()["netsha-fig13"].run(True, lambda s: None)
    assert f13["normalized_agent_packets"]["netsha"] < 1.0
    assert f13["modes"]["netsha"]["recall"] >= f13["modes"]["tlsh"]["recall"] - 1e-9
    f14 = all_experiments()["netsha-fig14-15"].run(True, lambda s: None)
    pts = f14["points"]
    assert len({p["agent_packets"]["layered"] for p in pts}) == 1
    assert all(p["agent_packets"]["netsha"] < p["agent_packets"]["layered"] for p in pts)
    assert pts[-1]["replacements"] > pts[0]["replacements"]
    assert pts[-1]["agent_packets"]["netsha"] >= pts[0]["agent_packets"]["netsha"]


def test_scapy_layer_reads_the_rust_encoding() -> None:
    from inswitch import _native
    from inswitch.scapy.netsha import Netsha, NetshaAnswer, NetshaQuery

    q = np.array([7, 7, 9], dtype="<u4")
    i = np.array([1, 2, 3], dtype="<u4")
    d = np.array([0.5, 1.25, 3.0], dtype="<f8")
    raw = _native.netsha_encode(q.tobytes(), i.tobytes(), d.tobytes())
    p = Netsha(raw)
    assert p.query_count == 2
    assert [(b.qid, [(a.id, a.distance) for a in b.pairs]) for b in p.queries] == [(7, [(1, 0.5), (2, 1.25)]), (9, [(3, 3.0)])]
    built = Netsha(queries=[NetshaQuery(qid=7, pairs=[NetshaAnswer(id=1, distance=0.5), NetshaAnswer(id=2, distance=1.25)]), NetshaQuery(qid=9, pairs=[NetshaAnswer(id=3, distance=3.0)])])
    assert bytes(built) == raw


def test_ann_benchmarks_hdf5(tmp_path: Path) -> None:
    import h5py  # a regular dependency (pyproject.toml): this test must run, not skip
    x = random_dataset(400, 10, d=16, seed=2)
    with h5py.File(tmp_path / "toy.hdf5", "w") as f:
        f["train"] = x.base
        f["test"] = x.queries
    ds = load(str(tmp_path / "toy.hdf5"), 0, 5)
    assert ds.base.shape == (400, 16) and ds.queries.shape == (5, 16)
    assert np.array_equal(ds.queries, x.queries[:5])


def test_parallel_servers_and_two_candidate_registers_reduce_more() -> None:
    """Servers answering in parallel (their packets interleave in the switch) give
    Algorithm 1 a tighter r.T than one server after another, and two candidate registers
    per query (Algorithm 2) bypass fewer answers than one; every variant stays exact."""
    ds = random_dataset(3000, 24, seed=5)
    base = dict(servers=6, k=10, registers=32, concurrency=12, per_packet=24)
    out = {}
    for name, over in {
        "sequential": dict(arrival="sequential", ways=2),
        "one_way": dict(arrival="concurrent", ways=1),
        "concurrent": dict(arrival="concurrent", ways=2),
    }.items():
        out[name] = run_search(ds, SearchConfig(**base, **over), ["netsha", "tlsh"], keep_topk=True)["modes"]
        assert same_topk(out[name]["netsha"], out[name]["tlsh"]), name
    ans = {k: v["netsha"]["agent_answers"] for k, v in out.items()}
    assert ans["concurrent"] < ans["sequential"], ans
    coll = {k: v["netsha"]["switch_counters"]["switch0"].get("bypass_collision", 0) for k, v in out.items()}
    assert coll["concurrent"] < coll["one_way"], coll


def test_switch_server_selection_equals_the_reference() -> None:
    """§4: the servers the switch's selection tables pick for each query packet are the
    servers the agent's table lookup (`select_table`) would pick; queries that hit no
    server's bucket go to every server."""
    from inswitch import _native
    from inswitch.apps.netsha.controller import install_selection, table_size
    from inswitch.apps.netsha.search import build_cluster, select_table

    rng = np.random.default_rng(11)
    ds = random_dataset(2000, 40, seed=5)
    cfg = SearchConfig(servers=6, k=10, registers=16)
    cluster = build_cluster(ds, cfg, ternary=True)
    # Dataset queries (near data: few servers) and far random vectors (often no bucket).
    queries = np.vstack([ds.queries, rng.normal(0, 4, size=(40, ds.base.shape[1])).astype(np.float32)])
    keys = cluster.fam.keys(cluster.fam.project(queries))
    path = _native.NetshaPath([cfg.spec(select_size=table_size(cluster.selection, cfg.tables))], cfg.servers)
    assert install_selection(path, cluster.selection) == len(cluster.selection)
    qs = np.arange(len(queries), dtype="<u4")
    bits = np.frombuffer(path.select(qs.tobytes(), keys.astype("<i8").tobytes(), np.ascontiguousarray(queries, dtype="<f4").tobytes(), cfg.tables, queries.shape[1], 1000), dtype="<u4")
    every = empty = 0
    for q in range(len(queries)):
        got = [s for s in range(cfg.servers) if int(bits[q]) >> s & 1]
        want = select_table(cluster, keys[q])
        assert got == want, q
        every += len(got) == cfg.servers
        empty += not any((t, int(k)) in cluster.selection for t, k in enumerate(keys[q]))
    assert 0 < empty <= every < len(queries)
    c = path.counters(0)
    assert c["queries_selected"] + c["queries_to_all_servers"] == len(queries) and c["queries_to_all_servers"] == empty
    assert c["drop_netsha_query_malformed"] == 0
    assert c["drop_netsha_query_pruned"] == sum(cfg.servers - bin(int(b)).count("1") for b in bits)


def test_search_uses_the_switch_selection(result: dict) -> None:
    m = result["modes"]
    assert m["netsha"]["server_selection"].startswith("switch") and m["tlsh"]["server_selection"].startswith("software")
    assert len(m["netsha"]["switch_selected"]) == result["queries"]
    assert all(len(s) > 0 for s in m["netsha"]["switch_selected"])


def test_full_packets_are_split_not_bypassed() -> None:
    """Full 120-answer server packets (Table 1's unbounded parse): no answer goes on
    unreduced for lack of room, and the agent's top K stays exact."""
    ds = random_dataset(3000, 24, seed=6)
    cfg = search_config("unbounded", servers=6, k=20, registers=32, concurrency=8, cap=120)
    r = run_search(ds, cfg, ["netsha", "tlsh"], keep_topk=True)
    m = r["modes"]
    assert m["netsha"]["answers_per_packet"] == 120
    assert same_topk(m["netsha"], m["tlsh"])
    sw = m["netsha"]["switch_counters"]["switch0"]
    assert sw["bypass_no_room"] == 0 and sw["splits"] > 0, sw
    assert m["netsha"]["agent_answers"] < m["tlsh"]["agent_answers"] / 3


def test_rack_node_codec_is_the_wire_format() -> None:
    """The rack processes' packets go through `wire::netsha` (Rust) both ways: a query and
    an answer payload survive a round trip, and malformed payloads decode to nothing."""
    from inswitch.apps.netsha.rack_node import decode_answers, decode_query, encode_answers, encode_query

    keys = np.array([3, -1, 1 << 40], dtype=np.int64)
    vec = np.array([0.5, -2.25, 7.0], dtype=np.float32)
    qid, k, v = decode_query(encode_query(9, keys, vec))
    assert qid == 9 and k.tolist() == keys.tolist() and v.tolist() == vec.tolist()
    ids, dists = np.array([4, 5, 6]), np.array([0.125, 2.5, 1e9])
    raw = encode_answers(77, ids, dists)
    assert raw[:7] == bytes([1, 0, 0, 0, 77, 0, 3])  # Query# = 1, QID, NUM (big-endian)
    assert decode_answers(raw) == [(77, 4, 0.125), (77, 5, 2.5), (77, 6, 1e9)]
    assert decode_answers(raw[:-1]) == [] and decode_answers(b"") == []
    assert decode_query(encode_query(9, keys, vec)[:-1]) is None


def test_completion_detects_missing_answers_and_ignores_duplicates() -> None:
    """The rack agent's loss detection (`rack_node.Completion`): a query is complete only
    when every selected server reported and its K best received distances equal the K best
    of the reports; a duplicated answer or report changes nothing, a lost one is seen."""
    from inswitch.apps.netsha.rack_node import Completion, decode_recovery, encode_direct_answer, encode_report, expected_servers

    sel = {(0, 11): 0b01, (1, 22): 0b10}
    assert expected_servers(sel, np.array([11, 5]), 3) == 0b01
    assert expected_servers(sel, np.array([11, 22]), 3) == 0b11
    assert expected_servers(sel, np.array([1, 2]), 3) == 0b111, "no entry: every server, as the switch floods"
    c = Completion(k=3, expected=[0b11])
    a = {1: 0.5, 2: 0.7, 3: 0.9, 4: 1.5}  # server 0 holds ids 1, 2, 4; server 1 holds id 3
    m = decode_recovery(encode_report(0, 0, np.array([0.5, 0.7, 1.5])))
    assert m is not None and m[0] == b"NSRP" and m[2] == 0 and list(m[4]) == [0.5, 0.7, 1.5]
    c.reports[0] = {0: m[4]}
    for i in (1, 2, 4, 1, 2):  # duplicates land on the same id
        c.answers.setdefault(0, {})[i] = a[i]
    assert not c.complete(0), "server 1 has not reported"
    c.reports[0][1] = np.array([0.9])
    assert not c.complete(0), "id 3 (0.9) is in the top 3 and was not received"
    c.answers[0][3] = a[3]
    assert c.complete(0)
    assert sorted(d for _, _, d in c.result(0))[:3] == [0.5, 0.7, 0.9]
    # Direct completion: only the selected servers' direct answers count.
    c.direct_mode.add(0)
    assert c.missing_direct(0) == [0, 1] and not c.complete(0)
    m = decode_recovery(encode_direct_answer(0, 1, np.array([3]), np.array([0.9])))
    assert m is not None and m[0] == b"NSDR" and list(m[3]) == [3]
    c.direct[0] = {1: (m[3], m[4])}
    assert not c.complete(0)
    c.direct[0][0] = (np.array([1, 2]), np.array([0.5, 0.7]))
    assert c.complete(0) and sorted(c.result(0)) == [(0, 1, 0.5), (0, 2, 0.7), (0, 3, 0.9)]
    assert decode_recovery(b"NSRP\x00") is None and decode_recovery(encode_report(0, 0, np.array([1.0]))[:-1]) is None


def test_tightened_threshold_returns_the_exact_k_nearest() -> None:
    """Issue 19's phase-2 tightening on the default (tofino1) switch, 24 parallel servers,
    K = 10: with one LSH bucket for everything each server returns its own nearest
    candidates, so the agent's top K must be the exact k-NN (brute force), with r.T
    tightened (it was, many times) and fixed alike."""
    ds = random_dataset(2400, 20, seed=5)
    truth_ids, truth_d = exact_knn(ds.base, ds.queries, 10)
    packets = {}
    for tighten in (True, False):
        cfg = SearchConfig(servers=24, k=10, width=1e9, cap=20, registers=32, concurrency=10, tighten=tighten)
        m = run_search(ds, cfg, ["netsha"], keep_topk=True)["modes"]["netsha"]
        for q, d in enumerate(m["topk_distances"]):
            np.testing.assert_allclose(d, truth_d[q], rtol=1e-5, err_msg=f"query {q}")
        assert m["recall"] == 1.0
        tightenings = m["switch_counters"]["switch0"].get("tightenings", 0)
        assert (tightenings > 0) == tighten, tightenings
        packets[tighten] = m["agent_packets"]
    assert packets[True] < packets[False], packets
