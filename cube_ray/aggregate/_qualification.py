"""Judge qualification with controlled faults (CUBE_METHOD.md section 12).

Per judge, fault kind and dimension, and for the weighted total: the paired
differences ``delta_q = score(original) - score(faulted)`` of the questions
whose full-bound answer and its faulted copy both have a score; ``drop`` = mean
delta; ``p`` = the one-sided Wilcoxon signed-rank p of ``delta > 0``
(:func:`~cube_ray.aggregate._separation.wilcoxon_greater`, as section 10);
**detected** = ``drop >= min_drop`` and ``p < alpha``. The weighted total of a
question is the weight-sum of its dimension scores (every weighted dimension
scored, else the question is left out of that figure). Pure Polars, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from cube_ray import schema
from cube_ray.aggregate._separation import MIN_NONZERO_PAIRS, wilcoxon_greater
from cube_ray.aggregate._weights import resolve_weights

__all__ = [
    "FAULT_KIND",
    "MISSES_FAULTS",
    "UNQUALIFIED",
    "QualificationInput",
    "QualificationResult",
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
"""Flag of a judge that does not detect an expected fault kind on a dimension."""
TOO_FEW_FAULTS = "too few faults"
"""Flag of an expected kind with fewer than ``MIN_NONZERO_PAIRS`` scored faults:
not tested (the sample's answers rarely allow that kind), so not a miss."""
UNQUALIFIED = (
    "misses faults: does not notice an expected fault kind on the weighted total "
    "(aggregate.require_qualification)"
)
"""Why a judge is left out of ``across_judges`` for its faults."""
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


def fault_detection(
    original: pl.DataFrame,
    faulted: pl.DataFrame,
    faults: pl.DataFrame,
    *,
    weights: Mapping[str, Mapping[str, float]],
    min_drop: float,
    alpha: float,
) -> pl.DataFrame:
    """Per judge, kind and figure: n, skipped, drop, p_value, detected.

    Args:
        original: Scores of the full-bound answers (rows of other systems
            are ignored).
        faulted: Scores of the faulted answers (``system`` = fault kind).
        faults: The qualification table (``question_id``, ``kind``,
            ``status``); rows whose status is not ``ok`` count as skipped.
        weights: Judge -> dimension -> weight (summing to 1) of the weighted
            total.
        min_drop: Smallest mean drop for a detection.
        alpha: Largest p-value for a detection.

    Returns:
        Columns ``judge``, ``kind``, ``figure`` (a dimension or ``weighted``),
        ``n``, ``skipped``, ``drop``, ``p_value``, ``detected``.

    Examples:
        Eight questions; the judge scores the original 8 and the faulted copy
        5 on relevance (a drop of 3, every pair positive: p = 0.0039):

        >>> q = [f"q{i}" for i in range(8)]
        >>> base = {"question_id": q, "judge": ["j"] * 8,
        ...         "dimension": ["relevance"] * 8}
        >>> original = pl.DataFrame({**base, "system": ["full"] * 8,
        ...                          "score": [8.0] * 8})
        >>> faulted = pl.DataFrame({**base, "system": ["number"] * 8,
        ...                         "score": [5.0] * 8})
        >>> faults = pl.DataFrame({"question_id": q + ["q8"],
        ...                        "kind": ["number"] * 9,
        ...                        "status": ["ok"] * 8 + ["skipped"]})
        >>> out = fault_detection(original, faulted, faults,
        ...                       weights={"j": {"relevance": 1.0}},
        ...                       min_drop=0.5, alpha=0.05)
        >>> row = out.filter(pl.col("figure") == "relevance").row(0, named=True)
        >>> row["n"], row["skipped"], row["drop"], round(row["p_value"], 4)
        (8, 1, 3.0, 0.0039)
        >>> row["detected"]
        True
    """
    pairs = _pairs(original, faulted)
    both = pl.concat([pairs, _weighted(pairs, weights)])
    hist = (
        both.group_by(schema.JUDGE, FAULT_KIND, schema.DIMENSION, _DELTA)
        .agg(pl.len().alias("count"))
        .sort(schema.JUDGE, FAULT_KIND, schema.DIMENSION, _DELTA)
    )
    skipped = {
        row[FAULT_KIND]: row["skipped"]
        for row in faults.group_by(pl.col(FAULT_KIND).cast(pl.String))
        .agg(
            (pl.col(schema.STATUS).cast(pl.String) != _STATUS_OK).sum().alias("skipped")
        )
        .iter_rows(named=True)
    }
    rows: list[dict[str, Any]] = []
    for (judge, kind, fig), group in hist.group_by(
        schema.JUDGE, FAULT_KIND, schema.DIMENSION, maintain_order=True
    ):
        values = group.get_column(_DELTA).to_numpy()
        counts = group.get_column("count").to_numpy()
        n = int(counts.sum())
        drop = float((values * counts).sum() / n)
        p = wilcoxon_greater(values, counts)
        rows.append(
            {
                schema.JUDGE: judge,
                FAULT_KIND: kind,
                FIGURE: fig,
                "n": n,
                "skipped": int(skipped.get(str(kind), 0)),
                "drop": drop,
                "p_value": p,
                "detected": drop >= min_drop and p < alpha,
            }
        )
    out_schema = {
        schema.JUDGE: pl.String,
        FAULT_KIND: pl.String,
        FIGURE: pl.String,
        "n": pl.Int64,
        "skipped": pl.Int64,
        "drop": pl.Float64,
        "p_value": pl.Float64,
        "detected": pl.Boolean,
    }
    return pl.DataFrame(rows, schema=out_schema).sort(schema.JUDGE, FAULT_KIND, FIGURE)


def qualification_block(
    detection: pl.DataFrame,
    *,
    judges: Sequence[str],
    kinds: Sequence[str],
    figures: Sequence[str],
    skipped: Mapping[str, int],
) -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
    """``judge -> kind -> figure -> {n, skipped, drop, p_value, detected}``.

    A judge, kind and figure with no scored pair is ``n = 0``, ``drop`` and
    ``p_value`` None, not detected.
    """
    out: dict[str, dict[str, dict[str, dict[str, Any]]]] = {
        j: {
            k: {
                f: {
                    "n": 0,
                    "skipped": int(skipped.get(k, 0)),
                    "drop": None,
                    "p_value": None,
                    "detected": False,
                }
                for f in figures
            }
            for k in kinds
        }
        for j in judges
    }
    for row in detection.iter_rows(named=True):
        j, k, f = row[schema.JUDGE], row[FAULT_KIND], row[FIGURE]
        if j in out and k in out[j] and f in out[j][k]:
            out[j][k][f] = {
                "n": row["n"],
                "skipped": row["skipped"],
                "drop": row["drop"],
                "p_value": row["p_value"],
                "detected": row["detected"],
            }
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
    """``judge -> kind -> figure -> {n, skipped, drop, p_value, detected}``."""
    flags: list[dict[str, Any]]
    """One ``misses faults: <kind> on <figure>`` flag per missed detection, one
    ``too few faults: ...`` per expected test with too few faulted answers."""
    unqualified: frozenset[str]
    """Judges that miss an expected kind on the weighted total."""


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
        set(faults.get_column(FAULT_KIND).cast(pl.String).unique().to_list())
    )
    detection = fault_detection(
        scores,
        qualification.scores,
        faults,
        weights=fixed_weights(weights, judges, dimensions),
        min_drop=qualification.min_drop,
        alpha=alpha,
    )
    skipped = {
        k: int(
            faults.filter(
                (pl.col(FAULT_KIND).cast(pl.String) == k)
                & (pl.col(schema.STATUS).cast(pl.String) != _STATUS_OK)
            ).height
        )
        for k in kinds
    }
    block = qualification_block(
        detection,
        judges=judges,
        kinds=kinds,
        figures=[*dimensions, WEIGHTED],
        skipped=skipped,
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
                "drop": test["drop"],
                "p_value": test["p_value"],
            }
        )
        if fig == WEIGHTED:
            unqualified.add(judge)
    for judge, kind, fig in fault_misses(block, expected, untested=True):
        flags.append(
            {
                "flag": f"{TOO_FEW_FAULTS}: {kind} on {fig}",
                "judge": judge,
                "figure": f"qualification.{kind}.{fig}",
                "n": block[judge][kind][fig]["n"],
            }
        )
    return QualificationResult(block, flags, frozenset(unqualified))
