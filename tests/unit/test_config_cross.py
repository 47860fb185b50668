"""Rules across config sections fail at load time, one message naming the file
and every offending field with its value (before any engine is built)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cube_ray.config import RunConfig
from cube_ray.errors import ConfigError

BASE = """
corpus: {path: records.jsonl, id_field: id}
generator: {backend: fake}
judges:
  a: {backend: fake, seed: 1}
  b: {backend: fake, seed: 2}
systems:
  - {name: rag, kind: qa_file, path: qa.jsonl, k: 5}
  - {name: rag@k3, kind: qa_file, path: qa.jsonl, k: 3}
allow_fake_engines: true
"""


DIMENSIONS = "dimensions: [{name: relevance}, {name: quality}]\n"


def load(tmp_path: Path, extra: str) -> RunConfig:
    path = tmp_path / "conf.yaml"
    dims = "" if "dimensions:" in extra else DIMENSIONS
    path.write_text(BASE + dims + extra, encoding="utf-8")
    return RunConfig.from_yaml(path)


def fails(tmp_path: Path, extra: str) -> str:
    with pytest.raises(ConfigError) as err:
        load(tmp_path, extra)
    text = str(err.value)
    assert str(tmp_path / "conf.yaml") in text
    return text


def test_valid_cross_fields_load(tmp_path: Path) -> None:
    cfg = load(
        tmp_path,
        "aggregate:\n  k: {rag: 5, rag@k3: 3}\n"
        "  weights: {a: {relevance: 1, quality: 0}, b: {quality: 2}}\n",
    )
    assert cfg.aggregate.k == {"rag": 5, "rag@k3": 3}


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("aggregate: {k: 0}\n", "aggregate.k is 0; it must be >= 1"),
        ("aggregate: {k: -3}\n", "aggregate.k is -3; it must be >= 1"),
        (
            "aggregate: {k: 5}\n",
            "aggregate.k is 5 but systems[rag@k3].k is 3",
        ),
        (
            "aggregate: {k: {rag: 5, rag@k3: 0}}\n",
            "aggregate.k.rag@k3 is 0; it must be >= 1",
        ),
        (
            "aggregate: {k: {rag: 5}}\n",
            "aggregate.k has no entry for systems ['rag@k3']",
        ),
        (
            "aggregate: {k: {rag: 5, rag@k3: 3, rag@x: 4}}\n",
            "aggregate.k names systems ['rag@x'], which are not in systems",
        ),
    ],
)
def test_aggregate_k(tmp_path: Path, extra: str, expected: str) -> None:
    assert expected in fails(tmp_path, extra)


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (
            "aggregate: {weights: {relevance: 1, tone: 1}}\n",
            "aggregate.weights.tone: 'tone' is not a dimension",
        ),
        (
            "aggregate: {weights: {relevance: -1, quality: 1}}\n",
            "aggregate.weights.relevance is -1; a weight is a number >= 0",
        ),
        (
            "aggregate: {weights: {relevance: 0, quality: 0}}\n",
            "aggregate.weights: the weights sum to 0",
        ),
        (
            "aggregate: {weights: {c: {relevance: 1}, a: {quality: 1}}}\n",
            "aggregate.weights.c: 'c' is not a judge (judges: ['a', 'b'])",
        ),
        (
            "aggregate: {weights: {a: {relevance: 1}}}\n",
            "aggregate.weights is given per judge but not for judges ['b']",
        ),
        (
            "aggregate: {weights: {a: {relevance: 1}, relevance: 2}}\n",
            "aggregate.weights mixes per-judge maps (['a'])",
        ),
    ],
)
def test_weights(tmp_path: Path, extra: str, expected: str) -> None:
    assert expected in fails(tmp_path, extra)


def test_expected_scores_need_logprobs(tmp_path: Path) -> None:
    http = (
        "  h: {backend: openai_http, base_url: 'http://127.0.0.1:9/v1', model: m,"
        " score_mode: expected}\n"
    )
    text = BASE.replace("  b: {backend: fake, seed: 2}\n", http) + DIMENSIONS
    path = tmp_path / "conf.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        RunConfig.from_yaml(path)
    assert "judges.h.score_mode is 'expected' but judges.h.logprobs is false" in str(
        err.value
    )
    path.write_text(text.replace("expected}", "expected, logprobs: true}"))
    assert RunConfig.from_yaml(path).judges["h"].score_mode == "expected"


def test_missing_template(tmp_path: Path) -> None:
    text = fails(tmp_path, "prompts: {judge: prompts/judge_zh.txt}\n")
    assert (
        f"prompts.judge: prompt template file "
        f"'{tmp_path / 'prompts' / 'judge_zh.txt'}' does not exist" in text
    )


def test_template_without_its_placeholders(tmp_path: Path) -> None:
    (tmp_path / "q.txt").write_text("Ask about it.\n", encoding="utf-8")
    text = fails(tmp_path, "prompts: {question: q.txt}\n")
    assert "prompts.question: question prompt template" in text
    assert "lacks $document" in text


def test_rubric_file_missing_and_custom_dimension_without_rubric(
    tmp_path: Path,
) -> None:
    text = fails(
        tmp_path,
        "dimensions: [{name: relevance}, {name: tone, rubric_file: tone.txt},"
        " {name: style}]\n",
    )
    assert "dimensions[1].rubric_file: dimension 'tone': cannot read" in text
    assert "dimensions[2].rubric: dimension 'style' has no rubric" in text


def test_every_problem_in_one_message(tmp_path: Path) -> None:
    text = fails(
        tmp_path,
        "aggregate: {k: 0, weights: {tone: 1}}\nprompts: {answer: nope.txt}\n",
    )
    assert "(3 problem(s))" in text
    for field in ("aggregate.k", "aggregate.weights.tone", "prompts.answer"):
        assert f"  - {field}" in text


def test_waves_need_overlap(tmp_path: Path) -> None:
    text = fails(tmp_path, "ray: {waves: 4}\n")
    assert "ray.waves is 4 but ray.overlap is false" in text
    assert "set ray.overlap: true, or ray.waves: 1" in text
    assert load(tmp_path, "ray: {waves: 4, overlap: true}\n").ray.waves == 4
    assert "ray.waves" in fails(tmp_path, "ray: {waves: 0, overlap: true}\n")
