"""`topology.netns.in_netns` runs a command inside a namespace (as the docs say) and
`netns_argv` builds the command line for a background process."""

from __future__ import annotations

import os
import subprocess

import pytest

from inswitch.topology import netns
from inswitch.topology.errors import CommandError
from inswitch.topology.state import process_tag

pytestmark = [pytest.mark.netns, pytest.mark.skipif(os.geteuid() != 0, reason="needs root")]


def test_in_netns_runs_inside_the_namespace() -> None:
    ns = f"t{process_tag()}run"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        # Only the namespace's own loopback is there, down: not the root namespace's links.
        cp = netns.in_netns(ns, ["ip", "-o", "link"])
        assert cp.returncode == 0 and [line.split(":")[1].strip() for line in cp.stdout.splitlines()] == ["lo"], cp.stdout
        assert netns.in_netns(ns, ["sh", "-c", "echo $((6*7)); exit 3"]).returncode == 3
        assert netns.in_netns(ns, ["sh", "-c", "echo $((6*7))"]).stdout == "42\n"
        with pytest.raises(CommandError):
            netns.in_netns(ns, ["false"], check=True)
        p = subprocess.Popen(netns.netns_argv(ns, ["cat", "/proc/net/dev"]), stdout=subprocess.PIPE, text=True)
        out, _ = p.communicate(timeout=10)
        assert [line.split(":")[0].strip() for line in out.splitlines()[2:]] == ["lo"]
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)
