"""Argument types for the commands' own flags: values are checked as they are parsed, so a bad one is a
one-line error naming the flag (the simulation options are checked by kvsim/options.py)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable

from kvsim.files import CONFIG_MARK  # noqa: F401 (in a results folder: the configuration its results describe)
from kvsim.validation import NON_NEGATIVE, POSITIVE, POSITIVE_INT, Number, shown

DEFAULT_OUT = "kvsim-out"  # where commands write unless told otherwise


def number(kind: type, rule: Number | None = None) -> Callable[[str], int | float]:
    """An argparse type: text -> int or float, checked against ``rule``."""

    def parse(text: str):
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"must be {'an integer' if kind is int else 'a number'}, got {shown(text)}"
            ) from None
        if kind is int:
            if not v.is_integer():
                raise argparse.ArgumentTypeError(f"must be an integer, got {shown(text)}")
            v = int(v)
        problem = rule(v) if rule else None
        if problem:
            raise argparse.ArgumentTypeError(problem)
        return v

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


def int_list(rule: Number = POSITIVE_INT) -> Callable[[str], list[int]]:
    """Comma-separated integers, each checked."""
    one = number(int, rule)

    def parse(text: str) -> list[int]:
        items = [x.strip() for x in text.split(",") if x.strip()]
        if not items:
            raise argparse.ArgumentTypeError("expected comma-separated integers")
        try:
            return [one(x) for x in items]
        except argparse.ArgumentTypeError as e:
            raise argparse.ArgumentTypeError(f"{e} (in {text!r})") from None

    parse.__name__ = "list"
    return parse


positive_int = number(int, POSITIVE_INT)
non_negative_int = number(int, Number(integer=True, min=0))
positive = number(float, POSITIVE)
non_negative = number(float, NON_NEGATIVE)
fraction_open = number(float, Number(min=0, min_open=True, max=1, max_open=True))
any_int = number(int)


OUTPUT_ONLY = {
    "func",
    "out",
    "format",
    "no_plots",
    "columns",
    "wide",
    "command",
    "workers",
    "backend",
    "address",
    "no_report",
}  # flags that change where or how results are shown, not what they are


def results_dir(a: argparse.Namespace, default: Path) -> tuple[Path, str | None]:
    """Where a command writes: ``--out`` when given (the user's choice: kvsim's own files there are replaced,
    files.results_folder), else ``default``
    unless that holds results of another configuration, then ``default-2``, ``-3``, ... (the first that is
    empty or holds this configuration's). Returns (folder, note for the user or None)."""
    if a.out:
        return Path(a.out), None
    mark = run_fingerprint(a)
    i = 1
    while True:
        p = default if i == 1 else default.with_name(f"{default.name}-{i}")
        m = p / CONFIG_MARK
        if not p.exists() or not any(p.iterdir()) or (m.is_file() and m.read_text(encoding="utf-8") == mark):
            note = (
                None
                if i == 1
                else (
                    f"note: {default} holds results of another configuration; writing to {p} (--out chooses the folder)"
                )
            )
            return p, note
        i += 1


def run_fingerprint(a: argparse.Namespace) -> str:
    """The options that decide a command's results, as stable text."""
    import json

    return json.dumps({k: str(v) for k, v in sorted(vars(a).items()) if k not in OUTPUT_ONLY}, sort_keys=True)


def result_marker(a: argparse.Namespace) -> tuple[str, str]:
    """(file name, text) recording which configuration a results folder describes (:func:`results_dir`)."""
    return CONFIG_MARK, run_fingerprint(a)
