"""NetSHa's controller: the switch's query server selection tables (§4 "Query server
selection"). One exact-match table per LSH table maps a bucket key to the bitmap of the
servers whose bucket directory holds it; the controller builds the entries from the
servers' directories and installs them, and sizes the tables to fit."""

from __future__ import annotations

from typing import Any

import numpy as np

#: The program's clone session for splitting full packets (`programs::netsha::SPLIT_SESSION`)
#: and multicast group of query packets (`SELECT_GROUP`).
SPLIT_SESSION = 78
SELECT_GROUP = 78
#: P4Runtime's recirculation port.
SDN_PORT_RECIRCULATE = 0xFFFFFFFA


def selection_entries(selection: dict[tuple[int, int], int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(table, bucket key) -> server bitmap, as arrays: tables (uint32), keys (int64),
    bitmaps (uint32)."""
    n = len(selection)
    tables = np.fromiter((t for t, _ in selection), dtype=np.uint32, count=n)
    keys = np.fromiter((k for _, k in selection), dtype=np.int64, count=n)
    bits = np.fromiter(selection.values(), dtype=np.uint32, count=n)
    return tables, keys, bits


def table_size(selection: dict[tuple[int, int], int], tables: int) -> int:
    """Entries per selection table: the largest table's, rounded up to a power of two (as a
    target allocates exact-match tables)."""
    counts = np.bincount(np.fromiter((t for t, _ in selection), dtype=np.int64, count=len(selection)), minlength=tables)
    most = int(counts.max()) if counts.size else 1
    return 1 << max(most - 1, 1).bit_length()


def install_selection(path: Any, selection: dict[tuple[int, int], int]) -> int:
    """Write every entry into switch 0 of an in-memory path (`_native.NetshaPath`)."""
    t, k, b = selection_entries(selection)
    return int(path.install_selection(t.astype("<u4").tobytes(), k.astype("<i8").tobytes(), b.astype("<u4").tobytes()))


def install_selection_p4rt(client: Any, selection: dict[tuple[int, int], int]) -> int:
    """Write every entry through P4Runtime (a switch process running `netsha`); bucket keys
    are the 64-bit two's complement of the signed keys."""
    for (t, key), bits in selection.items():
        client.insert_entry(f"select_{t}", {"netsha_query.key": int(key) & (2**64 - 1)}, "servers", {"bitmap": int(bits)})
    return len(selection)


def configure_p4rt(
    client: Any,
    agent: tuple[int, int, int, int],
    server_ports: list[int],
    selection: dict[tuple[int, int], int] | None = None,
) -> None:
    """Everything a switch process running `netsha` needs: the `agent` entry (port, MAC,
    IPv4, UDP port, where timer packets go), the split's clone session to the recirculation
    port (without it a split's copy would be lost), the query group (server i on
    `server_ports[i]`, replica id i) and, if given, the selection entries."""
    port, mac, ip, udp = agent
    client.insert_entry("agent", {"meta.zero": 0}, "to_agent", {"port": port, "dmac": mac, "dip": ip, "dport": udp})
    client.set_clone_session(SPLIT_SESSION, [SDN_PORT_RECIRCULATE])
    client.set_multicast_group(SELECT_GROUP, [(p, i) for i, p in enumerate(server_ports)])
    if selection:
        install_selection_p4rt(client, selection)
