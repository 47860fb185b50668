"""Generator stages: one question per document, and the zero/full bound answers."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pyarrow as pa

from cube_ray import schema
from cube_ray.engines.base import Generation, SamplingParams
from cube_ray.engines.registry import build_engine
from cube_ray.prompts import fresh_nonce, render_answer, render_question
from cube_ray.stages._base import (
    ANSWER_MAX_CHARS,
    INPUT_HASH,
    EngineFactory,
    Stage,
    capped,
)

__all__ = [
    "ANSWERS_OUT_SCHEMA",
    "QUESTIONS_OUT_SCHEMA",
    "AnswerStage",
    "QuestionStage",
    "questions_table",
    "sampling_of",
]

QUESTIONS_OUT_SCHEMA = pa.unify_schemas(
    [schema.QUESTIONS_SCHEMA, schema.QUESTIONS_EXTRA]
)
"""Columns of the ``questions/`` table the pipeline writes."""
ANSWERS_OUT_SCHEMA = pa.unify_schemas([schema.ANSWERS_SCHEMA, schema.ANSWERS_EXTRA])
"""Columns of the ``answers/`` table the pipeline writes."""


def questions_table(columns: dict[str, Any]) -> pa.Table:
    """A ``questions/`` table in :data:`QUESTIONS_OUT_SCHEMA`, whoever wrote it.

    Columns the writer has no value for (a question file has no generation
    latency or token counts) are null; a required column that is missing is
    an error here rather than a ``KeyError`` in the part writer.

    >>> t = questions_table({"question_id": ["q1"], "doc_id": ["d1"],
    ...                      "question": ["Why?"], "status": ["ok"]})
    >>> t.schema == QUESTIONS_OUT_SCHEMA, t.column("latency_s").to_pylist()
    (True, [None])
    >>> questions_table({"question_id": ["q1"]})
    Traceback (most recent call last):
    ...
    ValueError: questions table without required column 'doc_id'
    """
    n = len(next(iter(columns.values()))) if columns else 0
    full: dict[str, Any] = {}
    for f in QUESTIONS_OUT_SCHEMA:
        if f.name in columns:
            full[f.name] = columns[f.name]
        elif f.nullable:
            full[f.name] = pa.nulls(n, f.type)
        else:
            msg = f"questions table without required column {f.name!r}"
            raise ValueError(msg)
    return pa.Table.from_pydict(full, schema=QUESTIONS_OUT_SCHEMA)


QUESTION_MAX_TOKENS = 96
"""Most tokens generated for one question (one sentence)."""

STATUS_NO_QUESTION = "no_question"
"""Answer status when the question itself could not be generated."""


def sampling_of(config: Any) -> SamplingParams:
    """Engine sampling parameters from an engine config's ``sampling`` section."""
    s = config.sampling
    return SamplingParams(
        max_tokens=s.max_tokens,
        temperature=s.temperature,
        top_p=s.top_p,
        seed=s.seed,
        stop=tuple(s.stop),
    )


def _gen_columns(gens: list[Generation]) -> dict[str, list[Any]]:
    return {
        schema.STATUS: [g.status for g in gens],
        schema.LATENCY_S: [g.latency_s for g in gens],
        schema.PROMPT_TOKENS: [g.prompt_tokens for g in gens],
        schema.COMPLETION_TOKENS: [g.completion_tokens for g in gens],
    }


def _text_or_none(g: Generation) -> str | None:
    if g.status != schema.STATUS_OK or g.text is None:
        return None
    text = g.text.strip()
    return text or None


def _first_line(text: str | None) -> str | None:
    r"""One question: the first non-empty line of what the generator wrote.

    Small and base models often keep writing after the question (another
    question, a continuation of the document); the method asks for one.

    >>> _first_line("  如何办理护士执业注册？\n\n办事指南：……")
    '如何办理护士执业注册？'
    >>> _first_line("1. 办理注册商标注册手续需要准备哪些材料？")
    '办理注册商标注册手续需要准备哪些材料？'
    >>> _first_line("1.5万元以下的补贴怎么申请？")
    '1.5万元以下的补贴怎么申请？'
    >>> _first_line("\n\n") is None
    True
    """
    if text is None:
        return None
    for line in text.splitlines():
        line = _ENUMERATOR.sub("", line).strip()
        if line:
            return line
    return None


_ENUMERATOR = re.compile(r"^\s*(?:\d{1,2}\s*[.、)）](?!\d)|[-*•])\s*")
"""A list marker a model may put before its question ("1. ", "2、", "- ")."""


STATUS_EMPTY = "empty_output"
"""Status of a generation that succeeded but produced only whitespace."""


def _empty_as_status(gens: list[Generation], texts: list[str | None]) -> list[str]:
    return [
        g.status if g.status != schema.STATUS_OK or t else STATUS_EMPTY
        for g, t in zip(gens, texts, strict=True)
    ]


class _GeneratingStage(Stage):
    """A stage whose engine generates text (built once per actor).

    Holds the engine, its sampling settings and the prompt template.
    """

    default_template: str = ""

    def __init__(
        self,
        engine: Any,
        *,
        template: str | None = None,
        nonce: str | None = None,
        engine_factory: EngineFactory = build_engine,
        call_log: str | None = None,
    ) -> None:
        super().__init__(call_log=call_log)
        self._nonce = fresh_nonce(nonce)
        self._engine = engine_factory(engine)
        self._sampling = sampling_of(engine)
        self._template = template if template is not None else self.default_template


class QuestionStage(_GeneratingStage):
    """The generator, playing a citizen, writes one question per document.

    The first non-empty line of its output is the question; generation stops
    after :data:`QUESTION_MAX_TOKENS` tokens (the generator's ``max_tokens`` is
    sized for answers, and a model that keeps writing after its question would
    otherwise spend that budget on text that is thrown away).

    Input columns: ``doc_id``, ``text``, ``_input_hash``. Output: the questions
    table (``question_id`` = ``doc_id``: one question per document).

    Args:
        engine: The generator's engine config.
        template: Question prompt template (name or path).
        nonce: The run's prompt-tag nonce (default: a random one).
        engine_factory: Builds the engine (default :func:`build_engine`).
        call_log: File that gets one line per engine call (tests).
    """

    name = "questions"
    required = (schema.DOC_ID, schema.TEXT, INPUT_HASH)
    output_schema = QUESTIONS_OUT_SCHEMA

    default_template = "question"

    def __call__(self, batch: pa.Table) -> pa.Table:
        """Generate the questions of a batch of documents."""
        self.check_columns(batch.column_names)
        doc_ids = batch.column(schema.DOC_ID).to_pylist()
        prompts = [
            render_question(t, nonce=self._nonce, template=self._template)
            for t in batch.column(schema.TEXT).to_pylist()
        ]
        self._log_calls(doc_ids)
        sampling = dataclasses.replace(
            self._sampling,
            max_tokens=min(self._sampling.max_tokens, QUESTION_MAX_TOKENS),
        )
        gens = self._engine.generate(prompts, sampling=sampling)
        questions = [_first_line(_text_or_none(g)) for g in gens]
        cols: dict[str, Any] = {
            schema.QUESTION_ID: doc_ids,
            schema.DOC_ID: doc_ids,
            schema.QUESTION: questions,
            schema.GENERATOR: [self._engine.name] * len(gens),
            schema.REFERENCE_ANSWER: [None] * len(gens),
            schema.CONTENT_HASH: batch.column(INPUT_HASH).to_pylist(),
            **_gen_columns(gens),
        }
        cols[schema.STATUS] = _empty_as_status(gens, questions)
        return questions_table(cols)

    def close(self) -> None:
        """Close the engine."""
        engine = getattr(self, "_engine", None)
        if engine is not None:
            engine.close()


class AnswerStage(_GeneratingStage):
    """The zero- and full-score bounds, written by the generator.

    ``zero`` answers with no context, ``full`` with only the gold document.

    Input columns: ``question_id``, ``doc_id``, ``system`` (``zero``/``full``),
    ``question``, ``text`` (the gold document), ``_input_hash``.

    Args:
        engine: The generator's engine config.
        template: Answer prompt template (name or path), shared with the RAG.
        nonce: The run's prompt-tag nonce (default: a random one).
        engine_factory: Builds the engine (default :func:`build_engine`).
        call_log: File that gets one line per engine call (tests).
    """

    name = "answers"
    required = (
        schema.QUESTION_ID,
        schema.DOC_ID,
        schema.SYSTEM,
        schema.QUESTION,
        schema.TEXT,
        INPUT_HASH,
    )
    output_schema = ANSWERS_OUT_SCHEMA

    default_template = "answer"

    def __call__(self, batch: pa.Table) -> pa.Table:
        """Answer a batch of (question, bound) rows."""
        self.check_columns(batch.column_names)
        rows = batch.select(list(self.required)).to_pylist()
        todo = [i for i, r in enumerate(rows) if r[schema.QUESTION]]
        prompts = []
        for i in todo:
            r = rows[i]
            if r[schema.SYSTEM] not in schema.BOUND_SYSTEMS:
                msg = f"AnswerStage got system {r[schema.SYSTEM]!r}; expected zero/full"
                raise ValueError(msg)
            refs = [r[schema.TEXT]] if r[schema.SYSTEM] == schema.FULL else None
            prompts.append(
                render_answer(
                    r[schema.QUESTION], refs, nonce=self._nonce, template=self._template
                )
            )
        self._log_calls(
            [f"{rows[i][schema.QUESTION_ID]}/{rows[i][schema.SYSTEM]}" for i in todo]
        )
        gens_todo = (
            self._engine.generate(prompts, sampling=self._sampling) if prompts else []
        )
        gens = [Generation(text=None, status=STATUS_NO_QUESTION)] * len(rows)
        for i, g in zip(todo, gens_todo, strict=True):
            gens[i] = g
        cols: dict[str, Any] = {
            schema.QUESTION_ID: [r[schema.QUESTION_ID] for r in rows],
            schema.DOC_ID: [r[schema.DOC_ID] for r in rows],
            schema.SYSTEM: [r[schema.SYSTEM] for r in rows],
            schema.ANSWER: [capped(_text_or_none(g), ANSWER_MAX_CHARS) for g in gens],
            schema.RETRIEVED_DOC_IDS: [None] * len(rows),
            schema.RANK: [None] * len(rows),
            schema.CONTENT_HASH: [r[INPUT_HASH] for r in rows],
            **_gen_columns(gens),
        }
        cols[schema.STATUS] = _empty_as_status(gens, cols[schema.ANSWER])
        return pa.Table.from_pydict(cols, schema=self.output_schema)

    def close(self) -> None:
        """Close the engine."""
        engine = getattr(self, "_engine", None)
        if engine is not None:
            engine.close()
