"""The seeded order of CUBE_METHOD.md section 11, for the qualification sample.

A small local helper: ``cube_ray/sample.py`` (section 11's planned sample) owns
the same rule for the run's sample; the two may be unified there.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

__all__ = ["order_key", "seeded_sample"]


def order_key(seed: int, doc_id: str) -> str:
    """``sha256(f"{seed}:{doc_id}")`` as hex: a document's place in the seeded order.

    >>> order_key(0, "a")[:12]
    '9df3c5fab8ef'
    """
    return hashlib.sha256(f"{seed}:{doc_id}".encode()).hexdigest()


def seeded_sample(
    pairs: Iterable[tuple[str, str]], *, size: int, seed: int
) -> list[str]:
    """The question ids of the first ``size`` questions in the seeded order.

    ``pairs`` are ``(question_id, doc_id)``; questions are ordered by their gold
    document's :func:`order_key`, ties (several questions of one document) by
    question id. Samples are nested: a larger size keeps every smaller sample.

    >>> pairs = [(f"q{i}", f"d{i}") for i in range(10)]
    >>> small = seeded_sample(pairs, size=3, seed=7)
    >>> large = seeded_sample(pairs, size=6, seed=7)
    >>> small == large[:3], len(large)
    (True, 6)
    """
    keyed: Sequence[tuple[str, str, str]] = sorted(
        (order_key(seed, doc_id), qid, doc_id) for qid, doc_id in pairs
    )
    return [qid for _, qid, _ in keyed[:size]]
