"""Human ratings: read and validate the CSV.

The comparison with the judges is :func:`cube_ray.aggregate.compare_with_humans`.
CSV columns: ``question_id, system, dimension, score`` and optionally
``rater``. Several raters of one item are averaged into one human score, and
their agreement is reported; without a ``rater`` column an item scored twice
is an error (which score counts is unknown). A score is written as the audit
sheet's are (:func:`cube_ray.audit.parse_score`: ASCII digits with an
optional decimal point, 0-10).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from cube_ray import schema
from cube_ray.aggregate import RATER
from cube_ray.audit import parse_score, score_text
from cube_ray.corpus import csv_place, csv_record_lines
from cube_ray.errors import InputError

__all__ = ["read_human_ratings"]

_REQUIRED = (schema.QUESTION_ID, schema.SYSTEM, schema.DIMENSION, schema.SCORE)


def read_human_ratings(path: str | Path) -> pl.DataFrame:
    """Read and validate a human-ratings CSV.

    Returns:
        Columns ``question_id, system, dimension, score (f64), rater``
        (``rater`` is ``"rater-1"`` when the file has none).

    Raises:
        InputError: The file is missing, lacks a column, has a score that is
            not a number 0-10 (the rule of :func:`cube_ray.audit.parse_score`),
            or scores one item twice (the same rater twice, with a ``rater``
            column); the message names the file, the rows and the field.
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
    values: list[float] = []
    for row, cell in enumerate(raw.get_column(schema.SCORE).to_list()):
        try:
            value = parse_score(cell or "")
        except ValueError as exc:
            raise InputError(
                f"score {exc}", path=str(p), row=csv_place(p, row), field=schema.SCORE
            ) from None
        if value is None:
            raise InputError(
                "the score is empty; expected a score 0-10 (a row of the human "
                "file is one rating: delete the row if the item was not rated)",
                path=str(p),
                row=csv_place(p, row),
                field=schema.SCORE,
            )
        values.append(value)
    scores = pl.Series(schema.SCORE, values, dtype=pl.Float64)
    rater = (
        raw.get_column(RATER).fill_null("rater-1")
        if RATER in raw.columns
        else pl.Series(RATER, ["rater-1"] * raw.height)
    )
    out = pl.DataFrame(
        {
            schema.QUESTION_ID: raw.get_column(schema.QUESTION_ID),
            schema.SYSTEM: raw.get_column(schema.SYSTEM),
            schema.DIMENSION: raw.get_column(schema.DIMENSION),
            schema.SCORE: scores,
            RATER: rater,
        }
    )
    _check_unique(p, out, has_rater=RATER in raw.columns)
    return out


def _check_unique(path: Path, ratings: pl.DataFrame, *, has_rater: bool) -> None:
    """One rating per item (and rater): two would silently be averaged.

    Raises:
        InputError: Naming the file, both rows (the lines a spreadsheet and an
            editor show) and the item.
    """
    key = [schema.QUESTION_ID, schema.SYSTEM, schema.DIMENSION]
    if has_rater:
        key.append(RATER)
    dup = (
        ratings.with_row_index("_row")
        .filter(pl.len().over(key) > 1)
        .group_by(key, maintain_order=True)
        .agg(pl.col("_row").head(2), pl.col(schema.SCORE).head(2))
    )
    if dup.height == 0:
        return
    first = dup.row(0, named=True)
    rows = first["_row"]
    lines = list(csv_record_lines(path, delimiter=","))
    places = [
        f"line {lines[r]}" if lines[r] is not None else f"row {r + 1}" for r in rows
    ]
    a, b = (score_text(v) for v in first[schema.SCORE])
    item = (
        f"question {first[schema.QUESTION_ID]!r}, set {first[schema.SYSTEM]!r}, "
        f"dimension {first[schema.DIMENSION]!r}"
    )
    more = f" ({dup.height} items so)" if dup.height > 1 else ""
    if has_rater:
        msg = (
            f"{places[0]} and {places[1]}: rater {first[RATER]!r} scores {item} "
            f"twice ({a} and {b}){more}; keep one of the two rows, or give the "
            "second rater a name of their own in the 'rater' column"
        )
    else:
        msg = (
            f"{places[0]} and {places[1]}: both score {item} ({a} and {b}){more}; "
            "which one counts is unknown. Keep one of the two rows, or, when two "
            "people scored it, add a column 'rater' naming who gave each score "
            "(several raters of one item are averaged and their agreement "
            "reported)"
        )
    raise InputError(msg, path=str(path))
