"""One panel per system a switch runs, in its paper's terms, from what its program publishes
(tables, registers and counters over P4Runtime; nothing the switch does not expose).

A panel is {"program", "title", "summary": [[label, value], ...], "rows": {"columns": [...],
"data": [[...], ...]}, "note"}. What each system can and cannot show is said in docs/ui.md.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from inswitch.p4rt import decode

Panel = dict[str, Any]
MAX_ROWS = 64


def _cells(reader: decode.Reader, name: str) -> list[dict[str, int]]:
    """The register's non-zero cells, decoded (a zero cell is a free or untouched one in
    every register read here; skipping them keeps a panel of 655K lease cells cheap)."""
    try:
        return decode.register_cells(reader, name, nonzero=True)["cells"]
    except KeyError:
        return []


def _size(reader: decode.Reader, name: str) -> int:
    try:
        return reader.schema.registers.get(name).size
    except KeyError:
        return 0


def _entries(reader: decode.Reader, table: str) -> list[dict[str, Any]]:
    try:
        return decode.table_entries(reader, table)["entries"]
    except KeyError:
        return []


def _has(reader: decode.Reader, kind: str, name: str) -> bool:
    try:
        getattr(reader.schema, kind).get(name)
        return True
    except KeyError:
        return False


def _num(v: Any) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return 0


def _qualified(prog: str, obj: str) -> str:
    return f"{prog}.{obj}"


def daiet(reader: decode.Reader, prog: str, counters: dict[str, Any]) -> Panel:
    """DAIET (§3): each configured tree, its children, how many have sent END and how many
    the switch still waits for, and its sequence number towards the parent."""
    ends = {c["index"]: c["value"] for c in _cells(reader, _qualified(prog, "ends_seen"))}
    out_seq = {c["index"]: c["value"] for c in _cells(reader, _qualified(prog, "out_seq"))}
    rows = []
    for e in _entries(reader, _qualified(prog, "daiet_trees")):
        if e["action"].split(".")[-1] != "set_tree":
            continue
        p = e["params"]
        packed = _num(p.get("op_children_id_senders"))
        children = (packed >> 32) & 0xFFFF
        slot = _num(p.get("tree_idx"))
        seen = ends.get(slot, 0)
        tree = next(iter(e["match"].values()), "?")
        rows.append([tree, children, seen, max(0, children - seen), out_seq.get(slot, 0), _num(p.get("parent_port"))])
    return {
        "program": prog,
        "title": "DAIET aggregation trees",
        "summary": [["trees", len(rows)], ["trees still waiting for children", sum(1 for r in rows if r[3] > 0)]],
        "rows": {"columns": ["tree", "children", "END received", "remaining children", "packets to parent", "parent port"], "data": rows[:MAX_ROWS]},
        "note": "children from the tree's daiet_trees entry; END received from the ends_seen register (reset when the tree completes)",
    }


#: Hare's object states (crates/programs/src/hare/oostat.rs).
OBJ_STATES = {1: "valid", 2: "write in flight", 3: "being replaced"}


def hare(reader: decode.Reader, prog: str, counters: dict[str, Any]) -> Panel:
    """Hare (and its NetCache/DySO baselines): the objects offloaded to the switch (slots
    whose state is not empty, by state), and the queries the switch answered (OO-Stat /
    cache_hits) against the program's packets."""
    state_regs = [r.name for r in reader.schema.registers if r.name.startswith(prog + ".") and (r.name.endswith(".obj_state") or r.name.split(".")[-1].startswith("valid_c"))]
    by_state = {name: 0 for name in OBJ_STATES.values()}
    for name in state_regs:
        for c in _cells(reader, name):
            label = OBJ_STATES.get(c["value"], "other")
            by_state[label] = by_state.get(label, 0) + 1
    offloaded = sum(by_state.values())
    hits_reg = next((n for n in ("oo_stat", "cache_hits") if _has(reader, "registers", _qualified(prog, n))), None)
    cells = _cells(reader, _qualified(prog, hits_reg)) if hits_reg else []
    hits = sum(c["value"] for c in cells)
    passes = _num(counters.get("programs", {}).get(prog, {}).get("ingress_passes"))
    top = sorted(((c["index"], c["value"]) for c in cells if c["value"]), key=lambda x: -x[1])[:MAX_ROWS]
    return {
        "program": prog,
        "title": f"{prog}: offloaded keys and hits",
        "summary": [
            ["offloaded objects", offloaded],
            *([f"offloaded, {k}", n] for k, n in by_state.items()),
            [f"queries answered by the switch ({hits_reg or 'no hit register'})", hits],
            [f"{prog} ingress passes", passes],
            ["hit rate (answered / passes)", f"{hits / passes:.3f}" if passes else "no packets yet"],
        ],
        "rows": {"columns": ["slot", "hits since last clear"], "data": [list(t) for t in top]},
        "note": "the hit counter is cleared when the controller reads it (OO-Stat's fetch_clear); passes count every packet of the program, replies and control included, so the rate is a lower bound on the read hit rate",
    }


def netsha(reader: decode.Reader, prog: str, counters: dict[str, Any]) -> Panel:
    """NetSHa (§4): occupancy of the sort-reduce registers (each set's two ways, owned by a
    query or free) and the answers they hold."""
    # The owner tags (QID + 1, 0 = free): both ways in one 64-bit cell (`qid`), or, built
    # for Tofino 1's two condition units, one 32-bit array per way (`qid_0`, `qid_1`).
    if _has(reader, "registers", _qualified(prog, "qid")):
        qid = _cells(reader, _qualified(prog, "qid"))
        ways = 2 * _size(reader, _qualified(prog, "qid"))
        tags = [c.get(w, 0) for c in qid for w in ("way0_qid_plus1", "way1_qid_plus1")]
    else:
        ways = sum(_size(reader, _qualified(prog, f"qid_{w}")) for w in (0, 1))
        tags = [c.get("value", 0) for w in (0, 1) for c in _cells(reader, _qualified(prog, f"qid_{w}"))]
    used = sum(t != 0 for t in tags)
    owners: dict[int, int] = {}
    for t in tags:
        if t:
            owners[t - 1] = owners.get(t - 1, 0) + 1
    held = sum(c.get("held", 0) for c in _cells(reader, _qualified(prog, "state")))
    return {
        "program": prog,
        "title": "NetSHa register occupancy",
        "summary": [["registers (sets x 2 ways)", ways], ["claimed by a query", used], ["occupancy", f"{used / ways:.3f}" if ways else "no registers"], ["answers held", held]],
        "rows": {"columns": ["query id", "registers held"], "data": [[q, n] for q, n in sorted(owners.items())][:MAX_ROWS]},
        "note": "from the qid register(s) (QID + 1 per way, 0 = free) and the held field of the state register",
    }


def inaas(reader: decode.Reader, prog: str, counters: dict[str, Any]) -> Panel:
    """INaaS: registered tenants (port, uid -> slot, lease limit), their use of the switch
    and the leases they hold now."""
    usage = {c["index"]: c for c in _cells(reader, _qualified(prog, "tenant_usage"))}
    events = {c["index"]: c for c in _cells(reader, _qualified(prog, "tenant_events"))}
    leases: dict[int, int] = {}
    # The holder arrays (lease_j), not the deadlines (lease_deadline_j) beside them.
    segs = [r for r in reader.schema.registers if r.name.startswith(prog + ".lease_") and not r.name.startswith(prog + ".lease_deadline_")]
    for r in segs:
        for c in _cells(reader, r.name):
            if c.get("holder_uid"):
                leases[c["holder_uid"]] = leases.get(c["holder_uid"], 0) + 1
    rows = []
    for e in _entries(reader, _qualified(prog, "tenants")):
        if e["action"].split(".")[-1] != "set_tenant":
            continue
        m = list(e["match"].values())
        port, uid = (m + ["?", "?"])[:2]
        slot = _num(e["params"].get("slot"))
        u, ev = usage.get(slot, {}), events.get(slot, {})
        rows.append([uid, port, slot, _num(e["params"].get("max_lease_us")), u.get("packets", 0), u.get("alu_ops", 0), ev.get("leases_taken", 0), leases.get(_num(uid), 0), ev.get("mismatches", 0)])
    return {
        "program": prog,
        "title": "INaaS tenants and leases",
        "summary": [["tenants", len(rows)], ["register cells leased now", sum(leases.values())]],
        "rows": {"columns": ["uid", "port", "slot", "max lease µs", "packets", "ALU ops", "leases taken", "cells held now", "mismatches"], "data": rows[:MAX_ROWS]},
        "note": "cells held now counts lease cells whose holder is the uid, expired or not (the switch checks deadlines only when a packet touches the cell)",
    }


def switchagg(reader: decode.Reader, prog: str, counters: dict[str, Any]) -> Panel:
    eot = _cells(reader, _qualified(prog, "eot_count"))
    fpe = sum(c["value"] for c in _cells(reader, _qualified(prog, "fpe_evictions")))
    bpe = sum(c["value"] for c in _cells(reader, _qualified(prog, "bpe_evictions")))
    return {
        "program": prog,
        "title": "SwitchAgg engines",
        "summary": [["pairs the FPEs evicted", fpe], ["pairs the BPE evicted upstream", bpe]],
        "rows": {"columns": ["tree", "children that sent EoT"], "data": [[c["index"], c["value"]] for c in eot if c["value"]][:MAX_ROWS]},
        "note": "from fpe_evictions, bpe_evictions and eot_count",
    }


PANELS: dict[str, Callable[[decode.Reader, str, dict[str, Any]], Panel]] = {
    "daiet": daiet,
    "hare": hare,
    "netcache": hare,
    "dyso": hare,
    "netsha": netsha,
    "inaas": inaas,
    "switchagg": switchagg,
}


def panel_for(program: str) -> Optional[Callable[[decode.Reader, str, dict[str, Any]], Panel]]:
    # variants of a system's program ("netsha-tofino1") share its panel; hare_lock is
    # another system (NetLock-style locks), not Hare's key-value store
    return PANELS.get(program) or PANELS.get(program.split("-", 1)[0])


def panels(reader: decode.Reader, programs: list[str], counters: dict[str, Any]) -> list[Panel]:
    out = []
    for prog in programs:
        fn = panel_for(prog)
        if fn is None:
            continue
        try:
            out.append(fn(reader, prog, counters))
        except Exception as e:  # one system's panel failing must not hide the others
            out.append({"program": prog, "title": prog, "summary": [["error", f"{type(e).__name__}: {e}"]], "rows": {"columns": [], "data": []}, "note": ""})
    return out
