"""A question's inputs (JSON, keyed by option) -> the kvsim command line that answers it, checked by the CLI's
own parser and the options table's rules, with the same messages as on the command line.

Files are named, never given as paths: ``"upload:ID"`` (a file sent to the service) or ``"example:NAME"`` (one
of the package's examples). Any other text that could be read as a path out of the job's folder (absolute,
``~``, ``..``) is refused, and the command runs in the job's folder, where only the files the service put
there are.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import io
import math
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from kvsim.errors import KvsimError
from kvsim.service.questions import Question, input_actions, root_parser

MAX_TEXT = 4096  # characters of one text input
MAX_ITEMS = 64  # values of one list input
FILE_REF = re.compile(r"^(upload|example):([A-Za-z0-9][A-Za-z0-9._-]{0,127})$")
_PARSE_LOCK = threading.Lock()  # the parser's errors go to sys.stderr, swapped while one request parses


class InputError(KvsimError):
    """An input the service refuses (HTTP 400), said as the command line would say it."""


@dataclass(frozen=True)
class FileInput:
    """A file a job reads: ``source`` copied into the job's folder as ``inputs/<name>``."""

    source: Path
    name: str  # the file's own name (what the user uploaded, or the example's)

    @property
    def job_path(self) -> str:
        return f"inputs/{self.name}"


@dataclass(frozen=True)
class CommandLine:
    argv: list[str]  # run in the job's folder: file inputs as inputs/NAME, results to out/
    shown: list[str]  # the same with the files' own names: what to type on the command line
    files: list[FileInput]


def _text(key: str, v: str, many: bool = False) -> str:
    if len(v) > MAX_TEXT:
        raise InputError(f"{key}: longer than {MAX_TEXT:,} characters")
    if any(ord(c) < 32 for c in v):
        raise InputError(f"{key}: control characters are not allowed")
    parts = re.split(r"[/\\]", v)
    if v.startswith(("/", "\\", "~")) or re.match(r"^[A-Za-z]:", v) or ".." in parts:
        raise InputError(
            f"{key}: {v!r} looks like a path; the service reads only uploaded files and its examples "
            "(give 'upload:ID' or 'example:NAME')"
        )
    if many and v.startswith("-") and not re.match(r"^-\d", v):
        raise InputError(f"{key}: {v!r} cannot start with '-'")
    return v


def _scalar(key: str, v: Any) -> str:
    if isinstance(v, bool):
        raise InputError(f"{key}: expected a value, got {str(v).lower()}")
    if isinstance(v, (int, float)):
        if isinstance(v, float) and math.isnan(v):
            raise InputError(f"{key}: expected a number, got NaN")
        return repr(v) if isinstance(v, float) else str(v)
    if isinstance(v, str):
        return v
    raise InputError(f"{key}: expected a number or text, got {type(v).__name__}")


def build_command(q: Question, inputs: dict[str, Any], resolve: Callable[[str, str], FileInput]) -> CommandLine:
    """The command line of ``q`` for ``inputs`` (the question's defaults under them); ``resolve(key, ref)``
    gives the file an ``upload:``/``example:`` reference names (InputError when there is none)."""
    if not isinstance(inputs, dict):
        raise InputError("inputs: expected an object of option keys and values")
    actions = input_actions(q)
    values = {**q.defaults, **inputs}
    argv: list[str] = [*q.command, "--out", q.out]  # the job's results, inside its folder
    shown: list[str] = list(q.command)
    files: list[FileInput] = []
    positional: list[tuple[list[str], list[str]]] = []
    for key, v in values.items():
        a = actions.get(key)
        if a is None:
            close = difflib.get_close_matches(str(key), list(actions), n=1)
            raise InputError(
                f"unknown input {str(key)!r} for {q.name}" + (f"; did you mean {close[0]!r}?" if close else "")
            )
        if v is None or v == "" or v == []:
            continue
        flag = next((f for f in a.option_strings if f.startswith("--")), None)
        if isinstance(a, (argparse._StoreTrueAction, argparse.BooleanOptionalAction)):
            if not isinstance(v, bool):
                raise InputError(f"{key}: expected true or false, got {v!r}")
            if v or isinstance(a, argparse.BooleanOptionalAction):
                assert flag is not None
                word = flag if v else "--no-" + flag[2:]
                argv.append(word)
                shown.append(word)
            continue
        many = a.nargs in ("+", "*")
        items = v if isinstance(v, list) else [v]
        if not many and isinstance(v, list):
            raise InputError(f"{key}: takes one value, got a list")
        if len(items) > MAX_ITEMS:
            raise InputError(f"{key}: at most {MAX_ITEMS} values")
        run_items: list[str] = []
        shown_items: list[str] = []
        for item in items:
            text = _scalar(key, item)
            m = FILE_REF.match(text)
            if m:
                f = resolve(key, text)
                files.append(f)
                run_items.append(f.job_path)
                shown_items.append(f.name)
                continue
            text = _text(key, text, many)
            run_items.append(text)
            shown_items.append(text)
        if flag is None:  # a positional (validate's result files)
            positional.append((run_items, shown_items))
        elif many:
            argv += [flag, *run_items]
            shown += [flag, *shown_items]
        else:
            argv.append(f"{flag}={run_items[0]}")  # '=' keeps a value like '-1' a value
            shown += [flag, shown_items[0]]
    names = [f.name for f in files]
    if len(set(names)) != len(names):
        raise InputError(f"two input files have the same name ({', '.join(sorted(names))}); rename one")
    for run_items, shown_items in positional:
        argv += ["--", *run_items] if any(x.startswith("-") for x in run_items) else run_items
        shown += shown_items
    check(argv)
    return CommandLine(argv, shown, files)


def check(argv: list[str]) -> None:
    """Parse ``argv`` as the CLI does and check the options by the options table's rules: InputError with the
    CLI's own message when it would refuse them."""
    from kvsim.options import normalize, values_from_namespace

    err = io.StringIO()
    with _PARSE_LOCK, contextlib.redirect_stderr(err):
        try:
            ns, unknown = root_parser().parse_known_args(argv)
        except SystemExit:
            lines = [x for x in err.getvalue().splitlines() if x.startswith("kvsim: error:")]
            raise InputError(lines[-1][len("kvsim: error: ") :] if lines else "invalid inputs") from None
    if unknown:
        raise InputError(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        normalize(values_from_namespace(ns))
    except KvsimError as e:
        raise InputError(str(e)) from None
