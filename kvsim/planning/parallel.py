"""Run independent jobs on local processes or on a Ray cluster, with a progress bar.

Results come back in input order whatever the backend, so the same jobs give the same table.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Callable, Iterable

from kvsim.errors import ConfigError
from kvsim.output.progress import Progress


def run_jobs(
    fn: Callable,
    items: list,
    workers: int = 1,
    backend: str = "local",
    address: str | None = None,
    label: str = "jobs",
    on_result: Callable[[int, object], None] | None = None,
) -> list:
    """[fn(item) for item in items], in parallel. ``on_result(index, result)`` is called as each finishes."""
    results: list = [None] * len(items)
    prog = Progress(len(items), label, log_when_piped=True)

    def got(i, r):
        results[i] = r
        if on_result is not None:
            on_result(i, r)
        prog.advance()

    try:
        if backend == "ray":
            _run_ray(fn, items, workers, address, got)
        elif backend == "local":
            if workers <= 1 or len(items) <= 1:
                for i, it in enumerate(items):
                    got(i, fn(it))
            else:
                import concurrent.futures as cf
                import multiprocessing as mp

                with cf.ProcessPoolExecutor(
                    max_workers=workers,
                    mp_context=mp.get_context("spawn"),
                    initializer=watch_parent,
                    initargs=(os.getpid(),),
                ) as ex:
                    futs = {ex.submit(fn, it): i for i, it in enumerate(items)}
                    for f in cf.as_completed(futs):
                        got(futs[f], f.result())
        else:
            raise ConfigError(f"--backend must be 'local' or 'ray', not '{backend}'")
    finally:
        prog.close()
    return results


def watch_parent(parent_pid: int, interval_s: float = 1.0) -> None:
    """In a worker process: exit as soon as the process that started it is gone (even killed with -9, which
    gives it no chance to stop its workers), instead of finishing orphaned simulations nobody will read."""

    def watch() -> None:
        while True:
            time.sleep(interval_s)
            if os.getppid() != parent_pid:
                os._exit(1)

    threading.Thread(target=watch, name="kvsim-parent-watch", daemon=True).start()


def check_ray_address(address: str, timeout_s: float = 5.0) -> None:
    """Fail fast (one line) if a Ray cluster address HOST:PORT does not accept connections, rather than
    letting ray.init retry for minutes."""
    import socket

    if address in ("auto", "local"):
        return
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = hostport.rpartition(":")
    if not sep or not (port.isascii() and port.isdigit() and len(port) <= 5 and int(port) <= 65535) or not host:
        raise ConfigError(f"--address '{address}': expected HOST:PORT (or ray://HOST:PORT, or auto)")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise ConfigError(f"--address {address}: no Ray cluster answers there ({e.strerror or e})") from None


def _run_ray(fn: Callable, items: Iterable, workers: int, address: str | None, got) -> None:
    if address:
        check_ray_address(address)
    try:
        import ray
    except ImportError:
        raise ConfigError("--backend ray needs Ray: pip install 'kvsim[ray]'") from None
    started = False
    if not ray.is_initialized():
        kw = {"address": address} if address else {"num_cpus": max(1, workers)}
        ray.init(include_dashboard=False, log_to_driver=False, ignore_reinit_error=True, **kw)
        started = True
    try:
        remote = ray.remote(fn)
        refs = {remote.remote(it): i for i, it in enumerate(items)}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                got(refs[ref], ray.get(ref))
    finally:
        if started:
            ray.shutdown()
