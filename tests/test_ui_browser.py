"""The live web view in a real browser: Chromium (Debian's package) driven by Playwright
opens `inswitch ui --rack NAME` for a 3-host rack and checks that the topology shows every
node, that counters and link rates move while hosts ping, and that the register cells the
page shows equal what P4Runtime reads (a cell the test wrote, split into packets and bytes
here, and a live port counter).

Needs root (a netns rack) and /usr/bin/chromium with the playwright package; skipped
otherwise. `INSWITCH_UI_SCREENSHOT=PATH` keeps a screenshot of the page there."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from inswitch.p4rt.client import SwitchClient
from inswitch.topology.switchproc import free_local_port

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PACKETS, BYTES, CELL = 31337, 2_000_000_123, 300  # a cell of a port the rack does not have

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: a netns rack")


@pytest.fixture(scope="module")
def rack(rack_factory: Callable[..., Any]) -> Any:
    if os.geteuid() != 0:
        pytest.skip("needs root: a netns rack")
    return rack_factory("u", 3)


@pytest.fixture(scope="module")
def ui(rack: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`inswitch ui --rack NAME` as the user runs it; its URL."""
    addr = f"127.0.0.1:{free_local_port()}"
    log = tmp_path_factory.mktemp("ui") / "ui.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "inswitch", "ui", "--rack", rack.name, "--listen", addr], stdout=out, stderr=subprocess.STDOUT)
    url = f"http://{addr}/"
    deadline = time.monotonic() + 20
    while True:
        try:
            urllib.request.urlopen(url + "api/topology", timeout=2).read()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"inswitch ui did not start: {log.read_text()}")
            time.sleep(0.1)
    yield url
    proc.terminate()
    assert proc.wait(10) == 0


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def page(ui: str, browser: Any) -> Iterator[Any]:
    pg = browser.new_page(viewport={"width": 1400, "height": 1000})
    pg.goto(ui)
    yield pg
    pg.close()


def _port_cell(page: Any, port: int, key: str) -> int:
    return int(page.inner_text(f'section.switch tr[data-port="{port}"] td[data-key="{key}"]').replace(",", ""))


def _shown_cell(page: Any, index: int, field: str) -> int:
    return int(page.inner_text(f'table.cells tr[data-index="{index}"] td[data-field="{field}"]').replace(",", ""))


@needs_root
@pytest.mark.netns
def test_topology_shows_every_node(rack: Any, page: Any) -> None:
    page.wait_for_selector('#topology [data-node="s1"]')
    shown = set(page.eval_on_selector_all("#topology .node", "els => els.map(e => e.dataset.node)"))
    assert shown == {"s1"} | {h.name for h in rack.hosts}
    assert page.locator("#topology line.link").count() == len(rack.hosts)


@needs_root
@pytest.mark.netns
def test_counters_and_link_rates_move_while_hosts_ping(rack: Any, page: Any) -> None:
    page.wait_for_selector('tr[data-port="0"] td[data-key="rx_packets"]')
    before = _port_cell(page, 0, "rx_packets")
    ping = subprocess.Popen(["ip", "netns", "exec", rack.hosts[0].netns, "ping", "-n", "-q", "-i", "0.1", "-c", "40", rack.hosts[1].ip], stdout=subprocess.DEVNULL)
    try:
        seen_rate = 0.0
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            rate = (page.text_content('[data-rate="s1:0"]') or "").split()[0]
            seen_rate = max(seen_rate, float(rate) if rate.replace(".", "").isdigit() else 0.0)
            if seen_rate > 0 and _port_cell(page, 0, "rx_packets") > before:
                break
            time.sleep(0.25)
    finally:
        ping.wait(20)
    assert _port_cell(page, 0, "rx_packets") > before, "port 0's counter did not move while h1 pinged"
    assert seen_rate > 0, "the h1 link showed no packet rate while h1 pinged"


@needs_root
@pytest.mark.netns
def test_register_values_equal_p4runtime(rack: Any, page: Any, tmp_path: Path) -> None:
    with SwitchClient(rack.switch.p4runtime) as c:
        c.write_register("rx_port_counters", CELL, (BYTES << 32) | PACKETS)
    page.select_option("select.register-select", "forward.rx_port_counters")
    page.wait_for_selector(f'table.cells[data-register="forward.rx_port_counters"] tr[data-index="{CELL}"]', timeout=10_000)
    assert _shown_cell(page, CELL, "packets") == PACKETS
    assert _shown_cell(page, CELL, "bytes") == BYTES
    assert _shown_cell(page, CELL, "raw") == (BYTES << 32) | PACKETS  # all 64 bits, past 2^53
    # A live cell: port 0's received packets as the page shows them and as P4Runtime reads
    # them. Traffic has stopped, so the two agree once the page has refreshed.
    with SwitchClient(rack.switch.p4runtime, require_primary=False) as c:
        deadline = time.monotonic() + 10
        while True:
            (idx, raw), = c.read_register("rx_port_counters", 0)
            shown = (_shown_cell(page, 0, "packets"), _shown_cell(page, 0, "bytes"))
            if shown == (raw & 0xFFFF_FFFF, raw >> 32) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    assert shown == (raw & 0xFFFF_FFFF, raw >> 32) and shown[0] > 0
    shot = tmp_path / "ui.png"
    page.screenshot(path=str(shot), full_page=True)
    keep = os.environ.get("INSWITCH_UI_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)


@needs_root
@pytest.mark.netns
def test_tables_are_decoded_on_the_page(rack: Any, page: Any) -> None:
    page.select_option("select.table-select", "forward.l2_dmac")
    page.wait_for_selector("table.entries tbody tr")
    text = page.inner_text(".table-view")
    for h in rack.hosts:
        assert h.mac in text  # MACs as MACs, not integers


@needs_root
@pytest.mark.netns
def test_writes_refused_without_the_flag(ui: str) -> None:
    req = urllib.request.Request(ui + "sw/s1/api/register", data=json.dumps({"name": "rx_port_counters", "index": 5, "value": 1}).encode(), method="POST")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=5)
    assert e.value.code == 403


@needs_root
@pytest.mark.netns
def test_writes_with_the_flag_go_through_p4runtime(rack: Any) -> None:
    from inswitch.ui.rack import UiServer, from_rack

    srv = UiServer("127.0.0.1:0", from_rack(rack.name), allow_writes=True)
    srv.start()
    value = (77 << 32) | 5
    url = f"http://{srv.address}/sw/s1/api/register"
    try:
        req = urllib.request.Request(url, data=json.dumps({"name": "rx_port_counters", "index": CELL + 1, "value": value}).encode(), method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 200
        bad = urllib.request.Request(url, data=b'{"name": "rx_port_counters", "index": 99999, "value": 1}', method="POST")
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(bad, timeout=10)
        assert e.value.code == 400
    finally:
        srv.stop()
    with SwitchClient(rack.switch.p4runtime, require_primary=False) as c:
        assert c.read_register("rx_port_counters", CELL + 1) == [(CELL + 1, value)]


def test_two_switches_and_a_link_between_them(switchd_factory: Callable[..., Any], browser: Any) -> None:
    """The page for a fabric-shaped topology (two switches cabled port 3 to port 3, a host
    on each): every node drawn, one section per switch, each reading its own switch."""
    from inswitch.ui.rack import Topology, UiServer

    a = switchd_factory("--program", "forward", "--ports", "memory:4")
    b = switchd_factory("--program", "forward,daiet", "--ports", "memory:4")
    with SwitchClient(b.p4runtime) as c:
        c.write_register("rx_port_counters", 1, (BYTES << 32) | PACKETS)
    topo = Topology.from_doc({
        "title": "two switches",
        "switches": [{"name": "sa", "http": a.metrics, "p4runtime": a.p4runtime, "programs": ["forward"]},
                     {"name": "sb", "http": b.metrics, "p4runtime": b.p4runtime, "programs": ["forward", "daiet"]}],
        "hosts": [{"name": "ha", "ip": "10.0.0.1"}, {"name": "hb", "ip": "10.0.0.2"}],
        "links": [{"a": "ha", "b": "sa", "switch": "sa", "port": 0}, {"a": "sa", "b": "sb", "switch": "sa", "port": 3},
                  {"a": "hb", "b": "sb", "switch": "sb", "port": 0}],
    })
    srv = UiServer("127.0.0.1:0", topo)
    srv.start()
    pg = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        pg.goto(f"http://{srv.address}/")
        pg.wait_for_selector('section.switch[data-switch="sb"] table.cells tr[data-index="1"]', timeout=10_000)
        nodes = set(pg.eval_on_selector_all("#topology .node", "els => els.map(e => e.dataset.node)"))
        assert nodes == {"sa", "sb", "ha", "hb"}
        assert pg.locator("#topology line.link").count() == 3
        sb = 'section.switch[data-switch="sb"]'
        assert int(pg.inner_text(f'{sb} table.cells tr[data-index="1"] td[data-field="packets"]').replace(",", "")) == PACKETS
        assert pg.locator('section.switch[data-switch="sa"] table.cells tbody tr').count() == 0  # sa's cells are all zero
        # The system panels come from their own poll (/api/systems), after the cells.
        pg.wait_for_selector(f'{sb} .system[data-system="daiet"]', timeout=10_000)
        assert pg.locator(f'{sb} .system[data-system="daiet"]').count() == 1
    finally:
        pg.close()
        srv.stop()
