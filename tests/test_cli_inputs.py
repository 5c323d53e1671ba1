"""Every input of every command is checked (issue 22 §1) and every command is described
(issue 21): the test walks the CLI as declared, so a new command or option is covered
without touching this file.

For each option: it has a `Checked` type (bool flags and --help excepted), and each value
its type names as invalid ends the command with exit status 2 and one line on stderr naming
the option, quickly, before any work starts. Run in-process through `cliopts.run` (the CLI's
entry point) with an alarm per case, so an accepted value that starts a long run fails the
test instead of blocking it; plus real `python -m inswitch` runs for the issue's examples.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import typer

import inswitch
from inswitch.cli import app
from inswitch.cliopts import JSON_PATH, checked_type, run

ROOT = Path(__file__).resolve().parents[1]

#: Options that cannot carry a `Checked` type, with why. Keep this short.
EXEMPT: dict[tuple[str, str], str] = {}

#: Valid values for required parameters, so a case fails only on the value under test.
REQUIRED = {"program": "forward", "programs": "forward", "hosts": "2", "host": "h1", "src": "h1", "dst": "h2", "command": "true", "ref": "rx_port_counters[0]",
            "listen": "127.0.0.1:0", "servers": "10.0.0.2", "topology": "leaf-spine:1,1,1", "match": "udp dst 7070"}

#: Seconds one refused value may take (parsing only; the work must not start) on an idle
#: machine; the wall-clock limit is stretched by the load per core when a case starts (at
#: load 10 on 2 cores a process gets a fifth of a core), and the CPU limit is not.
CASE_LIMIT_S = 5
#: CPU seconds of this process one refused value may take, whatever the load: what "before
#: any work starts" means (the slowest case, the first to import a command's modules, takes
#: about 0.2 s; an accepted value that starts a run takes seconds).
CASE_CPU_S = 2.0


def _wall_limit() -> float:
    return CASE_LIMIT_S * max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))


def _commands() -> Iterator[tuple[list[str], Any]]:
    def walk(cmd: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
        subs = getattr(cmd, "commands", None)
        if subs:
            # A group that also runs on its own (`kvs`, beside `kvs proxy`) has options too.
            if any(not getattr(p, "is_flag", False) and p.name != "help" for p in cmd.params):
                yield path, cmd
            for name, sub in subs.items():
                yield from walk(sub, path + [name])
        else:
            yield path, cmd

    yield from walk(typer.main.get_command(app), [])


COMMANDS = list(_commands())


def _is_flag(p: Any) -> bool:
    return bool(getattr(p, "is_flag", False)) or p.name == "help"


def _args(path: list[str], cmd: Any, tested: Any, bad: str) -> list[str]:
    """The command line: the tested parameter set to `bad`, required ones valid."""
    opts: list[str] = []
    pos: list[str] = []
    for p in cmd.params:
        is_arg = p.param_type_name == "argument"
        if p is tested:
            if is_arg:
                pos.append(bad)
            else:
                long = next((o for o in p.opts if o.startswith("--")), p.opts[0])
                opts.append(f"{long}={bad}")
        elif p.required:
            assert p.name in REQUIRED, f"{' '.join(path)}: add a valid value of the required {p.name!r} to REQUIRED"
            val = REQUIRED[p.name]
            if is_arg:
                pos.append(val)
            else:
                opts += [p.opts[0], val]
    return path + opts + (["--"] if pos else []) + pos


class _Hang(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Hang()


def _cases() -> list[tuple[str, list[str], Any, Any, str]]:
    out = []
    for path, cmd in COMMANDS:
        for p in cmd.params:
            ty = checked_type(p)
            if ty is None:
                continue
            for bad in ty.invalid_samples():
                out.append((" ".join(path), path, cmd, p, bad))
    return out


def test_every_option_declares_a_checked_type() -> None:
    missing = []
    for path, cmd in COMMANDS:
        for p in cmd.params:
            if _is_flag(p) or (" ".join(path), p.name) in EXEMPT:
                continue
            if checked_type(p) is None:
                missing.append(f"{' '.join(path)} {p.opts[0] if p.opts else p.name}")
    assert not missing, f"options without a checked type (declare them with inswitch.cliopts.option): {missing}"
    assert len(COMMANDS) >= 20


def test_json_means_the_same_in_every_command() -> None:
    """`--json` is a path or `-` (standard output) wherever it appears."""
    seen = 0
    for path, cmd in COMMANDS:
        for p in cmd.params:
            if "--json" in getattr(p, "opts", []):
                assert checked_type(p) is JSON_PATH, f"{' '.join(path)} --json is not cliopts.JSON_PATH"
                seen += 1
    assert seen >= 12


def test_every_invalid_value_is_one_line_and_status_2(capsys: pytest.CaptureFixture[str]) -> None:
    cases = _cases()
    assert len(cases) >= 400, len(cases)
    old = signal.signal(signal.SIGALRM, _alarm)
    failures = []
    try:
        for where, path, cmd, p, bad in cases:
            args = _args(path, cmd, p, bad)
            limit = _wall_limit()
            t0, c0 = time.monotonic(), time.process_time()
            signal.setitimer(signal.ITIMER_REAL, limit)
            try:
                rc: Any = run(app, args)
            except _Hang:
                rc = f"still running after {limit:.1f} s"
            except BaseException as e:  # noqa: BLE001 - a traceback is the failure we look for
                rc = f"raised {type(e).__name__}: {e}"
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            took, cpu = time.monotonic() - t0, time.process_time() - c0
            out, err = capsys.readouterr()
            lines = err.strip().splitlines()
            name = p.opts[0] if p.param_type_name == "option" else p.name
            ok = rc == 2 and len(lines) == 1 and "Traceback" not in err and (name in err or name.upper() in err or bool(p.metavar and p.metavar in err)) and took < limit and cpu < CASE_CPU_S
            if not ok:
                failures.append(f"inswitch {' '.join(args)!r}: status {rc}, {took:.1f} s ({cpu:.1f} s CPU), stderr {err.strip()[:300]!r}")
    finally:
        signal.signal(signal.SIGALRM, old)
    assert not failures, f"{len(failures)} of {len(cases)} bad values not refused in one line:\n" + "\n".join(failures[:40])


def test_experiment_names_are_checked_without_importing_the_experiments() -> None:
    """A bad experiment name is refused from `experiments.NAMES`, not by importing every
    experiment module (matplotlib and every system: the slowest refusal, seconds on a
    loaded machine); the list is every experiment there is."""
    from inswitch.experiments import NAMES, all_experiments

    assert NAMES == set(all_experiments())
    code = ("import sys; from inswitch.cli import app; from inswitch.cliopts import run; "
            "rc = run(app, ['experiment', '--', 'bogus']); print(rc, sorted(m for m in ('matplotlib', 'inswitch.experiments.inaas') if m in sys.modules))")
    cp = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT / "python")})
    assert cp.stdout.split("\n")[-2:] == ["2 []", ""], cp.stdout + cp.stderr


# The issue's hangs (full CPU forever on today's code) and silent acceptances, in-process.
@pytest.mark.parametrize("args,option", [
    (["kvs", "--system", "hare", "--t-wait", "0"], "--t-wait"),
    (["kvs", "--system", "hare", "--t-wait", "-1"], "--t-wait"),
    (["locks", "--system", "hare", "--hold", "-1"], "--hold"),
    (["locks", "--system", "hare", "--service", "-1"], "--service"),
    (["kvs", "--writes", "1.5"], "--writes"),
    (["kvs", "--zipf", "nan"], "--zipf"),
    (["kvs", "--stats", "bogus"], "--stats"),
    (["kvs", "--batch", "0"], "--batch"),
    (["locks", "--exclusive", "2"], "--exclusive"),
    (["locks", "--backend", "real", "--kill-agent-at", "-1"], "--kill-agent-at"),
    (["locks", "--backend", "real", "--duration", "1", "--kill-agent-at", "1"], "--kill-agent-at"),  # not within the run
    (["locks", "--kill-agent-at", "0.5"], "--kill-agent-at"),  # --backend sim has no agent process
    (["tenants", "run", "--loss", "nan"], "--loss"),
    (["tenants", "run", "--budget", "0"], "--budget"),
    (["tenants", "run", "--instances", "0"], "--instances"),
    (["tenants", "run", "--apps", ""], "--apps"),
    (["search", "--lambda", "nan"], "--lambda"),
    (["search", "--hashes", "0"], "--hashes"),
    (["switch", "--device-id", "-1"], "--device-id"),
    (["kvs", "--keys", "100000", "--key-size", "2"], "--key-size"),  # cross-option: 2 bytes tell 65536 keys apart
    (["search", "--registers", "9", "--ways", "2"], "--ways"),
])
def test_issue_examples_refused(args: list[str], option: str, capsys: pytest.CaptureFixture[str]) -> None:
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, _wall_limit())
    try:
        rc = run(app, args)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and option in err, err


def _cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    e = {**os.environ, "PYTHONPATH": str(ROOT / "python"), **(env or {})}
    return subprocess.run([sys.executable, "-m", "inswitch", *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=e)


@pytest.mark.parametrize("args,option", [
    (["wordcount", "--zipf", "1", "--seed", "-1"], "--seed"),
    (["tenants", "run", "--seed", "-1"], "--seed"),
    (["tenants", "run", "--loss", "2"], "--loss"),
    (["tenants", "run", "--apps", "bogus"], "--apps"),
    (["search", "--per-packet", "-1"], "--per-packet"),
    (["search", "--width", "nan"], "--width"),
    (["kvs", "--system", "hare", "--t-wait", "0"], "--t-wait"),
    (["locks", "--system", "hare", "--service", "-1"], "--service"),
])
def test_issue_examples_as_processes(args: list[str], option: str) -> None:
    cp = _cli(*args, timeout=20)
    assert cp.returncode == 2, cp
    assert cp.stderr.count("\n") == 1 and option in cp.stderr and "Traceback" not in cp.stderr, cp.stderr
    assert cp.stdout == ""


def test_the_smallest_accepted_values_finish() -> None:
    """The ranges' low ends are runs, not hangs: the hang cases' nearest valid values end."""
    t0 = time.monotonic()
    cp = _cli("kvs", "--system", "hare", "--t-wait", "0.001", "--duration", "0.1", "--no-rates", "--json", "-", timeout=60)
    assert cp.returncode == 0, cp.stderr
    assert json.loads(cp.stdout)["systems"]["hare"]["correct"] is True
    cp = _cli("locks", "--system", "hare", "--hold", "1e-6", "--service", "1e-6", "--duration", "0.1", "--model-rates", "paper", "--json", "-", timeout=60)
    assert cp.returncode == 0, cp.stderr
    assert json.loads(cp.stdout)["systems"]["hare"]["correct"] is True
    assert time.monotonic() - t0 < 40


def test_version() -> None:
    cp = _cli("--version")
    assert cp.returncode == 0 and cp.stdout.strip() == f"inswitch {inswitch.__version__}", cp


def test_every_command_has_examples_and_described_options() -> None:
    undescribed = []
    for path, cmd in COMMANDS:
        where = " ".join(path)
        assert (cmd.epilog or "").startswith("Examples:"), f"{where}: no Examples: epilog"
        assert f"inswitch {where}" in cmd.epilog, f"{where}: its examples do not run it"
        assert cmd.help, f"{where}: no help"
        for para in cmd.help.split("\n\n"):
            # A paragraph is one line: help lists show it re-wrapped, never broken where the source was.
            assert "\n" not in para or para.startswith(" "), f"{where}: help paragraph broken mid-sentence: {para!r}"
        for p in cmd.params:
            if p.name != "help" and not (getattr(p, "help", None) or "").strip():
                undescribed.append(f"{where} {p.name}")
    assert not undescribed, undescribed


def test_command_list_has_no_sentence_broken_mid_line() -> None:
    """`inswitch --help` lists each command's help as one paragraph, wrapped by the table."""
    cp = _cli("--help", env={"COLUMNS": "200"})
    assert cp.returncode == 0
    rows = [ln for ln in cp.stdout.splitlines() if ln.startswith("│ ")]
    for path, cmd in COMMANDS:
        if len(path) == 1:
            first = cmd.help.split("\n\n")[0]
            assert any(first in r for r in rows), (path, first)


def test_json_dash_is_stdout_and_only_json() -> None:
    """`--json -` means standard output in every command: stdout is one JSON document (the
    tables go to stderr), and the same document a file gets."""
    cp = _cli("resources", "forward", "--json", "-")
    assert cp.returncode == 0, cp.stderr
    assert json.loads(cp.stdout)["fits"] is True
    cp = _cli("locks", "--system", "none", "--duration", "0.2", "--locks", "100", "--cache", "8", "--json", "-")
    assert cp.returncode == 0, cp.stderr
    doc = json.loads(cp.stdout)
    assert doc["systems"]["none"]["correct"] is True and "locks (model, --backend sim): 1 system(s)" in cp.stderr
    assert "wrote" not in cp.stderr


def test_json_file_says_where_it_wrote(tmp_path: Path) -> None:
    out = tmp_path / "sub" / "locks.json"
    cp = _cli("locks", "--system", "none", "--duration", "0.2", "--locks", "100", "--cache", "8", "--json", str(out))
    assert cp.returncode == 0, cp.stderr
    assert f"wrote {out}" in cp.stdout.replace("\n", "")
    assert json.loads(out.read_text())["systems"]["none"]["correct"] is True


def test_tenants_ledger_is_found_from_any_directory(tmp_path: Path) -> None:
    """`tenants run` keeps its ledger in the state directory (INSWITCH_RUN_DIR here), not the
    working directory; `tenants ledger` finds it from another one."""
    run_dir = tmp_path / "run"
    env = {"INSWITCH_RUN_DIR": str(run_dir)}
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    cp = _cli("tenants", "run", "--apps", "bloom", "--json", str(tmp_path / "t.json"), cwd=a, env=env, timeout=120)
    assert cp.returncode == 0, cp.stderr
    ledger_file = run_dir / "inaas-ledger.json"
    assert ledger_file.is_file() and not (a / "out").exists()
    assert str(ledger_file) in cp.stdout.replace("\n", "")
    expected = json.loads((tmp_path / "t.json").read_text())["ledger"]
    cp = _cli("tenants", "ledger", "--json", "-", cwd=b, env=env)
    assert cp.returncode == 0, cp.stderr
    assert json.loads(cp.stdout)["ledger"] == expected
    cp = _cli("tenants", "ledger", cwd=b, env={"INSWITCH_RUN_DIR": str(tmp_path / "empty")})
    assert cp.returncode == 2 and "no ledger" in cp.stderr


def test_every_example_parses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each example in the help is a valid command line: its options parse and pass their
    checks (parsed only, not run; in a scratch directory, as some create their output
    directory when checked)."""
    import shlex

    monkeypatch.chdir(tmp_path)
    root = typer.main.get_command(app)
    seen = 0
    for path, cmd in COMMANDS:
        for line in (cmd.epilog or "").splitlines():
            line = line.strip()
            if not line.startswith(("inswitch ", "sudo inswitch ")):
                continue
            words = shlex.split(line.split(" | ")[0])
            words = words[words.index("inswitch") + 1:]
            node: Any = root
            while getattr(node, "commands", None) and words and words[0] in node.commands:
                node = node.commands[words.pop(0)]
            ctx = node.make_context(node.name, words)  # raises a usage error if it does not parse
            ctx.close()
            seen += 1
    assert seen >= len(COMMANDS)
