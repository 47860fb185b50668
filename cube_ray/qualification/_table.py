"""The run's ``qualification`` table: one row per (question, fault kind).

Columns: the question, its gold document, the kind, the original full-bound
answer, the faulted answer and the changed span, and a ``status``: ``ok``
(a faulted answer was built), ``skipped`` (the kind does not apply to the
answer) or ``no_answer`` (the full-bound answer failed). A user reads here
exactly what each judge was shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from cube_ray import schema
from cube_ray.qualification._document import GoldDocument
from cube_ray.qualification._kinds import make_fault

__all__ = [
    "FAULTED",
    "KIND",
    "ORIGINAL",
    "QUALIFICATION_SCHEMA",
    "SPAN_END",
    "SPAN_ORIGINAL",
    "SPAN_REPLACEMENT",
    "SPAN_START",
    "STATUS_NO_ANSWER",
    "STATUS_SKIPPED",
    "fault_rows",
]

KIND = "kind"
ORIGINAL = "original"
"""The full-bound answer the fault was built from."""
FAULTED = "faulted"
SPAN_START = "span_start"
"""Offset in ``original`` where the change begins."""
SPAN_END = "span_end"
"""Offset in ``original`` where the change ends (exclusive)."""
SPAN_ORIGINAL = "span_original"
"""``original[span_start:span_end]``: the text that was replaced."""
SPAN_REPLACEMENT = "span_replacement"
"""What replaced it (empty for an omission)."""
STATUS_SKIPPED = "skipped"
"""The kind does not apply to this answer (CUBE_METHOD.md section 12)."""
STATUS_NO_ANSWER = "no_answer"
"""The full-bound answer is missing (its generation failed)."""

QUALIFICATION_SCHEMA = pa.schema(
    [
        pa.field(schema.QUESTION_ID, pa.string(), nullable=False),
        pa.field(schema.DOC_ID, pa.string()),
        pa.field(KIND, pa.string(), nullable=False),
        pa.field(ORIGINAL, pa.string()),
        pa.field(FAULTED, pa.string()),
        pa.field(SPAN_START, pa.int32()),
        pa.field(SPAN_END, pa.int32()),
        pa.field(SPAN_ORIGINAL, pa.string()),
        pa.field(SPAN_REPLACEMENT, pa.string()),
        pa.field(schema.STATUS, pa.string()),
        pa.field(schema.CONTENT_HASH, pa.string()),
    ]
)
"""Columns of the ``qualification/`` table."""


def fault_rows(
    items: Sequence[tuple[str, str, str | None, GoldDocument]],
    *,
    donors: Sequence[GoldDocument],
    kinds: Sequence[str],
    seed: int,
) -> list[dict[str, Any]]:
    """One row per (question, kind): ``items`` are (question_id, doc_id, answer, gold).

    >>> gold = GoldDocument.of("d1", "承诺办结时限: 7(工作日)")
    >>> rows = fault_rows([("q1", "d1", "7个工作日。", gold), ("q2", "d2", None, gold)],
    ...                   donors=[], kinds=["number", "omission"], seed=0)
    >>> [(r["question_id"], r["kind"], r["status"]) for r in rows[:2]]
    [('q1', 'number', 'ok'), ('q1', 'omission', 'skipped')]
    >>> [r["status"] for r in rows[2:]]
    ['no_answer', 'no_answer']
    """
    rows = []
    for qid, doc_id, answer, gold in items:
        for kind in kinds:
            fault = (
                make_fault(
                    kind, answer, gold, donors=donors, seed=seed, question_id=qid
                )
                if answer
                else None
            )
            status = (
                STATUS_NO_ANSWER
                if not answer
                else STATUS_SKIPPED
                if fault is None
                else schema.STATUS_OK
            )
            span = fault.span if fault is not None else None
            rows.append(
                {
                    schema.QUESTION_ID: qid,
                    schema.DOC_ID: doc_id,
                    KIND: kind,
                    ORIGINAL: answer,
                    FAULTED: fault.faulted if fault is not None else None,
                    SPAN_START: span.start if span else None,
                    SPAN_END: span.end if span else None,
                    SPAN_ORIGINAL: span.original if span else None,
                    SPAN_REPLACEMENT: span.replacement if span else None,
                    schema.STATUS: status,
                }
            )
    return rows
