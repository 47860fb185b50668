"""Bring your own questions: the intake stages a question file (real NCP policy
questions) into ``questions/`` with the pipeline's one questions schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cube_ray import pipeline, schema
from cube_ray.config import RunConfig
from cube_ray.pipeline import RunOptions, part_files
from cube_ray.stages import QUESTIONS_OUT_SCHEMA, questions_table
from tests.pipeline_helpers import (
    fake_config,
    make_qa_file,
    ncp_config_sections,
    ncp_subset,
)


def test_question_file_is_staged_with_the_full_questions_schema(
    tmp_path: Path,
) -> None:
    corpus, questions = ncp_subset(tmp_path, 5)
    picked = [json.loads(x) for x in questions.read_text(encoding="utf-8").splitlines()]
    cfg = fake_config(
        tmp_path,
        corpus,
        make_qa_file(tmp_path, [q["query_id"] for q in picked]),
        extra=ncp_config_sections(corpus, questions),
    )
    options = RunOptions(run_dir=tmp_path / "run", progress=False, report=False)
    driver = pipeline._Driver(RunConfig.from_yaml(cfg), options)
    driver.intake.documents(driver.intake.stage_documents())  # no Ray needed

    files = part_files(tmp_path / "run" / "questions")
    assert files
    table = pa.concat_tables(pq.read_table(f) for f in files)
    # Exactly the schema the question generator writes (resume, the answer
    # and judge stages and the summary read one schema, whoever wrote it).
    assert table.schema.remove_metadata() == QUESTIONS_OUT_SCHEMA
    rows = table.to_pylist()
    assert [r[schema.QUESTION_ID] for r in rows] == [q["query_id"] for q in picked]
    assert [r[schema.DOC_ID] for r in rows] == [q["gold_doc_id"] for q in picked]
    assert [r[schema.QUESTION] for r in rows] == [q["question"] for q in picked]
    assert [r[schema.REFERENCE_ANSWER] for r in rows] == [q["answer"] for q in picked]
    assert {r[schema.GENERATOR] for r in rows} == {"file"}
    assert {r[schema.STATUS] for r in rows} == {schema.STATUS_OK}
    # Nobody generated these questions: no latency, no token counts.
    for col in (schema.LATENCY_S, schema.PROMPT_TOKENS, schema.COMPLETION_TOKENS):
        assert table.column(col).null_count == len(rows)
    assert driver.state.n_questions == 5


def test_questions_table_refuses_a_missing_required_column() -> None:
    with pytest.raises(ValueError, match="required column 'question_id'"):
        questions_table({schema.DOC_ID: ["d"], schema.QUESTION: ["q"]})


def _driver(
    tmp_path: Path, limit: int | None
) -> tuple[pipeline._Driver, list[dict[str, Any]]]:
    corpus, questions = ncp_subset(tmp_path, 5)
    picked = [json.loads(x) for x in questions.read_text(encoding="utf-8").splitlines()]
    cfg = fake_config(
        tmp_path,
        corpus,
        make_qa_file(tmp_path, [q["query_id"] for q in picked]),
        extra=ncp_config_sections(corpus, questions),
    )
    options = RunOptions(
        run_dir=tmp_path / "run", progress=False, report=False, limit=limit
    )
    return pipeline._Driver(RunConfig.from_yaml(cfg), options), picked


def test_limit_keeps_the_questions_about_the_first_documents(tmp_path: Path) -> None:
    driver, picked = _driver(tmp_path, 2)
    staged = driver.intake.stage_documents()
    first = sorted(q["gold_doc_id"] for q in picked)[:2]  # the corpus is sorted
    assert staged[2] is not None
    assert sorted(staged[2].column(schema.DOC_ID).to_pylist()) == first
    driver.intake.documents(staged)
    assert driver.state.n_questions == 2


def test_limit_with_no_question_on_the_first_documents_is_one_error(
    tmp_path: Path,
) -> None:
    from cube_ray.errors import InputError

    driver, picked = _driver(tmp_path, 1)
    # Only questions about documents past the first remain in the file.
    first = sorted(q["gold_doc_id"] for q in picked)[0]
    path = tmp_path / "ncp_queries.jsonl"
    keep = [q for q in picked if q["gold_doc_id"] != first]
    path.write_text(
        "".join(json.dumps(q, ensure_ascii=False) + "\n" for q in keep),
        encoding="utf-8",
    )
    with pytest.raises(InputError, match="first 1 corpus documents") as err:
        driver.intake.stage_documents()
    assert f"file {path}" in str(err.value)
    assert "field 'gold_doc_id'" in str(err.value)
    assert not (tmp_path / "run").exists()


def test_shipped_ncp_config_reads_the_ncp_files() -> None:
    from tests.pipeline_helpers import NCP, ROOT

    cfg = RunConfig.from_yaml(ROOT / "conf" / "ncp.yaml")
    assert cfg.questions.source == "file"
    assert cfg.questions.question_id_field == "query_id"
    assert cfg.questions.doc_id_field == "gold_doc_id"
    assert Path(cfg.corpus.path).resolve() == (NCP / "corpus.jsonl").resolve()
    assert cfg.questions.path is not None
    assert Path(cfg.questions.path).resolve() == (NCP / "queries.jsonl").resolve()
