"""The result tables' CSV writer gives pandas' bytes exactly (it only skips pandas' per-value formatting)."""

import numpy as np
import pandas as pd
from hypothesis import given, settings, strategies as st

from kvsim.output.writer import write_csv

FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, -0.0, 1e16, 1e-5, 0.1]))
TEXT = st.one_of(
    st.none(),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=8),
    st.sampled_from(["a,b", 'q"x', "", "line\nbreak", "x\r"]),
)


@settings(max_examples=150, deadline=None)
@given(
    st.integers(0, 6).flatmap(
        lambda n: st.tuples(
            st.lists(FLOATS, min_size=n, max_size=n),
            st.lists(st.integers(-(2**62), 2**62), min_size=n, max_size=n),
            st.lists(TEXT, min_size=n, max_size=n),
            st.lists(st.booleans(), min_size=n, max_size=n),
        )
    )
)
def test_the_csv_writer_matches_pandas_byte_for_byte(tmp_path_factory, cols):
    f, i, t, b = cols
    df = pd.DataFrame(
        {
            "f": pd.Series(f, dtype="float64"),
            "i": pd.Series(i, dtype="int64"),
            "t": pd.Series(t, dtype=object),
            "s": pd.array(t, dtype="string"),
            "b": pd.Series(b, dtype=bool),
        }
    )
    d = tmp_path_factory.mktemp("csv")
    df.to_csv(d / "pandas.csv", index=False)
    write_csv(df, d / "ours.csv")
    write_csv(df, d / "chunked.csv", rows_per_chunk=2)
    assert (d / "ours.csv").read_bytes() == (d / "pandas.csv").read_bytes() == (d / "chunked.csv").read_bytes()


def test_columns_of_other_kinds_go_through_pandas(tmp_path):
    df = pd.DataFrame(
        {
            "when": pd.to_datetime(["2026-12-01", None]),
            "n": pd.array([1, None], dtype="Int64"),
            "x": np.array([1.5, 2.5], dtype=np.float32),
        }
    )
    df.to_csv(tmp_path / "a.csv", index=False)
    write_csv(df, tmp_path / "b.csv")
    assert (tmp_path / "b.csv").read_bytes() == (tmp_path / "a.csv").read_bytes()
