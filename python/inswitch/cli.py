"""The `inswitch` command line. Each area registers its commands from its own module, so
this file only wires them together."""

from __future__ import annotations

import importlib
from typing import Any, Optional

import typer


def _version(value: bool) -> None:
    if value:
        import inswitch

        typer.echo(f"inswitch {inswitch.__version__}")
        raise typer.Exit(0)


def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """In-network computing without the switch vendor."""


# Modules that add commands: each has `register(app: typer.Typer) -> None`.
_COMMAND_MODULES = [
    "inswitch.commands.resources",
    "inswitch.commands.inspect",
    "inswitch.commands.trace",
    "inswitch.ui.cli",
    "inswitch.switchd.cli",
    "inswitch.topology.cli",
    "inswitch.topology.fabric.cli",
    "inswitch.bench.cli",
    "inswitch.bench.aggregation",
    "inswitch.bench.kvs",
    "inswitch.bench.p4runtime",
    "inswitch.experiments.cli",
    "inswitch.demo",
    "inswitch.apps.wordcount.cli",
    "inswitch.apps.netsha.cli",
    "inswitch.apps.hare.cli",
    "inswitch.commands.tenants",
    "inswitch.apps.allreduce.cli",
    "inswitch.commands.wireshark",
    "inswitch.soak.cli",
]


def make_app(modules: list[str]) -> typer.Typer:
    """The CLI with the commands of `modules` (each has `register(app)`)."""
    app = typer.Typer(
        name="inswitch",
        help="In-network computing without the switch vendor: a software PISA switch and the systems that run on it.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_show_locals=False,
    )
    app.callback()(_root)
    _register(app, modules)
    return app


def _register(app: typer.Typer, modules: list[str]) -> None:
    for name in modules:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as e:  # an area not built yet
            if not e.name or not name.startswith(e.name):
                raise
            continue
        mod.register(app)
    _unwrap_help(app)


def _unwrap(doc: str | None) -> str | None:
    """A docstring as help text: the lines of each paragraph joined, so no listing shows a
    sentence broken where the source wrapped it (typer keeps the source's line breaks in
    command lists). Paragraphs stay apart, and indented lines (examples) stay as they are."""
    if not doc:
        return doc
    import inspect

    paras, cur = [], []  # type: ignore[var-annotated]
    for line in inspect.cleandoc(doc).splitlines():
        if not line.strip():
            if cur:
                paras.append(" ".join(cur))
                cur = []
        elif line.startswith(" "):
            if cur:
                paras.append(" ".join(cur))
                cur = []
            paras.append(line)
        else:
            cur.append(line.strip())
    if cur:
        paras.append(" ".join(cur))
    return "\n\n".join(paras)


def _unwrap_help(t: typer.Typer) -> None:
    """Every command's and group's help, unwrapped (see `_unwrap`)."""
    for c in t.registered_commands:
        if c.help is None and c.callback is not None:
            c.callback.__doc__ = _unwrap(c.callback.__doc__)
        else:
            c.help = _unwrap(c.help)
    for g in t.registered_groups:
        if g.typer_instance is not None:
            g.typer_instance.info.help = _unwrap(g.typer_instance.info.help)  # type: ignore[arg-type]
            _unwrap_help(g.typer_instance)


_APP: Optional[typer.Typer] = None


def __getattr__(name: str) -> Any:
    """`app`, every command registered, built on first use."""
    global _APP
    if name == "app":
        if _APP is None:
            _APP = make_app(_COMMAND_MODULES)
        return _APP
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: `inswitch switch` is started once per switch of a rack or fabric and runs for its life:
#: it registers its own command only, since importing every command's module (numpy, the
#: apps, the topology builders) would cost each switch process ~19 MB resident for nothing.
_LEAN = {"switch": ["inswitch.switchd.cli"]}


def main() -> None:
    import sys

    from inswitch.cliopts import run

    lean = _LEAN.get(sys.argv[1]) if len(sys.argv) > 1 else None
    sys.exit(run(make_app(lean) if lean else __getattr__("app")))


if __name__ == "__main__":
    main()
