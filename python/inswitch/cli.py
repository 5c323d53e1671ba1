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

@app.callback()
def _root() -> None:
    """In-network computing without the switch vendor."""


# Modules that add commands: each has `register(app: typer.Typer) -> None`.
_COMMAND_MODULES = [
    "inswitch.commands.resources",
    "inswitch.switchd.cli",
    "inswitch.topology.cli",
    "inswitch.bench.cli",
    "inswitch.bench.aggregation",
    "inswitch.experiments.cli",
    "inswitch.demo",
    "inswitch.apps.wordcount.cli",
    "inswitch.apps.netsha.cli",
    "inswitch.apps.hare.cli",
    "inswitch.commands.tenants",
    "inswitch.apps.allreduce.cli",
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


_register()


def main() -> None:
    import sys

    from inswitch.cliopts import run

    sys.exit(run(app))


if __name__ == "__main__":
    main()
