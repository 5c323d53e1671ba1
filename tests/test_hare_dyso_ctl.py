"""DySO's analyzer (`dyso_ctl`), shared by the trace replay and the rack: after any stream
of QO-Record fetches, the keys it has put in each row are that row's hottest `columns` keys
by the (aged) counts, computed here without it; and its row hash is the dyso program's."""

from __future__ import annotations

import random

from inswitch import _native  # type: ignore[attr-defined]
from inswitch.apps.hare import kvsim
from inswitch.apps.hare.dyso_ctl import DysoAnalyzer, dyso_row


def test_rows_hold_their_locally_hottest_keys() -> None:
    rng = random.Random(5)
    rows, cols = 4, 2
    an = DysoAnalyzer[int](cols, lambda k: k % rows)
    counts: dict[int, float] = {}
    next_age = 1.0
    for step in range(60):
        now = step * 0.05
        fetched = {rng.randrange(40): float(rng.randint(1, 5)) for _ in range(rng.randint(0, 8))}
        for k, n in fetched.items():
            counts[k] = counts.get(k, 0.0) + n
        if now >= next_age:
            next_age += 1.0
            counts = {k: c / 2 for k, c in counts.items() if c >= 1.0}
        for r, c, k in an.changes(an.record(fetched, now)):
            an.installed(r, c, k)
        assert an.counts == counts
        for r in {k % rows for k in fetched}:
            ranked = sorted((k for k in counts if k % rows == r), key=lambda k: (-counts[k], k))[:cols]
            held = {an.cells.get((r, c)) for c in range(cols)}
            assert set(ranked) <= held, (step, r, ranked, held)
            assert all(k is None or k % rows == r for k in held)


def test_row_hash_is_the_programs() -> None:
    """Two keys `dyso_row` puts in one row evict each other from a one-column r-MAT in the
    dyso program; keys of different rows live side by side."""
    kf, rows = 16, 8
    sw = _native.SimSwitch(["forward", f"dyso:key={kf},value=8,rows={rows},columns=1"], 2)
    for h, port in ((1, 0), (2, 1), (0xFE, 0)):
        sw.table_write("forward", "l2_dmac", "insert", [kvsim._mac(h)], "l2_forward", [port.to_bytes(2, "big")])
        sw.table_write("forward", "l2_smac", "insert", [kvsim._mac(h)], "nop", [])

    def offload(key: bytes) -> None:
        sw.packet_out(_native.hare_frame(kvsim.CPU, kvsim.server_ep(0), kvsim.OP_DATAMV_TO_SWITCH, key, kf, b"v" * 8, 0, 0, 0, 0, 0))

    def hit(key: bytes) -> bool:
        out = sw.process(0, [_native.hare_frame(kvsim.CLIENT, kvsim.server_ep(0), kvsim.OP_GET, key, kf, b"", 1)])
        return [p for p, _f in out] == [0]

    keys = [b"key%d" % i for i in range(200)]
    by_row: dict[int, list[bytes]] = {}
    for k in keys:
        by_row.setdefault(dyso_row(k, kf, rows), []).append(k)
    assert len(by_row) == rows and all(len(v) >= 2 for v in by_row.values())
    firsts = [v[0] for v in by_row.values()]
    for k in firsts:
        offload(k)
    assert all(hit(k) for k in firsts), "one key per row: all held at once"
    for v in by_row.values():
        offload(v[1])
        assert hit(v[1]) and not hit(v[0]), "same row, one column: the newcomer replaced it"
