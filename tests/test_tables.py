"""Tables never cut a number (`inswitch.tables.show`): at 80 columns in a terminal and when
piped, every number a command puts in a table is printed whole. The numbers checked come
from the command's own JSON, formatted as the table formats them."""

from __future__ import annotations

import io
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from inswitch.tables import cells, show

ANSI = re.compile(r"\x1b\[[0-9;?]*[a-zA-Z]")


def tokens(text: str) -> set[str]:
    """Whitespace- and border-separated pieces of the output."""
    return set(re.split(r"[\s│┃┆║|]+", ANSI.sub("", text)))


def run_cli(args: list[str], terminal: bool) -> str:
    """`inswitch ARGS` piped, or as on an 80-column terminal (rich reads FORCE_COLOR and COLUMNS)."""
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "NO_COLOR", "COLUMNS", "TERM")}
    if terminal:
        env.update(FORCE_COLOR="1", COLUMNS="80", TERM="xterm-256color")
    p = subprocess.run([sys.executable, "-m", "inswitch", *args], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode in (0, 1), p.stderr
    return ANSI.sub("", p.stdout)


def test_show_keeps_every_number_whole_at_80_columns_and_piped() -> None:
    rng = random.Random(7)
    t = Table(title="wide table")
    headers = ["system", "recall", "F1", "agent packets", "agent answers", "total seconds", "select %", "search %", "net %", "agent %", "stable hit rate"]
    for h in headers:
        t.add_column(h)
    want = []
    for i in range(6):
        row = [f"mode-{i}"] + [f"{rng.uniform(0, 10**rng.randint(0, 9)):.{rng.randint(0, 4)}f}" for _ in headers[1:]]
        want += row
        t.add_row(*row)
    for terminal in (True, False):
        buf = io.StringIO()
        show(Console(file=buf, width=80, force_terminal=terminal, color_system=None), t)
        out = buf.getvalue()
        assert "…" not in out
        assert all(len(line) <= 80 for line in out.splitlines()) or not terminal
        got = tokens(out)
        assert set(want) <= got, set(want) - got
        for h in headers:  # headers whole too (a header may sit on one line of its own)
            assert h in out, h


def test_piped_output_is_plain_aligned_text() -> None:
    t = Table(title="t")
    t.add_column("name")
    t.add_column("value")
    t.add_row("[red]a[/red]", "65536")
    t.add_row("bb", "7")
    buf = io.StringIO()
    show(Console(file=buf, width=20, force_terminal=False), t)
    assert buf.getvalue().splitlines() == ["t", "name  value", "----  -----", "a     65536", "bb        7"]
    assert cells(t)[1][0] == ["a", "65536"]


def test_resources_numbers_whole_piped_and_at_80_columns() -> None:
    doc = json.loads(run_cli(["resources", "forward,daiet", "--json", "-"], terminal=False))
    lim = doc["target"]
    want = {f"{s['sram_blocks']}/{lim['sram_blocks_per_stage']}" for s in doc["stages"]}
    want |= {str(r["cells"]) for r in doc["registers"]} | {str(r["bits"]) for r in doc["registers"]}
    want |= {str(t["entries"]) for t in doc["tables"]}
    assert "65536" in want  # DAIET's register arrays: the number that used to print as 65…
    for terminal in (False, True):
        out = run_cli(["resources", "forward,daiet"], terminal)
        assert "…" not in out, out
        assert want <= tokens(out), sorted(want - tokens(out))


def test_kvs_hit_rates_whole_piped_and_at_80_columns(tmp_path: Path) -> None:
    args = ["kvs", "--keys", "500", "--duration", "0.3", "--cache", "64", "--no-rates"]
    for terminal in (False, True):
        j = tmp_path / f"kvs-{terminal}.json"
        out = run_cli([*args, "--json", str(j)], terminal)
        doc = json.loads(j.read_text())
        want = set()
        for r in doc["systems"].values():
            want |= {f"{r['stable_hit_rate']:.3f}", f"{r['recovered_hit_rate']:.3f}", str(r["offloads"]),
                     str(r["control"]["table_ops"]), str(r["control"]["packet_ops"])}
        assert "…" not in out, out
        assert want <= tokens(out), (sorted(want - tokens(out)), out)
        for h in ("stable hit rate", "recovered", "table ops"):
            assert h in out


def test_search_headers_and_numbers_whole_at_80_columns(tmp_path: Path) -> None:
    j = tmp_path / "search.json"
    out = run_cli(["search", "--base", "1000", "--queries", "10", "--json", str(j)], terminal=True)
    doc = json.loads(j.read_text())
    want = set()
    for m in doc["modes"].values():
        want |= {f"{m['recall']:.3f}", f"{m['f1']:.3f}", str(m["agent_packets"]), str(m["agent_answers"])}
    assert "…" not in out, out
    assert want <= tokens(out), (sorted(want - tokens(out)), out)
    assert "recall" in out and "agent packets" in out


def test_every_table_a_command_prints_goes_through_show() -> None:
    # A table printed with `console.print` is cut to the terminal's width; `show` is the one
    # rule that keeps its numbers whole. Any module that builds a rich Table prints it there.
    import ast

    import inswitch

    root = Path(inswitch.__file__).parent
    direct = []
    for p in sorted(root.rglob("*.py")):
        if p.name == "tables.py":
            continue
        tree = ast.parse(p.read_text(), str(p))
        tables = {t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
                  and getattr(n.value.func, "id", None) == "Table" for t in n.targets if isinstance(t, ast.Name)}
        for n in ast.walk(tree):
            if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "print" and n.args
                    and isinstance(n.args[0], ast.Name) and n.args[0].id in tables):
                direct.append(f"{p.relative_to(root)}:{n.lineno}")
    assert not direct, f"tables printed without inswitch.tables.show: {direct}"
