"""Read and validate the answers and scores interchange tables (CUBE_METHOD.md §9).

A table is one Parquet file or a directory of Parquet files (searched
recursively, read in sorted order). Columns are checked against
:data:`cube_ray.schema.ANSWERS_SCHEMA` / :data:`cube_ray.schema.SCORES_SCHEMA`;
extra columns are allowed and kept. Every problem raises
:class:`~cube_ray.errors.InputError` naming the file, the row, the column, what
was expected and how to fix it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from cube_ray import schema
from cube_ray.errors import InputError, Place

__all__ = [
    "parquet_files",
    "read_answers",
    "read_scores",
    "validate_answers",
    "validate_scores",
]

_ANSWER_KEY = (schema.QUESTION_ID, schema.SYSTEM)
_SCORE_KEY = (schema.QUESTION_ID, schema.SYSTEM, schema.JUDGE, schema.DIMENSION)
_LEAN_SKIP = (schema.ANSWER, schema.RAW)
"""Columns a lean read leaves null: texts the aggregation never looks at."""
_LEAN_KEYS = (
    schema.QUESTION_ID,
    schema.DOC_ID,
    schema.SYSTEM,
    schema.JUDGE,
    schema.DIMENSION,
    schema.STATUS,
)
"""String columns a lean read makes categorical."""
_ROW = "__row"


def parquet_files(path: str | os.PathLike[str]) -> list[Path]:
    """The Parquet file(s) a table path stands for.

    Args:
        path: A Parquet file, or a directory searched recursively for
            ``*.parquet`` files.

    Returns:
        The files, sorted.

    Raises:
        InputError: The path does not exist or the directory holds no Parquet
            file.
    """
    p = Path(path)
    if p.is_dir():
        # Hidden files (".tmp-part-*" being written, or left by a crash) are
        # never complete tables.
        files = sorted(
            f
            for f in p.rglob("*.parquet")
            if f.is_file()
            and not any(part.startswith(".") for part in f.relative_to(p).parts)
        )
        if not files:
            raise InputError(
                "the directory holds no .parquet file. Expected a Parquet file or a "
                "directory of Parquet files (e.g. RUN_DIR/answers).",
                path=str(p),
            )
        return files
    if not p.exists():
        raise InputError(
            "no such file or directory. Expected a Parquet file or a directory of "
            "Parquet files.",
            path=str(p),
        )
    return [p]


def _read(path: Path, lean: pa.Schema | None = None) -> pl.DataFrame:
    """Read one file; with ``lean``, only that schema's columns plus ``status``.

    Lean reads are for the aggregation, which needs neither texts nor token
    counts: the answer text and the judge's raw output are read as all-null,
    and the string keys become categoricals (4 bytes a row instead of a
    16-byte string view), which keeps the driver's memory to keys and scores
    on multi-million-row runs.
    """
    try:
        if lean is None:
            return read_parquet_file(path)
        present = set(pq.read_schema(path).names)
        wanted = [f.name for f in lean if f.name not in _LEAN_SKIP]
        if schema.STATUS not in wanted:
            wanted.append(schema.STATUS)
        df = read_parquet_file(path, columns=[c for c in wanted if c in present])
        missing = [c for c in _LEAN_SKIP if c in lean.names and c in present]
        return df.with_columns(
            *(pl.lit(None, pl.String).alias(c) for c in missing),
            *(pl.col(c).cast(pl.Categorical) for c in _LEAN_KEYS if c in df.columns),
        )
    except Exception as exc:  # polars/pyarrow/OS errors all mean "unreadable"
        raise InputError(
            f"cannot be read as Parquet ({type(exc).__name__}: {exc}). Expected a "
            f"Parquet file. {UNREADABLE_FIX}",
            path=str(path),
        ) from None


UNREADABLE_FIX = (
    "If it is a part file of a cube-ray run dir, rerun the same `cube-ray run "
    "CONFIG --out RUN_DIR`: it sets damaged part files aside (*.corrupt-*) and "
    "recomputes their rows; otherwise re-export the table with pyarrow or polars."
)
"""The fix for a table file that does not read (damaged bytes, truncation, a
page checksum mismatch)."""


def read_parquet_file(path: Path, columns: list[str] | None = None) -> pl.DataFrame:
    """One Parquet file as a DataFrame, page checksums verified when present.

    Part files of a run dir carry page checksums (``write_page_checksum``), so
    a bit flipped on disk is an error here instead of a changed score.
    """
    table = pq.read_table(path, columns=columns, page_checksum_verification=True)
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return frame


def read_answers(path: str | os.PathLike[str], *, lean: bool = False) -> pl.DataFrame:
    """Read and validate an answers table.

    Args:
        path: A Parquet file or a directory of Parquet files.
        lean: Read only what the aggregation needs: the schema's columns and
            ``status``, with the answer text as nulls.

    Returns:
        The rows of every file, with the schema's columns in the schema's types
        (extra columns kept).

    Raises:
        InputError: Unreadable file, missing or mistyped column, bad value,
            duplicate (question_id, system) rows, no zero/full/rag rows.
    """
    return _read_table(
        path, validate_answers, _ANSWER_KEY, schema.ANSWERS_SCHEMA if lean else None
    )


def read_scores(path: str | os.PathLike[str], *, lean: bool = False) -> pl.DataFrame:
    """Read and validate a scores table.

    Args:
        path: A Parquet file or a directory of Parquet files.
        lean: Read only the schema's columns and ``status``.

    Returns:
        The rows of every file, with the schema's columns in the schema's types
        (extra columns kept).

    Raises:
        InputError: Unreadable file, missing or mistyped column, score outside
            0..10, duplicate (question_id, system, judge, dimension) rows, no
            zero/full rows.
    """
    return _read_table(
        path, validate_scores, _SCORE_KEY, schema.SCORES_SCHEMA if lean else None
    )


def _read_table(
    path: str | os.PathLike[str],
    validate: Any,
    key: Sequence[str],
    lean: pa.Schema | None = None,
) -> pl.DataFrame:
    files = parquet_files(path)
    if len(files) == 1:
        result: pl.DataFrame = validate(_read(files[0], lean), source=str(files[0]))
        return result
    frames = [(f, validate(_read(f, lean), source=str(f), whole=False)) for f in files]
    combined = pl.concat([df for _, df in frames], how="diagonal_relaxed")
    try:
        _check_duplicates(combined, key, source=str(path))
    except InputError:
        _locate_duplicate(frames, combined, key)
        raise
    result = validate(combined, source=str(path), whole_only=True)
    return result


# --- column checks ------------------------------------------------------------
def _accepts(dtype: Any, arrow: pa.DataType) -> bool:
    if dtype == pl.Null:
        return True
    if pa.types.is_string(arrow) or pa.types.is_large_string(arrow):
        return isinstance(dtype, (pl.String, pl.Categorical, pl.Enum))
    if pa.types.is_integer(arrow):
        return bool(dtype.is_integer())
    if pa.types.is_floating(arrow):
        return bool(dtype.is_float() or dtype.is_integer())
    if pa.types.is_list(arrow) or pa.types.is_large_list(arrow):
        return isinstance(dtype, pl.List) and (
            dtype.inner == pl.Null or _accepts(dtype.inner, arrow.value_type)
        )
    return False


def _target(dtype: pl.DataType, arrow: pa.DataType) -> pl.DataType:
    if pa.types.is_string(arrow) or pa.types.is_large_string(arrow):
        # Categorical/Enum keys are kept: they make large tables cheaper.
        return pl.String() if dtype == pl.Null else dtype
    if pa.types.is_int32(arrow):
        return pl.Int32()
    if pa.types.is_floating(arrow):
        return pl.Float64()
    if pa.types.is_list(arrow) or pa.types.is_large_list(arrow):
        return pl.List(pl.String)
    return dtype


def _describe(arrow: pa.DataType) -> str:
    if pa.types.is_integer(arrow):
        return "an integer column (int32)"
    if pa.types.is_floating(arrow):
        return "a float64 column"
    if pa.types.is_list(arrow):
        return "a list<string> column"
    return "a string column"


def _example(df: pl.DataFrame, mask: pl.Expr) -> tuple[int, dict[str, Any]] | None:
    """Row number and key values of the first row where ``mask`` holds."""
    hit = df.lazy().with_row_index(_ROW).filter(mask).head(1).collect()
    if not hit.height:
        return None
    row = hit.row(0, named=True)
    index = int(row.pop(_ROW))
    return index, row


def _fmt(row: dict[str, Any], columns: Sequence[str]) -> str:
    return ", ".join(f"{c}={row.get(c)!r}" for c in columns if c in row)


def _check_columns(
    df: pl.DataFrame, table_schema: pa.Schema, *, table: str, source: str
) -> pl.DataFrame:
    missing = [f.name for f in table_schema if f.name not in df.columns]
    if missing:
        raise InputError(
            f"the {table} table lacks column(s) {missing}; it has {df.columns}. "
            f"Expected the {table} columns {table_schema.names} (CUBE_METHOD.md §9); "
            "add the missing column(s).",
            path=source,
            field=missing[0],
        )
    casts = []
    for field in table_schema:
        dtype = df.schema[field.name]
        if not _accepts(dtype, field.type):
            found = _example(df, pl.col(field.name).is_not_null())
            example = (
                f"; e.g. {Place(found[0])} has {field.name}={found[1][field.name]!r}"
                if found
                else ""
            )
            raise InputError(
                f"column {field.name!r} has type {dtype}{example}. Expected "
                f"{_describe(field.type)}; convert the column before writing.",
                path=source,
                field=field.name,
            )
        target = _target(dtype, field.type)
        if dtype != target:
            casts.append(pl.col(field.name).cast(target))
    try:
        return df.with_columns(casts) if casts else df
    except pl.exceptions.PolarsError as exc:
        raise InputError(
            f"a column does not fit the schema type: {exc}", path=source
        ) from None


def _check_not_null(
    df: pl.DataFrame, table_schema: pa.Schema, key: Sequence[str], *, source: str
) -> None:
    for field in table_schema:
        if field.nullable:
            continue
        found = _example(df, pl.col(field.name).is_null())
        if found:
            raise InputError(
                f"{field.name} is null ({_fmt(found[1], key)}). Expected a value in "
                "every row.",
                path=source,
                row=found[0],
                field=field.name,
            )


def _check_systems(df: pl.DataFrame, key: Sequence[str], *, source: str) -> None:
    name = pl.col(schema.SYSTEM).cast(pl.String)
    ok = (
        name.is_in(schema.BOUND_SYSTEMS)
        | (name == schema.RAG)
        | name.str.starts_with(schema.RAG + "@")
    )
    found = _example(df, ~ok)
    if found:
        raise InputError(
            f"unknown system {found[1][schema.SYSTEM]!r} ({_fmt(found[1], key)}). "
            "Expected 'zero', 'full', 'rag' or 'rag@<variant>'.",
            path=source,
            row=found[0],
            field=schema.SYSTEM,
        )


def _check_bounds_present(df: pl.DataFrame, *, table: str, source: str) -> None:
    systems = set(df.get_column(schema.SYSTEM).cast(pl.String).unique().to_list())
    for bound in schema.BOUND_SYSTEMS:
        if bound not in systems:
            raise InputError(
                f"the {table} table has no rows of system {bound!r} (systems: "
                f"{sorted(systems)}). Expected the zero- and full-score bound sets; "
                "produce them with `cube-ray run` (answer sets zero and full).",
                path=source,
                field=schema.SYSTEM,
            )


def _first_duplicate(
    df: pl.DataFrame, key: Sequence[str]
) -> tuple[int, dict[str, Any]] | None:
    """Row number and key of the first row whose key occurs more than once.

    Hashes the key to one u64 per row and sorts them: 8 bytes a row, where a
    hash set of the key structs took about 160 bytes a row (2 GB at 12M
    score rows). Only rows whose hash repeats are compared exactly, so a
    hash collision is never reported as a duplicate.

    >>> df = pl.DataFrame({"q": ["a", "b", "a"], "s": ["x", "x", "x"]})
    >>> _first_duplicate(df, ["q", "s"])
    (0, {'q': 'a', 's': 'x'})
    >>> _first_duplicate(df.head(2), ["q", "s"]) is None
    True
    """
    if df.height < 2:
        return None
    hashes = df.select(pl.struct(list(key)).hash(seed=0)).to_series()
    ordered = hashes.sort()
    repeated = ordered.filter(ordered == ordered.shift(1)).unique()
    if repeated.is_empty():
        return None
    suspects = (
        df.select(list(key))
        .with_row_index(_ROW)
        .filter(hashes.is_in(repeated.implode()))
    )
    hit = suspects.filter(pl.struct(list(key)).is_duplicated()).head(1)
    if not hit.height:
        return None  # a hash collision, not a duplicate
    row = hit.row(0, named=True)
    index = int(row.pop(_ROW))
    return index, row


def _check_duplicates(df: pl.DataFrame, key: Sequence[str], *, source: str) -> None:
    found = _first_duplicate(df, key)
    if found is None:
        return
    raise InputError(
        f"duplicate rows for ({_fmt(found[1], key)}). Expected one row per "
        f"({', '.join(key)}); drop or merge the duplicates.",
        path=source,
        row=found[0],
        field=key[0],
    )


def _locate_duplicate(
    frames: list[tuple[Path, pl.DataFrame]],
    combined: pl.DataFrame,
    key: Sequence[str],
) -> None:
    """Re-raise a duplicate found across files, naming both files."""
    found = _first_duplicate(combined, key)
    assert found is not None
    values = found[1]
    where = []
    for path, df in frames:
        mask = pl.all_horizontal(
            pl.col(c).cast(pl.String) == str(values[c]) for c in key
        )
        hit = _example(df, mask)
        if hit:
            where.append(f"{path} {Place(hit[0])}")
    raise InputError(
        f"duplicate rows for ({_fmt(values, key)}) in {' and '.join(where)}. "
        f"Expected one row per ({', '.join(key)}); drop or merge the duplicates "
        "(in a run dir that two runs wrote at once, rerunning its `cube-ray run "
        "CONFIG --out RUN_DIR` keeps one row per key).",
        path=str(frames[0][0].parent),
        field=key[0],
    )


# --- the two tables -----------------------------------------------------------
def validate_answers(
    df: pl.DataFrame,
    *,
    source: str,
    whole: bool = True,
    whole_only: bool = False,
) -> pl.DataFrame:
    """Validate an in-memory answers table.

    Args:
        df: The table.
        source: Where it comes from (a file name, or e.g. ``"answers stage"``),
            named in error messages.
        whole: Also run the checks that need the whole table (duplicates,
            presence of zero/full/rag rows).
        whole_only: Run only those whole-table checks (internal).

    Returns:
        The table with the schema's columns cast to the schema's types.

    Raises:
        InputError: Missing or mistyped column, null key, unknown system, rag row
            without rank or with a negative rank, duplicate (question_id,
            system), no zero/full/rag rows.
    """
    if not whole_only:
        df = _check_columns(df, schema.ANSWERS_SCHEMA, table="answers", source=source)
        _check_not_null(df, schema.ANSWERS_SCHEMA, _ANSWER_KEY, source=source)
        _check_systems(df, _ANSWER_KEY, source=source)
        name = pl.col(schema.SYSTEM).cast(pl.String)
        is_rag = (name == schema.RAG) | name.str.starts_with(schema.RAG + "@")
        found = _example(df, is_rag & pl.col(schema.RANK).is_null())
        if found:
            raise InputError(
                f"rag answer row without rank ({_fmt(found[1], _ANSWER_KEY)}). "
                "Expected the 1-based position of the gold doc_id in "
                "retrieved_doc_ids, or 0 when it is absent.",
                path=source,
                row=found[0],
                field=schema.RANK,
            )
        found = _example(df, pl.col(schema.RANK) < 0)
        if found:
            raise InputError(
                f"negative rank {found[1][schema.RANK]} "
                f"({_fmt(found[1], _ANSWER_KEY)}). Expected 0 (missed) or a 1-based "
                "position.",
                path=source,
                row=found[0],
                field=schema.RANK,
            )
    if whole or whole_only:
        if not whole_only:
            _check_duplicates(df, _ANSWER_KEY, source=source)
        _check_bounds_present(df, table="answers", source=source)
        names = df.get_column(schema.SYSTEM).cast(pl.String).unique().to_list()
        if not any(schema.is_rag_system(str(s)) for s in names):
            raise InputError(
                f"the answers table has no system under test (systems: "
                f"{sorted(names)}). Expected rows whose system is 'rag' or "
                "'rag@<variant>'.",
                path=source,
                field=schema.SYSTEM,
            )
    return df


def validate_scores(
    df: pl.DataFrame,
    *,
    source: str,
    whole: bool = True,
    whole_only: bool = False,
) -> pl.DataFrame:
    """Validate an in-memory scores table.

    Args:
        df: The table.
        source: Where it comes from, named in error messages.
        whole: Also run the checks that need the whole table (duplicates,
            presence of zero/full rows).
        whole_only: Run only those whole-table checks (internal).

    Returns:
        The table with the schema's columns cast to the schema's types.

    Raises:
        InputError: Missing or mistyped column, null key or status, unknown
            system, score outside 0..10 (or NaN), duplicate (question_id,
            system, judge, dimension), no zero/full rows.
    """
    if not whole_only:
        df = _check_columns(df, schema.SCORES_SCHEMA, table="scores", source=source)
        _check_not_null(df, schema.SCORES_SCHEMA, _SCORE_KEY, source=source)
        _check_systems(df, _SCORE_KEY, source=source)
        score = pl.col(schema.SCORE)
        found = _example(
            df, score.is_not_null() & (score.is_nan() | ~score.is_between(0.0, 10.0))
        )
        if found:
            raise InputError(
                f"score {found[1][schema.SCORE]} outside 0..10 "
                f"({_fmt(found[1], _SCORE_KEY)}). Expected a number from 0 to 10, or "
                "null (with a status saying why) for a missing score.",
                path=source,
                row=found[0],
                field=schema.SCORE,
            )
    if whole or whole_only:
        if not whole_only:
            _check_duplicates(df, _SCORE_KEY, source=source)
        _check_bounds_present(df, table="scores", source=source)
    return df
