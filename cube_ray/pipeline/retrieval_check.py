"""A system whose retrieved ids are not corpus ids is a misconfiguration, not a 0.

A wrong ``id_pattern`` (or a system indexing another corpus) gives every
answer no gold rank, so the system's CuBE would be 0 while its rows stay
``ok``. After a system's stage, the driver counts its ``ok`` answers that
returned ids none of which is a corpus id; when that is most of them, the run
stops (exit 2) showing one such answer and the ids it got. An answer that
retrieved nothing (an empty list) is a retrieval miss (recall 0 for that
question), not a sign of misconfiguration; only when no answer at all holds
an id (a wrong ``retrieved_path`` reads nothing) does the run stop for it.
``cube-ray check`` asks each HTTP system two questions for the same test
before a run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cube_ray import schema
from cube_ray.errors import InputError

__all__ = [
    "EARLY_MIN_ROWS",
    "MOST",
    "check_system_ids",
    "current_question_ids",
    "first_answer_line",
    "retrieved_nothing",
    "unknown_id_rows",
]

MOST = 0.5
"""Share of a system's ``ok`` answers above which unknown ids stop the run."""
EARLY_MIN_ROWS = 20
"""Answers a wave before the last needs before its share is judged."""


def unknown_id_rows(retrieved: pa.ChunkedArray | pa.Array, doc_ids: Any) -> pa.Array:
    """Per answer: True when it returned ids and none of them is a corpus id.

    An answer that retrieved nothing (empty or null) is a miss, not unknown.

    >>> ids = pa.array([["a", "x"], [], None, ["x"]], pa.list_(pa.string()))
    >>> unknown_id_rows(ids, pa.array(["a", "b"])).to_pylist()
    [False, False, False, True]
    """
    if isinstance(retrieved, pa.ChunkedArray):
        retrieved = retrieved.combine_chunks()
    flat = pc.list_flatten(retrieved)
    parents = pc.list_parent_indices(retrieved)
    known = pc.is_in(flat, value_set=doc_ids)
    hits = pc.unique(pc.filter(parents, known)).to_pylist()
    sizes = pc.fill_null(pc.list_value_length(retrieved), 0).to_pylist()
    mask = [size > 0 for size in sizes]
    for i in hits:
        mask[i] = False
    return pa.array(mask, pa.bool_())


def retrieved_nothing(retrieved: pa.ChunkedArray | pa.Array) -> bool:
    """Whether no answer holds a single retrieved id.

    >>> retrieved_nothing(pa.array([[], None], pa.list_(pa.string())))
    True
    >>> retrieved_nothing(pa.array([[], ["x"]], pa.list_(pa.string())))
    False
    """
    return len(pc.list_flatten(retrieved)) == 0


def _read(files: list[Path], columns: list[str], filters: list[Any] | None) -> pa.Table:
    """The rows of part files that pass ``filters``.

    File by file: parts written by different stages may differ in their extra
    columns.
    """
    tables = [pq.read_table(f, columns=columns, filters=filters) for f in files]
    return pa.concat_tables(tables, promote_options="default")


def current_question_ids(
    documents: list[Path], questions: list[Path]
) -> pa.Array | None:
    """Ids of the questions of the current input; None without both tables.

    The questions whose gold document is in the documents table, which always
    holds exactly the current run's corpus (a run with a smaller ``--limit``,
    or one that updated its dir, leaves other questions' rows behind).
    """
    if not documents or not questions:
        return None
    docs = _read(documents, [schema.DOC_ID], None).column(schema.DOC_ID)
    table = _read(questions, [schema.QUESTION_ID, schema.DOC_ID], None)
    keep = pc.is_in(table.column(schema.DOC_ID), value_set=docs.combine_chunks())
    ids = table.filter(keep).column(schema.QUESTION_ID).combine_chunks()
    return pc.unique(ids)


def _example(files: list[Path], system: str, question_id: str) -> str:
    table = _read(
        files,
        [schema.ANSWER],
        [(schema.SYSTEM, "=", system), (schema.QUESTION_ID, "=", question_id)],
    )
    answers = table.column(schema.ANSWER).to_pylist() if table.num_rows else []
    text = next((a for a in answers if a), "") or ""
    return text if len(text) <= 200 else text[:197] + "..."


def check_system_ids(
    run_dir: Path,
    system: Any,
    *,
    answers: list[Path],
    documents: list[Path],
    questions: list[Path],
    min_rows: int = 0,
) -> None:
    """Stop when most of a system's answers returned ids but no corpus id.

    Or when none of its answers holds any id (every one empty).

    Args:
        run_dir: The run dir (for the message).
        system: The system's config (its ``name``, ``kind``).
        answers: Part files of the answers table.
        documents: Part files of the documents table.
        questions: Part files of the questions table (only the answers of
            current questions count).
        min_rows: Fewer ``ok`` answers than this are not judged yet (an early
            wave's handful is no evidence; the last wave checks them all).

    Raises:
        InputError: Naming the system, the share, one answer and its ids, and
            the settings to check.
    """
    if not answers or not documents:
        return
    name = system.name
    rows = _read(
        answers,
        [schema.QUESTION_ID, schema.RETRIEVED_DOC_IDS, schema.STATUS],
        [(schema.SYSTEM, "=", name), (schema.STATUS, "=", schema.STATUS_OK)],
    )
    current = current_question_ids(documents, questions)
    if current is not None:
        rows = rows.filter(pc.is_in(rows.column(schema.QUESTION_ID), value_set=current))
    if rows.num_rows == 0 or rows.num_rows < min_rows:
        return
    docs = _read(documents, [schema.DOC_ID], None).column(schema.DOC_ID)
    unknown = unknown_id_rows(
        rows.column(schema.RETRIEVED_DOC_IDS), docs.combine_chunks()
    )
    bad = rows.filter(unknown)
    nothing = retrieved_nothing(rows.column(schema.RETRIEVED_DOC_IDS))
    if nothing:
        bad = rows
    elif bad.num_rows <= MOST * rows.num_rows:
        return
    qid = bad.column(schema.QUESTION_ID)[0].as_py()
    got = bad.column(schema.RETRIEVED_DOC_IDS)[0].as_py() or []
    answer = _example(answers, name, qid)
    fixes = {
        "http": "check its retrieved_path (and id_pattern) against a real "
        "response, and that it searches this corpus; `cube-ray check CONFIG` "
        "asks it one question and shows the reply",
        "qa_file": "check its retrieved_field and that its ids are this "
        "corpus' document ids (corpus.id_field)",
    }
    fix = fixes.get(getattr(system, "kind", ""), "check that it searches this corpus")
    what = (
        f"none of its {rows.num_rows} answers holds a retrieved id"
        if nothing
        else f"{bad.num_rows} of its {rows.num_rows} answers retrieved ids none of "
        "which is a document of the corpus"
    )
    msg = (
        f"system {name!r}: {what}, so every gold rank would be 0 and its CuBE "
        f"0; e.g. question {qid!r} got ids {got[:8]} and answer {answer!r}. "
        f"Fix: {fix}; then rerun (the run dir {str(run_dir)!r} keeps every "
        "other stage's rows)"
    )
    raise InputError(msg, field=f"systems[{name}]")


def first_answer_line(
    system: Any, *, answers: list[Path], questions: list[Path]
) -> str | None:
    """What an HTTP system's paths read from its first ``ok`` reply, in one line.

    The question asked, the answer extracted (its first 200 characters) and the
    retrieved ids, as ``cube-ray check`` shows them; None for other kinds, or
    before any ``ok`` answer.
    """
    if getattr(system, "kind", "") != "http" or not answers or not questions:
        return None
    rows = _read(
        answers,
        [schema.QUESTION_ID, schema.ANSWER, schema.RETRIEVED_DOC_IDS],
        [(schema.SYSTEM, "=", system.name), (schema.STATUS, "=", schema.STATUS_OK)],
    )
    if rows.num_rows == 0:
        return None
    first = rows.sort_by(schema.QUESTION_ID).slice(0, 1).to_pylist()[0]
    qid = first[schema.QUESTION_ID]
    asked = _read(
        questions, [schema.QUESTION], [(schema.QUESTION_ID, "=", qid)]
    ).column(schema.QUESTION)
    question = asked[0].as_py() if len(asked) else qid
    answer = (first[schema.ANSWER] or "")[:200]
    ids = list(first[schema.RETRIEVED_DOC_IDS] or [])[:8]
    return (
        f"{system.name}: first answer: asked {question!r}; answer {answer!r}; "
        f"retrieved ids {ids}"
    )
