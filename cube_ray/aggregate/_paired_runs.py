"""Paired comparison of two runs on the questions they share (``cube-ray compare``).

Each run keeps its own bounds, weights and jury (its summary's); both are
recomputed on the shared questions only, and both are resampled with the same
draws: the shared question ids are sorted the same way in both runs, so the
headline's resampling (:func:`cube_ray.aggregate.summary_replicates`, same
seed and size) draws the same questions for both in every replicate. The
differences are then read as within a run (:func:`paired_comparison`).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from cube_ray import schema
from cube_ray.aggregate._intervals import summary_replicates
from cube_ray.aggregate._model import PairedComparison, Summary
from cube_ray.aggregate._paired import paired_comparison
from cube_ray.aggregate._resample import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    IntervalMethod,
    check_method,
)

__all__ = ["RunTables", "RunsComparison", "compare_runs"]


@dataclass(frozen=True)
class RunTables:
    """One run as the comparison reads it."""

    name: str
    """A label (``name:system`` names each system in the comparison)."""
    summary: Summary
    answers: pl.DataFrame
    scores: pl.DataFrame


@dataclass(frozen=True)
class RunsComparison:
    """Two runs compared on the questions they share."""

    first_questions: int
    second_questions: int
    shared: int
    """Questions in both runs' answers tables; the comparisons use these only."""
    comparisons: list[PairedComparison]
    """Every system of the first run against every system of the second."""


def _ids(answers: pl.DataFrame) -> pl.Series:
    return answers.get_column(schema.QUESTION_ID).cast(pl.String).unique()


def _on(frame: pl.DataFrame, ids: pl.Series) -> pl.DataFrame:
    # Ids as text in both runs: the same questions sort the same way in both.
    qid = pl.col(schema.QUESTION_ID).cast(pl.String)
    return frame.with_columns(qid).filter(qid.is_in(ids.implode()))


def _answered(answers: pl.DataFrame, system: str) -> pl.Series:
    rows = answers.filter(pl.col(schema.SYSTEM).cast(pl.String) == system)
    if schema.STATUS in rows.columns:
        status = pl.col(schema.STATUS).cast(pl.String)
        rows = rows.filter(status.is_null() | (status == schema.STATUS_OK))
    return rows.get_column(schema.QUESTION_ID).unique()


def compare_runs(
    first: RunTables,
    second: RunTables,
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    method: IntervalMethod = "bca",
    confidence: float = 0.95,
) -> RunsComparison:
    """Every system of ``first`` against every system of ``second``.

    Args:
        first: A run (its summary and tables).
        second: Another run.
        n_resamples: Resamples of the shared questions.
        seed: Their seed.
        method: ``bca`` or ``percentile``.
        confidence: Nominal coverage.

    Returns:
        The question counts and one comparison per pair of systems (none
        without a shared question). A pair is compared on the judges (by
        name) that enter both headlines.
    """
    method = check_method(method)
    a_ids, b_ids = _ids(first.answers), _ids(second.answers)
    shared = a_ids.filter(a_ids.is_in(b_ids.implode())).sort()
    out = RunsComparison(a_ids.len(), b_ids.len(), shared.len(), [])
    if shared.is_empty():
        return out
    tables = [
        (run, _on(run.answers, shared), _on(run.scores, shared))
        for run in (first, second)
    ]
    reps = [
        summary_replicates(
            answers,
            scores,
            run.summary,
            n_resamples=n_resamples,
            seed=seed,
            method=method,
            confidence=confidence,
        )[1]
        for run, answers, scores in tables
    ]
    (_, a_answers, _), (_, b_answers, _) = tables
    for sa in reps[0].boot.systems:
        for sb in reps[1].boot.systems:
            b_jury = set(second.summary.headline_judges(sb))
            jury = [j for j in first.summary.headline_judges(sa) if j in b_jury]
            both = _answered(a_answers, sa)
            n = int(both.is_in(_answered(b_answers, sb).implode()).sum())
            out.comparisons.append(
                paired_comparison(
                    reps[0],
                    sa,
                    reps[1],
                    sb,
                    judges=sorted(jury),
                    n_questions=n,
                    method=method,
                    confidence=confidence,
                    labels=(f"{first.name}:{sa}", f"{second.name}:{sb}"),
                )
            )
    return out
