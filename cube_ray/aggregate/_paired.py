"""Paired comparison of two systems: the difference of CuBE on the same resamples.

Two systems asked the same questions share what makes a question hard, and
within a run they share the bounds too. Their CuBEs therefore move together
from one draw of questions to another, and the interval of their difference is
narrower than the two systems' own intervals suggest. The interval is read off
the replicates the headline's bootstrap already computed
(:func:`cube_ray.aggregate.evaluate_replicates`): replicate ``b`` of both
systems comes from the same resample of the questions, so the difference of
the two replicate vectors *is* the paired bootstrap; no second resampling. The
judges are the same in every resample (CUBE_METHOD.md section 10): those that
enter both systems' headlines.

Nothing here draws resamples or reads files; the caller hands in the
replicates (:class:`Replicates`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np
import polars as pl

from cube_ray import schema
from cube_ray.aggregate._bootstrap import CubeReplicates, FloatArray, fixed_judge_mean
from cube_ray.aggregate._frames import finite
from cube_ray.aggregate._model import (
    NO_SHARED_JURY,
    FigureInterval,
    JudgeDifference,
    PairedComparison,
    Reason,
)
from cube_ray.aggregate._resample import (
    IntArray,
    IntervalMethod,
    interval_of,
    within_strata,
)

__all__ = [
    "Replicates",
    "compare_systems",
    "paired_comparison",
    "shared_questions",
]


@dataclass(frozen=True)
class Replicates:
    """Everything an interval is read from, for every judge and system."""

    boot: CubeReplicates
    """The bootstrap replicates (``B`` resamples of the questions)."""
    point: CubeReplicates
    """The questions as drawn (one replicate)."""
    jack: CubeReplicates | None
    """The jackknife replicates (BCa's acceleration); None for percentile."""
    jack_strata: IntArray | None = None
    """The stratum of each jackknife replicate of a stratified design
    (:func:`~cube_ray.aggregate._resample.stratified_jackknife`); None: one
    sample."""


def _judge_rows(rep: CubeReplicates, system: str, judges: Sequence[str]) -> FloatArray:
    """``[len(judges), B]`` CuBE of ``system`` for the named judges."""
    si = rep.systems.index(system)
    ji = [rep.judges.index(j) for j in judges]
    rows: FloatArray = rep.cube[ji, si]
    return rows


def _mean(diff: FloatArray) -> FloatArray:
    """``[B]`` mean over the judges (rows); NaN when one of them is NaN."""
    used = np.ones((diff.shape[0], 1), dtype=bool)
    out: FloatArray = fixed_judge_mean(diff[:, None, :], used)[0]
    return out


def paired_comparison(
    first: Replicates,
    first_system: str,
    second: Replicates,
    second_system: str,
    *,
    judges: Sequence[str],
    n_questions: int,
    method: IntervalMethod,
    confidence: float,
    labels: tuple[str, str] | None = None,
) -> PairedComparison:
    """The difference ``CuBE(first) - CuBE(second)`` with its paired interval.

    ``first`` and ``second`` may be the same replicates (two systems of one
    run) or those of two runs evaluated on the same resamples of the same
    questions (:func:`cube_ray.aggregate.compare_runs`). Replicate ``b`` of the
    difference is the mean over ``judges`` of each judge's CuBE difference in
    resample ``b``; it is undefined when one judge's is.

    Args:
        first: Replicates holding ``first_system``.
        first_system: The system whose CuBE is subtracted from.
        second: Replicates holding ``second_system`` (same resamples).
        second_system: The other system.
        judges: The judges of the difference, the same in every resample.
        n_questions: Questions both systems answered (for the record).
        method: ``bca`` or ``percentile``.
        confidence: Nominal coverage, e.g. 0.95.
        labels: Names to record instead of the two systems' (runs).

    Returns:
        The comparison; with no judge, none, and the reason.

    Examples:
        Two systems of one jury, scored on three questions:

        >>> import numpy as np
        >>> cube = np.array([[[50.0, 52.0, 47.0], [45.0, 46.0, 44.0]]])
        >>> def rep(c):
        ...     j, s, b = c.shape
        ...     return CubeReplicates(["j"], ["a", "b"], ["d"], np.ones((s, b)),
        ...         np.ones((j, s, b, 1)), np.ones((j, s, b, 1)),
        ...         np.zeros((j, s, b), bool), {}, np.ones((j, s, b, 2)), c,
        ...         np.ones((j, s), bool))
        >>> r = Replicates(rep(cube), rep(cube[:, :, :1]), None)
        >>> c = paired_comparison(r, "a", r, "b", judges=["j"], n_questions=3,
        ...                       method="percentile", confidence=0.5)
        >>> c.difference, c.interval.low, c.interval.high, c.n_defined
        (5.0, 4.0, 5.5, 3)
    """
    names = labels or (first_system, second_system)
    if not judges:
        return PairedComparison(
            first=names[0],
            second=names[1],
            difference=None,
            interval=FigureInterval.of(None, None),
            n_defined=0,
            n_questions=n_questions,
            judges=[],
            per_judge={},
            reason=Reason(
                code=NO_SHARED_JURY,
                text="no judge enters both headlines, so there is no common "
                "scale to compare them on",
            ),
        )

    def diff(x: CubeReplicates, y: CubeReplicates) -> FloatArray:
        out: FloatArray = _judge_rows(x, first_system, judges) - _judge_rows(
            y, second_system, judges
        )
        return out

    boot, point = diff(first.boot, second.boot), diff(first.point, second.point)
    jack = (
        None
        if first.jack is None or second.jack is None
        else diff(first.jack, second.jack)
    )

    def read(values: FloatArray, at: float, jk: FloatArray | None) -> FigureInterval:
        if jk is not None and first.jack_strata is not None:
            jk = within_strata(jk, first.jack_strata)
        low, high = interval_of(values, at, jk, method=method, confidence=confidence)
        return FigureInterval.of(low, high)

    across = _mean(boot)
    estimate = float(_mean(point)[0])
    per_judge = {}
    for i, judge in enumerate(judges):
        at = float(point[i, 0])
        per_judge[judge] = JudgeDifference(
            difference=finite(at),
            interval=read(boot[i], at, None if jack is None else jack[i]),
        )
    return PairedComparison(
        first=names[0],
        second=names[1],
        difference=finite(estimate),
        interval=read(across, estimate, None if jack is None else _mean(jack)),
        n_defined=int(np.isfinite(across).sum()),
        n_questions=n_questions,
        judges=list(judges),
        per_judge=per_judge,
    )


def shared_questions(answers: pl.DataFrame, first: str, second: str) -> int:
    """Questions that both systems answered (an outage is no answer, §10).

    >>> answers = pl.DataFrame({"question_id": ["q1", "q1", "q2", "q3"],
    ...     "system": ["rag@a", "rag@b", "rag@a", "rag@b"]})
    >>> shared_questions(answers, "rag@a", "rag@b")
    1
    """
    rows = answers.filter(pl.col(schema.SYSTEM).cast(pl.String).is_in([first, second]))
    if schema.STATUS in rows.columns:
        status = pl.col(schema.STATUS).cast(pl.String)
        rows = rows.filter(status.is_null() | (status == schema.STATUS_OK))
    both = rows.group_by(schema.QUESTION_ID).agg(
        pl.col(schema.SYSTEM).n_unique().alias("_n")
    )
    return int(both.filter(pl.col("_n") == 2).height)


def compare_systems(
    replicates: Replicates,
    *,
    answers: pl.DataFrame,
    judges: Mapping[str, Sequence[str]],
    method: IntervalMethod,
    confidence: float,
) -> list[PairedComparison]:
    """Every pair of systems of one run, on the headline's own resamples.

    Args:
        replicates: The headline bootstrap's replicates.
        answers: The answers table (for the shared question count).
        judges: Per system, the judges of its headline; a pair is compared
            on the judges both headlines use.
        method: ``bca`` or ``percentile``.
        confidence: Nominal coverage.

    Returns:
        One comparison per pair, in sorted order of the systems.
    """
    order = replicates.boot.judges
    out = []
    for first, second in combinations(sorted(replicates.boot.systems), 2):
        both = set(judges.get(first, [])) & set(judges.get(second, []))
        out.append(
            paired_comparison(
                replicates,
                first,
                replicates,
                second,
                judges=[j for j in order if j in both],
                n_questions=shared_questions(answers, first, second),
                method=method,
                confidence=confidence,
            )
        )
    return out
