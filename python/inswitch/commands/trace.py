"""`inswitch trace`: follow matching packets through a running switch (docs/trace.md).

Arms a trace session on the switch's HTTP address (`POST /api/trace`), prints each packet's
record as it completes (`GET /api/trace?session=ID`, polled), and ends the session when the
count is reached, the timeout passes, or on Ctrl-C."""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from typing import Any, Optional

import typer
from rich.console import Console

from inswitch.cliopts import JSON_PATH, RACK_NAME, Address, Float, Int, Text, option
from inswitch.output import dumps, ensure_writable, write_json

DEFAULT_METRICS = "127.0.0.1:9100"
POLL_S = 0.2


def _check_match(text: str) -> str:
    from inswitch import _native

    return str(_native.trace_filter_check(text))


MATCH = Text("a match expression: eth type N, ip src|dst A.B.C.D[/LEN], ip proto N, udp|tcp [src|dst N], in port N, joined by `and`",
             check=_check_match, bad=("udp dst", "udp dst 99999", "ip src 1.2.3", "foo bar", "udp dst 1 and"))

TRACE_EXAMPLES = """Examples:

  inswitch trace --rack isw --match 'udp dst 7070' --count 3

  inswitch trace --metrics 127.0.0.1:9100 --match 'ip src 10.0.0.1 and tcp dst 5201' --json trace.json
"""


def _http(method: str, url: str, body: Optional[dict[str, Any]] = None, timeout: float = 10.0) -> dict[str, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return dict(json.loads(r.read()))
    except urllib.error.HTTPError as e:
        try:
            msg = json.loads(e.read()).get("error") or str(e)
        except ValueError:
            msg = str(e)
        raise RuntimeError(msg) from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise RuntimeError(f"cannot reach the switch at {url.split('/api')[0]}: {reason}") from None


def _address(rack: Optional[str], metrics: Optional[str]) -> str:
    if rack and metrics:
        raise typer.BadParameter("give --rack or --metrics, not both", param_hint="--rack")
    if rack:
        from inswitch.topology import Rack

        return str(Rack().state(rack).switch.metrics)
    return metrics or DEFAULT_METRICS


def run_trace(addr: str, match: str, count: int, timeout: float, out: Console, json_out: Optional[str]) -> list[dict[str, Any]]:
    """Arm, print each packet as it completes, disarm; the decoded records."""
    base = f"http://{addr}"
    s = _http("POST", f"{base}/api/trace", {"match": match, "count": count, "timeout": timeout})
    sid = s["session"]
    out.print(f"tracing {match!r} on {addr} (session {sid}): up to {count} packet{'s' if count != 1 else ''}, at most {timeout:g} s", highlight=False, soft_wrap=True)
    got: list[dict[str, Any]] = []
    matched = skipped = 0
    deadline = time.monotonic() + timeout
    try:
        while True:
            doc = _http("GET", f"{base}/api/trace?session={sid}")
            matched, skipped = doc["matched"], doc["skipped"]
            for rec in doc["packets"]:
                got.append(rec)
                if json_out != "-":
                    from inswitch.trace import render

                    out.print(render(rec, len(got)), highlight=False, soft_wrap=True, markup=False)
            if doc["done"] or len(got) >= count:
                break
            if time.monotonic() > deadline + 1.0:  # the switch ends it too; do not wait on it
                break
            time.sleep(POLL_S)
    finally:
        try:
            _http("POST", f"{base}/api/trace/stop?session={sid}", {})
        except RuntimeError:
            pass
    if skipped:
        out.print(f"{skipped} matching packets were not traced (too many records waiting)", highlight=False)
    return got


def register(app: typer.Typer) -> None:
    @app.command("trace", epilog=TRACE_EXAMPLES)
    def trace_cmd(
        match: str = option(..., "--match", type=MATCH, help="Which packets to trace (checked at ingress, once per packet)."),
        rack: Optional[str] = option(None, "--rack", type=RACK_NAME, help="Trace in the switch of this rack (`inswitch rack up --name`)."),
        metrics: Optional[str] = option(None, "--metrics", type=Address(), help=f"Trace in the switch serving HTTP (its --metrics address) here (default {DEFAULT_METRICS})."),
        count: int = option(1, "--count", type=Int(1, 10_000), help="Stop after this many packets."),
        timeout: float = option(10.0, "--timeout", type=Float(0, 3600, lo_open=True), help="Stop after this many seconds, traced or not."),
        json_out: Optional[str] = option(None, "--json", type=JSON_PATH, help="Also write the decoded records as JSON."),
    ) -> None:
        """Follow matching packets through a running switch, one line per event.

        For each packet: the parser's outcome, each table applied (key, hit or miss, action and its
        data), each register action (cell before and after, in its named fields), hash
        results, recirculations, clones and multicast ports, the drop reason, the port it
        leaves by. Names and values are decoded by the P4Info, as `tables list` shows them.
        Exit status 1 when no packet matched before the timeout."""
        out, err = Console(), Console(stderr=True)
        if json_out and json_out != "-":
            ensure_writable(json_out)
        try:
            addr = _address(rack, metrics)
            got = run_trace(addr, match, count, timeout, err if json_out == "-" else out, json_out)
        except RuntimeError as e:
            err.print(f"[red]error:[/red] {e}", highlight=False, soft_wrap=True)
            raise typer.Exit(1)
        except Exception as e:
            from inswitch.topology.errors import RackError

            if isinstance(e, RackError):
                err.print(f"[red]error:[/red] {e}", highlight=False, soft_wrap=True)
                raise typer.Exit(1)
            raise
        if json_out == "-":
            sys.stdout.write(dumps({"match": match, "packets": got}) + "\n")
        elif json_out:
            write_json(json_out, {"match": match, "packets": got})
            err.print(f"wrote {json_out}", highlight=False, soft_wrap=True)
        if not got:
            err.print(f"no packet matched in {timeout:g} s", highlight=False)
            raise typer.Exit(1)
