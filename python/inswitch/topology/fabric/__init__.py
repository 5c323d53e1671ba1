"""Fabrics: many inswitch switches, each its own process, with hosts in network namespaces
and links (veth pairs, optionally shaped with `tc` netem or tbf) between them; one controller
programs them all through P4Runtime. See `model.py` (the topology file), `plan.py`
(addresses, ports and routes), `fabric.py` (up, down, status, exec)."""
