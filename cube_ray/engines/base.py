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
from typing import Literal, Protocol, runtime_checkable

__all__ = [
    "SCORE_CHOICES",
    "Engine",
    "Generation",
    "ItemJudge",
    "JudgeItem",
    "SamplingParams",
    "ScoreMode",
    "ScoreResult",
]

SCORE_CHOICES: tuple[str, ...] = tuple(str(i) for i in range(11))
"""The only valid judge outputs: the integers 0..10 as text."""

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
