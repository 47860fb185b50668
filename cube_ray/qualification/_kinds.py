"""The five fault kinds of CUBE_METHOD.md section 12, one pure function each.

Each kind takes the original answer, its gold document, donor documents (other
documents of the corpus) and a random generator seeded from
``(seed, question_id, kind)`` (:func:`fault_rng`), and returns a
:class:`Fault` with exactly one change region (:class:`Span`), or None when the
kind cannot be applied to that answer (counted as *skipped*).

This module is the registry (``FAULT_KINDS``, :func:`make_fault`); the kinds
live by family: ``_swap`` (``number``, ``entity``), ``_negation``, ``_claims``
(``omission``, ``unsupported``); ``Span``, ``Fault`` and the seeded generator
in ``_fault``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Literal, get_args

from cube_ray.qualification._claims import omission_fault, unsupported_fault
from cube_ray.qualification._document import GoldDocument
from cube_ray.qualification._fault import Fault, FaultFn, fault_rng
from cube_ray.qualification._negation import negation_fault
from cube_ray.qualification._swap import entity_fault, number_fault

__all__ = ["FAULT_KINDS", "KINDS", "FaultKind", "make_fault"]


FaultKind = Literal["number", "entity", "negation", "omission", "unsupported"]
"""A fault kind's name (config ``qualification.kinds``, ``dimensions[].detects``)."""

FAULT_KINDS: Final[dict[str, FaultFn]] = {
    "number": number_fault,
    "entity": entity_fault,
    "negation": negation_fault,
    "omission": omission_fault,
    "unsupported": unsupported_fault,
}
"""Each fault kind of CUBE_METHOD.md section 12 and its function."""
KINDS: Final[tuple[FaultKind, ...]] = get_args(FaultKind)
"""The fault kinds in their canonical order."""
assert set(KINDS) == set(FAULT_KINDS)


def make_fault(
    kind: str,
    answer: str,
    gold: GoldDocument,
    *,
    donors: Sequence[GoldDocument],
    seed: int,
    question_id: str,
) -> Fault | None:
    """The fault of one kind for one answer, deterministic from (seed, question, kind).

    Returns None (skipped) when the kind does not apply to the answer.

    >>> gold = GoldDocument.of("g", "承诺办结时限: 7(工作日)")
    >>> a, b = (
    ...     make_fault("number", "7个工作日。", gold, donors=[], seed=1, question_id=q)
    ...     for q in ("q", "q")
    ... )
    >>> a == b and a.faulted != "7个工作日。"
    True
    """
    if kind not in FAULT_KINDS:
        msg = f"unknown fault kind {kind!r}; expected one of {list(KINDS)}"
        raise ValueError(msg)
    if not answer or not answer.strip():
        return None
    fn = FAULT_KINDS[kind]
    return fn(answer, gold, donors, fault_rng(seed, question_id, kind))
