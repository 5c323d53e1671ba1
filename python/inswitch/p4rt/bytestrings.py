"""P4Runtime binary strings, and turning what people type (ints, MAC and IP strings, bytes)
into them.

P4Runtime carries every integer as big-endian bytes. A receiver must accept any length as
long as the value fits the P4Info bitwidth; a sender should use the shortest form (the
"canonical" one) so that what a client reads back is byte-for-byte what it wrote. Both the
switch daemon and the client library go through this module so they agree on that.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Union

Value = Union[int, bytes, bytearray, str]

_MAC_RE = re.compile(r"^[0-9a-fA-F]{1,2}([:-][0-9a-fA-F]{1,2}){5}$")


class BitstringError(ValueError):
    """A byte string that is empty or holds a value wider than its field."""


def canonical(data: bytes) -> bytes:
    """The shortest big-endian form of the same number (zero is one zero byte)."""
    stripped = bytes(data).lstrip(b"\x00")
    return stripped if stripped else b"\x00"


def to_int(data: bytes) -> int:
    return int.from_bytes(data, "big")


def from_int(value: int, bitwidth: int) -> bytes:
    """Canonical bytes of `value`, which must fit in `bitwidth` bits."""
    if isinstance(value, bool) or value < 0:
        raise BitstringError(f"{value!r} is not an unsigned integer")
    if bitwidth > 0 and value >> bitwidth:
        raise BitstringError(f"{value} does not fit in {bitwidth} bits")
    return canonical(value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big"))


def check(data: bytes, bitwidth: int) -> int:
    """The number a received byte string carries, after checking it fits `bitwidth`."""
    if len(data) == 0:
        raise BitstringError("empty byte string")
    v = to_int(data)
    if v >> bitwidth:
        raise BitstringError(f"value 0x{v:x} does not fit in {bitwidth} bits")
    return v


def full_width(value: int, bitwidth: int) -> bytes:
    """`value` padded to ceil(bitwidth/8) bytes (the data plane's layout)."""
    return value.to_bytes((bitwidth + 7) // 8, "big")


def parse_int(value: Value, bitwidth: int) -> int:
    """An unsigned integer from an int, bytes, a MAC ("aa:bb:cc:dd:ee:ff"), an IPv4/IPv6
    address, or a decimal/"0x" hex string; checked against `bitwidth`."""
    if isinstance(value, bool):
        raise BitstringError(f"{value!r} is not a field value")
    if isinstance(value, int):
        v = value
    elif isinstance(value, (bytes, bytearray)):
        if not value:
            raise BitstringError("empty byte string")
        v = to_int(bytes(value))
    elif isinstance(value, str):
        v = _parse_str(value.strip())
    else:
        raise BitstringError(f"cannot use {type(value).__name__} {value!r} as a field value")
    if v < 0 or v >> bitwidth:
        raise BitstringError(f"{value!r} does not fit in {bitwidth} bits")
    return v


def encode(value: Value, bitwidth: int) -> bytes:
    """Canonical P4Runtime bytes for a user-supplied value (see `parse_int`)."""
    return from_int(parse_int(value, bitwidth), bitwidth)


def _parse_str(s: str) -> int:
    if _MAC_RE.match(s):
        return int("".join(p.zfill(2) for p in re.split(r"[:-]", s)), 16)
    if s.lower().startswith("0x"):
        return int(s, 16)
    if s.isdigit():
        return int(s)
    try:
        return int(ipaddress.ip_address(s))
    except ValueError:
        pass
    raise BitstringError(f"cannot read {s!r} as a number, MAC or IP address")


def parse_prefix(value: object, bitwidth: int) -> tuple[int, int]:
    """An LPM value: "10.0.0.0/24", (value, prefix_len), or a plain value (full length)."""
    if isinstance(value, tuple) and len(value) == 2:
        v, plen = value
        return parse_int(v, bitwidth), int(plen)
    if isinstance(value, str) and "/" in value:
        addr, plen = value.split("/", 1)
        return parse_int(addr, bitwidth), int(plen)
    return parse_int(value, bitwidth), bitwidth  # type: ignore[arg-type]


def parse_ternary(value: object, bitwidth: int) -> tuple[int, int]:
    """A ternary value: (value, mask), "value&&&mask", "10.0.0.0/8" (a prefix mask), or a
    plain value (all bits significant)."""
    full = (1 << bitwidth) - 1
    if isinstance(value, tuple) and len(value) == 2:
        return parse_int(value[0], bitwidth), parse_int(value[1], bitwidth)
    if isinstance(value, str) and "&&&" in value:
        v, m = value.split("&&&", 1)
        return parse_int(v, bitwidth), parse_int(m, bitwidth)
    if isinstance(value, str) and "/" in value:
        v, plen = parse_prefix(value, bitwidth)
        return v, prefix_mask(plen, bitwidth)
    return parse_int(value, bitwidth), full  # type: ignore[arg-type]


def prefix_mask(prefix_len: int, bitwidth: int) -> int:
    if not 0 <= prefix_len <= bitwidth:
        raise BitstringError(f"prefix length {prefix_len} is not in 0..{bitwidth}")
    return ((1 << prefix_len) - 1) << (bitwidth - prefix_len)
