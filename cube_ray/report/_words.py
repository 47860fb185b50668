"""The report's words for its figures: plurals, scales, warnings, why no interval.

Everything here formats what the summary (or :mod:`cube_ray.aggregate`) already
holds; no statistic is computed. The thresholds below only decide when a figure
gets a sentence beside it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from cube_ray.aggregate import Intervals, SystemInterval
from cube_ray.report._data import num

__all__ = [
    "ALPHA_WARN",
    "SAME_JUDGES",
    "SCALE_10",
    "SCALE_100",
    "SCALE_SHARE",
    "beyond_bounds",
    "disagreement_warning",
    "interval_method",
    "mean_sd",
    "no_interval_why",
    "plural",
    "resamples_with_cube",
    "spread_text",
]

ALPHA_WARN = 0.4
"""Below this Krippendorff's alpha the report warns that the judges disagree
(0.4 is the usual floor of "fair" agreement; 0.667 of tentative conclusions)."""

SCALE_10 = "judge scores, 0-10"
"""Caption tag of a table of raw judge scores (trimmed means, drops, errors)."""
SCALE_100 = "0 = zero bound, 100 = full bound"
"""Caption tag of a table of figures normalised between the bounds (CuBE)."""
SCALE_SHARE = "shares, 0-1"
"""Caption tag of a table of shares (recall@k, weights)."""

SAME_JUDGES = "the same judges in every resample"
"""What the interval holds fixed, in words."""

_METHODS = {
    "bca": "bias-corrected (BCa) bootstrap",
    "percentile": "percentile bootstrap",
}


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 judge``, ``2 judges``, ``0 judges``.

    >>> plural(1, "judge"), plural(3, "system"), plural(2, "query", "queries")
    ('1 judge', '3 systems', '2 queries')
    """
    return f"{n} {word if n == 1 else (many or word + 's')}"


def interval_method(method: str) -> str:
    """The interval method in words.

    >>> interval_method("bca"), interval_method("percentile")
    ('bias-corrected (BCa) bootstrap', 'percentile bootstrap')
    """
    return _METHODS.get(method, f"{method} bootstrap")


def mean_sd(mean: object, sd: object, digits: int = 1) -> str:
    """``82.0 ± 3.1``; ``82.0`` alone when there is no SD (one judge).

    >>> mean_sd(82.04, 3.14), mean_sd(82.04, None), mean_sd(None, None)
    ('82.0 ± 3.1', '82.0', 'n/a')
    """
    m, s = num(mean), num(sd)
    if m is None:
        return "n/a"
    return f"{m:.{digits}f}" if s is None else f"{m:.{digits}f} ± {s:.{digits}f}"


def spread_text(sd: object, n_judges: int) -> str:
    """The card's line under the CuBE: its spread across the judges.

    >>> spread_text(3.14, 2), spread_text(None, 1)
    ('± 3.1 SD across 2 judges', 'one judge: no spread across judges to show')
    """
    s = num(sd)
    if s is None:
        if n_judges == 1:
            return "one judge: no spread across judges to show"
        return f"no SD across {plural(n_judges, 'judge')}"
    return f"± {s:.1f} SD across {plural(n_judges, 'judge')}"


def no_interval_why(iv: Intervals | None, cell: SystemInterval | None) -> str:
    """Why a figure has no interval, in words.

    >>> no_interval_why(None, None)
    'no interval: none was computed (cube-ray aggregate RUN_DIR computes it)'
    """
    if iv is None:
        return "no interval: none was computed (cube-ray aggregate RUN_DIR computes it)"
    if cell is None:
        return "no interval: summary.json records none for this system"
    return (
        f"no interval: only {cell.n_defined} of {iv.n_resamples} resamples had "
        "a CuBE from every judge used"
    )


def resamples_with_cube(iv: Intervals, cell: SystemInterval) -> str:
    """``1000 of 1000`` resamples in which every judge used has a CuBE."""
    return f"{cell.n_defined} of {iv.n_resamples}"


def beyond_bounds(system: str, values: Iterable[object]) -> str | None:
    """A sentence for CuBE figures above 100 or below 0; None when all lie within.

    >>> print(beyond_bounds("rag", [103.1]))  # doctest: +NORMALIZE_WHITESPACE
    Above 100: rag's answers scored higher than the full-bound answers
    (written from the gold document alone), so it sits above the full bound;
    on a small sample this is usually noise around 100, not a better-than-gold
    system.
    >>> beyond_bounds("rag", [55.0, None]) is None
    True
    """
    nums = [v for v in (num(x) for x in values) if v is not None]
    parts = []
    if any(v > 100 for v in nums):
        parts.append(
            f"Above 100: {system}'s answers scored higher than the full-bound "
            "answers (written from the gold document alone), so it sits above the "
            "full bound; on a small sample this is usually noise around 100, not "
            "a better-than-gold system."
        )
    if any(v < 0 for v in nums):
        parts.append(
            f"Below 0: {system}'s answers scored lower than the zero-bound answers "
            "(written without any context)."
        )
    return " ".join(parts) or None


def disagreement_warning(alphas: Mapping[str, object]) -> str | None:
    """The warning for the dimensions whose Krippendorff's alpha is below 0.4.

    >>> print(disagreement_warning({"quality": 0.027, "relevance": 0.81}))
    ... # doctest: +NORMALIZE_WHITESPACE
    The judges disagree on quality (Krippendorff's α 0.027, below 0.4); read
    its figures with care.
    >>> print(disagreement_warning({"quality": 0.027, "relevance": 0.3}))
    ... # doctest: +NORMALIZE_WHITESPACE
    The judges disagree on quality and relevance (Krippendorff's α 0.027 and
    0.300, below 0.4); read their figures with care.
    >>> disagreement_warning({"quality": 0.81, "relevance": None}) is None
    True
    """
    low = {d: a for d, a in ((d, num(x)) for d, x in alphas.items()) if a is not None}
    low = {d: a for d, a in low.items() if a < ALPHA_WARN}
    if not low:
        return None
    dims = list(low)
    joined = _and(dims)
    vals = _and([f"{low[d]:.3f}" for d in dims])
    whose = "their" if len(dims) > 1 else "its"
    return (
        f"The judges disagree on {joined} (Krippendorff's α {vals}, below "
        f"{ALPHA_WARN}); read {whose} figures with care."
    )


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
