"""`inswitch ui`: one page for several switches and the hosts between them.

The server knows a `Topology` (switches with the address of their web API, hosts, links);
it serves the page and `/api/topology` itself and forwards `/sw/NAME/api/...` to switch
NAME's own endpoints (switchd serves them beside `/metrics`), so the page polls every
switch through one origin. A rack gives one switch and its hosts (`from_rack`); a fabric
gives more switches and switch-to-switch links, and needs only its own `from_...`.

Writes (`--allow-writes`): POST /sw/NAME/api/register {"name", "index", "value"} sets one
register cell through P4Runtime, as a controller session of its own. Refused otherwise.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional

import inswitch

from . import web

PROXY_TIMEOUT = 5.0
MAX_POST = 64 * 1024


@dataclass
class SwitchNode:
    name: str
    http: str  # HOST:PORT of the switch's metrics/web server
    p4runtime: str
    programs: list[str] = field(default_factory=list)
    ports: list[str] = field(default_factory=list)


@dataclass
class HostNode:
    name: str
    ip: str = ""
    mac: str = ""


@dataclass
class Link:
    """A cable between nodes `a` and `b`; its rate is read from port `port` of `switch`."""

    a: str
    b: str
    switch: str
    port: int


@dataclass
class Topology:
    title: str
    switches: list[SwitchNode]
    hosts: list[HostNode] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> "Topology":
        """From plain data: {"title", "switches": [{"name", "http", "p4runtime", "programs"}],
        "hosts": [{"name", "ip", "mac"}], "links": [{"a", "b", "switch", "port"}]} — what a
        fabric (several switches, switch-to-switch links) hands to `UiServer`."""
        return cls(
            str(doc.get("title", "")),
            [SwitchNode(**s) for s in doc["switches"]],
            [HostNode(**h) for h in doc.get("hosts", [])],
            [Link(**link) for link in doc.get("links", [])],
        )

    def switch(self, name: str) -> Optional[SwitchNode]:
        return next((s for s in self.switches if s.name == name), None)

    def doc(self, writes: bool) -> dict[str, Any]:
        return {
            "title": self.title,
            "writes": writes,
            "switches": [{"name": s.name, "base": f"sw/{s.name}/", "programs": s.programs, "ports": s.ports, "p4runtime": s.p4runtime} for s in self.switches],
            "hosts": [asdict(h) for h in self.hosts],
            "links": [asdict(link) for link in self.links],
        }


def from_rack(name: str) -> Topology:
    """The rack's switch (named s1), its hosts and one link per host. RackError if there is
    no such rack."""
    from inswitch.topology import Rack

    st = Rack().state(name)
    sw = SwitchNode("s1", st.switch.metrics, st.switch.p4runtime, list(st.programs))
    hosts = [HostNode(h.name, h.ip, h.mac) for h in st.hosts]
    links = [Link(h.name, "s1", "s1", h.port) for h in st.hosts]
    return Topology(f"rack {st.name}", [sw], hosts, links)


def _proxy(sw: SwitchNode, rest: str, query: str) -> web.Response:
    url = f"http://{sw.http}/{rest}" + (f"?{query}" if query else "")
    try:
        with urllib.request.urlopen(url, timeout=PROXY_TIMEOUT) as r:
            return r.read(), r.headers.get("Content-Type", "application/json"), r.status
    except urllib.error.HTTPError as e:
        return e.read(), e.headers.get("Content-Type", "application/json"), e.code
    except OSError as e:
        return web.json_response({"error": f"switch {sw.name} does not answer at {sw.http}: {getattr(e, 'reason', e)}"}, 502)


def write_cell(sw: SwitchNode, body: dict[str, Any]) -> web.Response:
    """Set one register cell through P4Runtime; 400 for a bad request, 409 if another
    controller is primary."""
    from inswitch.p4rt import bytestrings
    from inswitch.p4rt.client import SwitchClient
    from inswitch.p4rt.errors import P4RuntimeError

    name, index, value = body.get("name"), body.get("index"), body.get("value")
    if not isinstance(name, str) or not isinstance(index, int) or isinstance(index, bool) or index < 0:
        return web.json_response({"error": 'give {"name": REGISTER, "index": N, "value": V}'}, 400)
    try:
        v = bytestrings.parse_int(value if isinstance(value, (int, str)) else str(value), 64 * 8)
    except ValueError as e:
        return web.json_response({"error": f"value: {e}"}, 400)
    try:
        with SwitchClient(sw.p4runtime, timeout=PROXY_TIMEOUT) as c:
            r = c.schema.registers.get(name)
            if index >= r.size:
                return web.json_response({"error": f"register {r.alias} has {r.size} cells"}, 400)
            c.write_register(name, index, v)
    except KeyError as e:
        return web.json_response({"error": str(e.args[0])}, 404)
    except ConnectionError as e:
        return web.json_response({"error": str(e)}, 409)
    except (P4RuntimeError, ValueError) as e:
        return web.json_response({"error": str(e)}, 400)
    return web.json_response({"written": {"name": name, "index": index, "value": v}})


class UiServer:
    """The page, /api/topology and the per-switch proxy on HOST:PORT, in a daemon thread."""

    def __init__(self, address: str, topology: Topology, allow_writes: bool = False) -> None:
        host, _, port = address.rpartition(":")
        self.topology = topology
        self.allow_writes = allow_writes
        outer = self

        class Handler(BaseHTTPRequestHandler):
            server_version = f"inswitch-ui/{inswitch.__version__}"

            def _send(self, resp: web.Response) -> None:
                body, ctype, code = resp
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802
                path, _, query = self.path.partition("?")
                self._send(outer.get(path, query))

            def do_POST(self) -> None:  # noqa: N802
                path = self.path.partition("?")[0]
                n = int(self.headers.get("Content-Length") or 0)
                if n > MAX_POST:
                    self._send(web.json_response({"error": "request too large"}, 413))
                    return
                self._send(outer.post(path, self.rfile.read(n)))

            def log_message(self, format: str, *args: Any) -> None:
                pass

        try:
            self._httpd = ThreadingHTTPServer((host.strip("[]"), int(port)), Handler)
        except OSError as e:
            raise OSError(f"cannot listen on {address}: {e.strerror or e}") from None
        self._httpd.daemon_threads = True
        self.address = f"{host}:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.2}, name="ui-http", daemon=True)

    def get(self, path: str, query: str) -> web.Response:
        if path == "/api/topology":
            return web.json_response(self.topology.doc(self.allow_writes))
        if path.startswith("/sw/"):
            name, _, rest = path[4:].partition("/")
            sw = self.topology.switch(name)
            if sw is None or not rest.startswith("api/"):
                return web.json_response({"error": f"no switch {name!r}"}, 404)
            return _proxy(sw, rest, query)
        got = web.static(path)
        return got if got is not None else (b"not found\n", "text/plain", 404)

    def post(self, path: str, body: bytes) -> web.Response:
        if not path.startswith("/sw/") or not path.endswith("/api/register"):
            return web.json_response({"error": "only POST /sw/NAME/api/register writes"}, 404)
        if not self.allow_writes:
            return web.json_response({"error": "read-only: start `inswitch ui` with --allow-writes to write"}, 403)
        sw = self.topology.switch(path[4:].partition("/")[0])
        if sw is None:
            return web.json_response({"error": "no such switch"}, 404)
        try:
            doc = json.loads(body or b"{}")
        except ValueError:
            return web.json_response({"error": "the body is not JSON"}, 400)
        return write_cell(sw, doc if isinstance(doc, dict) else {})

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
