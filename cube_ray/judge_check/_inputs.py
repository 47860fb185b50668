"""The check's inputs: the bound sample, the injection cases, the faulted answers.

Built with the run's own stages (questions, answers, judge inputs), on the
first documents of the corpus; nothing is written anywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from cube_ray import schema
from cube_ray.config import RunConfig
from cube_ray.corpus import iter_document_batches
from cube_ray.engines.base import BorrowedEngine
from cube_ray.injection import Case, apply_patterns
from cube_ray.qualification import GoldDocument, fault_rows
from cube_ray.stages import (
    ANSWER_HASH,
    DOC_HASH,
    JUDGE_SOURCE,
    AnswerStage,
    QuestionStage,
    answer_inputs,
    judge_inputs,
    question_inputs,
)

_FINGERPRINT = "judges-check"
"""Stands in for the run's config fingerprints in the stages' input hashes."""
_INJECTION = "injection"
"""``system`` of the injection rows in the judge input table."""
_FAULT = "fault:"
"""Prefix of the ``system`` of a faulted answer's rows (``fault:number``)."""


def _first_documents(config: RunConfig, n: int) -> pa.Table:

    batches = list(iter_document_batches(config.corpus, batch_rows=n, limit=n))
    return pa.concat_tables(batches)


def _bound_rows(
    config: RunConfig, docs: pa.Table, engine: Any, *, nonce: str
) -> tuple[pa.Table, pa.Table]:
    """(questions, judge-ready bound rows) of ``docs``, written by ``engine``."""

    def lend(_config: Any) -> Any:
        return BorrowedEngine(engine)

    questions = QuestionStage(
        config.generator,
        template=config.prompts.question,
        nonce=nonce,
        engine_factory=lend,
    )(question_inputs(docs, fingerprint=_FINGERPRINT))
    texts = dict(
        zip(
            docs.column(schema.DOC_ID).to_pylist(),
            docs.column(schema.TEXT).to_pylist(),
            strict=True,
        )
    )
    doc_ids = questions.column(schema.DOC_ID).to_pylist()
    qdocs = questions.select([schema.QUESTION_ID, schema.DOC_ID, schema.QUESTION])
    qdocs = qdocs.append_column(schema.TEXT, pa.array([texts[d] for d in doc_ids]))
    qdocs = qdocs.append_column(DOC_HASH, pa.array(doc_ids, pa.string()))
    answers = AnswerStage(
        config.generator,
        template=config.prompts.answer,
        nonce=nonce,
        engine_factory=lend,
    )(answer_inputs(qdocs, fingerprint=_FINGERPRINT))
    question_of = dict(
        zip(
            questions.column(schema.QUESTION_ID).to_pylist(),
            questions.column(schema.QUESTION).to_pylist(),
            strict=True,
        )
    )
    ok = [r for r in answers.to_pylist() if r[schema.STATUS] == schema.STATUS_OK]
    rows = pa.table(
        {
            schema.QUESTION_ID: [r[schema.QUESTION_ID] for r in ok],
            schema.SYSTEM: [r[schema.SYSTEM] for r in ok],
            schema.ANSWER: [r[schema.ANSWER] for r in ok],
            ANSWER_HASH: [r[schema.CONTENT_HASH] for r in ok],
            schema.QUESTION: [question_of[r[schema.QUESTION_ID]] for r in ok],
            schema.TEXT: [texts[r[schema.DOC_ID]] for r in ok],
            DOC_HASH: [r[schema.DOC_ID] for r in ok],
        },
        schema=pa.schema([(c, pa.string()) for c in JUDGE_SOURCE]),
    )
    return questions, rows


def _injection_cases(rows: pa.Table) -> list[Case]:
    """The patterns applied to each full-bound answer of the sample."""
    bases = [
        (r[schema.TEXT], r[schema.QUESTION], r[schema.ANSWER])
        for r in rows.to_pylist()
        if r[schema.SYSTEM] == schema.FULL
    ]
    return apply_patterns(bases)


def _fault_rows(config: RunConfig, rows: pa.Table) -> list[dict[str, Any]]:
    """The qualification rows of the sample's full-bound answers (section 12).

    Every sampled document is a donor of the others' faults; kinds and seed
    come from the config's ``qualification`` section.
    """
    qual = config.qualification
    if qual is None:
        return []
    full = [r for r in rows.to_pylist() if r[schema.SYSTEM] == schema.FULL]
    docs = {
        r[schema.QUESTION_ID]: GoldDocument.of(r[schema.QUESTION_ID], r[schema.TEXT])
        for r in full
    }
    items = [
        (
            r[schema.QUESTION_ID],
            r[schema.QUESTION_ID],
            r[schema.ANSWER],
            docs[r[schema.QUESTION_ID]],
        )
        for r in full
    ]
    out = fault_rows(
        items, donors=list(docs.values()), kinds=qual.kinds, seed=qual.seed
    )
    question = {r[schema.QUESTION_ID]: r[schema.QUESTION] for r in full}
    for r in out:
        r[schema.QUESTION] = question[r[schema.QUESTION_ID]]
        r[schema.TEXT] = docs[r[schema.QUESTION_ID]].text
    return out


def _judge_table(
    rows: pa.Table,
    cases: Sequence[Case],
    *,
    judge: str,
    dimensions: list[str],
    injection_dimension: str,
    faults: Sequence[dict[str, Any]] = (),
) -> pa.Table:
    """Judge-stage input: bounds and faulted answers, then the injection set.

    The bounds and the faulted answers are scored on every dimension, the
    injection set on one.
    """
    fingerprints = dict.fromkeys(dimensions, _FINGERPRINT)
    bounds = judge_inputs(
        rows, judge=judge, fingerprints=fingerprints, dimensions=dimensions
    )
    injected = pa.table(
        {
            schema.QUESTION_ID: [str(i) for i in range(len(cases))],
            schema.SYSTEM: [_INJECTION] * len(cases),
            schema.ANSWER: [c.answer for c in cases],
            ANSWER_HASH: [str(i) for i in range(len(cases))],
            schema.QUESTION: [c.question for c in cases],
            schema.TEXT: [c.document for c in cases],
            DOC_HASH: [str(i) for i in range(len(cases))],
        }
    )
    injection = judge_inputs(
        injected,
        judge=judge,
        fingerprints={injection_dimension: _FINGERPRINT},
        dimensions=[injection_dimension],
    )
    built = [f for f in faults if f[schema.STATUS] == schema.STATUS_OK]
    faulted = pa.table(
        {
            schema.QUESTION_ID: [f[schema.QUESTION_ID] for f in built],
            schema.SYSTEM: [_FAULT + f["kind"] for f in built],
            schema.ANSWER: [f["faulted"] for f in built],
            ANSWER_HASH: [str(i) for i in range(len(built))],
            schema.QUESTION: [f[schema.QUESTION] for f in built],
            schema.TEXT: [f[schema.TEXT] for f in built],
            DOC_HASH: [f[schema.QUESTION_ID] for f in built],
        },
        schema=rows.schema,
    )
    fault_rows = judge_inputs(
        faulted, judge=judge, fingerprints=fingerprints, dimensions=dimensions
    )
    return pa.concat_tables(
        [bounds, fault_rows.cast(bounds.schema), injection.cast(bounds.schema)]
    )
