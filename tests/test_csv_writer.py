"""The result tables' CSV writer gives pandas' bytes exactly (it only skips pandas' per-value formatting)."""

import numpy as np
import pandas as pd
from hypothesis import given, settings, strategies as st

from kvsim.output.writer import write_csv

try:
    import pyarrow  # noqa: F401

    ARROW = True
except ImportError:
    ARROW = False

# where Arrow's float notation and Python's differ: zeros, integral values, below 1e-4, [1e15, 1e16)
EDGES = [
    10000000000.5,
    1.0000000000025e11,
    0.0,
    -0.0,
    1.0,
    -3.0,
    1e16,
    1e-5,
    1e-4,
    9.99e-5,
    1e15,
    1.5e15,
    9999999999999998.0,
    1e-7,
    5e-324,
    0.1,
]
FLOATS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(EDGES))
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
    write_csv(df, d / "ours.csv", arrow=False)
    write_csv(df, d / "chunked.csv", rows_per_chunk=2, arrow=False)
    want = (d / "pandas.csv").read_bytes()
    assert (d / "ours.csv").read_bytes() == want == (d / "chunked.csv").read_bytes()
    if ARROW:  # Arrow's formatting, with Python's notation where the two differ
        write_csv(df, d / "arrow.csv", arrow=True)
        write_csv(df, d / "arrow_chunked.csv", rows_per_chunk=2, arrow=True)
        assert (d / "arrow.csv").read_bytes() == want == (d / "arrow_chunked.csv").read_bytes()


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


def test_a_table_with_a_column_name_twice_is_written_as_pandas_writes_it(tmp_path):
    df = pd.DataFrame([[1, 2.5, "a"], [3, 4.5, "b,c"]], columns=["x", "x", "t"])
    df.to_csv(tmp_path / "a.csv", index=False)
    write_csv(df, tmp_path / "b.csv", arrow=True)
    assert (tmp_path / "b.csv").read_bytes() == (tmp_path / "a.csv").read_bytes()
