"""Stages that use one engine share one long-lived pool: it starts once, serves
all of them, and the manifest says so; with ``ray.waves`` a wave's judges
start while the generator still writes later waves, and every row is made
once."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from cube_ray.config import RunConfig
from cube_ray.engines.base import SamplingParams
from cube_ray.engines.config import FakeEngineConfig, PoolConfig
from cube_ray.pipeline import RunOptions, run_pipeline
from cube_ray.pipeline.engine_pool import EnginePools
from cube_ray.pipeline.parts import part_files
from cube_ray.pipeline.runner import WAVE_SEQ
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


@pytest.mark.timeout(300)
def test_concurrent_stages_get_one_pool_and_restarts_count(ray_local: Any) -> None:
    """Stages that overlap (driver threads) ask for one engine at once: one pool.
    A host killed by Ray comes back; the manifest counts that start-up too."""
    import ray

    config = FakeEngineConfig(name="gen", startup_s=0.5, pool=PoolConfig(num_cpus=0.25))
    pools = EnginePools()
    try:
        factories: list[Any] = []
        threads = [
            threading.Thread(
                target=lambda s=stage: factories.append(
                    pools.factory([config], stage=s)
                )
            )
            for stage in ("answers:bounds", "answers:rag", "questions")
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert len(factories) == 3
        [(eid, stats)] = pools.stats().items()  # one pool, not three
        assert sorted(stats["stages"]) == ["answers:bounds", "answers:rag", "questions"]
        assert stats["startups"] == 1

        engine = factories[0](config)
        sampling = SamplingParams(max_tokens=8)
        first = engine.generate(["a prompt"], sampling=sampling)
        dispatcher = pools._pools[eid][0]
        [host] = ray.get(dispatcher.hosts.remote())
        ray.kill(host, no_restart=False)  # Ray restarts it, as after a lost node
        # The kill is asynchronous: on a loaded machine a call can still reach
        # the old host. Call until one is served by the restarted host (at
        # most 60 s); every answer must be the same.
        deadline = time.monotonic() + 60
        while True:
            again = engine.generate(["a prompt"], sampling=sampling)
            assert [g.text for g in again] == [g.text for g in first]
            stats = pools.stats()[eid]
            if stats["startups"] >= 2 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert stats["startups"] == 2, stats
        assert stats["startup_s"] >= 2 * 0.5
        assert stats["calls"] >= 2
    finally:
        pools.close()


@pytest.mark.timeout(900)
def test_waves_start_judges_before_the_bounds_are_done(
    ray_local: Any, tmp_path: Path
) -> None:
    n_docs = 12
    corpus, ids = make_corpus(tmp_path, n_docs)
    qa = make_qa_file(tmp_path, ids)
    cfg = fake_config(tmp_path, corpus, qa, ray_options={"overlap": True, "waves": 3})
    run_dir = tmp_path / "run"
    log = tmp_path / "calls.log"
    run_pipeline(
        RunConfig.from_yaml(cfg),
        RunOptions(run_dir=run_dir, call_log=str(log), progress=False, report=False),
    )

    assert_complete(run_dir, n_docs, judges=2)
    calls = log.read_text().splitlines()
    assert len(calls) == len(set(calls))  # no row sent to an engine twice
    manifest = json.loads((run_dir / "manifest.json").read_text())
    stages = manifest["stages"]
    assert stages["answers:bounds"]["expected_rows"] == 2 * n_docs
    assert stages["answers:bounds"]["rows_written"] == 2 * n_docs
    assert stages["scores:j1"]["rows_written"] == 3 * n_docs * 4
    # Each wave of a stage writes its own part files (sequence w * 10000) ...
    bounds = part_files(run_dir / "answers", "answers:bounds")
    seqs = [re.search(r"-(\d{6})(-[0-9a-f]{16})?\.parquet$", f.name) for f in bounds]
    assert all(seqs), [f.name for f in bounds]
    assert len({int(m.group(1)) // WAVE_SEQ for m in seqs if m}) >= 2
    # ... and the first wave's scores were written before the last wave's
    # answers (of the bounds or the system): judges ran while answers of
    # later waves were still being written.
    first_scores = min(f.stat().st_mtime for f in part_files(run_dir / "scores"))
    last_answers = max(f.stat().st_mtime for f in part_files(run_dir / "answers"))
    assert first_scores < last_answers
