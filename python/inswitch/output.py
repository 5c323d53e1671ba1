"""Where commands write their results (`--json FILE`, `--out`): one place, so every command
checks the path before its work starts (a typo must not cost a long run), creates missing
directories, never leaves a half-written file, and keeps the result if the write fails.

`--json -` means standard output in every command: the JSON is the only thing on stdout
(the command's tables and messages go to stderr, see `console_for`), so it can be piped.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import typer
from rich.console import Console


STDOUT = "-"


def is_stdout(path: str | Path | None) -> bool:
    """`--json -`: the result goes to standard output."""
    return path is not None and str(path) == STDOUT


def console_for(json_out: str | Path | None, **kw: Any) -> Console:
    """The console a command prints its tables and messages on: stderr when its JSON goes
    to stdout (so stdout stays valid JSON), stdout otherwise."""
    return Console(stderr=is_stdout(json_out), **kw)


def note_written(console: Console, *paths: str | Path | None) -> None:
    """Say where a command wrote its files (nothing for `-`, the JSON on stdout)."""
    shown = [str(p) for p in paths if p is not None and not is_stdout(p)]
    if shown:
        console.print(f"wrote {' and '.join(shown)}", highlight=False, soft_wrap=True)


def writable_problem(path: str | Path) -> str | None:
    """Why a file cannot be written at `path` (missing directories are made), or None."""
    p = Path(path)
    if p.is_dir():
        return f"{p} is a directory, not a file"
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=p.parent, prefix=f".{p.name}.", suffix=".probe"):
            pass
    except OSError as e:
        return f"cannot write {p}: {e.strerror or e}"
    return None


def dir_problem(path: str | Path) -> str | None:
    """Why files cannot be created in directory `path` (made if missing), or None."""
    p = Path(path)
    try:
        p.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=p, prefix=".probe."):
            pass
    except OSError as e:
        return f"cannot write into {p}: {e.strerror or e}"
    return None


def ensure_writable(path: str | Path, option: str = "--json") -> Path:
    """Before the work: `path` is `-` (standard output), or not a directory and a file can be
    created beside it (missing directories are made); otherwise a usage error naming `option`."""
    if is_stdout(path):
        return Path(STDOUT)
    why = writable_problem(path)
    if why:
        raise typer.BadParameter(why, param_hint=option)
    return Path(path)


def ensure_dir(path: str | Path, option: str = "--out") -> Path:
    """Before the work: `path` is a directory files can be created in (made if missing)."""
    why = dir_problem(path)
    if why:
        raise typer.BadParameter(why, param_hint=option)
    return Path(path)


def dumps(doc: Any, indent: int | None = 2) -> str:
    """The JSON text every command writes (numpy scalars and other numbers as floats)."""
    return json.dumps(doc, indent=indent, default=float)


def replace_json(path: str | Path, doc: Any, indent: int | None = 2) -> Path:
    """Write `doc` atomically (a temporary file beside it renamed over it, directories made):
    a reader never sees half a file. OSError if it cannot."""
    p = Path(path)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(dumps(doc, indent) + "\n")
        os.replace(tmp, p)
    except OSError:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        raise
    return p


def write_json(path: str | Path, doc: Any, indent: int | None = 2) -> Path:
    """Write `doc` to `path` atomically (a temporary file renamed over it). If that fails
    (the disk filled during the run, the directory went away), the result goes to a file in
    the temporary directory instead, the error says where, and the command exits with 2.
    `-` writes the JSON to standard output."""
    if is_stdout(path):
        sys.stdout.write(dumps(doc, indent) + "\n")
        sys.stdout.flush()
        return Path(STDOUT)
    try:
        return replace_json(path, doc, indent)
    except OSError as e:
        fd, rescue = tempfile.mkstemp(prefix="inswitch-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            f.write(dumps(doc, indent) + "\n")
        print(f"error: cannot write {path}: {e.strerror or e}; the result is in {rescue}", file=sys.stderr)
        raise typer.Exit(2) from None
