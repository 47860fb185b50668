"""The vLLM engine on a CUDA GPU (production path); skipped without one.

Runs the same tiny random-weight model as the CPU tests through ``VllmEngine`` with
``num_gpus``-style settings (bfloat16, prefix caching, CUDA graphs allowed), and
checks constrained and expected scores. Needs the ``gpu`` extra (``vllm``).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from cube_ray.engines import (
    SCORE_CHOICES,
    SamplingParams,
    VllmEngineConfig,
    build_engine,
)
from cube_ray.prompts import DEFAULT_DIMENSIONS, default_rubric, render_judge


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.slow,
    pytest.mark.timeout(600),
    pytest.mark.skipif(not _cuda_available(), reason="needs a CUDA GPU and torch"),
]


def test_vllm_engine_on_gpu(tiny_model_dir: Path) -> None:
    engine = build_engine(
        VllmEngineConfig(
            model=str(tiny_model_dir),
            max_model_len=1024,
            gpu_memory_utilization=0.2,
            dtype="bfloat16",
        )
    )
    try:
        prompts = [
            render_judge(
                "事项: 测试",
                "How long?",
                "3 days.",
                default_rubric(d),
                nonce="gpu0nce1",
            )
            for d in DEFAULT_DIMENSIONS
        ]
        argmax = engine.score(prompts, mode="argmax")
        expected = engine.score(prompts, mode="expected")
        texts = engine.generate(prompts[:1], sampling=SamplingParams(max_tokens=8))
    finally:
        engine.close()
    assert [r.status for r in argmax] == ["ok"] * len(prompts)
    assert all(f"{r.score:g}" in SCORE_CHOICES for r in argmax if r.score is not None)
    for r in expected:
        assert r.status == "ok"
        assert r.score is not None
        assert 0.0 <= r.score <= 10.0
        assert not math.isnan(r.score)
    assert texts[0].status == "ok"
