"""The system-under-test stage: questions in, answers and ranked doc ids out."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from cube_ray import schema
from cube_ray.stages._base import (
    ANSWER_MAX_CHARS,
    INPUT_HASH,
    EngineFactory,
    Stage,
    capped,
)
from cube_ray.stages.generate import ANSWERS_OUT_SCHEMA
from cube_ray.systems import build_system
from cube_ray.systems.base import QuestionIn, SystemAnswer, SystemUnderTest

__all__ = ["SystemStage", "gold_rank"]

SystemFactory = Callable[..., SystemUnderTest]


def gold_rank(gold: str, retrieved: Sequence[str] | None, k: int) -> int:
    """1-based position of the gold document among the first ``k`` retrieved, else 0.

    >>> gold_rank("b", ["a", "b", "c"], 8), gold_rank("z", ["a"], 8), gold_rank("c", ["a", "b", "c"], 2)
    (2, 0, 0)
    """  # noqa: E501
    if not retrieved:
        return 0
    for i, doc_id in enumerate(list(retrieved)[:k], start=1):
        if doc_id == gold:
            return i
    return 0


class SystemStage(Stage):
    """Put questions to one system under test and record its answers and ranks.

    Input columns: ``question_id``, ``doc_id`` (gold), ``question``,
    ``_input_hash``. Output: answer rows with ``system`` = the system's name,
    ``retrieved_doc_ids`` and ``rank`` of the gold document within the top ``k``.

    Args:
        system: One ``systems:`` entry of the run config.
        documents_path: The run's ``documents/`` directory (the built-in RAG
            indexes it).
        generator: The run's generator engine config (the built-in RAG answers
            with it).
        answer_template: The answer template shared with the bounds.
        nonce: The run's prompt-tag nonce (the built-in RAG's answer prompts).
        system_factory: Builds the system (default
            :func:`cube_ray.systems.build_system`).
        engine_factory: Builds the generator engine of a system that answers
            with it (default :func:`cube_ray.engines.build_engine`).
        call_log: File that gets one line per question put to the system.
    """

    name = "system"
    required = (schema.QUESTION_ID, schema.DOC_ID, schema.QUESTION, INPUT_HASH)
    output_schema = ANSWERS_OUT_SCHEMA

    def __init__(
        self,
        system: Any,
        *,
        documents_path: str,
        generator: Any = None,
        answer_template: str = "answer",
        nonce: str | None = None,
        system_factory: SystemFactory | None = None,
        engine_factory: EngineFactory | None = None,
        call_log: str | None = None,
    ) -> None:
        super().__init__(call_log=call_log)
        if system_factory is None:
            system_factory = build_system
        self._system = system_factory(
            system,
            documents_path=documents_path,
            generator=generator,
            answer_template=answer_template,
            nonce=nonce,
            **({"engine_factory": engine_factory} if engine_factory else {}),
        )
        self._name: str = self._system.name
        self._k: int = self._system.k

    def __call__(self, batch: pa.Table) -> pa.Table:
        """Answer a batch of questions with the system under test."""
        self.check_columns(batch.column_names)
        rows = batch.select(list(self.required)).to_pylist()
        todo = [i for i, r in enumerate(rows) if r[schema.QUESTION]]
        questions = [
            QuestionIn(
                question_id=rows[i][schema.QUESTION_ID],
                question=rows[i][schema.QUESTION],
                doc_id=rows[i][schema.DOC_ID],
            )
            for i in todo
        ]
        self._log_calls([f"{q.question_id}/{self._name}" for q in questions])
        answers = [SystemAnswer(answer=None, status="no_question")] * len(rows)
        if questions:
            start = time.perf_counter()
            try:
                got = self._system.answer(questions)
            except Exception as exc:  # per-row failure, recorded, not fatal
                reason = f"error: {type(exc).__name__}: {exc}"[:500]
                got = [SystemAnswer(answer=None, status=reason)] * len(questions)
            if len(got) != len(questions):
                msg = (
                    f"system {self._name!r} returned {len(got)} answers for "
                    f"{len(questions)} questions"
                )
                raise RuntimeError(msg)
            elapsed = time.perf_counter() - start
            for i, a in zip(todo, got, strict=True):
                if a.latency_s is None:
                    a = SystemAnswer(
                        answer=a.answer,
                        retrieved_doc_ids=a.retrieved_doc_ids,
                        status=a.status,
                        latency_s=elapsed / len(questions),
                        prompt_tokens=a.prompt_tokens,
                        completion_tokens=a.completion_tokens,
                    )
                answers[i] = a
        cols: dict[str, Any] = {
            schema.QUESTION_ID: [r[schema.QUESTION_ID] for r in rows],
            schema.DOC_ID: [r[schema.DOC_ID] for r in rows],
            schema.SYSTEM: [self._name] * len(rows),
            schema.ANSWER: [
                capped(a.answer, ANSWER_MAX_CHARS)
                if a.status == schema.STATUS_OK
                else None
                for a in answers
            ],
            schema.RETRIEVED_DOC_IDS: [list(a.retrieved_doc_ids) for a in answers],
            schema.RANK: [
                gold_rank(r[schema.DOC_ID], a.retrieved_doc_ids, self._k)
                for r, a in zip(rows, answers, strict=True)
            ],
            schema.STATUS: [a.status for a in answers],
            schema.LATENCY_S: [a.latency_s for a in answers],
            schema.PROMPT_TOKENS: [a.prompt_tokens for a in answers],
            schema.COMPLETION_TOKENS: [a.completion_tokens for a in answers],
            schema.CONTENT_HASH: [r[INPUT_HASH] for r in rows],
        }
        return pa.Table.from_pydict(cols, schema=self.output_schema)

    def close(self) -> None:
        """Close the system."""
        system = getattr(self, "_system", None)
        if system is not None:
            system.close()
