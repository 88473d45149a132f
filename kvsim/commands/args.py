"""Argument types for the commands' own flags: values are checked as they are parsed, so a bad one is a
one-line error naming the flag (the simulation options are checked by kvsim/options.py)."""

from __future__ import annotations

import argparse
from typing import Callable

from kvsim.validation import NON_NEGATIVE, POSITIVE, POSITIVE_INT, Number

DEFAULT_OUT = "kvsim-out"  # where commands write unless told otherwise


def number(kind: type, rule: Number | None = None) -> Callable[[str], int | float]:
    """An argparse type: text -> int or float, checked against ``rule``."""
    def parse(text: str):
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {'an integer' if kind is int else 'a number'}, got {text!r}") from None
        if kind is int:
            if not v.is_integer():
                raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}")
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
