"""The ``http`` kind: a deployed RAG service reached over HTTP."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cube_ray.env import EnvUse, placeholders, url_host
from cube_ray.systems.config import HttpSystemConfig
from cube_ray.systems.kinds import PlanCounts, SystemKind

if TYPE_CHECKING:
    from cube_ray.engines.base import Engine
    from cube_ray.engines.config import EngineConfig
    from cube_ray.systems.base import SystemUnderTest

__all__ = ["HttpKind"]


class HttpKind(SystemKind):
    """An HTTP service: its url and headers may read environment variables."""

    config = HttpSystemConfig

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
        # circle at load: cube_ray/systems/__init__ imports this kind
        from cube_ray.systems.http import HttpSystem

        return HttpSystem(system)

    def env_uses(self, system: Any) -> list[EnvUse]:
        """The environment variables it reads, and where each value goes."""
        where = f"systems[{system.name}]"
        host = url_host(system.url)
        uses = [EnvUse(n, f"{where}.url", host) for n in placeholders(system.url)]
        for header, value in system.headers.items():
            uses += [
                EnvUse(n, f"{where}.headers.{header}", host)
                for n in placeholders(value)
            ]
        return uses

    def destination(self, system: Any, *, generator: str) -> str:
        """Where it sends the questions."""
        return f"{url_host(system.url)} (HTTP system {system.name})"

    def plan(
        self, system: Any, *, questions: int, prompt_tokens: int, doc_tokens: float
    ) -> PlanCounts:
        """Its dry-run row."""
        return PlanCounts(f"http:{system.url}", questions, 0)
