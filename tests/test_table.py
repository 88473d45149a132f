"""The terminal tables fit 80 and 120 columns without cutting a number, and say their units."""

import io

import pytest
from rich.console import Console

from kvsim.errors import ConfigError
from kvsim.output.table import choose_columns, latency_unit, markdown_table, print_table

ROWS = [
    {
        "allocator": "max",
        "finished": 3000,
        "rejected": 0,
        "unfinished": 0,
        "throughput_tok_s": 617.2,
        "mean_batch": 10.0,
        "ttft_p50_s": 325.5,
        "ttft_p99_s": 710.4,
        "tpot_p50_s": 0.0159,
        "preemptions": 0,
        "mem_token_states": 0.14,
        "mem_reserved": 0.07,
        "mem_internal_frag": 0.72,
        "mem_external_frag": 0.07,
        "mem_free": 0.003,
        "kv_efficiency": 0.14,
    },
    {
        "allocator": "paged:16+prefix",
        "finished": 2990,
        "rejected": 10,
        "unfinished": 0,
        "throughput_tok_s": 1491.3,
        "mean_batch": 48.8,
        "ttft_p50_s": 0.061,
        "ttft_p99_s": 1.88,
        "tpot_p50_s": 0.0323,
        "preemptions": 98,
        "prefix_hit_rate_tokens": 0.68,
        "mem_token_states": 0.66,
        "mem_reserved": 0.01,
        "mem_internal_frag": 0.0,
        "mem_external_frag": 0.0,
        "mem_free": 0.33,
        "kv_efficiency": 0.985,
    },
]


def render(width, **kw):
    buf = io.StringIO()
    console = Console(width=width, file=buf, color_system=None, force_terminal=False)
    dropped = print_table(ROWS, "chat · llama-2-7b · a100-40gb", console=console, **kw)
    return buf.getvalue(), dropped


@pytest.mark.parametrize("width", [80, 120])
def test_fits_the_terminal_without_ellipses(width):
    text, dropped = render(width)
    lines = text.splitlines()
    assert max(len(ln) for ln in lines) <= width
    assert "…" not in text
    assert "paged:16+prefix" in text and "1,491" in text and "3,000" in text
    assert "tok/s" in text and "p99 s" in text and "p50 ms" in text  # units in the headers
    if width == 120:
        assert not dropped
    else:  # what did not fit is named
        assert dropped and "hidden to fit 80 columns" in text


def test_wide_shows_everything_and_columns_pick():
    text, dropped = render(80, columns=choose_columns(wide=True), fit=False)
    assert not dropped and "resv%" in text and "eff%" in text
    text, _ = render(80, columns=choose_columns("tok_s,hit"))
    assert "hit" in text and "batch" not in text and "allocator" in text
    with pytest.raises(ConfigError, match="did you mean 'tok_s'"):
        choose_columns("tok/s")


def test_latency_units_and_decimals():
    assert latency_unit([0.0159, 0.0323]) == ("ms", 1e3, 1)
    assert latency_unit([0.061, 325.5])[0] == "s"
    md = markdown_table(ROWS)
    assert "TTFT p99 s" in md and "---:" in md
