"""Bring your own questions: the intake stages a question file (real NCP policy
questions) into ``questions/`` with the pipeline's one questions schema."""

from __future__ import annotations

import json
from pathlib import Path

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
    driver.documents(driver.stage_documents())  # no Ray needed for the intake

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
    assert driver.n_questions == 5


def test_questions_table_refuses_a_missing_required_column() -> None:
    with pytest.raises(ValueError, match="required column 'question_id'"):
        questions_table({schema.DOC_ID: ["d"], schema.QUESTION: ["q"]})
