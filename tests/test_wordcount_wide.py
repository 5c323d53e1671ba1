"""WordCount at width: 32 mappers x 32 reducers in a rack of 64 hosts.

The kernel keeps one ARP (neighbour) table for every network namespace, bounded by the root
namespace's gc_thresh sysctls (default hard limit 1024). A 64-host rack where 32 mappers
each resolve 32 reducers (and the reducers learn them back) needs 2048 entries: with the
defaults ARP failed, SYNs never left the mappers and the tcp job took 78 s instead of 5 s
(udp and switch modes hit their 120 s timeouts). The rack now raises those limits to fit
every rack on the machine (`netns.ensure_neigh_capacity`).

Rack names are `tcpw<pid>` (a rack name is at most 10 characters, so `tcpwide<pid>` does not
fit); the job always takes its rack down.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from inswitch.topology.state import process_tag

from inswitch.apps.wordcount.job import JobSpec, run
from inswitch.topology import netns

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="needs root: a rack of network namespaces")


# ----- the mechanism, without touching the machine ---------------------------------------

def test_neigh_entries_needed_counts_host_pairs_per_rack() -> None:
    spaces = [f"wc1-h{i}" for i in range(1, 65)] + [f"t7p-h{i}" for i in range(1, 4)] + ["other", "x-hx", "-h3"]
    # Each host may resolve every other host of its own rack, never another rack's.
    assert netns.neigh_entries_needed(spaces) == 64 * 63 + 3 * 2
    assert netns.neigh_entries_needed([]) == 0


def test_ensure_neigh_capacity_raises_and_never_lowers(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = {"net.ipv4.neigh.default.gc_thresh2": 512, "net.ipv4.neigh.default.gc_thresh3": 1024}
    monkeypatch.setattr(netns, "read_sysctl_root", lambda key: fake.get(key))
    monkeypatch.setattr(netns, "write_sysctl_root", lambda key, value: fake.__setitem__(key, int(value)))
    need = 64 * 63
    changed = netns.ensure_neigh_capacity(need)
    assert fake["net.ipv4.neigh.default.gc_thresh3"] == need + netns.NEIGH_HEADROOM
    assert fake["net.ipv4.neigh.default.gc_thresh2"] == need + netns.NEIGH_HEADROOM // 2
    assert changed == fake
    # A smaller rack afterwards leaves the larger limits alone.
    before = dict(fake)
    assert netns.ensure_neigh_capacity(16 * 15) == {}
    assert fake == before


# ----- the symptom: a 32 x 32 tcp job in a rack ----------------------------------------

@pytest.mark.netns
@needs_root
def test_rack_tcp_32x32_is_not_held_up_by_arp(tmp_path: Path) -> None:
    """Before the fix this job took 78 s (SYN retransmission timeouts after failed ARP);
    loopback takes about 5 s. The bound leaves room for a busy machine, not for an RTO storm."""
    text = tmp_path / "small.txt"
    text.write_text("a b c\nb c\nc\n")
    doc = run(JobSpec(inputs=[str(text)], mappers=32, reducers=32, rack=f"tcpw{process_tag()}", where="netns",
                      timeout_s=45), ["tcp"])
    r = doc["runs"]["tcp"]
    assert r["correct"], r["wrong_examples"]
    assert r["keys"] == 3 and r["mapper_pairs"] >= 3
    # Every mapper opened one connection to every reducer and each was read to its end.
    assert all(x["segments"] is None or x["segments"] >= 32 * 2 for x in r["per_reducer"])
    assert r["job_s"] < 25, f"tcp 32x32 took {r['job_s']:.1f} s"
    # The rack's hosts fit in the kernel's ARP table now.
    thresh3 = netns.read_sysctl_root("net.ipv4.neigh.default.gc_thresh3")
    assert thresh3 is not None and thresh3 >= 64 * 63
    assert not netns.leftovers(f"tcpw{process_tag()}-")
