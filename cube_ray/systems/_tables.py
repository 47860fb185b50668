"""Reading user-supplied tables (Parquet, CSV, JSONL) with clear input errors."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from cube_ray.errors import InputError, Place

__all__ = ["as_text", "parse_doc_ids", "read_rows", "require_columns"]

_PARQUET = (".parquet", ".pq")
_CSV = (".csv", ".tsv")
_JSONL = (".jsonl", ".ndjson", ".json")


Rows = Iterable[tuple[Place, dict[str, Any]]]
"""Records with the place of each in its file (for error messages)."""


def read_rows(path: str | Path, *, what: str) -> tuple[list[str], Rows]:
    """Read a Parquet file or directory, a CSV/TSV file or a JSONL file as rows.

    CSV values are read as strings (ids keep their leading zeros). Each row
    comes with its :class:`~cube_ray.errors.Place`: the 1-based line of a JSON
    Lines or CSV record (the header is line 1), the 1-based row otherwise.

    Args:
        path: The file (or a directory of Parquet files).
        what: What the file holds, for error messages (``"QA file"``).

    Returns:
        The column names (in file order) and the ``(place, row)`` pairs, rows as
        dicts; Parquet and CSV rows are made one at a time from the columnar
        table (large files).

    Raises:
        InputError: If the file is missing, has an unknown suffix or cannot be parsed.
    """
    import polars as pl  # not in every Ray worker that imports the configs

    p = Path(path)
    if not p.exists():
        msg = f"{what} not found; check the path in your config"
        raise InputError(msg, path=str(p))
    suffix = p.suffix.lower()
    try:
        if p.is_dir():
            files = sorted(
                f for f in p.rglob("*.parquet") if not f.name.startswith((".", "_"))
            )
            if not files:
                msg = f"{what} is a directory without .parquet files"
                raise InputError(msg, path=str(p))
            df = pl.concat([pl.read_parquet(f) for f in files], how="diagonal_relaxed")
            return df.columns, _numbered(df.iter_rows(named=True))
        if suffix in _PARQUET:
            df = pl.read_parquet(p)
            return df.columns, _numbered(df.iter_rows(named=True))
        if suffix in _CSV:
            separator = "\t" if suffix == ".tsv" else ","
            df = pl.read_csv(p, infer_schema=False, separator=separator)
            # lazy: loads yaml, which importing _tables does not
            from cube_ray.corpus import csv_record_lines

            # Should Python's csv split records otherwise than Polars, the
            # rows past the last line it found fall back to 1-based rows.
            lines = itertools.chain(
                csv_record_lines(p, delimiter=separator), itertools.repeat(None)
            )
            return df.columns, (
                (Place(i, line=line), row)
                for i, (line, row) in enumerate(
                    zip(lines, df.iter_rows(named=True), strict=False)
                )
            )
        if suffix in _JSONL:
            return _read_jsonl(p, what=what)
    except InputError:
        raise
    except Exception as exc:
        msg = f"cannot read {what}: {exc}"
        raise InputError(msg, path=str(p)) from exc
    msg = (
        f"{what} has suffix {suffix!r}; expected one of "
        f"{', '.join(_PARQUET + _CSV + _JSONL)}"
    )
    raise InputError(msg, path=str(p))


def _numbered(rows: Iterable[dict[str, Any]]) -> Rows:
    return ((Place(i), row) for i, row in enumerate(rows))


def _read_jsonl(path: Path, *, what: str) -> tuple[list[str], Rows]:
    # Line by line, so that a bad line is reported with its number and values of
    # mixed types (ids as int in one row, str in another) do not break inference.
    rows: list[tuple[Place, dict[str, Any]]] = []
    columns: dict[str, None] = {}
    with path.open("rb") as fh:
        is_array = fh.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"[")
    if is_array:  # one JSON array of objects (a .json file), not JSON Lines
        try:
            data = json.loads(path.read_text(encoding="utf-8-sig"))
        except json.JSONDecodeError as exc:
            msg = f"{what}: the JSON array is not valid JSON ({exc.msg}); fix it"
            raise InputError(msg, path=str(path), line=exc.lineno) from None
        items = data if isinstance(data, list) else [data]
        for i, obj in enumerate(items):
            if not isinstance(obj, dict):
                msg = f"{what}: item {i + 1} is a {type(obj).__name__}, not an object"
                raise InputError(msg, path=str(path), row=i)
            columns.update(dict.fromkeys(obj))
            rows.append((Place(i), obj))
        return list(columns), rows
    with path.open(encoding="utf-8-sig") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                msg = (
                    f"{what}: not valid JSON ({exc.msg} at column {exc.colno}); "
                    "write one JSON object per line"
                )
                raise InputError(msg, path=str(path), line=lineno) from None
            if not isinstance(obj, dict):
                msg = f"{what}: line holds a {type(obj).__name__}, expected an object"
                raise InputError(msg, path=str(path), line=lineno)
            columns.update(dict.fromkeys(obj))
            rows.append((Place(len(rows), line=lineno), obj))
    return list(columns), rows


def require_columns(
    present: list[str], columns: list[str], *, path: str, what: str
) -> None:
    """Raise an InputError naming the missing and the present columns."""
    missing = [c for c in columns if c not in present]
    if missing:
        msg = (
            f"{what} lacks column(s) {missing}; present: {present}. Rename the "
            "columns or set the matching *_field option in the config"
        )
        raise InputError(msg, path=path, field=missing[0])


def parse_doc_ids(
    value: object, *, path: str, row: int | Place, field: str
) -> list[str]:
    """Ranked doc ids from a list, a JSON list string or a comma-separated string.

    >>> parse_doc_ids('["d1", "d2"]', path="f", row=0, field="r")
    ['d1', 'd2']
    >>> parse_doc_ids("d1, d2,,d3", path="f", row=0, field="r")
    ['d1', 'd2', 'd3']
    >>> parse_doc_ids(None, path="f", row=0, field="r")
    []
    """
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        items: list[object] = list(value)
    elif isinstance(value, str):
        text = value.strip()
        if not text:
            return []
        if text.startswith("["):
            try:
                parsed = json.loads(text)
            except json.JSONDecodeError as exc:
                msg = (
                    f"retrieved ids {text[:60]!r} start with '[' but are not valid "
                    f'JSON ({exc.msg}); write a JSON list such as ["d1", "d2"] '
                    "or a comma-separated string d1,d2"
                )
                raise InputError(msg, path=path, row=row, field=field) from exc
            if not isinstance(parsed, list):
                msg = "retrieved ids must be a JSON list"
                raise InputError(msg, path=path, row=row, field=field)
            items = parsed
        else:
            items = [part for part in text.split(",")]
    elif isinstance(value, (int, float)):
        items = [value]
    else:
        msg = (
            f"retrieved ids have type {type(value).__name__}; expected a list of "
            "ids, a JSON list string or a comma-separated string"
        )
        raise InputError(msg, path=path, row=row, field=field)
    out: list[str] = []
    for item in items:
        if item is None:
            continue
        if isinstance(item, (dict, list)):
            msg = f"retrieved id {item!r} is not a string or number"
            raise InputError(msg, path=path, row=row, field=field)
        s = str(item).strip()
        if s:
            out.append(s)
    return out


def as_text(value: object, *, path: str, row: int | Place, field: str) -> str | None:
    """A scalar cell as text (ids may be numbers); None stays None.

    >>> as_text(12, path="f", row=0, field="id")
    '12'
    >>> as_text(" a ", path="f", row=0, field="id")
    'a'
    """
    if value is None:
        return None
    if isinstance(value, (bool, dict, list, tuple)):
        msg = f"value {value!r} is not a string or number"
        raise InputError(msg, path=path, row=row, field=field)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value).strip()
