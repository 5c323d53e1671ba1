"""Per-switch memory of a running fabric: VmRSS, VmHWM, RssAnon, RssFile (/proc/PID/status)
and Pss (/proc/PID/smaps_rollup), MiB, then the max and means.

    PYTHONPATH=python python scripts/fabric_mem.py NAME
"""

from __future__ import annotations

import sys
from pathlib import Path

from inswitch.topology.fabric.fabric import FabricState


def main(name: str) -> None:
    st = FabricState.load(name)
    if st is None:
        sys.exit(f"no fabric named {name!r}")
    rows = []
    for s in st.switches:
        d: dict = {"name": s.plan.name, "ports": len(s.plan.ifaces)}
        for line in Path(f"/proc/{s.pid}/status").read_text().splitlines():
            k = line.split(":")[0]
            if k in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                d[k] = int(line.split()[1]) / 1024
        for line in Path(f"/proc/{s.pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                d["Pss"] = int(line.split()[1]) / 1024
        rows.append(d)
    for r in rows:
        print(f"{r['name']:8} ports={r['ports']} rss={r['VmRSS']:.1f} hwm={r['VmHWM']:.1f} anon={r['RssAnon']:.1f} "
              f"file={r['RssFile']:.1f} pss={r['Pss']:.1f}")

    def mean(k: str) -> float:
        return sum(r[k] for r in rows) / len(rows)

    print(f"max rss {max(r['VmRSS'] for r in rows):.1f} max hwm {max(r['VmHWM'] for r in rows):.1f} mean rss {mean('VmRSS'):.1f} "
          f"anon {mean('RssAnon'):.1f} file {mean('RssFile'):.1f} pss {mean('Pss'):.1f}")


if __name__ == "__main__":
    main(sys.argv[1])
