"""UDP traffic endpoints for benchmarks, run as processes inside network namespaces:
`python -m inswitch.bench.traffic blast|frames|sink ...` prints one JSON line with its counts."""

from __future__ import annotations

import argparse
import json
import sys

from inswitch import _native


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="inswitch.bench.traffic")
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("blast", help="send UDP as fast as possible (or at --pps)")
    b.add_argument("--dst", required=True, help="IP:PORT")
    b.add_argument("--payload", type=int, default=18, help="UDP payload bytes (18 makes a 64-byte frame with FCS)")
    b.add_argument("--duration", type=float, default=3.0)
    b.add_argument("--pps", type=int, default=None)
    f = sub.add_parser("frames", help="send copies of one frame out of an interface as fast as its ring takes them")
    f.add_argument("--ifname", required=True)
    f.add_argument("--frame-hex", required=True, help="the Ethernet frame, in hex")
    f.add_argument("--duration", type=float, default=3.0)
    f.add_argument("--via", choices=("xdp", "ring"), default="xdp", help="AF_XDP socket or PACKET_MMAP TX ring")
    s = sub.add_parser("sink", help="count UDP datagrams")
    s.add_argument("--bind", required=True, help="IP:PORT")
    s.add_argument("--duration", type=float, default=5.0)
    s.add_argument("--idle", type=float, default=1.0, help="stop this long after the last datagram")
    a = ap.parse_args(argv)
    if a.cmd == "blast":
        r = _native.udp_blast(a.dst, a.payload, a.duration, a.pps)
    elif a.cmd == "frames":
        sent, secs, pps, ring_full, port = _native.frame_blast(a.ifname, bytes.fromhex(a.frame_hex), a.duration, a.via == "xdp")
        r = {"sent": sent, "seconds": secs, "pps": pps, "ring_full": ring_full, "port": port}
    else:
        r = _native.udp_sink(a.bind, a.duration, a.idle)
    print(json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
