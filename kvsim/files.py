"""Reading and writing files with errors a user can act on (one line naming the file), and atomic writes."""

from __future__ import annotations

import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from kvsim.errors import ConfigError


def read_json_object(path: str | Path, label: str) -> dict:
    """The JSON object in ``path``; errors say ``label`` (e.g. '--model config.json') and why."""
    try:
        d = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"{label}: cannot read: {e.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{label}: not JSON ({e})") from None
    except (RecursionError, ValueError) as e:  # nested too deeply; an integer of over 4,300 digits
        raise ConfigError(f"{label}: not readable JSON ({e})") from None
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
    try:
        if p.exists() and not p.is_dir():
            raise ConfigError(f"{flag} {path}: exists and is not a folder")
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
    try:
        if p.is_dir():
            raise ConfigError(f"{flag} {path}: is a folder; give a file name")
        for src in inputs:
            if src is not None and _same_file(p, Path(src)):
                raise ConfigError(f"{flag} {path}: is the input file {src}; writing there would destroy it (give "
                                  "another name)")
        prepare_output_dir(p.parent if str(p.parent) else ".", flag)
        if p.exists() and not os.access(p, os.W_OK):
            raise ConfigError(f"{flag} {path}: not writable")
    except OSError as e:  # e.g. a name too long for the file system
        raise ConfigError(f"{flag} {path}: cannot write there ({e.strerror or e})") from None
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


# A results folder is replaced whole: the new results are written into a staging sibling, which takes the
# folder's name only once complete. A run killed before that leaves the old folder as it was; one killed
# between the two renames is finished (or undone) by the next run that writes there.
_STAGING, _RETIRED = ".kvsim-new-", ".kvsim-old-"


def _siblings(out: Path, tag: str) -> list[Path]:
    return sorted(out.parent.glob(f".{out.name}{tag}*"))


def _alive(p: Path) -> bool:
    """Is the process that made this staging or retired folder still running (its pid ends the name)?"""
    try:
        pid = int(p.name.rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return False
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def recover_results_folder(out: Path) -> None:
    """Finish or undo a swap that a killed run left half done, and remove dead runs' staging folders."""
    if not out.exists():
        done = [p for p in _siblings(out, _STAGING) if (p / ".complete").exists() and not _alive(p)]
        old = [p for p in _siblings(out, _RETIRED) if not _alive(p)]
        if done:
            os.rename(done[-1], out)
            (out / ".complete").unlink(missing_ok=True)
        elif old:
            os.rename(old[-1], out)
    for p in _siblings(out, _STAGING) + _siblings(out, _RETIRED):
        if not _alive(p):
            shutil.rmtree(p, ignore_errors=True)


@contextmanager
def replaced_folder(out: str | Path, ours: Callable[[str], bool]) -> Iterator[Path]:
    """A folder to write a run's results in that replaces ``out`` whole when the block ends without error:
    a reader (or a kill) sees the old results or the new ones, never a mix. If ``out`` holds files that
    ``ours`` does not claim (a user's own), the results are written in place instead, leaving those alone."""
    out = Path(out)
    recover_results_folder(out)
    if out.exists() and any(not ours(p.name) for p in out.iterdir()):
        yield out
        return
    stage = out.parent / f".{out.name}{_STAGING}{os.getpid()}"
    shutil.rmtree(stage, ignore_errors=True)
    try:
        stage.mkdir(parents=True)
    except OSError as e:
        raise ConfigError(f"--out {out}: cannot write next to it ({e.strerror or e})") from None
    try:
        yield stage
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    (stage / ".complete").write_bytes(b"")
    old = out.parent / f".{out.name}{_RETIRED}{os.getpid()}"
    if out.exists():
        os.rename(out, old)
    os.rename(stage, out)
    (out / ".complete").unlink()
    shutil.rmtree(old, ignore_errors=True)
