"""Pure functions that turn upstream tables into stage inputs with resume keys.

Each function adds :data:`~cube_ray.stages._base.INPUT_HASH`, the hash of
everything that determines the stage's output for that row. The pipeline skips
rows whose (key, hash) is already written, so a changed document, question,
answer, template or engine config re-runs exactly the rows it affects.

All functions take and return Arrow tables and run inside Ray tasks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from cube_ray import schema
from cube_ray.corpus import stable_hash
from cube_ray.stages._base import INPUT_HASH

__all__ = [
    "ANSWER_HASH",
    "DOC_HASH",
    "JUDGE_SOURCE",
    "KEYS",
    "answer_inputs",
    "judge_inputs",
    "question_inputs",
    "system_inputs",
]

DOC_HASH = "_doc_hash"
"""Internal column: the gold document's content hash, carried through joins."""
ANSWER_HASH = "_answer_hash"
"""Internal column: the answer row's own input hash, carried into the judge."""

JUDGE_SOURCE: tuple[str, ...] = (
    schema.QUESTION_ID,
    schema.SYSTEM,
    schema.ANSWER,
    ANSWER_HASH,
    schema.QUESTION,
    schema.TEXT,
    DOC_HASH,
)
"""Columns of the answers joined with questions and documents (``judge_inputs``)."""

KEYS: dict[str, tuple[str, ...]] = {
    "questions": (schema.QUESTION_ID,),
    "answers": (schema.QUESTION_ID, schema.SYSTEM),
    "scores": (schema.QUESTION_ID, schema.SYSTEM, schema.JUDGE, schema.DIMENSION),
    # CUBE_METHOD.md section 12: faulted answers and their scores.
    "qualification": (schema.QUESTION_ID, "kind"),
    "qualification_scores": (
        schema.QUESTION_ID,
        schema.SYSTEM,
        schema.JUDGE,
        schema.DIMENSION,
    ),
}
"""Row key of each output table (unique after every completed run)."""


def _col(table: pa.Table, name: str) -> list[Any]:
    values: list[Any] = table.column(name).to_pylist()
    return values


def question_inputs(documents: pa.Table, *, fingerprint: str) -> pa.Table:
    """Documents -> question-stage input (one question per document).

    ``fingerprint`` hashes the generator config and the question template.
    """
    hashes = [stable_hash(fingerprint, h) for h in _col(documents, schema.CONTENT_HASH)]
    return pa.table(
        {
            schema.QUESTION_ID: documents.column(schema.DOC_ID),
            schema.DOC_ID: documents.column(schema.DOC_ID),
            schema.TEXT: documents.column(schema.TEXT),
            INPUT_HASH: pa.array(hashes, pa.string()),
        }
    )


def answer_inputs(qdocs: pa.Table, *, fingerprint: str) -> pa.Table:
    """Questions joined with their gold documents -> two bound rows each.

    Input columns: question_id, doc_id, question, text, ``_doc_hash``. The zero
    row's hash ignores the document (it never sees it); the full row's does not.
    """
    qids = _col(qdocs, schema.QUESTION_ID)
    dids = _col(qdocs, schema.DOC_ID)
    qs = _col(qdocs, schema.QUESTION)
    texts = _col(qdocs, schema.TEXT)
    dh = _col(qdocs, DOC_HASH)
    out: dict[str, list[Any]] = {
        c: []
        for c in (
            schema.QUESTION_ID,
            schema.DOC_ID,
            schema.SYSTEM,
            schema.QUESTION,
            schema.TEXT,
            INPUT_HASH,
        )
    }
    for qid, did, q, text, h in zip(qids, dids, qs, texts, dh, strict=True):
        for system in schema.BOUND_SYSTEMS:
            out[schema.QUESTION_ID].append(qid)
            out[schema.DOC_ID].append(did)
            out[schema.SYSTEM].append(system)
            out[schema.QUESTION].append(q)
            out[schema.TEXT].append(text)
            doc_part = h if system == schema.FULL else ""
            out[INPUT_HASH].append(stable_hash(fingerprint, system, q or "", doc_part))
    return pa.table(
        {k: pa.array(v, pa.string()) for k, v in out.items()},
    )


def system_inputs(questions: pa.Table, *, system: str, fingerprint: str) -> pa.Table:
    """Questions -> system-stage input.

    ``fingerprint`` hashes the system config (and its QA file or the corpus,
    where they determine the answers) and the generator config.
    """
    qids = _col(questions, schema.QUESTION_ID)
    dids = _col(questions, schema.DOC_ID)
    qs = _col(questions, schema.QUESTION)
    hashes = [
        stable_hash(fingerprint, qid, did, q or "")
        for qid, did, q in zip(qids, dids, qs, strict=True)
    ]
    return pa.table(
        {
            schema.QUESTION_ID: pa.array(qids, pa.string()),
            schema.DOC_ID: pa.array(dids, pa.string()),
            schema.SYSTEM: pa.array([system] * len(qids), pa.string()),
            schema.QUESTION: pa.array(qs, pa.string()),
            INPUT_HASH: pa.array(hashes, pa.string()),
        }
    )


def judge_inputs(
    joined: pa.Table,
    *,
    judge: str,
    fingerprints: dict[str, str],
    dimensions: Sequence[str],
) -> pa.Table:
    """Answers joined with questions and documents -> one row per dimension.

    The dimensions of one answer stay adjacent, so a batch carries the shared
    prompt prefix of all of them (prefix caching).

    Args:
        joined: Columns ``JUDGE_SOURCE``.
        judge: The judge's name.
        fingerprints: Dimension -> hash of (judge engine config, template, rubric).
        dimensions: Dimension names in configured order.
    """
    qids = _col(joined, schema.QUESTION_ID)
    systems = _col(joined, schema.SYSTEM)
    answers = _col(joined, schema.ANSWER)
    questions = _col(joined, schema.QUESTION)
    texts = _col(joined, schema.TEXT)
    dh = _col(joined, DOC_HASH)
    cols = (
        schema.QUESTION_ID,
        schema.SYSTEM,
        schema.JUDGE,
        schema.DIMENSION,
        schema.TEXT,
        schema.QUESTION,
        schema.ANSWER,
        INPUT_HASH,
    )
    out: dict[str, list[Any]] = {c: [] for c in cols}
    for qid, system, answer, question, text, doc_hash in zip(
        qids, systems, answers, questions, texts, dh, strict=True
    ):
        answer_part = stable_hash(answer) if answer is not None else "<none>"
        for dim in dimensions:
            out[schema.QUESTION_ID].append(qid)
            out[schema.SYSTEM].append(system)
            out[schema.JUDGE].append(judge)
            out[schema.DIMENSION].append(dim)
            out[schema.TEXT].append(text)
            out[schema.QUESTION].append(question)
            out[schema.ANSWER].append(answer)
            out[INPUT_HASH].append(
                stable_hash(
                    fingerprints[dim], doc_hash or "", question or "", answer_part
                )
            )
    return pa.table({k: pa.array(v, pa.string()) for k, v in out.items()})
