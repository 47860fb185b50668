"""Resume: kill -9 the run in the judge stage, rerun, nothing lost, duplicated or
paid for twice; a changed rubric re-runs exactly the rows it affects."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from cube_ray import schema
from cube_ray.pipeline import part_files
from tests.pipeline_helpers import (
    assert_complete,
    fake_config,
    make_corpus,
    make_qa_file,
    read_all,
)

pytestmark = [pytest.mark.ray, pytest.mark.slow]

N_DOCS = 8


def run_cli(
    cfg: Path, run_dir: Path, log: Path, *extra: str
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cube_ray.cli",
            "run",
            str(cfg),
            "--out",
            str(run_dir),
            "--call-log",
            str(log),
            "--no-progress",
            "--no-report",
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # so kill -9 takes the local Ray with it
    )


def calls(log: Path, stage: str) -> set[str]:
    if not log.exists():
        return set()
    return {
        line.split("\t", 1)[1]
        for line in log.read_text().splitlines()
        if line.startswith(stage + "\t")
    }


@pytest.mark.timeout(2400)
def test_kill_9_in_judge_stage_then_resume(tmp_path: Path) -> None:
    corpus, ids = make_corpus(tmp_path, N_DOCS)
    qa = make_qa_file(tmp_path, ids)
    cfg = fake_config(tmp_path, corpus, qa, judge_latency=0.5, judge_batch=4)
    run_dir = tmp_path / "run"
    log1, log2, log3 = (tmp_path / f"calls{i}.log" for i in (1, 2, 3))

    proc = run_cli(cfg, run_dir, log1)
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        if part_files(run_dir / "scores", "scores:j1"):
            break
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        time.sleep(0.2)
    else:
        pytest.fail("the judge stage never wrote a part file")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL

    done = read_all(run_dir / "scores")
    n_scores = 3 * N_DOCS * 4
    assert 0 < done.height < 2 * n_scores, "kill came too late to test anything"
    done_keys = {
        "/".join(r)
        for r in done.select(
            schema.QUESTION_ID, schema.SYSTEM, schema.JUDGE, schema.DIMENSION
        ).iter_rows()
    }
    assert done_keys <= calls(log1, "judge")

    rerun = run_cli(cfg, run_dir, log2)
    _, err = rerun.communicate(timeout=900)
    assert rerun.returncode == 0, err.decode()[-3000:]
    assert_complete(run_dir, N_DOCS, judges=2)
    # Nothing already written was sent to an engine again.
    assert calls(log2, "questions") == set()
    assert calls(log2, "answers") == set()
    assert calls(log2, "judge").isdisjoint(done_keys)
    assert len(calls(log2, "judge")) == 2 * n_scores - len(done_keys)
    # Rows written before the kill are kept as they were.
    final = read_all(run_dir / "scores")
    key = [schema.QUESTION_ID, schema.SYSTEM, schema.JUDGE, schema.DIMENSION]
    before = done.select([*key, schema.SCORE, schema.CONTENT_HASH])
    after = final.join(before, on=key, suffix="_before")
    assert after.height == done.height
    assert (after[schema.CONTENT_HASH] == after[schema.CONTENT_HASH + "_before"]).all()
    summary = run_dir / "summary.json"
    assert summary.is_file()

    # A changed rubric invalidates exactly that dimension's scores.
    text = cfg.read_text(encoding="utf-8") + (
        "dimensions:\n- {name: relevance}\n- {name: specificity}\n"
        "- {name: completeness}\n- {name: quality, rubric: 'Rubric: quality, v2.'}\n"
    )
    cfg.write_text(text, encoding="utf-8")
    # Another rubric is another run: refused, unless asked to update in place.
    refused = run_cli(cfg, run_dir, log3)
    _, err = refused.communicate(timeout=900)
    assert refused.returncode == 2, err.decode()[-3000:]
    assert b"dimensions[3].rubric (null -> " in err
    assert b"--update" in err
    third = run_cli(cfg, run_dir, log3, "--update")
    _, err = third.communicate(timeout=900)
    assert third.returncode == 0, err.decode()[-3000:]
    changed = calls(log3, "judge")
    assert len(changed) == 2 * 3 * N_DOCS
    assert {k.rsplit("/", 1)[1] for k in changed} == {"quality"}
    assert calls(log3, "questions") == calls(log3, "answers") == set()
    assert_complete(run_dir, N_DOCS, judges=2)
    quality = read_all(run_dir / "scores").filter(pl.col(schema.DIMENSION) == "quality")
    assert quality.height == 2 * 3 * N_DOCS
