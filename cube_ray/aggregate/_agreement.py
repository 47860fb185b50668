"""Agreement statistics shown beside the headline (pure numpy/scipy/Polars).

Judge agreement (pairwise Spearman, Krippendorff's alpha with the interval
metric), agreement with human ratings (Pearson, Spearman, MAE) and the humans'
own CuBE (:func:`compare_with_humans`, by :func:`evaluate_replicates`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np
import numpy.typing as npt
import polars as pl
from scipy import stats

from cube_ray import schema
from cube_ray.aggregate._bootstrap import FixedWeights, evaluate_replicates
from cube_ray.aggregate._frames import finite, strings
from cube_ray.aggregate._weights import WeightsSetting, resolve_weights
from cube_ray.config import AggregateOptions

__all__ = [
    "HUMAN_JUDGE",
    "RATER",
    "HumanComparison",
    "PairStats",
    "compare_with_humans",
    "judge_agreement",
    "krippendorff_alpha_interval",
    "mean_abs_difference",
    "pair_stats",
    "rater_agreement",
    "score_matrix",
]

FloatArray = npt.NDArray[np.float64]

HUMAN_JUDGE = "humans"
"""Judge name of the (rater-averaged) human scores."""
RATER = "rater"
"""Column of the rater in a human-ratings table."""


def people_weights(
    spec: WeightsSetting, dimensions: Sequence[str], systems: Sequence[str]
) -> dict[str, dict[str, dict[str, float]]] | None:
    """The fixed weights of the people (:data:`HUMAN_JUDGE`) under ``spec``.

    The setting's one ``{dimension: weight}`` map when it has one; equal
    weights over every dimension when it is ``equal`` or per judge (the
    people are no judge it names); None for Pearson weights, computed on the
    ratings as on a judge's scores.

    >>> people_weights({"j": {"a": 1.0}}, ["a", "b"], ["rag"])
    {'humans': {'rag': {'a': 0.5, 'b': 0.5}}}
    >>> people_weights({"a": 3.0, "b": 1.0}, ["a", "b"], ["rag"])["humans"]["rag"]
    {'a': 0.75, 'b': 0.25}
    """
    if spec == "pearson":
        return None
    one_map = isinstance(spec, Mapping) and not any(
        isinstance(v, Mapping) for v in spec.values()
    )
    table = resolve_weights(spec if one_map else "equal", [HUMAN_JUDGE], dimensions)
    assert table.fixed is not None
    return {HUMAN_JUDGE: {s: table.fixed[HUMAN_JUDGE] for s in systems}}


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
    return PairStats(n, finite(pearson), finite(spearman), mae)


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


@dataclass(frozen=True)
class HumanComparison:
    """Judges against humans, and the humans' own CuBE."""

    agreement: pl.DataFrame
    """``judge, dimension, n, pearson, spearman, mae`` (dimension ``all`` pools)."""
    raters: pl.DataFrame
    """:func:`rater_agreement` among the human raters (>= 2 raters)."""
    cube: pl.DataFrame
    """``system, questions, human_cube, human_weighted, jury_cube_same_questions``."""
    n_items: int


RATER_AGREEMENT_SCHEMA = {
    "dimension": pl.String,
    "raters": pl.Int64,
    "units": pl.Int64,
    "alpha": pl.Float64,
    "mean_abs_difference": pl.Float64,
}


def mean_abs_difference(data: FloatArray) -> float | None:
    """Mean absolute difference of two raters' scores of one unit, over all pairs.

    Args:
        data: ``[raters, units]`` ratings; NaN where a rater did not rate.

    Returns:
        The mean over every unit and every pair of raters who both rated it,
        or ``None`` when no unit has two ratings.

    >>> mean_abs_difference(np.array([[5.0, 7.0, 1.0], [9.0, 7.0, np.nan]]))
    2.0
    >>> mean_abs_difference(np.array([[5.0, np.nan], [np.nan, 2.0]])) is None
    True
    """
    values = np.asarray(data, dtype=np.float64)
    diffs = [
        np.abs(values[a] - values[b]) for a, b in combinations(range(len(values)), 2)
    ]
    pooled = np.concatenate(diffs) if diffs else np.zeros(0)
    pooled = pooled[~np.isnan(pooled)]
    return float(pooled.mean()) if pooled.size else None


def rater_agreement(ratings: pl.DataFrame, dimensions: Sequence[str]) -> pl.DataFrame:
    """Agreement among human raters, per dimension.

    Args:
        ratings: ``question_id, system, dimension, score[, rater]`` (one row
            per rater and item; without ``rater``, one rater).
        dimensions: The dimensions, in order.

    Returns:
        ``dimension, raters, units, alpha, mean_abs_difference``: the raters,
        the units (question x set) rated by two or more, Krippendorff's alpha
        (interval metric) and the mean absolute difference of two raters'
        scores of one unit. No rows with fewer than two raters.

    >>> r = pl.DataFrame({"question_id": ["1", "1", "2", "2"], "system": ["s"] * 4,
    ...     "dimension": ["d"] * 4, "score": [4.0, 6.0, 8.0, 8.0],
    ...     "rater": ["a", "b", "a", "b"]})
    >>> row = rater_agreement(r, ["d"]).row(0)
    >>> row[:3], round(row[3], 4), row[4]
    (('d', 2, 2), 0.7273, 1.0)
    """
    rows: list[dict[str, object]] = []
    raters = (
        sorted(ratings.get_column(RATER).unique().to_list())
        if RATER in ratings.columns
        else []
    )
    if len(raters) >= 2:
        for dim in dimensions:
            wide = ratings.filter(pl.col(schema.DIMENSION) == dim).pivot(
                on=RATER,
                index=[schema.QUESTION_ID, schema.SYSTEM],
                values=schema.SCORE,
                aggregate_function="mean",
            )
            mat = np.vstack(
                [
                    wide.get_column(r).cast(pl.Float64).fill_null(np.nan).to_numpy()
                    if r in wide.columns
                    else np.full(wide.height, np.nan)
                    for r in raters
                ]
            )
            rows.append(
                {
                    "dimension": dim,
                    "raters": len(raters),
                    "units": int((np.sum(~np.isnan(mat), axis=0) >= 2).sum()),
                    "alpha": krippendorff_alpha_interval(mat) if mat.size else None,
                    "mean_abs_difference": mean_abs_difference(mat),
                }
            )
    return pl.DataFrame(rows, schema=RATER_AGREEMENT_SCHEMA)


def _human_scores(ratings: pl.DataFrame) -> pl.DataFrame:
    return (
        ratings.group_by(schema.QUESTION_ID, schema.SYSTEM, schema.DIMENSION)
        .agg(pl.col(schema.SCORE).mean())
        .with_columns(
            pl.lit(HUMAN_JUDGE).alias(schema.JUDGE),
            pl.lit(schema.STATUS_OK).alias(schema.STATUS),
            pl.lit(None, dtype=pl.String).alias(schema.RAW),
        )
        .select(
            schema.QUESTION_ID,
            schema.SYSTEM,
            schema.JUDGE,
            schema.DIMENSION,
            schema.SCORE,
            schema.STATUS,
            schema.RAW,
        )
    )


def compare_with_humans(
    ratings: pl.DataFrame,
    *,
    answers: pl.DataFrame | None,
    scores: pl.DataFrame,
    judges: list[str],
    dimensions: list[str],
    options: AggregateOptions,
    fixed_weights: FixedWeights | None = None,
    headline_judges: Mapping[str, Sequence[str]] | None = None,
) -> HumanComparison:
    """Per-judge Pearson/Spearman/MAE against humans; humans' CuBE.

    The jury's CuBE on the rated questions averages ``headline_judges`` (per
    system; default every judge), as the headline does.
    """
    human = _human_scores(ratings)
    keys = [schema.QUESTION_ID, schema.SYSTEM, schema.DIMENSION]
    rows: list[dict[str, object]] = []
    for judge in judges:
        js = scores.filter(pl.col(schema.JUDGE) == judge).select(
            *keys, pl.col(schema.SCORE).alias("judge_score")
        )
        joined = human.select(*keys, pl.col(schema.SCORE).alias("human")).join(
            js, on=keys, how="inner"
        )
        for dim in ["all", *dimensions]:
            part = (
                joined
                if dim == "all"
                else joined.filter(pl.col(schema.DIMENSION) == dim)
            )
            st = pair_stats(
                part.get_column("judge_score")
                .cast(pl.Float64)
                .fill_null(np.nan)
                .to_numpy(),
                part.get_column("human").cast(pl.Float64).to_numpy(),
            )
            rows.append(
                {
                    "judge": judge,
                    "dimension": dim,
                    "n": st.n,
                    "pearson": st.pearson,
                    "spearman": st.spearman,
                    "mae": st.mae,
                }
            )
    agreement = pl.DataFrame(
        rows,
        schema={
            "judge": pl.String,
            "dimension": pl.String,
            "n": pl.Int64,
            "pearson": pl.Float64,
            "spearman": pl.Float64,
            "mae": pl.Float64,
        },
    )

    rater_frame = rater_agreement(ratings, dimensions)

    cube_rows: list[dict[str, object]] = []
    if answers is not None:
        rated_q = human.get_column(schema.QUESTION_ID).unique()
        sub_answers = answers.filter(
            pl.col(schema.QUESTION_ID).is_in(rated_q.implode())
        )
        if sub_answers.height:
            hum = evaluate_replicates(
                sub_answers,
                human,
                options=options,
                dimensions=dimensions,
                fixed_weights=people_weights(
                    options.weights,
                    dimensions,
                    strings(sub_answers.get_column(schema.SYSTEM).unique()),
                ),
            )
            jury = evaluate_replicates(
                sub_answers,
                scores.filter(pl.col(schema.QUESTION_ID).is_in(rated_q.implode())),
                options=options,
                fixed_weights=fixed_weights,
                dimensions=dimensions,
                judges=headline_judges,
            )
            for si, system in enumerate(hum.systems):
                n_q = (
                    human.filter(pl.col(schema.SYSTEM) == system)
                    .get_column(schema.QUESTION_ID)
                    .n_unique()
                )
                jury_cube = (
                    float(jury.cube_mean[jury.systems.index(system), 0])
                    if system in jury.systems
                    else float("nan")
                )
                cube_rows.append(
                    {
                        "system": system,
                        "questions": n_q,
                        "human_cube": finite(float(hum.cube[0, si, 0])),
                        "human_weighted": finite(float(hum.normalized[0, si, 0, -1])),
                        "jury_cube_same_questions": finite(jury_cube),
                    }
                )
    cube = pl.DataFrame(
        cube_rows,
        schema={
            "system": pl.String,
            "questions": pl.Int64,
            "human_cube": pl.Float64,
            "human_weighted": pl.Float64,
            "jury_cube_same_questions": pl.Float64,
        },
    )
    return HumanComparison(agreement, rater_frame, cube, human.height)
