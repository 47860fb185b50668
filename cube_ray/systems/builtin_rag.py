"""cube_ray's reference RAG: BM25, dense or hybrid retrieval, answered by the generator.

Retrieval lives in :mod:`cube_ray.retrieval`; this module only puts the pieces
together: retrieve the top k documents, render the answer prompt that the bounds
use (:func:`cube_ray.prompts.render_answer`) with the retrieved texts in rank
order, and let the generator engine write the answer.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from cube_ray.engines import build_engine
from cube_ray.engines.base import SamplingParams
from cube_ray.env import secret
from cube_ray.errors import ConfigError
from cube_ray.prompts import fresh_nonce, render_answer
from cube_ray.retrieval import (
    Bm25Index,
    DenseIndex,
    Embedder,
    Hit,
    HttpEmbedder,
    ensure_bm25_index,
    ensure_dense_index,
    rrf_scored,
)
from cube_ray.systems.base import QuestionIn, SystemAnswer

if TYPE_CHECKING:
    from cube_ray.engines.base import Engine
    from cube_ray.engines.config import EngineConfig, SamplingConfig
    from cube_ray.systems.config import BuiltinRagSystemConfig

__all__ = [
    "BuiltinRagSystem",
    "build_dense",
    "build_index",
    "default_index_root",
    "open_dense",
    "open_index",
    "sampling_params",
]


def default_index_root(documents_path: str | Path) -> Path:
    """``RUN_DIR/index`` for ``RUN_DIR/documents`` (the index's default home)."""
    return Path(documents_path).resolve().parent / "index"


def sampling_params(config: SamplingConfig) -> SamplingParams:
    """The engine's sampling parameters from the configured ones."""
    return SamplingParams(
        max_tokens=config.max_tokens,
        temperature=config.temperature,
        top_p=config.top_p,
        seed=config.seed,
        stop=tuple(config.stop),
    )


class BuiltinRagSystem:
    """Retrieval (BM25, dense or hybrid) plus generator answers; one per actor.

    Indexes are built once per corpus (see
    :func:`cube_ray.retrieval.ensure_bm25_index`) and memory-mapped by every
    actor, so ``__init__`` of the second and later actors only loads them. The
    BM25 index always exists: it also holds the texts put into the prompt.

    Args:
        config: The system's configuration.
        index: A loaded BM25 index.
        engine: The generator engine (None: retrieval only; :meth:`answer` raises).
        sampling: Sampling parameters of the answers.
        answer_template: The answer prompt template (name or path).
        nonce: The prompt-tag nonce (default: a random one).
        dense: The dense index (retriever ``dense`` or ``hybrid``), in the same
            document order as ``index``.
        embedder: Embeds questions for the dense index.
    """

    def __init__(
        self,
        config: BuiltinRagSystemConfig,
        *,
        index: Bm25Index,
        engine: Engine | None,
        sampling: SamplingParams | None = None,
        answer_template: str = "answer",
        nonce: str | None = None,
        dense: DenseIndex | None = None,
        embedder: Embedder | None = None,
    ) -> None:
        if config.retriever != "bm25":
            if dense is None or embedder is None:
                msg = (
                    f"system {config.name!r}: retriever {config.retriever!r} needs "
                    "a dense index and an embedder"
                )
                raise ConfigError(msg)
            if len(dense) != len(index):
                msg = (
                    f"system {config.name!r}: the dense index has {len(dense)} "
                    f"documents, the BM25 index {len(index)}; rebuild both from "
                    "the same documents"
                )
                raise ConfigError(msg)
        self.name = config.name
        self.k = config.k
        self.retriever = config.retriever
        self.index = index
        self.dense = dense
        self._embedder = embedder
        self._rrf_k = config.rrf_k
        self._candidates = max(config.hybrid_candidates, config.k)
        self._engine = engine
        self._sampling = sampling or SamplingParams()
        self._template = answer_template
        self._nonce = fresh_nonce(nonce)
        self._max_chars = config.max_reference_chars

    @classmethod
    def from_config(
        cls,
        config: BuiltinRagSystemConfig,
        *,
        documents_path: str,
        generator: EngineConfig | None,
        answer_template: str = "answer",
        nonce: str | None = None,
        engine_factory: Callable[[EngineConfig], Engine] | None = None,
    ) -> BuiltinRagSystem:
        """Build (or reuse) the indexes of ``documents_path`` and the generator.

        ``engine_factory`` builds the generator (default
        :func:`cube_ray.engines.build_engine`; a run passes its shared pool).
        """
        index = open_index(config, documents_path=documents_path)
        dense, embedder = open_dense(config, documents_path=documents_path)
        engine = None
        sampling = None
        if generator is not None:
            if engine_factory is None:
                engine_factory = build_engine
            engine = engine_factory(generator)
            sampling = sampling_params(generator.sampling)
        return cls(
            config,
            index=index,
            engine=engine,
            sampling=sampling,
            answer_template=answer_template,
            nonce=nonce,
            dense=dense,
            embedder=embedder,
        )

    def retrieve(self, questions: Sequence[str]) -> list[list[Hit]]:
        """The top-k hits of each question, best first.

        Hybrid hits carry their reciprocal-rank-fusion score.
        """
        if self.retriever == "bm25" or not questions:
            return [self.index.search(q, k=self.k) for q in questions]
        assert self.dense is not None
        assert self._embedder is not None
        vectors = self._embedder(list(questions))
        if self.retriever == "dense":
            return [self.dense.search(v, k=self.k) for v in vectors]
        out = []
        for question, vector in zip(questions, vectors, strict=True):
            lexical = self.index.search(question, k=self._candidates)
            semantic = self.dense.search(vector, k=self._candidates)
            where = {h.doc_id: h.index for h in (*semantic, *lexical)}
            fused = rrf_scored(
                [[h.doc_id for h in lexical], [h.doc_id for h in semantic]],
                k=self._rrf_k,
                top_n=self.k,
            )
            out.append([Hit(where[d], d, score) for d, score in fused])
        return out

    def prompts(self, questions: Sequence[str]) -> tuple[list[str], list[list[Hit]]]:
        """The answer prompts (and the hits they were built from)."""
        hits = self.retrieve(questions)
        prompts = []
        for question, qhits in zip(questions, hits, strict=True):
            texts = self.index.texts([h.index for h in qhits])
            if self._max_chars is not None:
                texts = [t[: self._max_chars] for t in texts]
            prompts.append(
                render_answer(
                    question, texts, nonce=self._nonce, template=self._template
                )
            )
        return prompts, hits

    def answer(self, questions: Sequence[QuestionIn]) -> list[SystemAnswer]:
        """Retrieve, render the answer prompt, generate; one answer per question."""
        if self._engine is None:
            msg = f"system {self.name!r} has no generator engine to answer with"
            raise ConfigError(msg)
        started = time.perf_counter()
        prompts, hits = self.prompts([q.question for q in questions])
        retrieval_s = (time.perf_counter() - started) / max(len(questions), 1)
        generations = self._engine.generate(prompts, sampling=self._sampling)
        out = []
        for gen, qhits in zip(generations, hits, strict=True):
            latency = None if gen.latency_s is None else gen.latency_s + retrieval_s
            out.append(
                SystemAnswer(
                    gen.text,
                    [h.doc_id for h in qhits],
                    status=gen.status,
                    latency_s=latency,
                    prompt_tokens=gen.prompt_tokens,
                    completion_tokens=gen.completion_tokens,
                )
            )
        return out

    def close(self) -> None:
        """Close the generator engine. Idempotent."""
        if self._engine is not None:
            self._engine.close()
            self._engine = None
        close = getattr(self._embedder, "close", None)
        if close is not None:
            close()
        self._embedder = None


def build_index(config: BuiltinRagSystemConfig, *, documents_path: str) -> Path:
    """Build the BM25 index of a documents table if needed; its directory."""
    root = config.index_dir or default_index_root(documents_path)
    path = ensure_bm25_index(
        documents_path,
        index_root=root,
        language=None if config.language == "auto" else config.language,
        k1=config.k1,
        b=config.b,
        workers=config.index_workers,
    )
    return path


def open_index(config: BuiltinRagSystemConfig, *, documents_path: str) -> Bm25Index:
    """Build the BM25 index of a documents table if needed, and load it."""
    return Bm25Index(build_index(config, documents_path=documents_path))


def _embedder(config: BuiltinRagSystemConfig) -> HttpEmbedder:
    assert config.embedding_url is not None
    assert config.embedding_model is not None
    api_key = None
    if config.embedding_api_key_env:
        api_key = secret(config.embedding_api_key_env)
        if api_key is None:
            msg = (
                f"system {config.name!r}: embedding_api_key_env names "
                f"{config.embedding_api_key_env}, which is not set; export it"
            )
            raise ConfigError(msg)
    return HttpEmbedder(
        base_url=config.embedding_url, model=config.embedding_model, api_key=api_key
    )


def build_dense(config: BuiltinRagSystemConfig, *, documents_path: str) -> Path | None:
    """Build the dense index if the retriever needs one (else None)."""
    if config.retriever == "bm25":
        return None
    assert config.embedding_model is not None
    embedder = _embedder(config)
    try:
        return ensure_dense_index(
            documents_path,
            index_root=config.index_dir or default_index_root(documents_path),
            embed=embedder,
            model=config.embedding_model,
        )
    finally:
        embedder.close()


def open_dense(
    config: BuiltinRagSystemConfig, *, documents_path: str
) -> tuple[DenseIndex | None, HttpEmbedder | None]:
    """The dense index and a question embedder, if the retriever needs them."""
    path = build_dense(config, documents_path=documents_path)
    if path is None:
        return None, None
    return DenseIndex(path), _embedder(config)
