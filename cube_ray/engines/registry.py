"""From an engine config to a live engine, importing the backend lazily.

Only the module of the chosen backend is imported, so a judge over HTTP never
imports vLLM or torch, and ``import cube_ray.engines`` stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from cube_ray.engines.base import Engine
    from cube_ray.engines.config import JudgeConfig

__all__ = ["BACKENDS", "build_engine"]

BACKENDS: dict[str, str] = {
    "vllm": "cube_ray.engines.vllm:VllmEngine",
    "embedded": "cube_ray.engines.embedded:EmbeddedEngine",
    "openai_http": "cube_ray.engines.openai_http:OpenAIHttpEngine",
    "fake": "cube_ray.engines.fake:FakeEngine",
    "reference": "cube_ray.engines.reference:ReferenceJudge",
}
"""Backend name -> ``module:Class``; each class has ``from_config(config)``."""


def build_engine(config: JudgeConfig) -> Engine:
    """Build the engine a config describes (heavy set-up happens here).

    Call it once per Ray actor, in the stage's ``__init__``.
    """
    module_name, _, cls_name = BACKENDS[config.backend].partition(":")
    cls = getattr(importlib.import_module(module_name), cls_name)
    if config.backend == "fake":
        return cast(
            "Engine",
            cls(
                config.name,
                seed=config.seed,
                latency_s=config.latency_s,
                startup_s=config.startup_s,
            ),
        )
    return cast("Engine", cls.from_config(config))
