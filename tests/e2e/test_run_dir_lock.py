"""One run per run dir, repaired duplicates, no write through a symlink.

Real ``cube-ray`` processes (local Ray, fake engines): a second ``run`` on a
dir whose run is going is refused with exit 2 naming the first one's pid, and
the dir reruns and aggregates with one row per key; a dir holding duplicate
rows (as two runs at once left them before the lock) is repaired by the next
run, which says how many rows it dropped; ``report`` replaces a symlinked
``report.html`` instead of writing its target, and a ``scores/`` folder that
is a symlink leading outside the run dir is refused (exit 2).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.parquet as pq
import pytest

from cube_ray.pipeline import part_files
from cube_ray.run_lock import LOCK_NAME
from cube_ray.stages import KEYS
from tests.pipeline_helpers import fake_config, make_corpus, make_qa_file

ROOT = Path(__file__).resolve().parents[2]
N_DOCS = 6


def _argv(*args: Any) -> list[str]:
    return [sys.executable, "-m", "cube_ray.cli", *map(str, args)]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def cube_ray(*args: Any, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _argv(*args), capture_output=True, text=True, env=_env(), timeout=timeout
    )


def run_args(cfg: Path, run_dir: Path, log: Path) -> list[Any]:
    return [
        "run", cfg, "--out", run_dir, "--call-log", log, "--no-progress",
        "--no-report",
    ]  # fmt: skip


def calls(log: Path) -> list[str]:
    return log.read_text(encoding="utf-8").splitlines() if log.exists() else []


def duplicated_keys(run_dir: Path) -> dict[str, int]:
    """Rows beyond the first of each key, per table (0 everywhere when clean)."""
    out = {}
    for table, key in KEYS.items():
        files = part_files(run_dir / table)
        if files:
            df = pl.concat([pl.read_parquet(f, columns=list(key)) for f in files])
            out[table] = df.height - df.unique().height
    return out


def rounded(value: Any) -> Any:
    """A JSON value with floats rounded to 9 digits (rows in another order)."""
    if isinstance(value, float):
        return round(value, 9)
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [rounded(v) for v in value]
    return value


def summary_of(run_dir: Path) -> Any:
    data = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    return rounded(data["judges"])


@pytest.mark.timeout(1500)
def test_second_run_is_refused_and_a_duplicated_dir_is_repaired(
    tmp_path: Path,
) -> None:
    corpus, ids = make_corpus(tmp_path, N_DOCS)
    qa = make_qa_file(tmp_path, ids)
    cfg = fake_config(tmp_path, corpus, qa, judge_latency=0.2)
    run_dir = tmp_path / "run"

    # 1. Two runs at once: the second is refused while the first holds the dir.
    first = subprocess.Popen(
        _argv(*run_args(cfg, run_dir, tmp_path / "c1.log")),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:
        deadline = time.monotonic() + 300
        while not (run_dir / LOCK_NAME).exists():
            assert first.poll() is None, first.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the first run never took the lock"
            time.sleep(0.1)
        second = cube_ray(*run_args(cfg, run_dir, tmp_path / "c2.log"))
        assert first.poll() is None, "the first run ended before the second tried"
        _, err = first.communicate(timeout=900)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, err[-3000:]
    assert second.returncode == 2, second.stderr[-3000:]
    assert (
        f"cube-ray: error: run dir {str(run_dir)!r} is in use by another cube-ray "
        f"process: pid {first.pid} on host "
    ) in second.stderr
    assert "Traceback" not in second.stderr
    assert calls(tmp_path / "c2.log") == []
    assert not (run_dir / LOCK_NAME).exists()  # released at the end
    assert set(duplicated_keys(run_dir).values()) == {0}
    reference = summary_of(run_dir)

    # 2. The dir reruns (nothing left to do) and aggregates.
    again = cube_ray(*run_args(cfg, run_dir, tmp_path / "c3.log"))
    assert again.returncode == 0, again.stderr[-3000:]
    assert calls(tmp_path / "c3.log") == []
    aggregated = cube_ray("aggregate", run_dir)
    assert aggregated.returncode == 0, aggregated.stderr[-3000:]
    assert set(duplicated_keys(run_dir).values()) == {0}

    # 3. A dir as two runs at once left it before the lock: every answer and
    #    score part written twice, by a later run stamp.
    copied: dict[str, int] = {}
    for table in ("answers", "scores"):
        for part in part_files(run_dir / table):
            twin = part.with_name(part.name.replace("part-2", "part-3", 1))
            shutil.copyfile(part, twin)
            rows = pq.ParquetFile(twin).metadata.num_rows
            copied[table] = copied.get(table, 0) + rows
    assert duplicated_keys(run_dir) == {"questions": 0, **copied}
    stuck = cube_ray("aggregate", run_dir)
    assert stuck.returncode == 2
    assert "duplicate rows" in stuck.stderr
    assert "rerunning its `cube-ray run CONFIG --out RUN_DIR`" in stuck.stderr
    repaired = cube_ray(*run_args(cfg, run_dir, tmp_path / "c4.log"))
    assert repaired.returncode == 0, repaired.stderr[-3000:]
    said = repaired.stdout + repaired.stderr
    for table, n in copied.items():
        assert (
            f"{table} held {n} duplicate rows (one key written twice, as by two "
            f"runs at once); kept one row per key (the earliest, an ok one first), "
            f"dropped {n}, "
        ) in said
    assert calls(tmp_path / "c4.log") == []  # nothing recomputed
    assert set(duplicated_keys(run_dir).values()) == {0}
    assert cube_ray("aggregate", run_dir).returncode == 0
    assert summary_of(run_dir) == reference

    # 4. report: a symlinked report.html is replaced, its target untouched.
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me", encoding="utf-8")
    (run_dir / "report.html").symlink_to(precious)
    report = cube_ray("report", run_dir)
    assert report.returncode == 0, report.stderr[-3000:]
    assert precious.read_text(encoding="utf-8") == "keep me"
    assert not (run_dir / "report.html").is_symlink()
    assert "<html" in (run_dir / "report.html").read_text(encoding="utf-8")

    # 5. scores/ as a symlink leading outside: refused before any write.
    outside = tmp_path / "outside"
    (run_dir / "scores").rename(outside)
    (run_dir / "scores").symlink_to(outside)
    listing = sorted(p.name for p in outside.iterdir())
    for argv in (
        run_args(cfg, run_dir, tmp_path / "c5.log"),
        ["report", run_dir],
        ["aggregate", run_dir],
    ):
        refused = cube_ray(*argv)
        assert refused.returncode == 2, refused.stderr[-3000:]
        assert (
            f"'scores' is a symlink to {str(outside)!r}, outside the run dir"
        ) in refused.stderr
        assert "Traceback" not in refused.stderr
    assert sorted(p.name for p in outside.iterdir()) == listing
    assert calls(tmp_path / "c5.log") == []
