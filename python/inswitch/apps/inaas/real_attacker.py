"""The attacker of `inswitch tenants run --real --attacker`: a process on its own host of the
rack, a tenant registered like the others (its own uid and slot), sending the model's three
kinds of frames (`runner._attack`) through the switch process:

- forged uids: a random uid that is not registered on the attacker's port, one read item
  (as `_native.InaasService.forge_uid_frame`: the attacker's MAC, seq 1, T 1000);
- replays of a victim's packets from the attacker's port: the victim's MAC, uid and lease,
  20 reads (as `forge_frame`: seq 0x7fff0000);
- random keys over the whole memory with its own uid: 20 reads at random indexes of every
  segment.

Every frame is built by `_native.inaas_frame` (`wire`'s INaaS packet, the builder the model's
forge helpers call). Detection is not here: the controller (`real.py`) reads the switch's
counters over P4Runtime. This process counts what it sent and any value it got back: it
wrote nothing, so a value is someone else's (a leak).

Protocol with the runner, as `real_tenant.py`: `READY`, wait for `GO`, then `DONE` and one
JSON line.
"""

from __future__ import annotations

import json
import select
import socket
import sys
import time
from typing import Any

import numpy as np

from inswitch import _native
from inswitch.apps.inaas.real_tenant import ETHERTYPE, _big_rcvbuf, _wait_go
from inswitch.apps.inaas.service import ITEMS, READ

#: The replayed frames' sequence number (`forge_frame`'s).
REPLAY_SEQ = 0x7FFF_0000


def main(cfg: dict[str, Any]) -> dict[str, Any]:
    mac, gk_mac = bytes.fromhex(cfg["mac"]), bytes.fromhex(cfg["gk_mac"])
    victim_mac, victim_uid, victim_lease = bytes.fromhex(cfg["victim_mac"]), int(cfg["victim_uid"]), int(cfg["victim_lease_us"])
    uid, lease = int(cfg["uid"]), int(cfg["lease_us"])
    rng = np.random.default_rng([int(cfg["seed"]), 0xA77])
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETHERTYPE))
    _big_rcvbuf(s)
    s.bind((cfg["ifname"], ETHERTYPE))
    s.setblocking(False)
    segs_all = bytes(range(ITEMS))
    reads_all = bytes([READ] * ITEMS)
    zeros = bytes(4 * ITEMS)
    sent = {"forged_uid": 0, "replayed": 0, "own_uid_reads": 0}
    stats = {"replies": 0, "replies_done": 0, "send_errors": 0}
    leaked = 0
    reads = 0

    def drain() -> None:
        nonlocal leaked
        while True:
            try:
                f, addr = s.recvfrom(4096)
            except (BlockingIOError, InterruptedError):
                return
            if addr[2] == socket.PACKET_OUTGOING or f[:6] != mac:
                continue
            rep = _native.inaas_reply(f)
            if rep is None:
                continue
            st = np.frombuffer(rep[3], np.uint8)[:ITEMS]
            vals = np.frombuffer(rep[4], "<i8")[:ITEMS]
            stats["replies"] += 1
            stats["replies_done"] += int((st == 1).sum())
            # The attacker wrote nothing: anything it reads back is someone else's.
            leaked += int(((st == 1) & (vals != 0)).sum())

    def send(f: bytes, what: str) -> None:
        try:
            s.send(f)
            sent[what] += 1
        except (BlockingIOError, OSError):
            stats["send_errors"] += 1

    print("READY", flush=True)
    _wait_go()
    t0 = time.monotonic()
    step_s = float(cfg["step_us"]) / 1e6
    seq = 0
    for step in range(1, int(cfg["steps"]) + 1):
        kind = step % 3
        if kind == 0:
            forged = int(rng.integers(1, 2**31 - 1))
            f = _native.inaas_frame(mac, gk_mac, forged, 1, 1000, bytes([int(rng.integers(0, ITEMS))]),
                                    int(rng.integers(0, 512)).to_bytes(2, "little"), bytes([READ]),
                                    int(rng.integers(1, 2**31)).to_bytes(4, "little"), bytes(4))
            send(f, "forged_uid")
        elif kind == 1:
            f = _native.inaas_frame(victim_mac, gk_mac, victim_uid, REPLAY_SEQ, victim_lease, segs_all, np.arange(ITEMS, dtype="<u2").tobytes(), reads_all,
                                    np.arange(1, ITEMS + 1, dtype="<u4").tobytes(), zeros)
            send(f, "replayed")
        else:
            seq += 1
            idxs = rng.integers(0, int(cfg["budget"]), size=ITEMS).astype("<u2").tobytes()
            keys = rng.integers(1, 4000, size=ITEMS).astype("<u4").tobytes()
            send(_native.inaas_frame(mac, gk_mac, uid, seq, lease, segs_all, idxs, reads_all, keys, zeros), "own_uid_reads")
            reads += ITEMS
        # Paced on the wall clock (the model's 2 µs per step × the time scale).
        nxt = t0 + step * step_s
        while True:
            drain()
            left = nxt - time.monotonic()
            if left <= 0:
                break
            select.select([s], [], [], left)
    attack_s = time.monotonic() - t0
    end = time.monotonic() + float(cfg["tail_s"])  # the answers still on their way
    while time.monotonic() < end:
        select.select([s], [], [], max(0.0, end - time.monotonic()))
        drain()
    print("DONE", flush=True)
    return {"sent": sent, "reads": reads, "values_leaked": leaked, "attack_s": attack_s, **stats}


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))), flush=True)
