"""Retrieval of the built-in reference RAG: tokenisers, BM25 index, rank fusion.

Answering is not done here (see :mod:`cube_ray.systems.builtin_rag`).
"""

from cube_ray.retrieval.bm25 import (
    Bm25Index,
    Hit,
    build_bm25_index,
    ensure_bm25_index,
    iter_documents,
)
from cube_ray.retrieval.fusion import gold_rank, mean_reciprocal_rank, recall_at, rrf
from cube_ray.retrieval.tokenizer import (
    TOKENIZER_VERSION,
    Language,
    detect_language,
    tokenize,
    tokenize_many,
)

__all__ = [
    "TOKENIZER_VERSION",
    "Bm25Index",
    "Hit",
    "Language",
    "build_bm25_index",
    "detect_language",
    "ensure_bm25_index",
    "gold_rank",
    "iter_documents",
    "mean_reciprocal_rank",
    "recall_at",
    "rrf",
    "tokenize",
    "tokenize_many",
]
