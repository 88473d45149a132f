"""Reading and writing files with errors a user can act on (one line naming the file), and atomic writes."""

from __future__ import annotations

import json
import os
import shutil
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
    except (RecursionError, ValueError) as e:  # nested too deeply; an integer of over 4,300 digits
        raise ConfigError(f"{label}: not readable JSON ({e})") from None
    if not isinstance(d, dict):
        raise ConfigError(f"{label}: expected a JSON object")
    return d


def json_object_lines(path: str | Path, what: str) -> Iterator[tuple[int, dict]]:
    """(line number, JSON object) of each non-blank line of ``path`` (JSON lines); errors name the file and the
    line (``what``: what a line holds, for them)."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not text ({e.reason})") from None
    for k, text in enumerate(lines, 1):
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except (json.JSONDecodeError, RecursionError, ValueError) as e:
            raise ConfigError(f"{path}:{k}: not JSON ({getattr(e, 'msg', e)}); each line holds {what}") from None
        if not isinstance(obj, dict):
            raise ConfigError(f"{path}:{k}: expected a JSON object ({what})")
        yield k, obj


def write_text_atomically(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder, so a reader never sees half."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def prepare_output_dir(path: str | Path, flag: str) -> Path:
    """Create the output folder now (before any work) and make sure files can be written in it. A symlink to a
    folder is written through (the link itself is never replaced); a dangling one is refused."""
    p = Path(path)
    try:
        _refuse_dangling(p, path, flag)
        if p.exists() and not p.is_dir():
            raise ConfigError(f"{flag} {path}: exists and is not a folder")
        p.mkdir(parents=True, exist_ok=True)
        probe = p / f".kvsim-write-test.{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise ConfigError(f"{flag} {path}: cannot write there ({e.strerror or e})") from None
    return p


def _refuse_dangling(p: Path, path, flag: str) -> None:
    if p.is_symlink() and not p.exists():
        raise ConfigError(
            f"{flag} {path}: is a symlink to {os.readlink(p)}, which does not exist (create it, or give another name)"
        )


def check_output_file(path: str | Path, flag: str, inputs=()) -> Path:
    """Make sure ``path`` can be written as a file (its folder is created now), before any work, and that it
    is none of the command's ``inputs`` (writing there would destroy what is being read)."""
    p = Path(path)
    if str(path).startswith("~") and os.path.expanduser(str(path)) != str(path):
        raise ConfigError(
            f"{flag} {path}: starts with a ~ that the shell did not expand (quoted?); give the path unquoted or in full"
        )
    try:
        _refuse_dangling(p, path, flag)
        if p.is_dir():
            raise ConfigError(f"{flag} {path}: is a folder; give a file name")
        for src in inputs:
            if src is not None and _same_file(p, Path(src)):
                raise ConfigError(
                    f"{flag} {path}: is the input file {src}; writing there would destroy it (give another name)"
                )
        real = Path(os.path.realpath(p)) if p.is_symlink() else p  # written through: its target's folder
        prepare_output_dir(real.parent if str(real.parent) else ".", flag)
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
    if path.is_symlink():  # write through a symlink: the link stays, its target gets the new content
        path = Path(os.path.realpath(path))
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
        if done or old:  # such a folder held kvsim's results only: claimed as its own (results_folder)
            write_text_atomically(
                out / MANIFEST,
                "".join(f"{n}\n" for n in sorted(os.listdir(out)) if n in _LEGACY_RESULTS or n == CONFIG_MARK),
            )
    for p in _siblings(out, _STAGING) + _siblings(out, _RETIRED):
        if not _alive(p):
            shutil.rmtree(p, ignore_errors=True)


# A results folder is written through one function (:func:`results_folder`), whatever the command. Its rule:
# - the folder the user named is never renamed nor removed (it may be the current folder, or a symlink, which
#   is written through): only its contents change;
# - kvsim's own files there are the ones its manifest (MANIFEST) lists, written with every result set (a
#   folder of an older kvsim: the result files beside its CONFIG_MARK); a run replaces them as a set, so an
#   earlier run's files that this one does not write are removed, never left stale beside the new ones;
# - every other file (the user's) is never touched: a run that would write a file of that name, or whose
#   input is one of kvsim's own files there, is refused before any work with a one-line error naming both;
# - the results are written in a staging folder inside it and each file moved into place atomically once
#   all are written: a failed run leaves the earlier results as they were.
CONFIG_MARK = ".kvsim-config"  # the configuration a folder's results describe (commands.args.results_dir)
MANIFEST = ".kvsim-files"  # the names of the files kvsim wrote in a results folder, one a line
_STAGE = ".kvsim-stage-"
_LEGACY_RESULTS = {
    "summary.md",
    "memory_breakdown.png",
    "latency_cdf.png",
    "plan.csv",
    "plan_points.csv",
    "plan_window.jsonl",
    "report.html",
    "report.md",
    "throughput_vs_rate.png",
    "latency_vs_rate.png",
    "validate.csv",
    "predicted_vs_measured.png",
    "fleet_plan.csv",
} | {f"{n}.{ext}" for n in ("requests", "runs", "memory_timeline", "fleet", "replicas") for ext in ("csv", "parquet")}


def own_files(folder: str | Path) -> set[str]:
    """The names of the files in ``folder`` that kvsim wrote there (its manifest and marker included)."""
    folder = Path(folder)
    names: set[str] = set()
    try:
        if (folder / MANIFEST).is_file():
            names = set((folder / MANIFEST).read_text(encoding="utf-8").splitlines())
        elif (folder / CONFIG_MARK).is_file():  # written by a kvsim before the manifest
            names = {n for n in os.listdir(folder) if n in _LEGACY_RESULTS}
    except (OSError, UnicodeDecodeError):
        names = set()
    names |= {MANIFEST, CONFIG_MARK}
    return {
        n
        for n in names
        if n
        and n not in (".", "..")
        and "/" not in n
        and os.sep not in n
        and (folder / n).exists()
        and not (folder / n).is_symlink()
    }


def prepare_results_dir(path: str | Path, flag: str = "--out", inputs=(), writes=()) -> Path:
    """:func:`prepare_output_dir` for a results folder, before any work: refused when a file kvsim did not
    write there has the name of one this run ``writes``, or when one of ``inputs`` is a file kvsim wrote there
    (the run replaces those) or the folder itself. Returns the folder (``~`` expanded)."""
    p = Path(os.path.expanduser(str(path)))
    try:
        if not p.is_symlink() and p.name not in ("", ".", ".."):
            recover_results_folder(p)  # a swap an older kvsim left half done
    except OSError as e:  # e.g. a name too long for the file system
        raise ConfigError(f"{flag} {path}: cannot write there ({e.strerror or e})") from None
    # inputs that are files or folders (not preset names), looked at before the folder is made
    existing = [src for src in inputs if src is not None and os.path.exists(os.path.expanduser(str(src)))]
    folder = prepare_output_dir(p, flag)
    own = own_files(folder)
    real = Path(os.path.realpath(folder))
    for src in existing:
        s = Path(os.path.realpath(os.path.expanduser(str(src))))
        if s == real:
            raise ConfigError(
                f"{flag} {path}: is the input folder {src}; the results would replace what is read "
                "(give another folder)"
            )
        if s.parent == real and s.name in own:
            raise ConfigError(
                f"{flag} {path}: holds the input {src}, an earlier result that this run would "
                "replace; copy it elsewhere or give another folder"
            )
    for name in writes:
        _refuse_foreign(folder, name, own, flag, path)
    return folder


def _refuse_foreign(folder: Path, name: str, own: set[str], flag: str, shown) -> None:
    t = folder / name
    if name not in own and (t.exists() or t.is_symlink()):
        raise ConfigError(
            f"{flag} {shown}: holds {name}, which kvsim did not write and will not replace; move it "
            "or give another folder"
        )


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p)
    else:
        p.unlink(missing_ok=True)


@contextmanager
def results_folder(out: str | Path, flag: str = "--out", marker: tuple[str, str] | None = None) -> Iterator[Path]:
    """A staging folder to write a run's results in; when the block ends without error they replace kvsim's
    own files in ``out`` (the rule above); ``marker``: (file name, text) written with them. On an error, the
    staging folder is removed and ``out`` is as it was."""
    folder = prepare_output_dir(out, flag)
    for p in folder.glob(f"{_STAGE}*"):
        if not _alive(p):
            shutil.rmtree(p, ignore_errors=True)
    stage = folder / f"{_STAGE}{os.urandom(4).hex()}-{os.getpid()}"
    try:
        stage.mkdir()
    except OSError as e:
        raise ConfigError(f"{flag} {out}: cannot write there ({e.strerror or e})") from None
    try:
        yield stage
        if marker:
            write_text_atomically(stage / marker[0], marker[1])
        _commit(folder, stage, flag, out)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _commit(folder: Path, stage: Path, flag: str, shown) -> None:
    new = sorted(os.listdir(stage), key=lambda n: n == CONFIG_MARK)  # the marker last: the set is complete
    own = own_files(folder)
    for n in new:
        _refuse_foreign(folder, n, own, flag, shown)
    # claimed before anything moves, so a kill part-way leaves no file of kvsim's unclaimed
    write_text_atomically(folder / MANIFEST, "".join(f"{n}\n" for n in sorted(own | set(new) - {MANIFEST})))
    if CONFIG_MARK in own:
        (folder / CONFIG_MARK).unlink()
    for n in new:
        dst = folder / n
        if (stage / n).is_dir() and dst.exists():
            _remove(dst)
        os.replace(stage / n, dst)
    for n in sorted(own - set(new) - {MANIFEST, CONFIG_MARK}):
        _remove(folder / n)
    write_text_atomically(folder / MANIFEST, "".join(f"{n}\n" for n in sorted(set(new) - {MANIFEST})))
