"""Bring your own questions: a question file replaces question generation."""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from cube_ray import schema
from cube_ray.errors import InputError, Place
from cube_ray.systems._tables import as_text, read_rows, require_columns

if TYPE_CHECKING:
    import polars as pl

__all__ = [
    "DOC_ID_FIELDS",
    "ID_FIELDS",
    "REFERENCE_ANSWER_FIELDS",
    "load_question_file",
    "question_id_for",
]

DOC_ID_FIELDS: tuple[str, ...] = ("gold_doc_id", "doc_id")
"""Columns tried, in order, for the gold document id when none is named."""
ID_FIELDS: tuple[str, ...] = ("question_id", "query_id", "qid", "id")
"""Columns tried, in order, for the question id when none is named."""
REFERENCE_ANSWER_FIELDS: tuple[str, ...] = ("reference_answer", "answer")
"""Columns tried, in order, for a reference answer when none is named."""

_OUT_COLUMNS = (
    schema.QUESTION_ID,
    schema.DOC_ID,
    schema.QUESTION,
    schema.REFERENCE_ANSWER,
)


def question_id_for(doc_id: str, question: str) -> str:
    """A stable question id from the gold doc id and the question text.

    >>> question_id_for("d1", "How?")
    'q-64021e82bc3b1d56'
    """
    digest = hashlib.blake2b(
        f"{doc_id}\x00{question}".encode(), digest_size=8
    ).hexdigest()
    return f"q-{digest}"


def _pick(
    columns: Sequence[str], named: str | None, candidates: Sequence[str]
) -> str | None:
    if named is not None:
        return named
    return next((c for c in candidates if c in columns), None)


def load_question_file(
    path: str | Path,
    *,
    question_field: str = "question",
    doc_id_field: str | None = None,
    id_field: str | None = None,
    reference_answer_field: str | None = None,
    known_doc_ids: Collection[str] | None = None,
) -> pl.DataFrame:
    """Load a question set written elsewhere (e.g. by people) instead of generating one.

    Args:
        path: Parquet file or directory, CSV/TSV or JSONL file.
        question_field: Column with the question text.
        doc_id_field: Column with the gold document id; default: the first of
            :data:`DOC_ID_FIELDS` present.
        id_field: Column with the question id; default: the first of
            :data:`ID_FIELDS` present, else a stable hash of (doc id, question).
        reference_answer_field: Column with a reference answer; default: the
            first of :data:`REFERENCE_ANSWER_FIELDS` present, else none.
        known_doc_ids: If given, every gold doc id must be one of these
            (the corpus's doc ids).

    Returns:
        A frame with columns ``question_id, doc_id, question, reference_answer``
        (String; ``reference_answer`` null where absent), in file order.

    Raises:
        InputError: Naming file, row and field: missing column, empty question or
            doc id, duplicate question id, gold doc id not in the corpus.
    """
    import polars as pl  # not in every Ray worker that imports the configs

    where = str(path)
    what = "question file"
    columns, rows = read_rows(path, what=what)
    if not columns:
        msg = f"{what} has no rows; it needs one question per line/row"
        raise InputError(msg, path=where)
    doc_col = _pick(columns, doc_id_field, DOC_ID_FIELDS)
    if doc_col is None:
        msg = (
            f"{what} has no gold document id column (tried {list(DOC_ID_FIELDS)}); "
            f"present: {columns}. Set doc_id_field to the column naming the gold doc"
        )
        raise InputError(msg, path=where)
    id_col = _pick(columns, id_field, ID_FIELDS)
    ref_col = _pick(columns, reference_answer_field, REFERENCE_ANSWER_FIELDS)
    required = [question_field, doc_col]
    required += [c for c in (id_col, ref_col) if c is not None]
    require_columns(columns, required, path=where, what=what)

    known = set(known_doc_ids) if known_doc_ids is not None else None
    seen: dict[str, Place] = {}
    out: dict[str, list[str | None]] = {name: [] for name in _OUT_COLUMNS}
    for at, row in rows:
        question = as_text(
            row.get(question_field), path=where, row=at, field=question_field
        )
        if not question:
            msg = "question is empty; remove the row or fill in the question"
            raise InputError(msg, path=where, row=at, field=question_field)
        doc_id = as_text(row.get(doc_col), path=where, row=at, field=doc_col)
        if not doc_id:
            msg = "gold doc id is empty; every question needs its gold document"
            raise InputError(msg, path=where, row=at, field=doc_col)
        if known is not None and doc_id not in known:
            msg = (
                f"gold doc id {doc_id!r} is not a document of the corpus; check the "
                "corpus id field or the question file"
            )
            raise InputError(msg, path=where, row=at, field=doc_col)
        if id_col is not None:
            qid = as_text(row.get(id_col), path=where, row=at, field=id_col)
            if not qid:
                msg = "question id is empty; fill it in or drop the id column"
                raise InputError(msg, path=where, row=at, field=id_col)
        else:
            qid = question_id_for(doc_id, question)
        if qid in seen:
            msg = (
                f"question id {qid!r} repeats {seen[qid]}; question ids must be "
                "unique (without an id column: the same question for the same "
                "document appears twice)"
            )
            raise InputError(msg, path=where, row=at, field=id_col or question_field)
        seen[qid] = at
        ref = (
            as_text(row.get(ref_col), path=where, row=at, field=ref_col)
            if ref_col is not None
            else None
        )
        out[schema.QUESTION_ID].append(qid)
        out[schema.DOC_ID].append(doc_id)
        out[schema.QUESTION].append(question)
        out[schema.REFERENCE_ANSWER].append(ref or None)
    if not seen:
        msg = f"{what} has no rows; it needs one question per line/row"
        raise InputError(msg, path=where)
    return pl.DataFrame(out, schema=dict.fromkeys(_OUT_COLUMNS, pl.String))
