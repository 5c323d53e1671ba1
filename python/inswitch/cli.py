"""The `inswitch` command line. Each area registers its commands from its own module, so
this file only wires them together."""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="inswitch",
    help="In-network computing without the switch vendor: a software PISA switch and the systems that run on it.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
)

def _version(value: bool) -> None:
    if value:
        import inswitch

        typer.echo(f"inswitch {inswitch.__version__}")
        raise typer.Exit(0)


@app.callback()
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


def _register() -> None:
    for name in _COMMAND_MODULES:
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


_register()


def main() -> None:
    import sys

    from inswitch.cliopts import run

    sys.exit(run(app))


if __name__ == "__main__":
    main()
