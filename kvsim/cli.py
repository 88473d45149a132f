"""The `kvsim` command line: builds the parser from kvsim/commands/ and runs the chosen command.

Errors a user can act on are one line (`kvsim: error: ...`, exit 2) after the usage of the command they
typed; anything unexpected is one line too, with the path of a saved traceback to report (exit 3).
Heavy libraries are imported inside the commands that need them.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from kvsim import __version__
from kvsim.commands.parser import Parser, make_parser as make_command_parser
from kvsim.errors import KvsimError


def make_parser() -> Parser:
    """Every command's parser, `kvsim ui` (the service, which itself reads the commands' parsers) included."""
    from kvsim.service import command as ui

    return make_command_parser((ui,))


def _chosen_parser(parser: Parser, ns: argparse.Namespace) -> Parser:
    """The innermost subcommand parser the command line chose (for its usage and option names)."""
    chosen = parser
    for dest in ("command", "trace_command", "kernels_command"):
        name = getattr(ns, dest, None)
        if not name:
            break
        for action in chosen._actions:
            if isinstance(action, argparse._SubParsersAction) and name in action.choices:
                chosen = action.choices[name]
                break
    return chosen


def _checked(key: str, value) -> object:
    """An option's value from the command line as kvsim takes it, or None when it is wrong (said later, with the
    other options' checks)."""
    from kvsim.options import normalize

    try:
        return normalize({key: value})[key]
    except KvsimError:
        return None


def _take_vllm_flags(chosen: Parser, ns: argparse.Namespace, unknown: list[str]) -> list[str]:
    """Take the `vllm serve` flags among ``unknown`` (kvsim/vllm_flags.py): apply those kvsim applies where the
    command has the option, list the rest once as not modelled; return what is still unknown."""
    from kvsim.option_table import OPTIONS
    from kvsim.vllm_flags import APPLIED, take_vllm_flags

    own = {f for o in OPTIONS for f in o.flags if f.startswith("--")} | _negated_flags()
    rest, taken = take_vllm_flags(unknown, own)
    rest = _take_model_tag(ns, rest)
    ignored = []
    by_flag: dict[str, tuple[str, Any]] = {}  # option key -> (the vLLM flag that set it, its value)
    for flag, value in taken:
        key, convert = APPLIED.get(flag, (None, None))
        given_as = flag if value is None else f"{flag} {value}"
        applied = None
        if key is not None and convert is not None and hasattr(ns, key):
            try:
                applied = convert(value)
            except (TypeError, ValueError) as e:
                chosen.error(f"{flag}: {e}")
        if key is None or applied is None:
            ignored.append(given_as)
            continue
        given = getattr(ns, key)
        option = f"--{key.replace('_', '-')}"
        if key in by_flag:  # two vLLM flags set it: the last one, but no CUDA graph beats any sizes (as in vLLM)
            if by_flag[key][1] == "none" and key == "cudagraph_capture_sizes":
                continue
        elif given is not None:
            if _checked(key, given) not in (None, applied):
                chosen.error(f"{given_as} means {option} {applied}, but {option} {given} is given too")
            continue
        by_flag[key] = (given_as, applied)
        setattr(ns, key, applied)
    for key, (given_as, applied) in by_flag.items():
        shown = str(applied)
        if len(shown) > 60 and "," in shown:  # a long list of sizes: its ends and count
            items = shown.split(",")
            shown = f"{','.join(items[:3])},...,{items[-1]} ({len(items)} sizes)"
        print(f"note: {given_as}: applied as kvsim's --{key.replace('_', '-')} {shown}", file=sys.stderr)
    if ignored:
        print(
            f"note: vLLM flags kvsim does not model for this command, accepted with no effect: {', '.join(ignored)}",
            file=sys.stderr,
        )
    return rest


def _negated_flags() -> set[str]:
    """The --no-x forms of kvsim's boolean options."""
    from kvsim.option_table import OPTIONS

    return {f"--no-{f[2:]}" for o in OPTIONS if o.negatable for f in o.flags if f.startswith("--")}


def _take_model_tag(ns: argparse.Namespace, rest: list[str]) -> list[str]:
    """A pasted `vllm serve MODEL ...`: the words `vllm serve` dropped and the model tag, vLLM's positional, read as
    --model (said on the terminal), where the command has --model and was not given another; ``rest`` as it was
    where that is not what it holds."""
    words = rest[2:] if rest[:2] == ["vllm", "serve"] else rest
    bare = [t for t in words if not t.startswith("-")]
    if len(bare) != 1 or not hasattr(ns, "model") or ns.model not in (None, bare[0]):
        return rest
    from kvsim.hardware import get_model

    try:
        get_model(bare[0])
    except KvsimError:
        return rest
    if ns.model is None:
        ns.model = bare[0]
        print(f"note: {bare[0]} (vllm serve's positional model): read as --model {bare[0]}", file=sys.stderr)
    return [t for t in words if t != bare[0]]


def _report_crash(exc: BaseException) -> int:
    """An unexpected error: one line, the traceback saved to a file to report."""
    import tempfile
    import time
    import traceback

    path = os.path.join(tempfile.gettempdir(), f"kvsim-crash-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.txt")
    try:
        with open(path, "w", encoding="utf-8") as fh:
            import shlex

            fh.write(f"kvsim {__version__}\ncommand: kvsim {shlex.join(sys.argv[1:])}\n\n")
            traceback.print_exception(exc, file=fh)
        where = f"; the traceback is in {path}"
    except OSError:
        where = ""
    print(f"kvsim: internal error: {type(exc).__name__}: {exc} -- please report it{where}", file=sys.stderr)
    return 3


def main(argv: list[str] | None = None) -> int:
    parser = make_parser()
    args_in = sys.argv[1:] if argv is None else argv
    if not args_in:
        parser.print_help()
        return 0
    from kvsim.vllm_flags import vllm_argv

    try:  # vLLM's rewriting: --config FILE.yaml, --max_num_seqs, -O3, --json-option.field value
        args_in = vllm_argv(list(args_in), _negated_flags())
    except KvsimError as e:
        print(f"kvsim: error: {e}", file=sys.stderr)
        return 2
    ns, unknown = parser.parse_known_args(args_in)
    if unknown:
        chosen = _chosen_parser(parser, ns)
        unknown = _take_vllm_flags(chosen, ns, unknown)
        if unknown:
            chosen.error(f"unrecognized arguments: {' '.join(unknown)}{chosen.suggest(unknown)}")
    if not getattr(ns, "func", None):  # a command group without its subcommand
        _chosen_parser(parser, ns).print_help()
        return 2
    try:
        return ns.func(ns)
    except KvsimError as e:
        print(f"kvsim: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kvsim: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into a reader that stopped (e.g. `| head`)
        return 0
    except MemoryError:
        print(
            "kvsim: error: out of memory (a smaller trace, --horizon-s, or a larger --block-size helps)",
            file=sys.stderr,
        )
        return 2
    except Exception as e:  # noqa: BLE001 - the top-level guard: never a bare traceback
        return _report_crash(e)


if __name__ == "__main__":
    sys.exit(main())
