"""The pure Polars building blocks of CuBE (CUBE_METHOD.md sections 5 to 8).

Every function takes and returns frames (a ``DataFrame`` in gives a ``DataFrame``
out, a ``LazyFrame`` in gives a ``LazyFrame`` out) or builds expressions; none reads
or writes files. They are written so that a study of millions of questions runs in
a few passes over the score rows:

* when scores take few distinct values (judges' integer scores), the rows are
  first compressed into *histograms*: one row per group and distinct score value
  with its count, so 96 million score rows collapse into a few thousand rows,
  and trimmed means and Pearson correlations are computed exactly from those
  counts (``count=`` argument). Sorting happens only on the small histogram.
* otherwise (continuous expected-value scores) the trimmed ends of each group
  are found by linear-time partial selection (``top_k`` / ``bottom_k``) inside a
  single ``group_by``; nothing is fully sorted.

Both agree with ``scipy.stats.trim_mean`` / ``scipy.stats.pearsonr`` on the raw
rows up to floating-point summation order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeVar

import polars as pl

from cube_ray import schema

__all__ = [
    "COUNT",
    "cross_judge",
    "histogram",
    "normalise",
    "pearson",
    "pearson_exprs",
    "pearson_weights",
    "rank_scores",
    "recall_at_k",
    "trim_count",
    "trimmed_mean_exprs",
    "trimmed_means",
    "weighted_totals",
]

FrameT = TypeVar("FrameT", pl.DataFrame, pl.LazyFrame)

COUNT = "count"
"""Column holding the multiplicity of a histogram row."""
RANK_SCORE = "rank_score"
N = "n"
R = "r"
WEIGHT = "weight"
FALLBACK = "fallback"
TRIMMED_MEAN = "trimmed_mean"
RECALL = "recall_at_k"
N_QUESTIONS = "n_questions"
N_RETRIEVED = "n_retrieved"
MEAN = "mean"
SD = "sd"

_ONE_GROUP = "__all__"


def _finish(frame: FrameT, result: pl.LazyFrame) -> FrameT:
    """Return ``result`` as the same kind of frame as the input ``frame``."""
    if isinstance(frame, pl.DataFrame):
        return result.collect()
    return result


def _with_group(lf: pl.LazyFrame, by: Sequence[str]) -> tuple[pl.LazyFrame, list[str]]:
    """Add a constant grouping column when ``by`` is empty (one global group)."""
    if by:
        return lf, list(by)
    return lf.with_columns(pl.lit(0, dtype=pl.UInt8).alias(_ONE_GROUP)), [_ONE_GROUP]


def _drop_group(lf: pl.LazyFrame, by: Sequence[str]) -> pl.LazyFrame:
    return lf if by else lf.drop(_ONE_GROUP)


def trim_count(n: pl.Expr, trim: float) -> pl.Expr:
    """Values cut from each end: ``int(trim * n)``, as ``scipy.stats.trim_mean``.

    The product is computed in float64 exactly as Python computes ``trim * n``,
    so the cut agrees with scipy even where ``trim * n`` lands a hair below an
    integer.

    Args:
        n: Number of (non-missing) values in the group.
        trim: Proportion cut from each end, ``0 <= trim < 0.5``.

    Returns:
        An Int64 expression.

    Examples:
        >>> pl.select(trim_count(pl.lit(25), 0.1)).item()
        2
    """
    return (n.cast(pl.Float64) * trim).floor().cast(pl.Int64)


def histogram(
    frame: FrameT,
    *,
    by: Sequence[str],
    value: str | Sequence[str] = schema.SCORE,
) -> FrameT:
    """Compress rows into one row per group and distinct value, with its count.

    Rows whose value is missing are dropped (they are counted elsewhere).

    Args:
        frame: Rows with the ``by`` columns and the value column(s).
        by: Grouping columns.
        value: The column (or columns) whose distinct values are counted.

    Returns:
        ``by`` + value column(s) + ``count`` (UInt32), unordered.

    Examples:
        >>> df = pl.DataFrame(
        ...     {"g": ["a", "a", "a", "b"], "score": [1.0, 1.0, None, 2.0]}
        ... )
        >>> histogram(df, by=["g"]).sort("g")
        shape: (2, 3)
        ┌─────┬───────┬───────┐
        │ g   ┆ score ┆ count │
        │ --- ┆ ---   ┆ ---   │
        │ str ┆ f64   ┆ u32   │
        ╞═════╪═══════╪═══════╡
        │ a   ┆ 1.0   ┆ 2     │
        │ b   ┆ 2.0   ┆ 1     │
        └─────┴───────┴───────┘
    """
    values: list[str] = [value] if isinstance(value, str) else list(value)
    not_null = pl.all_horizontal(pl.col(v).is_not_null() for v in values)
    result = (
        frame.lazy()
        .filter(not_null)
        .group_by([*by, *values])
        .agg(pl.len().alias(COUNT))
    )
    return _finish(frame, result)


def trimmed_means(
    frame: FrameT,
    *,
    by: Sequence[str],
    trim: float,
    value: str = schema.SCORE,
    count: str | None = None,
) -> FrameT:
    """Trimmed mean per group, with ``scipy.stats.trim_mean`` semantics.

    Missing values are left out; of the ``n`` remaining values of a group,
    ``int(trim * n)`` are cut from each end of the sorted values and the rest are
    averaged. Groups without any value do not appear in the result.

    Args:
        frame: Either raw rows (``count=None``; linear-time selection of the
            trimmed ends) or a histogram whose ``count`` column gives each row's
            multiplicity (see :func:`histogram`; only distinct values are
            sorted, much faster when scores take few distinct values).
        by: Grouping columns (may be empty: one group).
        trim: Proportion cut from each end, ``0 <= trim < 0.5``.
        value: The column to average.
        count: Multiplicity column of a histogram input, or None for raw rows.

    Returns:
        ``by`` + ``n`` (values used before trimming, UInt32/Int64) +
        ``trimmed_mean`` (Float64), one row per group, sorted by ``by``.

    Examples:
        Ten values, 10 % trimmed: the 0 and the 100 are cut.

        >>> df = pl.DataFrame(
        ...     {"g": ["a"] * 10 + ["b"], "score": [0.0, *range(1, 9), 100.0, 5.0]}
        ... )
        >>> trimmed_means(df, by=["g"], trim=0.1)
        shape: (2, 3)
        ┌─────┬─────┬──────────────┐
        │ g   ┆ n   ┆ trimmed_mean │
        │ --- ┆ --- ┆ ---          │
        │ str ┆ i64 ┆ f64          │
        ╞═════╪═════╪══════════════╡
        │ a   ┆ 10  ┆ 4.5          │
        │ b   ┆ 1   ┆ 5.0          │
        └─────┴─────┴──────────────┘
    """
    if not 0 <= trim < 0.5:
        raise ValueError(f"trim must satisfy 0 <= trim < 0.5, got {trim}")
    keys: list[str]
    lf, keys = _with_group(frame.lazy(), by)
    if count is None:
        result = _trimmed_rows(lf, keys, trim=trim, value=value)
    else:
        result = _trimmed_histogram(lf, keys, trim=trim, value=value, count=count)
    return _finish(frame, _drop_group(result, by))


def trimmed_mean_exprs(values: pl.Expr, *, trim: float) -> tuple[pl.Expr, pl.Expr]:
    """Aggregation expressions ``(n, trimmed mean)`` of one group's raw values.

    Missing values are left out. The kept sum is the total minus the ``cut``
    smallest and the ``cut`` largest values, found by partial selection
    (``bottom_k`` / ``top_k``, linear time, as ``scipy.stats.trim_mean`` does
    with ``np.partition``); nothing is fully sorted. Use inside ``group_by().agg``
    to fuse several figures into one pass.

    Args:
        values: The values (may contain nulls), e.g. ``pl.col("score")`` or
            ``pl.col("score").filter(pl.col("rank") >= 1)``.
        trim: Proportion cut from each end, ``0 <= trim < 0.5``.

    Returns:
        ``n`` (Int64) and the trimmed mean (Float64, null when ``n == 0``).

    Examples:
        >>> n, tm = trimmed_mean_exprs(pl.col("v"), trim=0.25)
        >>> pl.DataFrame({"v": [9.0, 1.0, None, 2.0, 3.0]}).select(n, tm).row(0)
        (4, 2.5)
    """
    v = values.cast(pl.Float64).drop_nulls()
    n = v.len().cast(pl.Int64)
    cut = trim_count(n, trim)
    kept_sum = v.sum() - v.top_k(cut).sum() - v.bottom_k(cut).sum()
    mean = pl.when(n > 0).then(kept_sum / (n - 2 * cut)).otherwise(None)
    return n.alias(N), mean.alias(TRIMMED_MEAN)


def pearson_exprs(x: pl.Expr, y: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """Aggregation expressions ``(n, r)``: Pearson r of one group's raw pairs.

    Pairs with a missing value are left out; ``r`` is null with fewer than two
    pairs or a constant column. Use inside ``group_by().agg``.

    Args:
        x: First variable.
        y: Second variable.

    Returns:
        ``n`` (Int64, pairs used) and ``r`` (Float64 or null).

    Examples:
        >>> n, r = pearson_exprs(pl.col("x"), pl.col("y"))
        >>> df = pl.DataFrame({"x": [1, 2, 3, 4], "y": [2.0, 4.0, None, 8.0]})
        >>> df.select(n, r).row(0)
        (3, 1.0)
    """
    both = x.is_not_null() & y.is_not_null()
    xs = x.cast(pl.Float64).filter(both)
    ys = y.cast(pl.Float64).filter(both)
    n = xs.len().cast(pl.Int64)
    defined = (n >= 2) & (xs.min() != xs.max()) & (ys.min() != ys.max())
    r = pl.corr(xs, ys).fill_nan(None).clip(-1.0, 1.0)
    return n.alias(N), pl.when(defined).then(r).otherwise(None).alias(R)


def _trimmed_rows(
    lf: pl.LazyFrame, keys: list[str], *, trim: float, value: str
) -> pl.LazyFrame:
    """Trimmed means of raw rows (see :func:`trimmed_mean_exprs`)."""
    n, mean = trimmed_mean_exprs(pl.col(value), trim=trim)
    return lf.filter(pl.col(value).is_not_null()).group_by(keys).agg(n, mean).sort(keys)


def _trimmed_histogram(
    lf: pl.LazyFrame, keys: list[str], *, trim: float, value: str, count: str
) -> pl.LazyFrame:
    """Trimmed means of a histogram: sort only the (few) distinct values."""
    c = pl.col(count).cast(pl.Int64)
    n = c.sum().over(keys)
    cut = trim_count(n, trim)
    end = c.cum_sum().over(keys)
    start = end - c
    # How many copies of this value fall inside the kept positions [cut, n - cut).
    kept = (pl.min_horizontal(end, n - cut) - pl.max_horizontal(start, cut)).clip(
        lower_bound=0
    )
    return (
        lf.filter(pl.col(value).is_not_null())
        .sort([*keys, value])
        .with_columns(kept.alias("_kept"), n.alias(N), cut.alias("_cut"))
        .group_by(keys)
        .agg(
            pl.col(N).first(),
            (
                (pl.col(value) * pl.col("_kept")).sum()
                / (pl.col(N).first() - 2 * pl.col("_cut").first())
            ).alias(TRIMMED_MEAN),
        )
        .sort(keys)
    )


def pearson(
    frame: FrameT,
    *,
    by: Sequence[str],
    x: str,
    y: str,
    count: str | None = None,
) -> FrameT:
    """Pearson correlation of ``x`` and ``y`` per group.

    Rows where either value is missing are left out. The correlation is null
    (undefined) with fewer than two pairs or when either column is constant.

    Args:
        frame: Raw rows (``count=None``) or a histogram over ``(by, x, y)``.
        by: Grouping columns (may be empty: one group).
        x: First column.
        y: Second column.
        count: Multiplicity column of a histogram input, or None for raw rows.

    Returns:
        ``by`` + ``n`` (pairs used) + ``r`` (Float64, null when undefined),
        sorted by ``by``.

    Examples:
        >>> df = pl.DataFrame({"x": [9, 8, 0], "y": [7.0, 6.0, 3.0]})
        >>> round(pearson(df, by=[], x="x", y="y")["r"].item(), 12)
        0.990071896571
    """
    keys: list[str]
    lf, keys = _with_group(frame.lazy(), by)
    lf = lf.filter(pl.col(x).is_not_null() & pl.col(y).is_not_null())
    if count is None:
        result = lf.group_by(keys).agg(*pearson_exprs(pl.col(x), pl.col(y)))
        return _finish(frame, _drop_group(result.sort(keys), by))
    # Centred sums from group means broadcast by window: the sums themselves
    # are plain aggregations, which stay on Polars' fast grouping path also
    # with many small groups (a bootstrap groups by replicate too).
    c = pl.col(count).cast(pl.Float64)
    xs, ys = pl.col(x).cast(pl.Float64), pl.col(y).cast(pl.Float64)
    n_over = c.sum().over(keys)
    dx = xs - (c * xs).sum().over(keys) / n_over
    dy = ys - (c * ys).sum().over(keys) / n_over
    sums = (
        lf.with_columns(
            (c * dx * dy).alias("_sxy"),
            (c * dx * dx).alias("_sxx"),
            (c * dy * dy).alias("_syy"),
        )
        .group_by(keys)
        .agg(
            c.sum().alias(N),
            (xs.min() != xs.max()).alias("_vx"),
            (ys.min() != ys.max()).alias("_vy"),
            pl.col("_sxy", "_sxx", "_syy").sum(),
        )
    )
    sxx, syy = pl.col("_sxx"), pl.col("_syy")
    defined = (pl.col(N) >= 2) & pl.col("_vx") & pl.col("_vy") & (sxx > 0) & (syy > 0)
    r = (
        pl.when(defined)
        .then((pl.col("_sxy") / (sxx.sqrt() * syy.sqrt())).clip(-1.0, 1.0))
        .otherwise(None)
    )
    result = sums.select(*keys, pl.col(N).cast(pl.Int64), r.alias(R)).sort(keys)
    return _finish(frame, _drop_group(result, by))


def pearson_weights(
    correlations: FrameT,
    *,
    by: Sequence[str],
    r: str = R,
) -> FrameT:
    """Dimension weights ``w_d = max(r_d, 0) / sum_j max(r_j, 0)`` per group.

    An undefined (null or NaN) ``r_d`` counts as 0. When every ``r_d`` of a
    group is <= 0 or undefined, the group falls back to equal weights and its
    ``fallback`` column is true.

    Args:
        correlations: One row per group and dimension with the correlation
            column ``r`` (every dimension of the group must have a row).
        by: Grouping columns (e.g. judge, system); may be empty.
        r: The correlation column.

    Returns:
        The input with ``weight`` (Float64) and ``fallback`` (Boolean) added.

    Examples:
        >>> df = pl.DataFrame({"dim": ["a", "b", "c"], "r": [0.6, -0.2, 0.2]})
        >>> pearson_weights(df, by=[])["weight"].to_list()
        [0.75, 0.0, 0.25]
        >>> df = pl.DataFrame({"dim": ["a", "b"], "r": [None, -0.1]})
        >>> pearson_weights(df, by=[]).select("weight", "fallback").row(0)
        (0.5, True)
    """
    lf, keys = _with_group(correlations.lazy(), by)
    positive = pl.col(r).fill_nan(None).fill_null(0.0).clip(lower_bound=0.0)
    total = positive.sum().over(keys)
    fallback = total <= 0.0
    weight = (
        pl.when(fallback)
        .then(1.0 / pl.len().over(keys).cast(pl.Float64))
        .otherwise(positive / total)
    )
    result = lf.with_columns(weight.alias(WEIGHT), fallback.alias(FALLBACK))
    return _finish(correlations, _drop_group(result, by))


def weighted_totals(
    frame: FrameT,
    *,
    by: Sequence[str],
    weight: str = WEIGHT,
    value: str = TRIMMED_MEAN,
) -> FrameT:
    """Weighted total ``sum_d w_d x_d`` per group (CUBE_METHOD.md section 6).

    A dimension of weight 0 does not count even when its value is missing;
    a missing value of a dimension with positive weight makes the total
    missing (null).

    Args:
        frame: One row per group and dimension with ``weight`` and ``value``.
        by: Grouping columns (the dimension column is *not* among them).
        weight: The weight column.
        value: The value column.

    Returns:
        ``by`` + ``value`` (the total), one row per group, unordered.

    Examples:
        >>> df = pl.DataFrame(
        ...     {"g": [1, 1, 1, 2, 2], "weight": [0.5, 0.5, 0.0, 0.5, 0.5],
        ...      "trimmed_mean": [2.0, 4.0, None, 2.0, None]}
        ... )
        >>> weighted_totals(df, by=["g"]).sort("g").rows()
        [(1, 3.0), (2, None)]
    """
    lf, keys = _with_group(frame.lazy(), by)
    w, x = pl.col(weight), pl.col(value)
    result = lf.group_by(keys).agg(
        pl.when(((w > 0) & x.is_null()).any())
        .then(None)
        .otherwise((w * x).sum())
        .alias(value)
    )
    return _finish(frame, _drop_group(result, by))


def rank_scores(
    answers: FrameT,
    *,
    k: int | Mapping[str, int],
) -> FrameT:
    """Add ``rank_score`` to ``rag`` answer rows (CUBE_METHOD.md section 5).

    ``rank_score = k + 2 - rank`` for ``rank >= 1``, 0 when the gold document was
    missed (``rank == 0``), plus 1 when the gold document is the only document
    retrieved (``retrieved_doc_ids`` has one entry and ``rank == 1``). Without a
    ``retrieved_doc_ids`` column no bonus is given.

    Args:
        answers: Answer rows of system variants, with ``system`` and ``rank``
            (and optionally ``retrieved_doc_ids``).
        k: The retrieval depth, one for all systems or one per system name.

    Returns:
        The input with an Int64 ``rank_score`` column.

    Examples:
        >>> df = pl.DataFrame(
        ...     {
        ...         "system": ["rag"] * 4,
        ...         "rank": [1, 8, 0, 1],
        ...         "retrieved_doc_ids": [["g", "x"], ["x"] * 8, ["x"], ["g"]],
        ...     }
        ... )
        >>> rank_scores(df, k=8)["rank_score"].to_list()
        [9, 2, 0, 10]
    """
    rank = pl.col(schema.RANK).cast(pl.Int64)
    if isinstance(k, Mapping):
        k_expr = (
            pl.col(schema.SYSTEM)
            .cast(pl.String)
            .replace_strict(dict(k), return_dtype=pl.Int64)
        )
    else:
        k_expr = pl.lit(k, dtype=pl.Int64)
    lf = answers.lazy()
    score = pl.when(rank >= 1).then(k_expr + 2 - rank).otherwise(0)
    if schema.RETRIEVED_DOC_IDS in lf.collect_schema():
        only = (pl.col(schema.RETRIEVED_DOC_IDS).list.len() == 1) & (rank == 1)
        score = score + only.fill_null(False).cast(pl.Int64)
    result = lf.with_columns(score.cast(pl.Int64).alias(RANK_SCORE))
    return _finish(answers, result)


def recall_at_k(answers: FrameT, *, by: Sequence[str] = (schema.SYSTEM,)) -> FrameT:
    """Share of questions whose gold document was retrieved (``rank >= 1``).

    Args:
        answers: Answer rows of system variants with a non-null ``rank``.
        by: Grouping columns, by default the system.

    Returns:
        ``by`` + ``n_questions`` + ``n_retrieved`` + ``recall_at_k``, sorted.

    Examples:
        >>> df = pl.DataFrame({"system": ["rag"] * 4, "rank": [1, 0, 3, 0]})
        >>> recall_at_k(df).row(0)
        ('rag', 4, 2, 0.5)
    """
    lf, keys = _with_group(answers.lazy(), by)
    hit = pl.col(schema.RANK) >= 1
    result = (
        lf.group_by(keys)
        .agg(
            pl.len().cast(pl.Int64).alias(N_QUESTIONS),
            hit.sum().cast(pl.Int64).alias(N_RETRIEVED),
            hit.mean().alias(RECALL),
        )
        .sort(keys)
    )
    return _finish(answers, _drop_group(result, by))


def normalise(
    rag: pl.Expr,
    zero: pl.Expr,
    full: pl.Expr,
    *,
    min_span: float = 1e-9,
) -> pl.Expr:
    """``100 * (rag - zero) / (full - zero)``; null when ``full - zero <= min_span``.

    Values outside [0, 100] are kept (not clipped); flag them separately.

    Args:
        rag: Score of the system under test.
        zero: Score of the zero-score bound.
        full: Score of the full-score bound.
        min_span: Smallest ``full - zero`` treated as a defined span.

    Returns:
        A Float64 expression, null when the bounds are degenerate or an input
        is null.

    Examples:
        >>> df = pl.DataFrame({"r": [6.5, 5.0], "z": [4.0, 5.0], "f": [8.0, 5.0]})
        >>> norm = normalise(pl.col("r"), pl.col("z"), pl.col("f"))
        >>> df.select(norm.alias("norm"))["norm"].to_list()
        [62.5, None]
    """
    span = full - zero
    return pl.when(span > min_span).then(100.0 * (rag - zero) / span).otherwise(None)


def cross_judge(
    frame: FrameT,
    *,
    by: Sequence[str],
    value: str,
) -> FrameT:
    """Mean and sample SD (ddof = 1) across judges of a per-judge figure.

    Judges whose figure is null (or NaN) are left out; the SD is null with fewer
    than two defined judges, the mean with none.

    Args:
        frame: One row per judge and group with the figure in ``value``.
        by: Grouping columns (the judge column is *not* among them).
        value: The figure.

    Returns:
        ``by`` + ``mean`` + ``sd`` + ``n`` (judges used), sorted by ``by``.

    Examples:
        >>> df = pl.DataFrame({"s": ["a"] * 3 + ["b"], "v": [1.0, 3.0, None, 2.0]})
        >>> cross_judge(df, by=["s"], value="v").rows()
        [('a', 2.0, 1.4142135623730951, 2), ('b', 2.0, None, 1)]
    """
    lf, keys = _with_group(frame.lazy(), by)
    v = pl.col(value).fill_nan(None)
    n = v.count()
    result = (
        lf.group_by(keys)
        .agg(
            v.mean().alias(MEAN),
            pl.when(n >= 2).then(v.std(ddof=1)).otherwise(None).alias(SD),
            n.cast(pl.Int64).alias(N),
        )
        .sort(keys)
    )
    return _finish(frame, _drop_group(result, by))
