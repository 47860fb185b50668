"""Engines behind one protocol: vLLM, HTTP, embedded, fake, reference (no LLM)."""

from cube_ray.engines.base import (
    SCORE_CHOICES,
    Engine,
    Generation,
    ItemJudge,
    JudgeItem,
    SamplingParams,
    ScoreMode,
    ScoreResult,
)
from cube_ray.engines.config import (
    EmbeddedEngineConfig,
    EngineConfig,
    FakeEngineConfig,
    JudgeConfig,
    OpenAIHttpEngineConfig,
    PoolConfig,
    ReferenceJudgeConfig,
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
    "ItemJudge",
    "JudgeConfig",
    "JudgeItem",
    "OpenAIHttpEngineConfig",
    "PoolConfig",
    "ReferenceJudgeConfig",
    "SamplingConfig",
    "SamplingParams",
    "ScoreMode",
    "ScoreResult",
    "VllmEngineConfig",
    "build_engine",
]
