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
rows, and equals :func:`cube_ray.aggregate.summarize` on the resampled tables.
The options are the aggregation's own :class:`cube_ray.aggregate.AggregateOptions`
and the rank score is :func:`cube_ray.aggregate.rank_scores`: one definition of
each, not a copy.

The across-judge figure of a replicate averages a fixed set of judges (those the
summary's headline used, CUBE_METHOD.md section 10); a replicate in which one of
them is undefined is undefined, never an average of fewer judges.

Size: about 800 lines, one module on purpose: it is one computation (the
method over a batch of resamples) whose steps share array layouts; splitting
it would put one ``[B, Q]`` convention in several files.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import polars as pl

from cube_ray import schema
from cube_ray.aggregate import RANK_SCORE, AggregateOptions, rank_scores
from cube_ray.errors import ConfigError

__all__ = [
    "DEFAULT_INTERVAL",
    "INTERVAL_METHODS",
    "BootstrapResult",
    "CubeReplicates",
    "FixedWeights",
    "IntervalMethod",
    "bca_interval",
    "bootstrap_cube",
    "evaluate_replicates",
    "fixed_judge_mean",
    "jackknife_indices",
    "k_of",
    "masked_pearson",
    "masked_trimmed_mean",
    "percentile_interval",
    "resample_indices",
    "weighted_total",
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


IntervalMethod = Literal["percentile", "bca"]
"""How a bootstrap interval is read off the replicates."""
INTERVAL_METHODS: tuple[IntervalMethod, ...] = ("percentile", "bca")
DEFAULT_INTERVAL: IntervalMethod = "bca"
"""The report's interval, chosen by the coverage that ``benchmarks/validity.py``
measured (BENCHMARKS.md): BCa stayed within 93-97 % in every simulated setting,
the percentile interval over-covered (97.7 %) with integer judge scores."""

FixedWeights = Mapping[str, Mapping[str, Mapping[str, float]]]
"""``judge -> system -> dimension -> weight`` as recorded in ``summary.json``."""

_JACKKNIFE_GROUPS = 200
"""BCa's acceleration uses a delete-one jackknife up to this many questions and
a delete-a-group jackknife (this many groups) above, to bound its cost."""


def k_of(options: AggregateOptions, system: str) -> int:
    """The retrieval depth of ``system`` under ``options``.

    >>> k_of(AggregateOptions(k={"rag@a": 4}), "rag@a"), k_of(AggregateOptions(), "rag")
    (4, 8)
    """
    if isinstance(options.k, int):
        return options.k
    if system not in options.k:
        raise ConfigError(
            f"k is given per system ({sorted(options.k)}) but not for {system!r}; "
            "give one k per system under test, or a single k for all"
        )
    return int(options.k[system])


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
    n_all = np.broadcast_shapes(x.shape, y.shape)[-1]
    if n_all >= 2 and not (np.isnan(x).any() or np.isnan(y).any()):
        # No missing value (the common case): centre each input once, in its
        # own shape; ``x`` may be a [B, Q] rank score shared by [J, D, B, Q].
        dxf = x - x.mean(axis=-1, keepdims=True)
        dyf = y - y.mean(axis=-1, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            rf = (dxf * dyf).sum(axis=-1) / np.sqrt(
                (dxf * dxf).sum(axis=-1) * (dyf * dyf).sum(axis=-1)
            )
        const = (x.max(axis=-1, initial=-np.inf) == x.min(axis=-1, initial=np.inf)) | (
            y.max(axis=-1, initial=-np.inf) == y.min(axis=-1, initial=np.inf)
        )
        fast: FloatArray = np.where(const, np.nan, rf)
        return fast
    x, y = np.broadcast_arrays(x, y)
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


def weighted_total(weights: FloatArray, values: FloatArray) -> FloatArray:
    """``sum_d w_d x_d`` over the last axis, as the aggregation defines it.

    A dimension with weight 0 does not count even when its value is missing
    (NaN): ``0 x NaN`` must not turn the total into NaN. A missing value of a
    dimension with positive weight makes the total missing.

    >>> w = np.array([[0.5, 0.5, 0.0], [0.5, 0.5, 0.0]])
    >>> x = np.array([[2.0, 4.0, np.nan], [2.0, np.nan, 1.0]])
    >>> weighted_total(w, x).tolist()
    [3.0, nan]
    """
    counts = weights > 0
    missing = (counts & np.isnan(values)).any(axis=-1)
    total = np.where(counts, weights * np.where(np.isnan(values), 0.0, values), 0.0)
    out: FloatArray = np.where(missing, np.nan, total.sum(axis=-1))
    return out


@dataclass
class _Prepared:
    """The score tables laid out as dense ``[Q]`` columns (NaN = missing)."""

    questions: list[str]
    judges: list[str]
    systems: list[str]
    dimensions: list[str]
    rank_score: FloatArray  # [S, Q], NaN where the system has no (available) answer
    rank: FloatArray  # [S, Q]
    scores: dict[str, FloatArray]  # set name -> [J, D, Q]


def _available(answers: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The answer rows the system did give, and the keys of those it did not.

    An answer whose ``status`` is set and not ``ok`` is an outage (CUBE_METHOD.md
    section 10): it is neither a retrieval miss nor a low score.
    """
    keys = [schema.QUESTION_ID, schema.SYSTEM]
    if schema.STATUS not in answers.columns:
        return answers, answers.select(keys).clear()
    status = pl.col(schema.STATUS).cast(pl.String)
    failed = status.is_not_null() & (status != schema.STATUS_OK)
    return answers.filter(~failed), answers.filter(failed).select(keys)


def _prepare(
    answers: pl.DataFrame,
    scores: pl.DataFrame,
    *,
    options: AggregateOptions,
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
    answers, failed = _available(answers)
    if failed.height:
        keys = failed.with_columns(
            pl.col(c).cast(scores.schema[c]) for c in failed.columns
        )
        scores = scores.join(keys, on=[schema.QUESTION_ID, schema.SYSTEM], how="anti")

    rank = np.full((len(systems), nq), np.nan)
    rank_score = np.full((len(systems), nq), np.nan)
    for si, system in enumerate(systems):
        rows = answers.filter(pl.col(schema.SYSTEM) == system)
        pos = np.array(
            [qpos[q] for q in rows.get_column(schema.QUESTION_ID).to_list()],
            dtype=np.int64,
        )
        ranked = rank_scores(
            rows.with_columns(pl.col(schema.RANK).fill_null(0)),
            k=k_of(options, system),
        )
        rank[si, pos] = ranked.get_column(schema.RANK).cast(pl.Float64).to_numpy()
        rank_score[si, pos] = ranked.get_column(RANK_SCORE).cast(pl.Float64).to_numpy()

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


def evaluate_replicates(
    answers: pl.DataFrame,
    scores: pl.DataFrame,
    *,
    indices: IntArray | None = None,
    options: AggregateOptions | None = None,
    fixed_weights: FixedWeights | None = None,
    dimensions: Sequence[str] | None = None,
    judges: Mapping[str, Sequence[str]] | None = None,
) -> CubeReplicates:
    """CuBE of every judge and system for each row of ``indices``.

    Args:
        answers: The answers table (schema ``ANSWERS_SCHEMA``); rows whose
            ``status`` is not ``ok`` are outages and left out.
        scores: The scores table (schema ``SCORES_SCHEMA``).
        indices: ``[B, Q]`` question positions (into the sorted unique question
            ids of ``answers``); ``None`` evaluates the question set once as is.
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
    """
    options = options or AggregateOptions()
    prep = _prepare(answers, scores, options=options, dimensions=dimensions)
    nq = len(prep.questions)
    if indices is None:
        indices = np.arange(nq, dtype=np.int64)[None, :]
    parts = [
        _evaluate_block(prep, block, options, fixed_weights)
        for block in _blocks(indices)
    ]
    if not parts:
        parts = [_evaluate_block(prep, indices, options, fixed_weights)]

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
        used=_used_mask(prep.judges, prep.systems, judges),
    )


def _gather(scores: FloatArray, idx: IntArray) -> FloatArray:
    """``scores[:, :, idx]`` as a C-contiguous ``[J, D, B, Q]`` array.

    Fancy indexing leaves the new axes outermost in memory; the reductions over
    the last axis (sorts, sums) are several times faster on a contiguous copy.
    """
    out: FloatArray = np.ascontiguousarray(scores[:, :, idx])
    return out


def _evaluate_block(
    prep: _Prepared,
    idx: IntArray,
    options: AggregateOptions,
    fixed_weights: FixedWeights | None,
) -> dict[str, FloatArray]:
    nj, ns, nd = len(prep.judges), len(prep.systems), len(prep.dimensions)
    nb = idx.shape[0]
    corr = np.full((nj, ns, nb, nd), np.nan)
    weights = np.full((nj, ns, nb, nd), np.nan)
    fallback = np.zeros((nj, ns, nb))
    tm = {k: np.full((nj, ns, nb, nd + 1), np.nan) for k in ("zero", "full", "system")}
    normalized = np.full((nj, ns, nb, nd + 1), np.nan)
    recall = np.full((ns, nb), np.nan)
    pearson = options.weights == "pearson"

    # Bounds over all questions do not depend on the system: compute them once.
    shared: dict[str, FloatArray] = {}
    if options.bounds_on == "all":
        for key, name in (("zero", schema.ZERO), ("full", schema.FULL)):
            shared[key] = masked_trimmed_mean(
                _gather(prep.scores[name], idx), options.trim
            )  # [J, D, B]

    for si, system in enumerate(prep.systems):
        rs = prep.rank_score[si, idx]  # [B, Q]
        rk = prep.rank[si, idx]
        present = ~np.isnan(rk)
        retrieved = present & (rk >= 1)
        with np.errstate(invalid="ignore", divide="ignore"):
            recall[si] = retrieved.sum(axis=1) / present.sum(axis=1)
        sys_scores = _gather(prep.scores[system], idx)  # [J, D, B, Q]
        r = masked_pearson(rs, sys_scores)  # rs broadcasts over [J, D]
        corr[:, si] = np.moveaxis(r, 1, 2)  # [J, B, D]
        w = _weights(prep, si, np.moveaxis(r, 1, 2), options, fixed_weights)
        weights[:, si] = w
        if pearson:
            fallback[:, si] = np.all(
                ~(np.nan_to_num(corr[:, si], nan=0.0) > 0), axis=-1
            )
        tm_sys = masked_trimmed_mean(
            np.where(retrieved, sys_scores, np.nan), options.trim
        )  # [J, D, B]
        per_set = {"system": tm_sys}
        for key, name in (("zero", schema.ZERO), ("full", schema.FULL)):
            if options.bounds_on == "all":
                per_set[key] = shared[key]
            else:
                per_set[key] = masked_trimmed_mean(
                    np.where(retrieved, _gather(prep.scores[name], idx), np.nan),
                    options.trim,
                )
        for key, val in per_set.items():
            dims_first = np.moveaxis(val, 1, 2)  # [J, B, D]
            total = weighted_total(w, dims_first)
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


def _weights(
    prep: _Prepared,
    si: int,
    corr: FloatArray,
    options: AggregateOptions,
    fixed_weights: FixedWeights | None,
) -> FloatArray:
    """``[J, B, D]`` weights of system ``si`` (CUBE_METHOD.md section 6)."""
    nd = len(prep.dimensions)
    if options.weights == "pearson":
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
        if fixed_weights is not None:
            table = fixed_weights.get(judge, {}).get(system)
        elif isinstance(options.weights, Mapping):
            inner = options.weights.get(judge, options.weights)
            table = inner if isinstance(inner, Mapping) else None
        if table:
            values = np.array([float(table.get(d) or 0.0) for d in prep.dimensions])
            if values.sum() > 0:
                fixed[ji] = values / values.sum()
    return fixed


# --------------------------------------------------------------------------
# intervals
# --------------------------------------------------------------------------

Interval = tuple[float | None, float | None]


@dataclass(frozen=True)
class BootstrapResult:
    """Bootstrap intervals of one system's headline figures."""

    system: str
    n_resamples: int
    confidence: float
    method: IntervalMethod
    """``percentile`` or ``bca`` (bias-corrected and accelerated)."""
    judges: tuple[str, ...]
    """The judges averaged in every replicate (held fixed, as in the headline)."""
    cube: Interval
    """Interval of the across-judge mean CuBE of :attr:`judges`."""
    weighted: Interval
    """Interval of their mean normalised weighted total."""
    recall: Interval
    per_judge: dict[str, Interval]
    """Interval of each judge's CuBE (every judge, used or not)."""
    n_defined: int
    """Resamples in which every judge of :attr:`judges` had a defined CuBE; the
    interval is read from those."""


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


def bootstrap_cube(
    answers: pl.DataFrame,
    scores: pl.DataFrame,
    *,
    n_resamples: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
    method: IntervalMethod = DEFAULT_INTERVAL,
    options: AggregateOptions | None = None,
    fixed_weights: FixedWeights | None = None,
    dimensions: Sequence[str] | None = None,
    judges: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, BootstrapResult]:
    """Bootstrap CI of CuBE per system, resampling questions, judges held fixed.

    Each resample draws the question set with replacement (a question drawn
    twice counts twice everywhere: weights, trimmed means, recall), recomputes
    every judge's CuBE, then the mean over the judges of ``judges[system]``.

    Args:
        answers: The answers table.
        scores: The scores table.
        n_resamples: Number of resamples.
        seed: Seed of :func:`resample_indices`.
        confidence: Interval coverage, e.g. 0.95.
        method: ``bca`` (the default, see :data:`DEFAULT_INTERVAL`) or
            ``percentile``.
        options: Aggregation options.
        fixed_weights: Recorded fixed weights (see :func:`evaluate_replicates`).
        dimensions: Dimension order.
        judges: Per system, the judges of the headline (default: all).

    Returns:
        One :class:`BootstrapResult` per system under test.
    """
    if method not in INTERVAL_METHODS:
        raise ConfigError(
            f"interval method {method!r} is not one of {list(INTERVAL_METHODS)}"
        )
    n_q = answers.get_column(schema.QUESTION_ID).n_unique()
    idx = resample_indices(n_q, n_resamples, seed=seed)
    kwargs: dict[str, Any] = {
        "options": options,
        "fixed_weights": fixed_weights,
        "dimensions": dimensions,
        "judges": judges,
    }
    rep = evaluate_replicates(answers, scores, indices=idx, **kwargs)
    point = jack = None
    if method == "bca":
        point = evaluate_replicates(answers, scores, **kwargs)
        jack = evaluate_replicates(
            answers, scores, indices=jackknife_indices(n_q), **kwargs
        )

    def interval(values: FloatArray, pick: Any) -> Interval:
        if point is None or jack is None:
            return percentile_interval(values, confidence)
        return bca_interval(values, float(pick(point)[0]), pick(jack), confidence)

    out: dict[str, BootstrapResult] = {}
    for si, system in enumerate(rep.systems):
        cube_b = rep.cube_mean[si]
        out[system] = BootstrapResult(
            system=system,
            n_resamples=n_resamples,
            confidence=confidence,
            method=method,
            judges=tuple(j for ji, j in enumerate(rep.judges) if rep.used[ji, si]),
            cube=interval(cube_b, lambda r, si=si: r.cube_mean[si]),
            weighted=interval(
                rep.weighted_mean[si], lambda r, si=si: r.weighted_mean[si]
            ),
            recall=interval(rep.recall[si], lambda r, si=si: r.recall[si]),
            per_judge={
                judge: interval(rep.cube[ji, si], lambda r, a=ji, b=si: r.cube[a, b])
                for ji, judge in enumerate(rep.judges)
            },
            n_defined=int(np.isfinite(cube_b).sum()),
        )
    return out
