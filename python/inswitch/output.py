"""Where commands write their results (`--json FILE`, `--out`): one place, so every command
checks the path before its work starts (a typo must not cost a long run), creates missing
directories, never leaves a half-written file, and keeps the result if the write fails."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import typer


def ensure_writable(path: str | Path, option: str = "--json") -> Path:
    """Before the work: `path` is not a directory and a file can be created beside it
    (missing directories are made); otherwise a usage error naming `option`."""
    p = Path(path)
    if p.is_dir():
        raise typer.BadParameter(f"{p} is a directory, not a file", param_hint=option)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=p.parent, prefix=f".{p.name}.", suffix=".probe"):
            pass
    except OSError as e:
        raise typer.BadParameter(f"cannot write {p}: {e.strerror or e}", param_hint=option) from None
    return p


def ensure_dir(path: str | Path, option: str = "--out") -> Path:
    """Before the work: `path` is a directory files can be created in (made if missing)."""
    p = Path(path)
    try:
        p.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=p, prefix=".probe."):
            pass
    except OSError as e:
        raise typer.BadParameter(f"cannot write into {p}: {e.strerror or e}", param_hint=option) from None
    return p


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
    the temporary directory instead, the error says where, and the command exits with 2."""
    try:
        return replace_json(path, doc, indent)
    except OSError as e:
        fd, rescue = tempfile.mkstemp(prefix="inswitch-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            f.write(dumps(doc, indent) + "\n")
        print(f"error: cannot write {path}: {e.strerror or e}; the result is in {rescue}", file=sys.stderr)
        raise typer.Exit(2) from None
