"""Printing tables so that no number is ever cut off: the one rule every command uses.

Commands build a `rich.table.Table` as usual and print it with `show(console, table)`:

- not a terminal (piped, redirected): plain aligned text, every cell whole, no width limit
  and no colours, so `inswitch resources forward,daiet > f` keeps `65536`, not `65…`;
- a terminal the table fits in: rich's table, which then shrinks nothing;
- a terminal too narrow: each row becomes a block of `header  value` lines (the row
  wraps; numbers never do), under the title.

Why not rich alone: rich shrinks a table to the console by eliding cells and headers
(`0.4…`, `reca…`), which is exactly what must not happen to a number.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text


def plain(cell: Any) -> str:
    """The text of a cell without markup or styles."""
    if isinstance(cell, Text):
        return cell.plain
    if isinstance(cell, str):
        try:
            return Text.from_markup(cell).plain
        except Exception:  # text that only looks like markup
            return cell
    return str(cell)


def cells(table: Table) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of a rich table, as plain text."""
    headers = [plain(c.header) for c in table.columns]
    cols = [[plain(x) for x in c._cells] for c in table.columns]
    n = max((len(c) for c in cols), default=0)
    rows = [[c[i] if i < len(c) else "" for c in cols] for i in range(n)]
    return headers, rows


def _is_number(s: str) -> bool:
    t = s.strip().rstrip("%×x").replace(",", "").replace("_", "")
    try:
        float(t)
        return True
    except ValueError:
        return False


def plain_lines(table: Table) -> list[str]:
    """The table as aligned plain text: numbers right-aligned, everything whole."""
    headers, rows = cells(table)
    # A multi-line cell is printed on its lines; widths take the longest line.
    widths = [max([len(h)] + [max((len(x) for x in r[i].split("\n")), default=0) for r in rows]) for i, h in enumerate(headers)]
    numeric = [bool(rows) and all(_is_number(r[i]) or r[i].strip() in ("", "-", "n/a") for r in rows) for i in range(len(headers))]

    def fmt(row: list[str]) -> list[str]:
        parts = [c.split("\n") for c in row]
        height = max((len(p) for p in parts), default=1)
        out = []
        for k in range(height):
            cols = []
            for i, p in enumerate(parts):
                x = p[k] if k < len(p) else ""
                cols.append(x.rjust(widths[i]) if numeric[i] else x.ljust(widths[i]))
            out.append("  ".join(cols).rstrip())
        return out

    lines = []
    if table.title:
        lines.append(plain(table.title))
    if table.show_header:
        lines.extend(fmt(headers))
        lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        lines.extend(fmt(r))
    if table.caption:
        lines.append(plain(table.caption))
    return lines


def natural_width(console: Console, table: Table) -> int:
    """Columns the table needs to show every cell and header on its longest line."""
    headers, rows = cells(table)
    widths = [max([len(h)] + [max((len(x) for x in r[i].split("\n")), default=0) for r in rows]) for i, h in enumerate(headers)]
    pad = table.padding[1] + table.padding[3] if hasattr(table, "padding") else 2
    edges = (len(widths) + 1) if table.box is not None else max(0, len(widths) - 1)
    return sum(widths) + pad * len(widths) + edges


def show(console: Console, table: Table) -> None:
    """Print `table` on `console` with every number whole (see the module docstring)."""
    if not console.is_terminal:
        for line in plain_lines(table):
            console.file.write(line + "\n")
        console.file.flush()
        return
    if natural_width(console, table) <= console.width:
        for c in table.columns:
            c.no_wrap = True  # it fits: nothing needs to wrap
        console.print(table)
        return
    headers, rows = cells(table)
    if table.title:
        console.print(Text(plain(table.title), style="bold"), soft_wrap=True)
    hw = max((len(h) for h in headers), default=0)
    for i, r in enumerate(rows):
        if i:
            console.print("")
        for h, v in zip(headers, r):
            lines = v.split("\n") or [""]
            console.print(Text(h.ljust(hw) + "  " + lines[0]), soft_wrap=True)
            for more in lines[1:]:
                console.print(Text(" " * (hw + 2) + more), soft_wrap=True)
    if table.caption:
        console.print(Text(plain(table.caption)), soft_wrap=True)
