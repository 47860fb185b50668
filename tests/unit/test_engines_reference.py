"""The reference judge: n-gram support in the gold document, declared measures."""

from __future__ import annotations

import pyarrow as pa
import pytest

from cube_ray import schema
from cube_ray.config import RunConfig
from cube_ray.engines import JudgeItem, ReferenceJudgeConfig, build_engine
from cube_ray.engines.reference import ReferenceJudge
from cube_ray.errors import ConfigError, EngineError
from cube_ray.stages import JudgeStage, judge_inputs
from cube_ray.stages.inputs import ANSWER_HASH, DOC_HASH

DOC = (
    "事项名称: 无线电频率使用许可\n"
    "申请材料: 无线电频率使用许可申请表、可行性研究报告、营业执照复印件\n"
    "承诺办结时限: 20个工作日\n"
    "咨询电话: 020-83339999"
)
QUESTION = "申请无线电频率使用许可需要准备哪些材料？"
GROUNDED = "需要准备：无线电频率使用许可申请表、可行性研究报告和营业执照复印件。"
INVENTED = "需要身份证原件、户口本、近期免冠照片两张，以及单位介绍信。"


def _judge(measures: dict[str, str] | None = None) -> ReferenceJudge:
    cfg = ReferenceJudgeConfig(**({"measures": measures} if measures else {}))
    engine = build_engine(cfg)
    assert isinstance(engine, ReferenceJudge)
    return engine


def _item(answer: str, dimension: str) -> JudgeItem:
    return JudgeItem(DOC, QUESTION, answer, dimension, rubric="")


def test_grounded_answers_beat_invented_ones_on_both_measures() -> None:
    judge = _judge()
    grounded, invented = (
        judge.judge_items([_item(a, "relevance"), _item(a, "completeness")])
        for a in (GROUNDED, INVENTED)
    )
    assert [r.status for r in grounded + invented] == ["ok"] * 4
    for good, bad in zip(grounded, invented, strict=True):
        assert good.score is not None
        assert bad.score is not None
        assert 0 <= bad.score < good.score <= 10
    # All but the connecting words ("需要准备") of the grounded answer is in the
    # guide; almost nothing of the invented one.
    assert grounded[0].score is not None
    assert grounded[0].score >= 8
    assert grounded[0].raw is not None
    assert grounded[0].raw.startswith("support=0.")
    assert invented[0].score is not None
    assert invented[0].score < 3


def test_coverage_measures_the_question_relevant_lines() -> None:
    judge = _judge()
    # The phone number is in the guide but not what was asked: full support,
    # almost no coverage of the materials line.
    [support, cover] = judge.judge_items(
        [_item("咨询电话是020-83339999。", d) for d in ("relevance", "completeness")]
    )
    assert support.score == 10.0
    assert cover.score is not None
    assert cover.score < 2


def test_an_answer_without_content_has_no_score() -> None:
    [res] = _judge().judge_items([_item("？？", "relevance")])
    assert res.score is None
    assert res.status == "no_content"


def test_custom_dimension_mapping_and_determinism() -> None:
    judge = _judge({"faithfulness": "support"})
    first = judge.judge_items([_item(GROUNDED, "faithfulness")])
    assert first == judge.judge_items([_item(GROUNDED, "faithfulness")])
    with pytest.raises(EngineError, match="no measure for dimension 'quality'"):
        judge.judge_items([_item(GROUNDED, "quality")])


def test_it_cannot_generate_or_score_prompts() -> None:
    judge = _judge()
    with pytest.raises(EngineError, match="cannot generate"):
        judge.generate(["x"], sampling=None)  # type: ignore[arg-type]
    with pytest.raises(EngineError, match="judge_items"):
        judge.score(["x"], mode="argmax")


def _config(judge: dict[str, object], dims: list[str]) -> RunConfig:
    return RunConfig.from_dict(
        {
            "corpus": {"path": "x.jsonl"},
            "generator": {"backend": "embedded"},
            "judges": {"ref": judge},
            "dimensions": [{"name": d} for d in dims],
        }
    )


def test_an_unmeasurable_dimension_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"judges\.ref .*\['quality'\]"):
        _config({"backend": "reference"}, ["relevance", "quality"])
    cfg = _config(
        {"backend": "reference", "measures": {"quality": "support"}}, ["quality"]
    )
    assert cfg.judges["ref"].measures == {"quality": "support"}  # type: ignore[union-attr]
    with pytest.raises(ConfigError, match=r"measures\.quality"):
        _config({"backend": "reference", "measures": {"quality": "bleu"}}, ["quality"])


def test_the_generator_cannot_be_a_reference_judge() -> None:
    with pytest.raises(ConfigError, match="generator"):
        RunConfig.from_dict(
            {
                "corpus": {"path": "x.jsonl"},
                "generator": {"backend": "reference"},
                "judges": {"j": {"backend": "embedded"}},
            }
        )


def test_the_judge_stage_hands_it_items() -> None:
    joined = pa.table(
        {
            schema.QUESTION_ID: ["q1", "q1"],
            schema.SYSTEM: ["full", "zero"],
            schema.ANSWER: [GROUNDED, INVENTED],
            ANSWER_HASH: ["a1", "a2"],
            schema.QUESTION: [QUESTION, QUESTION],
            schema.TEXT: [DOC, DOC],
            DOC_HASH: ["h1", "h1"],
        }
    )
    inputs = judge_inputs(
        joined,
        judge="ref",
        fingerprints={"relevance": "r", "completeness": "c"},
        dimensions=["relevance", "completeness"],
    )
    stage = JudgeStage(
        "ref",
        ReferenceJudgeConfig(),
        rubrics={"relevance": "R", "completeness": "C"},
    )
    out = stage(inputs).to_pylist()
    scores = {(r[schema.SYSTEM], r[schema.DIMENSION]): r[schema.SCORE] for r in out}
    assert scores[("full", "relevance")] > scores[("zero", "relevance")]
    assert scores[("full", "completeness")] > scores[("zero", "completeness")]
    assert {r[schema.JUDGE] for r in out} == {"ref"}


FACT_DOC = DOC + "\n实施机构: 广东省工业和信息化厅\n网上预约: 是"
RIGHT = (
    "由广东省工业和信息化厅受理，需要提交无线电频率使用许可申请表，"
    "20个工作日办结，可以网上预约，咨询电话020-83339999。"
)


def test_facts_measure_scores_a_changed_number_agency_or_permission_lower() -> None:
    judge = _judge({"relevance": "facts", "completeness": "coverage"})
    wrong = {
        "number": RIGHT.replace("20个", "十五个"),
        "agency": RIGHT.replace("工业和信息化厅", "公安厅"),
        "permission": RIGHT.replace("可以网上", "不可以网上"),
        "phone": RIGHT.replace("9999", "9998"),
    }
    items = [
        JudgeItem(FACT_DOC, QUESTION, a, "relevance", rubric="")
        for a in [RIGHT, *wrong.values()]
    ]
    right, *faulted = judge.judge_items(items)
    assert right.score is not None
    assert right.raw is not None
    # k / (n + 1): every one of the right answer's n facts supported.
    n = int(right.raw.split("/")[1].split()[0])
    assert right.score == pytest.approx(10 * n / (n + 1))
    assert right.raw.startswith("facts=")
    assert "unsupported" not in right.raw
    for (what, _), res in zip(wrong.items(), faulted, strict=True):
        assert res.score is not None
        assert res.score <= right.score - 10 / (n + 1) + 1e-9, what
        assert res.raw is not None
        assert "unsupported:" in res.raw, what
    # The n-gram measure hardly sees the changed number (one bigram in many).
    [support_right, support_number] = _judge().judge_items(
        [_item(RIGHT, "relevance"), _item(wrong["number"], "relevance")]
    )
    assert support_right.score is not None
    assert support_number.score is not None
    assert support_right.score - support_number.score < 1


def test_facts_measure_gives_no_credit_without_a_checkable_fact() -> None:
    judge = _judge({"quality": "facts"})
    [res] = judge.judge_items(
        [JudgeItem(FACT_DOC, QUESTION, "请咨询有关部门。", "quality", rubric="")]
    )
    assert res.status == "ok"
    assert res.score == 0.0
    assert res.raw == "facts=0.0000 (0/0 supported)"


def test_facts_is_a_measure_the_config_accepts_and_names() -> None:
    cfg = _config(
        {"backend": "reference", "measures": {"quality": "facts"}}, ["quality"]
    )
    assert cfg.judges["ref"].measures == {"quality": "facts"}  # type: ignore[union-attr]
    with pytest.raises(ConfigError, match="support, coverage, facts"):
        _config({"backend": "reference"}, ["quality"])
