"""`inswitch train` end to end: digits trained by worker processes in a rack, gradients
averaged through the switch's allreduce program and, in the same invocation with the same
seed, by Gloo. The switch-trained model's accuracy matches Gloo's within one point, and
the weights agree to the quantization's precision.

Needs root (the rack) and PyTorch (the `ml` extra)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: network namespaces"),
]
torch = pytest.importorskip("torch")


def test_two_epochs_switch_matches_gloo(tmp_path: Path) -> None:
    out = tmp_path / "train.json"
    png = tmp_path / "train.png"
    r = subprocess.run([sys.executable, "-m", "inswitch", "train", "--model", "mlp", "--data", "digits", "--workers", "3",
                        "--mode", "both", "--epochs", "2", "--json", str(out), "--png", str(png)],
                       capture_output=True, text=True, timeout=480)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(out.read_text())
    sw, gl = doc["runs"]["switch"], doc["runs"]["gloo"]
    for run in (sw, gl):
        for k in ("final_accuracy", "epoch_s", "allreduce_s", "bytes_sent_per_worker", "bytes_received_per_worker"):
            assert run[k] is not None and run[k] >= 0, k
    assert gl["final_accuracy"] > 0.85, "the model learns at all"
    assert abs(sw["final_accuracy"] - gl["final_accuracy"]) <= 0.01
    assert doc["max_weight_diff"] < 1e-2
    assert sw["fallbacks"] == {} or set(sw["fallbacks"]) <= {"broadcast", "barrier", "allgather"}, "gradients never fell back"
    assert png.stat().st_size > 0
