"""P4Runtime for inswitch: the P4Info of a program set (`p4info`), name and id lookups over
any P4Info (`schema`), byte-string encoding (`bytestrings`) and the controller-side client
(`client.SwitchClient`) that the rack builder and experiments use to fill switch tables."""

from .client import SwitchClient
from .errors import P4RuntimeError, UpdateError

__all__ = ["P4RuntimeError", "SwitchClient", "UpdateError"]
