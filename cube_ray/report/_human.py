"""Human ratings: read and validate the CSV.

The comparison with the judges is :func:`cube_ray.aggregate.compare_with_humans`.
CSV columns: ``question_id, system, dimension, score`` and optionally
``rater``. Several raters of one item are averaged into one human score.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from cube_ray import schema
from cube_ray.aggregate import RATER
from cube_ray.corpus import csv_place
from cube_ray.errors import InputError

__all__ = ["read_human_ratings"]

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
            row=csv_place(p, row),
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
