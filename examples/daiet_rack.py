"""A rack with a DAIET aggregation tree and a reducer of your own.

Three hosts (network namespaces, needs root) around a switch process running
`forward,daiet`; the DAIET controller installs tree 7 towards h3; two mappers in h1 and h2
send (word, 1) pairs with `_native.agg_map`; the switch sums them in its registers; the
reducer in h3 receives the aggregated pairs with `_native.agg_reduce` and applies its own
reduce step (here: the top words and how many pairs the switch saved it). The script checks
the result against a `collections.Counter` computed without the switch.

    sudo python examples/daiet_rack.py [--words 4000]
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import textwrap

from inswitch.apps.aggregation import controller
from inswitch.topology import Rack, netns
from inswitch.topology.state import process_tag

MAPPER = textwrap.dedent('''
    import json, sys
    import numpy as np
    from inswitch import _native
    a = json.loads(sys.argv[1])
    words = [w.encode() for w in a["words"]]
    offs = np.zeros(len(words) + 1, dtype=np.uint64)
    offs[1:] = np.cumsum([len(w) for w in words])
    st = _native.agg_map("daiet", a["bind"], [(a["tree"], a["reducer"])], a["id"], "sum",
                         np.zeros(len(words), np.uint16), b"".join(words), offs,
                         np.ones(len(words), np.uint32), 30.0)
    print(json.dumps(st), flush=True)
''')

# The custom reducer: receive the tree's pairs (already summed by the switch), then reduce
# them our way — the five most frequent words.
REDUCER = textwrap.dedent('''
    import json, sys
    from inswitch import _native
    a = json.loads(sys.argv[1])
    blob, offs, vals, st = _native.agg_reduce("daiet", a["bind"], a["tree"], a["mappers"], "sum", 30.0)
    counts = {blob[offs[i]:offs[i + 1]].decode(): int(vals[i]) for i in range(len(vals))}
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    print(json.dumps({"counts": counts, "top": top, "pairs_received": st["pairs"]}), flush=True)
''')


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--words", type=int, default=4000, help="words per mapper")
    a = ap.parse_args()
    name = f"ex{process_tag()}"
    rack = Rack()
    try:
        st = rack.up(3, name=name, programs="forward,daiet", p4runtime="127.0.0.1:0", metrics="127.0.0.1:0", mode="netns")
        h1, h2, h3 = st.hosts
        trees = controller.plan_single_switch({7: h3.port}, n_mappers=2)
        controller.install({st.switch.p4runtime: trees}, num_ports=len(st.hosts))

        words = [[f"w{(i * 7 + k) % 97}" for i in range(a.words)] for k in range(2)]
        reducer_addr, mapper_addrs = f"{h3.ip}:7070", [f"{h1.ip}:6001", f"{h2.ip}:6001"]
        red = subprocess.Popen(netns.netns_argv(h3.netns or "", [sys.executable, "-c", REDUCER, json.dumps(
            {"bind": reducer_addr, "tree": 7, "mappers": mapper_addrs})]), stdout=subprocess.PIPE, text=True)
        maps = [subprocess.Popen(netns.netns_argv(h.netns or "", [sys.executable, "-c", MAPPER, json.dumps(
            {"bind": mapper_addrs[i], "tree": 7, "reducer": reducer_addr, "id": i, "words": words[i]})]),
            stdout=subprocess.PIPE, text=True) for i, h in enumerate((h1, h2))]
        sent = sum(json.loads(p.communicate(timeout=60)[0])["pairs"] for p in maps)
        out = json.loads(red.communicate(timeout=60)[0])
    finally:
        rack.down(name)

    reference = collections.Counter(w for ws in words for w in ws)
    ok = out["counts"] == dict(reference)
    print(f"top words: {', '.join(f'{w} {n}' for w, n in out['top'])}")
    print(f"the mappers sent {sent} pairs; the switch passed {out['pairs_received']} to the reducer")
    print("result equals the Counter computed without the switch" if ok else "MISMATCH with the reference")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
