"""The WordCount job's progress bar: what the job does now, and how many of its workers
(mappers and reducers, over every mode) have finished."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress as Bar, SpinnerColumn, TextColumn, TimeElapsedColumn

from inswitch.apps.wordcount.job import Progress, Steps


@contextmanager
def job_progress(console: Console) -> Iterator[tuple[Progress, Steps]]:
    """A bar for `job.run(spec, modes, *bar)`: the message, and workers done of the total."""
    with Bar(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
             console=console, transient=True) as bar:
        task = bar.add_task("wordcount: starting", total=None)

        def message(msg: str) -> None:
            bar.update(task, description=f"wordcount: {msg}")

        def steps(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield message, steps
