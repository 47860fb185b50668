"""What the calibration checks before it trusts a human audit (section 13).

Two checks: every rating names an answer, a dimension and a score the run can
have (else one clear error naming the file, row and column), and the people's
own scores on the audit separate the bounds (CUBE_METHOD.md section 10 on the
people: the calibrated figure divides by the people's ``full - zero`` gap, and a
gap that the audit cannot tell from noise makes it meaningless). The
separation test is the aggregation's own (:func:`wilcoxon_greater`,
:func:`separated`, :func:`paired_differences`); the gap and the weights are the
people's own figures on the audit, as :func:`evaluate_replicates` computed them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from cube_ray import schema
from cube_ray.aggregate._bootstrap import CubeReplicates
from cube_ray.aggregate._frames import finite
from cube_ray.aggregate._model import Reason, Separation
from cube_ray.aggregate._separation import (
    DELTA,
    paired_differences,
    separated,
    wilcoxon_greater,
)
from cube_ray.config import AggregateOptions
from cube_ray.errors import InputError

__all__ = ["PEOPLE_NOT_SEPARATED", "check_ratings", "people_separation"]

PEOPLE_NOT_SEPARATED = "people_bounds_not_separated"
"""Reason code: the people's scores on the audit do not separate the bounds, so
the system's calibrated figures are not a result (section 10 on the audit)."""


def check_ratings(
    human: pl.DataFrame,
    answers: pl.DataFrame,
    dimensions: Sequence[str],
    source: str | None,
) -> None:
    """Every human row names a question, set and dimension of the run.

    Errors name the ratings file (``source``), the data row (1-based) and
    the column.
    """
    keys = answers.select(
        pl.col(schema.QUESTION_ID).cast(pl.String),
        pl.col(schema.SYSTEM).cast(pl.String),
    ).unique()
    rows = human.with_row_index("_row").with_columns(
        pl.col(schema.QUESTION_ID).cast(pl.String),
        pl.col(schema.SYSTEM).cast(pl.String),
    )
    stray = rows.join(keys, on=[schema.QUESTION_ID, schema.SYSTEM], how="anti")
    if stray.height:
        first = stray.row(0, named=True)
        raise InputError(
            f"{stray.height} human rating(s) name an answer the run does not have, "
            f"e.g. question_id={first[schema.QUESTION_ID]!r}, "
            f"system={first[schema.SYSTEM]!r}. Rate only answers of this run "
            "(`cube-ray audit RUN_DIR` draws them).",
            path=source,
            row=int(first["_row"]),
            field=schema.QUESTION_ID,
        )
    dims = set(dimensions)
    odd = rows.filter(~pl.col(schema.DIMENSION).cast(pl.String).is_in(list(dims)))
    if odd.height:
        first = odd.row(0, named=True)
        raise InputError(
            f"dimension {first[schema.DIMENSION]!r} is not one of the run's "
            f"{sorted(dims)}. Use the run's dimension names.",
            path=source,
            row=int(first["_row"]),
            field=schema.DIMENSION,
        )
    bad = rows.filter((pl.col(schema.SCORE) < 0.0) | (pl.col(schema.SCORE) > 10.0))
    if bad.height:
        first = bad.row(0, named=True)
        raise InputError(
            f"score {first[schema.SCORE]} is outside 0-10. Give scores on the "
            "judges' 0-10 scale.",
            path=source,
            row=int(first["_row"]),
            field=schema.SCORE,
        )


def _weighted_deltas(
    pairs: pl.DataFrame, weights: dict[str, float], questions: pl.Series | None
) -> np.ndarray:
    """Per question, ``sum_d w_d (full - zero)`` on the positive-weight dimensions.

    Only questions scored in both bounds on all of those dimensions count.
    """
    used = {d: w for d, w in weights.items() if w > 0.0}
    if questions is not None:
        pairs = pairs.filter(pl.col(schema.QUESTION_ID).is_in(questions.implode()))
    per_q = (
        pairs.filter(pl.col(schema.DIMENSION).is_in(list(used)))
        .with_columns(
            pl.col(schema.DIMENSION).replace_strict(used, return_dtype=pl.Float64)
            * pl.col(DELTA)
        )
        .group_by(schema.QUESTION_ID)
        .agg(pl.col(DELTA).sum(), pl.len().alias("_dims"))
        .filter(pl.col("_dims") == len(used))
    )
    return per_q.get_column(DELTA).to_numpy()


def people_separation(
    people: pl.DataFrame,
    answers: pl.DataFrame,
    figures: CubeReplicates,
    judge: str,
    *,
    options: AggregateOptions,
    n_labeled: int,
) -> tuple[dict[str, Separation], dict[str, Reason]]:
    """Whether the people's scores on the audit separate each system's bounds.

    Section 10's rule on the people's weighted total: ``gap`` = their ``full -
    zero`` trimmed means (weighted, the section 7 denominator) on the audited
    questions, ``p`` = the one-sided Wilcoxon signed-rank p-value of their
    paired weighted differences (on the questions the bounds use: all, or the
    system's retrieved ones with ``bounds_on: paired``); separated when
    ``gap >= min_gap`` and ``p < alpha``.

    Args:
        people: The people's score rows (``question_id, system, dimension,
            score``), one per answer and dimension.
        answers: The answers table (ranks, for ``bounds_on: paired``).
        figures: The audit's figures as drawn (one replicate), the people
            among the judges.
        judge: The people's name in ``figures``.
        options: The aggregation's options (``min_gap``, ``alpha``,
            ``bounds_on``).
        n_labeled: Audited questions (for the reason's text).

    Returns:
        Per system its separation, and a reason per system not separated.
    """
    pairs = paired_differences(
        people.filter(pl.col(schema.SYSTEM).is_in(schema.BOUND_SYSTEMS)).lazy(),
        by=[schema.DIMENSION],
    )
    h = figures.judges.index(judge)
    result: dict[str, Separation] = {}
    reasons: dict[str, Reason] = {}
    for si, system in enumerate(figures.systems):
        weights = {
            d: float(w)
            for d, w in zip(figures.dimensions, figures.weights[h, si, 0], strict=True)
            if np.isfinite(w)
        }
        retrieved = None
        if options.bounds_on == "paired":
            retrieved = answers.filter(
                (pl.col(schema.SYSTEM).cast(pl.String) == system)
                & (pl.col(schema.RANK) >= 1)
            ).get_column(schema.QUESTION_ID)
        deltas = _weighted_deltas(pairs, weights, retrieved)
        p = wilcoxon_greater(deltas)
        gap = float(
            figures.trimmed["full"][h, si, 0, -1]
            - figures.trimmed["zero"][h, si, 0, -1]
        )
        gap_or_none = finite(gap)
        sep = separated(gap_or_none, p, min_gap=options.min_gap, alpha=options.alpha)
        result[system] = Separation(
            gap=gap_or_none, p_value=p, n_pairs=int(deltas.size), separated=sep
        )
        if not sep:
            shown = "none" if gap_or_none is None else f"{gap_or_none:.2f} points"
            reasons[system] = Reason(
                code=PEOPLE_NOT_SEPARATED,
                text=(
                    f"The people's scores on the {n_labeled:,} audited questions "
                    f"do not tell the answers without a document from those with "
                    f"it apart on {system} (gap {shown}, p = {p:.2g}; needed: at "
                    f"least {options.min_gap:g} points and p < {options.alpha:g}). "
                    "The calibrated CuBE divides by that gap, so it is not shown "
                    "as a result; check the audit's scores or audit more questions."
                ),
                gap=gap_or_none,
                p_value=p,
                n_pairs=int(deltas.size),
                min_gap=options.min_gap,
                alpha=options.alpha,
            )
    return result, reasons
