"""``cube-ray run`` against hostile servers on 127.0.0.1: an HTTP judge and an
HTTP RAG service whose replies overflow, nest, trickle, swell and echo the key.
The run completes with a summary; every reply is one row with its status; the
key is in no file. And a run that crashes leaves its manifest ``failed``."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from cube_ray.cli import main
from cube_ray.pipeline import part_files
from tests.hostile_server import hostile_server
from tests.pipeline_helpers import fake_config, make_corpus, make_qa_file

pytestmark = [pytest.mark.ray, pytest.mark.slow]

N_DOCS = 8
KEY_ENV = "CUBE_RAY_HOSTILE_RUN_KEY"
KEY = "sk-run-" + "Hh4t" * 7
# The RAG service answers each of the 8 questions once (no retries), in turn.
SYSTEM_CYCLE = ["ok", "ok", "drip", "huge", "nested", "badutf8", "gzip", "echo"]
SYSTEM_WANT = {
    "ok": 2,
    "timeout": 1,
    "response_too_large": 1,
    "invalid_json": 3,
    "http_500": 1,
}
# The judge's replies, in turn: most are hostile.
JUDGE_CYCLE = ["ok", "inf", "big", "nested", "ok", "huge", "echo", "nan", "shape2"]


def _rows(table_dir: Path) -> list[dict[str, Any]]:
    return [r for f in part_files(table_dir) for r in pq.read_table(f).to_pylist()]


@pytest.mark.timeout(900)
def test_run_against_hostile_servers_completes_with_a_status_per_row(
    tmp_path: Path,
) -> None:
    corpus, ids = make_corpus(tmp_path, N_DOCS)
    cfg_path = fake_config(tmp_path, corpus, make_qa_file(tmp_path, ids), judges=1)
    cfg = yaml.safe_load(cfg_path.read_text(encoding="utf-8"))
    with (
        hostile_server(SYSTEM_CYCLE) as rag,
        hostile_server(JUDGE_CYCLE) as judge,
    ):
        cfg["systems"] = [
            {
                "name": "rag",
                "kind": "http",
                "url": rag.url + "/v1/answer",
                "timeout_s": 3,
                "max_retries": 0,
            }
        ]
        cfg["judges"]["hostile"] = {
            "backend": "openai_http",
            "base_url": judge.url + "/v1",
            "model": "hostile",
            "api_key_env": KEY_ENV,
            "logprobs": True,
            "score_mode": "expected",
            "timeout_s": 3,
            "max_retries": 0,
            "parse_retries": 0,
            "pool": {"batch_size": 16, "num_cpus": 0.5},
        }
        cfg["env_vars"] = [KEY_ENV]
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
            env={**os.environ, KEY_ENV: KEY},
            timeout=850,
            check=False,
        )
        # The preflight's one probe request per openai_http engine comes first
        # (issue 29) and gets the cycle's first reply, "ok"; the rest are the
        # judge stage's.
        judge_hits = Counter(judge.hits) - Counter({JUDGE_CYCLE[0]: 1})
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "Traceback" not in proc.stderr
    assert (run_dir / "summary.json").is_file()
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["status"] == "complete"

    answers = _rows(run_dir / "answers")
    rag_status = Counter(a["status"] for a in answers if a["system"] == "rag")
    assert rag_status == SYSTEM_WANT

    scores = _rows(run_dir / "scores")
    hostile = [s for s in scores if s["judge"] == "hostile"]
    answered = sum(a["status"] == "ok" for a in answers)
    assert len(hostile) == len(answers) * 4  # every row is there
    assert answered == 2 * N_DOCS + 2
    status = Counter(s["status"] for s in hostile)
    # Each judge reply got the status of its kind, row by row.
    assert status["ok"] == judge_hits["ok"]
    assert status["no_logprobs"] == (
        judge_hits["inf"] + judge_hits["big"] + judge_hits["nan"] + judge_hits["shape2"]
    )
    assert status["malformed_response"] == judge_hits["nested"]
    assert status["response_too_large"] == judge_hits["huge"]
    assert status["http_error"] == judge_hits["echo"]
    assert status["no_answer"] == (len(answers) - answered) * 4
    for s in scores:
        if s["status"] == "ok":
            assert s["score"] is not None, s
            assert math.isfinite(s["score"]), s
            assert 0.0 <= s["score"] <= 10.0
        else:
            assert s["score"] is None or s["status"] == "argmax_fallback", s
    # The key went out only in the header: no file of the run holds it.
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    assert "hostile" in summary["judges"]


@pytest.mark.timeout(600)
def test_a_crash_after_the_manifest_leaves_it_failed_with_the_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus, ids = make_corpus(tmp_path, 3)
    cfg = fake_config(tmp_path, corpus, make_qa_file(tmp_path, ids), judges=1)
    run_dir = tmp_path / "run"
    import cube_ray.pipeline.run as run_mod

    def crash(*args: Any, **kwargs: Any) -> None:
        raise KeyError("latency_s")  # a bare KeyError's text is only the key

    monkeypatch.setattr(run_mod, "_summarize_beside_driver", crash)
    code = main(["run", str(cfg), "--out", str(run_dir), "--no-progress"])
    capsys.readouterr()
    assert code != 0
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["status"] == "failed"
    assert manifest["error"] == "KeyError: 'latency_s'"
    assert manifest["stopped"]
    assert not (run_dir / "summary.json").exists()


@pytest.mark.timeout(600)
def test_sigterm_during_a_run_leaves_the_manifest_failed(tmp_path: Path) -> None:
    """``ray job stop`` sends SIGTERM to the driver: the run unwinds (Ray shut
    down, engines closed) and says so in its manifest, exit code 143."""
    import signal
    import time

    corpus, ids = make_corpus(tmp_path, 8)
    cfg = fake_config(
        tmp_path,
        corpus,
        make_qa_file(tmp_path, ids),
        judges=1,
        judge_latency=3.0,  # a slow judge stage: time to stop it midway
        judge_batch=2,
    )
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cube_ray.cli",
            "run",
            str(cfg),
            "--out",
            str(run_dir),
            "--no-progress",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 400
        # Wait until the judge stage has written something: mid-run.
        while not part_files(run_dir / "scores"):
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline
            time.sleep(0.5)
        manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
        assert manifest["status"] == "running"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 143, err[-3000:]
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["status"] == "failed"
    assert manifest["error"] == "Terminated: terminated by SIGTERM"
    assert not (run_dir / "summary.json").exists()
