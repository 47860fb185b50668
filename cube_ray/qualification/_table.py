"""The run's ``qualification`` table: a row per (question, fault kind) and control.

Columns: the question, its gold document, the kind (a fault kind, or its
control's ``<kind>:control``), the original full-bound answer, the edited
answer and the changed span, and a ``status``: ``ok`` (built), ``skipped``
(the kind does not apply to the answer; for a control: no control was built),
``no_control`` (the fault was built but no control that keeps every fact and
matches its length change could be: the pair is not judged) or ``no_answer``
(the full-bound answer failed). A user reads here exactly what each judge was
shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from cube_ray import schema
from cube_ray.qualification._controls import control_kind, make_control
from cube_ray.qualification._document import GoldDocument
from cube_ray.qualification._fault import Fault
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
    "STATUS_NO_CONTROL",
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
STATUS_NO_CONTROL = "no_control"
"""The fault was built, but no control keeps every fact and matches it: the pair
is skipped (not judged) and counted (CUBE_METHOD.md section 12, "Controls")."""

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


def _row(
    qid: str,
    doc_id: str,
    kind: str,
    answer: str | None,
    edit: Fault | None,
    status: str,
) -> dict[str, Any]:
    span = edit.span if edit is not None else None
    return {
        schema.QUESTION_ID: qid,
        schema.DOC_ID: doc_id,
        KIND: kind,
        ORIGINAL: answer,
        FAULTED: edit.faulted if edit is not None else None,
        SPAN_START: span.start if span else None,
        SPAN_END: span.end if span else None,
        SPAN_ORIGINAL: span.original if span else None,
        SPAN_REPLACEMENT: span.replacement if span else None,
        schema.STATUS: status,
    }


def fault_rows(
    items: Sequence[tuple[str, str, str | None, GoldDocument]],
    *,
    donors: Sequence[GoldDocument],
    kinds: Sequence[str],
    seed: int,
) -> list[dict[str, Any]]:
    """Per (question, kind) the fault's row, then its control's.

    ``items`` are (question_id, doc_id, answer, gold). A fault without a
    control is ``no_control`` (not judged); its control row is ``skipped``.

    >>> gold = GoldDocument.of("d1", "承诺办结时限: 15(工作日)")
    >>> items = [("q1", "d1", "15个工作日。", gold), ("q2", "d2", None, gold)]
    >>> rows = fault_rows(items, donors=[], kinds=["number", "omission"], seed=0)
    >>> [(r["question_id"], r["kind"], r["status"]) for r in rows[:4]]
    ... # doctest: +NORMALIZE_WHITESPACE
    [('q1', 'number', 'ok'), ('q1', 'number:control', 'ok'),
     ('q1', 'omission', 'skipped'), ('q1', 'omission:control', 'skipped')]
    >>> rows[1]["faulted"]
    '十五个工作日。'
    >>> [r["status"] for r in rows[4:]]
    ['no_answer', 'no_answer', 'no_answer', 'no_answer']
    """
    rows = []
    for qid, doc_id, answer, gold in items:
        for kind in kinds:
            control_name = control_kind(kind)
            if not answer:
                rows.append(_row(qid, doc_id, kind, answer, None, STATUS_NO_ANSWER))
                rows.append(
                    _row(qid, doc_id, control_name, answer, None, STATUS_NO_ANSWER)
                )
                continue
            fault = make_fault(
                kind, answer, gold, donors=donors, seed=seed, question_id=qid
            )
            control = (
                None
                if fault is None
                else make_control(fault, gold, seed=seed, question_id=qid)
            )
            status = (
                STATUS_SKIPPED
                if fault is None
                else STATUS_NO_CONTROL
                if control is None
                else schema.STATUS_OK
            )
            rows.append(_row(qid, doc_id, kind, answer, fault, status))
            control_status = STATUS_SKIPPED if control is None else schema.STATUS_OK
            rows.append(
                _row(qid, doc_id, control_name, answer, control, control_status)
            )
    return rows
