"""Jobs: each question runs as its kvsim command in a process of its own, in a folder of its own.

A process, not a thread, so that a job can be cancelled at any point (its process group is killed), a run
that goes wrong cannot take the service down, and its work is bounded: a wall-clock limit, an address-space
limit and at most ``max_running`` at once with ``max_queued`` waiting (more is refused, not queued without
end). Progress comes from the command's own progress bars (kvsim/output/progress.py, KVSIM_PROGRESS_FILE).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvsim.errors import KvsimError
from kvsim.service.inputs import CommandLine

QUEUED, RUNNING, DONE, FAILED, CANCELLED, TIMED_OUT = "queued", "running", "done", "failed", "cancelled", "timed out"
ENDED = (DONE, FAILED, CANCELLED, TIMED_OUT)
LOG_TAIL = 20_000  # characters of a job's output the API returns


class Busy(KvsimError):
    """Too many jobs waiting (HTTP 429)."""


@dataclass(frozen=True)
class Limits:
    max_running: int = 1  # jobs at once (each a process)
    max_queued: int = 8  # jobs waiting; more are refused
    timeout_s: float = 1800.0  # wall-clock seconds one job may run
    memory_gb: float = 16.0  # address space of one job's process (0: no limit)
    keep: int = 200  # ended jobs kept (the oldest are removed with their folders)


@dataclass
class Job:
    id: str
    question: str
    command: CommandLine
    folder: Path
    state: str = QUEUED
    created: float = field(default_factory=time.time)
    started: float | None = None
    ended: float | None = None
    returncode: int | None = None
    error: str | None = None
    proc: subprocess.Popen | None = None

    @property
    def out(self) -> Path:
        return self.folder / "out"

    def command_line(self) -> str:
        import shlex

        return "kvsim " + shlex.join(self.command.shown)

    def progress(self) -> dict[str, Any] | None:
        """The command's current progress bar, or None before its first."""
        try:
            state = json.loads((self.folder / "progress.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return state if isinstance(state, dict) else None

    def log(self) -> str:
        """What the command printed (its output, then its messages), the last LOG_TAIL characters."""
        parts = []
        for name in ("stdout.txt", "stderr.txt"):
            try:
                with open(self.folder / name, "rb") as fh:
                    fh.seek(0, os.SEEK_END)
                    fh.seek(max(0, fh.tell() - LOG_TAIL))
                    parts.append(fh.read().decode("utf-8", "replace"))
            except OSError:
                pass
        return "\n".join(p.rstrip("\n") for p in parts if p.strip())[-LOG_TAIL:]

    def view(self) -> dict[str, Any]:
        now = time.time()
        return {
            "id": self.id,
            "question": self.question,
            "state": self.state,
            "command": self.command_line(),
            "created": self.created,
            "elapsed_s": None if self.started is None else (self.ended or now) - self.started,
            "progress": self.progress() if self.state in (RUNNING, DONE) else None,
            "error": self.error,
            "returncode": self.returncode,
        }


def _error_line(log: str) -> str | None:
    """The command's error line (`kvsim: error: ...`), its input files named as the user knows them."""
    lines = [x for x in log.splitlines() if x.startswith("kvsim: ")]
    if not lines:
        return None
    line = lines[-1].removeprefix("kvsim: ").removeprefix("error: ")
    return re.sub(r"(?<![\w/])inputs/", "", line)


class Jobs:
    """The service's jobs: submit, look up, cancel; a thread starts queued jobs and watches running ones."""

    def __init__(self, root: Path, limits: Limits = Limits()):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.limits = limits
        self._jobs: dict[str, Job] = {}
        self._queue: deque[Job] = deque()
        self._lock = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="kvsim-jobs", daemon=True)
        self._thread.start()

    def submit(self, question: str, command: CommandLine) -> Job:
        with self._lock:
            if len(self._queue) >= self.limits.max_queued:
                raise Busy(f"{len(self._queue)} jobs are waiting already; try again when one has ended")
            job_id = secrets.token_hex(6)
            folder = self.root / job_id
            (folder / "inputs").mkdir(parents=True)
            (folder / "out").mkdir()  # a command whose --out is a file writes it in here
            for f in command.files:
                shutil.copyfile(f.source, folder / f.job_path)
            job = Job(job_id, question, command, folder)
            (folder / "job.json").write_text(
                json.dumps({"question": question, "argv": command.argv, "command": job.command_line()}),
                encoding="utf-8",
            )
            self._jobs[job_id] = job
            self._queue.append(job)
            self._prune()
            self._lock.notify_all()
            return job

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            return self._jobs.get(job_id)

    def all(self) -> list[Job]:
        with self._lock:
            return sorted(self._jobs.values(), key=lambda j: j.created)

    def cancel(self, job_id: str) -> Job | None:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or job.state in ENDED:
                return job
            if job.state == QUEUED:
                self._queue.remove(job)
            else:
                self._kill(job)
            self._end(job, CANCELLED, None, "cancelled")
            return job

    def wait(self, job_id: str, timeout_s: float) -> Job | None:
        """The job once it has ended, or as it is after ``timeout_s`` seconds."""
        t_end = time.monotonic() + timeout_s
        with self._lock:
            while True:
                job = self._jobs.get(job_id)
                left = t_end - time.monotonic()
                if job is None or job.state in ENDED or left <= 0:
                    return job
                self._lock.wait(min(left, 0.1))

    def close(self) -> None:
        with self._lock:
            self._stopped = True
            for job in list(self._jobs.values()):
                if job.state == RUNNING:
                    self._kill(job)
                    self._end(job, CANCELLED, None, "the service stopped")
            self._lock.notify_all()
        self._thread.join(timeout=5)

    # --- the thread
    def _loop(self) -> None:
        with self._lock:
            while not self._stopped:
                running = [j for j in self._jobs.values() if j.state == RUNNING]
                for job in running:
                    self._watch(job)
                running = [j for j in running if j.state == RUNNING]
                while self._queue and len(running) < self.limits.max_running:
                    job = self._queue.popleft()
                    self._start(job)
                    running.append(job)
                self._lock.wait(0.05)

    def _start(self, job: Job) -> None:
        env = dict(os.environ)
        env["KVSIM_PROGRESS_FILE"] = str(job.folder / "progress.json")
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env.setdefault(var, "1")  # one job, one core's worth of BLAS threads
        argv = [sys.executable, "-m", "kvsim", *job.command.argv]
        try:
            with open(job.folder / "stdout.txt", "wb") as out, open(job.folder / "stderr.txt", "wb") as err:
                job.proc = subprocess.Popen(
                    argv,
                    cwd=job.folder,
                    env=env,
                    stdout=out,
                    stderr=err,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
        except OSError as e:
            self._end(job, FAILED, None, f"could not start: {e}")
            return
        job.state, job.started = RUNNING, time.time()
        if self.limits.memory_gb > 0 and hasattr(os, "fork"):
            import resource

            limit = int(self.limits.memory_gb * 2**30)
            try:
                resource.prlimit(job.proc.pid, resource.RLIMIT_AS, (limit, limit))
            except (OSError, ValueError, AttributeError):  # not Linux, or the process already ended
                pass

    def _watch(self, job: Job) -> None:
        assert job.proc is not None and job.started is not None
        rc = job.proc.poll()
        if rc is None:
            if time.time() - job.started > self.limits.timeout_s:
                self._kill(job)
                self._end(job, TIMED_OUT, None, f"stopped after the service's limit of {self.limits.timeout_s:g} s")
            return
        if rc == 0:
            self._end(job, DONE, rc, None)
        else:
            self._end(job, FAILED, rc, _error_line(job.log()) or f"the command ended with exit status {rc}")

    def _kill(self, job: Job) -> None:
        if job.proc is None:
            return
        try:
            os.killpg(job.proc.pid, signal.SIGKILL)
        except (OSError, AttributeError):
            job.proc.kill()
        try:
            job.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not refused
            pass

    def _end(self, job: Job, state: str, rc: int | None, error: str | None) -> None:
        job.state, job.returncode, job.error, job.ended = state, rc, error, time.time()
        self._lock.notify_all()

    def _prune(self) -> None:
        ended = sorted((j for j in self._jobs.values() if j.state in ENDED), key=lambda j: j.created)
        for job in ended[: max(0, len(ended) - self.limits.keep)]:
            del self._jobs[job.id]
            shutil.rmtree(job.folder, ignore_errors=True)
