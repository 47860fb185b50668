"""Judge qualification with controlled faults (CUBE_METHOD.md section 12).

Per judge, fault kind and dimension, and for the weighted total, over the
questions whose full-bound answer, its faulted copy and its control (a
harmless edit of the same answer, ``<kind>:control``) all have a score:
``delta_fault = score(original) - score(faulted)``, ``delta_control =
score(original) - score(control)`` and ``d = delta_fault - delta_control``.

- ``drop``/``p_value``: the mean ``delta_fault`` and the one-sided Wilcoxon
  signed-rank p of ``delta_fault > 0``
  (:func:`~cube_ray.aggregate._separation.wilcoxon_greater`, as section 10);
- ``control_drop``/``control_p``: the same of ``delta_control``;
  **false alarm** = ``control_drop >= min_drop`` and ``control_p < alpha``
  (the judge punishes a harmless edit);
- ``net_drop``/``net_p``: the same of ``d``; **detected** = ``net_drop >=
  min_drop`` and ``net_p < alpha`` (the fault costs more than a harmless edit
  of the same size and place).

Each drop carries a 95 % bootstrap interval over the questions (seeded
resamples, :func:`~cube_ray.aggregate._resample.resample_indices`). The
weighted total of a question is the weight-sum of its dimension scores (every
weighted dimension scored, else the question is left out of that figure).
Pure Polars and numpy, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from cube_ray import schema
from cube_ray.aggregate._resample import (
    DEFAULT_INTERVAL,
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    FloatArray,
    interval_of,
    resample_indices,
)
from cube_ray.aggregate._separation import MIN_NONZERO_PAIRS, wilcoxon_greater
from cube_ray.aggregate._weights import resolve_weights
from cube_ray.qualification import CONTROL_SUFFIX, STATUS_NO_CONTROL, is_control

__all__ = [
    "FALSE_ALARM",
    "FAULT_KIND",
    "MISSES_FAULTS",
    "NOT_QUALIFIED",
    "NO_CERTIFIED",
    "UNQUALIFIED",
    "UNTESTED",
    "QualificationInput",
    "QualificationResult",
    "false_alarms",
    "fault_detection",
    "fault_misses",
    "fixed_weights",
    "qualification_block",
    "qualify",
]

FAULT_KIND = "kind"
"""Column of a fault's kind (the ``system`` of a faulted answer's scores)."""
FIGURE = "figure"
"""Column: a dimension's name or ``weighted``."""
WEIGHTED = "weighted"
MISSES_FAULTS = "misses faults"
"""Flag of a judge that does not detect an expected fault kind on a dimension
(net of its control)."""
FALSE_ALARM = "punishes harmless edits"
"""Flag of a judge whose score drops after a kind's control (an edit that keeps
every fact): ``punishes harmless edits: <kind> control on <figure>``."""
CONFIDENCE = 0.95
"""Coverage of the drops' bootstrap intervals."""
_INTERVALS = ("drop_interval", "control_drop_interval", "net_drop_interval")
"""The keys of a test's intervals (``{low, high, half_width}`` each)."""
TOO_FEW_FAULTS = "too few faults"
"""Flag of an expected kind with fewer than ``MIN_NONZERO_PAIRS`` scored faults:
not tested (the sample's answers rarely allow that kind), so not a miss."""
UNQUALIFIED = (
    "misses faults: does not notice an expected fault kind on the weighted total "
    "(aggregate.require_qualification)"
)
"""Why a judge is left out of ``across_judges`` for its faults."""
NOT_QUALIFIED = (
    "not qualified in this run (qualification.judges), so it holds no "
    "certificate (aggregate.require_qualification)"
)
"""Why a judge that was not qualified is left out of ``across_judges``."""
UNTESTED = (
    "no certificate: too few faults with a control to test any expected kind "
    "(raise qualification.questions or the sample; aggregate.require_qualification)"
)
"""Why a qualified judge that could not be tested is left out."""
NO_CERTIFIED = (
    "no judge that separates the bounds holds a certificate "
    "(aggregate.require_qualification)"
)
"""Why a system has no headline when every separated judge lacks a certificate."""
_DELTA = "delta"
_STATUS_OK = schema.STATUS_OK


@dataclass(frozen=True)
class QualificationInput:
    """What the summary needs of a run's qualification (config ``qualification``)."""

    faults: pl.DataFrame
    """The qualification table: ``question_id``, ``kind``, ``status`` (``ok``
    for a built fault; otherwise skipped)."""
    scores: pl.DataFrame
    """The faulted answers' scores: a scores table whose ``system`` is the kind."""
    expected: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """Dimension -> the fault kinds it must detect (``dimensions[].detects``)."""
    min_drop: float = 0.5
    """Smallest mean drop (points) for a detection."""
    judges: Sequence[str] | None = None
    """The judges qualified (``qualification.judges``); None: every judge. The
    others hold no certificate."""
    certify_on: str = "weighted"
    """``weighted``: a judge that misses an expected kind on the weighted total
    is unqualified (the method's rule); ``dimensions``: one that misses a
    dimension's own expected kind (``qualification.certify_on``)."""


def _pairs(original: pl.DataFrame, faulted: pl.DataFrame) -> pl.DataFrame:
    """(judge, kind, question, dimension, delta) of scored original/faulted pairs."""
    key = [schema.QUESTION_ID, schema.JUDGE, schema.DIMENSION]
    orig = original.filter(pl.col(schema.SYSTEM).cast(pl.String) == schema.FULL).select(
        *[pl.col(c).cast(pl.String) for c in key],
        pl.col(schema.SCORE).cast(pl.Float64).alias("orig"),
    )
    fault = faulted.select(
        *[pl.col(c).cast(pl.String) for c in key],
        pl.col(schema.SYSTEM).cast(pl.String).alias(FAULT_KIND),
        pl.col(schema.SCORE).cast(pl.Float64).alias("fault"),
    )
    return (
        fault.join(orig, on=key, how="inner")
        .drop_nulls(["orig", "fault"])
        .with_columns((pl.col("orig") - pl.col("fault")).alias(_DELTA))
        .select(schema.JUDGE, FAULT_KIND, schema.QUESTION_ID, schema.DIMENSION, _DELTA)
    )


def _weighted(
    pairs: pl.DataFrame, weights: Mapping[str, Mapping[str, float]]
) -> pl.DataFrame:
    """Each question's weighted delta: ``sum_d w_d * delta_d`` over weighted dims."""
    rows = [(j, d, float(w)) for j, ws in weights.items() for d, w in ws.items()]
    w = pl.DataFrame(
        rows,
        schema={schema.JUDGE: pl.String, schema.DIMENSION: pl.String, "w": pl.Float64},
        orient="row",
    ).filter(pl.col("w") > 0)
    needed = w.group_by(schema.JUDGE).agg(pl.len().alias("needed"))
    return (
        pairs.join(w, on=[schema.JUDGE, schema.DIMENSION], how="inner")
        .group_by(schema.JUDGE, FAULT_KIND, schema.QUESTION_ID)
        .agg((pl.col("w") * pl.col(_DELTA)).sum().alias(_DELTA), pl.len().alias("k"))
        .join(needed, on=schema.JUDGE)
        .filter(pl.col("k") == pl.col("needed"))
        .select(
            schema.JUDGE,
            FAULT_KIND,
            schema.QUESTION_ID,
            pl.lit(WEIGHTED).alias(schema.DIMENSION),
            _DELTA,
        )
    )


def _interval(
    values: FloatArray, draws: np.ndarray[Any, Any] | None
) -> dict[str, float | None]:
    """The bootstrap interval of the mean of ``values`` (``draws``: positions)."""
    n = values.size
    if draws is None or n < 2:
        return {"low": None, "high": None, "half_width": None}
    mean = float(values.mean())
    reps = values[draws].mean(axis=1)
    jack = (values.sum() - values) / (n - 1)
    low, high = interval_of(
        reps, mean, jack, method=DEFAULT_INTERVAL, confidence=CONFIDENCE
    )
    if low is None or high is None:
        return {"low": None, "high": None, "half_width": None}
    return {"low": low, "high": high, "half_width": (high - low) / 2.0}


def _test(
    fault: FloatArray,
    control: FloatArray,
    *,
    min_drop: float,
    alpha: float,
    draws: np.ndarray[Any, Any] | None,
) -> dict[str, Any]:
    """The figures of one judge, kind and figure from its paired deltas."""
    net = fault - control
    drop, control_drop, net_drop = (float(x.mean()) for x in (fault, control, net))
    p, control_p, net_p = (wilcoxon_greater(x) for x in (fault, control, net))
    return {
        "n": int(fault.size),
        "drop": drop,
        "p_value": p,
        "control_drop": control_drop,
        "control_p": control_p,
        "net_drop": net_drop,
        "net_p": net_p,
        "false_alarm": control_drop >= min_drop and control_p < alpha,
        "detected": net_drop >= min_drop and net_p < alpha,
        "drop_interval": _interval(fault, draws),
        "control_drop_interval": _interval(control, draws),
        "net_drop_interval": _interval(net, draws),
    }


def _empty(skipped: int, no_control: int) -> dict[str, Any]:
    """A test with no scored pair: ``n = 0``, figures None, nothing found."""
    none = {"low": None, "high": None, "half_width": None}
    return {
        "n": 0,
        "skipped": skipped,
        "no_control": no_control,
        "drop": None,
        "p_value": None,
        "control_drop": None,
        "control_p": None,
        "net_drop": None,
        "net_p": None,
        "false_alarm": False,
        "detected": False,
        **{k: dict(none) for k in _INTERVALS},
    }


def _counts(faults: pl.DataFrame) -> dict[str, tuple[int, int]]:
    """Fault kind -> (pairs not built, of which faults with no control)."""
    kind = pl.col(FAULT_KIND).cast(pl.String)
    status = pl.col(schema.STATUS).cast(pl.String)
    table = (
        faults.filter(~kind.str.ends_with(CONTROL_SUFFIX))
        .group_by(kind)
        .agg(
            (status != _STATUS_OK).sum().alias("skipped"),
            (status == STATUS_NO_CONTROL).sum().alias("no_control"),
        )
    )
    return {
        str(r[FAULT_KIND]): (int(r["skipped"]), int(r["no_control"]))
        for r in table.iter_rows(named=True)
    }


def fault_detection(
    original: pl.DataFrame,
    faulted: pl.DataFrame,
    faults: pl.DataFrame,
    *,
    weights: Mapping[str, Mapping[str, float]],
    min_drop: float,
    alpha: float,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> list[dict[str, Any]]:
    """Per judge, fault kind and figure: the test of the fault net of its control.

    Args:
        original: Scores of the full-bound answers (rows of other systems
            are ignored).
        faulted: Scores of the faulted answers and of their controls
            (``system`` = the fault kind, or ``<kind>:control``).
        faults: The qualification table (``question_id``, ``kind``,
            ``status``); fault rows whose status is not ``ok`` count as
            skipped (``no_control``: built, but no control).
        weights: Judge -> dimension -> weight (summing to 1) of the weighted
            total.
        min_drop: Smallest mean drop for a detection (and a false alarm).
        alpha: Largest p-value for a detection (and a false alarm).
        resamples: Bootstrap resamples of the intervals.
        seed: Seed of the resamples.

    Returns:
        One dict per (judge, kind, figure) with a scored pair, sorted:
        ``judge``, ``kind``, ``figure`` (a dimension or ``weighted``), ``n``,
        ``skipped``, ``no_control``, ``drop``, ``p_value``, ``control_drop``,
        ``control_p``, ``net_drop``, ``net_p``, ``false_alarm``,
        ``detected`` and the three intervals (``drop_interval``,
        ``control_drop_interval``, ``net_drop_interval``).

    Examples:
        Eight questions; the judge scores the original 8, the faulted copy 5
        and the control 8 on relevance: a net drop of 3, every pair positive
        (p = 0.0039), no false alarm:

        >>> q = [f"q{i}" for i in range(8)]
        >>> base = {"question_id": q * 2, "judge": ["j"] * 16,
        ...         "dimension": ["relevance"] * 16}
        >>> original = pl.DataFrame({"question_id": q, "judge": ["j"] * 8,
        ...     "dimension": ["relevance"] * 8, "system": ["full"] * 8,
        ...     "score": [8.0] * 8})
        >>> faulted = pl.DataFrame({**base,
        ...     "system": ["number"] * 8 + ["number:control"] * 8,
        ...     "score": [5.0] * 8 + [8.0] * 8})
        >>> faults = pl.DataFrame({"question_id": q + ["q8"],
        ...                        "kind": ["number"] * 9,
        ...                        "status": ["ok"] * 8 + ["no_control"]})
        >>> out = fault_detection(original, faulted, faults,
        ...                       weights={"j": {"relevance": 1.0}},
        ...                       min_drop=0.5, alpha=0.05)
        >>> row = next(r for r in out if r["figure"] == "relevance")
        >>> row["n"], row["skipped"], row["no_control"], row["net_drop"]
        (8, 1, 1, 3.0)
        >>> round(row["net_p"], 4), row["detected"], row["false_alarm"]
        (0.0039, True, False)

        A judge that marks down any edit by 3 drops as much on the control: its
        fault drop is 3 but its net drop 0 (missed), and the control's drop is a
        false alarm:

        >>> any_edit = faulted.with_columns(pl.lit(5.0).alias("score"))
        >>> row = fault_detection(original, any_edit, faults,
        ...                       weights={"j": {"relevance": 1.0}},
        ...                       min_drop=0.5, alpha=0.05)[0]
        >>> row["drop"], row["net_drop"], row["detected"], row["false_alarm"]
        (3.0, 0.0, False, True)
    """
    pairs = _pairs(original, faulted)
    both = pl.concat([pairs, _weighted(pairs, weights)])
    kind = pl.col(FAULT_KIND)
    key = [schema.JUDGE, FAULT_KIND, schema.DIMENSION, schema.QUESTION_ID]
    fault = both.filter(~kind.str.ends_with(CONTROL_SUFFIX)).rename({_DELTA: "fault"})
    control = (
        both.filter(kind.str.ends_with(CONTROL_SUFFIX))
        .with_columns(kind.str.strip_suffix(CONTROL_SUFFIX))
        .rename({_DELTA: "control"})
    )
    joined = fault.join(control, on=key, how="inner").sort(key)
    counts = _counts(faults)
    draws: dict[int, np.ndarray[Any, Any]] = {}
    rows: list[dict[str, Any]] = []
    for (judge, k, fig), group in joined.group_by(
        schema.JUDGE, FAULT_KIND, schema.DIMENSION, maintain_order=True
    ):
        f = group.get_column("fault").to_numpy().astype(np.float64)
        c = group.get_column("control").to_numpy().astype(np.float64)
        n = f.size
        if n >= 2 and resamples > 0 and n not in draws:
            draws[n] = resample_indices(n, resamples, seed=seed)
        skipped, no_control = counts.get(str(k), (0, 0))
        rows.append(
            {
                schema.JUDGE: judge,
                FAULT_KIND: k,
                FIGURE: fig,
                **_test(f, c, min_drop=min_drop, alpha=alpha, draws=draws.get(n)),
                "skipped": skipped,
                "no_control": no_control,
            }
        )
    rows.sort(key=lambda r: (r[schema.JUDGE], r[FAULT_KIND], r[FIGURE]))
    return rows


_TEST_KEYS = (
    "n",
    "skipped",
    "no_control",
    "drop",
    "p_value",
    "control_drop",
    "control_p",
    "net_drop",
    "net_p",
    "false_alarm",
    "detected",
    *_INTERVALS,
)
"""The keys of one test, in the order of ``summary.json``."""


def qualification_block(
    detection: Sequence[Mapping[str, Any]],
    *,
    judges: Sequence[str],
    kinds: Sequence[str],
    figures: Sequence[str],
    skipped: Mapping[str, int],
    no_control: Mapping[str, int] | None = None,
) -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
    """``judge -> kind -> figure -> test`` (the keys of :func:`fault_detection`).

    A judge, kind and figure with no scored pair is ``n = 0``, its figures
    None, neither detected nor a false alarm.
    """
    lacking = no_control or {}
    out: dict[str, dict[str, dict[str, dict[str, Any]]]] = {
        j: {
            k: {
                f: _empty(int(skipped.get(k, 0)), int(lacking.get(k, 0)))
                for f in figures
            }
            for k in kinds
            if not is_control(k)
        }
        for j in judges
    }
    for row in detection:
        j, k, f = row[schema.JUDGE], row[FAULT_KIND], row[FIGURE]
        if j in out and k in out[j] and f in out[j][k]:
            out[j][k][f] = {key: row[key] for key in _TEST_KEYS}
    return out


def fault_misses(
    block: Mapping[str, Mapping[str, Mapping[str, Mapping[str, Any]]]],
    expected: Mapping[str, Sequence[str]],
    *,
    untested: bool = False,
) -> list[tuple[str, str, str]]:
    """(judge, kind, figure) of every expected detection a judge misses.

    ``expected``: dimension -> kinds; the weighted total is expected to detect
    every kind some dimension expects. Kinds not built in the run are ignored,
    and so are tests of fewer than :data:`MIN_NONZERO_PAIRS` faults (the
    Wilcoxon test cannot say anything): ``untested=True`` lists those instead.

    >>> ok, miss = {"n": 8, "detected": True}, {"n": 8, "detected": False}
    >>> block = {"j": {"number": {"relevance": miss, "weighted": ok},
    ...                "omission": {"relevance": {"n": 2, "detected": False}}}}
    >>> fault_misses(block, {"relevance": ["number", "omission"]})
    [('j', 'number', 'relevance')]
    >>> fault_misses(block, {"relevance": ["number", "omission"]}, untested=True)
    [('j', 'omission', 'relevance')]
    """
    weighted_kinds = sorted({k for kinds in expected.values() for k in kinds})
    out = []
    for judge, per_kind in block.items():
        for fig, kinds in [*expected.items(), (WEIGHTED, weighted_kinds)]:
            for kind in kinds:
                test = per_kind.get(kind, {}).get(fig)
                if test is None or test["detected"]:
                    continue
                if (test["n"] < MIN_NONZERO_PAIRS) == untested:
                    out.append((judge, kind, fig))
    return out


@dataclass(frozen=True)
class QualificationResult:
    """The summary's part of a run's qualification."""

    block: dict[str, dict[str, dict[str, dict[str, Any]]]]
    """``judge -> kind -> figure -> test`` (:func:`fault_detection`'s keys)."""
    flags: list[dict[str, Any]]
    """One ``misses faults: <kind> on <figure>`` flag per missed detection (net
    of the control), one ``punishes harmless edits: <kind> control on
    <figure>`` per false alarm, one ``too few faults: ...`` per expected test
    with too few scored pairs."""
    unqualified: frozenset[str]
    """Judges that miss an expected kind on the weighted total (on a dimension
    with ``certify_on: dimensions``)."""
    uncertified: frozenset[str] = frozenset()
    """Judges not qualified in the run (``qualification.judges``): no
    certificate."""
    untested: frozenset[str] = frozenset()
    """Qualified judges none of whose expected kinds could be tested (too few
    faults with a control): no certificate either."""


def fixed_weights(
    spec: str | Mapping[str, Any], judges: Sequence[str], dimensions: Sequence[str]
) -> dict[str, dict[str, float]]:
    """Judge -> dimension -> weight of the qualification's weighted total.

    The run's fixed weights (one map, or one per judge; read by
    :func:`~cube_ray.aggregate._weights.resolve_weights`), rescaled to sum to 1;
    equal weights otherwise (``pearson`` weights belong to a system, and a
    faulted answer is none).

    >>> fixed_weights("pearson", ["j"], ["a", "b"])
    {'j': {'a': 0.5, 'b': 0.5}}
    >>> fixed_weights({"a": 3, "b": 1}, ["j"], ["a", "b"])
    {'j': {'a': 0.75, 'b': 0.25}}
    """
    resolved = resolve_weights(
        "equal" if spec == "pearson" else spec, judges, dimensions
    )
    assert resolved.fixed is not None
    return resolved.fixed


def qualify(
    scores: pl.DataFrame,
    qualification: QualificationInput,
    *,
    judges: Sequence[str],
    dimensions: Sequence[str],
    weights: str | Mapping[str, Any],
    alpha: float,
) -> QualificationResult:
    """The summary's qualification block, its flags and the unqualified judges."""
    faults = qualification.faults
    kinds = sorted(
        k
        for k in set(faults.get_column(FAULT_KIND).cast(pl.String).unique().to_list())
        if not is_control(k)
    )
    chosen = qualification.judges
    qualified = [j for j in judges if chosen is None or j in chosen]
    detection = fault_detection(
        scores.filter(pl.col(schema.JUDGE).cast(pl.String).is_in(qualified)),
        qualification.scores,
        faults,
        weights=fixed_weights(weights, judges, dimensions),
        min_drop=qualification.min_drop,
        alpha=alpha,
    )
    counts = _counts(faults)
    block = qualification_block(
        detection,
        judges=qualified,
        kinds=kinds,
        figures=[*dimensions, WEIGHTED],
        skipped={k: counts.get(k, (0, 0))[0] for k in kinds},
        no_control={k: counts.get(k, (0, 0))[1] for k in kinds},
    )
    expected = {d: list(qualification.expected.get(d, ())) for d in dimensions}
    flags = []
    unqualified = set()
    for judge, kind, fig in fault_misses(block, expected):
        test = block[judge][kind][fig]
        flags.append(
            {
                "flag": f"{MISSES_FAULTS}: {kind} on {fig}",
                "judge": judge,
                "figure": f"qualification.{kind}.{fig}",
                "net_drop": test["net_drop"],
                "net_p": test["net_p"],
                "drop": test["drop"],
                "p_value": test["p_value"],
            }
        )
        if (fig == WEIGHTED) == (qualification.certify_on == "weighted"):
            unqualified.add(judge)
    for judge, kind, fig in false_alarms(block):
        test = block[judge][kind][fig]
        flags.append(
            {
                "flag": f"{FALSE_ALARM}: {kind} control on {fig}",
                "judge": judge,
                "figure": f"qualification.{kind}.{fig}",
                "control_drop": test["control_drop"],
                "control_p": test["control_p"],
            }
        )
    for judge, kind, fig in fault_misses(block, expected, untested=True):
        flags.append(
            {
                "flag": f"{TOO_FEW_FAULTS}: {kind} on {fig}",
                "judge": judge,
                "figure": f"qualification.{kind}.{fig}",
                "n": block[judge][kind][fig]["n"],
            }
        )
    return QualificationResult(
        block,
        flags,
        frozenset(unqualified),
        frozenset(j for j in judges if j not in qualified),
        frozenset(_untested(block, expected, qualification.certify_on)),
    )


def _untested(
    block: Mapping[str, Mapping[str, Mapping[str, Mapping[str, Any]]]],
    expected: Mapping[str, Sequence[str]],
    certify_on: str,
) -> list[str]:
    """Judges with no detected expected kind on the figures that certify.

    >>> hit, few = {"n": 8, "detected": True}, {"n": 2, "detected": False}
    >>> block = {"a": {"number": {"weighted": hit}}, "b": {"number": {"weighted": few}}}
    >>> _untested(block, {"relevance": ["number"]}, "weighted")
    ['b']
    """
    if certify_on == "weighted":
        wanted = {WEIGHTED: sorted({k for ks in expected.values() for k in ks})}
    else:
        wanted = {d: list(ks) for d, ks in expected.items()}
    return [
        judge
        for judge, per_kind in block.items()
        if not any(
            per_kind.get(kind, {}).get(fig, {}).get("detected")
            for fig, kinds in wanted.items()
            for kind in kinds
        )
    ]


def false_alarms(
    block: Mapping[str, Mapping[str, Mapping[str, Mapping[str, Any]]]],
) -> list[tuple[str, str, str]]:
    """(judge, kind, figure) of every control the judge punished (a false alarm).

    >>> alarm, calm = {"false_alarm": True}, {"false_alarm": False}
    >>> false_alarms({"j": {"number": {"relevance": alarm, "weighted": calm}}})
    [('j', 'number', 'relevance')]
    """
    return [
        (judge, kind, fig)
        for judge, per_kind in block.items()
        for kind, per_fig in per_kind.items()
        for fig, test in per_fig.items()
        if test.get("false_alarm")
    ]
