"""Stages that use one engine share one long-lived pool: it starts once, serves
all of them, and the manifest says so."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cube_ray.config import RunConfig
from cube_ray.pipeline import RunOptions, run_pipeline
from tests.pipeline_helpers import (
    assert_complete,
    fake_config,
    make_corpus,
    make_qa_file,
)

pytestmark = [pytest.mark.ray, pytest.mark.slow]

N_DOCS = 5


@pytest.mark.timeout(900)
def test_one_pool_per_distinct_engine(ray_local: Any, tmp_path: Path) -> None:
    corpus, ids = make_corpus(tmp_path, N_DOCS)
    qa = make_qa_file(tmp_path, ids)
    judge = {
        "backend": "fake",
        "name": "shared",
        "latency_s": 0.05,
        "startup_s": 0.3,
        "pool": {"batch_size": 4, "num_cpus": 0.5},
    }
    # One model read two ways: the same engine, two judges.
    judges = {
        "argmax": {**judge, "score_mode": "argmax"},
        "expected": {**judge, "score_mode": "expected"},
    }
    cfg = fake_config(tmp_path, corpus, qa, extra={"judges": judges})
    run_dir = tmp_path / "run"
    run_pipeline(
        RunConfig.from_yaml(cfg),
        RunOptions(run_dir=run_dir, progress=False, report=False),
    )

    assert_complete(run_dir, N_DOCS, judges=2)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    engines = manifest["engines"]
    assert len(engines) == 2, engines  # the generator and the shared judge
    by_stage = {s: e for e in engines.values() for s in e["stages"]}
    assert set(by_stage) == {
        "questions",
        "answers:bounds",
        "scores:argmax",
        "scores:expected",
    }
    shared = by_stage["scores:argmax"]
    assert shared is by_stage["scores:expected"]
    assert shared["startups"] == 1
    assert shared["startup_s"] >= 0.3
    # 3 answers x 4 dimensions per record, 4 rows a call, 0.05 s a call.
    assert shared["calls"] >= 2 * 3 * N_DOCS * 4 // 4
    assert shared["busy_s"] >= 0.05 * shared["calls"] * 0.9
    gen = by_stage["questions"]
    assert gen is by_stage["answers:bounds"]
    assert gen["startups"] == 1
    assert manifest["wall_s"] > 0
    stages = manifest["stages"]
    assert stages["scores:argmax"]["rows_written"] == 3 * N_DOCS * 4
    assert stages["scores:expected"]["rows_written"] == 3 * N_DOCS * 4
