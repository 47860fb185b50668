"""The heavy passes over the score rows, and the checks of the scores table.

:func:`score_passes` runs every grouped aggregation the summary needs over
the score rows in one ``collect_all`` (per (system, judge, dimension): row
statistics, missing scores, Pearson correlations, trimmed means of the
systems under test and of the bounds) and returns them, checked, as one
frozen :class:`ScorePasses`; :class:`Study` is what the later steps read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import polars as pl

from cube_ray import schema
from cube_ray.aggregate._frames import (
    SCORE_COLUMNS,
    VARIANT,
    AnswerFrames,
    Inputs,
    strings,
)
from cube_ray.aggregate._math import (
    COUNT,
    RANK_SCORE,
    TRIMMED_MEAN,
    N,
    R,
    pearson,
    pearson_exprs,
    trimmed_mean_exprs,
    trimmed_means,
)
from cube_ray.aggregate._separation import PairCodes, pair_codes
from cube_ray.config import AggregateOptions
from cube_ray.errors import InputError

_HISTOGRAM_MAX_DISTINCT = 2048
"""At most this many distinct scores (in a sample): histograms first."""

_BY = [schema.SYSTEM, schema.JUDGE, schema.DIMENSION]


@dataclass(frozen=True)
class ScorePasses:
    """The grouped score frames of one aggregation (read by every later step)."""

    frames: Mapping[str, pl.DataFrame]
    """Per ``system, judge, dimension`` (key columns as String): ``stats``
    (rows, min, max, NaN), ``missing`` (null scores per status), ``rag_rows``
    (per system), ``corr`` (``n, r``), ``tm_rag`` and ``tm_bounds`` (``n,
    trimmed_mean``; the bounds also per ``variant`` with paired bounds)."""
    scores: pl.LazyFrame
    """The usable score rows: key columns, Float64 ``score``, ``status``."""
    keys: pl.DataFrame
    """``question_id, system, rank_score`` of the ranked answers, in the
    scores' key types."""
    hits: pl.LazyFrame
    """``question_id, variant`` of the questions each system retrieved."""
    pair_codes: PairCodes | None
    """Integer codes of the packed pair key (None: group by the key columns)."""
    judges: tuple[str, ...]
    dimensions: tuple[str, ...]


@dataclass(frozen=True)
class Study:
    """What the steps after the passes read: the inputs, answers and passes."""

    inputs: Inputs
    answers: AnswerFrames
    passes: ScorePasses

    @property
    def options(self) -> AggregateOptions:
        return self.inputs.options

    @property
    def systems(self) -> tuple[str, ...]:
        """The systems under test."""
        return self.answers.systems

    @property
    def judges(self) -> tuple[str, ...]:
        return self.passes.judges

    @property
    def dimensions(self) -> tuple[str, ...]:
        return self.passes.dimensions


def _use_histograms(scores: pl.DataFrame) -> bool:
    """Whether scores take few distinct values (judges' integer scores).

    Then the score rows are first compressed into histograms; otherwise
    (continuous expected-value scores) the trimmed ends of each group are
    found by partial selection. Both give the same figures; this only picks
    the faster way. A strided sample of the score column decides.
    """
    column = scores.get_column(schema.SCORE)
    step = max(1, column.len() // 100_000)
    return column.gather_every(step).n_unique() <= _HISTOGRAM_MAX_DISTINCT


def _usable_scores(inputs: Inputs, answers: AnswerFrames) -> pl.LazyFrame:
    """The score rows with a Float64 score and a status, outages left out."""
    sc_schema = inputs.scores.schema
    cols = [*SCORE_COLUMNS]
    has_status = schema.STATUS in sc_schema
    if has_status:
        cols.append(schema.STATUS)
    sc = (
        inputs.scores.lazy()
        .select(cols)
        .with_columns(pl.col(schema.SCORE).cast(pl.Float64))
    )
    if not has_status:
        sc = sc.with_columns(pl.lit("missing").alias(schema.STATUS))
    if answers.unavailable_keys is not None:
        sc = sc.join(
            answers.unavailable_keys.lazy().select(
                pl.col(schema.QUESTION_ID).cast(sc_schema[schema.QUESTION_ID]),
                pl.col(schema.SYSTEM).cast(sc_schema[schema.SYSTEM]),
            ),
            on=[schema.QUESTION_ID, schema.SYSTEM],
            how="anti",
        )
    return sc


def _answer_keys(inputs: Inputs, answers: AnswerFrames) -> pl.DataFrame:
    sc_schema = inputs.scores.schema
    try:
        return (
            answers.ranked.lazy()
            .select(
                pl.col(schema.QUESTION_ID).cast(sc_schema[schema.QUESTION_ID]),
                pl.col(schema.SYSTEM).cast(sc_schema[schema.SYSTEM]),
                pl.col(RANK_SCORE),
            )
            .collect()
        )
    except pl.exceptions.PolarsError as exc:
        raise InputError(
            "the answers' question_id/system values do not fit the scores'"
            f" column types ({sc_schema[schema.QUESTION_ID]},"
            f" {sc_schema[schema.SYSTEM]}): {exc}. Give both tables the same"
            " column types.",
            path=inputs.answers_source,
            field=schema.SYSTEM,
        ) from None


def score_passes(inputs: Inputs, answers: AnswerFrames) -> ScorePasses:
    """Every grouped pass over the score rows, in one ``collect_all``, checked.

    Raises:
        InputError: A bound or an answer row is missing, an unknown system,
            or a score outside 0..10.
    """
    opts = inputs.options
    sc_schema = inputs.scores.schema
    sc = _usable_scores(inputs, answers)
    keys = _answer_keys(inputs, answers)
    systems = list(answers.systems)
    by = _BY
    score = pl.col(schema.SCORE)
    rag = sc.filter(pl.col(schema.SYSTEM).is_in(systems)).join(
        keys.lazy(), on=[schema.QUESTION_ID, schema.SYSTEM], how="inner"
    )
    bounds = sc.filter(pl.col(schema.SYSTEM).is_in(schema.BOUND_SYSTEMS))
    bounds_by = by
    hits = (
        keys.lazy()
        .filter(pl.col(RANK_SCORE) > 0)
        .select(
            pl.col(schema.QUESTION_ID),
            pl.col(schema.SYSTEM).cast(pl.String).alias(VARIANT),
        )
    )
    if opts.bounds_on == "paired":
        bounds = bounds.join(hits, on=schema.QUESTION_ID, how="inner")
        bounds_by = [VARIANT, *by]
    plans = {
        "stats": sc.group_by(by).agg(
            pl.len().alias(COUNT),
            score.min().alias("min"),
            score.max().alias("max"),
            score.is_nan().any().alias("nan"),
            *(
                [
                    pl.col(schema.QUESTION_ID).min().alias("qid_min"),
                    pl.col(schema.QUESTION_ID).max().alias("qid_max"),
                ]
                if sc_schema[schema.QUESTION_ID].is_integer()
                else []
            ),
        ),
        "missing": sc.filter(score.is_null())
        .group_by([*by, schema.STATUS])
        .agg(pl.len().alias(COUNT)),
    }
    if _use_histograms(inputs.scores):
        rag = rag.group_by([*by, RANK_SCORE, schema.SCORE]).agg(pl.len().alias(COUNT))
        bounds = bounds.group_by([*bounds_by, schema.SCORE]).agg(pl.len().alias(COUNT))
        plans["rag_rows"] = rag.group_by(schema.SYSTEM).agg(pl.col(COUNT).sum())
        plans["corr"] = pearson(rag, by=by, x=RANK_SCORE, y=schema.SCORE, count=COUNT)
        plans["tm_rag"] = trimmed_means(
            rag.filter(pl.col(RANK_SCORE) > 0), by=by, trim=opts.trim, count=COUNT
        )
        plans["tm_bounds"] = trimmed_means(
            bounds, by=bounds_by, trim=opts.trim, count=COUNT
        )
    else:
        # One pass over the joined rag rows for all three figures.
        n_tm, tm = trimmed_mean_exprs(
            score.filter(pl.col(RANK_SCORE) > 0), trim=opts.trim
        )
        plans["rag_figures"] = rag.group_by(by).agg(
            pl.len().alias(COUNT),
            *pearson_exprs(pl.col(RANK_SCORE), score),
            n_tm.alias("n_tm"),
            tm,
        )
        plans["tm_bounds"] = trimmed_means(bounds, by=bounds_by, trim=opts.trim)
    collected = pl.collect_all(list(plans.values()), engine=inputs.engine)
    codes = pair_codes(collected[0], sc_schema)
    frames: dict[str, pl.DataFrame] = {}
    for name, frame in zip(plans, collected, strict=True):
        frames[name] = frame.with_columns(
            pl.col(c).cast(pl.String)
            for c in (*by, schema.STATUS)
            if c in frame.columns
        ).sort(pl.exclude(COUNT, N, R, TRIMMED_MEAN, "min", "max", "nan"))
    if "rag_figures" in frames:
        figures = frames.pop("rag_figures")
        frames["rag_rows"] = figures.group_by(schema.SYSTEM).agg(pl.col(COUNT).sum())
        frames["corr"] = figures.select(*by, N, R)
        frames["tm_rag"] = figures.filter(pl.col("n_tm") > 0).select(
            *by, pl.col("n_tm").alias(N), TRIMMED_MEAN
        )
    judges, dimensions = _check_scores(inputs, answers, frames, sc, keys)
    return ScorePasses(
        frames=frames,
        scores=sc,
        keys=keys,
        hits=hits,
        pair_codes=codes,
        judges=judges,
        dimensions=dimensions,
    )


def _check_scores(
    inputs: Inputs,
    answers: AnswerFrames,
    frames: Mapping[str, pl.DataFrame],
    sc: pl.LazyFrame,
    keys: pl.DataFrame,
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The judges and dimensions, once the score rows fit the answers.

    Raises:
        InputError: See :func:`score_passes`.
    """
    source = inputs.scores_source
    systems = list(answers.systems)
    stats = frames["stats"]
    named_systems = strings(stats.get_column(schema.SYSTEM).unique(maintain_order=True))
    for bound in schema.BOUND_SYSTEMS:
        # A bound whose answers all failed is an incomplete run, reported
        # as such; only a bound never produced is an input error.
        if bound not in named_systems and bound not in answers.failed_sets:
            raise InputError(
                f"the scores table has no rows of system {bound!r} (systems:"
                f" {named_systems}). Expected scores of the zero- and full-score"
                " bound answers: run the 'zero' and 'full' answer sets and judge"
                " them.",
                path=source,
                field=schema.SYSTEM,
            )
    odd = sorted(
        s
        for s in named_systems
        if s not in schema.BOUND_SYSTEMS and not schema.is_rag_system(s)
    )
    if odd:
        raise InputError(
            f"unknown system {odd[0]!r} in the scores table. Expected 'zero',"
            " 'full', 'rag' or 'rag@<variant>'.",
            path=source,
            field=schema.SYSTEM,
        )
    no_answers = sorted(
        s for s in named_systems if schema.is_rag_system(s) and s not in systems
    )
    if no_answers:
        raise InputError(
            f"the scores table has rows of system {no_answers[0]!r} but the answers"
            " table has none. Give the answers of every scored system.",
            path=source,
            field=schema.SYSTEM,
        )
    score = pl.col(schema.SCORE)
    if (
        stats.select((pl.col("min") < 0) | (pl.col("max") > 10) | pl.col("nan"))
        .to_series()
        .any()
    ):
        row = (
            sc.filter(score.is_nan() | ~score.is_between(0.0, 10.0))
            .head(1)
            .collect()
            .row(0, named=True)
        )
        raise InputError(
            f"score {row[schema.SCORE]} outside 0..10 (question_id="
            f"{row[schema.QUESTION_ID]!r}, system={row[schema.SYSTEM]!r}, judge="
            f"{row[schema.JUDGE]!r}, dimension={row[schema.DIMENSION]!r}). Expected"
            " a number from 0 to 10, or null for a missing score.",
            path=source,
            field=schema.SCORE,
        )
    n_rag_rows = stats.filter(pl.col(schema.SYSTEM).is_in(systems))[COUNT].sum()
    if n_rag_rows != frames["rag_rows"][COUNT].sum():
        row = (
            sc.filter(pl.col(schema.SYSTEM).is_in(systems))
            .join(keys.lazy(), on=[schema.QUESTION_ID, schema.SYSTEM], how="anti")
            .head(1)
            .collect()
            .row(0, named=True)
        )
        raise InputError(
            f"score row without an answer row: question_id="
            f"{row[schema.QUESTION_ID]!r}, system={row[schema.SYSTEM]!r}. Expected"
            " every scored rag answer in the answers table.",
            path=source,
            field=schema.QUESTION_ID,
        )
    # Every answer failed: no score row is usable, but the judges and
    # dimensions are still those the table names (each gets its reason).
    named = inputs.scores if stats.height == 0 else stats
    judges = strings(named.get_column(schema.JUDGE).unique(maintain_order=True))
    dimensions = strings(named.get_column(schema.DIMENSION).unique(maintain_order=True))
    return tuple(judges), tuple(dimensions)
