"""What a fault is: the faulted copy, its one change region, the seeded generator.

Shared by every fault kind (``_swap``, ``_negation``, ``_claims``) and the
registry (``_kinds``).
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cube_ray.qualification._document import GoldDocument

__all__ = [
    "Fault",
    "FaultFn",
    "Span",
    "at_sentence_start",
    "fault_rng",
    "replace_span",
]


@dataclass(frozen=True)
class Span:
    """The one change: ``answer[start:end]`` (``original``) became ``replacement``."""

    start: int
    end: int
    original: str
    replacement: str


@dataclass(frozen=True)
class Fault:
    """A faulted copy of an answer and the span that was changed."""

    kind: str
    answer: str
    faulted: str
    span: Span

    def __post_init__(self) -> None:
        s = self.span
        rebuilt = self.answer[: s.start] + s.replacement + self.answer[s.end :]
        if rebuilt != self.faulted or self.answer[s.start : s.end] != s.original:
            msg = f"a {self.kind} fault's span does not describe its change: {s}"
            raise ValueError(msg)
        if self.faulted == self.answer:
            msg = f"a {self.kind} fault left the answer unchanged"
            raise ValueError(msg)


FaultFn = Callable[
    [str, GoldDocument, Sequence[GoldDocument], random.Random], "Fault | None"
]
"""``(answer, gold, donors, rng) -> Fault | None``."""


def fault_rng(seed: int, question_id: str, kind: str) -> random.Random:
    """The random generator of one (seed, question, kind): the same on every run.

    >>> fault_rng(0, "q1", "number").random() == fault_rng(0, "q1", "number").random()
    True
    >>> fault_rng(0, "q1", "number").random() == fault_rng(1, "q1", "number").random()
    False
    """
    digest = hashlib.sha256(f"{seed}:{question_id}:{kind}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def replace_span(kind: str, answer: str, start: int, end: int, new: str) -> Fault:
    """The fault of ``kind`` that puts ``new`` in place of ``answer[start:end]``."""
    span = Span(start, end, answer[start:end], new)
    return Fault(kind, answer, answer[:start] + new + answer[end:], span)


def at_sentence_start(text: str, pos: int) -> bool:
    """Whether ``pos`` begins a sentence (or the text, or a quoted title).

    >>> [at_sentence_start("Ab. Cd ef", p) for p in (0, 4, 7)]
    [True, True, False]
    """
    return (
        re.search(r"(?:^|[.!?。！？\n][\"'”’)]*\s*)[\"'“‘(]*$", text[:pos]) is not None
    )
