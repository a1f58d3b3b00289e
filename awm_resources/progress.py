"""Progress bars for long CLI commands (rich, on stderr: stdout stays clean for `--json`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

STDERR = Console(stderr=True)


class Bar:
    """`bar(label)` advances one step and says what just finished; `bar.log(text)` prints above the bar."""

    def __init__(self, progress: Progress, task: int) -> None:
        self._progress, self._task = progress, task

    def __call__(self, label: str = "", steps: int = 1, total: int | None = None) -> None:
        if total is not None:
            self._progress.update(self._task, total=total)
        self._progress.update(self._task, advance=steps, last=label)

    def log(self, text: str) -> None:
        self._progress.console.print(text, markup=False, highlight=False)


@contextmanager
def progress_bar(description: str, total: int | None) -> Iterator[Bar]:
    """A bar on stderr while the block runs; drawn only where stderr is a terminal (not in CI logs or pipes)."""
    columns = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.fields[last]}")]
    with Progress(*columns, console=STDERR, disable=not STDERR.is_terminal) as progress:
        yield Bar(progress, progress.add_task(description, total=total, last=""))
