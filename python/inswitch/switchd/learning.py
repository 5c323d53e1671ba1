"""L2 learning for a standalone switch, the way a Tofino switch does it.

The data plane cannot write its own match tables, so learning goes through the control
plane: `forward`'s `l2_smac` misses on an unknown source MAC and sends a `mac_learn`
digest (MAC, ingress port); this agent, running in the switch process as its local
control plane, installs `l2_smac` (the MAC is known: no more digests) and `l2_dmac`
(forward to that port). Until a destination is learned, `l2_dmac`'s default action floods
to multicast group 1, which the agent sets to every port at start.

The controller-driven mode stays: the first Write from a P4Runtime controller makes the
agent remove what it installed (learned entries and its flood group) and stop, so the
controller starts from empty tables and its own inserts never collide with learned ones.
`inswitch switch --l2 controller` starts without the agent (what racks do).
"""

from __future__ import annotations

import threading
from typing import Any, Optional

from p4.v1 import p4runtime_pb2

from inswitch.p4rt import bytestrings

from .device import Device
from .opstats import OpStats

#: The multicast group `forward` floods to (its `l2_dmac` default action parameter).
FLOOD_GROUP = 1

Update = p4runtime_pb2.Update


class L2Learner:
    """The local control plane that learns MACs from `mac_learn` digests (see the module
    docstring). `active` until a controller writes; `learned` maps MAC -> port."""

    def __init__(self, device: Device, stats: OpStats) -> None:
        self.device, self.stats = device, stats
        idx = device.pipeline.index
        self.smac = idx.tables.get("forward.l2_smac")
        self.dmac = idx.tables.get("forward.l2_dmac")
        self.a_nop = idx.actions.get("forward.nop")
        self.a_fwd = idx.actions.get("forward.l2_forward")
        self.digest = idx.digests.get("forward.mac_learn")
        self.active = False
        self.learned: dict[int, int] = {}
        self._made_group = False
        self._lock = threading.Lock()

    @staticmethod
    def available(device: Device) -> bool:
        """The pipeline has `forward`'s L2 tables and its learning digest."""
        idx = device.pipeline.index
        try:
            idx.tables.get("forward.l2_smac"), idx.tables.get("forward.l2_dmac"), idx.digests.get("forward.mac_learn")
        except KeyError:
            return False
        return True

    def start(self, num_ports: int) -> None:
        """Flood group over every port, and the digest on."""
        with self._lock:
            e = self._pre(Update.INSERT, list(range(num_ports)))
            err = self.device.write_batch([e])[0]
            self._made_group = err is None
            self.device.call(self.device.dp.digest_config, self.digest.id, True)
            self.active = True

    def _pre(self, op: int, ports: list[int]) -> Any:
        u = Update(type=op)
        mg = u.entity.packet_replication_engine_entry.multicast_group_entry
        mg.multicast_group_id = FLOOD_GROUP
        for p in ports:
            r = mg.replicas.add()
            r.egress_port = p
        return u

    def _entry(self, op: int, table: Any, mac: int, action: Any, params: dict[str, int]) -> Any:
        u = Update(type=op)
        te = u.entity.table_entry
        te.table_id = table.id
        fm = te.match.add()
        fm.field_id = table.fields[0].id
        fm.exact.value = bytestrings.from_int(mac, 48)
        te.action.action.action_id = action.id
        for name, v in params.items():
            p = te.action.action.params.add()
            ap = action.param(name)
            p.param_id = ap.id
            p.value = bytestrings.from_int(v, ap.bitwidth)
        return u

    def on_digest(self, data: bytes) -> None:
        """A `mac_learn` message: 6 bytes of MAC, 2 of port."""
        with self._lock:
            if not self.active or len(data) < 8:
                return
            mac, port = int.from_bytes(data[:6], "big"), int.from_bytes(data[6:8], "big")
            old = self.learned.get(mac)
            if old == port:
                return
            op = Update.INSERT if old is None else Update.MODIFY
            ups = [self._entry(op, self.dmac, mac, self.a_fwd, {"port": port})]
            if old is None:
                ups.append(self._entry(Update.INSERT, self.smac, mac, self.a_nop, {}))
            errs = self.device.write_batch(ups)
            if all(e is None for e in errs):
                self.learned[mac] = port
                self.stats.count("l2_learning.learned" if old is None else "l2_learning.moved")
            else:
                self.stats.count("l2_learning.write_failed")

    def yield_to_controller(self) -> None:
        """A controller wrote: remove what learning installed and stop."""
        with self._lock:
            if not self.active:
                return
            self.active = False
            ups = []
            for mac in self.learned:
                ups.append(self._entry(Update.DELETE, self.dmac, mac, self.a_fwd, {"port": 0}))
                ups.append(self._entry(Update.DELETE, self.smac, mac, self.a_nop, {}))
            if self._made_group:
                ups.append(self._pre(Update.DELETE, []))
            if ups:
                self.device.write_batch(ups)
            self.learned.clear()
            if self.digest.id not in self.device.digest_configs:
                self.device.call(self.device.dp.digest_config, self.digest.id, False)
            self.stats.count("l2_learning.yielded")


def learner_for(device: Device, stats: OpStats) -> Optional[L2Learner]:
    """An agent if the pipeline runs `forward`, else None."""
    return L2Learner(device, stats) if L2Learner.available(device) else None
