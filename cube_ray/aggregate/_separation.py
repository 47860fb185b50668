"""Bound separation (CUBE_METHOD.md section 10): can a judge tell the bounds apart?

A judge's bounds are *separated* for a figure when the gap ``full - zero`` of its
trimmed means (the section 7 denominator) is at least ``min_gap`` points and a
one-sided Wilcoxon signed-rank test of the paired differences
``delta_q = full_q - zero_q > 0`` gives ``p < alpha``.

The test runs on *histograms* of the differences (one row per distinct value
with its count), not on one Python object per question: judges' integer scores
give at most 21 distinct differences per dimension, so two million questions
collapse into a handful of rows. The p-value is the one
``scipy.stats.wilcoxon(delta, alternative="greater")`` gives on the expanded
differences: scipy itself for samples of at most 50 (where it uses the exact or
permutation distribution), and scipy's normal approximation with its tie
correction, computed from the counts, above that.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
import polars as pl
from scipy import stats
from scipy.special import ndtr

from cube_ray import schema

EngineType = Literal["auto", "in-memory", "streaming", "gpu"]

__all__ = [
    "MIN_NONZERO_PAIRS",
    "NOT_SEPARATED",
    "PairCodes",
    "packed_key",
    "pair_codes",
    "paired_differences",
    "separated",
    "verdict_minimum",
    "wilcoxon_greater",
]

NOT_SEPARATED = "bounds not separated"
"""Flag of a judge whose full - zero gap is too small or not significant."""

MIN_NONZERO_PAIRS = 6
"""Below this many non-zero differences the p-value is 1 (section 10)."""

DELTA = "delta"
"""Column of a paired difference ``full - zero``."""

_SCIPY_EXACT_MAX = 50
"""scipy's ``method="auto"`` uses the exact or permutation null distribution up to
this many differences (zeros included) and the normal approximation above."""

FloatArray = npt.NDArray[np.float64]


def wilcoxon_greater(
    values: Sequence[float] | FloatArray,
    counts: Sequence[int] | npt.NDArray[np.integer] | None = None,
) -> float:
    """One-sided Wilcoxon signed-rank p-value of ``delta > 0`` from a histogram.

    Equals ``scipy.stats.wilcoxon(delta, alternative="greater").pvalue`` on the
    differences ``delta`` (each value repeated ``counts`` times), zero
    differences dropped, except that the p-value is 1 when fewer than
    :data:`MIN_NONZERO_PAIRS` differences are non-zero.

    Args:
        values: Distinct differences (or raw differences with ``counts=None``).
        counts: How often each value occurs; None for raw differences.

    Returns:
        The p-value in [0, 1].

    Examples:
        Twenty questions, all 3 points better with the document:

        >>> p = wilcoxon_greater([3.0], [20])
        >>> p < 1e-4
        True
        >>> scipy_p = float(stats.wilcoxon([3.0] * 20, alternative="greater").pvalue)
        >>> abs(p - scipy_p) < 1e-15
        True

        Five non-zero differences are too few to say anything:

        >>> wilcoxon_greater([2.0, 0.0], [5, 40])
        1.0
    """
    v = np.asarray(values, dtype=np.float64)
    c = (
        np.ones(v.shape, dtype=np.int64)
        if counts is None
        else np.asarray(counts, dtype=np.int64)
    )
    keep = c > 0
    v, c = v[keep], c[keep]
    nonzero = v != 0
    n = int(c[nonzero].sum())
    if n < MIN_NONZERO_PAIRS:
        return 1.0
    if int(c.sum()) <= _SCIPY_EXACT_MAX:
        result = stats.wilcoxon(np.repeat(v, c), alternative="greater")
        return float(np.clip(result.pvalue, 0.0, 1.0))
    # scipy's asymptotic branch (correction=False), from the counts: zeros are
    # dropped, |delta| gets average ranks, ties shrink the variance.
    v, c = v[nonzero], c[nonzero]
    _, inverse = np.unique(np.abs(v), return_inverse=True)
    ties = np.bincount(inverse, weights=c).astype(np.float64)
    below = np.cumsum(ties) - ties
    mean_rank = below + (ties + 1.0) / 2.0
    r_plus = float((c[v > 0] * mean_rank[inverse[v > 0]]).sum())
    mn = n * (n + 1.0) * 0.25
    var = n * (n + 1.0) * (2.0 * n + 1.0) - float((ties**3 - ties).sum()) / 2.0
    if var <= 0:
        return 1.0
    z = (r_plus - mn) / np.sqrt(var / 24.0)
    return float(ndtr(-z))


def verdict_minimum(alpha: float) -> int:
    """The fewest questions on which a judge can separate the bounds at ``alpha``.

    The smallest n whose best possible one-sided Wilcoxon signed-rank p (every
    difference ``full - zero`` positive: the exact p is ``2**-n``) is below
    ``alpha``, and never below :data:`MIN_NONZERO_PAIRS` (below that
    :func:`wilcoxon_greater` says p = 1). With fewer questions no judge can
    enter the headline (section 10), so no system gets a verdict.

    >>> verdict_minimum(0.05), verdict_minimum(0.01), verdict_minimum(0.001)
    (6, 7, 10)
    >>> best = float(stats.wilcoxon([1.0] * 10, alternative="greater").pvalue)
    >>> best == 2.0**-10 < 0.001 <= 2.0**-9
    True
    """
    n = MIN_NONZERO_PAIRS
    while 2.0**-n >= alpha:
        n += 1
    return n


def separated(
    gap: float | None, p_value: float, *, min_gap: float, alpha: float
) -> bool:
    """Whether bounds are separated: ``gap >= min_gap`` and ``p < alpha``.

    Examples:
        >>> separated(0.62, 0.001, min_gap=0.5, alpha=0.05)
        True
        >>> separated(0.05, 5e-9, min_gap=0.5, alpha=0.05)  # tiny, consistent
        False
        >>> separated(None, 0.0, min_gap=0.5, alpha=0.05)
        False
    """
    return gap is not None and gap >= min_gap and p_value < alpha


def paired_differences(
    bounds: pl.LazyFrame,
    *,
    by: Sequence[str | pl.Expr],
    engine: EngineType = "auto",
) -> pl.DataFrame:
    """Per group and question, ``full - zero`` of the questions scored in both.

    Tables that list the zero and the full rows in the same order (as a study
    written set by set usually does) are paired by position, a single
    vectorised pass; otherwise the two sets are hash-joined on the keys.

    Args:
        bounds: Score rows of the ``zero`` and ``full`` sets (``system``,
            ``question_id``, ``score`` and the ``by`` columns), at most one row
            per set, group and question; missing scores are left out.
        by: The keys besides the question (e.g. judge, dimension), or, when
            ``question_id`` is not among the output columns they name, the
            keys including the question (an expression packing them).
        engine: Polars engine for the collection.

    Returns:
        The key columns + ``delta`` (Float64), unordered.

    Examples:
        >>> rows = pl.LazyFrame(
        ...     {
        ...         "question_id": ["q1", "q1", "q2", "q3", "q3"],
        ...         "system": ["zero", "full", "full", "zero", "full"],
        ...         "score": [2.0, 7.0, 9.0, 5.0, None],
        ...     }
        ... )
        >>> paired_differences(rows, by=[]).rows()
        [('q1', 5.0)]
    """
    names = bounds.select(by).collect_schema().names()
    keys: list[str | pl.Expr] = list(by)
    if schema.QUESTION_ID not in names:
        keys.append(schema.QUESTION_ID)
    system = pl.col(schema.SYSTEM)
    zero, full = pl.collect_all(
        [
            bounds.filter(system == name).select(
                *keys, pl.col(schema.SCORE).alias(name)
            )
            for name in ("zero", "full")
        ],
        engine=engine,
    )
    on = [c for c in zero.columns if c != "zero"]
    if zero.height == full.height and zero.select(on).equals(full.select(on)):
        pairs = zero.select(*on, (full["full"] - zero["zero"]).alias(DELTA))
        return pairs.filter(pl.col(DELTA).is_not_null())
    # full + (-zero) and full - zero are the same float: both paths agree.
    return (
        zero.lazy()
        .drop_nulls("zero")
        .join(full.lazy().drop_nulls("full"), on=on, how="inner")
        .select(*on, (pl.col("full") - pl.col("zero")).alias(DELTA))
        .collect(engine=engine)
    )


# --- the packed fast path ------------------------------------------------------
# Pairing the bounds is a join of tens of millions of rows on (judge, dimension,
# question). When question ids are integers and judge and dimension are
# categorical, the three keys pack exactly into one unsigned 64-bit integer:
# ``dimension_code * 2**48 + judge_code * 2**32 + question_id``; one-column
# integer joins and groupings are several times faster than multi-column ones.

PAIR_KEY = "pair_key"
"""Column of the packed (dimension, judge, question) key."""
QUESTION_SPAN = 2**32
"""Question ids of the packed path lie in ``[0, QUESTION_SPAN)``."""
CODE_SPAN = 2**16
"""Judge and dimension codes of the packed path lie in ``[0, CODE_SPAN)``."""
JUDGE_SPAN = CODE_SPAN * QUESTION_SPAN
"""``pair_key % JUDGE_SPAN`` is the packed (judge, question) key."""


@dataclass(frozen=True)
class PairCodes:
    """Physical codes of the judges and dimensions in a packed key."""

    judges: dict[str, int]
    """Judge name -> categorical code."""
    dimensions: dict[str, int]
    """Dimension name -> categorical code."""

    def code(self, judge: str, dimension: str) -> int:
        """``pair_key // QUESTION_SPAN`` of a judge and dimension."""
        return self.dimensions[dimension] * CODE_SPAN + self.judges[judge]

    def judge_of(self, code: pl.Expr) -> pl.Expr:
        """Judge names of ``pair_key // QUESTION_SPAN`` codes (or judge codes)."""
        names = {v: k for k, v in self.judges.items()}
        return (code % CODE_SPAN).replace_strict(names, return_dtype=pl.String)

    def dimension_of(self, code: pl.Expr) -> pl.Expr:
        """Dimension names of ``pair_key // QUESTION_SPAN`` codes."""
        names = {v: k for k, v in self.dimensions.items()}
        return (code // CODE_SPAN).replace_strict(names, return_dtype=pl.String)


def pair_codes(stats: pl.DataFrame, scores_schema: pl.Schema) -> PairCodes | None:
    """The codes of the packed path, or None when the keys do not pack exactly.

    Args:
        stats: One row per (system, judge, dimension) group of the score rows,
            with the judge and dimension columns in the scores' own types and,
            for integer question ids, their ``qid_min`` and ``qid_max``.
        scores_schema: The scores' column types.

    Returns:
        The codes when question ids are integers in ``[0, 2**32)`` and judges
        and dimensions are categorical with codes below ``2**16``.
    """
    types = [scores_schema[c] for c in (schema.JUDGE, schema.DIMENSION)]
    if not all(isinstance(t, (pl.Categorical, pl.Enum)) for t in types):
        return None
    if "qid_min" not in stats.columns or stats.height == 0:
        return None
    low, high = stats["qid_min"].min(), stats["qid_max"].max()
    if not (low >= 0 and high < QUESTION_SPAN):  # type: ignore[operator]
        return None
    maps = []
    for column in (schema.JUDGE, schema.DIMENSION):
        values = stats.get_column(column).unique()
        codes = values.to_physical()
        if codes.max() >= CODE_SPAN:  # type: ignore[operator]
            return None
        maps.append(
            dict(zip(values.cast(pl.String).to_list(), codes.to_list(), strict=True))
        )
    return PairCodes(judges=maps[0], dimensions=maps[1])


def packed_key() -> pl.Expr:
    """The packed ``(dimension, judge, question)`` key (see :func:`pair_codes`)."""
    return (
        pl.col(schema.DIMENSION).to_physical().cast(pl.UInt64) * JUDGE_SPAN
        + pl.col(schema.JUDGE).to_physical().cast(pl.UInt64) * QUESTION_SPAN
        + pl.col(schema.QUESTION_ID).cast(pl.UInt64)
    ).alias(PAIR_KEY)
