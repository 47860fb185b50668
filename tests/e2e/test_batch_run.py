"""``batch: true`` through ``cube-ray run``: a Batch API server on 127.0.0.1.

* A run whose generator and judge send through the Batch API sends no direct
  request, and its tables and figures equal the same run's without batch
  (the server answers a batch line as its direct endpoint answers the same
  body); ``--dry-run`` prices the batch engines at half.
* A run killed (SIGKILL, a real ``cube-ray run`` process) while its batch is
  in progress re-attaches on rerun: no file is uploaded and no batch created
  twice. A run stopped by Ctrl-C lists its running batch on the console and
  in the manifest.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import yaml

from cube_ray.engines.openai_http._batch import open_batches
from tests.batch_server import BatchState, serve
from tests.pipeline_helpers import fake_config, make_corpus, make_qa_file

pytestmark = [pytest.mark.ray, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
N_DOCS = 4
KEY = "sk-batch-run-DO-NOT-LEAK-5c3d"
KEY_ENV = "CUBE_RAY_TEST_BATCH_KEY"
DIRECT = ("POST /chat/completions", "POST /completions")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), KEY_ENV: KEY}


def _argv(*args: Any) -> list[str]:
    return [sys.executable, "-m", "cube_ray.cli", *map(str, args)]


def _cube_ray(*args: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _argv(*args), capture_output=True, text=True, env=_env(), timeout=800
    )


def _config(tmp: Path, base_url: str, *, batch: bool, name: str) -> Path:
    corpus, ids = make_corpus(tmp, N_DOCS)
    path = fake_config(tmp, corpus, make_qa_file(tmp, ids), judges=1)
    cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    http: dict[str, Any] = {
        "backend": "openai_http",
        "base_url": base_url,
        "api_key_env": KEY_ENV,
        "max_retries": 0,
        "price_per_mtok": {"prompt": 2.0, "completion": 8.0},
    }
    if batch:
        http["batch"] = True
        http["batch_api"] = {"poll_s": 0.2, "poll_max_s": 0.5}
    cfg["generator"] = {**http, "model": "gen", "sampling": {"max_tokens": 64}}
    cfg["judges"] = {
        "api": {**http, "model": "judge", "logprobs": True, "score_mode": "expected"}
    }
    cfg["prompts"] = {"language": "zh"}
    out = tmp / f"{name}.yaml"
    out.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    return out


def _rows(run: Path, table: str, key: list[str], cols: list[str]) -> list[Any]:
    frame = pl.read_parquet(run / table / "*.parquet")
    return frame.sort(key).select(key + cols).rows()


def _cost(text: str) -> float:
    found = re.search(r"^this run\s.*\s([\d.]+)\s*$", text, re.M)
    assert found is not None, text[-2000:]
    return float(found.group(1))


def test_batch_generator_and_judge_equal_the_direct_run(tmp_path: Path) -> None:
    with serve() as (url, state):
        direct_cfg = _config(tmp_path, url, batch=False, name="direct")
        batch_cfg = _config(tmp_path, url, batch=True, name="batch")
        dry_direct = _cube_ray("run", direct_cfg, "--dry-run")
        dry_batch = _cube_ray("run", batch_cfg, "--dry-run")
        assert dry_batch.returncode == 0, dry_batch.stderr[-3000:]
        assert sum(state.calls.values()) == 0  # a dry run sends nothing
        assert _cost(dry_batch.stdout) == pytest.approx(
            _cost(dry_direct.stdout) / 2, rel=0.02
        )

        direct = tmp_path / "direct-run"
        proc = _cube_ray("run", direct_cfg, "--out", direct, "--no-report")
        assert proc.returncode == 0, proc.stderr[-4000:]
        assert sum(state.calls[d] for d in DIRECT) > 0
        state.calls.clear()

        batched = tmp_path / "batch-run"
        proc = _cube_ray("run", batch_cfg, "--out", batched, "--no-report")
        assert proc.returncode == 0, proc.stderr[-4000:]
    calls = dict(state.calls)
    assert sum(calls.get(d, 0) for d in DIRECT) == 0, calls
    # One file and one batch per stage of a batch engine: questions, the two
    # bounds' answers, the judge's scores.
    assert calls["POST /files"] == calls["POST /batches"] >= 3
    assert state.authorizations <= {f"Bearer {KEY}", None}
    assert "submitted batch batch_1" in proc.stderr
    assert re.search(
        r"scores:api: batch batch_\d+ completed: \d+/\d+ done", proc.stderr
    )

    key = ["question_id", "system", "judge", "dimension"]
    cols = ["score", "status", "prompt_tokens", "completion_tokens"]
    scores = _rows(batched, "scores", key, cols)
    assert scores == _rows(direct, "scores", key, cols)
    # Scored (argmax_fallback: a "1"/"10" split a chat API cannot read).
    assert {r[5] for r in scores} <= {"ok", "argmax_fallback"}
    assert any(r[4] is not None and r[4] != int(r[4]) for r in scores)  # expected
    akey, acols = ["question_id", "system"], ["answer", "status"]
    assert _rows(batched, "answers", akey, acols) == _rows(
        direct, "answers", akey, acols
    )
    figures = [
        json.loads((run / "summary.json").read_text(encoding="utf-8"))
        for run in (direct, batched)
    ]
    assert figures[0]["systems"] == figures[1]["systems"]
    manifest = json.loads((batched / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["status"] == "complete"
    assert manifest["batches"] == {}  # every batch read into the tables
    assert (
        len(list((batched / "batches" / "done").glob("*.json")))
        == calls["POST /batches"]
    )
    for path in batched.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


def _wait_for(pred: Any, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_a_killed_run_reattaches_and_submits_nothing_twice(tmp_path: Path) -> None:
    with serve(BatchState(), held=True) as (url, state):
        cfg = _config(tmp_path, url, batch=True, name="batch")
        run = tmp_path / "run"
        args = _argv("run", cfg, "--out", run, "--no-report")

        # 1. Ctrl-C while the first batch runs: listed on the console and in
        #    the manifest, with its id.
        proc = subprocess.Popen(
            args,
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            _wait_for(lambda: bool(open_batches(run)), 300, "a batch record")
            _wait_for(
                lambda: any(
                    b["status"] == "in_progress" for b in open_batches(run).values()
                ),
                60,
                "the batch in progress",
            )
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        assert proc.returncode != 0
        assert "batch batch_1 (questions, in_progress) is not read yet" in err, err[
            -3000:
        ]
        manifest = json.loads((run / "manifest.json").read_text(encoding="utf-8"))
        assert manifest["status"] == "failed"
        assert manifest["batches"]["batch_1"]["status"] == "in_progress"
        assert manifest["batches"]["batch_1"]["stage"] == "questions"

        # 2. Rerun, then kill -9 (the driver and its Ray) during the wait.
        proc = subprocess.Popen(
            args,
            env=_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            _wait_for(lambda: state.calls["GET /batches/{id}"] >= 4, 300, "polling")
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        assert state.calls["POST /files"] == 1
        assert state.calls["POST /batches"] == 1

        # 3. The provider finishes; the rerun re-attaches and goes on.
        state.hold.set()
        done = _cube_ray("run", cfg, "--out", run, "--no-report")
    assert done.returncode == 0, done.stderr[-4000:]
    assert "re-attaching to batch batch_1" in done.stderr
    assert sum(state.calls.get(d, 0) for d in DIRECT) == 0
    # Each input file uploaded once, each batch created once: one per stage.
    inputs = [b["input_file_id"] for b in state.batches.values()]
    assert len(inputs) == len(set(inputs)) == state.calls["POST /files"]
    assert state.calls["POST /batches"] == len(state.batches)
    scores = pl.read_parquet(run / "scores" / "*.parquet")
    assert set(scores["status"].to_list()) <= {"ok", "argmax_fallback"}
    assert scores["score"].null_count() == 0
    manifest = json.loads((run / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["status"] == "complete"
    assert manifest["batches"] == {}


def test_retry_failed_resubmits_only_the_expired_rows(tmp_path: Path) -> None:
    """An expired batch: its unanswered rows are ``batch_expired``, counted on
    the console; ``--retry-failed`` sends exactly those rows again."""
    corpus, ids = make_corpus(tmp_path, N_DOCS)
    path = fake_config(tmp_path, corpus, make_qa_file(tmp_path, ids), judges=1)
    cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    with serve(BatchState(outcome="expired")) as (url, state):
        cfg["judges"] = {
            "api": {
                "backend": "openai_http",
                "base_url": url,
                "model": "judge",
                "api_key_env": KEY_ENV,
                "max_retries": 0,
                "batch": True,
                "batch_api": {"poll_s": 0.2, "poll_max_s": 0.5},
            }
        }
        path.write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
        run = tmp_path / "run"
        first = _cube_ray("run", path, "--out", run, "--no-report")
        assert first.returncode == 0, first.stderr[-4000:]
        scores = pl.read_parquet(run / "scores" / "*.parquet")
        expired = scores.filter(pl.col("status") == "batch_expired").height
        assert expired == scores.height - scores.height // 2 > 0
        assert f"({scores.height // 2} ok, {expired} batch_expired)" in first.stderr
        assert "--retry-failed" in first.stderr  # the warning names the rerun

        state.outcome = "completed"
        again = _cube_ray("run", path, "--out", run, "--no-report", "--retry-failed")
    assert again.returncode == 0, again.stderr[-4000:]
    assert state.calls["POST /batches"] == 2
    retried = state.files[state.batches["batch_2"]["input_file_id"]].splitlines()
    assert len(retried) == expired  # only the expired rows, each once
    scores = pl.read_parquet(run / "scores" / "*.parquet")
    assert set(scores["status"].to_list()) == {"ok"}
    assert sum(state.calls.get(d, 0) for d in DIRECT) == 0
