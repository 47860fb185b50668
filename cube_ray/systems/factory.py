"""From a system config to a live system under test (once per Ray actor)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cube_ray.systems.kinds import system_kind

if TYPE_CHECKING:
    from collections.abc import Callable

    from cube_ray.engines.base import Engine
    from cube_ray.engines.config import EngineConfig
    from cube_ray.systems.base import SystemUnderTest
    from cube_ray.systems.config import SystemConfig

__all__ = ["build_system", "prepare_system"]


def build_system(
    config: SystemConfig,
    *,
    documents_path: str,
    generator: EngineConfig | None,
    answer_template: str = "answer",
    nonce: str | None = None,
    engine_factory: Callable[[EngineConfig], Engine] | None = None,
) -> SystemUnderTest:
    """Build the system a config describes; heavy set-up happens here.

    Call it once per Ray actor, in the system stage's ``__init__``. Backends are
    imported lazily, so a QA-file system never imports rjieba or httpx.

    Args:
        config: One entry of the run's ``systems:`` list.
        documents_path: The run's ``documents/`` Parquet directory (the built-in
            RAG indexes it; its index goes to the sibling ``index/`` directory).
        generator: The run's generator engine; the built-in RAG answers with it.
        answer_template: Answer prompt template (name or path), the same as the
            bounds use.
        nonce: The prompt-tag nonce of the built-in RAG's answer prompts (a
            run passes its own; default: a random one).
        engine_factory: Builds the generator engine (default
            :func:`cube_ray.engines.build_engine`; a run passes its shared pool).

    Raises:
        ConfigError: If its kind is not registered, or the built-in RAG has no
            generator.
        InputError: If a QA file or the documents are invalid.
    """
    return system_kind(config).build(
        config,
        documents_path=documents_path,
        generator=generator,
        answer_template=answer_template,
        nonce=nonce,
        engine_factory=engine_factory,
    )


def prepare_system(config: SystemConfig, *, documents_path: str) -> None:
    """Do a system's one-off set-up before its actors start (optional).

    For the built-in RAG this builds the BM25 (and dense) index of
    ``documents_path`` (a no-op when they exist), so that actors only load
    them; on a large corpus call it once on the driver or in one task with
    several CPUs (``index_workers``) rather than leaving the build to the first
    actor. Other kinds: nothing.
    """
    system_kind(config).set_up(config, documents_path=documents_path)
