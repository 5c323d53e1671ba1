"""`inswitch ui`: serve the live web view of a rack (docs/ui.md)."""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Optional

import typer
from rich.console import Console

from inswitch.cliopts import RACK_NAME, Address, option

DEFAULT_LISTEN = "127.0.0.1:8080"


UI_EXAMPLES = """Examples:

  inswitch ui --rack isw

  inswitch ui --rack isw --listen 127.0.0.1:0 --allow-writes
"""


def register(app: typer.Typer) -> None:
    @app.command("ui", epilog=UI_EXAMPLES)
    def ui_cmd(
        rack: str = option("isw", "--rack", type=RACK_NAME, help="The rack to show (`inswitch rack up --name`)."),
        listen: str = option(DEFAULT_LISTEN, "--listen", type=Address(), help="Where to serve the page (port 0: any free port)."),
        allow_writes: bool = typer.Option(False, "--allow-writes", help="Let the page write register cells (through P4Runtime). Off: the page only reads."),
    ) -> None:
        """Serve one live web page for a rack, until Ctrl-C.

        The page shows the topology with packet rates on the links, per-port and per-program
        counters and drops, decoded tables and registers, and a panel per system (DAIET,
        Hare, NetSHa, INaaS, SwitchAgg). Start the rack first (`inswitch rack up --hosts 3
        --name isw`), then open http://127.0.0.1:8080/."""
        from inswitch.topology.errors import RackError

        from .rack import UiServer, from_rack

        out, err = Console(), Console(stderr=True)
        try:
            topo = from_rack(rack)
            srv = UiServer(listen, topo, allow_writes)
        except (RackError, OSError) as e:
            err.print(f"[red]error:[/red] {e}", highlight=False, soft_wrap=True)
            raise typer.Exit(1)
        stop = threading.Event()

        def on_signal(signum: int, frame: Optional[FrameType]) -> None:
            stop.set()

        old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        srv.start()
        out.print(f"serving the view of {topo.title} at [bold]http://{srv.address}/[/bold] ({'writes allowed' if allow_writes else 'read-only'}); Ctrl-C stops", highlight=False, soft_wrap=True)
        try:
            while not stop.wait(0.5):
                pass
        finally:
            srv.stop()
            for s, h in old.items():
                signal.signal(s, h)

