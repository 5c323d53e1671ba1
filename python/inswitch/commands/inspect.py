"""`inswitch registers read` and `inswitch tables list`: a running switch's state, decoded
(see p4rt/decode.py), from the command line, for a rack (`--rack NAME`) or any P4Runtime
address. Reads only: a backup controller session, so they work whoever is primary."""

from __future__ import annotations

import sys
from typing import Any, Optional

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from inswitch.cliopts import JSON_PATH, RACK_NAME, Address, Text, argument, option
from inswitch.output import dumps, ensure_writable, write_json
from inswitch.tables import show


RACK = option(None, "--rack", type=RACK_NAME, help="Read the switch of this rack (`inswitch rack up --name`).")
P4RT = option(None, "--p4runtime", type=Address(), help="Read the switch serving P4Runtime here (default 127.0.0.1:9559).")
JSON = option(None, "--json", type=JSON_PATH, help="Write the decoded state as JSON.")


def switch_address(rack: Optional[str], p4runtime: Optional[str]) -> str:
    """The P4Runtime address `--rack`/`--p4runtime` name (one at most); exit 2 if both."""
    if rack and p4runtime:
        raise typer.BadParameter("give --rack or --p4runtime, not both", param_hint="--rack")
    if rack:
        from inswitch.topology import Rack

        return Rack().state(rack).switch.p4runtime
    return p4runtime or "127.0.0.1:9559"


def _check_json(path: Optional[str]) -> None:
    if path and path != "-":
        ensure_writable(path)


def _emit_json(path: str, doc: Any) -> None:
    if path == "-":
        sys.stdout.write(dumps(doc) + "\n")
    else:
        write_json(path, doc)
        Console(stderr=True).print(f"wrote {path}", highlight=False, soft_wrap=True)


def _table() -> Table:
    return Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)


def _col(t: Table, name: str, number: bool = False) -> None:
    # fold, never ellipsize: a number that does not fit wraps whole onto the next line
    t.add_column(name, justify="right" if number else "left", overflow="fold")


def render_register(doc: dict[str, Any], out: Console) -> None:
    names = [f["name"] for f in doc["fields"]] or ["value"]
    shown = [c for c in doc["cells"] if c["raw"]] if len(doc["cells"]) > 1 else doc["cells"]
    out.print(f"[bold]{doc['name']}[/bold]: {doc['size']} cells of {doc['bits']} bits" + (f"; {doc['doc']}" if doc["doc"] else ""), highlight=False)
    t = _table()
    _col(t, "index", True)
    for n in names:
        _col(t, n, True)
    if doc["fields"]:
        _col(t, "raw", True)
    for c in shown:
        t.add_row(str(c["index"]), *(str(c[n]) for n in names), *([str(c["raw"])] if doc["fields"] else []))
    show(out, t)
    if len(doc["cells"]) > 1:
        out.print(f"{len(shown)} of {len(doc['cells'])} cells are non-zero (zero cells not listed)", highlight=False)


def render_table(doc: dict[str, Any], out: Console) -> None:
    keys = [k["name"] for k in doc["keys"]]
    out.print(f"[bold]{doc['name']}[/bold]: {doc['count']} of {doc['size']} entries", highlight=False)
    t = _table()
    for k in keys:
        _col(t, k)
    _col(t, "action")
    _col(t, "params")
    if any(e["priority"] for e in doc["entries"]):
        _col(t, "priority", True)
    for e in doc["entries"]:
        row = [e["match"].get(k, "*") for k in keys] + [e["action"], ", ".join(f"{n}={v}" for n, v in e["params"].items())]
        if len(t.columns) > len(row):
            row.append(str(e["priority"]))
        t.add_row(*row)
    show(out, t)
    d = doc.get("default")
    if d:
        out.print(f"default action: {d['action']}" + (f"({', '.join(f'{n}={v}' for n, v in d['params'].items())})" if d["params"] else ""), highlight=False)


def _fail(msg: str, code: int = 1) -> typer.Exit:
    Console(stderr=True).print(f"[red]error:[/red] {msg}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def _cell_ref(text: str) -> str:
    """Checked at parse time: NAME or NAME[INDEX] (decode.parse_cell_ref raises ValueError)."""
    from inswitch.p4rt import decode

    decode.parse_cell_ref(text)
    return text


READ_EXAMPLES = """Examples:

  inswitch registers read 'rx_port_counters[0]' --rack isw

  inswitch registers read forward.tx_port_counters --p4runtime 127.0.0.1:9559 --json -
"""

LIST_EXAMPLES = """Examples:

  inswitch tables list l2_dmac --rack isw

  inswitch tables list --rack isw --json tables.json
"""


def register(app: typer.Typer) -> None:
    reg_app = typer.Typer(name="registers", help="Read a running switch's registers, decoded into their named fields.", no_args_is_help=True)
    tab_app = typer.Typer(name="tables", help="List a running switch's match tables, entries decoded by the P4Info.", no_args_is_help=True)
    app.add_typer(reg_app, name="registers")
    app.add_typer(tab_app, name="tables")

    @reg_app.command("read", epilog=READ_EXAMPLES)
    def read_cmd(
        ref: str = argument(..., type=Text("a register name, optionally with [INDEX]", check=_cell_ref, bad=("x[", "x[-1]", "[0]")), metavar="NAME[INDEX]", help="A register (forward.rx_port_counters, or rx_port_counters if unique), optionally one cell: rx_port_counters[0]."),
        rack: Optional[str] = RACK,
        p4runtime: Optional[str] = P4RT,
        json_out: Optional[str] = JSON,
    ) -> None:
        """Read a register's cells (every non-zero one, or the one at INDEX), each split
        into the fields its program declares (packets and bytes for the port counters)."""
        from inswitch.p4rt import decode

        name, index = decode.parse_cell_ref(ref)
        _check_json(json_out)
        doc = _read(rack, p4runtime, lambda c: c.register_cells(name, index))
        if json_out:
            _emit_json(json_out, doc)
        else:
            render_register(doc, Console())

    @tab_app.command("list", epilog=LIST_EXAMPLES)
    def list_cmd(
        table: Optional[str] = argument(None, type=Text("a table name"), metavar="[NAME]", help="One table (l2_dmac or forward.l2_dmac); all tables when left out."),
        rack: Optional[str] = RACK,
        p4runtime: Optional[str] = P4RT,
        json_out: Optional[str] = JSON,
    ) -> None:
        """List match-table entries: MAC addresses as MACs, IPv4 as dotted quads, LPM
        prefixes as ADDR/LEN, action parameters by name, and each table's default action."""
        _check_json(json_out)

        def get(c: Any) -> list[dict[str, Any]]:
            names = [table] if table else [t.alias for t in c.schema.tables]
            return [c.table_entries(n) for n in names]

        docs = _read(rack, p4runtime, get)
        if json_out:
            _emit_json(json_out, docs if table is None else docs[0])
        else:
            out = Console()
            for d in docs:
                render_table(d, out)


def _read(rack: Optional[str], p4runtime: Optional[str], fn: Any) -> Any:
    from inswitch.p4rt.errors import P4RuntimeError
    from inswitch.topology import control
    from inswitch.topology.errors import RackError

    try:
        addr = switch_address(rack, p4runtime)
        with control.connect(addr, read_only=True) as c:
            return fn(c)
    except (KeyError, IndexError) as e:
        raise _fail(str(e.args[0]) if e.args else str(e), 2)
    except (RackError, P4RuntimeError) as e:
        raise _fail(str(e))
