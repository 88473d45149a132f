"""`kvsim trace generate --rate-profile`: arrivals under a rate that changes by window."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kvsim.cli import main
from kvsim.errors import TraceError
from kvsim.trace.rate_profile import profile_arrivals, read_rate_profile


def write(tmp_path, text: str):
    p = tmp_path / "rates.csv"
    p.write_text(text)
    return str(p)


def test_windows_get_their_rate_and_a_zero_window_none(tmp_path):
    prof = read_rate_profile(write(tmp_path, "start_s,rate\n0,10\n100,0\n200,30\n"))
    assert prof.end == 300 and prof.expected_requests() == 10 * 100 + 30 * 100
    t = profile_arrivals(prof, np.random.default_rng(3))
    counts = np.histogram(t, bins=[0, 100, 200, 300])[0]
    assert counts[1] == 0  # nobody arrives while the rate is 0
    # Poisson counts: 1,000 and 3,000 expected, within 5 standard deviations
    assert abs(counts[0] - 1000) < 5 * 1000**0.5 and abs(counts[2] - 3000) < 5 * 3000**0.5
    assert np.all(np.diff(t) >= 0) and t[0] >= 0 and t[-1] < 300
    again = profile_arrivals(prof, np.random.default_rng(3))
    assert np.array_equal(t, again)  # the same seed, the same times


def test_scale_limit_and_gamma_burstiness(tmp_path):
    prof = read_rate_profile(write(tmp_path, "window_start_s,total_rate_rps\n0,50\n600,50\n"))
    assert prof.end == 1200  # the last window as long as the one before
    half = profile_arrivals(prof, np.random.default_rng(1), scale=0.5)
    assert abs(len(half) - 30_000) < 5 * 30_000**0.5
    assert len(profile_arrivals(prof, np.random.default_rng(1), limit=7)) == 7
    bursty = profile_arrivals(prof, np.random.default_rng(1), cv=3.0)
    gaps = np.diff(bursty)
    assert gaps.std() / gaps.mean() == pytest.approx(3.0, rel=0.15)  # a constant rate keeps the gaps' CV


@pytest.mark.parametrize(
    "text,message",
    [
        ("when,rate\n0,1\n", "needs a window-start column"),
        ("start_s,rate\n0,x\n", ":2: field 'rate': must be a number"),
        ("start_s,rate\n0,1\n0,2\n", ":3: field 'start_s': windows must start in increasing order"),
        ("start_s,rate\n0,-1\n", "must be finite and >= 0"),
        ("start_s,rate\n0,0\n", "every window's rate is 0"),
        ("start_s,rate\n", "no windows"),
    ],
)
def test_bad_profiles_name_file_line_and_field(tmp_path, text, message):
    with pytest.raises(TraceError, match=message):
        read_rate_profile(write(tmp_path, text))


def test_the_command_writes_the_day(tmp_path, capsys):
    out = tmp_path / "day.jsonl"
    rates = write(tmp_path, "start_s,rate\n0,2\n3600,4\n")
    assert (
        main(["trace", "generate", "--rate-profile", rates, "--rate-scale", "0.5", "--seed", "2", "-o", str(out)]) == 0
    )
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    t = np.array([r["arrival_s"] for r in rows])
    assert abs(len(rows) - 10800) < 5 * 10800**0.5 and np.all(np.diff(t) >= 0)
    assert abs((t < 3600).sum() - 3600) < 5 * 60  # 1 request/s in the first hour, 2 in the second
    err = capsys.readouterr().err
    assert "2 windows over 2.00 h" in err and f"{len(rows):,} requests" in err
    assert main(["trace", "generate", "--rate-profile", rates, "--rate", "3", "-o", str(out)]) == 2
    assert "--rate and --rate-profile" in capsys.readouterr().err
    assert main(["trace", "generate", "--rate-scale", "2", "-o", str(out)]) == 2


def test_the_shipped_day_is_a_day():
    from pathlib import Path

    prof = read_rate_profile(str(Path(__file__).resolve().parents[1] / "traces" / "servegen_m_large_day_rates.csv"))
    assert len(prof.starts) == 144 and prof.duration_s == 86400
    assert 1.5 < prof.rates.max() / prof.rates.mean() < 3  # a diurnal swing
