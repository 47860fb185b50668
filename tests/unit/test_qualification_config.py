"""Config and stage graph of the qualification (CUBE_METHOD.md section 12)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from cube_ray.config import DimensionConfig, QualificationConfig, RunConfig
from cube_ray.pipeline.method import (
    QUALIFICATION,
    QUALIFICATION_SCORES,
    stage_graph,
)
from cube_ray.qualification import KINDS, OWN_MODEL, own_model_flags
from cube_ray.stages import KEYS
from cube_ray.stages.qualify import FaultStage
from tests.pipeline_helpers import fake_config, make_corpus, make_qa_file


def _config(tmp_path: Path, **extra: object) -> RunConfig:
    corpus, ids = make_corpus(tmp_path, 4)
    path = fake_config(tmp_path, corpus, make_qa_file(tmp_path, ids), extra=extra)
    return RunConfig.from_yaml(path)


def test_off_by_default_and_defaults(tmp_path: Path) -> None:
    assert _config(tmp_path).qualification is None
    q = QualificationConfig()
    assert (q.questions, tuple(q.kinds), q.seed, q.min_drop) == (50, KINDS, 0, 0.5)


@pytest.mark.parametrize(
    ("bad", "needle"),
    [
        ({"questions": 0}, "questions"),
        ({"kinds": []}, "kinds"),
        ({"kinds": ["number", "number"]}, "more than once"),
        ({"kinds": ["typo"]}, "kinds"),
        ({"min_drop": -1}, "min_drop"),
        ({"sample": 5}, "sample"),  # strict: unknown keys are errors
    ],
)
def test_strict_validation(bad: dict[str, object], needle: str) -> None:
    with pytest.raises(ValidationError, match=needle):
        QualificationConfig.model_validate(bad)


def test_detects_defaults_and_override() -> None:
    expected = {
        d: DimensionConfig(name=d).expected_faults()
        for d in ("relevance", "completeness", "specificity", "quality", "style")
    }
    assert expected == {
        "relevance": ["number", "entity", "negation", "unsupported"],
        "completeness": ["omission"],
        "specificity": ["omission"],
        "quality": [],
        "style": [],
    }
    dim = DimensionConfig(name="quality", detects=["negation"])
    assert dim.expected_faults() == ["negation"]
    with pytest.raises(ValidationError):
        DimensionConfig(name="quality", detects=["typo"])  # type: ignore[list-item]


def test_stage_graph_adds_a_fault_stage_and_a_judge_stage_per_judge(
    tmp_path: Path,
) -> None:
    plain = stage_graph(_config(tmp_path))
    config = _config(tmp_path, qualification={"questions": 3, "kinds": ["number"]})
    specs = stage_graph(config)
    added = specs[len(plain) :]
    assert [s.label for s in specs[: len(plain)]] == [s.label for s in plain]
    assert [s.label for s in added] == [
        QUALIFICATION,
        f"{QUALIFICATION}:j1",
        f"{QUALIFICATION}:j2",
    ]
    fault = added[0]
    assert fault.stage_cls is FaultStage
    assert fault.after == ("answers:bounds",)
    assert fault.engines == ()
    assert fault.inputs.by_wave is False
    assert fault.key == KEYS[QUALIFICATION] == ("question_id", "kind")
    by_label = {s.label: s for s in plain}
    for judge in ("j1", "j2"):
        spec = next(s for s in added if s.label == f"{QUALIFICATION}:{judge}")
        assert spec.table == QUALIFICATION_SCORES
        assert spec.after == (QUALIFICATION,)
        # The same engine, template, rubrics and fingerprints as the judge's stage.
        scores = by_label[f"scores:{judge}"]
        assert spec.engines == scores.engines
        assert spec.stage_kwargs == scores.stage_kwargs
        assert (
            spec.inputs.kwargs["fingerprints"] == scores.inputs.kwargs["fingerprints"]
        )


def test_a_systems_model_is_not_part_of_its_answers_fingerprint(
    tmp_path: Path,
) -> None:
    base = _config(tmp_path)
    raw = base.model_dump(mode="json")
    raw["systems"][0]["model"] = "qwen2.5-7b-instruct"
    with_model = RunConfig.model_validate(raw)
    assert with_model.systems[0].model == "qwen2.5-7b-instruct"

    def fp(config: RunConfig) -> str:
        spec = next(s for s in stage_graph(config) if s.label == "answers:rag")
        return str(spec.inputs.kwargs["fingerprint"])

    assert fp(base) == fp(with_model)


def test_own_model_flags_from_a_real_config(tmp_path: Path) -> None:
    corpus, ids = make_corpus(tmp_path, 4)
    path = fake_config(tmp_path, corpus, make_qa_file(tmp_path, ids))
    cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    http = {"backend": "openai_http", "base_url": "http://127.0.0.1:9/v1"}
    cfg["generator"] = {**http, "model": "Qwen2.5-7B-Instruct"}
    cfg["judges"] = {
        "self": {**http, "model": "qwen2.5-7b-instruct"},
        "other": {**http, "model": "glm-4-9b-chat"},
    }
    cfg["systems"][0]["model"] = "/models/glm-4-9b-chat"
    config = RunConfig.model_validate(cfg)
    flags = own_model_flags(
        config.judges, config.generator, {s.name: s.model for s in config.systems}
    )
    assert {(f["flag"], f["judge"], f["system"]) for f in flags} == {
        (OWN_MODEL, "self", "generator"),
        (OWN_MODEL, "other", "rag"),
    }


def test_a_larger_sample_keeps_every_fault_already_built() -> None:
    """Donors do not depend on the sample size: faults (and their hashes) stay."""
    import pyarrow as pa

    from cube_ray import schema
    from cube_ray.corpus import stable_hash
    from cube_ray.qualification import compose_answer, seeded_sample
    from cube_ray.stages.inputs import DOC_HASH
    from cube_ray.stages.qualify import SAMPLED, fault_inputs
    from tests.qualification_data import guangdong_documents

    docs = {d.doc_id: d for d in guangdong_documents()}
    order = seeded_sample(((d, d) for d in docs), size=len(docs), seed=0)
    donors = order[:50]

    def source(size: int) -> pa.Table:
        sampled = order[:size]
        ids = sampled + donors
        flags = [True] * size + [False] * len(donors)
        return pa.table(
            {
                schema.QUESTION_ID: ids,
                schema.DOC_ID: ids,
                schema.ANSWER: [
                    compose_answer(docs[d]) if f else None
                    for d, f in zip(ids, flags, strict=True)
                ],
                schema.TEXT: [docs[d].text for d in ids],
                DOC_HASH: [stable_hash(docs[d].text) for d in ids],
                SAMPLED: flags,
            }
        )

    def rows(size: int) -> dict[tuple[str, str], dict[str, object]]:
        out = fault_inputs(source(size), kinds=KINDS, seed=0, fingerprint="f")
        return {(r["question_id"], r["kind"]): r for r in out.to_pylist()}

    small, large = rows(10), rows(60)
    # A row per fault and one per its control.
    assert len(small) == 10 * 2 * len(KINDS)
    assert len(large) == 60 * 2 * len(KINDS)
    assert all(large[key] == row for key, row in small.items())
