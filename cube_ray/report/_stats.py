"""Agreement and comparison statistics for the report (pure numpy/scipy/Polars).

Judge agreement (pairwise Spearman, Krippendorff's alpha with the interval
metric) and agreement with human ratings (Pearson, Spearman, MAE).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np
import numpy.typing as npt
import polars as pl
from scipy import stats

from cube_ray import schema

__all__ = [
    "PairStats",
    "judge_agreement",
    "krippendorff_alpha_interval",
    "pair_stats",
    "score_matrix",
]

FloatArray = npt.NDArray[np.float64]


def krippendorff_alpha_interval(data: FloatArray) -> float | None:
    """Krippendorff's alpha with the interval metric.

    Args:
        data: ``[coders, units]`` ratings; NaN where a coder did not rate a unit.

    Returns:
        Alpha, or ``None`` when undefined (fewer than two pairable values or
        no variation at all).

    Units rated by fewer than two coders are not pairable and are dropped.
    With ``m_u`` values in unit ``u`` and ``n = sum(m_u)``, the squared
    differences summed over ordered pairs are ``2 (m S2 - S1^2)``, so
    ``alpha = 1 - (n - 1) sum_u[(m_u S2_u - S1_u^2) / (m_u - 1)] /
    (n S2 - S1^2)``.

    >>> x = np.array([[1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0]])
    >>> krippendorff_alpha_interval(x)
    1.0
    >>> y = np.array([[1.0, 2.0, 3.0, 3.0, np.nan], [1.0, 2.0, 4.0, 3.0, 5.0]])
    >>> round(krippendorff_alpha_interval(y), 6)
    0.888889
    """
    values = np.asarray(data, dtype=np.float64)
    valid = ~np.isnan(values)
    m = valid.sum(axis=0)
    pairable = m >= 2
    if not pairable.any():
        return None
    v = np.where(valid, values, 0.0)[:, pairable]
    m = m[pairable].astype(np.float64)
    s1 = v.sum(axis=0)
    s2 = (v * v).sum(axis=0)
    n = m.sum()
    within = ((m * s2 - s1 * s1) / (m - 1.0)).sum()
    total = n * s2.sum() - s1.sum() ** 2
    if n < 2 or total <= 0:
        return None
    return float(1.0 - (n - 1.0) * within / total)


def score_matrix(
    scores: pl.DataFrame, *, dimension: str, judges: Sequence[str]
) -> FloatArray:
    """``[judges, units]`` scores of one dimension; units are (question, system).

    Missing scores are NaN.
    """
    rows = scores.filter(
        (pl.col(schema.DIMENSION) == dimension) & pl.col(schema.JUDGE).is_in(judges)
    )
    wide = rows.pivot(
        on=schema.JUDGE,
        index=[schema.QUESTION_ID, schema.SYSTEM],
        values=schema.SCORE,
        aggregate_function="mean",
    )
    cols = [
        wide.get_column(j).cast(pl.Float64).to_numpy()
        if j in wide.columns
        else np.full(wide.height, np.nan)
        for j in judges
    ]
    if not cols:
        return np.zeros((0, wide.height))
    out: FloatArray = np.vstack([np.asarray(c, dtype=np.float64) for c in cols])
    return out


@dataclass(frozen=True)
class PairStats:
    """Agreement of two score columns over their common non-missing items."""

    n: int
    pearson: float | None
    spearman: float | None
    mae: float | None


def _finite_or_none(x: float) -> float | None:
    return None if math.isnan(x) or math.isinf(x) else float(x)


def pair_stats(x: FloatArray, y: FloatArray) -> PairStats:
    """Pearson, Spearman and mean absolute error of two aligned columns.

    >>> x = np.array([1.0, 2.0, 3.0, np.nan])
    >>> s = pair_stats(x, np.array([2.0, 3.0, 5.0, 1.0]))
    >>> (s.n, round(s.spearman, 6), round(s.mae, 6))
    (3, 1.0, 1.333333)
    """
    ok = ~(np.isnan(x) | np.isnan(y))
    a, b = x[ok], y[ok]
    n = int(ok.sum())
    if n == 0:
        return PairStats(0, None, None, None)
    mae = float(np.mean(np.abs(a - b)))
    if n < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return PairStats(n, None, None, mae)
    pearson = float(np.corrcoef(a, b)[0, 1])
    spearman = float(stats.spearmanr(a, b).statistic)
    return PairStats(n, _finite_or_none(pearson), _finite_or_none(spearman), mae)


def judge_agreement(
    scores: pl.DataFrame, *, judges: Sequence[str], dimensions: Sequence[str]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Pairwise Spearman between judges and Krippendorff's alpha per dimension.

    Units are (question, system) pairs of every set (zero, full, systems).

    Returns:
        ``(spearman, alpha)``: ``spearman`` has one row per judge pair and
        dimension (``judge_a, judge_b, dimension, n, spearman``); ``alpha`` one
        row per dimension (``dimension, units, alpha``).
    """
    pair_rows: list[dict[str, object]] = []
    alpha_rows: list[dict[str, object]] = []
    for dim in dimensions:
        mat = score_matrix(scores, dimension=dim, judges=judges)
        for (ia, ja), (ib, jb) in combinations(enumerate(judges), 2):
            st = pair_stats(mat[ia], mat[ib])
            pair_rows.append(
                {
                    "judge_a": ja,
                    "judge_b": jb,
                    "dimension": dim,
                    "n": st.n,
                    "spearman": st.spearman,
                }
            )
        units = int((np.sum(~np.isnan(mat), axis=0) >= 2).sum()) if mat.size else 0
        alpha_rows.append(
            {
                "dimension": dim,
                "units": units,
                "alpha": krippendorff_alpha_interval(mat) if mat.size else None,
            }
        )
    pair_schema = {
        "judge_a": pl.String,
        "judge_b": pl.String,
        "dimension": pl.String,
        "n": pl.Int64,
        "spearman": pl.Float64,
    }
    alpha_schema = {"dimension": pl.String, "units": pl.Int64, "alpha": pl.Float64}
    return (
        pl.DataFrame(pair_rows, schema=pair_schema),
        pl.DataFrame(alpha_rows, schema=alpha_schema),
    )
