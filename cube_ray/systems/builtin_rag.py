"""cube_ray's reference RAG: BM25 over the corpus, answered by the generator.

Retrieval lives in :mod:`cube_ray.retrieval`; this module only puts the pieces
together: retrieve the top k documents, render the answer prompt that the bounds
use (:func:`cube_ray.prompts.render_answer`) with the retrieved texts in rank
order, and let the generator engine write the answer.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from cube_ray.engines.base import SamplingParams
from cube_ray.errors import ConfigError
from cube_ray.prompts import render_answer
from cube_ray.retrieval import Bm25Index, Hit, ensure_bm25_index
from cube_ray.systems.base import QuestionIn, SystemAnswer

if TYPE_CHECKING:
    from cube_ray.engines.base import Engine
    from cube_ray.engines.config import EngineConfig, SamplingConfig
    from cube_ray.systems.config import BuiltinRagSystemConfig

__all__ = [
    "BuiltinRagSystem",
    "build_index",
    "default_index_root",
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
    """BM25 retrieval plus generator answers; one instance per Ray actor.

    The index is built once per corpus (see
    :func:`cube_ray.retrieval.ensure_bm25_index`) and memory-mapped by every
    actor, so ``__init__`` of the second and later actors only loads it.

    Args:
        config: The system's configuration.
        index: A loaded BM25 index.
        engine: The generator engine (None: retrieval only; :meth:`answer` raises).
        sampling: Sampling parameters of the answers.
        answer_template: The answer prompt template (name or path).
    """

    def __init__(
        self,
        config: BuiltinRagSystemConfig,
        *,
        index: Bm25Index,
        engine: Engine | None,
        sampling: SamplingParams | None = None,
        answer_template: str = "answer",
    ) -> None:
        _check_retriever(config)
        self.name = config.name
        self.k = config.k
        self.index = index
        self._engine = engine
        self._sampling = sampling or SamplingParams()
        self._template = answer_template
        self._max_chars = config.max_reference_chars

    @classmethod
    def from_config(
        cls,
        config: BuiltinRagSystemConfig,
        *,
        documents_path: str,
        generator: EngineConfig | None,
        answer_template: str = "answer",
    ) -> BuiltinRagSystem:
        """Build (or reuse) the index of ``documents_path`` and the generator."""
        index = open_index(config, documents_path=documents_path)
        engine = None
        sampling = None
        if generator is not None:
            from cube_ray.engines import build_engine

            engine = build_engine(generator)
            sampling = sampling_params(generator.sampling)
        return cls(
            config,
            index=index,
            engine=engine,
            sampling=sampling,
            answer_template=answer_template,
        )

    def retrieve(self, questions: Sequence[str]) -> list[list[Hit]]:
        """The top-k hits of each question, best first."""
        return [self.index.search(q, k=self.k) for q in questions]

    def prompts(self, questions: Sequence[str]) -> tuple[list[str], list[list[Hit]]]:
        """The answer prompts (and the hits they were built from)."""
        hits = self.retrieve(questions)
        prompts = []
        for question, qhits in zip(questions, hits, strict=True):
            texts = self.index.texts([h.index for h in qhits])
            if self._max_chars is not None:
                texts = [t[: self._max_chars] for t in texts]
            prompts.append(render_answer(question, texts, template=self._template))
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


def _check_retriever(config: BuiltinRagSystemConfig) -> None:
    if config.retriever != "bm25":
        msg = (
            f"system {config.name!r}: retriever {config.retriever!r} is not "
            "available yet in cube_ray's built-in RAG; use retriever: bm25 (dense "
            "and hybrid retrieval are planned)"
        )
        raise ConfigError(msg)


def build_index(config: BuiltinRagSystemConfig, *, documents_path: str) -> Path:
    """Build the BM25 index of a documents table if needed; its directory."""
    _check_retriever(config)
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
