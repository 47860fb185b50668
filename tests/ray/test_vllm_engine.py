"""The vLLM engine on the tiny model inside a local Ray Data actor pool."""

from __future__ import annotations

import math
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from cube_ray.engines import SCORE_CHOICES, VllmEngineConfig, build_engine
from cube_ray.prompts import DEFAULT_DIMENSIONS, default_rubric, render_judge

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ROWS = 24
BATCH = 4


class JudgeStage:
    """Shaped like the pipeline's stages: engine once per actor, score per batch."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.engine = build_engine(VllmEngineConfig.model_validate(config))

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        prompts = [str(p) for p in batch["prompt"]]
        argmax = self.engine.score(prompts, mode="argmax")
        expected = self.engine.score(prompts, mode="expected")
        n = len(prompts)
        return {
            "prompt": batch["prompt"],
            "argmax": [r.score for r in argmax],
            "argmax_status": [r.status for r in argmax],
            "argmax_raw": [r.raw for r in argmax],
            "expected": [r.score for r in expected],
            "expected_status": [r.status for r in expected],
            "batch_rows": [n] * n,
            "pid": [os.getpid()] * n,
        }


def _prompts() -> list[str]:
    out = []
    for q in range(ROWS // len(DEFAULT_DIMENSIONS)):
        for dim in DEFAULT_DIMENSIONS:
            out.append(
                render_judge(
                    f"事项名称: 临时价格干预事项提价申报 {q}\n时限: {q + 3} 个工作日",
                    f"How long does item {q} take?",
                    f"It takes {q + 3} working days.",
                    default_rubric(dim),
                    nonce="r4yn0nce",
                )
            )
    return out


@pytest.mark.ray
def test_vllm_engine_in_ray_data_actor_pool(
    ray_local: Any, tiny_model_dir: Path
) -> None:
    import ray.cloudpickle
    import ray.data

    # The stage class lives in this test module, which workers cannot import.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    config = VllmEngineConfig(
        model=str(tiny_model_dir),
        max_model_len=1024,
        enforce_eager=True,
        env={"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1"},
    ).model_dump()
    ds = ray.data.from_items([{"prompt": p} for p in _prompts()]).repartition(3)
    out = ds.map_batches(
        JudgeStage,
        fn_constructor_kwargs={"config": config},
        batch_size=BATCH,
        batch_format="numpy",
        num_cpus=0.5,
        compute=ray.data.ActorPoolStrategy(min_size=2, max_size=2),
    ).take_all()

    assert len(out) == ROWS
    assert {r["argmax_status"] for r in out} == {"ok"}
    assert {r["expected_status"] for r in out} == {"ok"}
    # Choice-constrained: the raw text is one of the 11 choices, the score its value.
    for r in out:
        assert r["argmax_raw"] in SCORE_CHOICES
        assert r["argmax"] == float(r["argmax_raw"])
    # Expected: probability-weighted means, fractional, inside [0, 10].
    expected = [float(r["expected"]) for r in out]
    assert all(0.0 <= e <= 10.0 for e in expected)
    assert any(not math.isclose(e, round(e)) for e in expected)
    # Several rows per engine call, spread over the pool.
    assert max(int(r["batch_rows"]) for r in out) > 1
    assert len({int(r["pid"]) for r in out}) == 2


def test_vllm_engine_in_process_row_statuses_and_formats(
    tiny_model_dir: Path, tiny_engine_env: dict[str, str]
) -> None:
    from cube_ray.engines import SamplingParams
    from cube_ray.engines.vllm import VllmEngine

    # Constrained decoding masks the logits before vLLM computes logprobs, so
    # the score tokens hold all the first token's mass: a strict threshold holds.
    config = VllmEngineConfig(
        model=str(tiny_model_dir),
        max_model_len=256,
        enforce_eager=True,
        min_score_mass=0.999,
    )
    engine = build_engine(config)
    assert isinstance(engine, VllmEngine)
    try:
        assert engine.chat  # the tiny tokenizer has a chat template
        assert engine.ten_is_one_token
        assert engine.name == tiny_model_dir.name
        prompts = ["short prompt 评分", "x " * 400, "another one"]
        gens = engine.generate(prompts, sampling=SamplingParams(max_tokens=4))
        assert [g.status for g in gens] == ["ok", "prompt_too_long", "ok"]
        assert gens[0].completion_tokens == 4
        for mode in ("argmax", "expected"):
            res = engine.score(prompts, mode=mode)  # type: ignore[arg-type]
            assert [r.status for r in res] == ["ok", "prompt_too_long", "ok"]
            assert res[1].score is None
        # The "10 is two tokens" path (Gemma-like tokenizers), forced here: the
        # follow-up requests run and every score stays inside [0, 10].
        engine.ten_is_one_token = False
        split = engine.score(prompts[::2], mode="expected")
        assert all(r.score is not None and 0 <= r.score <= 10 for r in split)
        argmax = engine.score(prompts[::2], mode="argmax")
        assert all(r.score in {float(i) for i in range(11)} for r in argmax)
        # Above the mass the engine can reach: no score, the mass in raw.
        engine.min_score_mass = 1.01
        low = engine.score(prompts[::2], mode="expected")
        assert [(r.score, r.status) for r in low] == [(None, "low_score_mass")] * 2
        for r in low:
            assert re.fullmatch(
                r"(10|[0-9]) \[score-token mass (1\.0000|0\.999\d) "
                r"< min_score_mass 1\.01\]",
                r.raw or "",
            ), r.raw
    finally:
        engine.close()
        engine.close()  # idempotent
