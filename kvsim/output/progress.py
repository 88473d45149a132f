"""Progress for long runs: a rich bar (done / total, elapsed, ETA) on a terminal. Off the terminal it is
silent, or, with ``log_when_piped``, writes a line per ~10% (useful in sweep logs).

With ``KVSIM_PROGRESS_FILE`` set (the web service's jobs, kvsim/service/jobs.py) every bar also keeps that file
up to date, at most every 0.2 s: JSON ``{"bar": k, "label": ..., "done": n, "total": m}``, k counting the bars
this process has opened (a command may run several, one per allocator or router)."""

from __future__ import annotations

import json
import os
import sys
import time

PROGRESS_FILE = "KVSIM_PROGRESS_FILE"
_bars_opened = 0


def _write_state(path: str, state: dict) -> None:
    tmp = f"{path}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(state, fh)
        os.replace(tmp, path)  # a reader never sees half a file
    except OSError:  # progress is a courtesy: a full disk must not stop the run
        pass


class Progress:
    def __init__(self, total: int, label: str, log_when_piped: bool = False):
        self.total, self.label, self.done = total, label, 0
        self.t0 = time.perf_counter()
        self.log = log_when_piped
        self._bar = None
        self._next_line = 0.1
        global _bars_opened
        _bars_opened += 1
        self._bar_index = _bars_opened
        self._file = os.environ.get(PROGRESS_FILE) or None
        self._file_at = 0.0
        self._report(force=True)
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

    def _report(self, force: bool = False) -> None:
        if self._file is None:
            return
        now = time.perf_counter()
        if force or now - self._file_at >= 0.2:
            self._file_at = now
            state = {"bar": self._bar_index, "label": self.label.strip(), "done": self.done, "total": self.total}
            _write_state(self._file, state)

    def update(self, done: int) -> None:
        self.done = done
        self._report()
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
        self._report(force=True)
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is None and self.done < self.total:
            self.update(self.total)  # the block's work is done (callbacks may come only every few hundred)
        self.close()
