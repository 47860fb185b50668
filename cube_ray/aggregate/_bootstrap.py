"""CuBE over resampled question sets: the replicates of the bootstrap.

A resample is a multiplicity (``count``) per question. Joined to the score
rows, the counts turn every replicate into histogram rows, and the kernels of
:mod:`cube_ray.aggregate._math` that already accept a count column
(:func:`trimmed_means`, :func:`pearson`) compute every replicate of every judge,
system and dimension in one grouped aggregation keyed by the replicate
(``_b``). Sections 6 to 8 (weights, weighted totals, normalisation, CuBE)
are :func:`~cube_ray.aggregate._figures.replicate_figures`, the kernel whose
replicate zero is the summary's figures, applied to the small per-replicate
frames. Replicates are processed in blocks that bound the joined rows
(memory).

The result is laid out as arrays ``[judge, system, replicate, ...]`` so that
interval code (and a later paired comparison of two systems on the *same*
resamples) reads any judge's, system's and replicate's figure directly. The
judges are held fixed: the across-judge figure of a replicate averages the
judges the headline used and is undefined when one of them is.

The integer-coded rows, their histogram cells and the group-code layout
(``_g``) they share are in :mod:`cube_ray.aggregate._replicate_rows`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from cube_ray import schema
from cube_ray.aggregate._figures import (
    FixedWeights,
    Sizes,
    fixed_weight_rows,
    replicate_figures,
)
from cube_ray.aggregate._math import (
    COUNT,
    FALLBACK,
    RANK_SCORE,
    TRIMMED_MEAN,
    WEIGHT,
    R,
    pearson,
    trimmed_means,
)
from cube_ray.aggregate._replicate_rows import (
    DCODE,
    GROUP,
    JCODE,
    REP,
    SCODE,
    SETCODE,
    CodedTables,
    blocks,
    decode,
    prepare,
)
from cube_ray.aggregate._weights import resolve_weights
from cube_ray.config import AggregateOptions
from cube_ray.errors import ConfigError

__all__ = [
    "CubeReplicates",
    "FixedWeights",
    "evaluate_replicates",
    "fixed_judge_mean",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def fixed_judge_mean(values: FloatArray, used: BoolArray) -> FloatArray:
    """``[S, B]`` mean over the used judges of ``values[J, S, B]``.

    The judges are held fixed: a replicate in which a used judge is undefined
    (NaN) is undefined, instead of silently averaging the others.

    >>> v = np.array([[[1.0, 2.0]], [[3.0, np.nan]], [[9.0, 9.0]]])
    >>> fixed_judge_mean(v, np.array([[True], [True], [False]])).tolist()
    [[2.0, nan]]
    """
    mask = used[:, :, None]
    n = mask.sum(axis=0)
    total = np.where(mask, values, 0.0).sum(axis=0)  # NaN of a used judge stays
    with np.errstate(invalid="ignore", divide="ignore"):
        out: FloatArray = np.where(n > 0, total / np.maximum(n, 1), np.nan)
    return out


@dataclass
class CubeReplicates:
    """CuBE figures for ``B`` question resamples (axis ``B`` last but one).

    Arrays are indexed ``[judge, system, b, ...]`` in the order of
    :attr:`judges`, :attr:`systems` and :attr:`dimensions`; the last column of
    the ``..., D+1`` arrays is the weighted total. NaN marks an undefined value.
    """

    judges: list[str]
    systems: list[str]
    dimensions: list[str]
    recall: FloatArray
    """``[S, B]`` share of available answers with rank >= 1."""
    correlations: FloatArray
    """``[J, S, B, D]`` Pearson r(rank_score, score); NaN when undefined."""
    weights: FloatArray
    """``[J, S, B, D]``."""
    equal_fallback: BoolArray
    """``[J, S, B]`` whether Pearson weights fell back to equal weights."""
    trimmed: dict[str, FloatArray]
    """``"zero" | "full" | "system"`` -> ``[J, S, B, D+1]`` trimmed means."""
    normalized: FloatArray
    """``[J, S, B, D+1]`` ``100 (rag - zero) / (full - zero)``; NaN if degenerate."""
    cube: FloatArray
    """``[J, S, B]`` normalised weighted total x recall."""
    used: BoolArray
    """``[J, S]`` the judges held fixed in each system's across-judge figures."""
    cube_mean: FloatArray = field(init=False)
    """``[S, B]`` mean CuBE of the used judges; NaN when one of them is undefined
    (or none is used)."""
    weighted_mean: FloatArray = field(init=False)
    """``[S, B]`` mean normalised weighted total of the used judges (same rule)."""

    def __post_init__(self) -> None:
        self.cube_mean = fixed_judge_mean(self.cube, self.used)
        self.weighted_mean = fixed_judge_mean(self.normalized[..., -1], self.used)


def _block_frames(
    t: CodedTables, counts: npt.NDArray[np.int64], offset: int, trim: float
) -> tuple[pl.DataFrame, ...]:
    """Per replicate of the block: correlations, trimmed means, recall.

    Each resample's histogram (its count in every cell) is one sparse product;
    the kernels then run on the histograms, grouped by replicate.
    """
    rag = t.cells["rag"].histogram(counts, offset).lazy()
    bounds = t.cells["bounds"].histogram(counts, offset).lazy()
    answers = t.cells["answers"].histogram(counts, offset).lazy()
    count = pl.col(COUNT).cast(pl.Float64)
    plans = [
        pearson(rag, by=[REP, GROUP], x=RANK_SCORE, y=schema.SCORE, count=COUNT),
        trimmed_means(
            rag.filter(pl.col(RANK_SCORE) > 0), by=[REP, GROUP], trim=trim, count=COUNT
        ),
        trimmed_means(bounds, by=[REP, GROUP], trim=trim, count=COUNT),
        answers.group_by(REP, SCODE).agg(
            ((count * pl.col("hit")).sum() / count.sum()).alias("recall")
        ),
    ]
    return tuple(pl.collect_all(plans))


def _fixed_rows(
    t: CodedTables,
    options: AggregateOptions,
    fixed_weights: FixedWeights | None,
) -> pl.DataFrame | None:
    """``_s, _j, _d, weight`` of the fixed weights; None for Pearson weights.

    The recorded weights when given, else the setting's
    (:func:`~cube_ray.aggregate._weights.resolve_weights`).
    """
    if options.weights == "pearson":
        return None
    if fixed_weights is None:
        table = resolve_weights(
            options.weights, t.judges, t.dimensions, scored=t.scored
        ).fixed
        assert table is not None
        fixed_weights = {j: {s: table[j] for s in t.systems} for j in t.judges}
    return fixed_weight_rows(fixed_weights, t.judges, t.systems, t.dimensions)


def _scatter(
    frame: pl.DataFrame, shape: tuple[int, ...], keys: list[str], value: str
) -> FloatArray:
    out = np.full(shape, np.nan)
    if frame.height:
        index = tuple(frame.get_column(k).cast(pl.Int64).to_numpy() for k in keys)
        out[index] = (
            frame.get_column(value).cast(pl.Float64).fill_null(np.nan).to_numpy()
        )
    return out


def evaluate_replicates(
    answers: pl.DataFrame,
    scores: pl.DataFrame,
    *,
    indices: IntArray | None = None,
    counts: npt.NDArray[np.integer[Any]] | None = None,
    options: AggregateOptions | None = None,
    fixed_weights: FixedWeights | None = None,
    dimensions: Sequence[str] | None = None,
    judges: Mapping[str, Sequence[str]] | None = None,
) -> CubeReplicates:
    """CuBE of every judge and system for each resample of the questions.

    Args:
        answers: The answers table (schema ``ANSWERS_SCHEMA``); rows whose
            ``status`` is not ``ok`` are outages and left out.
        scores: The scores table (schema ``SCORES_SCHEMA``).
        indices: ``[B, L]`` question positions (into the sorted unique question
            ids of ``answers``), one row per resample.
        counts: ``[B, Q]`` multiplicity of each question in each resample,
            instead of ``indices``. With neither, the questions as drawn (one
            replicate, every count 1).
        options: Aggregation options (``k``, ``trim``, ``weights``,
            ``bounds_on``); the defaults of CUBE_METHOD.md.
        fixed_weights: Weights recorded by the aggregation
            (``judge -> system -> dimension -> weight``); they replace
            ``options.weights`` when it is not ``pearson``.
        dimensions: Dimension order; default: first appearance in ``scores``.
        judges: Per system, the judges of its across-judge figures (held fixed
            in every replicate); default: every judge.

    Returns:
        The figures of every replicate.

    Examples:
        >>> answers = pl.DataFrame({"question_id": ["q1", "q2", "q3"] * 3,
        ...     "system": ["zero"] * 3 + ["full"] * 3 + ["rag"] * 3,
        ...     "rank": [None] * 6 + [1, 2, 0]})
        >>> scores = answers.select("question_id", "system").with_columns(
        ...     judge=pl.lit("j"), dimension=pl.lit("relevance"),
        ...     score=pl.Series([2.0, 4, 6, 8, 8, 8, 7, 6, 3]))
        >>> rep = evaluate_replicates(
        ...     answers, scores, indices=np.array([[0, 1, 2], [0, 0, 2]]),
        ...     options=AggregateOptions(trim=0.0))
        >>> rep.cube[0, 0].round(6).tolist()  # as drawn; then q1 twice, no q2
        [41.666667, 52.380952]
    """
    options = options or AggregateOptions()
    t = prepare(answers, scores, options=options, dimensions=dimensions)
    nq = t.questions.len()
    if counts is not None and np.shape(counts)[1:] != (nq,):
        raise ConfigError(
            f"counts must be [resamples, {nq}] (one count per question), got "
            f"{np.shape(counts)}"
        )
    if indices is None and counts is None:
        indices = np.arange(nq, dtype=np.int64)[None, :]
    nb = (indices if indices is not None else counts).shape[0]  # type: ignore[union-attr]
    cells = sum(c.values.height for c in t.cells.values())
    parts: list[tuple[pl.DataFrame, ...]] = [
        _block_frames(t, block, start, options.trim)
        for start, block in blocks(nq, cells, indices, counts)
    ]
    corr, tm_rag, tm_bounds, recall = (
        pl.concat([p[i] for p in parts]) for i in range(4)
    )
    return _figures(
        t, nb, corr, tm_rag, tm_bounds, recall, options, fixed_weights, judges
    )


def _figures(
    t: CodedTables,
    nb: int,
    corr: pl.DataFrame,
    tm_rag: pl.DataFrame,
    tm_bounds: pl.DataFrame,
    recall: pl.DataFrame,
    options: AggregateOptions,
    fixed_weights: FixedWeights | None,
    judges: Mapping[str, Sequence[str]] | None,
) -> CubeReplicates:
    """Sections 6 to 8 of every replicate, laid out as arrays."""
    nj, ns, nd = len(t.judges), len(t.systems), len(t.dimensions)
    rep = pl.col(REP).cast(pl.Int64)
    figs = replicate_figures(
        decode(corr.with_columns(rep), t, sets=False),
        decode(tm_rag.with_columns(rep), t, sets=False),
        decode(tm_bounds.with_columns(rep), t, sets=True),
        recall.with_columns(rep),
        replicates=nb,
        sizes=Sizes(ns, nj, nd),
        fixed=_fixed_rows(t, options, fixed_weights),
        paired=options.bounds_on == "paired",
    )
    jsb = (nj, ns, nb)
    trimmed_arrays = {
        name: _scatter(
            figs.figures.filter(pl.col(SETCODE) == code),
            (*jsb, nd + 1),
            [JCODE, SCODE, REP, DCODE],
            TRIMMED_MEAN,
        )
        for code, name in enumerate(("zero", "full", "system"))
    }
    fallback = np.zeros(jsb, dtype=bool)
    fb = figs.weights.filter(pl.col(FALLBACK)).select(JCODE, SCODE, REP).unique()
    if fb.height:
        fallback[tuple(fb.get_column(c).to_numpy() for c in (JCODE, SCODE, REP))] = True
    at = [JCODE, SCODE, REP, DCODE]
    return CubeReplicates(
        judges=t.judges,
        systems=t.systems,
        dimensions=t.dimensions,
        recall=_scatter(recall.with_columns(rep), (ns, nb), [SCODE, REP], "recall"),
        correlations=_scatter(figs.weights, (*jsb, nd), at, R),
        weights=_scatter(figs.weights, (*jsb, nd), at, WEIGHT),
        equal_fallback=fallback,
        trimmed=trimmed_arrays,
        normalized=_scatter(figs.norm, (*jsb, nd + 1), at, "normalized"),
        cube=_scatter(figs.cube, jsb, [JCODE, SCODE, REP], "cube"),
        used=_used_mask(t.judges, t.systems, judges),
    )


def _used_mask(
    judges: Sequence[str],
    systems: Sequence[str],
    used: Mapping[str, Sequence[str]] | None,
) -> BoolArray:
    mask = np.ones((len(judges), len(systems)), dtype=bool)
    if used is None:
        return mask
    for si, system in enumerate(systems):
        chosen = set(used.get(system, judges))
        mask[:, si] = [j in chosen for j in judges]
    return mask
