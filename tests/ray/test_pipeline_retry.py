"""A stage survives a lost Ray worker or node; an interrupted changed-config run
is compacted on the next run even when no row is left to do.

Both failures are injected on the driver where Ray would surface them (the
stream of written part files' descriptions), so the tests are deterministic;
the real node loss is exercised in ``test_pipeline_cluster.py``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from cube_ray import pipeline, schema
from cube_ray.config import RunConfig
from cube_ray.pipeline import RunOptions, data, part_files, run_pipeline
from cube_ray.pipeline.runner import StageRunner
from tests.pipeline_helpers import (
    assert_complete,
    fake_config,
    make_corpus,
    make_qa_file,
    read_all,
)

pytestmark = [pytest.mark.ray, pytest.mark.slow]

N_DOCS = 6
SCORE_KEY = [schema.QUESTION_ID, schema.SYSTEM, schema.JUDGE, schema.DIMENSION]


def _calls(log: Path, stage: str) -> list[str]:
    if not log.exists():
        return []
    return [
        line.split("\t", 1)[1]
        for line in log.read_text().splitlines()
        if line.startswith(stage + "\t")
    ]


class _FailOnce:
    """Patches the driver so that stage ``label`` fails after its first block."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, label: str, error: Exception):
        self.label = label
        self.error = error
        # Per driver thread: stages may run side by side (ray.overlap).
        self.current = threading.local()
        self.fired = 0
        real_once = StageRunner._run_stage_once
        real_blocks = data._blocks

        def run_once(runner: Any, spec: Any, **kwargs: Any) -> None:
            self.current.label = spec.label
            try:
                real_once(runner, spec, **kwargs)
            finally:
                self.current.label = None

        def blocks(ds: Any) -> Iterator[Any]:
            current = getattr(self.current, "label", None)
            armed = current == self.label and not self.fired
            for i, block in enumerate(real_blocks(ds)):
                if armed and i == 1:
                    self.fired += 1
                    raise self.error
                yield block

        monkeypatch.setattr(StageRunner, "_run_stage_once", run_once)
        monkeypatch.setattr(data, "_blocks", blocks)


def _lost_actor() -> Exception:
    import ray.data.exceptions
    import ray.exceptions

    try:
        raise ray.data.exceptions.SystemException() from ray.exceptions.ActorDiedError()
    except ray.data.exceptions.SystemException as exc:
        return exc


def test_infra_failure_is_recognised_through_ray_data_wrapping() -> None:
    import ray.exceptions

    assert pipeline._is_infra_failure(_lost_actor())
    assert "ActorDiedError" in pipeline._infra_reason(_lost_actor())
    assert not pipeline._is_infra_failure(ValueError("bad row"))
    # An actor whose constructor raised (bad model path) would fail again.
    init_failed = ray.exceptions.ActorDiedError()
    init_failed._actor_init_failed = True
    assert not pipeline._is_infra_failure(init_failed)
    wrapper = RuntimeError("wrapper")
    wrapper.__cause__ = ray.exceptions.NodeDiedError("n1")
    assert pipeline._is_infra_failure(wrapper)


@pytest.mark.timeout(900)
def test_lost_actor_mid_judge_stage_is_retried(
    ray_local: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus, ids = make_corpus(tmp_path, N_DOCS)
    qa = make_qa_file(tmp_path, ids)
    # No node dies with the injected error: waiting for one is cut short.
    cfg = fake_config(
        tmp_path, corpus, qa, judge_batch=4, ray_options={"node_loss_wait_s": 1}
    )
    run_dir = tmp_path / "run"
    log = tmp_path / "calls.log"
    fault = _FailOnce(monkeypatch, "scores:j1", _lost_actor())

    result = run_pipeline(
        RunConfig.from_yaml(cfg),
        RunOptions(run_dir=run_dir, call_log=str(log), progress=False, report=False),
    )

    assert fault.fired == 1
    assert_complete(run_dir, N_DOCS, judges=2)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    stage = manifest["stages"]["scores:j1"]
    assert len(stage["retries"]) == 1
    assert "ActorDiedError" in stage["retries"][0]
    assert stage["rows_written"] == 3 * N_DOCS * 4
    assert manifest["stages"]["scores:j2"]["retries"] == []
    # The first block was written before the failure and not scored again.
    j1 = [c for c in _calls(log, "judge") if c.split("/")[2] == "j1"]
    first_part = sorted(part_files(run_dir / "scores", "scores:j1"))[0]
    first_keys = {
        "/".join(r) for r in pl.read_parquet(first_part).select(SCORE_KEY).iter_rows()
    }
    assert first_keys, "the stage wrote nothing before the injected failure"
    assert all(j1.count(k) == 1 for k in first_keys)
    assert set(j1) == {
        "/".join(r)
        for r in read_all(run_dir / "scores")
        .filter(pl.col(schema.JUDGE) == "j1")
        .select(SCORE_KEY)
        .iter_rows()
    }
    assert result.summary_path is not None
    assert result.summary_path.is_file()


@pytest.mark.timeout(900)
def test_interrupted_changed_config_run_is_compacted_on_resume(
    ray_local: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus, ids = make_corpus(tmp_path, N_DOCS)
    qa = make_qa_file(tmp_path, ids)
    cfg = fake_config(tmp_path, corpus, qa, judge_batch=4)
    run_dir = tmp_path / "run"
    opts = RunOptions(run_dir=run_dir, progress=False, report=False)
    run_pipeline(RunConfig.from_yaml(cfg), opts)

    # A changed rubric makes every quality score stale; the run that redoes
    # them is interrupted after its first written block.
    cfg.write_text(
        cfg.read_text(encoding="utf-8")
        + "dimensions:\n- {name: relevance}\n- {name: specificity}\n"
        "- {name: completeness}\n- {name: quality, rubric: 'Rubric: quality, v2.'}\n",
        encoding="utf-8",
    )
    opts = RunOptions(run_dir=run_dir, progress=False, report=False, update=True)
    scores = run_dir / "scores"
    before = {p.name for p in part_files(scores, "scores:j1")}
    with monkeypatch.context() as m:
        fault = _FailOnce(m, "scores:j1", RuntimeError("interrupted"))
        # A code error is not retried; the rows received before it are kept.
        with pytest.raises(RuntimeError, match="interrupted"):
            run_pipeline(RunConfig.from_yaml(cfg), opts)
    assert fault.fired == 1
    new_parts = [p for p in part_files(scores, "scores:j1") if p.name not in before]
    assert new_parts, "the interrupted run kept none of its finished rows"
    assert any(p.name.startswith(".compact-pending-") for p in scores.iterdir())

    run_pipeline(RunConfig.from_yaml(cfg), opts)
    assert_complete(run_dir, N_DOCS, judges=2)
    assert not any(p.name.startswith(".compact-pending-") for p in scores.iterdir())
    # Exactly one quality score per key survives (the new rubric's).
    quality = read_all(scores).filter(pl.col(schema.DIMENSION) == "quality")
    assert quality.height == 2 * 3 * N_DOCS
