"""Rank fusion and rank metrics: pure functions on ranked id lists."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["gold_rank", "mean_reciprocal_rank", "recall_at", "rrf", "rrf_scored"]


def rrf(
    rankings: Sequence[Sequence[str]], *, k: int = 60, top_n: int | None = None
) -> list[str]:
    """Reciprocal rank fusion: ``score(d) = Σ_lists 1 / (k + rank_d)``.

    Ties keep the order of first appearance (earlier lists, then higher ranks).

    Args:
        rankings: Ranked id lists (best first), e.g. from BM25 and dense retrieval.
        k: Fusion constant; larger values flatten the rank weights.
        top_n: Keep at most this many ids.

    >>> rrf([["a", "b", "c"], ["c", "a", "d"]], k=60)
    ['a', 'c', 'b', 'd']
    >>> rrf([["a", "b"], ["b", "a"]], k=1)
    ['a', 'b']
    >>> rrf([["x"], []], top_n=0)
    []
    """
    return [doc for doc, _ in rrf_scored(rankings, k=k, top_n=top_n)]


def rrf_scored(
    rankings: Sequence[Sequence[str]], *, k: int = 60, top_n: int | None = None
) -> list[tuple[str, float]]:
    """:func:`rrf` with each id's fused score.

    >>> [(d, round(s, 3)) for d, s in rrf_scored([["a", "b"], ["b"]], k=1)]
    [('b', 0.833), ('a', 0.5)]
    """
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, doc in enumerate(ranking, start=1):
            scores[doc] = scores.get(doc, 0.0) + 1.0 / (k + rank)
    first = {doc: i for i, doc in enumerate(scores)}
    fused = sorted(scores, key=lambda d: (-scores[d], first[d]))
    if top_n is not None:
        fused = fused[:top_n]
    return [(doc, scores[doc]) for doc in fused]


def gold_rank(retrieved: Sequence[str], gold: str) -> int:
    """1-based position of the gold document, 0 when it was not retrieved.

    >>> gold_rank(["d3", "d1"], "d1"), gold_rank(["d3"], "d1")
    (2, 0)
    """
    for i, doc in enumerate(retrieved, start=1):
        if doc == gold:
            return i
    return 0


def recall_at(ranks: Sequence[int], k: int) -> float:
    """Share of questions whose gold rank is in 1..k.

    >>> recall_at([1, 3, 0, 9], 5)
    0.5
    """
    if not ranks:
        return 0.0
    return sum(1 for r in ranks if 1 <= r <= k) / len(ranks)


def mean_reciprocal_rank(ranks: Sequence[int]) -> float:
    """Mean of ``1 / rank`` (0 for a miss).

    >>> mean_reciprocal_rank([1, 2, 0, 4])
    0.4375
    """
    if not ranks:
        return 0.0
    return sum(1.0 / r for r in ranks if r > 0) / len(ranks)
