"""A judge's CuBE calibrated against a human audit (CUBE_METHOD.md section 13).

Prediction-powered bootstrap with power tuning. With f the section 5-8
computation of a judge's CuBE, L the audited questions (human score H and
judge score J) and U the others (judge score only)::

    theta(lambda) = f_H(L) + lambda * (f_J(U) - f_J(L))

lambda = 0 is the human-only figure, lambda = 1 plain prediction-powered
inference; :func:`power_tuned_lambda` picks the lambda in [0, 1] that minimises
the bootstrap variance of theta. Replicates resample L and U independently
(within strata when the run is a planned sample); the interval is read off
them as the headline's is (percentile or BCa, :mod:`._resample`).

Every f is :func:`cube_ray.aggregate.evaluate_replicates` on count vectors
that are zero outside L (or U): the same kernels (trimmed means, Pearson
weights, normalisation, recall) as the summary and its bootstrap, with the
humans as one more judge (:data:`HUMAN_JUDGE`). Nothing here is a second
implementation of the method; ``ppi-python`` was not used because its
``ppboot`` calls a Python estimator once per resample on flat arrays (no
strata, no BCa, no paired judges), where these kernels evaluate every judge,
system and replicate in one grouped pass (docs/calibration.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import polars as pl

from cube_ray import schema
from cube_ray.aggregate._agreement import (
    HUMAN_JUDGE,
    _human_scores,
    people_weights,
    rater_agreement,
)
from cube_ray.aggregate._bootstrap import (
    CubeReplicates,
    FixedWeights,
    evaluate_replicates,
    fixed_judge_mean,
)
from cube_ray.aggregate._calibrated_checks import check_ratings, people_separation
from cube_ray.aggregate._frames import finite, strings
from cube_ray.aggregate._model import (
    CalibratedAcross,
    CalibratedFigure,
    Calibration,
    FigureInterval,
    RaterAgreement,
    Summary,
)
from cube_ray.aggregate._ppi import (
    calibrated_value,
    effective_gain,
    power_tuned_lambda,
    two_sample_jackknife,
)
from cube_ray.aggregate._replicate_rows import scored_by_judge, scored_dimensions
from cube_ray.aggregate._resample import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    Interval,
    IntervalMethod,
    check_method,
    interval_of,
    jackknife_indices,
    resample_indices,
    strata_positions,
)
from cube_ray.aggregate._weights import resolve_weights
from cube_ray.config import AggregateOptions
from cube_ray.errors import InputError

__all__ = [
    "CALIBRATED_INTERVAL",
    "CalibrationResult",
    "calibrate",
    "calibrated_value",
    "effective_gain",
    "power_tuned_lambda",
    "with_calibration",
]

CALIBRATED_INTERVAL: IntervalMethod = "percentile"
"""The calibrated (and people-only) figures' interval, whatever the headline's.

Measured by ``benchmarks/calibration.py`` (BENCHMARKS.md, "Calibrating the jury
against a human audit", diagnosis): BCa's bias correction ``z0`` moved the
calibrated interval the wrong way. The estimator's small-sample bias is
``b_H(m) - lambda * b_J(m)`` (ratios of trimmed means on m audited
questions), and the bootstrap misjudges ``b_J`` for a judge squeezed at the
floor (its replicates put ``f_J(L)`` up where the real bias is down), so ``z0``
is noise or of the wrong sign; with 50 audited questions it cost 1.0-1.4 points
of coverage for every judge (harsh: 92.5 % against 93.5 % percentile). The
acceleration is tiny (about 0.003) and was not the cause."""

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class CalibrationResult:
    """The calibrated figures of one audit, as they go into the summary."""

    calibrated: dict[str, dict[str, CalibratedFigure]]
    """``judge -> system -> figure``."""
    block: Calibration
    """The ``calibration`` block: the audit, the resampling, the jury's figure."""


def _positions(questions: pl.Series, labeled: pl.Series) -> tuple[IntArray, IntArray]:
    """Positions (into the sorted question ids) of L and of U."""
    is_l = questions.cast(pl.String).is_in(labeled.cast(pl.String).implode())
    mask = is_l.to_numpy()
    return (
        np.flatnonzero(mask).astype(np.int64),
        np.flatnonzero(~mask).astype(np.int64),
    )


def _resample(
    part: IntArray, layers: list[IntArray] | None, n_resamples: int, seed: int
) -> IntArray:
    """``[B, |part|]`` positions drawn from ``part``, within strata if given."""
    if layers is None:
        return resample_indices(part.size, n_resamples, seed=seed, strata=[part])
    within = [np.intersect1d(layer, part) for layer in layers]
    return resample_indices(
        part.size, n_resamples, seed=seed, strata=[w for w in within if w.size]
    )


_NO: Interval = (None, None)
"""No interval."""


def _figure(ci: Interval) -> FigureInterval:
    return FigureInterval.of(ci[0], ci[1])


def _fixed_weights(
    options: AggregateOptions,
    recorded: FixedWeights | None,
    answers: pl.DataFrame,
    scores: pl.DataFrame,
    judges: list[str],
    dimensions: list[str],
) -> FixedWeights | None:
    """The judges' fixed weights (recorded, else the setting's) and the people's.

    None for Pearson weights, computed on every replicate.
    """
    systems = strings(answers.get_column(schema.SYSTEM).unique())
    people = people_weights(options.weights, dimensions, systems)
    if people is None:
        return None
    if recorded is None:
        table = resolve_weights(
            options.weights,
            judges,
            dimensions,
            scored=scored_by_judge(scores, dimensions),
        ).fixed
        assert table is not None
        recorded = {j: {s: table[j] for s in systems} for j in judges}
    return {**recorded, **people}


Series = tuple[FloatArray, float, FloatArray | None]
"""One figure's replicates, its value on the sample as drawn, and its
jackknife values (None without BCa)."""


@dataclass(frozen=True)
class _Replicates:
    """One figure set on L (people and judges) and on U (judges only).

    ``boot`` over resamples, ``point`` on the sample as drawn (one column),
    ``jack`` leave-one-out (BCa only); U's are None without unlabeled questions.
    """

    lab: CubeReplicates
    lab_pt: CubeReplicates
    lab_jk: CubeReplicates | None
    unl: CubeReplicates | None
    unl_pt: CubeReplicates | None
    unl_jk: CubeReplicates | None

    def labeled(self, judge: str, si: int) -> Series:
        """A judge's (or the people's) CuBE of system ``si`` on L."""
        ji = self.lab.judges.index(judge)
        return (
            self.lab.cube[ji, si],
            float(self.lab_pt.cube[ji, si, 0]),
            self.lab_jk.cube[ji, si] if self.lab_jk is not None else None,
        )

    def unlabeled(self, judge: str, system: str) -> Series | None:
        """A judge's CuBE of ``system`` on U (None: no U, or not there)."""
        if self.unl is None or self.unl_pt is None or system not in self.unl.systems:
            return None
        su, ui = self.unl.systems.index(system), self.unl.judges.index(judge)
        return (
            self.unl.cube[ui, su],
            float(self.unl_pt.cube[ui, su, 0]),
            self.unl_jk.cube[ui, su] if self.unl_jk is not None else None,
        )

    def jury_labeled(self, chosen: Sequence[str], si: int) -> Series:
        """The mean CuBE of the ``chosen`` judges (the headline's) on L."""
        mask = np.array([[j in chosen] for j in self.lab.judges])
        return (
            fixed_judge_mean(self.lab.cube[:, si : si + 1], mask)[0],
            float(fixed_judge_mean(self.lab_pt.cube[:, si : si + 1], mask)[0, 0]),
            fixed_judge_mean(self.lab_jk.cube[:, si : si + 1], mask)[0]
            if self.lab_jk is not None
            else None,
        )

    def jury_unlabeled(self, chosen: Sequence[str], system: str) -> Series | None:
        """The mean CuBE of the ``chosen`` judges on U (None: no U there)."""
        if self.unl is None or self.unl_pt is None or system not in self.unl.systems:
            return None
        su = self.unl.systems.index(system)
        mask = np.array([[j in chosen] for j in self.unl.judges])
        return (
            fixed_judge_mean(self.unl.cube[:, su : su + 1], mask)[0],
            float(fixed_judge_mean(self.unl_pt.cube[:, su : su + 1], mask)[0, 0]),
            fixed_judge_mean(self.unl_jk.cube[:, su : su + 1], mask)[0]
            if self.unl_jk is not None
            else None,
        )


def _checked_inputs(
    scores: pl.DataFrame,
    ratings: pl.DataFrame,
    answers: pl.DataFrame,
    dimensions: Sequence[str] | None,
    n_resamples: int,
    source: str | None,
) -> tuple[list[str], list[str]]:
    """The judges and dimensions of a calibration, once its inputs are checked."""
    if n_resamples < 2:
        raise InputError(
            f"the calibration needs at least 2 resamples, got {n_resamples}; "
            "give --resamples 1000 (the default)",
            field="resamples",
        )
    judge_names = sorted(
        str(j) for j in scores.get_column(schema.JUDGE).cast(pl.String).unique()
    )
    if HUMAN_JUDGE in judge_names:
        raise InputError(
            f"a judge is named {HUMAN_JUDGE!r}, the name the human ratings take; "
            "rename the judge in the config.",
            field=schema.JUDGE,
        )
    dims = scored_dimensions(scores, dimensions)
    check_ratings(ratings, answers, dims, source)
    if ratings.height == 0:
        raise InputError("the human ratings have no rows", path=source)
    return judge_names, dims


def _keyed_rows(
    scores: pl.DataFrame, ratings: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The judges' score rows and the people's (as the judge ``human``).

    Keyed alike, so that L's rows are their concatenation.
    """
    cols = [schema.QUESTION_ID, schema.SYSTEM, schema.JUDGE, schema.DIMENSION]
    keyed = scores.select(
        pl.col(schema.QUESTION_ID),
        pl.col(cols[1:]).cast(pl.String),
        pl.col(schema.SCORE).cast(pl.Float64),
    )
    human = _human_scores(ratings).select(
        pl.col(schema.QUESTION_ID).cast(keyed.schema[schema.QUESTION_ID]),
        pl.col(cols[1:]).cast(pl.String),
        pl.col(schema.SCORE).cast(pl.Float64),
    )
    return keyed, human


def _estimate(
    h: Series,
    jl: Series,
    ju: Series | None,
    judge_cube: float | None,
    *,
    n_labeled: int,
    method: IntervalMethod,
    confidence: float,
) -> CalibratedFigure:
    """Section 13's estimate for one figure, with its intervals.

    From the people's figure on L (``h``), the judge's on L (``jl``) and on U
    (``ju``): lambda tuned on the replicates, the calibrated figure and its
    interval, the human-only figure and its interval.
    """
    hb, hp, hj = h
    jlb, jlp, jlj = jl
    if ju is None:
        lam = 0.0
        ub, up, uj = np.zeros_like(hb), 0.0, None
    else:
        ub, up, uj = ju
        lam = power_tuned_lambda(hb, jlb, ub)
    theta_b = calibrated_value(hb, jlb, ub, lam)
    theta = float(calibrated_value(hp, jlp, up, lam))
    jack = jack_h = None
    if hj is not None and jlj is not None:
        jack_h = two_sample_jackknife(hj)
        jack_l = calibrated_value(hj, jlj, up, lam)
        parts = [jack_l]
        if uj is not None:
            parts.append(calibrated_value(hp, jlp, uj, lam))
        jack = two_sample_jackknife(*parts)
    # No interval around a figure that is undefined on the sample as drawn
    # (e.g. people's bounds not apart): replicates alone would give one.
    ci = _NO
    if math.isfinite(theta):
        ci = interval_of(theta_b, theta, jack, method=method, confidence=confidence)
    human_ci = _NO
    if math.isfinite(hp):
        human_ci = interval_of(hb, hp, jack_h, method=method, confidence=confidence)
    gain = effective_gain(human_ci, ci)
    return CalibratedFigure.model_validate(
        {
            "cube": finite(theta),
            "interval": _figure(ci),
            "n_labeled": n_labeled,
            "lambda": lam,
            "human_only": finite(hp),
            "human_only_interval": _figure(human_ci),
            "judge_cube": judge_cube,
            "gain": gain,
            "equivalent_labeled": (
                round(gain * n_labeled) if gain is not None else None
            ),
            "n_defined": int(np.isfinite(theta_b).sum()),
        }
    )


def calibrate(
    answers: pl.DataFrame,
    scores: pl.DataFrame,
    ratings: pl.DataFrame,
    *,
    options: AggregateOptions | None = None,
    dimensions: Sequence[str] | None = None,
    fixed_weights: FixedWeights | None = None,
    judges: Mapping[str, Sequence[str]] | None = None,
    judge_cubes: Mapping[str, Mapping[str, float | None]] | None = None,
    jury_cubes: Mapping[str, float | None] | None = None,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    method: IntervalMethod = CALIBRATED_INTERVAL,
    confidence: float = 0.95,
    strata: pl.DataFrame | None = None,
    source: str | None = None,
) -> CalibrationResult:
    """Calibrated CuBE of every judge and system, and of the jury.

    Args:
        answers: The answers table.
        scores: The judges' scores table.
        ratings: Human ratings ``question_id, system, dimension, score
            [, rater]`` (several raters of one item are averaged). The audited
            questions L are those with a rating; the others are U.
        options: Aggregation options (the summary's).
        dimensions: Dimension order.
        fixed_weights: Recorded fixed weights of the judges (non-Pearson
            weights); the humans get ``options.weights`` (equal when they are
            per judge).
        judges: Per system, the jury of the across-judge figure (the
            headline's); default every judge.
        judge_cubes: ``judge -> system -> CuBE`` on all questions (the
            summary's), shown beside the calibrated figure; default
            recomputed.
        jury_cubes: ``system -> across-judge CuBE`` (the summary's).
        n_resamples: Resamples ``B`` of L and of U (at least 2).
        seed: Seed of the resamples (L uses ``seed``, U ``seed + 1``).
        method: ``percentile`` (the default, see :data:`CALIBRATED_INTERVAL`)
            or ``bca``.
        confidence: Interval coverage.
        strata: ``question_id, stratum`` of a planned sample: L and U are
            resampled within strata.
        source: Where the ratings came from (recorded).

    Returns:
        The ``calibrated`` figures and the ``calibration`` block.

    Raises:
        InputError: A rating names an answer or dimension the run lacks, or a
            score outside 0-10; a judge is named like the humans.
    """
    method = check_method(method)
    options = options or AggregateOptions()
    judge_names, dims = _checked_inputs(
        scores, ratings, answers, dimensions, n_resamples, source
    )
    keyed, human = _keyed_rows(scores, ratings)
    combined = pl.concat([keyed, human])
    fixed = _fixed_weights(options, fixed_weights, answers, keyed, judge_names, dims)

    qid = answers.get_column(schema.QUESTION_ID)
    ordered = (
        qid.cast(pl.Int64 if qid.dtype.is_integer() else pl.String).unique().sort()
    )
    pos_l, pos_u = _positions(ordered, human.get_column(schema.QUESTION_ID).unique())
    if pos_l.size < 2:
        raise InputError(
            f"the human ratings cover {pos_l.size} question(s) of the run; the "
            "calibration needs at least 2 (section 13 of the method: at least 50 "
            "for a useful interval, see docs/calibration.md).",
            path=source,
            field=schema.QUESTION_ID,
        )
    layers = strata_positions(ordered, strata) if strata is not None else None

    def run(idx: IntArray, rows: pl.DataFrame) -> CubeReplicates:
        return evaluate_replicates(
            answers,
            rows,
            indices=idx,
            options=options,
            fixed_weights=fixed,
            dimensions=dims,
            judges=judges,
        )

    bca = method == "bca"
    has_u = pos_u.size > 0
    reps = _Replicates(
        lab=run(_resample(pos_l, layers, n_resamples, seed), combined),
        lab_pt=run(pos_l[None, :], combined),
        lab_jk=run(pos_l[jackknife_indices(pos_l.size)], combined) if bca else None,
        unl=run(_resample(pos_u, layers, n_resamples, seed + 1), keyed)
        if has_u
        else None,
        unl_pt=run(pos_u[None, :], keyed) if has_u else None,
        unl_jk=run(pos_u[jackknife_indices(pos_u.size)], keyed)
        if bca and has_u
        else None,
    )
    # Section 10 on the people: their bounds must be apart on the audit.
    people_sep, reasons = people_separation(
        human,
        answers,
        reps.lab_pt,
        HUMAN_JUDGE,
        options=options,
        n_labeled=pos_l.size,
    )
    all_pt = None
    if judge_cubes is None or jury_cubes is None:
        all_pt = evaluate_replicates(
            answers,
            scores,
            options=options,
            fixed_weights=fixed_weights,
            dimensions=dims,
            judges=judges,
        )

    def estimate(
        h: Series, jl: Series, ju: Series | None, cube: float | None
    ) -> CalibratedFigure:
        return _estimate(
            h,
            jl,
            ju,
            cube,
            n_labeled=int(pos_l.size),
            method=method,
            confidence=confidence,
        )

    calibrated: dict[str, dict[str, CalibratedFigure]] = {}
    across: dict[str, CalibratedAcross] = {}
    for si, system in enumerate(reps.lab.systems):
        h = reps.labeled(HUMAN_JUDGE, si)
        for judge in judge_names:
            if judge_cubes is not None:
                jc = judge_cubes.get(judge, {}).get(system)
            else:
                assert all_pt is not None
                jc = finite(float(all_pt.cube[all_pt.judges.index(judge), si, 0]))
            calibrated.setdefault(judge, {})[system] = estimate(
                h, reps.labeled(judge, si), reps.unlabeled(judge, system), jc
            )
        # The jury: the headline's mean over its judges is the predictor.
        used = [j for j in reps.lab.judges if j != HUMAN_JUDGE]
        chosen = list(judges.get(system, used)) if judges is not None else used
        if not chosen:
            continue
        if jury_cubes is not None:
            jury = jury_cubes.get(system)
        else:
            assert all_pt is not None
            jury = finite(float(all_pt.cube_mean[si, 0]))
        fig = estimate(
            h,
            reps.jury_labeled(chosen, si),
            reps.jury_unlabeled(chosen, system),
            jury,
        )
        across[system] = CalibratedAcross(**fig.model_dump(), judges=chosen)

    block = Calibration(
        source=source,
        n_labeled=int(pos_l.size),
        n_unlabeled=int(pos_u.size),
        n_ratings=int(ratings.height),
        n_resamples=n_resamples,
        seed=seed,
        method=method,
        confidence=confidence,
        resampling="strata" if strata is not None else "questions",
        across_judges=across,
        people_separation=people_sep,
        reasons=reasons,
        raters=[
            RaterAgreement.model_validate(r)
            for r in rater_agreement(ratings, dims).iter_rows(named=True)
        ],
    )
    return CalibrationResult(calibrated, block)


def with_calibration(
    summary: Summary,
    answers: pl.DataFrame,
    scores: pl.DataFrame,
    ratings: pl.DataFrame,
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    method: IntervalMethod = CALIBRATED_INTERVAL,
    strata: pl.DataFrame | None = None,
    source: str | None = None,
) -> Summary:
    """``summary`` with its ``calibrated`` and ``calibration`` blocks.

    The options, dimensions, fixed weights and headline judges are the
    summary's own, so each judge's figure is the one the summary shows,
    calibrated.
    """
    options = summary.options()
    fixed = None
    if options.weights != "pearson":
        fixed = {j: block.weights for j, block in summary.judges.items()}
    result = calibrate(
        answers,
        scores,
        ratings,
        options=options,
        dimensions=summary.dimensions,
        fixed_weights=fixed,
        judges={s: summary.headline_judges(s) for s in summary.systems},
        judge_cubes={j: dict(b.cube) for j, b in summary.judges.items()},
        jury_cubes={
            s: (a.figures["cube"].mean if "cube" in a.figures else None)
            for s, a in summary.across_judges.items()
        },
        n_resamples=n_resamples,
        seed=seed,
        method=method,
        strata=strata,
        source=source,
    )
    return summary.model_copy(
        update={"calibrated": result.calibrated, "calibration": result.block}
    )
