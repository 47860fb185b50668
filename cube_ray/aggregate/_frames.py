"""The state of one aggregation, built once and passed explicitly.

:func:`cube_ray.aggregate.summarize` reads its two tables into frozen
dataclasses, each built by one function, and hands them to the steps that
read them (weights, figures, bound separation, assembly), which are functions:

* :class:`Inputs` (:meth:`Inputs.of`): the tables, the options, where the
  tables came from and the Polars engine;
* :class:`AnswerFrames` (:func:`answer_frames`): the systems under test, their
  ranked answers, the sets none of whose answers is usable and the outages;
* :class:`~cube_ray.aggregate._passes.ScorePasses`: the grouped passes over the
  score rows and the judges and dimensions they name;
* :class:`~cube_ray.aggregate._passes.Study`: the three together.

Also the names the steps share: figure names, flag texts and frame columns.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from cube_ray import schema
from cube_ray.aggregate._availability import unavailable_sets
from cube_ray.aggregate._math import COUNT, RANK_SCORE, rank_scores
from cube_ray.aggregate._separation import EngineType
from cube_ray.config import AggregateOptions
from cube_ray.errors import ConfigError, InputError

WEIGHTED = "weighted"
"""Figure name of the weighted total, beside the dimension names."""
CUBE = "cube"
DEGENERATE = "degenerate bounds"
OUTSIDE = "outside bounds"
UNAVAILABLE = "unavailable answers"
"""Flag of a system (or bound) whose answer rows have a status other than ok."""
NO_SEPARATED_JUDGE = "no judge separates the bounds"
"""Reason of an across-judge figure left null because every judge was excluded."""
MIN_SPAN = 1e-9
"""``full - zero`` at or below this makes a normalised value undefined."""

SET = "set"
"""Column: which answer set a trimmed mean is of (``zero``, ``full``, ``rag``)."""
VARIANT = "variant"
"""Column: the system under test whose retrieved questions a bound row uses."""
FIGURE = "figure"
"""Column: a dimension name or :data:`WEIGHTED` (or :data:`CUBE`)."""
STREAMING_ROWS = 2_000_000
"""Score tables with more rows run on Polars' streaming engine."""

ANSWER_COLUMNS = (schema.QUESTION_ID, schema.SYSTEM, schema.RANK)
SCORE_COLUMNS = (
    schema.QUESTION_ID,
    schema.SYSTEM,
    schema.JUDGE,
    schema.DIMENSION,
    schema.SCORE,
)

FLAG_ORDER = ("judge", "system", "figure", "flag")
"""Sort key of the summary's flags list."""


def strings(series: pl.Series) -> list[str]:
    """The values of ``series`` as Python strings.

    >>> strings(pl.Series(["a", "b"], dtype=pl.Categorical))
    ['a', 'b']
    """
    return [str(v) for v in series.cast(pl.String).to_list()]


def finite(value: Any) -> Any:
    """``value``, or None when it is a non-finite float (JSON has no NaN).

    The one null-for-JSON rule of the aggregation: a NumPy float comes back as
    a Python float, anything else (an int, a string, None) as it is.

    >>> finite(1.5), finite(float("nan")), finite(np.float64("inf")), finite("x")
    (1.5, None, None, 'x')
    >>> type(finite(np.float64(2.0)))
    <class 'float'>
    """
    if isinstance(value, float | np.floating):
        return float(value) if math.isfinite(value) else None
    return value


def sorted_flags(flags: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``flags`` in the summary's order, by judge, system, figure and flag.

    Group iteration order is not deterministic; the summary must be.
    """
    return sorted(
        (dict(f) for f in flags),
        key=lambda f: tuple(str(f.get(k, "")) for k in FLAG_ORDER),
    )


def _require(
    frame: pl.DataFrame, columns: Sequence[str], table: str, source: str
) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise InputError(
            f"the {table} table lacks column(s) {missing}; it has {frame.columns}. "
            "Expected the columns of CUBE_METHOD.md section 9.",
            path=source,
            field=missing[0],
        )


@dataclass(frozen=True)
class Inputs:
    """The two tables and how to read them."""

    answers: pl.DataFrame
    scores: pl.DataFrame
    options: AggregateOptions
    answers_source: str
    """Where the answers came from, named in error messages."""
    scores_source: str
    engine: EngineType
    """Polars engine of the heavy passes (streaming for very large tables)."""

    @classmethod
    def of(
        cls,
        answers: pl.DataFrame,
        scores: pl.DataFrame,
        options: AggregateOptions,
        sources: Mapping[str, str],
    ) -> Inputs:
        """The inputs, once both tables have the columns of section 9."""
        a_src = sources.get("answers", "answers table")
        s_src = sources.get("scores", "scores table")
        _require(answers, ANSWER_COLUMNS, "answers", a_src)
        _require(scores, SCORE_COLUMNS, "scores", s_src)
        engine: EngineType = (
            "streaming" if scores.height > STREAMING_ROWS else "in-memory"
        )
        return cls(answers, scores, options, a_src, s_src, engine)


@dataclass(frozen=True)
class AnswerFrames:
    """The answers of the systems under test, read once (sections 4 and 10)."""

    systems: tuple[str, ...]
    """The systems under test (``rag``, ``rag@<variant>``), sorted."""
    ranked: pl.DataFrame
    """Their available answers: ``question_id, system, rank, rank_score``."""
    failed_sets: Mapping[str, tuple[str, str]]
    """Answer sets none of whose answers is usable (``_availability``)."""
    unavailable: Mapping[str, int]
    """Per system (bounds too), its answer rows whose status is not ok."""
    answer_rows: Mapping[str, int]
    """Per system, its answer rows (only when the table has a status)."""
    unavailable_keys: pl.DataFrame | None
    """``question_id, system`` of the unavailable answers; None if there is none."""
    notes: tuple[str, ...]


def answer_frames(inputs: Inputs) -> AnswerFrames:
    """The ranked answers of the systems under test, with their checks.

    Raises:
        InputError: No system under test, a rag row without or outside its
            rank, or two answers of one question and system.
        ConfigError: ``k`` is given per system but not for every system.
    """
    answers = inputs.answers
    failed_sets = unavailable_sets(answers)
    names = strings(answers.get_column(schema.SYSTEM).unique())
    systems = tuple(sorted(s for s in names if schema.is_rag_system(s)))
    if not systems:
        raise InputError(
            "the answers table has no system under test: systems"
            f" {sorted(names)}. Expected rows whose system is 'rag' or"
            " 'rag@<variant>'.",
            path=inputs.answers_source,
            field=schema.SYSTEM,
        )
    cols = [
        c for c in (*ANSWER_COLUMNS, schema.RETRIEVED_DOC_IDS) if c in answers.columns
    ]
    down, unavailable, answer_rows, unavailable_keys = _availability(answers)
    rag = (
        answers.lazy()
        .filter(pl.col(schema.SYSTEM).cast(pl.String).is_in(list(systems)))
        .filter(~down)
        .select(cols)
    )
    notes: list[str] = []
    if schema.RETRIEVED_DOC_IDS not in answers.columns:
        notes.append(
            "answers have no retrieved_doc_ids column: no only-document bonus "
            "was given to rank_score"
        )
    k = _k(inputs.options, systems, notes)
    ranked = _ranked(rag, k, inputs.answers_source)
    return AnswerFrames(
        systems=systems,
        ranked=ranked,
        failed_sets=failed_sets,
        unavailable=unavailable,
        answer_rows=answer_rows,
        unavailable_keys=unavailable_keys,
        notes=tuple(notes),
    )


def _ranked(rag: pl.LazyFrame, k: int | dict[str, int], source: str) -> pl.DataFrame:
    """Rank scores of the rag answers; every rank within 0..k, one per question."""
    bad = rag.filter(pl.col(schema.RANK).is_null()).head(1).collect()
    if bad.height:
        row = bad.row(0, named=True)
        raise InputError(
            f"rag answer row without rank: question_id={row[schema.QUESTION_ID]!r},"
            f" system={row[schema.SYSTEM]!r}. Expected the 1-based rank of the gold"
            " document in retrieved_doc_ids, or 0 when it is absent.",
            path=source,
            field=schema.RANK,
        )
    ranked = rank_scores(rag, k=k).collect()
    too_big = ranked.filter(
        (pl.col(schema.RANK) < 0)
        | (pl.col(RANK_SCORE) < 0)
        | ((pl.col(schema.RANK) >= 1) & (pl.col(RANK_SCORE) < 2))
    )
    if too_big.height:
        row = too_big.row(0, named=True)
        system = str(row[schema.SYSTEM])
        k_sys = k[system] if isinstance(k, Mapping) else k
        raise InputError(
            f"rank {row[schema.RANK]} of question_id={row[schema.QUESTION_ID]!r},"
            f" system={system!r} is outside 0..k (k={k_sys}). Pass the retrieval"
            " depth the system used (--k, per system as name=k).",
            path=source,
            field=schema.RANK,
        )
    key = pl.struct(schema.QUESTION_ID, schema.SYSTEM)
    if ranked.select(key.is_duplicated().any()).item():
        row = ranked.filter(key.is_duplicated()).row(0, named=True)
        raise InputError(
            f"duplicate answer rows for question_id={row[schema.QUESTION_ID]!r},"
            f" system={row[schema.SYSTEM]!r}. Expected one answer per question and "
            "system (resamples need fresh question ids).",
            path=source,
            field=schema.QUESTION_ID,
        )
    return ranked


def _availability(
    answers: pl.DataFrame,
) -> tuple[pl.Expr, dict[str, int], dict[str, int], pl.DataFrame | None]:
    """Answer rows whose status says the system did not answer (section 10).

    An outage is not a miss: such rows (and their scores) are left out of
    recall@k, rank scores, weights and trimmed means, and counted per
    system. A table without a ``status`` column has no outages; a null
    status counts as answered.

    Returns:
        The expression that is true on unavailable answer rows; per system its
        unavailable rows and its answer rows; the keys of the unavailable rows
        (None when there is none).
    """
    if schema.STATUS not in answers.columns:
        return pl.lit(False), {}, {}, None
    status = pl.col(schema.STATUS).cast(pl.String)
    down = status.is_not_null() & (status != schema.STATUS_OK)
    per_system = (
        answers.lazy()
        .group_by(pl.col(schema.SYSTEM).cast(pl.String))
        .agg(pl.len().alias(COUNT), down.sum().alias("down"))
        .sort(schema.SYSTEM)
        .collect()
    )
    answer_rows = dict(zip(per_system[schema.SYSTEM], per_system[COUNT], strict=True))
    unavailable = {
        str(s): int(n)
        for s, n in zip(per_system[schema.SYSTEM], per_system["down"], strict=True)
    }
    keys = (
        answers.lazy().filter(down).select(schema.QUESTION_ID, schema.SYSTEM).collect()
        if any(unavailable.values())
        else None
    )
    return down, unavailable, answer_rows, keys


def _k(
    options: AggregateOptions, systems: Sequence[str], notes: list[str]
) -> int | dict[str, int]:
    """The retrieval depth, one or per system; notes k of systems without answers."""
    k = options.k
    if isinstance(k, int):
        return k
    unknown = sorted(set(k) - set(systems))
    missing = sorted(set(systems) - set(k))
    if missing:
        raise ConfigError(
            f"k is given per system but not for {missing} (systems under test:"
            f" {list(systems)}). Give one k per system, or a single k for all."
        )
    if unknown:
        notes.append(f"k given for systems without answers: {unknown}")
    return {name: k[name] for name in systems}
