"""Serving the web view: the page's static files (package data in ui/static, no CDN) and
the JSON API of `view.SwitchView`, as one function an HTTP handler calls per GET.

The switch daemon plugs `switch_handler` into its metrics server (same address as
`/metrics`); `inswitch ui` (ui/rack.py) serves the same files and proxies each switch's
API under `/sw/NAME/`.
"""

from __future__ import annotations

import json
import urllib.parse
from importlib import resources
from typing import Any, Callable, Optional, Sequence

from p4.v1 import p4runtime_pb2

from inswitch.p4rt.schema import P4InfoIndex, RegisterInfo

from .view import ApiError, SwitchView, encode

Response = tuple[bytes, str, int]

_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
_STATIC = ("index.html", "app.js", "style.css")


def static(path: str) -> Optional[Response]:
    """`/` and the page's own files; None for anything else."""
    name = "index.html" if path in ("/", "/index.html") else path.lstrip("/")
    if name not in _STATIC:
        return None
    body = resources.files("inswitch.ui").joinpath("static").joinpath(name).read_bytes()
    return body, _TYPES["." + name.rsplit(".", 1)[1]], 200


def json_response(doc: Any, status: int = 200) -> Response:
    return encode(doc), "application/json", status


def api(view: SwitchView, path: str, query: str) -> Response:
    q = {k: v[-1] for k, v in urllib.parse.parse_qs(query, keep_blank_values=True).items()}
    try:
        return json_response(view.get(path, q))
    except ApiError as e:
        return json_response({"error": str(e)}, e.status)
    except Exception as e:  # e.g. the switch stopping under us: an answer, not a dead thread
        return json_response({"error": f"{type(e).__name__}: {e}"}, 500)


def switch_handler(view: SwitchView, traces: Any = None) -> Callable[[str, str], Optional[Response]]:
    """For MetricsServer(other=...): the page and /api/* of one switch; with `traces`
    (inswitch.trace.Sessions), `GET /api/trace?session=ID` collects a trace session's packets."""

    def handle(path: str, query: str) -> Optional[Response]:
        if path == "/api/trace" and traces is not None:
            q = urllib.parse.parse_qs(query)
            sid = (q.get("session") or [""])[-1]
            if not sid.isdigit():
                return json_response({"error": "give ?session=ID (from POST /api/trace)"}, 400)
            return _trace_call(lambda: traces.poll(int(sid)))
        if path.startswith("/api/"):
            return api(view, path, query)
        return static(path)

    return handle


def _trace_call(fn: Callable[[], Any]) -> Response:
    from inswitch.trace import SessionError

    try:
        return json_response(fn())
    except SessionError as e:
        return json_response({"error": str(e)}, e.status)
    except Exception as e:  # the switch stopping under us: an answer, not a dead thread
        return json_response({"error": f"{type(e).__name__}: {e}"}, 500)


def trace_post_handler(traces: Any) -> Callable[[str, str, bytes], Optional[Response]]:
    """For MetricsServer(post=...): `POST /api/trace` with `{"match", "count", "timeout"}`
    arms a trace session (answer `{"session": ID, ...}`); `POST /api/trace/stop?session=ID`
    ends it. Arming changes nothing a packet sees, so it is served on the read-only address
    (docs/trace.md)."""

    def handle(path: str, query: str, body: bytes) -> Optional[Response]:
        if path == "/api/trace":
            try:
                doc = json.loads(body or b"{}")
            except ValueError:
                return json_response({"error": "the body must be JSON: {\"match\": ..., \"count\": N, \"timeout\": S}"}, 400)
            if not isinstance(doc, dict):
                return json_response({"error": "the body must be a JSON object"}, 400)
            return _trace_call(lambda: traces.arm(doc.get("match"), doc.get("count", 1), doc.get("timeout", 10.0)))
        if path == "/api/trace/stop":
            sid = (urllib.parse.parse_qs(query).get("session") or [""])[-1]
            if not sid.isdigit():
                return json_response({"error": "give ?session=ID"}, 400)
            return _trace_call(lambda: traces.stop(int(sid)))
        return None

    return handle


class LocalReader:
    """A `decode.Reader` over the switch daemon's own Device: the same reads a P4Runtime
    client makes, without the gRPC round trip (and without a controller session)."""

    def __init__(self, device: Any) -> None:
        self.device = device

    @property
    def schema(self) -> P4InfoIndex:
        return self.device.pipeline.index

    def read(self, entities: Sequence[p4runtime_pb2.Entity]) -> list[p4runtime_pb2.Entity]:
        out, errors = self.device.read_batch(entities)
        err = next((e for e in errors if e is not None), None)
        if err is not None:
            raise KeyError(getattr(err, "message", str(err)))
        return out

    def register_values(self, r: RegisterInfo, index: Optional[int]) -> list[tuple[int, int]]:
        with self.device.lock:
            return list(self.device._register_cells(r.id, index))


def local_view(server: Any, dp: Any, name: str = "s1") -> SwitchView:
    """The view of the switch a `SwitchServer` serves over data plane `dp`."""
    ports = list(dp.port_names())
    return SwitchView(LocalReader(server.device), lambda: json.loads(dp.counters_json()), lambda: list(server.device.pipeline.programs), ports, name)
