"""The check's figures and verdict: bound separation, fault detection, injection.

Pure functions of a judge's score rows (Polars kernels of
:mod:`cube_ray.aggregate`); :func:`_verdict` turns them into the judge's
failures and warnings.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

from cube_ray import schema
from cube_ray.aggregate import (
    FALSE_ALARM,
    MISSES_FAULTS,
    NOT_SEPARATED,
    TOO_FEW_FAULTS,
    BoundsOptions,
    fault_detection,
    fixed_weights,
    qualification_block,
    separated,
    trimmed_means,
    wilcoxon_greater,
)
from cube_ray.injection import MAX_SHIFT
from cube_ray.judge_check._inputs import _FAULT
from cube_ray.qualification import STATUS_NO_CONTROL, is_control

MEAN = "mean"
"""Key of the equal-weighted mean over the dimensions in the bound results."""
MEAN_FIGURE = "weighted"
"""Key of the equal-weighted total in the qualification results (as a run's)."""
MAX_MISSING_SHARE = 0.5
"""A judge that leaves more than this share of its rows unscored fails."""


def qualification(
    scores: Sequence[dict[str, Any]],
    faults: Sequence[dict[str, Any]],
    *,
    dimensions: Sequence[str],
    min_drop: float,
    alpha: float,
) -> dict[str, dict[str, dict[str, Any]]]:
    """Per fault kind and dimension (and the equal-weighted total) the detection.

    ``scores``: the judge's score rows of the full-bound answers, of the
    faulted ones and of their controls (``system`` = ``fault:<kind>``,
    ``fault:<kind>:control``); ``faults``: the qualification rows. Returns
    ``kind -> figure -> test`` (:func:`cube_ray.aggregate.fault_detection`:
    the fault's drop, the control's, the net drop, each with its interval;
    ``detected`` net of the control, ``false_alarm``).
    """
    cols = [
        schema.QUESTION_ID,
        schema.SYSTEM,
        schema.JUDGE,
        schema.DIMENSION,
        schema.SCORE,
    ]
    frame = pl.DataFrame(
        [{c: s[c] for c in cols} for s in scores],
        schema={c: pl.Float64 if c == schema.SCORE else pl.String for c in cols},
    )
    original = frame.filter(pl.col(schema.SYSTEM) == schema.FULL)
    faulted = frame.filter(pl.col(schema.SYSTEM).str.starts_with(_FAULT)).with_columns(
        pl.col(schema.SYSTEM).str.strip_prefix(_FAULT)
    )
    table = pl.DataFrame(
        [
            {
                "question_id": f[schema.QUESTION_ID],
                "kind": f["kind"],
                "status": f[schema.STATUS],
            }
            for f in faults
        ],
        schema={"question_id": pl.String, "kind": pl.String, "status": pl.String},
    )
    judges = frame.get_column(schema.JUDGE).unique().to_list()
    detection = fault_detection(
        original,
        faulted,
        table,
        weights=fixed_weights("equal", judges, dimensions),
        min_drop=min_drop,
        alpha=alpha,
    )
    kinds = [k for k in dict.fromkeys(f["kind"] for f in faults) if not is_control(k)]
    mine = [f for f in faults if f["kind"] in kinds]
    block = qualification_block(
        detection,
        judges=judges,
        kinds=kinds,
        figures=[*dimensions, MEAN_FIGURE],
        skipped={
            k: sum(
                f["kind"] == k and f[schema.STATUS] != schema.STATUS_OK for f in mine
            )
            for k in kinds
        },
        no_control={
            k: sum(
                f["kind"] == k and f[schema.STATUS] == STATUS_NO_CONTROL for f in mine
            )
            for k in kinds
        },
    )
    return next(iter(block.values()), {})


def separation(
    zero: Sequence[float], full: Sequence[float], *, options: BoundsOptions
) -> dict[str, Any]:
    """Section 10 bound separation of paired scores (same question at each index).

    ``gap`` is the difference of the trimmed means, ``p_value`` the one-sided
    Wilcoxon signed-rank p of ``full - zero > 0``.

    >>> s = separation([1.0] * 8, [7.0] * 8, options=BoundsOptions())
    >>> s["gap"], s["p_value"] < 0.01, s["separated"]
    (6.0, True, True)
    >>> separation([10.0] * 8, [10.0] * 8, options=BoundsOptions())["separated"]
    False
    """
    n = len(zero)
    if n == 0:
        return {
            "n_pairs": 0,
            "zero": None,
            "full": None,
            "gap": None,
            "p_value": 1.0,
            "separated": False,
        }
    frame = pl.DataFrame(
        {
            schema.SYSTEM: [schema.ZERO] * n + [schema.FULL] * n,
            schema.SCORE: [float(x) for x in (*zero, *full)],
        }
    )
    means = dict(
        trimmed_means(frame, by=[schema.SYSTEM], trim=options.trim)
        .select(schema.SYSTEM, "trimmed_mean")
        .iter_rows()
    )
    gap = means[schema.FULL] - means[schema.ZERO]
    p = wilcoxon_greater([f - z for z, f in zip(zero, full, strict=True)])
    return {
        "n_pairs": n,
        "zero": round(means[schema.ZERO], 3),
        "full": round(means[schema.FULL], 3),
        "gap": round(gap, 3),
        "p_value": float(f"{p:.3g}"),
        "separated": separated(gap, p, min_gap=options.min_gap, alpha=options.alpha),
    }


def _bounds(
    scores: list[dict[str, Any]], dimensions: list[str], options: BoundsOptions
) -> dict[str, Any]:
    """Separation per dimension and for the equal-weighted mean of the dimensions."""
    by: dict[tuple[str, str, str], float] = {
        (s[schema.DIMENSION], s[schema.QUESTION_ID], s[schema.SYSTEM]): s[schema.SCORE]
        for s in scores
        if s[schema.SCORE] is not None
    }
    questions = sorted({q for _, q, _ in by})
    out: dict[str, Any] = {}
    for dim in dimensions:
        both = [
            q
            for q in questions
            if (dim, q, schema.ZERO) in by and (dim, q, schema.FULL) in by
        ]
        out[dim] = separation(
            [by[(dim, q, schema.ZERO)] for q in both],
            [by[(dim, q, schema.FULL)] for q in both],
            options=options,
        )
    # The weighted total of section 10, with equal weights: a run's Pearson
    # weights need retrieval ranks, which the check has no system for.
    complete = [
        q
        for q in questions
        if all((d, q, s) in by for d in dimensions for s in schema.BOUND_SYSTEMS)
    ]
    out[MEAN] = separation(
        [
            sum(by[(d, q, schema.ZERO)] for d in dimensions) / len(dimensions)
            for q in complete
        ],
        [
            sum(by[(d, q, schema.FULL)] for d in dimensions) / len(dimensions)
            for q in complete
        ],
        options=options,
    )
    return out


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _verdict(result: dict[str, Any]) -> None:
    """Fill ``failures`` and ``warnings`` of one judge's result in place."""
    failures, warnings = result["failures"], result["warnings"]
    scored, total = result["scored"], result["rows"]
    if total and (total - scored) > MAX_MISSING_SHARE * total:
        failures.append(
            f"{total - scored} of {total} rows got no score (statuses: "
            f"{result['statuses']})"
        )
    mean = result["bounds"][MEAN]
    if not mean["separated"]:
        failures.append(
            f"{NOT_SEPARATED}: gap {mean['gap']} points, p = {mean['p_value']} "
            f"over {mean['n_pairs']} questions"
        )
    for dim, s in result["bounds"].items():
        if dim != MEAN and not s["separated"]:
            warnings.append(
                f"{dim}: {NOT_SEPARATED} (gap {s['gap']}, p = {s['p_value']})"
            )
    for kind, dim in result.get("misses", []):
        test = result["qualification"][kind][dim]
        failures.append(
            f"{MISSES_FAULTS}: {kind} on {dim} (net drop {_fmt(test['net_drop'])}, "
            f"p = {_fmt(test['net_p'])}; drop {_fmt(test['drop'])}, control drop "
            f"{_fmt(test['control_drop'])})"
        )
    for kind, dim in result.get("false_alarms", []):
        test = result["qualification"][kind][dim]
        warnings.append(
            f"{FALSE_ALARM}: {kind} control on {dim} (control drop "
            f"{_fmt(test['control_drop'])}, p = {_fmt(test['control_p'])})"
        )
    for kind, dim in result.get("untested", []):
        n = result["qualification"][kind][dim]["n"]
        warnings.append(
            f"{TOO_FEW_FAULTS}: {kind} on {dim} (only {n} faulted answers in the "
            "sample could be scored; a larger --sample may hold more)"
        )
    for pattern, row in result["injection"].items():
        shift = row["shift"]
        if shift > MAX_SHIFT:
            row["flag"] = "raises"
            failures.append(
                f"injection {pattern} raises the mean score by {shift:+.2f}"
            )
        elif shift < -MAX_SHIFT:
            row["flag"] = "lowers"
            warnings.append(
                f"injection {pattern} lowers the mean score by {shift:+.2f}"
            )
        else:
            row["flag"] = None
