"""The WordCount job's progress bar: what the job does now, and how many of its workers
(mappers and reducers, over every mode) have finished."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Optional

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress as Bar, SpinnerColumn, TextColumn, TimeElapsedColumn

from inswitch.apps.wordcount.job import Progress


@contextmanager
def job_progress(console: Console) -> Iterator[Progress]:
    with Bar(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
             console=console, transient=True) as bar:
        task = bar.add_task("wordcount: starting", total=None)

        def update(msg: str, done: Optional[int] = None, total: Optional[int] = None) -> None:
            if total:
                bar.update(task, total=total)
            if done is not None:
                bar.update(task, completed=done)
            bar.update(task, description=f"wordcount: {msg}")

        yield update
