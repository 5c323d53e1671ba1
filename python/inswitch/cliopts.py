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
"""

from __future__ import annotations

import math
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
    """An integer in [lo, hi] (either end may be open-ended with None)."""

    lo: Optional[int] = None
    hi: Optional[int] = None
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
        return v

    def describe(self) -> str:
        r = _range_text(self.lo, self.hi)
        return f"an integer {r}" if r else "an integer"

    def invalid_samples(self) -> list[str]:
        out = ["", "x", "1.5", "nan"]
        if self.lo is not None:
            out.append(str(self.lo - 1))
        if self.hi is not None:
            out.append(str(self.hi + 1))
        else:
            out.append(str(HUGE))
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
    return typer.Option(default, *decls, parser=type, help=f"{help} ({type.describe()})", **kw)


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
