"""The seeded order of CUBE_METHOD.md section 11, for the qualification sample.

The order itself (``sha256(f"{seed}:{doc_id}")``) is :func:`cube_ray.seeded.doc_hash`,
the same rule as the run's planned sample; this module only takes the first
questions in it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from cube_ray.seeded import doc_hash

__all__ = ["seeded_sample"]


def seeded_sample(
    pairs: Iterable[tuple[str, str]], *, size: int, seed: int
) -> list[str]:
    """The question ids of the first ``size`` questions in the seeded order.

    ``pairs`` are ``(question_id, doc_id)``; questions are ordered by their gold
    document's :func:`~cube_ray.seeded.doc_hash`, ties (several questions of one
    document) by question id. Samples are nested: a larger size keeps every
    smaller sample.

    >>> pairs = [(f"q{i}", f"d{i}") for i in range(10)]
    >>> small = seeded_sample(pairs, size=3, seed=7)
    >>> large = seeded_sample(pairs, size=6, seed=7)
    >>> small == large[:3], len(large)
    (True, 6)
    """
    keyed: Sequence[tuple[str, str, str]] = sorted(
        (doc_hash(seed, doc_id), qid, doc_id) for qid, doc_id in pairs
    )
    return [qid for _, qid, _ in keyed[:size]]
