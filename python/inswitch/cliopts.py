"""Command-line options declared with their type and range where the command declares them.

One mechanism for every command: an option is `option(default, "--name", type=Int(1), help=...)`.
The type object parses the text, checks the range, says what it accepts (appended to the
help text) and, for the test that walks the CLI, names values it must refuse. A refused value
ends the command with one line naming the option and the accepted range, exit status 2,
before any work starts (`run` below is the CLI's entry point that makes it one line).

    from inswitch.cliopts import Choice, Float, Int, option

    def kvs_cmd(
        cache: int = option(512, "--cache", type=Int(1), help="Objects the switch can hold."),
        writes: float = option(0.0, "--writes", type=Float(0, 1), help="Fraction of PUTs."),
        system: str = option("all", "--system", type=Choice("hare", "netcache", "all"), help="..."),
    ) -> None: ...

A `Words` option is annotated `Any`: typer reads `list[str]` as a repeated option.
Positional arguments use `argument(default, type=..., help=...)` the same way.

Types many commands share live here too, so one rule has one message: `SEED`, `JSON_PATH`
(`--json`: a path, or `-` for standard output; see `inswitch.output`), `OUT_FILE`,
`OUT_DIR`, `IN_FILE`, `PROGRAMS`, `TARGET`, `RACK_NAME` and `Address()`. A rule that ties two options
together cannot live in one declaration: the command checks it first thing and raises
`typer.BadParameter(..., param_hint="--option")`, which `run` prints as one line too.
`tests/test_cli_inputs.py` walks every command and fails for an option without a type.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import typer

# Larger than any count a command takes, smaller than what overflows a u64 in the native code.
HUGE = 10**30


class Checked:
    """Base of the option types: callable text -> value (typer's `parser`), raising
    `typer.BadParameter` with a message that names the accepted values."""

    __name__ = "VALUE"  # typer reads a parser's __name__; the metavar shown in help

    def __call__(self, text: Any) -> Any:  # pragma: no cover - every subclass overrides
        raise NotImplementedError

    def describe(self) -> str:
        """What the option accepts, in a few words (shown in help and in errors)."""
        raise NotImplementedError

    def invalid_samples(self) -> list[str]:
        """Values the option must refuse (the CLI-walking test feeds each one)."""
        return []

    def fail(self, text: Any, why: str = "") -> typer.BadParameter:
        return typer.BadParameter(f"{text!r} is not {self.describe()}{': ' + why if why else ''}")


def _range_text(lo: Any, hi: Any, lo_open: bool = False, hi_open: bool = False) -> str:
    if lo is not None and hi is not None:
        return f"in {'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}"
    if lo is not None:
        return f"{'>' if lo_open else '>='} {lo}"
    if hi is not None:
        return f"{'<' if hi_open else '<='} {hi}"
    return ""


@dataclass(frozen=True)
class Int(Checked):
    """An integer in [lo, hi] (either end may be open-ended with None), a multiple of
    `multiple_of` if given."""

    lo: Optional[int] = None
    hi: Optional[int] = None
    multiple_of: Optional[int] = None
    __name__ = "INTEGER"

    def __call__(self, text: Any) -> int:
        if isinstance(text, int) and not isinstance(text, bool):
            v = text
        else:
            try:
                v = int(str(text).strip().replace("_", ""), 10)
            except ValueError:
                raise self.fail(text) from None
        if (self.lo is not None and v < self.lo) or (self.hi is not None and v > self.hi):
            raise self.fail(text)
        if self.multiple_of and v % self.multiple_of:
            raise self.fail(text)
        return v

    def describe(self) -> str:
        r = _range_text(self.lo, self.hi)
        m = f", a multiple of {self.multiple_of}" if self.multiple_of else ""
        return (f"an integer {r}" if r else "an integer") + m

    def invalid_samples(self) -> list[str]:
        out = ["", "x", "1.5", "nan"]
        if self.lo is not None:
            out.append(str(self.lo - 1))
        if self.hi is not None:
            out.append(str(self.hi + 1))
        else:
            out.append(str(HUGE))
        if self.multiple_of and self.multiple_of > 1:
            out.append(str((self.lo or 0) + 1 if ((self.lo or 0) + 1) % self.multiple_of else (self.lo or 0) + 2))
        return out


@dataclass(frozen=True)
class Float(Checked):
    """A finite number in [lo, hi] (open ends with lo_open/hi_open). NaN and infinities are
    always refused: no option of ours means anything by them."""

    lo: Optional[float] = None
    hi: Optional[float] = None
    lo_open: bool = False
    hi_open: bool = False
    __name__ = "FLOAT"

    def __call__(self, text: Any) -> float:
        try:
            v = float(text) if isinstance(text, (int, float)) else float(str(text).strip())
        except ValueError:
            raise self.fail(text) from None
        if not math.isfinite(v):
            raise self.fail(text)
        if self.lo is not None and (v < self.lo or (self.lo_open and v == self.lo)):
            raise self.fail(text)
        if self.hi is not None and (v > self.hi or (self.hi_open and v == self.hi)):
            raise self.fail(text)
        return v

    def describe(self) -> str:
        r = _range_text(self.lo, self.hi, self.lo_open, self.hi_open)
        return f"a finite number {r}" if r else "a finite number"

    def invalid_samples(self) -> list[str]:
        out = ["", "x", "nan", "inf", "-inf"]
        if self.lo is not None:
            out.append(repr(self.lo) if self.lo_open else repr(self.lo - 1))
        if self.hi is not None:
            out.append(repr(self.hi) if self.hi_open else repr(self.hi + 1))
        else:
            out.append("1e300")
        return out


@dataclass(frozen=True)
class Choice(Checked):
    """One word of a fixed set."""

    words: tuple[str, ...]
    __name__ = "WORD"

    def __init__(self, *words: str) -> None:
        object.__setattr__(self, "words", tuple(words))

    def __call__(self, text: Any) -> str:
        t = str(text).strip()
        if t not in self.words:
            raise self.fail(text)
        return t

    def describe(self) -> str:
        return "one of " + ", ".join(self.words)

    def invalid_samples(self) -> list[str]:
        return ["", "bogus", self.words[0].upper() + "x"]


@dataclass(frozen=True)
class Words(Checked):
    """A comma-separated, non-empty list of distinct words from a fixed set; `all_word`
    (if given) alone means every word. The value is a list in the given order."""

    words: tuple[str, ...]
    all_word: Optional[str] = None
    __name__ = "LIST"

    def __init__(self, words: Sequence[str], all_word: Optional[str] = None) -> None:
        object.__setattr__(self, "words", tuple(words))
        object.__setattr__(self, "all_word", all_word)

    def __call__(self, text: Any) -> list[str]:
        if isinstance(text, list):
            return text
        parts = [p.strip() for p in str(text).split(",")]
        if self.all_word is not None and parts == [self.all_word]:
            return list(self.words)
        if not parts or any(not p for p in parts):
            raise self.fail(text, "an empty item")
        bad = [p for p in parts if p not in self.words]
        if bad:
            raise self.fail(text, f"unknown {', '.join(map(repr, bad))}")
        if len(set(parts)) != len(parts):
            raise self.fail(text, "an item named twice")
        return parts

    def describe(self) -> str:
        extra = f", or {self.all_word}" if self.all_word else ""
        return f"a comma-separated list of {', '.join(self.words)}{extra}"

    def invalid_samples(self) -> list[str]:
        return ["", ",", "bogus", f"{self.words[0]},{self.words[0]}", f"{self.words[0]},,"]


@dataclass(frozen=True)
class Text(Checked):
    """Free text checked by an optional function (text -> value, raising ValueError with the
    reason); `what` describes it ("a rack name", "HOST:PORT"). Empty text is refused unless
    `empty_ok`."""

    what: str
    check: Optional[Callable[[str], Any]] = field(default=None, compare=False)
    empty_ok: bool = False
    bad: tuple[str, ...] = ()
    __name__ = "TEXT"

    def __call__(self, text: Any) -> Any:
        t = str(text)
        if not t.strip() and not self.empty_ok:
            raise self.fail(text, "empty")
        if self.check is None:
            return t
        try:
            return self.check(t)
        except ValueError as e:
            raise self.fail(text, str(e)) from None

    def describe(self) -> str:
        return self.what

    def invalid_samples(self) -> list[str]:
        return ([] if self.empty_ok else [""]) + list(self.bad)


def option(default: Any, *decls: str, type: Checked, help: str, **kw: Any) -> Any:
    """A typer option whose value is parsed and checked by `type`; the help text ends with
    what it accepts."""
    if isinstance(type, Words):
        kw.setdefault("metavar", "LIST")  # (typer would show the annotation, `Any`)
    return typer.Option(default, *decls, parser=type, help=f"{help} ({type.describe()})", **kw)


def argument(default: Any, *, type: Checked, help: str, **kw: Any) -> Any:
    """A positional argument parsed and checked by `type`, like `option`."""
    return typer.Argument(default, parser=type, help=f"{help} ({type.describe()})", **kw)


# Types many commands share. Each is a `Text` with its check, so the walker tests them too.

#: A seed: numpy's generators take 0 .. 2**32 - 1.
SEED = Int(0, 2**32 - 1)


def _address(text: str, off_ok: bool) -> str:
    if off_ok and text.strip().lower() == "off":
        return "off"
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError("expected HOST:PORT, e.g. 127.0.0.1:9559")
    return f"{host}:{int(port)}"


def Address(off_ok: bool = False) -> Text:
    """HOST:PORT (IPv6 hosts in brackets; port 0 asks for any free port), or `off` if
    `off_ok`. The value is normalised (`host:port`)."""
    what = "HOST:PORT (port 0: any free port)" + (", or off" if off_ok else "")
    return Text(what, check=lambda t: _address(t, off_ok), bad=("nohost", "127.0.0.1:99999", "127.0.0.1:x", ":9559"))


def _json_path(text: str) -> str:
    if text == "-":
        return text
    from inswitch.output import writable_problem

    why = writable_problem(text)
    if why:
        raise ValueError(why)
    return text


#: `--json`: a file to write the result to (checked writable before the work starts,
#: missing directories made), or `-` for standard output. Same meaning in every command.
JSON_PATH = Text("a file path, or - for standard output", check=_json_path, bad=("/", "/proc/inswitch-none/x.json"))


def _out_file(text: str) -> str:
    from inswitch.output import writable_problem

    why = writable_problem(text)
    if why:
        raise ValueError(why)
    return text


#: A file a command writes (checked writable before the work; missing directories made).
OUT_FILE = Text("a writable file path", check=_out_file, bad=("/", "/proc/inswitch-none/x"))


def _out_dir(text: str) -> str:
    from inswitch.output import dir_problem

    why = dir_problem(text)
    if why:
        raise ValueError(why)
    return text


#: A directory results are written into (made if missing; must be writable).
OUT_DIR = Text("a writable directory (made if missing)", check=_out_dir, bad=("/proc/inswitch-none",))


def _in_file(text: str) -> str:
    import os

    if not os.path.isfile(text) or not os.access(text, os.R_OK):
        raise ValueError("no such file, or not readable")
    return text


#: An input file that must exist and be readable.
IN_FILE = Text("a readable file", check=_in_file, bad=("/proc/inswitch-none.txt", "/"))


def _programs(text: str) -> str:
    from inswitch import native

    names = native.split_programs(text)  # ValueError when empty
    known = native.program_names()
    for n in names:
        if n.split(":", 1)[0] not in known:
            raise ValueError(f"unknown program {n!r} (known: {', '.join(known)})")
    if len(set(names)) != len(names):
        raise ValueError("a program is named twice")
    for n in names:
        if ":" in n:  # parameters: the program builder checks them (in well under a millisecond)
            native.resources([n], "unbounded")
    return ",".join(names)


#: Program names joined by commas (`forward`, `forward,daiet`, `netsha:slots=8`).
PROGRAMS = Text("program names joined by commas", check=_programs, bad=("bogus", "forward,forward", ",", "netsha:slots=99"))


def _target(text: str) -> str:
    from inswitch import native

    known = native.target_names()
    if text not in known:
        raise ValueError(f"known: {', '.join(known)}")
    return text


#: A target whose limits a program set is checked against (`resources --target`, `switch --target`).
TARGET = Text("a target name", check=_target, bad=("bogus",))


def _rack_name(text: str) -> str:
    from inswitch.topology.errors import RackError
    from inswitch.topology.state import MAX_NAME_LEN, check_name

    try:
        return check_name(text)
    except RackError:
        raise ValueError(f"1-{MAX_NAME_LEN} characters a-z, 0-9, _, starting with a letter") from None


#: A rack name (it prefixes namespaces and interface names).
RACK_NAME = Text("a rack name", check=_rack_name, bad=("Bad-Name", "x" * 40, "1abc"))


def _cores(text: str) -> list[int]:
    cores: list[int] = []
    for part in text.split(","):
        lo, dash, hi = part.strip().partition("-")
        try:
            a, b = int(lo), int(hi) if dash else int(lo)
        except ValueError:
            raise ValueError(f"{part.strip()!r} is not a core number or range N-M") from None
        if not 0 <= a <= b < 1024:
            raise ValueError(f"{part.strip()!r} is outside 0..1023 (or a range N-M with N > M)")
        cores.extend(range(a, b + 1))
    twice = sorted({c for c in cores if cores.count(c) > 1})
    if twice:
        raise ValueError(f"core {twice[0]} is listed twice: each pipe needs its own core")
    allowed = sorted(os.sched_getaffinity(0))
    outside = [c for c in cores if c not in allowed]
    if outside:
        raise ValueError(f"core {outside[0]} is not one this process may run on (allowed: {','.join(map(str, allowed))})")
    return cores


#: Receive-ring slots per AF_PACKET port (`switch --ring-frames`, `fabric up --ring-frames`);
#: the native side checks the same range (`ports::MIN_RING_FRAMES..=MAX_RING_FRAMES`).
RING_FRAMES = Int(32, 65536)

#: CPU cores, one per pipe: `0,1` or `0-1`.
CORES = Text("CPU cores, one per pipe, e.g. 0,1 or 0-1", check=_cores, bad=("x", "1,1", "0-", "3-1", "-1", "1024", "1023"))


def checked_type(param: Any) -> Optional[Checked]:
    """The `Checked` type of a declared typer parameter, or None (for the CLI walker)."""
    info = getattr(getattr(param, "type_descriptor", None), "parameter_info", None)
    parser = getattr(info, "parser", None)
    return parser if isinstance(parser, Checked) else None


def run(app: typer.Typer, args: Optional[list[str]] = None) -> int:
    """Run the CLI: a usage error (bad value, unknown option, missing argument) prints one
    line `inswitch CMD: error: ...` and returns 2; otherwise the command's exit status."""
    from typer import exceptions as tx
    from typer._click import exceptions as cx

    cmd = typer.main.get_command(app)
    try:
        rv = cmd.main(args=args, prog_name="inswitch", standalone_mode=False)
    except cx.NoArgsIsHelpError:
        return 0  # typer has printed the help already
    except cx.UsageError as e:
        where = e.ctx.command_path if e.ctx is not None else "inswitch"
        msg = " ".join(e.format_message().split())
        print(f"{where}: error: {msg}", file=sys.stderr)
        return 2
    except tx.Abort:
        print("aborted", file=sys.stderr)
        return 1
    return rv if isinstance(rv, int) and not isinstance(rv, bool) else 0
