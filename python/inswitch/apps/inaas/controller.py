"""The provider's controller (INaaS §IV-C, §IV-D, §IV-F): switch memory scheduling,
malicious-tenant detection and pricing.

Memory is 20 segments of the switch; a tenant gets a region: a range of register indexes
in every segment, and a lease length T. Three schedulers:

- `inaas` (the paper's policy): latency-sensitive KV stores get the most memory (their hot
  items are stored twice); throughput-sensitive aggregation gets short leases, so its
  registers are released between rounds; accuracy-sensitive Bloom filters get less memory
  that is never preempted (a lease far longer than the run); Paxos long leases.
- `fcfs`: regions in arrival order, each asking for what it wants, from a shared budget;
  when it runs out, later tenants share the last region (and contend for its leases).
- `fq`: fair queuing: equal shares of the budget, one lease length for all.

Subscription (§IV-F) buys priority on switch memory under every scheduler: subscribed
tenants are served first (FCFS), get a double share (FQ) or double weight (INaaS policy).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MAX_LEASE_US = 1 << 30

#: What each application would ask for (registers per segment) and its sensitivity.
DEMAND = {"kv": 96, "sparse": 64, "dense": 64, "bloom": 32, "paxos": 32}
KIND = {"kv": "kv", "sparse": "reduce", "dense": "reduce", "bloom": "bloom", "paxos": "paxos"}


@dataclass
class Region:
    base: int
    size: int
    lease_us: int
    max_lease_us: int
    #: KV hot items stored this many times (in different segments).
    replicas: int = 1
    subscription: bool = False


def schedule(policy: str, apps: list[str], budget: int, subscribed: list[bool] | None = None) -> list[Region]:
    """Regions for `apps` (one per tenant, in arrival order) within `budget` registers per segment."""
    sub = subscribed or [False] * len(apps)
    if policy == "inaas":
        weight = {"kv": 4, "sparse": 2, "dense": 2, "bloom": 1, "paxos": 1}
        w = [weight[a] * (2 if s else 1) for a, s in zip(apps, sub)]
        total = sum(w)
        out, base = [], 0
        for i, a in enumerate(apps):
            size = max(1, budget * w[i] // total)
            if a in ("sparse", "dense"):
                lease = 1_000  # encourage preemption: short leases (about one round)
            elif a in ("bloom", "paxos"):
                # Never preempted once allocated: a Bloom filter's bits, and acceptors'
                # promises and votes, which Paxos must never forget.
                lease = MAX_LEASE_US
            else:
                lease = 50_000
            out.append(Region(base, size, lease, lease, replicas=2 if a == "kv" else 1, subscription=sub[i]))
            base += size
        return out
    if policy == "fcfs":
        placed: dict[int, Region] = {}
        base = 0
        order = [i for i in range(len(apps)) if sub[i]] + [i for i in range(len(apps)) if not sub[i]]
        last: Region | None = None
        for i in order:
            want = DEMAND[apps[i]]
            if base + want <= budget:
                r = Region(base, want, 10_000, 10_000, subscription=sub[i])
                base += want
            elif budget - base > 0:
                # Out of memory: what is left...
                r = Region(base, budget - base, 10_000, 10_000, subscription=sub[i])
                base = budget
            else:
                # ...or else the last tenant's region, shared (its leases contended).
                assert last is not None
                r = Region(last.base, last.size, 10_000, 10_000, subscription=sub[i])
            placed[i] = last = r
        return [placed[i] for i in range(len(apps))]
    if policy == "fq":
        shares = [2 if s else 1 for s in sub]
        unit = max(1, budget // max(1, sum(shares)))
        out, base = [], 0
        for i in range(len(apps)):
            out.append(Region(base, unit * shares[i], 10_000, 10_000, subscription=sub[i]))
            base += unit * shares[i]
        return out
    raise ValueError(f"unknown scheduler {policy!r} (inaas, fcfs, fq)")


@dataclass
class Detection:
    """Malicious-tenant detection: mismatching accesses per tenant (and forged uids per
    port) counted by the switch, read every `window_us`; above `threshold` in one window
    the tenant is flagged and logged."""

    window_us: int = 50
    threshold: int = 16
    last: dict[str, int] = field(default_factory=dict)
    flagged: dict[str, int] = field(default_factory=dict)
    log: list[dict[str, Any]] = field(default_factory=list)

    def observe(self, now_us: int, name: str, count: int) -> bool:
        """`count` is the cumulative counter for `name`; returns True when it is flagged now."""
        prev = self.last.get(name, 0)
        self.last[name] = count
        delta = count - prev
        if delta >= self.threshold and name not in self.flagged:
            self.flagged[name] = now_us
            self.log.append({"at_us": now_us, "tenant": name, "mismatches_in_window": delta, "event": "flagged malicious"})
            return True
        return False


@dataclass(frozen=True)
class Prices:
    """Pay-per-use: per ALU operation and per register-second; subscription: a flat fee
    per run that buys priority (the scheduler's `subscription` regions)."""

    per_alu_op: float = 1e-9
    per_register_second: float = 1e-6
    subscription: float = 0.01


def measured_holds(grants: Any, run_end_us: int) -> dict[int, int]:
    """Microseconds each holder held switch registers, per uid, from the goalkeeper's log of
    grants: (segment, index, uid, granted at µs, term µs) in the order it learnt of them. A
    lease is held from its grant until the earliest of its deadline (grant + term), the
    next grant of the same cell (the switch grants only a free or expired cell, so the next
    grant ends the lease before it, whoever takes it) and the run's end."""
    by_cell: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
    for seg, idx, uid, at, term in grants:
        by_cell.setdefault((int(seg), int(idx)), []).append((int(at), int(uid), int(term)))
    held: dict[int, int] = {}
    for gs in by_cell.values():
        gs.sort(key=lambda g: g[0])  # stable: equal times keep the order they came in
        for k, (at, uid, term) in enumerate(gs):
            end = min(at + term, run_end_us)
            if k + 1 < len(gs):
                end = min(end, gs[k + 1][0])
            held[uid] = held.get(uid, 0) + max(0, end - at)
    return held



def folded_holds(closed: dict[Any, int], open_grants: Any, run_end_us: int) -> dict[int, int]:
    """`measured_holds` from what the goalkeeper keeps (`hostlib::inaas::Holds`, bounded
    however long it runs): µs per uid of the leases a later grant closed, and the open
    leases, one per cell, counted to the run's end."""
    held = {int(u): int(us) for u, us in closed.items()}
    for u, us in measured_holds(open_grants, run_end_us).items():
        held[u] = held.get(u, 0) + us
    return held

def bill(name: str, usage: dict[str, int], goalkeeper_leases: int, region: Region, prices: Prices, run_us: int,
         held_us: int | None = None, clock: str = "") -> dict[str, Any]:
    """One tenant's ledger line from the switch's own counters. Registers x seconds: with
    `held_us` (the holds measured from the goalkeeper's grant log, `measured_holds`, on
    `clock`), what the tenant's leases were actually held; without it, every lease the
    switch granted counted for its full term T, at most the run (the goalkeeper is told of
    each one, and its count must equal the switch's). Both figures are in the line."""
    lease_s = min(region.lease_us, run_us) / 1e6
    full = usage["leases"] * lease_s
    reg_s = full if held_us is None else held_us / 1e6
    pay = usage["alu_ops"] * prices.per_alu_op + reg_s * prices.per_register_second
    return {
        "tenant": name,
        "plan": "subscription" if region.subscription else "pay-per-use",
        "alu_ops": int(usage["alu_ops"]),
        "packets": int(usage["packets"]),
        "leases": int(usage["leases"]),
        "goalkeeper_leases": int(goalkeeper_leases),
        "lease_s": lease_s,
        "register_seconds": reg_s,
        "held_s_measured": None if held_us is None else held_us / 1e6,
        "register_seconds_full_term": full,
        "pricing": ("full term: leases x min(T, run)" if held_us is None
                    else f"measured holds: each lease from its grant to its deadline, the next grant of its cell or the run's end ({clock})"),
        "mismatches": int(usage["mismatches"]),
        "charge": prices.subscription if region.subscription else pay,
        "pay_per_use_equivalent": pay,
        "adds_up": int(goalkeeper_leases) == int(usage["leases"]),
    }
