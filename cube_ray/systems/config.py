"""Typed configuration of systems under test (the ``systems:`` list of a run)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from cube_ray._pydantic import StrictModel
from cube_ray.engines.config import PoolConfig

__all__ = [
    "BuiltinRagSystemConfig",
    "HttpSystemConfig",
    "QaFileSystemConfig",
    "SystemConfig",
]


class _SystemBase(StrictModel):
    name: str = "rag"
    """``rag`` or ``rag@<variant>``; unique within a run."""
    k: int = Field(8, ge=1)
    """Retrieval depth: rank scores are ``k + 2 - rank``; recall@k."""
    pool: PoolConfig = Field(default_factory=PoolConfig)
    """Actor pool of this system's stage."""

    @field_validator("name")
    @classmethod
    def _rag_name(cls, v: str) -> str:
        if v != "rag" and not (v.startswith("rag@") and len(v) > 4):
            msg = f"system name {v!r} must be 'rag' or 'rag@<variant>', e.g. 'rag@k8'"
            raise ValueError(msg)
        return v


class QaFileSystemConfig(_SystemBase):
    """Answers collected elsewhere: a file with question_id (or question), answer
    and retrieved doc ids."""

    kind: Literal["qa_file"] = "qa_file"
    path: str
    """Parquet, CSV or JSONL file."""
    question_id_field: str = "question_id"
    """Column with the question id (or use ``question_field`` to match by text)."""
    question_field: str | None = None
    """Match rows to questions by question text instead of id."""
    answer_field: str = "answer"
    """Column with the answer text."""
    retrieved_field: str = "retrieved_doc_ids"
    """Column with the ranked retrieved doc ids (list, or a JSON/comma string)."""


class BuiltinRagSystemConfig(_SystemBase):
    """cube_ray's reference RAG: BM25 (+ optional dense, RRF) over the corpus,
    answered by the generator engine with the bounds' answer prompt."""

    kind: Literal["builtin_rag"] = "builtin_rag"
    retriever: Literal["bm25", "dense", "hybrid"] = "bm25"
    """Retrieval method."""
    language: Literal["auto", "zh", "en"] = "auto"
    """Tokenisation: jieba for Chinese, a stemmer-free word split for English."""
    embedding_model: str | None = None
    """Local embedding model directory for dense/hybrid retrieval."""
    rrf_k: int = Field(60, ge=1)
    """Reciprocal-rank-fusion constant for hybrid retrieval."""


class HttpSystemConfig(_SystemBase):
    """A deployed RAG service reached over HTTP."""

    kind: Literal["http"] = "http"
    preset: Literal["custom", "ragflow", "openai_chat"] = "custom"
    """Request/response layout; ``custom`` uses the fields below."""
    url: str
    """Endpoint URL."""
    method: Literal["POST", "GET"] = "POST"
    """HTTP method."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Headers; ``${ENV_NAME}`` is replaced from the environment (secrets)."""
    body: dict[str, Any] = Field(default_factory=dict)
    """JSON body template; the string ``"{question}"`` is replaced by the question."""
    answer_path: str = "answer"
    """Dotted path to the answer in the JSON response."""
    retrieved_path: str = "retrieved_doc_ids"
    """Dotted path to the ranked doc ids (``a.b[].id`` maps over a list)."""
    max_concurrency: int = Field(8, ge=1)
    """Requests in flight per actor."""
    timeout_s: float = Field(120.0, gt=0)
    """Per-request timeout."""
    max_retries: int = Field(3, ge=0)
    """Retries on 429/5xx/timeouts."""


SystemConfig = Annotated[
    QaFileSystemConfig | BuiltinRagSystemConfig | HttpSystemConfig,
    Field(discriminator="kind"),
]
"""One system under test; ``kind`` picks the model."""
