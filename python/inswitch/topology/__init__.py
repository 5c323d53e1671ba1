"""Racks: hosts in network namespaces (or, without root, on UDP tunnels) around one inswitch
switch process, built, inspected and removed by name. See `rack.py`."""

from inswitch.topology.errors import CommandError, RackError
from inswitch.topology.rack import Rack, RackStatus
from inswitch.topology.state import Host, RackState, load_state

__all__ = ["CommandError", "Host", "Rack", "RackError", "RackState", "RackStatus", "load_state"]
