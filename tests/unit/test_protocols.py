"""Judging protocols (CUBE_METHOD.md section 14): items, config, the judge stage."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml
from pydantic import ValidationError

from cube_ray import schema
from cube_ray.config import RunConfig
from cube_ray.engines import FakeEngineConfig, ScoreResult
from cube_ray.engines.config import OpenAIHttpEngineConfig, ReferenceJudgeConfig
from cube_ray.errors import ConfigError
from cube_ray.pipeline.method import _judge_fingerprints, stage_graph
from cube_ray.prompts import DEFAULT_DIMENSIONS, default_rubric
from cube_ray.protocols import checklist, checklist_score, contrast
from cube_ray.stages import JudgeStage, judge_inputs
from cube_ray.stages.inputs import ANSWER_HASH, DOC_HASH
from tests.pipeline_helpers import fake_config, make_corpus, make_qa_file


@pytest.mark.parametrize("language", ["en", "zh"])
@pytest.mark.parametrize("dimension", DEFAULT_DIMENSIONS)
def test_packaged_rubrics_are_five_items_of_two_points(
    dimension: str, language: str
) -> None:
    found = checklist(default_rubric(dimension, language), dimension=dimension)
    assert len(found.items) == 5
    assert [i.weight for i in found.items] == [0.2] * 5
    assert all(i.text and "(" not in i.text[:3] for i in found.items)
    # The opening keeps the dimension and drops the points sentence.
    assert "2" not in found.header
    assert "point" not in found.header


def test_a_rubric_without_items_is_refused_naming_the_dimension() -> None:
    with pytest.raises(ConfigError, match=r"'tone'.*at least two items"):
        checklist("Is the tone polite?", dimension="tone")
    with pytest.raises(ConfigError, match="weights sum to 0"):
        checklist("- a [w=0]\n- b [w=0]", dimension="x")


def test_contrast_ignores_a_judge_that_says_yes_to_everything() -> None:
    # The same P(yes) for an answer and for the empty answer reads 0.5, so a
    # yes-to-everything judge gives every answer 5 under any weights.
    p = [0.97, 0.99, 0.95]
    assert checklist_score([contrast(x, x) for x in p], [1 / 3] * 3) == 5.0
    # Moving the judge up from the empty answer's reading raises the score.
    assert contrast(0.99, 0.97) > 0.5 > contrast(0.9, 0.97)


def test_protocol_is_validated_strictly() -> None:
    with pytest.raises(ValidationError, match="protocol"):
        FakeEngineConfig(protocol="vote")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="checklist_baseline"):
        FakeEngineConfig(checklist_baseline="empty_answer")
    with pytest.raises(ValidationError, match="protocol"):
        ReferenceJudgeConfig.model_validate({"protocol": "checklist"})
    http = OpenAIHttpEngineConfig(
        base_url="http://127.0.0.1:1/v1", model="m", protocol="all_dimensions"
    )
    assert http.protocol == "all_dimensions"
    assert FakeEngineConfig().protocol == "score"


def _config(tmp_path: Path, **judge: Any) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    corpus, ids = make_corpus(tmp_path, 3)
    path = fake_config(tmp_path, corpus, make_qa_file(tmp_path, ids), judges=1)
    cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    cfg["judges"]["j1"].update(judge)
    path.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    return path


def test_checklist_judge_with_an_itemless_rubric_fails_at_load(tmp_path: Path) -> None:
    path = _config(tmp_path, protocol="checklist")
    cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    cfg["dimensions"] = [{"name": "tone", "rubric": "Is the tone polite?"}]
    cfg["aggregate"] = {"weights": "equal"}
    path.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"judges\.j1\.protocol.*dimensions\[0\]"):
        RunConfig.from_yaml(path)


def test_stage_graph_gives_each_protocol_its_template_and_fingerprints(
    tmp_path: Path,
) -> None:
    score = RunConfig.from_yaml(_config(tmp_path / "a", pool={"batch_size": 6}))
    every = RunConfig.from_yaml(
        _config(tmp_path / "b", protocol="all_dimensions", pool={"batch_size": 6})
    )
    items = RunConfig.from_yaml(_config(tmp_path / "c", protocol="checklist"))
    spec = {
        name: next(s for s in stage_graph(c) if s.label == "scores:j1")
        for name, c in (("score", score), ("all", every), ("items", items))
    }
    assert spec["score"].stage_kwargs["template"] == "judge"
    assert spec["all"].stage_kwargs["template"] == "judge_dimensions"
    assert spec["items"].stage_kwargs["template"] == "judge_checklist"
    # A batch of all_dimensions holds whole answers (four dimensions).
    assert spec["score"].pool.batch_size == 6
    assert spec["all"].pool.batch_size == 8
    # One prompt holds every rubric: a dimension's rows hash all of them.
    fps = _judge_fingerprints(every, every.judges["j1"])
    assert len(set(fps.values())) == 1
    assert len(set(_judge_fingerprints(score, score.judges["j1"]).values())) == 4
    assert fps != _judge_fingerprints(score, score.judges["j1"])


class _Recorder:
    """A protocol engine with fixed replies; records the prompts it gets."""

    name = "rec"

    def __init__(self, p_yes: Sequence[ScoreResult] = ()) -> None:
        self.p_yes = list(p_yes)
        self.prompts: list[list[str]] = []

    def yes_no(
        self, prompts: Sequence[str], *, words: tuple[str, str], mode: str
    ) -> list[ScoreResult]:
        self.prompts.append(list(prompts))
        assert words == ("yes", "no")
        out, self.p_yes = self.p_yes[: len(prompts)], self.p_yes[len(prompts) :]
        return out

    def score_lines(
        self, prompts: Sequence[str], *, count: int, mode: str
    ) -> list[list[ScoreResult]]:
        self.prompts.append(list(prompts))
        return [
            [
                ScoreResult(float(k + 1), raw="1\n2", prompt_tokens=10)
                for k in range(count)
            ]
            for _ in prompts
        ]

    def close(self) -> None:
        """Nothing."""


def _rows(answers: Sequence[str]) -> pa.Table:
    n = len(answers)
    return pa.table(
        {
            schema.QUESTION_ID: ["d1"] * n,
            schema.SYSTEM: ["zero", "full", "rag"][:n],
            schema.ANSWER: list(answers),
            ANSWER_HASH: [f"a{i}" for i in range(n)],
            schema.QUESTION: ["q1"] * n,
            schema.TEXT: ["the document"] * n,
            DOC_HASH: ["h1"] * n,
        }
    )


FPS = {"one": "f1", "two": "f2", "three": "f3"}
RUBRICS = {"one": "One? (1) first; (2) second.", "two": "Two? (1) a; (2) b; (3) c."}


def test_checklist_asks_each_item_after_the_shared_prefix() -> None:
    ok = [ScoreResult(p, prompt_tokens=100) for p in (1.0, 0.5, 0.0, 0.5, 1.0)]
    engine = _Recorder(ok)
    stage = JudgeStage(
        "j",
        FakeEngineConfig(protocol="checklist"),
        rubrics=RUBRICS,
        template="judge_checklist",
        engine_factory=lambda _c: engine,
    )
    inputs = judge_inputs(
        _rows(["an answer"]), judge="j", fingerprints=FPS, dimensions=list(RUBRICS)
    )
    out = stage(inputs).to_pylist()
    [prompts] = engine.prompts
    assert len(prompts) == 5  # 2 + 3 items
    cut = prompts[0].index("One?")  # the rubric block starts after the answer
    assert all(p[:cut] == prompts[0][:cut] for p in prompts)  # one prefix
    assert prompts[0].rstrip().endswith("Answer (yes/no):")
    assert "Criterion: first" in prompts[0]
    assert "Criterion: c" in prompts[4]
    assert [r[schema.SCORE] for r in out] == [7.5, 5.0]
    assert [r[schema.PROMPT_TOKENS] for r in out] == [200, 300]
    assert out[0][schema.RAW] == "P(yes) 1.000 0.500"


def test_checklist_row_fails_with_its_item_and_never_scores_0() -> None:
    replies = [ScoreResult(1.0), ScoreResult(None, status="low_score_mass", raw="x")]
    stage = JudgeStage(
        "j",
        FakeEngineConfig(protocol="checklist"),
        rubrics={"one": RUBRICS["one"]},
        template="judge_checklist",
        engine_factory=lambda _c: _Recorder(replies),
    )
    inputs = judge_inputs(
        _rows(["an answer"]), judge="j", fingerprints=FPS, dimensions=["one"]
    )
    [row] = stage(inputs).to_pylist()
    assert (row[schema.SCORE], row[schema.STATUS]) == (None, "low_score_mass")
    assert row[schema.RAW] == "item 2: x"


def test_all_dimensions_one_call_per_answer_tokens_split_over_its_rows() -> None:
    engine = _Recorder()
    stage = JudgeStage(
        "j",
        FakeEngineConfig(protocol="all_dimensions"),
        rubrics={"one": "R1", "two": "R2", "three": "R3"},
        template="judge_dimensions",
        engine_factory=lambda _c: engine,
    )
    inputs = judge_inputs(
        _rows(["first", "second"]),
        judge="j",
        fingerprints=FPS,
        dimensions=["three", "one"],  # a subset, in another order
    )
    out = stage(inputs).to_pylist()
    [prompts] = engine.prompts
    assert len(prompts) == 2
    assert "1. R1\n2. R2\n3. R3" in prompts[0]
    assert prompts[0].rstrip().endswith("Scores (0-10, one per line):")
    got = {(r[schema.SYSTEM], r[schema.DIMENSION]): r[schema.SCORE] for r in out}
    assert got == {
        ("zero", "three"): 3.0,
        ("zero", "one"): 1.0,
        ("full", "three"): 3.0,
        ("full", "one"): 1.0,
    }
    assert [r[schema.PROMPT_TOKENS] for r in out] == [5, 5, 5, 5]


def test_qualification_judges_use_the_protocol_template(tmp_path: Path) -> None:
    path = _config(tmp_path, protocol="checklist")
    cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    cfg["qualification"] = {"questions": 2}
    path.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    specs = {s.label: s for s in stage_graph(RunConfig.from_yaml(path))}
    assert specs["qualification:j1"].stage_kwargs["template"] == "judge_checklist"
    assert (
        specs["scores:j1"].inputs.kwargs["fingerprints"]
        == (specs["qualification:j1"].inputs.kwargs["fingerprints"])
    )


def _http(**extra: Any) -> tuple[Any, list[dict[str, Any]]]:
    import json

    import httpx

    from cube_ray.engines.openai_http import OpenAIHttpEngine

    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        bodies.append(body)
        regex = (body.get("structured_outputs") or {}).get("regex")
        text = "4\n10" if regex or "Scores" in str(body["messages"]) else "No"
        tokens = ["4", "\n", "10"] if text != "No" else ["No"]
        content = [
            {
                "token": t,
                "logprob": -0.1,
                "top_logprobs": [{"token": t, "logprob": -0.1}],
            }
            for t in tokens
        ]
        if text == "No":
            content[0]["top_logprobs"] = [
                {"token": "No", "logprob": -0.1},
                {"token": " yes", "logprob": -2.4},
            ]
        choice = {
            "index": 0,
            "message": {"content": text},
            "logprobs": {"content": content},
        }
        return httpx.Response(200, json={"choices": [choice], "usage": {}})

    cfg = OpenAIHttpEngineConfig(
        base_url="http://127.0.0.1:9/v1", model="m", max_retries=0, **extra
    )
    return OpenAIHttpEngine(cfg, transport=httpx.MockTransport(handler)), bodies


def test_http_yes_no_sends_the_words_as_choices_and_reads_p_yes() -> None:
    engine, bodies = _http(guided_choice=True, logprobs=True)
    [got] = engine.yes_no(["Q? Answer (yes/no):"], words=("yes", "no"), mode="expected")
    assert bodies[0]["structured_outputs"] == {"choice": ["yes", "no"]}
    assert bodies[0]["logprobs"] is True
    assert got.status == "ok"
    assert got.score == pytest.approx(0.1, abs=0.01)  # e^-2.4 / (e^-2.4 + e^-0.1)
    engine, bodies = _http()  # no logprobs, no constraint: the word
    [got] = engine.yes_no(["Q?"], words=("yes", "no"), mode="argmax")
    assert "logprobs" not in bodies[0]
    assert "structured_outputs" not in bodies[0]
    assert (got.score, got.status) == (0.0, "ok")


def test_http_score_lines_constrains_by_regex_and_reads_each_line() -> None:
    engine, bodies = _http(guided_choice=True, logprobs=True, ten_is_one_token=True)
    [lines] = engine.score_lines(["Scores"], count=2, mode="expected")
    assert bodies[0]["structured_outputs"] == {"regex": "(10|[0-9])\\n(10|[0-9])"}
    assert bodies[0]["guided_regex"] == "(10|[0-9])\\n(10|[0-9])"
    assert [r.score for r in lines] == [4.0, 10.0]
    assert {r.raw for r in lines} == {"4\n10"}
    engine, _ = _http()
    [lines] = engine.score_lines(["Scores"], count=3, mode="argmax")
    assert {r.status for r in lines} == {"parse_error"}  # two lines, not three


def test_empty_answer_baseline_is_asked_once_and_a_failed_one_again() -> None:
    n = 2  # items of dimension "one"
    replies = [
        *[ScoreResult(None, status="timeout", raw="t")] * n,  # baseline fails
        *[ScoreResult(0.9, prompt_tokens=10)] * n,  # answer a
        *[ScoreResult(0.9, prompt_tokens=10)] * n,  # answer b
        *[ScoreResult(0.5, prompt_tokens=7)] * n,  # the baseline, asked again
        *[ScoreResult(0.9, prompt_tokens=10)] * n,  # answer c
        *[ScoreResult(0.5, prompt_tokens=10)] * n,  # answer d: baseline kept
    ]
    engine = _Recorder(replies)
    stage = JudgeStage(
        "j",
        FakeEngineConfig(protocol="checklist", checklist_baseline="empty_answer"),
        rubrics={"one": RUBRICS["one"]},
        template="judge_checklist",
        engine_factory=lambda _c: engine,
    )

    def judge(answers: list[str]) -> list[dict[str, Any]]:
        rows = judge_inputs(
            _rows(answers), judge="j", fingerprints=FPS, dimensions=["one"]
        )
        return stage(rows).to_pylist()

    first = judge(["a", "b"])
    assert [r[schema.STATUS] for r in first] == ["timeout", "timeout"]
    assert first[0][schema.RAW] == "item 1 (empty answer): t"
    second = judge(["c"])
    third = judge(["d"])
    assert [len(p) for p in engine.prompts] == [3 * n, 2 * n, n]
    # Against a baseline of 0.5 the reading is P(yes) itself.
    assert second[0][schema.SCORE] == pytest.approx(9.0)
    assert third[0][schema.SCORE] == pytest.approx(5.0)
    assert second[0][schema.PROMPT_TOKENS] == 2 * 10 + 2 * 7
    assert third[0][schema.PROMPT_TOKENS] == 2 * 10
    assert "empty answer 0.500 0.500" in second[0][schema.RAW]
