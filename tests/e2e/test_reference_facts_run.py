"""``cube-ray run`` with a reference judge whose relevance is the fact check.

A real Ray run on real Guangdong records: a QA-file system answers every
question from its gold document, half of them with the time limit changed. The
reference judge (``measures: {relevance: facts}``) must score each changed
answer a whole fact lower than the right one, name the unsupported number in
the score's raw text, and give the fake generator's bound answers (no fact of
the document) 0.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
import yaml

from cube_ray import schema
from cube_ray.cli import main
from cube_ray.config import RunConfig
from cube_ray.corpus import record_to_document
from cube_ray.facts import check_facts, facts_share
from cube_ray.pipeline import part_files
from tests.pipeline_helpers import SAMPLE, fake_config, make_corpus

N_DOCS = 8


def _read(table_dir: Path) -> pa.Table:
    import pyarrow.parquet as pq

    return pa.concat_tables(
        [pq.read_table(f) for f in part_files(table_dir)], promote_options="default"
    )


def _answers(n: int) -> tuple[list[dict[str, object]], dict[str, str | None]]:
    """QA-file rows (grounded answers, odd ones with a wrong time limit) and
    the wrong number of each (None: right)."""
    rows: list[dict[str, object]] = []
    wrong: dict[str, str | None] = {}
    for i, line in enumerate(SAMPLE.read_text(encoding="utf-8").splitlines()[:n]):
        rec = json.loads(line)
        limit = rec["handle_time"]  # e.g. "30(工作日)"
        days = int(limit.split("(")[0])
        told = f"{days + 7}(工作日)" if i % 2 else limit
        answer = (
            f"“{rec['TASK_NAME']}”由{rec['DEPT_NAME']}负责办理，法定办结时限为{told}。"
        )
        rows.append(
            {
                "question_id": rec["TASK_CODE"],
                "answer": answer,
                "retrieved_doc_ids": [rec["TASK_CODE"]],
            }
        )
        wrong[rec["TASK_CODE"]] = str(days + 7) if i % 2 else None
    return rows, wrong


@pytest.mark.ray
@pytest.mark.timeout(900)
def test_reference_judge_with_facts_scores_a_wrong_time_limit_lower(
    tmp_path: Path,
) -> None:
    corpus, ids = make_corpus(tmp_path, N_DOCS)
    rows, wrong = _answers(N_DOCS)
    assert [r["question_id"] for r in rows] == ids
    qa = tmp_path / "qa.jsonl"
    qa.write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
        encoding="utf-8",
    )
    cfg_path = fake_config(tmp_path, corpus, qa, judges=0)
    cfg = yaml.safe_load(cfg_path.read_text(encoding="utf-8"))
    cfg["judges"] = {
        "reference": {
            "backend": "reference",
            "measures": {"relevance": "facts", "completeness": "coverage"},
        }
    }
    cfg["dimensions"] = [{"name": "relevance"}, {"name": "completeness"}]
    cfg_path.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    run_dir = tmp_path / "run"
    assert main(["run", str(cfg_path), "--out", str(run_dir), "--no-progress"]) == 0

    config = RunConfig.from_yaml(cfg_path)
    records = corpus.read_text(encoding="utf-8").splitlines()
    documents = {
        ids[i]: record_to_document(
            json.loads(line), config.corpus, path=str(corpus), row=i
        ).text
        for i, line in enumerate(records)
    }
    questions = {
        r[schema.QUESTION_ID]: r[schema.QUESTION]
        for r in _read(run_dir / "questions").to_pylist()
    }
    answers = {
        (r[schema.QUESTION_ID], r[schema.SYSTEM]): r[schema.ANSWER]
        for r in _read(run_dir / "answers").to_pylist()
    }
    scores = {
        (r[schema.QUESTION_ID], r[schema.SYSTEM], r[schema.DIMENSION]): r
        for r in _read(run_dir / "scores").to_pylist()
    }
    assert {r[schema.JUDGE] for r in scores.values()} == {"reference"}
    assert len(scores) == N_DOCS * 3 * 2
    rag = {}
    for q in ids:
        row = scores[(q, "rag", "relevance")]
        assert row[schema.STATUS] == "ok"
        # The judge scored exactly the fact check of the run's answer and document.
        facts = check_facts(answers[(q, "rag")], documents[q], question=questions[q])
        assert row[schema.SCORE] == pytest.approx(10 * facts_share(facts))
        unsupported = [f.text for f in facts if not f.supported]
        assert unsupported == ([] if wrong[q] is None else [wrong[q]])
        told = f"unsupported: number '{wrong[q]}'"
        assert (told in row[schema.RAW]) == (wrong[q] is not None)
        rag[q] = row[schema.SCORE]
        # The fake generator's bound answers state no fact of the document.
        for bound in (schema.ZERO, schema.FULL):
            assert scores[(q, bound, "relevance")][schema.SCORE] == 0.0
    right = [rag[q] for q in ids if wrong[q] is None]
    changed = [rag[q] for q in ids if wrong[q] is not None]
    # The same answer shape: every right answer beats every changed one.
    assert min(right) > max(changed)
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    assert "reference" in summary["judges"]
