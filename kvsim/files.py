"""Reading and writing files with errors a user can act on (one line naming the file), and atomic writes."""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from kvsim.errors import ConfigError


def read_json_object(path: str | Path, label: str) -> dict:
    """The JSON object in ``path``; errors say ``label`` (e.g. '--model config.json') and why."""
    try:
        d = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"{label}: cannot read: {e.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{label}: not JSON ({e})") from None
    if not isinstance(d, dict):
        raise ConfigError(f"{label}: expected a JSON object")
    return d


def write_text_atomically(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder, so a reader never sees half."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def prepare_output_dir(path: str | Path, flag: str) -> Path:
    """Create the output folder now (before any work) and make sure files can be written in it."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise ConfigError(f"{flag} {path}: exists and is not a folder")
    try:
        p.mkdir(parents=True, exist_ok=True)
        probe = p / f".kvsim-write-test.{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise ConfigError(f"{flag} {path}: cannot write there ({e.strerror or e})") from None
    return p


def check_output_file(path: str | Path, flag: str, inputs=()) -> Path:
    """Make sure ``path`` can be written as a file (its folder is created now), before any work, and that it
    is none of the command's ``inputs`` (writing there would destroy what is being read)."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{flag} {path}: is a folder; give a file name")
    for src in inputs:
        if src is not None and _same_file(p, Path(src)):
            raise ConfigError(f"{flag} {path}: is the input file {src}; writing there would destroy it (give "
                              "another name)")
    prepare_output_dir(p.parent if str(p.parent) else ".", flag)
    if p.exists() and not os.access(p, os.W_OK):
        raise ConfigError(f"{flag} {path}: not writable")
    return p


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def file_digest(path: str | Path) -> str:
    """SHA-256 of a file's bytes (hex), to tell whether results computed from it are still current."""
    import hashlib

    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from None
    return h.hexdigest()


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path beside ``path`` (same suffix) that replaces ``path`` once the block succeeds."""
    path = Path(path)
    # pid + random: two processes (or two threads) writing the same file never share a temporary
    tmp = path.with_name(f".{path.stem}.{os.getpid()}-{os.urandom(4).hex()}.tmp{path.suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
