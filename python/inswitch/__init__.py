"""inswitch: in-network computing without the switch vendor.

A software model of a PISA (Tofino-class) switch that enforces the hardware's limits,
running the in-network systems of DAIET, SwitchAgg, NetSHa, Hare and INaaS over real
packets between real processes, with the controller, end-host libraries and experiments.
"""

__version__ = "0.1.0"
