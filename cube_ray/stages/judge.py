"""The judge stage: one judge scores (answer, dimension) rows."""

from __future__ import annotations

import math
from typing import Any

import pyarrow as pa

from cube_ray import schema
from cube_ray.engines.base import (
    SCORED_STATUSES,
    ItemJudge,
    JudgeItem,
    ScoreMode,
    ScoreResult,
)
from cube_ray.engines.registry import build_engine
from cube_ray.prompts import fresh_nonce, render_judge
from cube_ray.stages._base import (
    INPUT_HASH,
    RAW_MAX_CHARS,
    EngineFactory,
    Stage,
    capped,
)

__all__ = [
    "SCORES_OUT_SCHEMA",
    "STATUS_INVALID_SCORE",
    "STATUS_NO_ANSWER",
    "JudgeStage",
]

SCORES_OUT_SCHEMA = pa.unify_schemas([schema.SCORES_SCHEMA, schema.SCORES_EXTRA])
"""Columns of the ``scores/`` table the pipeline writes."""
STATUS_NO_ANSWER = "no_answer"
"""Score status when there is no answer to judge (the answer failed)."""
STATUS_INVALID_SCORE = "invalid_score"
"""Score status when an engine calls a score valid that is not a number in
0..10 (NaN, infinite, out of range): the row keeps no score."""


def checked(res: ScoreResult) -> ScoreResult:
    """A scored result whose score is a finite number in 0..10, else ``invalid_score``.

    Whatever engine scored the row, ``status=ok`` never comes with a NaN.

    >>> checked(ScoreResult(7.5, status="ok")).status
    'ok'
    >>> r = checked(ScoreResult(float("nan"), status="ok", raw="x"))
    >>> r.score, r.status, r.raw
    (None, 'invalid_score', 'x [score nan is not in 0..10]')
    >>> checked(ScoreResult(None, status="parse_error")).status
    'parse_error'
    """
    if res.status not in SCORED_STATUSES:
        return res
    score = res.score
    if (
        isinstance(score, int | float)
        and not isinstance(score, bool)
        and math.isfinite(score)
        and 0.0 <= score <= 10.0
    ):
        return res
    note = f"[score {score!r} is not in 0..10]"
    return ScoreResult(
        None,
        status=STATUS_INVALID_SCORE,
        raw=f"{res.raw} {note}" if res.raw else note,
        prompt_tokens=res.prompt_tokens,
        completion_tokens=res.completion_tokens,
        latency_s=res.latency_s,
    )


class JudgeStage(Stage):
    """One judge of the jury scores each (answer, dimension) row 0..10.

    Input columns: ``question_id``, ``system``, ``dimension``, ``text`` (gold
    document), ``question``, ``answer``, ``_input_hash``. Output: score rows;
    a judge output that is not a valid score stays a null ``score`` with its
    ``status`` and ``raw`` text (never 0). Rows without an answer are scored
    ``no_answer`` without calling the engine. An engine that scores items
    itself (:class:`~cube_ray.engines.base.ItemJudge`, the reference judge) gets
    the rows as :class:`~cube_ray.engines.base.JudgeItem` instead of prompts.

    Args:
        judge: Name of the judge (``judge`` column).
        engine: The judge's engine config.
        rubrics: Dimension name -> rubric text.
        template: Judge prompt template (name or path).
        nonce: The run's prompt-tag nonce (default: a random one).
        engine_factory: Builds the engine (default :func:`build_engine`).
        call_log: File that gets one line per engine call (tests).
    """

    name = "judge"
    required = (
        schema.QUESTION_ID,
        schema.SYSTEM,
        schema.DIMENSION,
        schema.TEXT,
        schema.QUESTION,
        schema.ANSWER,
        INPUT_HASH,
    )
    output_schema = SCORES_OUT_SCHEMA

    def __init__(
        self,
        judge: str,
        engine: Any,
        *,
        rubrics: dict[str, str],
        template: str = "judge",
        nonce: str | None = None,
        engine_factory: EngineFactory = build_engine,
        call_log: str | None = None,
    ) -> None:
        super().__init__(call_log=call_log)
        self._nonce = fresh_nonce(nonce)
        self._judge = judge
        self._rubrics = dict(rubrics)
        self._template = template
        self._mode: ScoreMode = getattr(engine, "score_mode", "argmax")
        self._engine = engine_factory(engine)

    def __call__(self, batch: pa.Table) -> pa.Table:
        """Score a batch of (answer, dimension) rows."""
        self.check_columns(batch.column_names)
        rows = batch.select(list(self.required)).to_pylist()
        todo = [i for i, r in enumerate(rows) if r[schema.ANSWER] is not None]
        items = []
        for i in todo:
            r = rows[i]
            rubric = self._rubrics.get(r[schema.DIMENSION])
            if rubric is None:
                msg = (
                    f"judge {self._judge!r} has no rubric for dimension "
                    f"{r[schema.DIMENSION]!r} (known: {sorted(self._rubrics)})"
                )
                raise ValueError(msg)
            items.append(
                JudgeItem(
                    document=r[schema.TEXT] or "",
                    question=r[schema.QUESTION] or "",
                    answer=r[schema.ANSWER],
                    dimension=r[schema.DIMENSION],
                    rubric=rubric,
                )
            )
        self._log_calls(
            [
                "/".join(
                    (
                        rows[i][schema.QUESTION_ID],
                        rows[i][schema.SYSTEM],
                        self._judge,
                        rows[i][schema.DIMENSION],
                    )
                )
                for i in todo
            ]
        )
        got = self._judge_items(items) if items else []
        results = [ScoreResult(None, status=STATUS_NO_ANSWER)] * len(rows)
        if len(got) != len(todo):
            msg = (
                f"judge {self._judge!r} returned {len(got)} scores for {len(todo)} rows"
            )
            raise RuntimeError(msg)
        for i, res in zip(todo, got, strict=True):
            results[i] = checked(res)
        cols: dict[str, Any] = {
            schema.QUESTION_ID: [r[schema.QUESTION_ID] for r in rows],
            schema.SYSTEM: [r[schema.SYSTEM] for r in rows],
            schema.JUDGE: [self._judge] * len(rows),
            schema.DIMENSION: [r[schema.DIMENSION] for r in rows],
            schema.SCORE: [
                res.score if res.status in SCORED_STATUSES else None for res in results
            ],
            schema.STATUS: [res.status for res in results],
            schema.RAW: [capped(res.raw, RAW_MAX_CHARS) for res in results],
            schema.PROMPT_TOKENS: [res.prompt_tokens for res in results],
            schema.COMPLETION_TOKENS: [res.completion_tokens for res in results],
            schema.LATENCY_S: [res.latency_s for res in results],
            schema.CONTENT_HASH: [r[INPUT_HASH] for r in rows],
        }
        return pa.Table.from_pydict(cols, schema=self.output_schema)

    def _judge_items(self, items: list[JudgeItem]) -> list[ScoreResult]:
        if isinstance(self._engine, ItemJudge):
            return self._engine.judge_items(items)
        prompts = [
            render_judge(
                it.document,
                it.question,
                it.answer,
                it.rubric,
                nonce=self._nonce,
                template=self._template,
            )
            for it in items
        ]
        return self._engine.score(prompts, mode=self._mode)

    def close(self) -> None:
        """Close the engine."""
        engine = getattr(self, "_engine", None)
        if engine is not None:
            engine.close()
