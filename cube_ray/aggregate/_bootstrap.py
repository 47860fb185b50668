"""CuBE over resampled question sets: the replicates of the bootstrap.

A resample is a multiplicity (``count``) per question. Joined to the score
rows, the counts turn every replicate into histogram rows, and the kernels of
:mod:`cube_ray.aggregate._math` that already accept a count column
(:func:`trimmed_means`, :func:`pearson`) compute every replicate of every judge,
system and dimension in one grouped aggregation keyed by the replicate
(``_b``). Weights (:func:`pearson_weights`), weighted totals
(:func:`weighted_totals`) and the normalisation (:func:`normalise`) are the
aggregation's own, applied to the small per-replicate frames. Replicates are
processed in blocks that bound the joined rows (memory).

The result is laid out as arrays ``[judge, system, replicate, ...]`` so that
interval code (and a later paired comparison of two systems on the *same*
resamples) reads any judge's, system's and replicate's figure directly. The
judges are held fixed: the across-judge figure of a replicate averages the
judges the headline used and is undefined when one of them is.

Size: about 630 lines, one module on purpose: preparing the integer-coded rows,
their histogram cells and the per-replicate figures share one group-code
layout (``_g``) that splitting would spread over several files.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl
from scipy import sparse

from cube_ray import schema
from cube_ray.aggregate._math import (
    COUNT,
    FALLBACK,
    RANK_SCORE,
    TRIMMED_MEAN,
    WEIGHT,
    R,
    normalise,
    pearson,
    pearson_weights,
    rank_scores,
    trimmed_means,
    weighted_totals,
)
from cube_ray.aggregate._options import AggregateOptions
from cube_ray.errors import ConfigError

__all__ = [
    "CubeReplicates",
    "FixedWeights",
    "evaluate_replicates",
    "fixed_judge_mean",
    "k_of",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

FixedWeights = Mapping[str, Mapping[str, Mapping[str, float | None]]]
"""``judge -> system -> dimension -> weight`` as recorded in ``summary.json``."""

MIN_SPAN = 1e-9
"""``full - zero`` at or below this makes a normalised value undefined (as in
the summary)."""

BLOCK_CELLS = 4_000_000
"""Replicates are evaluated in blocks of at most about this many histogram
cells (and question counts)."""

_B, _Q, _G, _S, _J, _D, _SET, _FIG = "_b", "_q", "_g", "_s", "_j", "_d", "_set", "_f"
_SETS = ("zero", "full", "rag")
"""Set codes 0, 1, 2 of the trimmed-means frame."""


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


@dataclass
class _Tables:
    """The answers and scores as integer-keyed rows, prepared once."""

    questions: pl.Series
    """Question ids in resampling order (sorted); position = ``_q``."""
    judges: list[str]
    systems: list[str]
    dimensions: list[str]
    answers: pl.DataFrame
    """``_q, _s, hit`` of the available answers of the systems under test."""
    rag: pl.DataFrame
    """``_q, _g, rank_score, score``; ``_g = (s * J + j) * D + d``."""
    bounds: pl.DataFrame
    """``_q, _g, score``; ``_g = ((s * 2 + set) * J + j) * D + d`` (``s = 0``
    unless the bounds are paired)."""
    cells: dict[str, _Cells] = field(default_factory=dict)
    """Per table (``rag``, ``bounds``, ``answers``) its histogram cells."""


@dataclass
class _Cells:
    """The distinct rows of a table (its histogram cells) and their questions.

    A resample's histogram (its count in every cell) is ``incidence @ counts``.
    """

    values: pl.DataFrame
    """One row per cell: the group code and the value(s)."""
    incidence: sparse.csr_matrix
    """``[cells, questions]``: 1 where the question has a row in the cell."""

    @classmethod
    def of(cls, rows: pl.DataFrame, n: int, by: list[str]) -> _Cells:
        # Cells sorted by group and value, and histogram rows emitted replicate
        # by replicate in cell order: the kernels' sort finds them in order.
        values = rows.select(by).unique().sort(by).with_row_index("_c")
        cell = rows.join(values, on=by, how="left", nulls_equal=True)
        ones = np.ones(cell.height, dtype=np.float64)
        incidence = sparse.csr_matrix(
            (
                ones,
                (
                    cell.get_column("_c").to_numpy().astype(np.int64),
                    cell.get_column(_Q).to_numpy().astype(np.int64),
                ),
            ),
            shape=(values.height, n),
        )
        return cls(values.drop("_c"), incidence)

    def histogram(self, counts: npt.NDArray[np.int64], offset: int) -> pl.DataFrame:
        """``_b, <cell columns>, count`` of the resamples ``counts`` ``[b, n]``."""
        product = np.asarray(self.incidence @ counts.T.astype(np.float64)).T
        b, cell = np.nonzero(product)
        frame = self.values[cell]
        return frame.with_columns(
            pl.Series(_B, (b + offset).astype(np.int64)),
            pl.Series(COUNT, np.rint(product[b, cell]).astype(np.int64)),
        )


def _question_key(values: pl.Series) -> pl.Series:
    """Question ids as sortable, joinable values (categories as their text)."""
    if values.dtype.is_integer():
        return values.cast(pl.Int64)
    return values.cast(pl.String)


def _prepare(
    answers: pl.DataFrame,
    scores: pl.DataFrame,
    *,
    options: AggregateOptions,
    dimensions: Sequence[str] | None,
) -> _Tables:
    qid = schema.QUESTION_ID
    questions = _question_key(answers.get_column(qid)).unique().sort()
    positions = pl.DataFrame({qid: questions}).with_row_index(_Q)
    systems = sorted(
        str(s)
        for s in answers.get_column(schema.SYSTEM).cast(pl.String).unique().to_list()
        if schema.is_rag_system(str(s))
    )
    judges = sorted(
        str(j) for j in scores.get_column(schema.JUDGE).cast(pl.String).unique()
    )
    if dimensions is None:
        dimensions = (
            scores.get_column(schema.DIMENSION)
            .cast(pl.String)
            .unique(maintain_order=True)
            .to_list()
        )
    dims = list(dimensions)
    nj, nd = len(judges), len(dims)

    a = answers.with_columns(
        _question_key(answers.get_column(qid)).alias(qid),
        pl.col(schema.SYSTEM).cast(pl.String),
    )
    s = scores.with_columns(
        _question_key(scores.get_column(qid)).alias(qid),
        pl.col(schema.SYSTEM, schema.JUDGE, schema.DIMENSION).cast(pl.String),
    )
    if schema.STATUS in a.columns:
        # An answer whose status is set and not ok is an outage (CUBE_METHOD.md
        # section 10): neither a retrieval miss nor a low score.
        status = pl.col(schema.STATUS).cast(pl.String)
        failed = status.is_not_null() & (status != schema.STATUS_OK)
        s = s.join(
            a.filter(failed).select(qid, schema.SYSTEM),
            on=[qid, schema.SYSTEM],
            how="anti",
        )
        a = a.filter(~failed)
    k: int | dict[str, int] = (
        options.k
        if isinstance(options.k, int)
        else {name: k_of(options, name) for name in systems}
    )
    codes = {name: i for i, name in enumerate(systems)}
    ranked = rank_scores(
        a.filter(pl.col(schema.SYSTEM).is_in(systems)).with_columns(
            pl.col(schema.RANK).fill_null(0)
        ),
        k=k,
    ).join(positions, on=qid)
    system_code = pl.col(schema.SYSTEM).replace_strict(codes, return_dtype=pl.UInt32)
    answer_rows = ranked.select(
        _Q, system_code.alias(_S), (pl.col(schema.RANK) >= 1).alias("hit")
    )
    ok = (
        s.filter(
            pl.col(schema.SCORE).is_not_null()
            & pl.col(schema.DIMENSION).is_in(dims)
            & pl.col(schema.JUDGE).is_in(judges)
        )
        .join(positions, on=qid)
        .with_columns(
            pl.col(schema.JUDGE)
            .replace_strict(
                {j: i for i, j in enumerate(judges)}, return_dtype=pl.UInt32
            )
            .alias(_J),
            pl.col(schema.DIMENSION)
            .replace_strict({d: i for i, d in enumerate(dims)}, return_dtype=pl.UInt32)
            .alias(_D),
            pl.col(schema.SCORE).cast(pl.Float64),
        )
    )
    jd = pl.col(_J) * nd + pl.col(_D)
    rag = (
        ok.filter(pl.col(schema.SYSTEM).is_in(systems))
        .join(
            ranked.select(_Q, schema.SYSTEM, pl.col(RANK_SCORE).cast(pl.Float64)),
            on=[_Q, schema.SYSTEM],
        )
        .select(
            _Q,
            (system_code * (nj * nd) + jd).cast(pl.UInt32).alias(_G),
            RANK_SCORE,
            schema.SCORE,
        )
    )
    set_code = (
        pl.when(pl.col(schema.SYSTEM) == schema.ZERO).then(0).otherwise(1)
    ).cast(pl.UInt32)
    bound_rows = ok.filter(pl.col(schema.SYSTEM).is_in(schema.BOUND_SYSTEMS))
    if options.bounds_on == "paired":
        # Each system's bounds use the questions it retrieved.
        hits = answer_rows.filter(pl.col("hit")).select(_Q, _S)
        bound_rows = bound_rows.join(hits, on=_Q)
    else:
        bound_rows = bound_rows.with_columns(pl.lit(0, dtype=pl.UInt32).alias(_S))
    bounds = bound_rows.select(
        _Q,
        (((pl.col(_S) * 2 + set_code) * nj) * nd + jd).cast(pl.UInt32).alias(_G),
        schema.SCORE,
    )
    n = questions.len()
    cells = {
        "rag": _Cells.of(rag, n, [_G, RANK_SCORE, schema.SCORE]),
        "bounds": _Cells.of(bounds, n, [_G, schema.SCORE]),
        "answers": _Cells.of(answer_rows, n, [_S, "hit"]),
    }
    return _Tables(
        questions, judges, systems, dims, answer_rows, rag, bounds, cells=cells
    )


def _count_matrix(idx: IntArray, n: int) -> npt.NDArray[np.int64]:
    """``[B, n]`` multiplicities of the resamples ``idx`` ``[B, L]``."""
    nb = idx.shape[0]
    flat = (np.arange(nb, dtype=np.int64)[:, None] * n + idx).ravel()
    return np.bincount(flat, minlength=nb * n).reshape(nb, n)


def _block_frames(
    t: _Tables, counts: npt.NDArray[np.int64], offset: int, trim: float
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
        pearson(rag, by=[_B, _G], x=RANK_SCORE, y=schema.SCORE, count=COUNT),
        trimmed_means(
            rag.filter(pl.col(RANK_SCORE) > 0), by=[_B, _G], trim=trim, count=COUNT
        ),
        trimmed_means(bounds, by=[_B, _G], trim=trim, count=COUNT),
        answers.group_by(_B, _S).agg(
            ((count * pl.col("hit")).sum() / count.sum()).alias("recall")
        ),
    ]
    return tuple(pl.collect_all(plans))


def _blocks(
    n: int,
    cells: int,
    indices: IntArray | None,
    counts: npt.NDArray[np.integer[Any]] | None,
) -> Iterator[tuple[int, npt.NDArray[np.int64]]]:
    """``(first replicate, [b, n] count matrix)`` of each block."""
    total = (indices if indices is not None else counts).shape[0]  # type: ignore[union-attr]
    # Bound both the [b, n] counts and the [cells, b] histograms of a block.
    step = max(1, BLOCK_CELLS // max(1, cells, n))
    for start in range(0, total, step):
        if indices is not None:
            yield start, _count_matrix(indices[start : start + step], n)
        else:
            assert counts is not None
            yield start, np.asarray(counts[start : start + step], dtype=np.int64)


def _fixed_weight_rows(
    t: _Tables,
    options: AggregateOptions,
    fixed_weights: FixedWeights | None,
) -> pl.DataFrame:
    """``_s, _j, _d, weight`` of fixed (non-Pearson) weights, rescaled to 1."""
    nd = len(t.dimensions)
    rows = []
    for si, system in enumerate(t.systems):
        for ji, judge in enumerate(t.judges):
            table: Mapping[str, Any] | None = None
            if fixed_weights is not None:
                table = fixed_weights.get(judge, {}).get(system)
            elif isinstance(options.weights, Mapping):
                inner = options.weights.get(judge, options.weights)
                table = inner if isinstance(inner, Mapping) else None
            values = [float((table or {}).get(d) or 0.0) for d in t.dimensions]
            total = sum(values)
            for di in range(nd):
                w = values[di] / total if table and total > 0 else 1.0 / nd
                rows.append((si, ji, di, w))
    return pl.DataFrame(
        rows,
        schema={_S: pl.UInt32, _J: pl.UInt32, _D: pl.UInt32, WEIGHT: pl.Float64},
        orient="row",
    )


def _decode(frame: pl.DataFrame, t: _Tables, *, sets: bool) -> pl.DataFrame:
    """Split the group code ``_g`` into ``_s, [_set,] _j, _d``."""
    nj, nd = len(t.judges), len(t.dimensions)
    g = pl.col(_G).cast(pl.Int64)
    cols = [(g % nd).alias(_D), ((g // nd) % nj).alias(_J)]
    if sets:
        cols += [((g // (nd * nj)) % 2).alias(_SET), (g // (nd * nj * 2)).alias(_S)]
    else:
        cols.append((g // (nd * nj)).alias(_S))
    return frame.with_columns(cols).drop(_G)


def _grid(nb: int, t: _Tables, *extra: tuple[str, int]) -> pl.DataFrame:
    out = pl.DataFrame({_B: np.arange(nb, dtype=np.int64)})
    for name, size in (
        (_S, len(t.systems)),
        (_J, len(t.judges)),
        *extra,
        (_D, len(t.dimensions)),
    ):
        out = out.join(
            pl.DataFrame({name: np.arange(size, dtype=np.int64)}), how="cross"
        )
    return out


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
    t = _prepare(answers, scores, options=options, dimensions=dimensions)
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
        for start, block in _blocks(nq, cells, indices, counts)
    ]
    corr, tm_rag, tm_bounds, recall = (
        pl.concat([p[i] for p in parts]) for i in range(4)
    )
    return _figures(
        t, nb, corr, tm_rag, tm_bounds, recall, options, fixed_weights, judges
    )


def _figures(
    t: _Tables,
    nb: int,
    corr: pl.DataFrame,
    tm_rag: pl.DataFrame,
    tm_bounds: pl.DataFrame,
    recall: pl.DataFrame,
    options: AggregateOptions,
    fixed_weights: FixedWeights | None,
    judges: Mapping[str, Sequence[str]] | None,
) -> CubeReplicates:
    """Weights, weighted totals, normalisation and CuBE of every replicate."""
    nj, ns, nd = len(t.judges), len(t.systems), len(t.dimensions)
    i64 = [pl.col(c).cast(pl.Int64) for c in (_B,)]
    corr = _decode(corr.with_columns(i64), t, sets=False)
    grid = _grid(nb, t).join(corr, on=[_B, _S, _J, _D], how="left")
    if options.weights == "pearson":
        weights = pearson_weights(grid, by=[_B, _S, _J], r=R)
    else:
        fixed = _fixed_weight_rows(t, options, fixed_weights).with_columns(
            pl.col(_S, _J, _D).cast(pl.Int64)
        )
        weights = grid.join(fixed, on=[_S, _J, _D], how="left").with_columns(
            pl.lit(False).alias(FALLBACK)
        )

    rag = _decode(tm_rag.with_columns(i64), t, sets=False).with_columns(
        pl.lit(2, dtype=pl.Int64).alias(_SET)
    )
    bounds = _decode(tm_bounds.with_columns(i64), t, sets=True)
    if options.bounds_on != "paired":
        bounds = bounds.drop(_S).join(
            pl.DataFrame({_S: np.arange(ns, dtype=np.int64)}), how="cross"
        )
    keys = [_B, _S, _J, _SET, _D]
    trimmed = _grid(nb, t, (_SET, 3)).join(
        pl.concat(
            [rag.select(*keys, TRIMMED_MEAN), bounds.select(*keys, TRIMMED_MEAN)]
        ),
        on=keys,
        how="left",
    )
    totals = weighted_totals(
        trimmed.join(weights.select(_B, _S, _J, _D, WEIGHT), on=[_B, _S, _J, _D]),
        by=[_B, _S, _J, _SET],
    ).with_columns(pl.lit(nd, dtype=pl.Int64).alias(_D))
    figures = pl.concat(
        [trimmed.select(*keys, TRIMMED_MEAN), totals.select(*keys, TRIMMED_MEAN)]
    )
    wide = figures.pivot(on=_SET, index=[_B, _S, _J, _D], values=TRIMMED_MEAN)
    for code in ("0", "1", "2"):
        if code not in wide.columns:
            wide = wide.with_columns(pl.lit(None, dtype=pl.Float64).alias(code))
    norm = wide.with_columns(
        normalise(pl.col("2"), pl.col("0"), pl.col("1"), min_span=MIN_SPAN).alias(
            "normalized"
        )
    )
    recall = recall.with_columns(pl.col(_B, _S).cast(pl.Int64))
    cube = norm.filter(pl.col(_D) == nd).join(recall, on=[_B, _S], how="left")
    cube = cube.with_columns((pl.col("normalized") * pl.col("recall")).alias("cube"))

    jsb = (nj, ns, nb)
    trimmed_arrays = {
        name: _scatter(
            figures.filter(pl.col(_SET) == code),
            (*jsb, nd + 1),
            [_J, _S, _B, _D],
            TRIMMED_MEAN,
        )
        for code, name in enumerate(("zero", "full", "system"))
    }
    fallback = np.zeros(jsb, dtype=bool)
    fb = weights.filter(pl.col(FALLBACK)).select(_J, _S, _B).unique()
    if fb.height:
        fallback[tuple(fb.get_column(c).to_numpy() for c in (_J, _S, _B))] = True
    return CubeReplicates(
        judges=t.judges,
        systems=t.systems,
        dimensions=t.dimensions,
        recall=_scatter(recall, (ns, nb), [_S, _B], "recall"),
        correlations=_scatter(corr, (*jsb, nd), [_J, _S, _B, _D], R),
        weights=_scatter(weights, (*jsb, nd), [_J, _S, _B, _D], WEIGHT),
        equal_fallback=fallback,
        trimmed=trimmed_arrays,
        normalized=_scatter(norm, (*jsb, nd + 1), [_J, _S, _B, _D], "normalized"),
        cube=_scatter(cube, jsb, [_J, _S, _B], "cube"),
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
