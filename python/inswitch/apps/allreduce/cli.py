"""`inswitch train`: a model trained data-parallel with its gradients averaged in the switch
(SwitchML-style allreduce) or by Gloo, workers as processes in a rack.

JSON: `runs.<mode>` with `final_accuracy`, `epoch_s` (mean over epochs and workers),
`allreduce_s` (per worker, whole run), `bytes_sent_per_worker` / `bytes_received_per_worker`
(the worker's interface, all traffic), `curve` ([wall s, accuracy] per epoch); with both modes
`max_weight_diff` (largest absolute difference between the final weights of the two seeded
runs).
"""

from __future__ import annotations

from typing import Any, Optional

import typer
from rich.table import Table

from inswitch.cliopts import JSON_PATH, OUT_FILE, Choice, Float, Int, Text, option
from inswitch.output import console_for, ensure_writable, note_written, write_json
from inswitch.tables import show


def table(doc: dict[str, Any]) -> Table:
    t = Table(title=f"{doc['model']} on {doc['data']}: {doc['workers']} workers, {doc['epochs']} epochs"
                    + (f", loss {doc['loss']:g}" if doc["loss"] else ""))
    t.add_column("mode")
    for c in ("final accuracy", "epoch s", "allreduce s", "bytes sent/worker", "bytes recv/worker", "retransmits"):
        t.add_column(c, justify="right", no_wrap=True)
    for mode, r in doc["runs"].items():
        t.add_row(mode, f"{r['final_accuracy'] * 100:.2f}%", f"{r['epoch_s']:.3f}", f"{r['allreduce_s']:.3f}",
                  f"{r['bytes_sent_per_worker']:,.0f}", f"{r['bytes_received_per_worker']:,.0f}",
                  "-" if r.get("retransmissions") is None else f"{r['retransmissions']:,}")
    return t


TRAIN_EXAMPLES = """Examples:

  inswitch train --model mlp --workers 3 --mode both --epochs 2 --json train.json --png train.png

  inswitch train --model cnn --workers 4 --mode switch --loss 0.01
"""

BENCH_EXAMPLES = """Examples:

  inswitch bench allreduce --workers 4,8 --sizes 1,4,16 --json bench/allreduce.json
"""


def register(app: typer.Typer) -> None:
    from inswitch.bench.cli import bench_app

    bench_app.command("allreduce", epilog=BENCH_EXAMPLES)(bench_cmd)

    @app.command("train", epilog=TRAIN_EXAMPLES)
    def train_cmd(
        model: str = option("mlp", "--model", type=Choice("mlp", "cnn"), help="Model."),
        data: str = option("digits", "--data", type=Choice("digits"), help="Data set (scikit-learn's bundled digits)."),
        workers: int = option(4, "--workers", type=Int(2, 64), help="Worker processes (rack hosts)."),
        mode: str = option("both", "--mode", type=Choice("switch", "gloo", "both"), help="Where gradients are averaged."),
        loss: float = option(0.0, "--loss", type=Float(0, 0.5), help="Probability that the switch's ports lose a frame."),
        epochs: int = option(5, "--epochs", type=Int(1, 1000), help="Epochs."),
        seed: int = option(1, "--seed", type=Int(0, 2**31 - 1), help="Seed of the model and the batches (same in both modes)."),
        json_out: Optional[str] = option(None, "--json", type=JSON_PATH, help="Write the result here."),
        png: Optional[str] = option(None, "--png", type=OUT_FILE, help="Accuracy against wall time, both modes."),
    ) -> None:
        """Train on digits with gradients averaged in the switch or by Gloo."""
        from inswitch.apps.allreduce.train import MODES, TrainError, TrainSpec, plot, run

        console = console_for(json_out)
        if png:
            ensure_writable(png, "--png")
        spec = TrainSpec(model=model, data=data, workers=workers, modes=MODES if mode == "both" else (mode,),
                         loss=loss, epochs=epochs, seed=seed)
        try:
            doc = run(spec, progress=lambda s: console.print(f"[dim]{s}[/dim]", highlight=False))
        except TrainError as e:
            console.print(f"[red]error:[/red] {e}", highlight=False)
            raise typer.Exit(2)
        show(console, table(doc))
        if "max_weight_diff" in doc:
            console.print(f"max |switch weight - gloo weight| after the same seeded run: {doc['max_weight_diff']:.3g}")
        for mode_, r in doc["runs"].items():
            if r["fallbacks"]:
                console.print(f"{mode_}: fell back to Gloo for {r['fallbacks']}", highlight=False)
        if png:
            plot(doc, png)
        if json_out:
            write_json(json_out, doc, indent=2)
        note_written(console, png, json_out)


def bench_cmd(
    workers: Any = option("4,8", "--workers", type=Text("worker counts, e.g. 4,8", check=lambda s: _ints(s, 2, 64)),
                          help="Worker counts (comma-separated)."),
    sizes: Any = option("1,4,16", "--sizes", type=Text("sizes in MB, e.g. 1,4,16", check=lambda s: _floats(s, 0.001, 256)),
                        help="float32 tensor sizes in MB (comma-separated)."),
    reps: int = option(3, "--reps", type=Int(1, 100), help="Repetitions per size (the median is kept)."),
    json_out: Optional[str] = option(None, "--json", type=JSON_PATH, help="Write the result here."),
) -> None:
    """float32 allreduce through the switch against Gloo, in the same rack and run."""
    from inswitch.apps.allreduce.bench import run as bench_run
    from inswitch.apps.allreduce.train import TrainError

    console = console_for(json_out)
    try:
        doc = bench_run(workers, sizes, reps, progress=lambda s: console.print(f"[dim]{s}[/dim]", highlight=False))
    except TrainError as e:
        console.print(f"[red]error:[/red] {e}", highlight=False)
        raise typer.Exit(2)
    t = Table(title=f"allreduce: switch vs Gloo (median of {reps})")
    for c in ("MB", "workers", "switch s", "gloo s", "speedup", "switch bytes/worker", "gloo bytes/worker", "max rel diff"):
        t.add_column(c, justify="right", no_wrap=True)
    for r in doc["results"]:
        t.add_row(f"{r['size_mb']:g}", str(r["workers"]), f"{r['switch_s']:.3f}", f"{r['gloo_s']:.3f}", f"{r['speedup']:.2f}",
                  f"{r['bytes_per_worker']:,.0f}", f"{r['gloo_bytes_per_worker']:,.0f}", f"{r['max_rel_diff']:.2g}")
    show(console, t)
    if json_out:
        write_json(json_out, doc, indent=2)
    note_written(console, json_out)


def _ints(s: str, lo: int, hi: int) -> list[int]:
    try:
        v = [int(x) for x in s.split(",")]
    except ValueError:
        raise ValueError("comma-separated integers") from None
    if any(not lo <= x <= hi for x in v):
        raise ValueError(f"each in [{lo}, {hi}]")
    return v


def _floats(s: str, lo: float, hi: float) -> list[float]:
    try:
        v = [float(x) for x in s.split(",")]
    except ValueError:
        raise ValueError("comma-separated numbers") from None
    if any(not lo <= x <= hi for x in v):
        raise ValueError(f"each in [{lo}, {hi}]")
    return v
