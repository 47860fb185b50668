"""Which judges separate the bounds, on the study's score rows (section 10).

The tests themselves (Wilcoxon on histograms, the separation rule) are in
:mod:`cube_ray.aggregate._separation`; here they are run for every judge,
system and figure of one :class:`~cube_ray.aggregate._passes.Study`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from cube_ray import schema
from cube_ray.aggregate._frames import (
    FIGURE,
    UNAVAILABLE,
    VARIANT,
    WEIGHTED,
    finite,
)
from cube_ray.aggregate._math import COUNT, WEIGHT
from cube_ray.aggregate._model import BOUNDS_NOT_SEPARATED
from cube_ray.aggregate._passes import Study
from cube_ray.aggregate._separation import (
    CODE_SPAN,
    DELTA,
    JUDGE_SPAN,
    NOT_SEPARATED,
    PAIR_KEY,
    QUESTION_SPAN,
    PairCodes,
    packed_key,
    paired_differences,
    separated,
    wilcoxon_greater,
)

Separation = Mapping[tuple[str, str, str], Mapping[str, Any]]
"""``(judge, system, figure) -> {gap, p_value, n_pairs, separated}``."""


def _aligned_totals(
    blocks: Mapping[int, pl.DataFrame], weights: Mapping[int, float]
) -> dict[int, pl.Series]:
    """Weighted paired differences of the judges whose blocks are aligned.

    Args:
        blocks: ``pair_key // QUESTION_SPAN`` code -> that (judge, dimension)'s
            ``pair_key`` and ``delta`` columns, in table order.
        weights: Codes of the positive-weight (judge, dimension) pairs -> weight.

    Returns:
        Judge code -> ``sum_d w_d * delta_d`` per question, for each judge whose
        positive-weight blocks all list the same questions in the same order
        (the others are left to the grouping path).

    Examples:
        >>> key = [5, 6]  # questions 5 and 6 of judge 0
        >>> blocks = {
        ...     0: pl.DataFrame({PAIR_KEY: key, DELTA: [1.0, 2.0]}),
        ...     CODE_SPAN: pl.DataFrame(
        ...         {PAIR_KEY: [CODE_SPAN * QUESTION_SPAN + q for q in key],
        ...          DELTA: [3.0, 0.0]}),
        ... }
        >>> _aligned_totals(blocks, {0: 0.5, CODE_SPAN: 0.5})[0].to_list()
        [2.0, 1.0]
    """
    by_judge: dict[int, list[int]] = {}
    for code in weights:
        by_judge.setdefault(code % CODE_SPAN, []).append(code)
    out: dict[int, pl.Series] = {}
    for judge, codes in by_judge.items():
        if any(c not in blocks for c in codes):
            continue
        first = blocks[codes[0]].get_column(PAIR_KEY) % QUESTION_SPAN
        if not all(
            blocks[c].height == first.len()
            and (blocks[c].get_column(PAIR_KEY) % QUESTION_SPAN).equals(first)
            for c in codes[1:]
        ):
            continue
        ordered = sorted(codes)
        total = weights[ordered[0]] * blocks[ordered[0]].get_column(DELTA)
        for c in ordered[1:]:
            total = total + weights[c] * blocks[c].get_column(DELTA)
        out[judge] = total.alias(DELTA)
    return out


def _paired_histograms(
    study: Study, weights: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Histograms of the paired differences ``full - zero``.

    Per dimension: ``[variant,] judge, dimension, delta, count``; for the
    weighted total (questions scored on every dimension of positive
    weight): ``variant, judge, delta, count``. ``variant`` is there only
    with ``bounds_on: paired`` for the per-dimension histogram (with
    ``all`` every variant shares the same pairs).
    """
    passes, engine = study.passes, study.inputs.engine
    sc_schema = passes.scores.collect_schema()
    judge_dim = [schema.JUDGE, schema.DIMENSION]
    bounds = passes.scores.filter(pl.col(schema.SYSTEM).is_in(schema.BOUND_SYSTEMS))
    if passes.pair_codes is not None:
        return _packed_histograms(study, bounds, weights, passes.pair_codes)
    pairs = paired_differences(bounds, by=judge_dim, engine=engine).lazy()
    variant: list[str] = []
    if study.options.bounds_on == "paired":
        pairs = pairs.join(passes.hits, on=schema.QUESTION_ID, how="inner")
        variant = [VARIANT]
    per_dim = pairs.group_by([*variant, *judge_dim, DELTA]).agg(pl.len().alias(COUNT))
    positive = weights.lazy().filter(pl.col(WEIGHT) > 0)
    w = positive.select(
        pl.col(schema.SYSTEM).alias(VARIANT),
        *(pl.col(c).cast(sc_schema[c]) for c in judge_dim),
        pl.col(WEIGHT),
    )
    n_positive = w.group_by(VARIANT, schema.JUDGE).agg(pl.len().alias("_dims"))
    total = (
        pairs.join(w, on=[*variant, *judge_dim], how="inner")
        .group_by(VARIANT, schema.JUDGE, schema.QUESTION_ID)
        .agg((pl.col(WEIGHT) * pl.col(DELTA)).sum().alias(DELTA), pl.len())
        .join(n_positive, on=[VARIANT, schema.JUDGE], how="inner")
        .filter(pl.col("len") == pl.col("_dims"))
        # Sums of weighted differences in any order: round away the float
        # noise so that equal totals tie (ranks only need the order).
        .group_by(VARIANT, schema.JUDGE, pl.col(DELTA).round(10))
        .agg(pl.len().alias(COUNT))
    )
    frames = pl.collect_all([per_dim, total], engine=engine)
    return tuple(  # type: ignore[return-value]
        f.with_columns(pl.col(c).cast(pl.String) for c in judge_dim if c in f.columns)
        for f in frames
    )


def _packed_histograms(
    study: Study, bounds: pl.LazyFrame, weights: pl.DataFrame, codes: PairCodes
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """:func:`_paired_histograms` on one packed integer key (fast path)."""
    engine = study.inputs.engine
    pairs = paired_differences(bounds, by=[packed_key()], engine=engine)
    jd = pl.col(PAIR_KEY) // QUESTION_SPAN
    question = pl.col(PAIR_KEY) % QUESTION_SPAN
    variant: list[pl.Expr] = []
    if study.options.bounds_on == "paired":
        hits = study.passes.hits.select(
            pl.col(schema.QUESTION_ID).cast(pl.UInt64).alias("_q"), VARIANT
        )
        pairs = (
            pairs.lazy()
            .with_columns(question.alias("_q"))
            .join(hits, on="_q", how="inner")
            .drop("_q")
            .collect(engine=engine)
        )
        variant = [pl.col(VARIANT)]
    per_dim = (
        pairs.lazy()
        .group_by(*variant, jd.alias("_jd"), DELTA)
        .agg(pl.len().alias(COUNT))
        .collect()
    )
    per_dim = per_dim.with_columns(
        codes.judge_of(pl.col("_jd")).alias(schema.JUDGE),
        codes.dimension_of(pl.col("_jd")).alias(schema.DIMENSION),
    ).drop("_jd")
    # Blocks of one (judge, dimension) each, in table order: when a judge's
    # blocks list the same questions in the same order (a study written
    # set by set and dimension by dimension), its weighted differences are
    # a weighted sum of aligned columns, with no grouping by question.
    blocks = (
        {}
        if variant
        else {
            int(k[0]): frame
            for k, frame in pairs.with_columns(jd.alias("_jd"))
            .partition_by("_jd", as_dict=True, include_key=False)
            .items()
        }
    )
    totals = []
    for system in study.systems:
        w = weights.filter((pl.col(schema.SYSTEM) == system) & (pl.col(WEIGHT) > 0))
        by_code = {
            codes.code(row[schema.JUDGE], row[schema.DIMENSION]): row[WEIGHT]
            for row in w.iter_rows(named=True)
        }
        n_dims = w.group_by(schema.JUDGE).len()
        n_by_judge = {
            codes.judges[j]: n for j, n in n_dims.iter_rows() if j in codes.judges
        }
        for judge, total_delta in _aligned_totals(blocks, by_code).items():
            totals.append(
                total_delta.round(10)
                .value_counts(name=COUNT)
                .select(
                    pl.lit(system).alias(VARIANT),
                    codes.judge_of(pl.lit(judge)).alias(schema.JUDGE),
                    pl.col(total_delta.name).alias(DELTA),
                    pl.col(COUNT).cast(pl.UInt32),
                )
            )
            by_code = {c: v for c, v in by_code.items() if c % CODE_SPAN != judge}
        rows = pairs.lazy()
        if variant:
            rows = rows.filter(pl.col(VARIANT) == system)
        total = (
            rows.filter(jd.is_in(list(by_code)))
            .select(
                (pl.col(PAIR_KEY) % JUDGE_SPAN).alias("_jq"),
                (
                    jd.replace_strict(by_code, return_dtype=pl.Float64) * pl.col(DELTA)
                ).alias(DELTA),
            )
            .group_by("_jq")
            .agg(pl.col(DELTA).sum(), pl.len())
            .with_columns((pl.col("_jq") // QUESTION_SPAN).alias("_j"))
            .filter(
                pl.col("len")
                == pl.col("_j").replace_strict(
                    n_by_judge, default=-1, return_dtype=pl.Int64
                )
            )
            .group_by("_j", pl.col(DELTA).round(10))
            .agg(pl.len().alias(COUNT))
            .collect()
        )
        totals.append(
            total.select(
                pl.lit(system).alias(VARIANT),
                codes.judge_of(pl.col("_j")).alias(schema.JUDGE),
                DELTA,
                pl.col(COUNT).cast(pl.UInt32),
            )
        )
    return per_dim, pl.concat(totals)


def _tests(frame: pl.DataFrame, keys: list[str]) -> dict[Any, tuple[float, int]]:
    """Per group of ``keys``: the Wilcoxon p-value and number of pairs."""
    out: dict[Any, tuple[float, int]] = {}
    for key, group in frame.partition_by(keys, as_dict=True).items():
        counts = group.get_column(COUNT).to_numpy()
        p = wilcoxon_greater(group.get_column(DELTA).to_numpy(), counts)
        out[key] = (p, int(counts.sum()))
    return out


def separation(
    study: Study, weights: pl.DataFrame, wide: pl.DataFrame
) -> dict[tuple[str, str, str], dict[str, Any]]:
    """``(judge, system, figure) -> {gap, p_value, n_pairs, separated}``.

    ``gap`` is the section 7 denominator ``full - zero`` of the trimmed
    means (``wide``); the p-value is the one-sided Wilcoxon signed-rank test
    of the paired differences.
    """
    per_dim, total = _paired_histograms(study, weights)
    tests: dict[tuple[str, str, str], tuple[float, int]] = {}
    if VARIANT in per_dim.columns:
        for (s, j, d), value in _tests(
            per_dim, [VARIANT, schema.JUDGE, schema.DIMENSION]
        ).items():
            tests[(str(j), str(s), str(d))] = value
    else:
        for (j, d), value in _tests(per_dim, [schema.JUDGE, schema.DIMENSION]).items():
            for s in study.systems:
                tests[(str(j), s, str(d))] = value
    for (s, j), value in _tests(total, [VARIANT, schema.JUDGE]).items():
        tests[(str(j), str(s), WEIGHTED)] = value

    opts = study.options
    result: dict[tuple[str, str, str], dict[str, Any]] = {}
    for row in wide.iter_rows(named=True):
        key = (row[schema.JUDGE], row[schema.SYSTEM], row[FIGURE])
        z, f = row["zero"], row["full"]
        gap = finite(f - z) if z is not None and f is not None else None
        p, n = tests.get(key, (1.0, 0))
        result[key] = {
            "gap": gap,
            "p_value": p,
            "n_pairs": n,
            "separated": separated(gap, p, min_gap=opts.min_gap, alpha=opts.alpha),
        }
    return result


def used_judges(study: Study, tests: Separation) -> dict[str, list[str]]:
    """Per system the judges whose figures enter ``across_judges``."""
    return {
        s: [
            j
            for j in study.judges
            if not study.options.require_separation
            or tests[(j, s, WEIGHTED)]["separated"]
        ]
        for s in study.systems
    }


def separation_flags(study: Study, tests: Separation) -> list[dict[str, Any]]:
    """A flag per figure whose bounds are not separated, per system with outages."""
    flags: list[dict[str, Any]] = [
        {
            "flag": NOT_SEPARATED,
            "judge": j,
            "system": s,
            "figure": f"bound_separation.{fig}",
            "gap": test["gap"],
            "p_value": test["p_value"],
        }
        for (j, s, fig), test in tests.items()
        if not test["separated"]
    ]
    answers = study.answers
    flags.extend(
        {
            "flag": UNAVAILABLE,
            "system": system,
            "count": n,
            "share": n / answers.answer_rows[system],
        }
        for system, n in answers.unavailable.items()
        if n
    )
    return flags


def why_excluded(study: Study, test: Mapping[str, Any]) -> dict[str, Any]:
    """Why a judge's bounds are not separated: a reason (code, words, numbers)."""
    gap, p = test["gap"], test["p_value"]
    opts = study.options
    numbers = {
        "code": BOUNDS_NOT_SEPARATED,
        "gap": gap,
        "p_value": p,
        "n_pairs": test["n_pairs"],
        "min_gap": opts.min_gap,
        "alpha": opts.alpha,
    }
    if gap is None:
        return {
            **numbers,
            "text": f"{NOT_SEPARATED}: its zero or full bound has no scores to"
            " compare, so its scores cannot be placed between the bounds",
        }
    reasons = []
    if gap < opts.min_gap:
        reasons.append(
            f"answers written with the gold document scored only {gap:.2f}"
            f" points above answers written with no document (at least"
            f" {opts.min_gap:g} needed)"
        )
    if p >= opts.alpha:
        reasons.append(
            f"the difference is not consistent across questions (Wilcoxon"
            f" p = {p:.2g}, below {opts.alpha:g} needed, {test['n_pairs']}"
            " questions)"
        )
    return {**numbers, "text": f"{NOT_SEPARATED}: " + "; ".join(reasons)}
