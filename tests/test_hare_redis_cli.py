"""The options issue 17 added (`kvs --backend redis ...`, `kvs proxy`, `bench kvs`):
every value their checked types must refuse ends the command with one line and status 2
before any work starts; `kvs --backend sim` still runs as before."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import typer

from inswitch.cli import app
from inswitch.cliopts import checked_type, run

NEW = {
    ("kvs",): ["--backend", "--workload", "--records", "--field-size", "--clients", "--servers", "--window", "--plot", "--engine", "--history", "--fabric", "--client-leaf"],
    ("kvs", "proxy"): ["--listen", "--servers", "--key-field", "--value-size", "--timeout", "--history"],
    ("bench", "kvs"): ["--duration", "--requests", "--json", "--engine"],
}
REQUIRED = {("kvs", "proxy"): ["--listen", "0.0.0.0:1", "--servers", "10.0.0.2"]}


def _command(path: tuple[str, ...]) -> typer.core.TyperCommand:
    cmd = typer.main.get_command(app)
    for p in path:
        cmd = cmd.commands[p]  # type: ignore[attr-defined]
    return cmd  # type: ignore[return-value]


@pytest.mark.parametrize("path", sorted(NEW))
def test_new_options_refuse_bad_values_in_one_line(path: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    cmd = _command(path)
    seen = 0
    for prm in cmd.params:
        if prm.opts[0] not in NEW[path]:
            continue
        ty = checked_type(prm)
        assert ty is not None, prm.name
        for bad in ty.invalid_samples():
            base = list(REQUIRED.get(path, []))
            if prm.opts[0] in base:
                i = base.index(prm.opts[0])
                del base[i : i + 2]
            assert run(app, [*path, *base, prm.opts[0], bad]) == 2, (prm.name, bad)
            err = capsys.readouterr().err.strip()
            assert "\n" not in err and "error:" in err and prm.opts[0] in err, err
            seen += 1
    assert seen >= len(NEW[path])


def test_kvs_redis_refuses_oversize_fields_and_unknown_systems(capsys: pytest.CaptureFixture[str]) -> None:
    # (DySO runs in the Redis rack since issue 17: tests/test_hare_redis_rack.py)
    assert run(app, ["kvs", "--backend", "redis", "--field-size", "100", "--value-size", "64"]) == 2
    assert run(app, ["kvs", "--backend", "redis", "--system", "bogus"]) == 2


def test_client_leaf_placement_and_its_refusals(capsys: pytest.CaptureFixture[str]) -> None:
    from inswitch.apps.hare.redisrack import placement

    # (ToR, the clients' leaf): the storage hosts stay on the first leaf with room for them
    assert placement("leaf-spine:2,1,3", 1, 2, None) == ("leaf1", "leaf1")
    assert placement("leaf-spine:2,1,3", 1, 2, 2) == ("leaf1", "leaf2")
    assert placement("leaf-spine:2,1,3", 1, 2, 1) == ("leaf1", "leaf1")
    assert placement("leaf-spine:2,1,3", 2, 2, 1) == ("leaf2", "leaf1")  # no room for both under leaf1
    for argv, what in ((["--client-leaf", "2"], "--fabric"),
                       (["--fabric", "leaf-spine:2,1,3", "--client-leaf", "3"], "2 leaves"),
                       (["--fabric", "leaf-spine:2,1,3", "--client-leaf", "2", "--clients", "4"], "fewer than --clients 4"),
                       (["--fabric", "leaf-spine:2,1,3", "--client-leaf", "2", "--servers", "4"], "--servers 4")):
        assert run(app, ["kvs", "--backend", "redis", *argv]) == 2, argv
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "error" in err and what in err, err
    assert run(app, ["kvs", "--client-leaf", "2"]) == 2  # the sim backend has no fabric
    assert "--client-leaf" in capsys.readouterr().err


def test_kvs_engine_native_refuses_what_it_cannot_run(capsys: pytest.CaptureFixture[str]) -> None:
    # Only real processes; every workload (ycsb-d's inserts drawn natively), a shift and
    # several writing clients are taken. --history off is the native engine's alone.
    from inswitch.hare import fastload

    assert all(fastload.unsupported(w, "hot-in", 2) is None for w in ("ycsb-a", "ycsb-d"))
    assert not fastload.sole_writer("ycsb-a", 2) and fastload.sole_writer("ycsb-c", 2) and fastload.sole_writer("ycsb-a", 1)
    assert not fastload.sole_writer("ycsb-d", 2) and fastload.sole_writer("ycsb-d", 1)
    for argv, name in ((["--engine", "native", "--shift", "none"], "engine"),
                       (["--backend", "redis", "--engine", "python", "--history", "off"], "history"),
                       (["--history", "off", "--shift", "none"], "history")):
        assert run(app, ["kvs", *argv]) == 2, argv
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "error" in err and name in err, err


@pytest.mark.skipif(not (os.geteuid() == 0 and shutil.which("redis-server")), reason="needs root and redis-server")
def test_kvs_redis_with_native_clients_runs_and_checks_values(tmp_path) -> None:
    out = tmp_path / "k.json"
    rc = run(app, ["kvs", "--backend", "redis", "--engine", "native", "--system", "hare", "--shift", "none", "--workload", "ycsb-a",
                   "--records", "200", "--duration", "1.5", "--clients", "1", "--servers", "1", "--json", str(out)])
    r = json.loads(out.read_text())["systems"]["hare"]
    assert rc == 0 and r["correct"], r
    assert r["value_mismatches"] == 0 and r["lost_writes"] == 0 and r["throughput_ops"] > 0


@pytest.mark.skipif(not (os.geteuid() == 0 and shutil.which("redis-server")), reason="needs root and redis-server")
@pytest.mark.parametrize("clients", [1, 2])
def test_kvs_native_history_off_says_what_was_not_checked(tmp_path, clients: int) -> None:
    # --history off: no checker verdict, so `stale_reads` and `linearizable` are null,
    # never 0; with two writing clients nothing is checked (`correct` null, the exit
    # status 0: not a failure); a single writer still checks each GET's value itself.
    out = tmp_path / "k.json"
    rc = run(app, ["kvs", "--backend", "redis", "--engine", "native", "--history", "off", "--system", "hare", "--shift", "none", "--workload", "ycsb-a",
                   "--records", "200", "--duration", "1.5", "--clients", str(clients), "--servers", "1", "--json", str(out)])
    doc = json.loads(out.read_text())
    r = doc["systems"]["hare"]
    assert rc == 0 and doc["config"]["native_history"] is False
    assert r["history_recorded"] is False and r["stale_reads"] is None and r["linearizable"] is None and r["operations"] is None
    assert "history off" in r["check_note"] and r["throughput_ops"] > 0
    assert all(c["history"] is False for c in r["clients"])
    if clients == 1:
        assert r["correct"] is True and r["lost_writes"] == 0 and r["value_mismatches"] == 0, r
    else:
        assert r["correct"] is None and r["lost_writes"] is None and "not checked" in r["check_note"], r


def test_kvs_sim_still_runs_and_is_labelled_a_model(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    out = tmp_path / "k.json"
    rc = run(app, ["kvs", "--system", "hare", "--keys", "500", "--cache", "32", "--batch", "8", "--duration", "0.6", "--rate", "2000", "--shift", "none", "--no-rates", "--json", str(out)])
    assert rc == 0
    assert "model" in capsys.readouterr().out
    assert json.loads(out.read_text())["config"]["backend"].startswith("sim (model")


def test_switchd_takes_sized_program_specs() -> None:
    from inswitch import native
    from inswitch.switchd.pipeline import Pipeline

    assert Pipeline.for_programs(["forward", "hare:key=64:value=64:slots=128"]).programs == ("forward", "hare:key=64:value=64:slots=128")
    assert native.is_program("netcache:key=64:value=64:slots=64:threshold=16")
    for bad in ("hare:key=64:value=63:slots=8", "nope:key=1", "hare:key=64,value=64"):
        assert not native.is_program(bad), bad
    with pytest.raises(ValueError):
        Pipeline.for_programs(["forward", "nope:key=1"])


def test_a_killed_racks_work_directory_is_swept_and_no_other(tmp_path) -> None:
    import subprocess

    from inswitch.apps.hare.redisrack import OWNER_FILE, sweep_workdirs

    dead = subprocess.Popen(["true"])
    dead.wait()
    for name, owner in (("killed", str(dead.pid)), ("running", str(os.getpid())), ("foreign", None)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "dump.rdb").write_bytes(b"x")
        if owner is not None:
            (tmp_path / name / OWNER_FILE).write_text(owner)
    assert sweep_workdirs(str(tmp_path)) == [tmp_path / "killed"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["foreign", "running"]
