"""The qualification stages (CUBE_METHOD.md section 12): faults, then judges.

``fault_inputs`` turns the sampled full-bound answers (with their gold
documents) into the rows of the ``qualification`` table: one per (question,
fault kind), the fault built by :mod:`cube_ray.qualification` with the other
sampled documents as donors. :class:`FaultStage` writes them (no engine).
``qualification_judge_inputs`` turns the built faults into judge rows (one
per dimension): :class:`~cube_ray.stages.judge.JudgeStage` scores them with
the run's judge prompt, into ``qualification_scores`` (``system`` = the kind).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from cube_ray import schema
from cube_ray.corpus import stable_hash
from cube_ray.qualification import (
    FAULTED,
    KIND,
    QUALIFICATION_SCHEMA,
    GoldDocument,
    fault_rows,
)
from cube_ray.stages._base import INPUT_HASH, Stage
from cube_ray.stages.inputs import DOC_HASH, judge_inputs

__all__ = [
    "FAULT_SOURCE",
    "QUALIFICATION_SOURCE",
    "SAMPLED",
    "FaultStage",
    "fault_inputs",
    "qualification_judge_inputs",
]

SAMPLED = "_sampled"
"""Internal column of the fault source: a sampled question (true) or a donor
document only (false)."""
FAULT_SOURCE: tuple[str, ...] = (
    schema.QUESTION_ID,
    schema.DOC_ID,
    schema.ANSWER,
    schema.TEXT,
    DOC_HASH,
    SAMPLED,
)
"""Columns of the sampled full-bound answers with their gold documents, and of
the donor documents."""
QUALIFICATION_SOURCE: tuple[str, ...] = (
    schema.QUESTION_ID,
    KIND,
    FAULTED,
    schema.QUESTION,
    schema.TEXT,
    DOC_HASH,
)
"""Columns of the built faults joined with their questions and documents."""


def fault_inputs(
    sampled: pa.Table, *, kinds: Sequence[str], seed: int, fingerprint: str
) -> pa.Table:
    """Sampled full-bound answers -> one qualification row per (question, kind).

    The donor rows' documents are the donors of the ``entity`` and
    ``unsupported`` faults (a fault never takes its own document's value), so a
    row's hash covers the donors' hashes too.

    Args:
        sampled: Columns :data:`FAULT_SOURCE`: one row per sampled question
            (``_sampled`` true) and one per donor document (false).
        kinds: Fault kinds to build.
        seed: The qualification seed.
        fingerprint: Hash of the qualification config.
    """
    rows = sampled.select(list(FAULT_SOURCE)).to_pylist()
    rows.sort(key=lambda r: (r[schema.QUESTION_ID], r[schema.DOC_ID]))

    def doc(r: dict[str, Any]) -> GoldDocument:
        return GoldDocument.of(r[schema.DOC_ID], r[schema.TEXT] or "")

    donor_rows = {r[schema.DOC_ID]: r for r in rows if not r[SAMPLED]}
    donors = [doc(donor_rows[d]) for d in sorted(donor_rows)]
    donor_part = stable_hash(*sorted(str(r[DOC_HASH]) for r in donor_rows.values()))
    rows = [r for r in rows if r[SAMPLED]]
    items = [
        (r[schema.QUESTION_ID], r[schema.DOC_ID], r[schema.ANSWER], doc(r))
        for r in rows
    ]
    out = fault_rows(items, donors=donors, kinds=kinds, seed=seed)
    by_q = {r[schema.QUESTION_ID]: r for r in rows}
    for row in out:
        src = by_q[row[schema.QUESTION_ID]]
        row[INPUT_HASH] = stable_hash(
            fingerprint,
            row[KIND],
            str(src[DOC_HASH]),
            stable_hash(src[schema.ANSWER]) if src[schema.ANSWER] else "<none>",
            donor_part,
        )
        row[schema.CONTENT_HASH] = row[INPUT_HASH]
    fields = [*QUALIFICATION_SCHEMA, pa.field(INPUT_HASH, pa.string())]
    return pa.Table.from_pylist(out, schema=pa.schema(fields))


class FaultStage(Stage):
    """Writes the qualification rows :func:`fault_inputs` built (no engine).

    The faults are built with the input rows because each needs the other
    sampled documents (its donors); this stage only hands them to the writer,
    so they are resumed, retried and compacted like every other stage's rows.
    """

    name = "qualification"
    required = (schema.QUESTION_ID, KIND, INPUT_HASH)
    output_schema = QUALIFICATION_SCHEMA

    def __init__(self, **_context: Any) -> None:
        super().__init__(call_log=_context.get("call_log"))

    def __call__(self, batch: pa.Table) -> pa.Table:
        """The batch's qualification rows, as the table stores them."""
        self.check_columns(batch.column_names)
        return batch.select(self.output_schema.names).cast(self.output_schema)


def qualification_judge_inputs(
    joined: pa.Table,
    *,
    judge: str,
    fingerprints: dict[str, str],
    dimensions: Sequence[str],
) -> pa.Table:
    """Built faults (columns :data:`QUALIFICATION_SOURCE`) -> judge rows.

    The faulted answer is scored as an answer of the "system" named by its
    kind, with the same prompt, rubric and fingerprint as every other answer.
    """
    renamed = joined.select(list(QUALIFICATION_SOURCE)).rename_columns(
        [
            schema.QUESTION_ID,
            schema.SYSTEM,
            schema.ANSWER,
            schema.QUESTION,
            schema.TEXT,
            DOC_HASH,
        ]
    )
    return judge_inputs(
        renamed, judge=judge, fingerprints=fingerprints, dimensions=dimensions
    )
