"""Property tests: cube_ray's trimmed means and Pearson agree with scipy."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
from hypothesis import given, settings, strategies as st
from scipy import stats

from cube_ray.aggregate import COUNT, histogram, pearson, trimmed_means

# Judge scores: 0..10 in steps of 0.01 (integer scores, or expected values).
scores = st.integers(0, 1000).map(lambda v: v / 100)
integer_scores = st.integers(0, 10).map(float)


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(st.one_of(scores, integer_scores), min_size=1, max_size=80),
    trim=st.floats(0.0, 0.49),
)
def test_trimmed_mean_matches_scipy(values: list[float], trim: float) -> None:
    frame = pl.DataFrame({"score": values})
    expected = stats.trim_mean(np.asarray(values), trim)
    rows = trimmed_means(frame, by=[], trim=trim)
    hist = trimmed_means(histogram(frame, by=[]), by=[], trim=trim, count=COUNT)
    for got in (rows, hist):
        assert got["n"].item() == len(values)
        value = got["trimmed_mean"].item()
        assert math.isclose(value, expected, rel_tol=0, abs_tol=1e-9)


@settings(max_examples=100, deadline=None)
@given(
    groups=st.lists(
        st.lists(st.one_of(integer_scores, st.none()), min_size=1, max_size=40),
        min_size=1,
        max_size=5,
    ),
    trim=st.sampled_from([0.0, 0.1, 0.2, 0.25, 0.3]),
)
def test_grouped_trimmed_means_skip_missing(
    groups: list[list[float | None]], trim: float
) -> None:
    frame = pl.DataFrame(
        {
            "g": [i for i, g in enumerate(groups) for _ in g],
            "score": [v for g in groups for v in g],
        },
        schema={"g": pl.Int64, "score": pl.Float64},
    )
    rows = trimmed_means(frame, by=["g"], trim=trim)
    hist = trimmed_means(histogram(frame, by=["g"]), by=["g"], trim=trim, count=COUNT)
    assert rows.equals(hist.with_columns(rows["trimmed_mean"])), (rows, hist)
    got = dict(rows.select("g", "trimmed_mean").iter_rows())
    for i, g in enumerate(groups):
        present = [v for v in g if v is not None]
        if not present:
            assert i not in got
            continue
        expected = stats.trim_mean(np.asarray(present), trim)
        assert math.isclose(got[i], expected, rel_tol=0, abs_tol=1e-9)


@settings(max_examples=200, deadline=None)
@given(
    pairs=st.lists(
        st.tuples(st.integers(0, 10), st.one_of(scores, integer_scores)),
        min_size=1,
        max_size=80,
    )
)
def test_pearson_matches_scipy(pairs: list[tuple[int, float]]) -> None:
    x = np.asarray([p[0] for p in pairs], dtype=float)
    y = np.asarray([p[1] for p in pairs])
    frame = pl.DataFrame({"x": x, "y": y})
    r_rows = pearson(frame, by=[], x="x", y="y")["r"].item()
    hist = histogram(frame, by=[], value=["x", "y"])
    r_hist = pearson(hist, by=[], x="x", y="y", count=COUNT)["r"].item()
    if len(pairs) < 2 or x.min() == x.max() or y.min() == y.max():
        assert r_rows is None
        assert r_hist is None
        return
    expected = stats.pearsonr(x, y).statistic
    assert math.isclose(r_rows, expected, rel_tol=0, abs_tol=1e-9)
    assert math.isclose(r_hist, expected, rel_tol=0, abs_tol=1e-9)
