"""`make demo`: WordCount on a real text through the switch, with and without in-network
aggregation — tcp, udp and switch mode in one rack — as a table, JSON and a plot."""

from __future__ import annotations

import glob
import json
import os
from pathlib import Path
from typing import Any

from rich.console import Console

from inswitch.apps.wordcount.cli import summary_lines, table
from inswitch.apps.wordcount.job import JobError, JobSpec, run
from inswitch.apps.wordcount.progress import job_progress
from inswitch.topology.state import process_tag
from inswitch.tables import show

#: Real text that Debian-like machines ship, in order of preference (licences and manuals).
CANDIDATES = ["/usr/share/common-licenses/*", "/usr/share/vim/vim*/doc/options.txt", "/usr/share/vim/vim*/doc/version7.txt"]
MIN_BYTES, MAX_BYTES = 300_000, 3_000_000


def find_text() -> list[str]:
    """Regular text files from CANDIDATES, a few hundred KB to a few MB in total."""
    picked: list[str] = []
    total = 0
    for pattern in CANDIDATES:
        for p in sorted(glob.glob(pattern)):
            if total >= MIN_BYTES:
                return picked
            if os.path.isfile(p) and not os.path.islink(p) and total + os.path.getsize(p) <= MAX_BYTES:
                try:
                    with open(p, "rb") as f:
                        head = f.read(4096)
                except OSError:
                    continue
                if b"\0" not in head:  # text, not binary
                    picked.append(p)
                    total += os.path.getsize(p)
    return picked if total >= MIN_BYTES // 3 else []


def plot(doc: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = doc["runs"]
    modes = [m for m in ("tcp", "udp", "switch") if m in runs]
    labels = [f"switch\n({doc['program']})" if m == "switch" else m for m in modes]
    colors = {"tcp": "tab:grey", "udp": "tab:blue", "switch": "tab:green"}
    panels = [("reducer_bytes", "bytes received by the reducers (KB)", 1e-3), ("reducer_packets", "packets received by the reducers", 1),
              ("reducer_cpu_s", "reducer CPU time (s)", 1), ("job_s", "job time (s)", 1)]
    fig, axes = plt.subplots(1, 4, figsize=(15, 4))
    for ax, (key, title, scale) in zip(axes, panels):
        vals = [(runs[m][key] or 0) * scale for m in modes]
        bars = ax.bar(labels, vals, color=[colors[m] for m in modes])
        for b, v in zip(bars, vals):
            ax.annotate(f"{v:,.3g}", (b.get_x() + b.get_width() / 2, b.get_height()), ha="center", va="bottom", fontsize=8)
        ax.set_title(title, fontsize=10)
    sub = f"{doc['words']:,} words ({doc['distinct_words']:,} distinct), {doc['mappers']} mappers, {doc['reducers']} reducers"
    if doc.get("reduction") is not None:
        sub += f" — in-network aggregation: {doc['reduction']:.0%} fewer reducer bytes than udp"
    fig.suptitle(f"WordCount through the switch: {sub}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(out_dir: Path, console: Console) -> int:
    if not console.is_terminal:  # a pipe or a log: do not squeeze the table to 80 columns
        console = Console(width=140)
    files = find_text()
    if files:
        size = sum(os.path.getsize(p) for p in files)
        console.print(f"WordCount input: {len(files)} real text files, {size / 1e3:,.0f} KB ({', '.join(files[:3])}{' …' if len(files) > 3 else ''})")
        spec = JobSpec(inputs=files, mappers=4, reducers=2, rack=f"wcd{process_tag()}", timeout_s=120)
    else:
        console.print("[yellow]no real text of a few hundred KB found under /usr/share: using a generated Zipf(1.0) text instead[/yellow]")
        spec = JobSpec(zipf=1.0, words=300_000, vocab=30_000, mappers=4, reducers=2, rack=f"wcd{process_tag()}", timeout_s=120)
    try:
        with job_progress(console) as bar:
            doc = run(spec, ["tcp", "udp", "switch"], *bar)
    except JobError as e:
        console.print(f"[red]demo failed:[/red] {e}")
        return 1
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "wordcount.json").write_text(json.dumps(doc, indent=2))
    plot(doc, out_dir / "wordcount.png")
    show(console, table(doc))
    for line in summary_lines(doc):
        console.print(line, highlight=False)
    console.print("every mode's reducers' counts equal a Counter over the text" if doc["correct"]
                  else "[red]INCORRECT: some reducer's counts differ from the Counter[/red]")
    console.print(f"wrote {out_dir / 'wordcount.json'} and {out_dir / 'wordcount.png'}")
    return 0 if doc["correct"] else 1
