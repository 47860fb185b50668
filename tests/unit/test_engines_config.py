"""Engine configs, the registry and its lazy imports, the fake engine."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import TypeAdapter, ValidationError

from cube_ray.engines import (
    EngineConfig,
    FakeEngineConfig,
    OpenAIHttpEngineConfig,
    SamplingParams,
    VllmEngineConfig,
    build_engine,
)
from cube_ray.engines.fake import FakeEngine
from cube_ray.errors import EngineError

ADAPTER: TypeAdapter[EngineConfig] = TypeAdapter(EngineConfig)


def test_backend_key_picks_the_model() -> None:
    cfg = ADAPTER.validate_python(
        {"backend": "openai_http", "base_url": "http://x/v1", "model": "m"}
    )
    assert isinstance(cfg, OpenAIHttpEngineConfig)
    cfg = ADAPTER.validate_python({"backend": "vllm", "model": "/models/x"})
    assert isinstance(cfg, VllmEngineConfig)
    assert cfg.enable_prefix_caching is True


def test_unknown_keys_and_bad_values_are_rejected() -> None:
    with pytest.raises(ValidationError, match="extra"):
        ADAPTER.validate_python({"backend": "vllm", "model": "m", "modle": 1})
    with pytest.raises(ValidationError, match="min_size"):
        ADAPTER.validate_python(
            {"backend": "fake", "pool": {"min_size": 3, "max_size": 2}}
        )
    with pytest.raises(ValidationError, match="tensor_parallel_size"):
        VllmEngineConfig(
            model="m",
            tensor_parallel_size=4,
            pool={"num_gpus": 2},  # type: ignore[arg-type]
        )


@pytest.mark.parametrize("bad", [-0.1, 1.5])
def test_min_score_mass_is_a_probability(bad: float) -> None:
    cfg = ADAPTER.validate_python({"backend": "vllm", "model": "m"})
    assert cfg.min_score_mass == 0.5
    with pytest.raises(ValidationError, match="min_score_mass"):
        ADAPTER.validate_python(
            {"backend": "vllm", "model": "m", "min_score_mass": bad}
        )


def test_registry_builds_fake_engine() -> None:
    engine = build_engine(FakeEngineConfig(name="j", seed=3))
    assert isinstance(engine, FakeEngine)
    scores = engine.score(["a", "b"], mode="expected")
    assert all(s.score is not None and 0 <= s.score <= 10 for s in scores)
    assert engine.score(["a"], mode="argmax") == engine.score(["a"], mode="argmax")


def test_fake_script_runs_out_loudly() -> None:
    engine = FakeEngine(script=["7", "seven"])
    out = engine.score(["p", "q"], mode="argmax")
    assert [(r.score, r.status) for r in out] == [(7.0, "ok"), (None, "parse_error")]
    with pytest.raises(EngineError, match="exhausted"):
        engine.generate(["r"], sampling=SamplingParams())


def test_engines_package_imports_no_backend() -> None:
    code = (
        "import sys, cube_ray.engines, cube_ray.prompts\n"
        "from cube_ray.engines import FakeEngineConfig, build_engine\n"
        "build_engine(FakeEngineConfig())\n"
        "heavy = [m for m in ('vllm', 'torch', 'transformers', 'ray', 'httpx')"
        " if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
