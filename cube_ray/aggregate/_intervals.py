"""Bootstrap intervals of the headline (CUBE_METHOD.md sections 10 and 11).

:func:`bootstrap_cube` resamples the questions (within strata when the design
has them), holds the judges fixed and reads a percentile or BCa interval of
each system's across-judge CuBE off the replicates of
:func:`cube_ray.aggregate.evaluate_replicates`. :func:`headline_intervals`
does so for the judges and options a summary records and returns the
``intervals`` block of ``summary.json``, which the report, the console and
``cube-ray plan`` read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from cube_ray import schema
from cube_ray.aggregate._bootstrap import (
    FixedWeights,
    FloatArray,
    evaluate_replicates,
)
from cube_ray.aggregate._frames import CUBE, finite
from cube_ray.aggregate._model import FigureInterval, Intervals, Summary, SystemInterval
from cube_ray.aggregate._paired import Replicates, compare_systems
from cube_ray.aggregate._resample import (
    DEFAULT_INTERVAL,
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    Interval,
    IntervalMethod,
    check_method,
    interval_of,
    jackknife_indices,
    resample_indices,
    strata_positions,
    stratified_jackknife,
    within_strata,
)
from cube_ray.config import AggregateOptions
from cube_ray.errors import InputError

__all__ = [
    "BootstrapResult",
    "bootstrap_cube",
    "headline_intervals",
    "summary_replicates",
    "with_intervals",
]


@dataclass(frozen=True)
class BootstrapResult:
    """Bootstrap intervals of one system's headline figures."""

    system: str
    n_resamples: int
    confidence: float
    method: IntervalMethod
    """``percentile`` or ``bca`` (bias-corrected and accelerated)."""
    judges: tuple[str, ...]
    """The judges averaged in every replicate (held fixed, as in the headline)."""
    cube: Interval
    """Interval of the across-judge mean CuBE of :attr:`judges`."""
    weighted: Interval
    """Interval of their mean normalised weighted total."""
    recall: Interval
    per_judge: dict[str, Interval]
    """Interval of each judge's CuBE (every judge, used or not)."""
    n_defined: int
    """Resamples in which every judge of :attr:`judges` had a defined CuBE; the
    interval is read from those."""
    estimate: float | None = None
    """The across-judge CuBE on the questions as drawn (every count 1)."""


def bootstrap_cube(
    answers: pl.DataFrame,
    scores: pl.DataFrame,
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    confidence: float = 0.95,
    method: IntervalMethod = DEFAULT_INTERVAL,
    options: AggregateOptions | None = None,
    fixed_weights: FixedWeights | None = None,
    dimensions: Sequence[str] | None = None,
    judges: Mapping[str, Sequence[str]] | None = None,
    strata: pl.DataFrame | None = None,
) -> dict[str, BootstrapResult]:
    """Bootstrap CI of CuBE per system, resampling questions, judges held fixed.

    Each resample draws the question set with replacement (a question drawn
    twice counts twice everywhere: weights, trimmed means, recall), recomputes
    every judge's CuBE, then the mean over the judges of ``judges[system]``.

    Args:
        answers: The answers table.
        scores: The scores table.
        n_resamples: Number of resamples ``B``.
        seed: Seed of :func:`resample_indices`.
        confidence: Interval coverage, e.g. 0.95.
        method: ``bca`` (the default, see :data:`DEFAULT_INTERVAL`) or
            ``percentile``.
        options: Aggregation options.
        fixed_weights: Recorded fixed weights (see :func:`evaluate_replicates`).
        dimensions: Dimension order.
        judges: Per system, the judges of the headline (default: all).
        strata: ``question_id, stratum`` of a stratified sample (CUBE_METHOD.md
            section 11): each stratum is resampled within itself, its size
            ``n_h`` fixed. None: one stratum.

    Returns:
        One :class:`BootstrapResult` per system under test.
    """
    return _bootstrap(
        answers,
        scores,
        n_resamples=n_resamples,
        seed=seed,
        confidence=confidence,
        method=method,
        options=options,
        fixed_weights=fixed_weights,
        dimensions=dimensions,
        judges=judges,
        strata=strata,
    )[0]


def _bootstrap(
    answers: pl.DataFrame,
    scores: pl.DataFrame,
    *,
    n_resamples: int,
    seed: int,
    confidence: float,
    method: IntervalMethod,
    options: AggregateOptions | None,
    fixed_weights: FixedWeights | None,
    dimensions: Sequence[str] | None,
    judges: Mapping[str, Sequence[str]] | None,
    strata: pl.DataFrame | None,
) -> tuple[dict[str, BootstrapResult], Replicates]:
    """:func:`bootstrap_cube`, and the replicates it read its intervals from.

    A paired comparison reads its own intervals off the same replicates.
    """
    method = check_method(method)
    questions = answers.get_column(schema.QUESTION_ID)
    key = questions.cast(pl.Int64 if questions.dtype.is_integer() else pl.String)
    ordered = key.unique().sort()
    n_q = ordered.len()
    layers = strata_positions(ordered, strata) if strata is not None else None
    idx = resample_indices(n_q, n_resamples, seed=seed, strata=layers)
    kwargs: dict[str, Any] = {
        "options": options,
        "fixed_weights": fixed_weights,
        "dimensions": dimensions,
        "judges": judges,
    }
    rep = evaluate_replicates(answers, scores, indices=idx, **kwargs)
    point = evaluate_replicates(answers, scores, **kwargs)
    jack = None
    jack_strata = None
    if method == "bca" and layers is not None and len(layers) > 1:
        # BCa's acceleration follows the design too: left out within strata.
        jack_counts, jack_strata = stratified_jackknife(layers, n_q)
        if jack_counts.shape[0]:  # none when every stratum is one question
            jack = evaluate_replicates(answers, scores, counts=jack_counts, **kwargs)
    elif method == "bca":
        jack = evaluate_replicates(
            answers, scores, indices=jackknife_indices(n_q), **kwargs
        )

    def interval(
        values: FloatArray, at_point: FloatArray, at_jack: FloatArray | None
    ) -> Interval:
        if at_jack is not None and jack_strata is not None:
            at_jack = within_strata(at_jack, jack_strata)
        return interval_of(
            values,
            float(at_point[0]),
            at_jack,
            method=method,
            confidence=confidence,
        )

    out: dict[str, BootstrapResult] = {}
    for si, system in enumerate(rep.systems):
        cube_b = rep.cube_mean[si]
        estimate = float(point.cube_mean[si, 0])
        out[system] = BootstrapResult(
            system=system,
            n_resamples=n_resamples,
            confidence=confidence,
            method=method,
            judges=tuple(j for ji, j in enumerate(rep.judges) if rep.used[ji, si]),
            cube=interval(
                cube_b,
                point.cube_mean[si],
                None if jack is None else jack.cube_mean[si],
            ),
            weighted=interval(
                rep.weighted_mean[si],
                point.weighted_mean[si],
                None if jack is None else jack.weighted_mean[si],
            ),
            recall=interval(
                rep.recall[si],
                point.recall[si],
                None if jack is None else jack.recall[si],
            ),
            per_judge={
                judge: interval(
                    rep.cube[ji, si],
                    point.cube[ji, si],
                    None if jack is None else jack.cube[ji, si],
                )
                for ji, judge in enumerate(rep.judges)
            },
            n_defined=int(np.isfinite(cube_b).sum()),
            estimate=finite(estimate),
        )
    return out, Replicates(rep, point, jack, jack_strata)


def _figure(ci: Interval) -> FigureInterval:
    return FigureInterval.of(ci[0], ci[1])


def summary_replicates(
    answers: pl.DataFrame,
    scores: pl.DataFrame,
    summary: Summary,
    *,
    n_resamples: int,
    seed: int,
    method: IntervalMethod,
    confidence: float,
    strata: pl.DataFrame | None = None,
) -> tuple[dict[str, BootstrapResult], Replicates]:
    """The bootstrap of a summary's headline, and the replicates behind it.

    The options, dimensions, fixed weights and each system's judges are the
    summary's own.
    """
    options = summary.options()
    fixed = None
    if options.weights != "pearson":
        fixed = {j: block.weights for j, block in summary.judges.items()}
    return _bootstrap(
        answers,
        scores,
        n_resamples=n_resamples,
        seed=seed,
        confidence=confidence,
        method=method,
        options=options,
        fixed_weights=fixed,
        dimensions=summary.dimensions,
        judges={s: summary.headline_judges(s) for s in summary.systems},
        strata=strata,
    )


def headline_intervals(
    answers: pl.DataFrame,
    scores: pl.DataFrame,
    summary: Summary,
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    method: IntervalMethod = DEFAULT_INTERVAL,
    confidence: float = 0.95,
    strata: pl.DataFrame | None = None,
) -> Intervals:
    """The ``intervals`` block of a summary: the headline's bootstrap intervals.

    The options, dimensions, fixed weights and the judges of each system's
    across-judge figures are the summary's own, so the interval is one of the
    headline. The replicate on the questions as drawn must reproduce the
    summary's across-judge CuBE; a summary written from other tables fails.

    Args:
        answers: The answers table the summary was computed from.
        scores: The scores table the summary was computed from.
        summary: The summary (see :func:`cube_ray.aggregate.summarize`).
        n_resamples: Number of resamples ``B`` (at least 1).
        seed: Seed of the resamples.
        method: ``bca`` or ``percentile``.
        confidence: Interval coverage.
        strata: ``question_id, stratum``: resample within strata (section 11).

    Returns:
        The block to store as ``summary.intervals``.

    Raises:
        InputError: The summary does not match the tables.
    """
    used = {s: summary.headline_judges(s) for s in summary.systems}
    boot, replicates = summary_replicates(
        answers,
        scores,
        summary,
        n_resamples=n_resamples,
        seed=seed,
        method=method,
        confidence=confidence,
        strata=strata,
    )
    systems: dict[str, SystemInterval] = {}
    for system, b in boot.items():
        across = summary.across_judges.get(system)
        if across is None:
            raise InputError(
                f"summary.json has no figures of system {system!r}, which the "
                "answers table has. Re-create the summary from these tables with "
                "`cube-ray aggregate RUN_DIR`.",
                field="across_judges",
            )
        recorded = across.figures.get(CUBE)
        mean = recorded.mean if recorded is not None else None
        shown = bool(used[system]) and mean is not None
        if (
            shown
            and mean is not None
            and (
                b.estimate is None
                or abs(b.estimate - mean) > 1e-6 * max(1.0, abs(mean))
            )
        ):
            raise InputError(
                f"summary.json does not match the answers and scores tables: the "
                f"across-judge CuBE of {system} is {mean:.6f} in the summary and "
                f"{b.estimate} recomputed from the tables over "
                f"{', '.join(used[system])}. Re-create the summary from these "
                "tables with `cube-ray aggregate RUN_DIR`.",
                field=f"across_judges.{system}.cube",
            )
        none = FigureInterval.of(None, None)
        systems[system] = SystemInterval(
            judges=list(b.judges),
            n_defined=b.n_defined,
            cube=_figure(b.cube) if shown else none,
            weighted=_figure(b.weighted) if shown else none,
            recall=_figure(b.recall),
            per_judge={j: _figure(ci) for j, ci in b.per_judge.items()},
        )
    return Intervals(
        n_resamples=n_resamples,
        seed=seed,
        method=method,
        confidence=confidence,
        resampling="strata" if strata is not None else "questions",
        systems=systems,
        comparisons=compare_systems(
            replicates,
            answers=answers,
            judges=used,
            method=check_method(method),
            confidence=confidence,
        ),
    )


def with_intervals(
    summary: Summary,
    answers: pl.DataFrame,
    scores: pl.DataFrame,
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    method: IntervalMethod = DEFAULT_INTERVAL,
    strata: pl.DataFrame | None = None,
) -> Summary:
    """``summary`` with its ``intervals`` block (:func:`headline_intervals`).

    ``n_resamples=0`` leaves the intervals out (``intervals`` is None).
    """
    if n_resamples <= 0:
        return summary.model_copy(update={"intervals": None})
    block = headline_intervals(
        answers,
        scores,
        summary,
        n_resamples=n_resamples,
        seed=seed,
        method=method,
        strata=strata,
    )
    return summary.model_copy(update={"intervals": block})
