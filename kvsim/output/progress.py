"""Progress for long runs: a rich bar (done / total, elapsed, ETA) on a terminal. Off the terminal it is
silent, or, with ``log_when_piped``, writes a line per ~10% (useful in sweep logs)."""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, total: int, label: str, log_when_piped: bool = False):
        self.total, self.label, self.done = total, label, 0
        self.t0 = time.perf_counter()
        self.log = log_when_piped
        self._bar = None
        self._next_line = 0.1
        if sys.stderr.isatty() and total:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress as RichProgress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._bar = RichProgress(
                TextColumn(label),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                transient=True,
            )
            self._bar.start()
            self._task = self._bar.add_task(label, total=total)

    def update(self, done: int) -> None:
        self.done = done
        if self._bar is not None:
            self._bar.update(self._task, completed=done)
        elif self.log and self.total and done / self.total >= self._next_line:
            el = time.perf_counter() - self.t0
            eta = el / done * (self.total - done)
            print(f"{self.label}: {done}/{self.total} done, {el:.0f} s elapsed, ETA {eta:.0f} s", file=sys.stderr)
            self._next_line = done / self.total + 0.1

    def advance(self) -> None:
        self.update(self.done + 1)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
