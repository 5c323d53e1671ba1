"""`inswitch wireshark`: the Lua dissectors for DAIET, SwitchAgg, NetSHa, Hare and INaaS
(package data in `inswitch/wireshark/`), copied into Wireshark's personal plugin folder or
listed for `tshark -X lua_script:FILE`."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Optional

import typer

from inswitch.cliopts import Text, option

#: The dissectors, one per system, in the package.
PLUGIN_DIR = Path(__file__).resolve().parent.parent / "wireshark"


def plugins() -> list[Path]:
    """The shipped Lua dissectors."""
    return sorted(PLUGIN_DIR.glob("*.lua"))


def user_plugin_dir() -> Path:
    """Wireshark's personal Lua plugin folder: `$XDG_CONFIG_HOME`-independent, it is
    `~/.local/lib/wireshark/plugins` on Linux (Wireshark ≥ 2.5)."""
    return Path(os.path.expanduser("~")) / ".local" / "lib" / "wireshark" / "plugins"


def tshark_args(files: Optional[list[Path]] = None) -> list[str]:
    """`-X lua_script:FILE` for each dissector: tshark then dissects without installing."""
    return [a for p in (files or plugins()) for a in ("-X", f"lua_script:{p}")]


def install(dest: Optional[Path] = None) -> list[Path]:
    """Copy every dissector into `dest` (default: the personal plugin folder, made if
    missing); returns the files written."""
    d = dest or user_plugin_dir()
    d.mkdir(parents=True, exist_ok=True)
    out = []
    for p in plugins():
        target = d / f"inswitch-{p.name}"
        shutil.copyfile(p, target)
        out.append(target)
    return out


INSTALL_EXAMPLES = """Examples:

  inswitch wireshark install
  tshark -r out/cap/port0.pcapng -V     (then plain tshark shows the five protocols)

  inswitch wireshark install --dir /tmp/plugins
"""

ARGS_EXAMPLES = """Examples:

  tshark $(inswitch wireshark args) -r out/cap/port0.pcapng -V
"""


def register(app: typer.Typer) -> None:
    ws = typer.Typer(help="Wireshark dissectors for DAIET, SwitchAgg, NetSHa, Hare and INaaS.", no_args_is_help=True)
    app.add_typer(ws, name="wireshark")

    @ws.command("install", epilog=INSTALL_EXAMPLES)
    def install_cmd(
        dest: Optional[str] = option(None, "--dir", type=Text("a directory"),
                                     help="Plugin folder to copy into (default: ~/.local/lib/wireshark/plugins)."),
    ) -> None:
        """Copy the dissectors into Wireshark's personal plugin folder (Wireshark and tshark load them at their next start)."""
        try:
            written = install(Path(dest) if dest else None)
        except OSError as e:
            print(f"error: cannot install into {dest or user_plugin_dir()}: {e.strerror or e}", file=sys.stderr)
            raise typer.Exit(2) from None
        for p in written:
            print(f"wrote {p}")

    @ws.command("args", epilog=ARGS_EXAMPLES)
    def args_cmd() -> None:
        """Print tshark's `-X lua_script:FILE` options for the dissectors (no install needed)."""
        print(" ".join(tshark_args()))
