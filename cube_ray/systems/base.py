"""The protocol of a system under test (SUT): question in, answer and ranked docs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

__all__ = ["QuestionIn", "SystemAnswer", "SystemUnderTest"]


@dataclass(frozen=True, slots=True)
class QuestionIn:
    """One question put to a system."""

    question_id: str
    question: str
    doc_id: str
    """The gold document (a system must not look at it; used for bookkeeping)."""


@dataclass(frozen=True, slots=True)
class SystemAnswer:
    """A system's answer with its retrieved documents in rank order."""

    answer: str | None
    retrieved_doc_ids: list[str] = field(default_factory=list)
    status: str = "ok"
    latency_s: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


@runtime_checkable
class SystemUnderTest(Protocol):
    """A RAG system evaluated by CuBE; one instance per Ray actor."""

    name: str
    """System name in the tables: ``rag`` or ``rag@<variant>``."""
    k: int
    """Retrieval depth used for rank scores and recall@k."""

    def answer(self, questions: Sequence[QuestionIn]) -> list[SystemAnswer]:
        """Answer each question, in order; per-row failures set ``status``."""
        ...

    def close(self) -> None:
        """Release resources. Idempotent."""
        ...
