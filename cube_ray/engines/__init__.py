"""LLM engines behind one protocol: vLLM, OpenAI-compatible HTTP, embedded, fake."""

from cube_ray.engines.base import (
    SCORE_CHOICES,
    Engine,
    Generation,
    SamplingParams,
    ScoreMode,
    ScoreResult,
)
from cube_ray.engines.config import (
    EmbeddedEngineConfig,
    EngineConfig,
    FakeEngineConfig,
    OpenAIHttpEngineConfig,
    PoolConfig,
    SamplingConfig,
    VllmEngineConfig,
)
from cube_ray.engines.registry import build_engine

__all__ = [
    "SCORE_CHOICES",
    "EmbeddedEngineConfig",
    "Engine",
    "EngineConfig",
    "FakeEngineConfig",
    "Generation",
    "OpenAIHttpEngineConfig",
    "PoolConfig",
    "SamplingConfig",
    "SamplingParams",
    "ScoreMode",
    "ScoreResult",
    "VllmEngineConfig",
    "build_engine",
]
