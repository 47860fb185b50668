"""The bootstrap's rows: answers and scores as integer-coded rows and cells.

The group-code layout of the bootstrap, in one place: :func:`prepare` codes
the rows of the systems under test (``_g = (s * J + j) * D + d``) and of the
bounds (``_g = ((s * 2 + set) * J + j) * D + d``) and finds each table's
histogram cells (:class:`Cells`); :func:`decode` splits a group code back into
its system, set, judge and dimension, and :func:`code_grid` lists every code.
:func:`blocks` cuts the resamples into blocks that bound memory.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl
from scipy import sparse

from cube_ray import schema
from cube_ray.aggregate._math import COUNT, RANK_SCORE, rank_scores
from cube_ray.config import AggregateOptions
from cube_ray.errors import ConfigError

__all__ = [
    "BLOCK_CELLS",
    "DCODE",
    "GROUP",
    "JCODE",
    "QPOS",
    "REP",
    "SCODE",
    "SETCODE",
    "Cells",
    "CodedTables",
    "blocks",
    "code_grid",
    "decode",
    "k_of",
    "prepare",
    "scored_by_judge",
    "scored_dimensions",
]


def scored_dimensions(
    scores: pl.DataFrame, dimensions: Sequence[str] | None
) -> list[str]:
    """``dimensions`` as given, else those of ``scores`` in their first order.

    >>> scored_dimensions(pl.DataFrame({"dimension": ["b", "a", "b"]}), None)
    ['b', 'a']
    >>> scored_dimensions(pl.DataFrame({"dimension": ["b"]}), ("a",))
    ['a']
    """
    if dimensions is not None:
        return list(dimensions)
    column = scores.get_column(schema.DIMENSION).cast(pl.String)
    return [str(d) for d in column.unique(maintain_order=True).to_list()]


def scored_by_judge(
    scores: pl.DataFrame, dimensions: Sequence[str]
) -> dict[str, list[str]]:
    """Per judge, the ``dimensions`` it has score rows of (what equal weights weigh).

    >>> scored_by_judge(pl.DataFrame({"judge": ["j", "k"], "dimension": ["a", "c"]}),
    ...                 ["a", "b"])
    {'j': ['a']}
    """
    by_judge = (
        scores.filter(pl.col(schema.DIMENSION).cast(pl.String).is_in(list(dimensions)))
        .group_by(pl.col(schema.JUDGE).cast(pl.String))
        .agg(pl.col(schema.DIMENSION).cast(pl.String).unique())
    )
    return {str(j): [str(d) for d in ds] for j, ds in by_judge.iter_rows()}


IntArray = npt.NDArray[np.int64]

BLOCK_CELLS = 4_000_000
"""Replicates are evaluated in blocks of at most about this many histogram
cells (and question counts)."""

REP = "_b"
"""Column: the replicate (resample) number."""
QPOS = "_q"
"""Column: a question's position in the sorted question ids."""
GROUP = "_g"
"""Column: the group code of a row (module docstring)."""
SCODE, JCODE, DCODE = "_s", "_j", "_d"
"""Columns: system, judge and dimension codes (positions in their lists)."""
SETCODE = "_set"
"""Column: the set code, 0 zero, 1 full, 2 the system under test."""


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


@dataclass
class CodedTables:
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
    cells: dict[str, Cells] = field(default_factory=dict)
    """Per table (``rag``, ``bounds``, ``answers``) its histogram cells."""
    scored: dict[str, list[str]] | None = None
    """Per judge, the dimensions it scored (what ``equal`` weights weigh);
    None unless the weights are ``equal``."""


@dataclass
class Cells:
    """The distinct rows of a table (its histogram cells) and their questions.

    A resample's histogram (its count in every cell) is ``incidence @ counts``.
    """

    values: pl.DataFrame
    """One row per cell: the group code and the value(s)."""
    incidence: sparse.csr_matrix
    """``[cells, questions]``: 1 where the question has a row in the cell."""

    @classmethod
    def of(cls, rows: pl.DataFrame, n: int, by: list[str]) -> Cells:
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
                    cell.get_column(QPOS).to_numpy().astype(np.int64),
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
            pl.Series(REP, (b + offset).astype(np.int64)),
            pl.Series(COUNT, np.rint(product[b, cell]).astype(np.int64)),
        )


def _question_key(values: pl.Series) -> pl.Series:
    """Question ids as sortable, joinable values (categories as their text)."""
    if values.dtype.is_integer():
        return values.cast(pl.Int64)
    return values.cast(pl.String)


def prepare(
    answers: pl.DataFrame,
    scores: pl.DataFrame,
    *,
    options: AggregateOptions,
    dimensions: Sequence[str] | None,
) -> CodedTables:
    qid = schema.QUESTION_ID
    questions = _question_key(answers.get_column(qid)).unique().sort()
    positions = pl.DataFrame({qid: questions}).with_row_index(QPOS)
    systems = sorted(
        str(s)
        for s in answers.get_column(schema.SYSTEM).cast(pl.String).unique().to_list()
        if schema.is_rag_system(str(s))
    )
    judges = sorted(
        str(j) for j in scores.get_column(schema.JUDGE).cast(pl.String).unique()
    )
    dims = scored_dimensions(scores, dimensions)
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
        QPOS, system_code.alias(SCODE), (pl.col(schema.RANK) >= 1).alias("hit")
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
            .alias(JCODE),
            pl.col(schema.DIMENSION)
            .replace_strict({d: i for i, d in enumerate(dims)}, return_dtype=pl.UInt32)
            .alias(DCODE),
            pl.col(schema.SCORE).cast(pl.Float64),
        )
    )
    jd = pl.col(JCODE) * nd + pl.col(DCODE)
    rag = (
        ok.filter(pl.col(schema.SYSTEM).is_in(systems))
        .join(
            ranked.select(QPOS, schema.SYSTEM, pl.col(RANK_SCORE).cast(pl.Float64)),
            on=[QPOS, schema.SYSTEM],
        )
        .select(
            QPOS,
            (system_code * (nj * nd) + jd).cast(pl.UInt32).alias(GROUP),
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
        hits = answer_rows.filter(pl.col("hit")).select(QPOS, SCODE)
        bound_rows = bound_rows.join(hits, on=QPOS)
    else:
        bound_rows = bound_rows.with_columns(pl.lit(0, dtype=pl.UInt32).alias(SCODE))
    bounds = bound_rows.select(
        QPOS,
        (((pl.col(SCODE) * 2 + set_code) * nj) * nd + jd).cast(pl.UInt32).alias(GROUP),
        schema.SCORE,
    )
    n = questions.len()
    cells = {
        "rag": Cells.of(rag, n, [GROUP, RANK_SCORE, schema.SCORE]),
        "bounds": Cells.of(bounds, n, [GROUP, schema.SCORE]),
        "answers": Cells.of(answer_rows, n, [SCODE, "hit"]),
    }
    scored = scored_by_judge(s, dims) if options.weights == "equal" else None
    return CodedTables(
        questions,
        judges,
        systems,
        dims,
        answer_rows,
        rag,
        bounds,
        cells=cells,
        scored=scored,
    )


def count_matrix(idx: IntArray, n: int) -> npt.NDArray[np.int64]:
    """``[B, n]`` multiplicities of the resamples ``idx`` ``[B, L]``."""
    nb = idx.shape[0]
    flat = (np.arange(nb, dtype=np.int64)[:, None] * n + idx).ravel()
    return np.bincount(flat, minlength=nb * n).reshape(nb, n)


def blocks(
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
            yield start, count_matrix(indices[start : start + step], n)
        else:
            assert counts is not None
            yield start, np.asarray(counts[start : start + step], dtype=np.int64)


def decode(frame: pl.DataFrame, t: CodedTables, *, sets: bool) -> pl.DataFrame:
    """Split the group code ``_g`` into ``_s, [_set,] _j, _d``."""
    nj, nd = len(t.judges), len(t.dimensions)
    g = pl.col(GROUP).cast(pl.Int64)
    cols = [(g % nd).alias(DCODE), ((g // nd) % nj).alias(JCODE)]
    if sets:
        cols += [
            ((g // (nd * nj)) % 2).alias(SETCODE),
            (g // (nd * nj * 2)).alias(SCODE),
        ]
    else:
        cols.append((g // (nd * nj)).alias(SCODE))
    return frame.with_columns(cols).drop(GROUP)


def code_grid(
    nb: int, ns: int, nj: int, nd: int, *, sets: bool = False
) -> pl.DataFrame:
    """Every ``_b, _s, _j, [_set,] _d`` of ``nb`` replicates (Int64 codes).

    ``ns``, ``nj`` and ``nd`` systems, judges and dimensions; with ``sets``
    the three set codes (0 zero, 1 full, 2 the system under test).

    >>> code_grid(1, 1, 2, 1).rows()
    [(0, 0, 0, 0), (0, 0, 1, 0)]
    """
    out = pl.DataFrame({REP: np.arange(nb, dtype=np.int64)})
    for name, size in (
        (SCODE, ns),
        (JCODE, nj),
        *([(SETCODE, 3)] if sets else []),
        (DCODE, nd),
    ):
        out = out.join(
            pl.DataFrame({name: np.arange(size, dtype=np.int64)}), how="cross"
        )
    return out
