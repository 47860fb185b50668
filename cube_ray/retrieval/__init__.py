"""Retrieval of the built-in reference RAG: tokenisers, BM25, dense, rank fusion.

Answering is not done here (see :mod:`cube_ray.systems.builtin_rag`).
"""

from cube_ray.retrieval.bm25 import (
    Bm25Index,
    Hit,
    build_bm25_index,
    ensure_bm25_index,
    iter_documents,
)
from cube_ray.retrieval.dense import (
    DenseIndex,
    Embedder,
    HttpEmbedder,
    build_dense_index,
    ensure_dense_index,
)
from cube_ray.retrieval.fusion import (
    gold_rank,
    mean_reciprocal_rank,
    recall_at,
    rrf,
    rrf_scored,
)
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
    "DenseIndex",
    "Embedder",
    "Hit",
    "HttpEmbedder",
    "Language",
    "build_bm25_index",
    "build_dense_index",
    "detect_language",
    "ensure_bm25_index",
    "ensure_dense_index",
    "gold_rank",
    "iter_documents",
    "mean_reciprocal_rank",
    "recall_at",
    "rrf",
    "rrf_scored",
    "tokenize",
    "tokenize_many",
]
