"""The argparse parser of kvsim's commands, with kvsim's error format (kvsim/cli.py runs it; the service,
kvsim/service/, reads the commands' inputs from it)."""

from __future__ import annotations

import argparse
import difflib
import sys

from kvsim import __version__


class Parser(argparse.ArgumentParser):
    """argparse with kvsim's error format: the usage of this (sub)command, then one `kvsim: error:` line."""

    def error(self, message: str):  # noqa: D102 - argparse's hook
        self.print_usage(sys.stderr)
        print(f"kvsim: error: {message}", file=sys.stderr)
        raise SystemExit(2)

    def suggest(self, unknown: list[str]) -> str:
        """'did you mean' for unknown options, from this parser's own."""
        known = [o for a in self._actions for o in a.option_strings]
        hints = []
        for u in unknown:
            close = difflib.get_close_matches(u.split("=")[0], known, n=1, cutoff=0.75) if u.startswith("-") else []
            if close:
                hints.append(f"{u} -> {close[0]}")
        return f" (did you mean: {'; '.join(hints)}?)" if hints else ""


def make_parser(extra: tuple = ()) -> Parser:
    """The parser of every command under kvsim/commands/, then of each module of ``extra`` (each has a
    ``register(subparsers)``)."""
    from kvsim.commands import fleet, kernels, latency, listing, planning, simulate, traces, validate

    p = Parser(
        prog="kvsim",
        description="kvsim: how well does a KV-cache memory manager use GPU memory, and what "
        "does that do to throughput and latency on your traffic? (README.md; the guide: docs/)",
    )
    p.add_argument("--version", action="version", version=f"kvsim {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for module in (simulate, fleet, traces, latency, kernels, planning, listing, validate):
        module.register(sub)
    from kvsim.commands import memory

    memory.register(sub)
    for module in extra:
        module.register(sub)
    return p
