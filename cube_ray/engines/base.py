"""The engine protocol: what every LLM backend offers the stages.

An engine is synchronous and batch-oriented: a stage hands it a list of prompt
texts and gets back one result per prompt, in order. Backends that are async
inside (HTTP) run their own event loop. Per-prompt failures come back as a
result with a non-"ok" ``status``; only engine-fatal conditions raise
:class:`cube_ray.errors.EngineError`.

Prompts are plain text (the body of one user turn). Each engine decides from its
config whether to wrap the text in the model's chat template or to send it as a
completion prompt.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = [
    "SCORED_STATUSES",
    "SCORE_CHOICES",
    "STATUS_ARGMAX_FALLBACK",
    "STATUS_LOW_SCORE_MASS",
    "STATUS_NO_LOGPROBS",
    "BorrowedEngine",
    "Engine",
    "Generation",
    "ItemJudge",
    "JudgeItem",
    "ProtocolEngine",
    "SamplingParams",
    "ScoreMode",
    "ScoreResult",
]

SCORE_CHOICES: tuple[str, ...] = tuple(str(i) for i in range(11))
"""The only valid judge outputs: the integers 0..10 as text."""

STATUS_LOW_SCORE_MASS = "low_score_mass"
"""``expected`` mode: the score tokens hold less than ``min_score_mass`` of the
first token's probability; no score (raw: the text and the mass)."""
STATUS_NO_LOGPROBS = "no_logprobs"
"""``expected`` mode: no score token came back with a log-probability."""
STATUS_ARGMAX_FALLBACK = "argmax_fallback"
"""``expected`` mode: the "1"/"10" split mattered and could not be read; the
score is the greedy (argmax) one, kept, and the raw text says why."""
SCORED_STATUSES: frozenset[str] = frozenset({"ok", STATUS_ARGMAX_FALLBACK})
"""Statuses whose score is kept in the scores table; every other is null."""

ScoreMode = Literal["argmax", "expected"]
"""``argmax``: the most likely score token; ``expected``: probability-weighted
mean over the 11 score tokens (from logprobs)."""


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """Sampling settings of one generate call."""

    max_tokens: int = 512
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = 0
    stop: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Generation:
    """One generated text, or why there is none."""

    text: str | None
    status: str = "ok"
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float | None = None


@dataclass(frozen=True, slots=True)
class ScoreResult:
    """One judge score in 0..10, or a missing score with its status and raw text."""

    score: float | None
    status: str = "ok"
    raw: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float | None = None


@dataclass(frozen=True, slots=True)
class JudgeItem:
    """What a judge sees of one (answer, dimension) row, before any prompt."""

    document: str
    """The gold document."""
    question: str
    """The citizen's question."""
    answer: str
    """The answer to score."""
    dimension: str
    """The scoring dimension."""
    rubric: str
    """The dimension's rubric text."""


@runtime_checkable
class ItemJudge(Protocol):
    """A judge that scores structured items itself instead of rendered prompts.

    The judge stage hands such an engine :class:`JudgeItem` rows (the reference
    judge measures the answer against the document; no prompt is involved).
    """

    def judge_items(self, items: Sequence[JudgeItem]) -> list[ScoreResult]:
        """Score each item 0..10 (or a missing score with its status)."""
        ...


@runtime_checkable
class Engine(Protocol):
    """An LLM backend usable as generator or judge."""

    name: str
    """Display name of the model (recorded in output tables)."""

    def generate(
        self, prompts: Sequence[str], *, sampling: SamplingParams
    ) -> list[Generation]:
        """Generate one completion per prompt, in order."""
        ...

    def score(self, prompts: Sequence[str], *, mode: ScoreMode) -> list[ScoreResult]:
        """Score each prompt with a constrained choice among :data:`SCORE_CHOICES`."""
        ...

    def close(self) -> None:
        """Release resources (engine memory, connections). Idempotent."""
        ...


@runtime_checkable
class ProtocolEngine(Protocol):
    """An engine that can judge under every protocol (CUBE_METHOD.md section 14).

    ``yes_no`` returns P(yes) in 0..1 in :attr:`ScoreResult.score` (protocol
    ``checklist``); ``score_lines`` returns, per prompt, ``count`` scores 0..10
    written one a line (``all_dimensions``), each carrying the whole call's
    token counts.
    """

    def yes_no(
        self, prompts: Sequence[str], *, words: tuple[str, str], mode: ScoreMode
    ) -> list[ScoreResult]:
        """P(yes) per prompt, normalised over ``words`` (yes, no)."""
        ...

    def score_lines(
        self, prompts: Sequence[str], *, count: int, mode: ScoreMode
    ) -> list[list[ScoreResult]]:
        """``count`` scores per prompt, one a line, in order."""
        ...


class BorrowedEngine:
    """An engine lent to a stage that must not close it (stages close theirs).

    Everything but :meth:`close` reaches the owner's engine; the owner closes it.
    """

    def __init__(self, engine: Any) -> None:
        self._engine = engine

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def close(self) -> None:
        """Nothing: the owner closes the engine."""
