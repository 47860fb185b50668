"""The judge stage: one judge scores (answer, dimension) rows."""

from __future__ import annotations

import hashlib
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
from cube_ray.prompts import (
    fresh_nonce,
    render_checklist_item,
    render_dimensions,
    render_judge,
    yes_no_words,
)
from cube_ray.protocols import checklist, checklist_score, contrast
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

    The engine config's ``protocol`` (CUBE_METHOD.md section 14) decides the
    calls: ``score``, one per row; ``checklist``, one yes/no call per rubric
    item of the row's dimension (plus, with ``checklist_baseline:
    empty_answer``, one per question and item of the batch, asked of an empty
    answer); ``all_dimensions``, one call per answer of the batch, whose
    scores serve every dimension row of that answer. A row's ``prompt_tokens``
    and ``completion_tokens`` are its share of the calls made for it, so their
    sum over rows is what the engine was sent.

    Args:
        judge: Name of the judge (``judge`` column).
        engine: The judge's engine config.
        rubrics: Dimension name -> rubric text, in the configured order (the
            order ``all_dimensions`` asks the scores in).
        template: The protocol's judge prompt template (name or path:
            ``prompts.judge``, ``prompts.judge_checklist`` or
            ``prompts.judge_dimensions``).
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
        self._protocol: str = getattr(engine, "protocol", "score")
        self._baseline: str = getattr(engine, "checklist_baseline", "none")
        self._checklists = (
            {d: checklist(r, dimension=d) for d, r in self._rubrics.items()}
            if self._protocol == "checklist"
            else {}
        )
        self._base_cache: dict[str, list[ScoreResult]] = {}
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
        if self._protocol == "checklist":
            return self._checklist(items)
        if self._protocol == "all_dimensions":
            return self._all_dimensions(items)
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

    def _checklist(self, items: list[JudgeItem]) -> list[ScoreResult]:
        """One yes/no call per item; the score ``10 * sum w_i P(yes_i)``.

        With ``checklist_baseline: empty_answer`` each (question, dimension)
        is also asked of an empty answer, once per stage instance: a reading
        whose items all came back is kept for the question's other answers
        (the row that asked it carries its tokens; at most
        :data:`BASELINES_KEPT` are kept).
        """
        prompts: list[str] = []
        spans: list[tuple[int, int]] = []
        asked_base: dict[str, int] = {}
        for it in items:
            if self._baseline == "empty_answer":
                key = _baseline_key(it)
                if key not in self._base_cache and key not in asked_base:
                    asked_base[key] = len(prompts)
                    prompts += self._item_prompts(it, "")
            spans.append((len(prompts), len(self._checklists[it.dimension].items)))
            prompts += self._item_prompts(it, it.answer)
        words = yes_no_words(self._template)
        got = self._engine.yes_no(prompts, words=words, mode=self._mode)  # type: ignore[attr-defined]
        fresh: dict[str, list[ScoreResult]] = {}
        for it in items:
            key = _baseline_key(it) if self._baseline == "empty_answer" else ""
            if key in asked_base and key not in fresh:
                at = asked_base[key]
                fresh[key] = list(
                    got[at : at + len(self._checklists[it.dimension].items)]
                )
        for key, readings in fresh.items():
            if all(r.status == "ok" for r in readings):
                self._base_cache[key] = readings
        out = []
        for it, (first, n) in zip(items, spans, strict=True):
            asked = list(got[first : first + n])
            calls = list(asked)
            against: list[ScoreResult] = []
            if self._baseline == "empty_answer":
                key = _baseline_key(it)
                against = fresh.get(key) or self._base_cache[key]
                if key in asked_base:
                    calls += against
                    del asked_base[key]  # its tokens go to one row
            out.append(self._combine(it, asked, against, calls))
        while len(self._base_cache) > BASELINES_KEPT:  # the oldest first
            del self._base_cache[next(iter(self._base_cache))]
        return out

    def _item_prompts(self, it: JudgeItem, answer: str) -> list[str]:
        cl = self._checklists[it.dimension]
        return [
            render_checklist_item(
                it.document,
                it.question,
                answer,
                header=cl.header,
                item=item.text,
                nonce=self._nonce,
                template=self._template,
            )
            for item in cl.items
        ]

    def _combine(
        self,
        it: JudgeItem,
        asked: list[ScoreResult],
        against: list[ScoreResult],
        calls: list[ScoreResult],
    ) -> ScoreResult:
        prompt_tokens = _total(r.prompt_tokens for r in calls)
        completion_tokens = _total(r.completion_tokens for r in calls)
        latency_s = sum(r.latency_s or 0.0 for r in calls) or None
        bad = next(
            (
                (k, r)
                for k, r in enumerate([*asked, *against])
                if r.status != "ok" or r.score is None
            ),
            None,
        )
        if bad is not None:
            k, r = bad
            where = f"item {k % len(asked) + 1}" + (
                " (empty answer)" if k >= len(asked) else ""
            )
            return ScoreResult(
                None,
                status=r.status,
                raw=f"{where}: {r.raw or ''}",
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                latency_s=latency_s,
            )
        p = [float(r.score) for r in asked if r.score is not None]
        raw = "P(yes) " + " ".join(f"{x:.3f}" for x in p)
        if against:
            b = [float(r.score) for r in against if r.score is not None]
            raw += "; empty answer " + " ".join(f"{x:.3f}" for x in b)
            p = [contrast(x, y) for x, y in zip(p, b, strict=True)]
        weights = [i.weight for i in self._checklists[it.dimension].items]
        return ScoreResult(
            checklist_score(p, weights),
            raw=raw,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            latency_s=latency_s,
        )

    def _all_dimensions(self, items: list[JudgeItem]) -> list[ScoreResult]:
        """One call per answer; each row takes its dimension's line."""
        order = list(self._rubrics)
        groups: dict[tuple[str, str, str], list[int]] = {}
        for k, it in enumerate(items):
            groups.setdefault((it.document, it.question, it.answer), []).append(k)
        prompts = [
            render_dimensions(
                document,
                question,
                answer,
                list(self._rubrics.values()),
                nonce=self._nonce,
                template=self._template,
            )
            for document, question, answer in groups
        ]
        got = self._engine.score_lines(prompts, count=len(order), mode=self._mode)  # type: ignore[attr-defined]
        out: list[ScoreResult | None] = [None] * len(items)
        for rows, lines in zip(groups.values(), got, strict=True):
            for share, k in enumerate(rows):
                r = lines[order.index(items[k].dimension)]
                out[k] = ScoreResult(
                    r.score,
                    status=r.status,
                    raw=r.raw,
                    prompt_tokens=_share(r.prompt_tokens, len(rows), share),
                    completion_tokens=_share(r.completion_tokens, len(rows), share),
                    latency_s=None if r.latency_s is None else r.latency_s / len(rows),
                )
        return [r for r in out if r is not None]

    def close(self) -> None:
        """Close the engine."""
        engine = getattr(self, "_engine", None)
        if engine is not None:
            engine.close()


BASELINES_KEPT = 65_536
"""Empty-answer readings a judge stage keeps (``checklist_baseline``)."""


def _baseline_key(it: JudgeItem) -> str:
    """The (document, question, dimension) an empty-answer reading belongs to."""
    digest = hashlib.sha256()
    for part in (it.document, it.question, it.dimension):
        digest.update(part.encode())
        digest.update(b"\x00")
    return digest.hexdigest()


def _total(values: Any) -> int | None:
    """Sum of token counts, None when none was reported.

    >>> _total([3, None, 4]), _total([None])
    (7, None)
    """
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _share(total: int | None, parts: int, index: int) -> int | None:
    """Row ``index``'s share of a call's tokens split over ``parts`` rows.

    >>> [_share(10, 4, i) for i in range(4)], _share(None, 2, 0)
    ([4, 2, 2, 2], None)
    """
    if total is None:
        return None
    return total // parts + (total % parts if index == 0 else 0)
