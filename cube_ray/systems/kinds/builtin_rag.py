"""The ``builtin_rag`` kind: cube_ray's reference RAG, answered by the generator."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cube_ray.env import EnvUse, url_host
from cube_ray.errors import ConfigError
from cube_ray.systems.config import BuiltinRagSystemConfig
from cube_ray.systems.kinds import Endpoint, PlanCounts, Preparation, SystemKind

if TYPE_CHECKING:
    from cube_ray.engines.base import Engine
    from cube_ray.engines.config import EngineConfig
    from cube_ray.systems.base import SystemUnderTest

__all__ = ["BuiltinRagKind"]


class BuiltinRagKind(SystemKind):
    """BM25 (and dense) retrieval over the run's documents, answered by the generator.

    Its index is built once, in a task, before its stage.
    """

    config = BuiltinRagSystemConfig
    uses_generator = True

    def build(
        self,
        system: Any,
        *,
        documents_path: str,
        generator: EngineConfig | None,
        answer_template: str,
        nonce: str | None,
        engine_factory: Callable[[EngineConfig], Engine] | None,
    ) -> SystemUnderTest:
        """The live system."""
        if generator is None:
            msg = (
                f"system {system.name!r} (kind builtin_rag) needs a generator engine "
                "to write its answers; add a `generator:` section to the config"
            )
            raise ConfigError(msg)
        # circle at load: cube_ray/systems/__init__ imports this kind
        from cube_ray.systems.builtin_rag import BuiltinRagSystem

        return BuiltinRagSystem.from_config(
            system,
            documents_path=documents_path,
            generator=generator,
            answer_template=answer_template,
            nonce=nonce,
            engine_factory=engine_factory,
        )

    def prepare(self, system: Any, *, run_dir: Path) -> Preparation:
        """Its one-off set-up task."""
        # circle at load: cube_ray/systems/__init__ imports this kind
        from cube_ray.systems.factory import prepare_system

        return Preparation(
            prepare_system, {"documents_path": str(run_dir / "documents")}
        )

    def set_up(self, system: Any, *, documents_path: str) -> None:
        """The BM25 (and dense) index of the documents (a no-op when they exist)."""
        # circle at load: cube_ray/systems/__init__ imports this kind
        from cube_ray.systems.builtin_rag import build_dense, build_index

        build_index(system, documents_path=documents_path)
        build_dense(system, documents_path=documents_path)

    def fingerprint_parts(
        self, system: Any, *, generator_fp: str, corpus_fp: str
    ) -> list[str]:
        """Inputs of its answers beyond its config and the answer template."""
        return [generator_fp, corpus_fp]

    def env_uses(self, system: Any) -> list[EnvUse]:
        """The environment variables it reads, and where each value goes."""
        if not system.embedding_api_key_env:
            return []
        field = f"systems[{system.name}].embedding_api_key_env"
        host = url_host(system.embedding_url)
        return [EnvUse(system.embedding_api_key_env, field, host)]

    def endpoints(self, system: Any) -> list[Endpoint]:
        """Model endpoints it calls (probed by the preflight)."""
        if not (system.embedding_url and system.embedding_model):
            return []
        return [
            Endpoint(
                f"systems[{system.name}].embedding_url",
                system.embedding_url,
                system.embedding_model,
                system.embedding_api_key_env,
            )
        ]

    def destination(self, system: Any, *, generator: str) -> str:
        """Where it sends the questions."""
        return f"built-in RAG {system.name} (uses {generator})"

    def plan(
        self, system: Any, *, questions: int, prompt_tokens: int, doc_tokens: float
    ) -> PlanCounts:
        """Its dry-run row."""
        tokens = prompt_tokens + int(questions * system.k * doc_tokens)
        return PlanCounts("generator", questions, tokens)
