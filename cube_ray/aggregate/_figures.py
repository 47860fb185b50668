"""Sections 5 to 8 on the passes: weights, trimmed means, normalisation, CuBE.

Functions of the :class:`~cube_ray.aggregate._passes.Study`; each returns its
frames (and the flags or notes it raises) instead of setting state.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import polars as pl

from cube_ray import schema
from cube_ray.aggregate._frames import (
    CUBE,
    DEGENERATE,
    FIGURE,
    MIN_SPAN,
    SET,
    VARIANT,
    WEIGHTED,
)
from cube_ray.aggregate._math import (
    FALLBACK,
    N_QUESTIONS,
    N_RETRIEVED,
    RECALL,
    TRIMMED_MEAN,
    WEIGHT,
    N,
    cross_judge,
    normalise,
    pearson_weights,
    recall_at_k,
    weighted_totals,
)
from cube_ray.aggregate._passes import Study
from cube_ray.config import WeightsError

MISSING_SCORES_TEXT = "missing scores"
"""Reason of a normalised figure without one of its three trimmed means."""


@dataclass(frozen=True)
class Weights:
    """Per (judge, system, dimension) weight (section 6), and what it raised."""

    frame: pl.DataFrame
    """``judge, system, dimension, [n, r,] weight, fallback``."""
    flags: tuple[dict[str, Any], ...]
    """One "equal-weight fallback" flag per (judge, system) that fell back."""
    notes: tuple[str, ...]
    """Dimensions that fixed weights leave out."""


@dataclass(frozen=True)
class Figures:
    """The figures of every judge and system (sections 5 to 8)."""

    trimmed: pl.DataFrame
    """``judge, system, set, dimension, n, trimmed_mean``."""
    recall: pl.DataFrame
    """Per system: ``n_questions, n_retrieved, recall``."""
    figures: pl.DataFrame
    """``judge, system, set, figure, trimmed_mean`` (dimensions and weighted)."""
    wide: pl.DataFrame
    """``judge, system, figure, zero, full, rag``: the trimmed means side by side."""
    norm: pl.DataFrame
    """``wide`` with ``normalized`` and the ``reason`` of an undefined one."""
    cube: pl.DataFrame
    """The weighted rows of ``norm`` with recall and ``cube``."""
    per_judge: pl.DataFrame
    """``system, figure, judge, normalized``: every figure, CuBE included."""


def grid(study: Study) -> pl.DataFrame:
    """Every ``judge, system, dimension``."""
    return (
        pl.DataFrame({schema.JUDGE: list(study.judges)})
        .join(pl.DataFrame({schema.SYSTEM: list(study.systems)}), how="cross")
        .join(pl.DataFrame({schema.DIMENSION: list(study.dimensions)}), how="cross")
    )


def judge_weights(study: Study) -> Weights:
    """The weights of ``options.weights``: Pearson, equal or fixed (section 6).

    Raises:
        WeightsError: Fixed weights name a judge or dimension without scores,
            or are given per judge but not for every judge.
    """
    by = [schema.SYSTEM, schema.JUDGE, schema.DIMENSION]
    corr = study.passes.frames["corr"]
    full = (
        grid(study).join(corr, on=by, how="left").with_columns(pl.col(N).fill_null(0))
    )
    spec = study.options.weights
    if spec == "pearson":
        weighted = pearson_weights(full, by=[schema.JUDGE, schema.SYSTEM])
        flags = tuple(
            {
                "flag": "equal-weight fallback",
                "judge": row[schema.JUDGE],
                "system": row[schema.SYSTEM],
                "reason": "every Pearson r_d is <= 0 or undefined",
            }
            for row in weighted.filter(pl.col(FALLBACK))
            .unique([schema.JUDGE, schema.SYSTEM], maintain_order=True)
            .iter_rows(named=True)
        )
        return Weights(weighted, flags, ())
    notes: list[str] = []
    if spec == "equal":
        # Over the dimensions each judge actually scored.
        scored = (
            study.passes.frames["stats"]
            .group_by(schema.JUDGE)
            .agg(pl.col(schema.DIMENSION).unique())
        )
        fixed = {
            str(judge): {str(d): 1.0 for d in dims}
            for judge, dims in scored.iter_rows()
        }
    else:
        fixed = _fixed_weights(spec, study, notes)
    rows = [
        {
            schema.JUDGE: j,
            schema.DIMENSION: d,
            WEIGHT: fixed[j].get(d, 0.0) / sum(fixed[j].values()),
        }
        for j in study.judges
        for d in study.dimensions
    ]
    frame = full.join(
        pl.DataFrame(rows), on=[schema.JUDGE, schema.DIMENSION], how="left"
    ).with_columns(pl.lit(False).alias(FALLBACK))
    return Weights(frame, (), tuple(notes))


def _fixed_weights(
    spec: dict[str, float] | dict[str, dict[str, float]],
    study: Study,
    notes: list[str],
) -> dict[str, dict[str, float]]:
    """Judge -> dimension -> fixed weight; notes the dimensions left out."""
    judges, dimensions = list(study.judges), list(study.dimensions)
    per_judge = any(isinstance(v, dict) for v in spec.values())
    if per_judge:
        tables: dict[str, dict[str, float]] = {}
        for judge, table in spec.items():
            if judge not in judges:
                raise WeightsError(
                    f"weights name judge {judge!r}, which has no scores (judges:"
                    f" {judges}). Use the judges' names as keys.",
                    key=judge,
                )
            assert isinstance(table, dict)
            tables[judge] = table
        missing = [j for j in judges if j not in tables]
        if missing:
            raise WeightsError(
                f"weights are given per judge but not for judge {missing[0]!r}."
                " Give every judge a {dimension: weight} map, or give one map for"
                " all judges.",
                key=missing[0],
            )
    else:
        flat = {str(k): float(v) for k, v in spec.items() if not isinstance(v, dict)}
        tables = {j: flat for j in judges}
    for judge, table in tables.items():
        for dim in table:
            if dim not in dimensions:
                raise WeightsError(
                    f"weights name dimension {dim!r}"
                    + (f" (judge {judge!r})" if per_judge else "")
                    + f", which has no scores (dimensions: {dimensions}).",
                    key=dim,
                )
        left_out = [d for d in dimensions if d not in table]
        note = f"fixed weights leave out {left_out}: weight 0" + (
            f" (judge {judge})" if per_judge else ""
        )
        if left_out and note not in notes:
            notes.append(note)
    return tables


def trimmed(study: Study) -> pl.DataFrame:
    """One row per (judge, system, set, dimension): n and trimmed_mean."""
    frames = study.passes.frames
    rag = frames["tm_rag"].with_columns(pl.lit("rag").alias(SET))
    bounds = frames["tm_bounds"]
    if VARIANT in bounds.columns:
        bounds = bounds.rename({schema.SYSTEM: SET, VARIANT: schema.SYSTEM})
    else:
        bounds = bounds.rename({schema.SYSTEM: SET}).join(
            pl.DataFrame({schema.SYSTEM: list(study.systems)}), how="cross"
        )
    cols = [schema.JUDGE, schema.SYSTEM, SET, schema.DIMENSION, N, TRIMMED_MEAN]
    sets = pl.DataFrame({SET: ["zero", "full", "rag"]})
    return (
        grid(study)
        .join(sets, how="cross")
        .join(
            pl.concat([rag.select(cols), bounds.select(cols)]),
            on=[schema.JUDGE, schema.SYSTEM, SET, schema.DIMENSION],
            how="left",
        )
        .with_columns(pl.col(N).fill_null(0))
    )


def recall(study: Study) -> pl.DataFrame:
    """Recall@k of every system under test (section 4)."""
    ranked = study.answers.ranked.with_columns(pl.col(schema.SYSTEM).cast(pl.String))
    return (
        pl.DataFrame({schema.SYSTEM: list(study.systems)})
        .join(recall_at_k(ranked), on=schema.SYSTEM, how="left")
        .with_columns(pl.col(N_QUESTIONS, N_RETRIEVED).fill_null(0))
    )


def figures(study: Study, weights: pl.DataFrame) -> Figures:
    """Trimmed means, weighted totals, normalised figures and CuBE (5 to 8)."""
    trim = trimmed(study)
    rec = recall(study)
    jsd = [schema.JUDGE, schema.SYSTEM, SET]
    w = weights.select(schema.JUDGE, schema.SYSTEM, schema.DIMENSION, WEIGHT)
    totals = weighted_totals(
        trim.join(w, on=[schema.JUDGE, schema.SYSTEM, schema.DIMENSION]), by=jsd
    ).with_columns(pl.lit(WEIGHTED).alias(FIGURE))
    long = pl.concat(
        [
            trim.select(*jsd, pl.col(schema.DIMENSION).alias(FIGURE), TRIMMED_MEAN),
            totals.select(*jsd, FIGURE, TRIMMED_MEAN),
        ]
    )
    wide = long.pivot(
        on=SET, index=[schema.JUDGE, schema.SYSTEM, FIGURE], values=TRIMMED_MEAN
    )
    for s in ("zero", "full", "rag"):
        if s not in wide.columns:
            wide = wide.with_columns(pl.lit(None, dtype=pl.Float64).alias(s))
    z, f, r = pl.col("zero"), pl.col("full"), pl.col("rag")
    norm = wide.with_columns(
        normalise(r, z, f, min_span=MIN_SPAN).alias("normalized"),
        pl.when(z.is_null() | f.is_null() | r.is_null())
        .then(pl.lit(MISSING_SCORES_TEXT))
        .when((f - z) <= MIN_SPAN)
        .then(pl.lit(DEGENERATE))
        .otherwise(None)
        .alias("reason"),
    )
    cube = (
        norm.filter(pl.col(FIGURE) == WEIGHTED)
        .join(rec, on=schema.SYSTEM)
        .with_columns((pl.col("normalized") * pl.col(RECALL)).alias(CUBE))
    )
    per_judge = pl.concat(
        [
            norm.select(schema.SYSTEM, FIGURE, schema.JUDGE, "normalized"),
            cube.select(
                schema.SYSTEM,
                pl.lit(CUBE).alias(FIGURE),
                schema.JUDGE,
                pl.col(CUBE).alias("normalized"),
            ),
        ]
    )
    return Figures(trim, rec, long, wide, norm, cube, per_judge)


def across_judges(figs: Figures, used: Mapping[str, list[str]]) -> pl.DataFrame:
    """Mean, SD and number of judges of each figure over the used judges."""
    used_pairs = pl.DataFrame(
        [(s, j) for s, judges in used.items() for j in judges],
        schema={schema.SYSTEM: pl.String, schema.JUDGE: pl.String},
        orient="row",
    )
    return cross_judge(
        figs.per_judge.join(used_pairs, on=[schema.SYSTEM, schema.JUDGE], how="semi"),
        by=[schema.SYSTEM, FIGURE],
        value="normalized",
    )
