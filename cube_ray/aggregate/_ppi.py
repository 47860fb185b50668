"""The prediction-powered estimator of CUBE_METHOD.md section 13, on numbers.

Pure numpy on the figures :func:`cube_ray.aggregate.evaluate_replicates`
computes (the humans' and a judge's CuBE on the audited questions L, the
judge's on the others U, for the sample as drawn, each bootstrap replicate and
each jackknife row); :mod:`cube_ray.aggregate._calibrated` puts them together.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from cube_ray.aggregate._resample import Interval

__all__ = [
    "MAX_UNDEFINED",
    "calibrated_value",
    "effective_gain",
    "power_tuned_lambda",
    "two_sample_jackknife",
]

FloatArray = npt.NDArray[np.float64]

MAX_UNDEFINED = 0.01
"""Largest share of replicates in which the judge's figure may be undefined
for the judge to be used (else lambda = 0: the human-only figure)."""


def calibrated_value(
    human: FloatArray | float,
    judge_labeled: FloatArray | float,
    judge_unlabeled: FloatArray | float,
    lam: float,
) -> FloatArray:
    """``theta = f_H(L) + lam * (f_J(U) - f_J(L))``, elementwise.

    >>> float(calibrated_value(60.0, 66.0, 64.0, 0.5))
    59.0
    >>> float(calibrated_value(60.0, 66.0, 64.0, 0.0))  # human-only
    60.0
    """
    h = np.asarray(human, dtype=np.float64)
    if lam == 0.0:  # the human-only figure, also where the judge's is undefined
        return h + 0.0
    out: FloatArray = h + lam * (
        np.asarray(judge_unlabeled, dtype=np.float64)
        - np.asarray(judge_labeled, dtype=np.float64)
    )
    return out


def power_tuned_lambda(
    human: FloatArray, judge_labeled: FloatArray, judge_unlabeled: FloatArray
) -> float:
    """The lambda in [0, 1] that minimises the variance of theta over replicates.

    With ``d = f_J(U) - f_J(L)``, ``var(H + lam d)`` is least at
    ``lam = -cov(H, d) / var(d)`` (clipped to [0, 1]); 0 when ``d`` does not
    vary, or when the judge's figure is undefined in more than
    :data:`MAX_UNDEFINED` of the replicates where the humans' is defined (a
    judge whose bounds are not apart: its figure would leave replicates out
    and bend the interval).

    Args:
        human: ``f_H(L)`` of each replicate.
        judge_labeled: ``f_J(L)`` of the same replicates (same resample of L).
        judge_unlabeled: ``f_J(U)`` of each replicate (independent of L's).

    Returns:
        lambda.

    Examples:
        A judge that moves exactly with the humans on L and varies as much
        on U as on L: half of the correction (the U noise costs the rest).

        >>> h = np.array([1.0, 2.0, 3.0, 4.0])
        >>> u = np.array([2.0, 4.0, 1.0, 3.0])
        >>> power_tuned_lambda(h, h + 5.0, u - u.mean() + 7.5)
        0.5
        >>> power_tuned_lambda(h, np.full(4, 3.0), np.full(4, 3.0))  # no signal
        0.0
    """
    d = np.asarray(judge_unlabeled, dtype=np.float64) - np.asarray(
        judge_labeled, dtype=np.float64
    )
    hh = np.asarray(human, dtype=np.float64)
    ok = np.isfinite(d) & np.isfinite(hh)
    defined = int(np.isfinite(hh).sum())
    if ok.sum() < 2 or ok.sum() < (1.0 - MAX_UNDEFINED) * defined:
        return 0.0
    dd, hv = d[ok], hh[ok]
    var_d = float(np.mean((dd - dd.mean()) ** 2))
    if var_d <= 0.0:
        return 0.0
    cov = float(np.mean((dd - dd.mean()) * (hv - hv.mean())))
    return float(min(1.0, max(0.0, -cov / var_d)))


def effective_gain(human_only: Interval, calibrated: Interval) -> float | None:
    """``(width_human_only / width_calibrated)^2``: the audit's sample-size gain.

    An audit of m questions with gain g gives an interval as narrow as
    ``g * m`` human-scored questions would (widths shrink as ``1/sqrt(n)``).

    >>> effective_gain((40.0, 60.0), (45.0, 55.0))
    4.0
    >>> effective_gain((None, None), (45.0, 55.0)) is None
    True
    """
    lo_h, hi_h = human_only
    lo_c, hi_c = calibrated
    if lo_h is None or hi_h is None or lo_c is None or hi_c is None:
        return None
    if hi_c - lo_c <= 0.0:
        return None
    return float(((hi_h - lo_h) / (hi_c - lo_c)) ** 2)


def two_sample_jackknife(*parts: FloatArray) -> FloatArray:
    """Jackknife values of independent samples, each centred at its own mean.

    BCa's acceleration of a two-sample estimator sums each sample's own
    jackknife deviations (Efron and Tibshirani 1993, section 14.3):
    centring each sample at 0 makes the one-sample formula of
    :func:`cube_ray.aggregate._resample.bca_interval` that sum. Raw deviations
    are the right units for both samples: a delete-one (or delete-group)
    deviation is the left-out influence divided by its own sample's size.

    >>> two_sample_jackknife(np.array([1.0, 3.0]), np.array([10.0, np.nan, 14.0]))
    array([-1.,  1., -2.,  2.])
    """
    kept = []
    for p in parts:
        finite = p[np.isfinite(p)]
        if finite.size:
            kept.append(finite - finite.mean())
    return np.concatenate(kept) if kept else np.array([], dtype=np.float64)
