"""Vectorised re-computation of CuBE over resampled question sets (the bootstrap).

The report does not score anything: the figures it shows come from
``summary.json``, written by :mod:`cube_ray.aggregate`. The bootstrap, however,
must recompute CuBE for hundreds of resampled question sets, and calling the
Polars aggregation once per resample is too slow for an interactive report. This
module therefore evaluates the method of CUBE_METHOD.md sections 5-8 for a whole
batch of resamples at once with numpy: one ``[B, Q]`` gather per score column,
one sort per trimmed mean, masked Pearson weights.

It is the same math as the aggregation, checked three ways by the tests: the
identity resample reproduces the worked example's ``expected_summary.json`` to
1e-9, a bootstrap replicate equals a direct scipy computation on the resampled
rows, and (when :func:`cube_ray.aggregate.summarize` is importable) equals
``summarize`` on the resampled tables.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import polars as pl

from cube_ray import schema

__all__ = [
    "BootstrapResult",
    "CubeOptions",
    "CubeReplicates",
    "bootstrap_cube",
    "evaluate_replicates",
    "masked_pearson",
    "masked_trimmed_mean",
    "resample_indices",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

DEGENERATE_EPS = 1e-9
"""``full - zero`` at or below this makes a normalised value undefined."""

WEIGHTED = "weighted"
"""Key of the weighted total beside the dimensions (as in ``summary.json``)."""

_MAX_BLOCK_CELLS = 2_000_000
"""Resamples are processed in blocks of at most this many ``B x Q`` cells."""


@dataclass(frozen=True)
class CubeOptions:
    """The aggregation options the recomputation needs (CUBE_METHOD.md 5-7).

    Mirrors ``cube_ray.aggregate.AggregateOptions``; built from the
    ``parameters`` block of ``summary.json`` when present.
    """

    k: int | Mapping[str, int] = 8
    """Retrieval depth used in ``rank_score``, one number or one per system."""
    trim: float = 0.1
    """Proportion cut from each end by the trimmed mean."""
    weights: str | Mapping[str, Any] = "pearson"
    """``"pearson"``, ``"equal"`` or fixed numbers (per dimension or per judge)."""
    bounds_on: Literal["all", "paired"] = "all"
    """Bounds over all questions, or only those the system retrieved."""
    fixed_weights: Mapping[str, Mapping[str, Mapping[str, float]]] | None = None
    """``judge -> system -> dimension -> weight`` overriding ``weights`` (used when
    the summary recorded non-Pearson weights)."""

    def k_for(self, system: str) -> int:
        """The retrieval depth of ``system``."""
        if isinstance(self.k, Mapping):
            if system in self.k:
                return int(self.k[system])
            return int(self.k.get("default", 8))
        return int(self.k)


def resample_indices(n: int, n_resamples: int, *, seed: int = 0) -> IntArray:
    """Indices of ``n_resamples`` resamples of ``n`` questions with replacement.

    Row ``b`` lists the question positions drawn for resample ``b``; the tests
    draw the same matrix to recompute replicates directly.

    >>> resample_indices(4, 2, seed=1).shape
    (2, 4)
    """
    rng = np.random.default_rng(seed)
    return rng.integers(0, n, size=(n_resamples, n), dtype=np.int64)


def masked_trimmed_mean(values: FloatArray, proportion: float) -> FloatArray:
    """Row-wise ``scipy.stats.trim_mean`` ignoring NaN (missing) entries.

    Each row cuts ``int(proportion * n)`` values from each end, where ``n`` is
    that row's count of non-NaN values; an all-NaN row gives NaN.

    >>> x = np.array([[1.0, 2.0, 3.0, 4.0, 100.0, np.nan], [np.nan] * 6])
    >>> masked_trimmed_mean(x, 0.2).round(6).tolist()
    [3.0, nan]
    """
    arr = np.sort(values, axis=-1)  # NaN sorts last
    n = np.sum(~np.isnan(values), axis=-1)
    cut = np.floor(proportion * n).astype(np.int64)
    pos = np.arange(arr.shape[-1])
    keep = (pos >= cut[..., None]) & (pos < (n - cut)[..., None])
    total = np.where(keep, arr, 0.0).sum(axis=-1)
    count = keep.sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out: FloatArray = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    return out


def masked_pearson(x: FloatArray, y: FloatArray) -> FloatArray:
    """Row-wise Pearson correlation over the positions where both are non-NaN.

    NaN where it is undefined: fewer than two pairs, or a constant column.

    >>> x = np.array([[1.0, 2.0, 3.0, np.nan], [1.0, 1.0, 1.0, 2.0]])
    >>> y = np.array([[2.0, 4.0, 7.0, 1.0], [3.0, 4.0, 5.0, np.nan]])
    >>> masked_pearson(x, y).round(6).tolist()
    [0.993399, nan]
    """
    valid = ~(np.isnan(x) | np.isnan(y))
    n = valid.sum(axis=-1)
    xs = np.where(valid, x, 0.0)
    ys = np.where(valid, y, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mx = xs.sum(axis=-1) / n
        my = ys.sum(axis=-1) / n
        dx = np.where(valid, x - mx[..., None], 0.0)
        dy = np.where(valid, y - my[..., None], 0.0)
        cov = (dx * dy).sum(axis=-1)
        r = cov / np.sqrt((dx * dx).sum(axis=-1) * (dy * dy).sum(axis=-1))
    # Constant columns are detected exactly (max == min), not by a variance
    # threshold, so the rule does not depend on the scale of the scores.
    # ``initial`` keeps an empty selection (no pairs at all) well defined.
    x_const = np.where(valid, x, np.inf).min(axis=-1, initial=np.inf) == np.where(
        valid, x, -np.inf
    ).max(axis=-1, initial=-np.inf)
    y_const = np.where(valid, y, np.inf).min(axis=-1, initial=np.inf) == np.where(
        valid, y, -np.inf
    ).max(axis=-1, initial=-np.inf)
    undefined = (n < 2) | x_const | y_const
    out: FloatArray = np.where(undefined, np.nan, r)
    return out


@dataclass
class CubeReplicates:
    """CuBE figures for ``B`` question resamples (axis ``B`` last but one).

    Arrays are indexed ``[judge, system, b, ...]`` in the order of
    :attr:`judges`, :attr:`systems` and :attr:`dimensions`; the last column of
    the ``..., D+1`` arrays is the weighted total.
    """

    judges: list[str]
    systems: list[str]
    dimensions: list[str]
    recall: FloatArray
    """``[S, B]`` share of questions with rank >= 1."""
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
    cube_mean: FloatArray = field(init=False)
    """``[S, B]`` mean over the judges whose CuBE is defined."""
    weighted_mean: FloatArray = field(init=False)
    """``[S, B]`` mean normalised weighted total over judges."""

    def __post_init__(self) -> None:
        self.cube_mean = _nanmean(self.cube, axis=0)
        self.weighted_mean = _nanmean(self.normalized[..., -1], axis=0)

    def judge_summary(self, b: int = 0) -> dict[str, Any]:
        """Replicate ``b`` in the layout of ``summary.json``'s ``judges`` block."""
        out: dict[str, Any] = {}
        keys = [*self.dimensions, WEIGHTED]
        for ji, judge in enumerate(self.judges):
            entry: dict[str, Any] = {
                "weights": {},
                "trimmed_means": {},
                "normalized": {},
                "recall_at_k": {},
                "cube": {},
            }
            for si, system in enumerate(self.systems):
                entry["weights"][system] = dict(
                    zip(self.dimensions, _floats(self.weights[ji, si, b]), strict=True)
                )
                entry["trimmed_means"][system] = {
                    name: dict(
                        zip(keys, _floats(self.trimmed[key][ji, si, b]), strict=True)
                    )
                    for name, key in (
                        (schema.ZERO, "zero"),
                        (schema.FULL, "full"),
                        (system, "system"),
                    )
                }
                entry["normalized"][system] = dict(
                    zip(keys, _floats(self.normalized[ji, si, b]), strict=True)
                )
                entry["recall_at_k"][system] = _float(self.recall[si, b])
                entry["cube"][system] = _float(self.cube[ji, si, b])
            out[judge] = entry
        return out


def _float(x: float | np.floating[Any]) -> float | None:
    value = float(x)
    return None if math.isnan(value) else value


def _floats(xs: FloatArray) -> list[float | None]:
    return [_float(x) for x in xs]


def _nanmean(x: FloatArray, *, axis: int) -> FloatArray:
    count = np.sum(~np.isnan(x), axis=axis)
    total = np.nansum(x, axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        out: FloatArray = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    return out


@dataclass
class _Prepared:
    """The score tables laid out as dense ``[Q]`` columns (NaN = missing)."""

    questions: list[str]
    judges: list[str]
    systems: list[str]
    dimensions: list[str]
    rank_score: FloatArray  # [S, Q], NaN where the system has no answer
    rank: FloatArray  # [S, Q]
    scores: dict[str, FloatArray]  # set name -> [J, D, Q]


def _prepare(
    answers: pl.DataFrame,
    scores: pl.DataFrame,
    *,
    options: CubeOptions,
    dimensions: Sequence[str] | None,
) -> _Prepared:
    questions = sorted(answers.get_column(schema.QUESTION_ID).unique().to_list())
    qpos = {q: i for i, q in enumerate(questions)}
    systems = sorted(
        s
        for s in answers.get_column(schema.SYSTEM).unique().to_list()
        if schema.is_rag_system(s)
    )
    judges = sorted(scores.get_column(schema.JUDGE).unique().to_list())
    if dimensions is None:
        dimensions = (
            scores.get_column(schema.DIMENSION).unique(maintain_order=True).to_list()
        )
    dims = list(dimensions)
    nq = len(questions)

    rank = np.full((len(systems), nq), np.nan)
    rank_score = np.full((len(systems), nq), np.nan)
    for si, system in enumerate(systems):
        rows = answers.filter(pl.col(schema.SYSTEM) == system)
        pos = np.array(
            [qpos[q] for q in rows.get_column(schema.QUESTION_ID).to_list()],
            dtype=np.int64,
        )
        r = rows.get_column(schema.RANK).fill_null(0).to_numpy().astype(np.float64)
        n_ret = (
            rows.get_column(schema.RETRIEVED_DOC_IDS)
            .list.len()
            .fill_null(0)
            .to_numpy()
            .astype(np.float64)
        )
        k = options.k_for(system)
        rs = np.where(r >= 1, k + 2 - r, 0.0) + np.where((r == 1) & (n_ret == 1), 1, 0)
        rank[si, pos] = r
        rank_score[si, pos] = rs

    ok = scores.filter(pl.col(schema.SCORE).is_not_null()).select(
        schema.QUESTION_ID, schema.SYSTEM, schema.JUDGE, schema.DIMENSION, schema.SCORE
    )
    jpos = {j: i for i, j in enumerate(judges)}
    dpos = {d: i for i, d in enumerate(dims)}
    out: dict[str, FloatArray] = {}
    for set_name in [schema.ZERO, schema.FULL, *systems]:
        arr = np.full((len(judges), len(dims), nq), np.nan)
        rows = ok.filter(
            (pl.col(schema.SYSTEM) == set_name)
            & pl.col(schema.DIMENSION).is_in(dims)
            & pl.col(schema.QUESTION_ID).is_in(questions)
        )
        if rows.height:
            ji = np.array([jpos[j] for j in rows.get_column(schema.JUDGE).to_list()])
            di = np.array(
                [dpos[d] for d in rows.get_column(schema.DIMENSION).to_list()]
            )
            qi = np.array(
                [qpos[q] for q in rows.get_column(schema.QUESTION_ID).to_list()]
            )
            arr[ji, di, qi] = rows.get_column(schema.SCORE).to_numpy()
        out[set_name] = arr
    return _Prepared(questions, judges, systems, dims, rank_score, rank, out)


def _blocks(idx: IntArray) -> Iterator[IntArray]:
    step = max(1, _MAX_BLOCK_CELLS // max(1, idx.shape[1]))
    for start in range(0, idx.shape[0], step):
        yield idx[start : start + step]


def evaluate_replicates(
    answers: pl.DataFrame,
    scores: pl.DataFrame,
    *,
    indices: IntArray | None = None,
    options: CubeOptions | None = None,
    dimensions: Sequence[str] | None = None,
) -> CubeReplicates:
    """CuBE of every judge and system for each row of ``indices``.

    Args:
        answers: The answers table (schema ``ANSWERS_SCHEMA``).
        scores: The scores table (schema ``SCORES_SCHEMA``).
        indices: ``[B, Q]`` question positions (into the sorted unique question
            ids of ``answers``); ``None`` evaluates the question set once as is.
        options: Aggregation options; the defaults of CUBE_METHOD.md.
        dimensions: Dimension order; default: first appearance in ``scores``.

    Returns:
        The figures of every replicate.
    """
    options = options or CubeOptions()
    prep = _prepare(answers, scores, options=options, dimensions=dimensions)
    nq = len(prep.questions)
    if indices is None:
        indices = np.arange(nq, dtype=np.int64)[None, :]
    parts = [_evaluate_block(prep, block, options) for block in _blocks(indices)]
    if not parts:
        parts = [_evaluate_block(prep, indices, options)]

    def cat(key: str) -> FloatArray:
        return np.concatenate([p[key] for p in parts], axis=-2 if key != "cube" else -1)

    recall = np.concatenate([p["recall"] for p in parts], axis=-1)
    return CubeReplicates(
        judges=prep.judges,
        systems=prep.systems,
        dimensions=prep.dimensions,
        recall=recall,
        correlations=cat("correlations"),
        weights=cat("weights"),
        equal_fallback=np.concatenate([p["fallback"] for p in parts], axis=-1).astype(
            bool
        ),
        trimmed={name: cat(f"tm_{name}") for name in ("zero", "full", "system")},
        normalized=cat("normalized"),
        cube=np.concatenate([p["cube"] for p in parts], axis=-1),
    )


def _evaluate_block(
    prep: _Prepared, idx: IntArray, options: CubeOptions
) -> dict[str, FloatArray]:
    nj, ns, nd = len(prep.judges), len(prep.systems), len(prep.dimensions)
    nb = idx.shape[0]
    corr = np.full((nj, ns, nb, nd), np.nan)
    weights = np.full((nj, ns, nb, nd), np.nan)
    fallback = np.zeros((nj, ns, nb))
    tm = {k: np.full((nj, ns, nb, nd + 1), np.nan) for k in ("zero", "full", "system")}
    normalized = np.full((nj, ns, nb, nd + 1), np.nan)
    recall = np.full((ns, nb), np.nan)

    # Bounds over all questions do not depend on the system: compute them once.
    shared: dict[str, FloatArray] = {}
    if options.bounds_on == "all":
        for key, name in (("zero", schema.ZERO), ("full", schema.FULL)):
            shared[key] = masked_trimmed_mean(
                prep.scores[name][:, :, idx], options.trim
            )  # [J, D, B]

    for si, system in enumerate(prep.systems):
        rs = prep.rank_score[si, idx]  # [B, Q]
        rk = prep.rank[si, idx]
        present = ~np.isnan(rk)
        retrieved = present & (rk >= 1)
        with np.errstate(invalid="ignore", divide="ignore"):
            recall[si] = retrieved.sum(axis=1) / present.sum(axis=1)
        sys_scores = prep.scores[system][:, :, idx]  # [J, D, B, Q]
        r = masked_pearson(np.broadcast_to(rs, sys_scores.shape), sys_scores)
        corr[:, si] = np.moveaxis(r, 1, 2)  # [J, B, D]
        w = _weights(prep, si, np.moveaxis(r, 1, 2), options)
        weights[:, si] = w
        fallback[:, si] = np.all(~(np.nan_to_num(corr[:, si], nan=0.0) > 0), axis=-1)
        if not _uses_pearson(options):
            fallback[:, si] = 0.0
        tm_sys = masked_trimmed_mean(
            np.where(retrieved, sys_scores, np.nan), options.trim
        )  # [J, D, B]
        per_set = {"system": tm_sys}
        for key, name in (("zero", schema.ZERO), ("full", schema.FULL)):
            if options.bounds_on == "all":
                per_set[key] = shared[key]
            else:
                per_set[key] = masked_trimmed_mean(
                    np.where(retrieved, prep.scores[name][:, :, idx], np.nan),
                    options.trim,
                )
        for key, val in per_set.items():
            dims_first = np.moveaxis(val, 1, 2)  # [J, B, D]
            total = np.sum(w * dims_first, axis=-1)
            tm[key][:, si] = np.concatenate([dims_first, total[..., None]], axis=-1)
        span = tm["full"][:, si] - tm["zero"][:, si]
        with np.errstate(invalid="ignore", divide="ignore"):
            norm = 100.0 * (tm["system"][:, si] - tm["zero"][:, si]) / span
        normalized[:, si] = np.where(span > DEGENERATE_EPS, norm, np.nan)
    cube = normalized[..., -1] * recall[None, :, :]
    return {
        "correlations": corr,
        "weights": weights,
        "fallback": fallback,
        "tm_zero": tm["zero"],
        "tm_full": tm["full"],
        "tm_system": tm["system"],
        "normalized": normalized,
        "recall": recall,
        "cube": cube,
    }


def _uses_pearson(options: CubeOptions) -> bool:
    return options.fixed_weights is None and options.weights == "pearson"


def _weights(
    prep: _Prepared, si: int, corr: FloatArray, options: CubeOptions
) -> FloatArray:
    """``[J, B, D]`` weights of system ``si`` (CUBE_METHOD.md section 6)."""
    nd = len(prep.dimensions)
    if _uses_pearson(options):
        pos = np.maximum(np.nan_to_num(corr, nan=0.0), 0.0)
        total = pos.sum(axis=-1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            w = np.where(total > 0, pos / np.where(total > 0, total, 1.0), 1.0 / nd)
        out: FloatArray = w
        return out
    fixed = np.full(corr.shape, 1.0 / nd)
    system = prep.systems[si]
    for ji, judge in enumerate(prep.judges):
        table: Mapping[str, Any] | None = None
        if options.fixed_weights is not None:
            table = options.fixed_weights.get(judge, {}).get(system)
        elif isinstance(options.weights, Mapping):
            table = options.weights.get(judge, options.weights)
        if table:
            fixed[ji] = [float(table.get(d, 0.0)) for d in prep.dimensions]
    return fixed


@dataclass(frozen=True)
class BootstrapResult:
    """Percentile bootstrap intervals of one system's headline figures."""

    system: str
    n_resamples: int
    confidence: float
    cube: tuple[float | None, float | None]
    """Interval of the cross-judge mean CuBE."""
    weighted: tuple[float | None, float | None]
    """Interval of the cross-judge mean normalised weighted total."""
    recall: tuple[float | None, float | None]
    per_judge: dict[str, tuple[float | None, float | None]]
    """Interval of each judge's CuBE."""
    n_defined: int
    """Resamples whose cross-judge CuBE was defined (the interval uses those)."""


def _interval(
    values: FloatArray, confidence: float
) -> tuple[float | None, float | None]:
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return (None, None)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(finite, [alpha, 1.0 - alpha])
    return (float(lo), float(hi))


def bootstrap_cube(
    answers: pl.DataFrame,
    scores: pl.DataFrame,
    *,
    n_resamples: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
    options: CubeOptions | None = None,
    dimensions: Sequence[str] | None = None,
) -> dict[str, BootstrapResult]:
    """Percentile bootstrap CI of CuBE per system, resampling questions.

    Each resample draws the question set with replacement (a question drawn
    twice counts twice everywhere: weights, trimmed means, recall), recomputes
    every judge's CuBE, then the cross-judge mean.

    Args:
        answers: The answers table.
        scores: The scores table.
        n_resamples: Number of resamples.
        seed: Seed of :func:`resample_indices`.
        confidence: Interval coverage, e.g. 0.95.
        options: Aggregation options.
        dimensions: Dimension order.

    Returns:
        One :class:`BootstrapResult` per system under test.
    """
    n_q = answers.get_column(schema.QUESTION_ID).n_unique()
    idx = resample_indices(n_q, n_resamples, seed=seed)
    rep = evaluate_replicates(
        answers, scores, indices=idx, options=options, dimensions=dimensions
    )
    out: dict[str, BootstrapResult] = {}
    for si, system in enumerate(rep.systems):
        cube_b = rep.cube_mean[si]
        out[system] = BootstrapResult(
            system=system,
            n_resamples=n_resamples,
            confidence=confidence,
            cube=_interval(cube_b, confidence),
            weighted=_interval(rep.weighted_mean[si], confidence),
            recall=_interval(rep.recall[si], confidence),
            per_judge={
                judge: _interval(rep.cube[ji, si], confidence)
                for ji, judge in enumerate(rep.judges)
            },
            n_defined=int(np.isfinite(cube_b).sum()),
        )
    return out
