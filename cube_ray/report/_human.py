"""Human ratings: read the CSV, compare each judge with the humans.

CSV columns: ``question_id, system, dimension, score`` and optionally
``rater``. Several raters of one item are averaged into one human score.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from cube_ray import schema
from cube_ray.aggregate import AggregateOptions
from cube_ray.errors import InputError
from cube_ray.report._cube import FixedWeights, evaluate_replicates
from cube_ray.report._stats import krippendorff_alpha_interval, pair_stats

__all__ = [
    "HUMAN_JUDGE",
    "HumanComparison",
    "compare_with_humans",
    "read_human_ratings",
]

HUMAN_JUDGE = "humans"
"""Judge name of the (rater-averaged) human scores."""
RATER = "rater"
_REQUIRED = (schema.QUESTION_ID, schema.SYSTEM, schema.DIMENSION, schema.SCORE)


def read_human_ratings(path: str | Path) -> pl.DataFrame:
    """Read and validate a human-ratings CSV.

    Returns:
        Columns ``question_id, system, dimension, score (f64), rater``
        (``rater`` is ``"rater-1"`` when the file has none).

    Raises:
        InputError: The file is missing, lacks a column, or has a score that
            is not a number.
    """
    p = Path(path)
    try:
        raw = pl.read_csv(p, infer_schema=False)
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise InputError(
            f"cannot read the human-ratings CSV: {exc}", path=str(p)
        ) from exc
    missing = [c for c in _REQUIRED if c not in raw.columns]
    if missing:
        raise InputError(
            f"missing column(s) {missing}; found {raw.columns}. Expected a header "
            "question_id,system,dimension,score[,rater]",
            path=str(p),
        )
    if raw.height == 0:
        raise InputError("the human-ratings CSV has no rows", path=str(p))
    scores = (
        raw.get_column(schema.SCORE).str.strip_chars().cast(pl.Float64, strict=False)
    )
    bad = (scores.is_null() | scores.is_nan()).arg_true()
    if bad.len():
        row = int(bad[0])
        raise InputError(
            f"score {raw[row, schema.SCORE]!r} is not a number (expected 0-10)",
            path=str(p),
            row=row,
            field=schema.SCORE,
        )
    rater = (
        raw.get_column(RATER).fill_null("rater-1")
        if RATER in raw.columns
        else pl.Series(RATER, ["rater-1"] * raw.height)
    )
    return pl.DataFrame(
        {
            schema.QUESTION_ID: raw.get_column(schema.QUESTION_ID),
            schema.SYSTEM: raw.get_column(schema.SYSTEM),
            schema.DIMENSION: raw.get_column(schema.DIMENSION),
            schema.SCORE: scores,
            RATER: rater,
        }
    )


@dataclass(frozen=True)
class HumanComparison:
    """Judges against humans, and the humans' own CuBE."""

    agreement: pl.DataFrame
    """``judge, dimension, n, pearson, spearman, mae`` (dimension ``all`` pools)."""
    raters: pl.DataFrame
    """``dimension, raters, units, alpha`` among human raters (>= 2 raters)."""
    cube: pl.DataFrame
    """``system, questions, human_cube, human_weighted, jury_cube_same_questions``."""
    n_items: int


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

    rater_rows: list[dict[str, object]] = []
    raters = sorted(ratings.get_column(RATER).unique().to_list())
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
            rater_rows.append(
                {
                    "dimension": dim,
                    "raters": len(raters),
                    "units": int((np.sum(~np.isnan(mat), axis=0) >= 2).sum()),
                    "alpha": krippendorff_alpha_interval(mat) if mat.size else None,
                }
            )
    rater_frame = pl.DataFrame(
        rater_rows,
        schema={
            "dimension": pl.String,
            "raters": pl.Int64,
            "units": pl.Int64,
            "alpha": pl.Float64,
        },
    )

    cube_rows: list[dict[str, object]] = []
    if answers is not None:
        rated_q = human.get_column(schema.QUESTION_ID).unique()
        sub_answers = answers.filter(
            pl.col(schema.QUESTION_ID).is_in(rated_q.implode())
        )
        if sub_answers.height:
            hum = evaluate_replicates(
                sub_answers, human, options=options, dimensions=dimensions
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
                        "human_cube": _nan_none(float(hum.cube[0, si, 0])),
                        "human_weighted": _nan_none(
                            float(hum.normalized[0, si, 0, -1])
                        ),
                        "jury_cube_same_questions": _nan_none(jury_cube),
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


def _nan_none(x: float) -> float | None:
    return None if np.isnan(x) else x
