"""Sections 5 to 8 once: weights, weighted totals, normalisation, CuBE.

:func:`replicate_figures` is the one kernel of sections 6 to 8. It reads each
replicate's correlations, trimmed means and recall, keyed by integer codes
(``_b`` the replicate; ``_s``, ``_j``, ``_d`` positions in the systems,
judges and dimensions; ``_set`` 0 zero, 1 full, 2 the system under test; the
weighted total is dimension code ``D``), and computes every replicate in one
grouped pass. The bootstrap (:mod:`cube_ray.aggregate._bootstrap`) feeds it
the replicates of its resamples; the summary (:func:`study_figures`) feeds it
the passes over its score rows as replicate zero and reads the figures back
with their names. The weights setting is read by
:func:`~cube_ray.aggregate._weights.resolve_weights`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from cube_ray import schema
from cube_ray.aggregate._frames import (
    CUBE,
    DEGENERATE,
    FIGURE,
    MIN_SPAN,
    SET,
    VARIANT,
    WEIGHTED,
)
from cube_ray.aggregate._math import (
    FALLBACK,
    N_QUESTIONS,
    N_RETRIEVED,
    RECALL,
    TRIMMED_MEAN,
    WEIGHT,
    N,
    R,
    cross_judge,
    normalise,
    pearson_weights,
    recall_at_k,
    weighted_totals,
)
from cube_ray.aggregate._passes import Study
from cube_ray.aggregate._replicate_rows import (
    DCODE,
    JCODE,
    REP,
    SCODE,
    SETCODE,
    code_grid,
)
from cube_ray.aggregate._weights import resolve_weights

MISSING_SCORES_TEXT = "missing scores"
"""Reason of a normalised figure without one of its three trimmed means."""

SET_NAMES = ("zero", "full", "rag")
"""The sets by set code: the two bounds, then the system under test."""

FixedWeights = Mapping[str, Mapping[str, Mapping[str, float | None]]]
"""``judge -> system -> dimension -> weight`` as recorded in ``summary.json``."""


@dataclass(frozen=True)
class Sizes:
    """How many systems, judges and dimensions the codes run over."""

    systems: int
    judges: int
    dimensions: int


@dataclass(frozen=True)
class ReplicateFigures:
    """Sections 6 to 8 of every replicate, keyed by codes (Int64)."""

    weights: pl.DataFrame
    """``_b, _s, _j, _d, [n,] r, weight, fallback``: every code."""
    trimmed: pl.DataFrame
    """``_b, _s, _j, _set, _d, [n,] trimmed_mean``: every code (null: none)."""
    figures: pl.DataFrame
    """``_b, _s, _j, _set, _d, trimmed_mean``; ``_d = D`` the weighted total."""
    norm: pl.DataFrame
    """``_b, _s, _j, _d, 0, 1, 2`` (the sets' trimmed means) and ``normalized``."""
    cube: pl.DataFrame
    """The weighted rows of ``norm`` with ``recall`` and ``cube``."""


def fixed_weight_rows(
    weights: FixedWeights,
    judges: Sequence[str],
    systems: Sequence[str],
    dimensions: Sequence[str],
) -> pl.DataFrame:
    """``_s, _j, _d, weight`` (Int64 codes) of fixed weights, as given.

    A judge or system ``weights`` lacks gets equal weights; a missing
    dimension weighs 0.

    >>> fixed_weight_rows({"j": {"s": {"a": 0.25, "b": 0.75}}}, ["j"], ["s"],
    ...                   ["a", "b"]).get_column("weight").to_list()
    [0.25, 0.75]
    """
    nd = len(dimensions)
    rows = []
    for si, system in enumerate(systems):
        for ji, judge in enumerate(judges):
            table = weights.get(judge, {}).get(system)
            for di, d in enumerate(dimensions):
                if table is None:
                    w = 1.0 / nd
                else:
                    value = table.get(d)
                    w = 0.0 if value is None else float(value)
                rows.append((si, ji, di, w))
    return pl.DataFrame(
        rows,
        schema={SCODE: pl.Int64, JCODE: pl.Int64, DCODE: pl.Int64, WEIGHT: pl.Float64},
        orient="row",
    )


def replicate_figures(
    corr: pl.DataFrame,
    tm_rag: pl.DataFrame,
    tm_bounds: pl.DataFrame,
    recall: pl.DataFrame,
    *,
    replicates: int,
    sizes: Sizes,
    fixed: pl.DataFrame | None,
    paired: bool,
) -> ReplicateFigures:
    """Weights, weighted totals, normalisation and CuBE of every replicate.

    Args:
        corr: ``_b, _s, _j, _d, [n,] r``: Pearson r(rank_score, score).
        tm_rag: ``_b, _s, _j, _d, [n,] trimmed_mean`` of the systems under test.
        tm_bounds: ``_b, _set, [_s,] _j, _d, [n,] trimmed_mean`` of the bounds
            (``_s`` the system whose retrieved questions they use, when
            ``paired``; otherwise every system shares them).
        recall: ``_b, _s, recall``.
        replicates: The number of replicates ``B`` (codes ``0 .. B-1``).
        sizes: The number of systems, judges and dimensions.
        fixed: ``_s, _j, _d, weight`` of fixed weights; None: Pearson weights
            per replicate, judge and system.
        paired: Whether the bounds are per system (``bounds_on: paired``).

    Returns:
        The figures of every replicate.

    Examples:
        One replicate, one system, judge and dimension: zero 4, full 8, the
        system 6.5 with recall 2/3 (the example of ``summarize``).

        >>> at = {REP: [0], SCODE: [0], JCODE: [0], DCODE: [0]}
        >>> figs = replicate_figures(
        ...     pl.DataFrame({**at, R: [0.9]}),
        ...     pl.DataFrame({**at, TRIMMED_MEAN: [6.5]}),
        ...     pl.DataFrame({REP: [0, 0], SETCODE: [0, 1], JCODE: [0, 0],
        ...                   DCODE: [0, 0], TRIMMED_MEAN: [4.0, 8.0]}),
        ...     pl.DataFrame({REP: [0], SCODE: [0], "recall": [2 / 3]}),
        ...     replicates=1, sizes=Sizes(1, 1, 1), fixed=None, paired=False)
        >>> figs.cube.select("normalized", "cube").row(0)
        (62.5, 41.666666666666664)
    """
    ns, nd = sizes.systems, sizes.dimensions
    codes = (sizes.systems, sizes.judges, sizes.dimensions)
    at = [REP, SCODE, JCODE, DCODE]
    grid = code_grid(replicates, *codes).join(_int(corr), on=at, how="left")
    if fixed is None:
        weights = pearson_weights(grid, by=[REP, SCODE, JCODE], r=R)
    else:
        weights = grid.join(
            _int(fixed), on=[SCODE, JCODE, DCODE], how="left"
        ).with_columns(pl.lit(False).alias(FALLBACK))

    keys = [REP, SCODE, JCODE, SETCODE, DCODE]
    rag = _int(tm_rag).with_columns(pl.lit(2, dtype=pl.Int64).alias(SETCODE))
    bounds = _int(tm_bounds)
    if not paired:
        bounds = bounds.drop(SCODE, strict=False).join(
            pl.DataFrame({SCODE: np.arange(ns, dtype=np.int64)}), how="cross"
        )
    values = [c for c in (N, TRIMMED_MEAN) if c in rag.columns and c in bounds.columns]
    trimmed = code_grid(replicates, *codes, sets=True).join(
        pl.concat([rag.select(*keys, *values), bounds.select(*keys, *values)]),
        on=keys,
        how="left",
    )
    totals = weighted_totals(
        trimmed.join(weights.select(*at, WEIGHT), on=at),
        by=[REP, SCODE, JCODE, SETCODE],
    ).with_columns(pl.lit(nd, dtype=pl.Int64).alias(DCODE))
    figures = pl.concat(
        [trimmed.select(*keys, TRIMMED_MEAN), totals.select(*keys, TRIMMED_MEAN)]
    )
    wide = figures.pivot(on=SETCODE, index=at, values=TRIMMED_MEAN)
    for code in ("0", "1", "2"):
        if code not in wide.columns:
            wide = wide.with_columns(pl.lit(None, dtype=pl.Float64).alias(code))
    norm = wide.with_columns(
        normalise(pl.col("2"), pl.col("0"), pl.col("1"), min_span=MIN_SPAN).alias(
            "normalized"
        )
    )
    cube = (
        norm.filter(pl.col(DCODE) == nd)
        .join(_int(recall), on=[REP, SCODE], how="left")
        .with_columns((pl.col("normalized") * pl.col("recall")).alias(CUBE))
    )
    return ReplicateFigures(weights, trimmed, figures, norm, cube)


def _int(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with its code columns (and ``n``) as Int64."""
    return frame.with_columns(
        pl.col(c).cast(pl.Int64)
        for c in (REP, SCODE, JCODE, SETCODE, DCODE, N)
        if c in frame.columns
    )


# The summary: its passes as replicate zero, its figures with their names.

_CODE = {
    schema.SYSTEM: SCODE,
    schema.JUDGE: JCODE,
    schema.DIMENSION: DCODE,
    SET: SETCODE,
}
"""The code column of each name column."""


@dataclass(frozen=True)
class Weights:
    """Per (judge, system, dimension) weight (section 6), and what it raised."""

    frame: pl.DataFrame
    """``judge, system, dimension, n, r, weight, fallback``."""
    flags: tuple[dict[str, Any], ...]
    """One "equal-weight fallback" flag per (judge, system) that fell back."""
    notes: tuple[str, ...]
    """Dimensions that fixed weights leave out."""


@dataclass(frozen=True)
class Figures:
    """The figures of every judge and system (sections 5 to 8)."""

    trimmed: pl.DataFrame
    """``judge, system, set, dimension, n, trimmed_mean``."""
    recall: pl.DataFrame
    """Per system: ``n_questions, n_retrieved, recall``."""
    figures: pl.DataFrame
    """``judge, system, set, figure, trimmed_mean`` (dimensions and weighted)."""
    wide: pl.DataFrame
    """``judge, system, figure, zero, full, rag``: the trimmed means side by side."""
    norm: pl.DataFrame
    """``wide`` with ``normalized`` and the ``reason`` of an undefined one."""
    cube: pl.DataFrame
    """The weighted rows of ``norm`` with recall and ``cube``."""
    per_judge: pl.DataFrame
    """``system, figure, judge, normalized``: every figure, CuBE included."""


def recall(study: Study) -> pl.DataFrame:
    """Recall@k of every system under test (section 4)."""
    ranked = study.answers.ranked.with_columns(pl.col(schema.SYSTEM).cast(pl.String))
    return (
        pl.DataFrame({schema.SYSTEM: list(study.systems)})
        .join(recall_at_k(ranked), on=schema.SYSTEM, how="left")
        .with_columns(pl.col(N_QUESTIONS, N_RETRIEVED).fill_null(0))
    )


def _coded(frame: pl.DataFrame, names: Mapping[str, Sequence[str]]) -> pl.DataFrame:
    """Replicate zero of ``frame``: each column of ``names`` as its code.

    A row whose name is not listed is left out (it has no figure).
    """
    present = [c for c in names if c in frame.columns]
    return (
        frame.with_columns(
            pl.lit(0, dtype=pl.Int64).alias(REP),
            *(
                pl.col(c)
                .replace_strict(
                    {name: i for i, name in enumerate(names[c])},
                    default=None,
                    return_dtype=pl.Int64,
                )
                .alias(_CODE[c])
                for c in present
            ),
        )
        .drop_nulls([_CODE[c] for c in present])
        .drop(present)
    )


def _named(
    frame: pl.DataFrame, names: Mapping[str, Sequence[str]], *, order: Sequence[str]
) -> pl.DataFrame:
    """``frame`` sorted by the codes ``order``, each code as its name."""
    present = [c for c in names if _CODE[c] in frame.columns]
    return (
        frame.sort(order)
        .with_columns(
            pl.col(_CODE[c])
            .replace_strict(dict(enumerate(names[c])), return_dtype=pl.String)
            .alias(c)
            for c in present
        )
        .drop(REP, *(_CODE[c] for c in present))
    )


def _scored(study: Study) -> dict[str, list[str]]:
    """Per judge, the dimensions it scored (what equal weights weigh)."""
    scored = (
        study.passes.frames["stats"]
        .group_by(schema.JUDGE)
        .agg(pl.col(schema.DIMENSION).unique())
    )
    return {str(j): [str(d) for d in dims] for j, dims in scored.iter_rows()}


def study_figures(study: Study) -> tuple[Weights, Figures]:
    """The summary's sections 5 to 8: replicate zero of :func:`replicate_figures`.

    Raises:
        WeightsError: Fixed weights that do not fit the scores
            (:func:`~cube_ray.aggregate._weights.resolve_weights`).
    """
    systems, judges = list(study.systems), list(study.judges)
    dimensions = list(study.dimensions)
    resolved = resolve_weights(
        study.options.weights, judges, dimensions, scored=_scored(study)
    )
    fixed = None
    if resolved.fixed is not None:
        table = resolved.fixed
        fixed = fixed_weight_rows(
            {j: {s: table[j] for s in systems} for j in judges},
            judges,
            systems,
            dimensions,
        )
    names = {
        schema.SYSTEM: systems,
        schema.JUDGE: judges,
        schema.DIMENSION: dimensions,
        SET: SET_NAMES[:2],
    }
    frames = study.passes.frames
    bounds = frames["tm_bounds"].rename({schema.SYSTEM: SET})
    if VARIANT in bounds.columns:
        bounds = bounds.rename({VARIANT: schema.SYSTEM})
    rec = recall(study)
    kernel = replicate_figures(
        _coded(frames["corr"], names),
        _coded(frames["tm_rag"], names),
        _coded(bounds, names),
        _coded(rec.select(schema.SYSTEM, pl.col(RECALL).alias("recall")), names),
        replicates=1,
        sizes=Sizes(len(systems), len(judges), len(dimensions)),
        fixed=fixed,
        paired=study.options.bounds_on == "paired",
    )
    weights = _weights_of(kernel, names, resolved.notes)
    return weights, _figures_of(kernel, names, rec)


def _weights_of(
    kernel: ReplicateFigures,
    names: Mapping[str, Sequence[str]],
    notes: tuple[str, ...],
) -> Weights:
    """The summary's weights, with an "equal-weight fallback" flag per fallback."""
    frame = _named(kernel.weights, names, order=[JCODE, SCODE, DCODE]).select(
        schema.JUDGE,
        schema.SYSTEM,
        schema.DIMENSION,
        pl.col(N).fill_null(0),
        R,
        WEIGHT,
        FALLBACK,
    )
    flags = tuple(
        {
            "flag": "equal-weight fallback",
            "judge": row[schema.JUDGE],
            "system": row[schema.SYSTEM],
            "reason": "every Pearson r_d is <= 0 or undefined",
        }
        for row in frame.filter(pl.col(FALLBACK))
        .unique([schema.JUDGE, schema.SYSTEM], maintain_order=True)
        .iter_rows(named=True)
    )
    return Weights(frame, flags, notes)


def _figures_of(
    kernel: ReplicateFigures,
    names: Mapping[str, Sequence[str]],
    rec: pl.DataFrame,
) -> Figures:
    """The summary's figure frames, with names, from replicate zero."""
    sets = {**names, SET: SET_NAMES}
    figs = {**names, schema.DIMENSION: [*names[schema.DIMENSION], WEIGHTED]}
    jsd = [JCODE, SCODE, DCODE]
    trim = _named(kernel.trimmed, sets, order=[*jsd, SETCODE]).select(
        schema.JUDGE,
        schema.SYSTEM,
        SET,
        schema.DIMENSION,
        pl.col(N).fill_null(0),
        TRIMMED_MEAN,
    )
    long = _named(kernel.figures, {**figs, SET: SET_NAMES}, order=[*jsd, SETCODE])
    long = long.select(
        schema.JUDGE,
        schema.SYSTEM,
        SET,
        pl.col(schema.DIMENSION).alias(FIGURE),
        TRIMMED_MEAN,
    )
    z, f, r = pl.col("zero"), pl.col("full"), pl.col("rag")
    by_set = {str(code): name for code, name in enumerate(SET_NAMES)}
    norm = (
        _named(kernel.norm, figs, order=jsd)
        .rename(by_set)
        .select(
            schema.JUDGE,
            schema.SYSTEM,
            pl.col(schema.DIMENSION).alias(FIGURE),
            *SET_NAMES,
            "normalized",
        )
        .with_columns(
            pl.when(z.is_null() | f.is_null() | r.is_null())
            .then(pl.lit(MISSING_SCORES_TEXT))
            .when((f - z) <= MIN_SPAN)
            .then(pl.lit(DEGENERATE))
            .otherwise(None)
            .alias("reason")
        )
    )
    cube = _named(kernel.cube, figs, order=[JCODE, SCODE]).select(
        schema.JUDGE, schema.SYSTEM, "normalized", CUBE
    )
    per_judge = pl.concat(
        [
            norm.select(schema.SYSTEM, FIGURE, schema.JUDGE, "normalized"),
            cube.select(
                schema.SYSTEM,
                pl.lit(CUBE).alias(FIGURE),
                schema.JUDGE,
                pl.col(CUBE).alias("normalized"),
            ),
        ]
    )
    wide = norm.select(schema.JUDGE, schema.SYSTEM, FIGURE, *SET_NAMES)
    return Figures(trim, rec, long, wide, norm, cube, per_judge)


def across_judges(figs: Figures, used: Mapping[str, list[str]]) -> pl.DataFrame:
    """Mean, SD and number of judges of each figure over the used judges."""
    used_pairs = pl.DataFrame(
        [(s, j) for s, judges in used.items() for j in judges],
        schema={schema.SYSTEM: pl.String, schema.JUDGE: pl.String},
        orient="row",
    )
    return cross_judge(
        figs.per_judge.join(used_pairs, on=[schema.SYSTEM, schema.JUDGE], how="semi"),
        by=[schema.SYSTEM, FIGURE],
        value="normalized",
    )
