"""Resamples of the question set and the intervals read off their replicates.

A resample is a multiplicity per question (how often it was drawn); the
replicates of a figure are computed from those counts by the Polars kernels of
:mod:`cube_ray.aggregate._math` (see :mod:`cube_ray.aggregate._bootstrap`).
This module only draws the resamples (with replacement, within strata when the
design has them: CUBE_METHOD.md section 11) and turns replicate values into
percentile or BCa intervals (numpy on one vector per figure).
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Literal

import numpy as np
import numpy.typing as npt
import polars as pl

from cube_ray import schema
from cube_ray.errors import ConfigError, InputError

__all__ = [
    "DEFAULT_INTERVAL",
    "INTERVAL_METHODS",
    "STRATUM",
    "Interval",
    "IntervalMethod",
    "bca_interval",
    "check_method",
    "interval_of",
    "jackknife_indices",
    "percentile_interval",
    "resample_indices",
    "strata_positions",
    "stratified_jackknife",
    "within_strata",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

STRATUM = "stratum"
"""Column of the strata frame naming each question's stratum."""

IntervalMethod = Literal["percentile", "bca"]
"""How a bootstrap interval is read off the replicates."""
INTERVAL_METHODS: tuple[IntervalMethod, ...] = ("percentile", "bca")
DEFAULT_INTERVAL: IntervalMethod = "bca"
"""The headline's interval, chosen by the coverage that ``benchmarks/validity.py``
measured (BENCHMARKS.md): BCa stayed within 93-97 % in every simulated setting,
the percentile interval over-covered (97.7 %) with integer judge scores."""
DEFAULT_RESAMPLES = 1000
"""Bootstrap replicates of every interval unless asked otherwise (a run's summary,
``cube-ray aggregate``, the report and the comparison page)."""
DEFAULT_SEED = 0
"""Seed of the bootstrap's resamples unless asked otherwise."""

Interval = tuple[float | None, float | None]

_JACKKNIFE_GROUPS = 200
"""BCa's acceleration uses a delete-one jackknife up to this many questions and
a delete-a-group jackknife (this many groups) above, to bound its cost."""


def check_method(method: str) -> IntervalMethod:
    """``method`` if it is one of :data:`INTERVAL_METHODS`, else a ConfigError.

    >>> check_method("bca")
    'bca'
    """
    for known in INTERVAL_METHODS:
        if method == known:
            return known
    raise ConfigError(
        f"interval method {method!r} is not one of {list(INTERVAL_METHODS)}"
    )


def strata_positions(
    questions: pl.Series, strata: pl.DataFrame | None
) -> list[IntArray]:
    """Positions (into ``questions``) of each stratum, strata in sorted order.

    Args:
        questions: The question ids in resampling order (sorted, unique).
        strata: ``question_id`` and ``stratum`` columns, one row per question;
            None: one stratum of every question.

    Returns:
        One sorted position array per stratum.

    Raises:
        InputError: The frame lacks a column, or leaves a question out.

    Examples:
        >>> qs = pl.Series("question_id", ["a", "b", "c"])
        >>> st = pl.DataFrame({"question_id": ["c", "a", "b"], "stratum": [1, 2, 1]})
        >>> [p.tolist() for p in strata_positions(qs, st)]
        [[1, 2], [0]]
    """
    n = questions.len()
    if strata is None:
        return [np.arange(n, dtype=np.int64)]
    missing = [c for c in (schema.QUESTION_ID, STRATUM) if c not in strata.columns]
    if missing:
        raise InputError(
            f"the strata frame lacks column(s) {missing}; it has {strata.columns}."
            " Expected one row per question: question_id, stratum.",
            field=missing[0],
        )
    keyed = pl.DataFrame(
        {schema.QUESTION_ID: questions.cast(pl.String)}
    ).with_row_index("_pos")
    given = strata.select(
        pl.col(schema.QUESTION_ID).cast(pl.String), pl.col(STRATUM).cast(pl.String)
    ).unique(schema.QUESTION_ID, keep="first")
    joined = keyed.join(given, on=schema.QUESTION_ID, how="left")
    lost = joined.filter(pl.col(STRATUM).is_null())
    if lost.height:
        raise InputError(
            f"{lost.height} question(s) have no stratum, e.g. question_id="
            f"{lost[schema.QUESTION_ID][0]!r}. Give every question of the answers"
            " table a stratum (or no strata at all).",
            field=STRATUM,
        )
    out = []
    for _, part in sorted(
        joined.partition_by(STRATUM, as_dict=True).items(), key=lambda kv: str(kv[0])
    ):
        out.append(np.sort(part.get_column("_pos").to_numpy().astype(np.int64)))
    return out


def resample_indices(
    n: int,
    n_resamples: int,
    *,
    seed: int = 0,
    strata: list[IntArray] | None = None,
) -> IntArray:
    """Question positions of ``n_resamples`` resamples drawn with replacement.

    Row ``b`` lists the positions drawn for resample ``b``. Within strata
    (CUBE_METHOD.md section 11, "intervals follow the design") each stratum
    ``h`` draws its own ``n_h`` positions among its questions, so a stratum's
    size never varies; without strata the whole set is one stratum and the
    draws are those of ``rng.integers(0, n, size=(B, n))``.

    Args:
        n: Number of questions.
        n_resamples: Number of resamples ``B``.
        seed: Seed of ``numpy.random.default_rng``.
        strata: Positions of each stratum (:func:`strata_positions`).

    Returns:
        ``[B, n]`` int64 positions.

    Examples:
        >>> resample_indices(4, 2, seed=1).shape
        (2, 4)
        >>> one = [np.array([0]), np.array([1, 2, 3])]
        >>> bool((resample_indices(4, 50, seed=1, strata=one)[:, 0] == 0).all())
        True
    """
    rng = np.random.default_rng(seed)
    if strata is None or len(strata) == 1:
        draws = rng.integers(0, n, size=(n_resamples, n), dtype=np.int64)
        if strata is None:
            return draws
        out: IntArray = strata[0][draws]
        return out
    parts = [
        positions[rng.integers(0, positions.size, size=(n_resamples, positions.size))]
        for positions in strata
    ]
    joined: IntArray = np.concatenate(parts, axis=1).astype(np.int64)
    return joined


def jackknife_indices(n: int, *, groups: int = _JACKKNIFE_GROUPS) -> IntArray:
    """``[G, n - n // G]`` question positions, one group left out per row.

    Delete-one (``G = n``) up to ``groups`` questions; above, ``groups``
    contiguous groups of ``n // groups`` questions (the few left over by the
    division stay in every row).

    >>> jackknife_indices(3).tolist()
    [[1, 2], [0, 2], [0, 1]]
    >>> jackknife_indices(5, groups=2).tolist()
    [[2, 3, 4], [0, 1, 4]]
    """
    g = min(n, groups)
    size = n // g
    keep = np.ones((g, n), dtype=bool)
    for i in range(g):
        keep[i, i * size : (i + 1) * size] = False
    positions = np.broadcast_to(np.arange(n, dtype=np.int64), (g, n))
    out: IntArray = positions[keep].reshape(g, n - size)
    return out


def stratified_jackknife(
    strata: list[IntArray], n: int, *, groups: int = _JACKKNIFE_GROUPS
) -> tuple[npt.NDArray[np.uint8], IntArray]:
    """The jackknife of a stratified design: groups left out within each stratum.

    Stratum ``h`` (``n_h`` questions) gets ``G_h = min(n_h, max(2,
    round(groups * n_h / n)))`` groups of consecutive positions, as equal in
    size as the division allows; a row leaves out one group and keeps every
    other question, so every question is left out once. A stratum of one
    question gets no row: the stratified bootstrap never varies it.

    Args:
        strata: Positions of each stratum (:func:`strata_positions`).
        n: Number of questions.
        groups: About this many rows in all (delete-one below it).

    Returns:
        ``[G, n]`` counts (0 for the left-out questions, 1 otherwise) and the
        stratum (index into ``strata``) of each row.

    Examples:
        >>> counts, layer = stratified_jackknife(
        ...     [np.array([0, 2]), np.array([1]), np.array([3, 4, 5])], 6)
        >>> counts.tolist()[:2], layer.tolist()
        ([[0, 1, 1, 1, 1, 1], [1, 1, 0, 1, 1, 1]], [0, 0, 2, 2, 2])
        >>> (counts == 0).sum(axis=0).tolist()  # once each; never the single one
        [1, 0, 1, 1, 1, 1]
        >>> stratified_jackknife([np.arange(10)], 10, groups=4)[0].sum(axis=1).tolist()
        [7, 7, 8, 8]
    """
    rows: list[npt.NDArray[np.uint8]] = []
    labels: list[int] = []
    for h, positions in enumerate(strata):
        if positions.size < 2:
            continue
        g = min(positions.size, max(2, round(groups * positions.size / max(n, 1))))
        for part in np.array_split(positions, g):
            row = np.ones(n, dtype=np.uint8)
            row[part] = 0
            rows.append(row)
            labels.append(h)
    counts = np.stack(rows) if rows else np.ones((0, n), dtype=np.uint8)
    return counts, np.asarray(labels, dtype=np.int64)


def within_strata(jackknife: FloatArray, strata: IntArray) -> FloatArray:
    """Jackknife values of a stratified design, as BCa's one-sample formula reads them.

    Under stratified resampling the acceleration is that of a multi-sample
    estimator (Efron and Tibshirani 1993, section 14.3; Davison and Hinkley
    1997, section 3.7): each stratum's jackknife deviations about *its own*
    mean, times ``(G_h - 1) / G_h`` (``G_h`` the stratum's rows), enter one sum
    ``a = sum(d^3) / (6 sum(d^2)^1.5)``. Leaving the overall mean in instead
    would count the differences between strata, which the design holds fixed.
    The values returned have mean 0 and deviations ``d``, so
    :func:`bca_interval` computes that sum. Non-finite values are left out; a
    stratum with fewer than two finite rows adds nothing.

    Args:
        jackknife: One figure's value in each row of :func:`stratified_jackknife`.
        strata: The stratum of each row.

    Examples:
        Two strata far apart: only the spread within each is left.

        >>> within_strata(np.array([10.0, 12.0, 50.0, 51.0, 53.0]),
        ...               np.array([0, 0, 1, 1, 1])).round(4).tolist()
        [-0.5, 0.5, -0.8889, -0.2222, 1.1111]
    """
    out: list[FloatArray] = []
    for h in np.unique(strata):
        values = jackknife[(strata == h) & np.isfinite(jackknife)]
        if values.size >= 2:
            out.append((values - values.mean()) * (values.size - 1) / values.size)
    return np.concatenate(out) if out else np.array([], dtype=np.float64)


def percentile_interval(values: FloatArray, confidence: float) -> Interval:
    """The percentile interval of the finite replicates.

    >>> [round(v, 9) for v in percentile_interval(np.arange(101.0), 0.9)]
    [5.0, 95.0]
    """
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return (None, None)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(finite, [alpha, 1.0 - alpha])
    return (float(lo), float(hi))


def bca_interval(
    values: FloatArray,
    estimate: float,
    jackknife: FloatArray,
    confidence: float,
) -> Interval:
    """The bias-corrected and accelerated (BCa) interval (Efron 1987).

    ``z0`` corrects for the median of the replicates lying off the estimate;
    the acceleration ``a`` (from the jackknife values) for a standard error
    that changes with the value. Falls back to the percentile interval when
    either is undefined (e.g. every jackknife value equal).

    Args:
        values: The bootstrap replicates (non-finite ones are left out).
        estimate: The figure on the question set as drawn.
        jackknife: The figure with each question (or group of questions) left
            out in turn.
        confidence: Nominal coverage, e.g. 0.95.

    Returns:
        The interval, or ``(None, None)`` without a finite replicate.

    Examples:
        Symmetric replicates around the estimate and a symmetric jackknife give
        the percentile interval:

        >>> reps = np.linspace(-1.0, 1.0, 2001)
        >>> lo, hi = bca_interval(reps, 0.0, np.array([-1.0, 1.0]), 0.9)
        >>> round(lo, 3), round(hi, 3)
        (-0.9, 0.9)
    """
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return (None, None)
    jack = jackknife[np.isfinite(jackknife)]
    if not math.isfinite(estimate) or jack.size < 2:
        return percentile_interval(finite, confidence)
    norm = NormalDist()
    share = (np.sum(finite < estimate) + 0.5 * np.sum(finite == estimate)) / finite.size
    if not 0.0 < share < 1.0:
        return percentile_interval(finite, confidence)
    z0 = norm.inv_cdf(float(share))
    dev = jack.mean() - jack
    denom = 6.0 * float(np.sum(dev**2)) ** 1.5
    accel = float(np.sum(dev**3)) / denom if denom > 0 else 0.0
    alpha = (1.0 - confidence) / 2.0
    levels = []
    for tail in (alpha, 1.0 - alpha):
        z = z0 + norm.inv_cdf(tail)
        levels.append(norm.cdf(z0 + z / (1.0 - accel * z)))
    lo, hi = np.quantile(finite, levels)
    return (float(lo), float(hi))


def interval_of(
    values: FloatArray,
    estimate: float,
    jackknife: FloatArray | None,
    *,
    method: IntervalMethod,
    confidence: float,
) -> Interval:
    """The ``method`` interval of the replicates ``values`` (one figure).

    ``bca`` needs the figure's jackknife values; without them (or with
    ``percentile``) the percentile interval.

    >>> reps = np.linspace(-1.0, 1.0, 2001)
    >>> [round(v, 3) for v in interval_of(reps, 0.0, None, method="bca",
    ...                                   confidence=0.9)]
    [-0.9, 0.9]
    """
    if method == "percentile" or jackknife is None:
        return percentile_interval(values, confidence)
    return bca_interval(values, estimate, jackknife, confidence)
